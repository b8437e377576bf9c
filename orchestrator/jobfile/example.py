"""The commented job file `orch init` writes: every section, the common keys set, the rest
shown commented out. tests/unit/test_jobfile.py checks that it validates and plans."""

EXAMPLE = """\
# orch.yaml: this training job, declared once for `orch plan`, `orch up` and `orch run`.
# Flags on the command line override it (`orch run --spot`); `-f FILE` picks another file.
# Schema: docs/orch.schema.json. Durations: 30s, 10m, 2h, 1d.
version: 1

# The model: a catalog name (`orch catalog models`), or hf_config: / params_m:.
model: bert-large
# hf_config: config.json          # a Hugging Face config (relative to this file)
# params_m: 350                   # only a parameter count: a rougher estimate

# The job's shape and length (`orch plan --help` explains each).
job:
  batch: 8                        # micro-batch per GPU
  seq: 512
  precision: amp-bf16             # fp32 | amp-fp16 | amp-bf16 | bf16
  optimizer: adamw
  epochs: 3
  dataset_size: 120000            # samples; or samples: N for the whole job
  # grad_checkpointing: true
  # lora_rank: 16
  # zero: 3

# Where it may run, and what it may cost.
resources:
  cloud: any                      # aws | aliyun | any
  # region: us-east-1
  # gpus: 1                       # only boxes with exactly this many GPUs
  spot: false                     # also consider spot capacity
  # max_price: 2.0                # USD per hour, the whole box
  # spot_bid: 0.60                # spot: the most to pay per hour
  # deadline: 6h                  # the job must finish within this

# The box: its lifetime and who may reach it.
box:
  ttl: 12h                        # it destroys itself then; `none`: never (not advised)
  # name: exp1
  # ssh_cidr: [203.0.113.7/32]    # default: this machine's address
  # state: s3://my-bucket/orch    # Terraform state in S3 (CI)
  # tags: {team: nlp}

# What `orch run` does on the box.
run:
  setup: pip install -r requirements.txt
  command: python train.py --epochs 3   # or a list: [python, train.py, --epochs, "3"]
  # env: [WANDB_API_KEY]          # names only: values come from your environment at run time
  exclude: [data/, "*.ckpt"]      # besides .gitignore and .git
  fetch: [outputs]                # copied back when the job ends

# Checkpoints and spot recovery (orch run).
# checkpoint:
#   dir: ckpt
#   store: s3://my-bucket/ckpt
#   interval: 5m
# recovery:
#   spot: 3                       # replace a reclaimed spot box up to 3 times
#   fallback_on_demand: true

# Or run on a box leased from a warm pool (`orch pool create`): then `orch run` uses it.
# pool:
#   name: gpu
#   store: s3://my-bucket/pools
#   wait: 10m
"""
