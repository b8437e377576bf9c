"""The implementation class ("stack") a job runs on: an explicit assumption of the throughput
model, named in the plan's table and JSON (`--stack`).

- "eager": plain PyTorch as most Hugging Face users train (Trainer-style): no torch.compile,
  no fused kernels, torch.optim.AdamW's default (foreach) step, Hugging Face's modelling code,
  whose MoE blocks loop over their experts in Python. The default. Calibrated on real runs of
  that stack: the `stack = "eager"` rows of catalog/data/llm_throughput.toml
  (benchmarks/data/h200_eager_2026-12-04.jsonl).
- "optimised": compiled or fused kernels (flash attention, fused optimizers, grouped expert
  GEMMs, FSDP), as in the published NVIDIA Deep Learning Examples, MosaicML llm-foundry and
  torchtitan runs the optimised calibration uses (gpus.toml [[measurement]],
  llm_throughput.toml [[llm]]).

Each class is calibrated on its own measurements: transformer jobs have a workload per class
("transformer" optimised, "transformer-eager"), so an eager e_max per chip comes from eager
runs only and transfers to other GPUs like the optimised one. Convolutional nets keep one
calibration (the published CNN runs; no eager CNN run is recorded yet).

Beyond utilisation, what the eager stack adds per micro-batch, each modelled from its code:
- the optimizer step: foreach AdamW makes several passes (`FOREACH_STEP_FACTOR`);
- attention with dropout (BERT, GPT-2: attention-probability dropout 0.1) runs at
  `EAGER_DROPOUT_ATTENTION_RATE` of the matmul rate instead of ATTENTION_RATE;
- MoE experts looped in Python: host-bound ops with two host-device syncs per expert
  (`moe_loop_seconds`).
Quantised base weights (QLoRA) cost dequantisation in every stack (`dequant_seconds`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.catalog import Gpu
    from orchestrator.sizing.architectures import Architecture
    from orchestrator.sizing.job import JobSpec

STACKS = ("eager", "optimised")
DEFAULT_STACK = "eager"
STACK_TEXT = {
    "eager": "eager PyTorch (HF Trainer-style: no compile, foreach AdamW)",
    "optimised": "optimised (compiled/fused kernels, as in NVIDIA's and MosaicML's runs)",
}

# torch.optim.AdamW's default foreach step (torch/optim/adamw.py, _multi_tensor_adamw, PyTorch
# 2.x; capturable=False): weight decay `mul_` (read, write the parameter), `lerp_` of the first
# moment (read moment and gradient, write moment), `mul_` + `addcmul_` of the second (2 + 4
# accesses), `sqrt` into a temporary, `div_` and `add_` (eps) on it (2 + 2 + 2), and `addcdiv_`
# into the parameter (read parameter, moment, temporary; write parameter): 21 element
# accesses per parameter against a fused step's 7 (2 x parameter + gradient + 2 x 2 states),
# so 3x the fused step's bytes in the state dtype.
FOREACH_STEP_FACTOR = 3.0

# Attention with dropout, eager stack: the two H200 eager rows with attention dropout (BERT-large,
# GPT-2 medium, p = 0.1) run at 13-14 % MFU where dropout-free rows of the same width (ViT-large,
# Qwen2.5-0.5B) reach 27-30 %; their unexplained time scales with the attention area
# (batch x heads x seq^2, causal halved), so it is modelled as attention's rate. Fitted on those
# rows (benchmarks/throughput_accuracy.py refits it without the held-out row in each round);
# the mechanism (SDPA's kernel choice with dropout, the dropout mask) is not isolated.
EAGER_DROPOUT_ATTENTION_RATE = 0.06

# Hugging Face's eager MoE block (transformers 5 `Qwen3MoeExperts.forward`, Qwen2-MoE and Mixtral
# alike): for every expert hit, `expert_idx == num_experts` and `torch.where(expert_mask[e])`
# (two host-device syncs), index the tokens, index the expert's weights, linear, chunk,
# activation, multiply, linear, index the routing weights, multiply, cast, `index_add_`: 14 ops
# forward; their backward about 18 more; checkpointing replays the forward. The syncs drain
# the GPU queue, so each op's host cost (HOST_OP_SECONDS, eager dispatch) is not hidden.
# A model from the code, not yet calibrated on a measured eager MoE run (the prepared case is
# in benchmarks/gpu/run_cases.sh).
MOE_FORWARD_OPS = 14
MOE_BACKWARD_OPS = 18

# Dequantising quantised base weights (bitsandbytes Linear4bit / Linear8bitLt under PEFT): each
# use of a frozen weight (forward, the input gradient in backward, the checkpointed recompute)
# dequantises it to the compute dtype first, a cost per micro-batch that does not grow with its
# tokens, modelled as bytes of memory traffic per quantised weight per use at the GPU's
# bandwidth (the raw NF4 read and 16-bit write are 2.5 B; the kernels run well below that).
#
# NF4 (`4bit`): LitGPT's resource tables (LITGPT_RESOURCE_TABLES: LitGPT commit 8641822,
# NVIDIA A100-SXM4-40GB at 1,555 GB/s, PyTorch 2.1.0, bitsandbytes 0.41.1, read 2026-12-05;
# finetune/lora.py at micro-batch 1 without checkpointing, so 2 uses per micro-batch; LitGPT
# quantises every Linear, lm_head included) give minutes per 1,000 micro-batches of LoRA on
# bf16 weights and on bnb.nf4-dq weights: Llama 2 7B 2.36 -> 3.83, Llama 2 13B 3.19 -> 6.55,
# i.e. 88 and 202 ms more per micro-batch: 10.4 and 12.2 B per weight per use
# (`nf4_bytes_per_use`); DEQUANT_BYTES["4bit"] is their mean. The same tables' StableLM-Alpha
# 3B and phi-1.5 rows give 8.6 and 8.8 B (their weights are not in orch's catalog, so not
# used). bitsandbytes' later dequantisation kernel (PR #1747, 2025: 1.36-2.07x faster on
# A100/H100 in its author's tests) is not assumed: the figure errs slow.
# LLM.int8 (`8bit`): no published training time for LLM.int8 base weights was found; it keeps
# the earlier prior, Qwen's single-A100-80GB profile of GPTQ 4-bit Q-LoRA against LoRA
# (QWEN_QLORA_SOURCE, commit 03cd81f5, read 2026-12-04: Qwen-7B 0.19 s and Qwen-14B 0.45 s
# more per micro-batch, 20 and 24 B per weight per use at 2,039 GB/s; mean 22).
LITGPT_RESOURCE_TABLES = (
    "https://github.com/Lightning-AI/litgpt/blob/4839345a97a0a90bc5f2361664b04d665c9a0e89/"
    "tutorials/resource-tables.md"
)
# (model, quantised weights incl. lm_head, minutes per 1k micro-batches: bf16, bnb.nf4-dq)
LITGPT_NF4_RUNS = (
    ("llama-2-7b", 6_476_005_376 + 32_000 * 4096, 2.36, 3.83),
    ("llama-2-13b", 12_687_769_600 + 32_000 * 5120, 3.19, 6.55),
)
A100_40GB_BANDWIDTH = 1555e9  # bytes/s (gpus.toml, NVIDIA's A100 datasheet)


def nf4_bytes_per_use(weights: float, plain_min: float, nf4_min: float) -> float:
    """Bytes of bandwidth-equivalent per weight per use of one LitGPT row (2 uses)."""
    extra_s = (nf4_min - plain_min) * 60 / 1000
    return extra_s * A100_40GB_BANDWIDTH / (2 * weights)


DEQUANT_BYTES = {
    "4bit": sum(nf4_bytes_per_use(*row[1:]) for row in LITGPT_NF4_RUNS) / len(LITGPT_NF4_RUNS),
    "8bit": 22.0,
}
QWEN_QLORA_SOURCE = (
    "https://github.com/QwenLM/Qwen/blob/03cd81f5e4da6ab60fc8f97f3b8aa1206fdb08a9/README.md"
)


def workload_for(base: str, stack: str) -> str:
    """The calibration workload of a job: transformers are calibrated per stack."""
    return "transformer-eager" if base == "transformer" and stack == "eager" else base


def attention_dropout(arch: Architecture) -> bool:
    return any(st.attn_dropout > 0 for st in arch.stacks)


def moe_loop_seconds(arch: Architecture, job: JobSpec, host_op: float) -> float:
    """Host time of the eager expert loop per micro-batch (0 without MoE layers)."""
    ops = MOE_FORWARD_OPS * (2 if job.grad_checkpointing else 1) + MOE_BACKWARD_OPS
    tokens = job.batch * job.seq
    total = 0.0
    for st in arch.stacks:
        if st.moe is None:
            continue
        hit = min(st.moe.experts, tokens * st.moe.top_k)  # experts that receive a token
        total += st.moe.layers * hit * ops * host_op
    return total


def quantised_weights(arch: Architecture) -> float:
    """Weights of the linear layers a QLoRA setup quantises (every nn.Linear of the layers;
    embeddings and the output head stay in 16 bits): attention and MLP, every expert."""
    total = 0.0
    for st in arch.stacks:
        h, q, kv = st.hidden, st.q_width, st.kv_width
        attention = h * q + 2 * h * kv + q * h
        if st.moe is None:
            total += st.layers * (attention + st.mlp_weights)
            continue
        m = st.moe  # experts are gated MLPs (gate, up, down), as in `Stack.mlp_weights`
        sparse = 3 * h * (m.experts * m.intermediate + m.shared_intermediate)
        dense = (3 if st.gated else 2) * h * st.intermediate
        total += st.layers * attention + m.layers * sparse + (st.layers - m.layers) * dense
    return total


def dequant_seconds(arch: Architecture, job: JobSpec, gpu: Gpu) -> float:
    """Dequantisation time per micro-batch of quantised base weights (0 without --quantize)."""
    mode = getattr(job, "quantize", None)
    if not mode:
        return 0.0
    uses = 3 if job.grad_checkpointing else 2  # forward, input gradient, recompute
    traffic = quantised_weights(arch) * DEQUANT_BYTES[mode] * uses
    return traffic / (gpu.memory_bandwidth_gbps * 1e9)


def extra_seconds(arch: Architecture, job: JobSpec, gpu: Gpu, stack: str, host_op: float) -> float:
    """What a micro-batch costs beyond its FLOPs and its optimizer step, on this stack."""
    extra = dequant_seconds(arch, job, gpu)
    if stack == "eager":
        extra += moe_loop_seconds(arch, job, host_op)
    return extra
