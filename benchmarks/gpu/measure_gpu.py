"""One training job on a real GPU: peak memory (torch allocator and NVML) and step time.

usage: measure_gpu.py CONFIG.json BATCH SEQ_OR_IMAGE PRECISION ATTENTION GC LORA [TARGET_SEQ]
                      [--quantize 4bit|8bit] [--steps N]

The method of the H200 runs in benchmarks/data/ (2026-12-04, see its README), extended with
quantised base weights as a QLoRA user gets them from transformers + bitsandbytes + peft: every
nn.Linear but lm_head becomes bitsandbytes Linear4bit (NF4, double quantisation, bf16 compute)
or Linear8bitLt (LLM.int8, threshold 6.0), then peft's prepare_model_for_kbit_training (non-
quantised weights to fp32, input grads for checkpointing) and LoRA on q_proj/v_proj; the step
runs under bf16 autocast. With --quantize the NVML peak and the allocator peaks are reset after
the model is built, as a shard-by-shard quantised load never holds the bf16 model whole. Prints
one JSON line.
"""

import argparse
import json
import threading
import time

ap = argparse.ArgumentParser()
for name in ("config", "batch", "seq", "precision", "attention", "gc", "lora"):
    ap.add_argument(name)
ap.add_argument("target", nargs="?", type=int)
ap.add_argument("--quantize", choices=("4bit", "8bit"))
ap.add_argument("--steps", type=int, default=8)
a = ap.parse_args()
cfg_path, precision, attention = a.config, a.precision, a.attention
batch, seq, gc, lora, target = int(a.batch), int(a.seq), a.gc == "1", int(a.lora), a.target

import pynvml  # noqa: E402

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
base_used = pynvml.nvmlDeviceGetMemoryInfo(h).used
peak = {"used": base_used}
stop = False


def poll() -> None:
    while not stop:
        u = pynvml.nvmlDeviceGetMemoryInfo(h).used
        if u > peak["used"]:
            peak["used"] = u
        time.sleep(0.002)


threading.Thread(target=poll, daemon=True).start()

import torch  # noqa: E402

torch.cuda.init()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
time.sleep(0.05)
ctx = pynvml.nvmlDeviceGetMemoryInfo(h).used - base_used - torch.cuda.memory_reserved()
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
)

with open(cfg_path) as f:
    d = json.load(f)
arch = d["architectures"][0]
cfg = AutoConfig.for_model(
    d.pop("model_type"), **{k: v for k, v in d.items() if k not in ("transformers_version",)}
)
kw = {}
if attention in ("sdpa", "eager") and "ResNet" not in arch:
    kw["attn_implementation"] = attention
auto = (
    AutoModelForCausalLM
    if "CausalLM" in arch or "LMHead" in arch
    else AutoModelForMaskedLM
    if "MaskedLM" in arch
    else AutoModelForSeq2SeqLM
    if "ConditionalGeneration" in arch
    else AutoModelForImageClassification
)
dtype = torch.bfloat16 if precision == "bf16" or a.quantize else torch.float32
torch.manual_seed(0)
with torch.device("cuda"):
    model = auto.from_config(cfg, dtype=dtype, **kw)


def quantize(model: torch.nn.Module, mode: str) -> None:
    import bitsandbytes as bnb

    for parent in list(model.modules()):
        for cname, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear) or cname == "lm_head":
                continue
            bias = child.bias is not None
            if mode == "4bit":
                new = bnb.nn.Linear4bit(
                    child.in_features,
                    child.out_features,
                    bias=bias,
                    compute_dtype=torch.bfloat16,
                    compress_statistics=True,
                    quant_type="nf4",
                    device="meta",
                )
                w = bnb.nn.Params4bit(
                    child.weight.data,
                    requires_grad=False,
                    compress_statistics=True,
                    quant_type="nf4",
                ).to("cuda")
            else:
                new = bnb.nn.Linear8bitLt(
                    child.in_features,
                    child.out_features,
                    bias=bias,
                    has_fp16_weights=False,
                    threshold=6.0,
                    device="meta",
                )
                w = bnb.nn.Int8Params(
                    child.weight.data.cpu(), requires_grad=False, has_fp16_weights=False
                ).to("cuda")
            new.weight = w
            if bias:
                new.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            setattr(parent, cname, new)
            del child
    torch.cuda.empty_cache()


if a.quantize:
    quantize(model, a.quantize)
    from peft import prepare_model_for_kbit_training

    setattr(model, f"is_loaded_in_{a.quantize}", True)
    model = prepare_model_for_kbit_training(
        model,
        use_gradient_checkpointing=gc,
        gradient_checkpointing_kwargs={"use_reentrant": False},
    )
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    time.sleep(0.05)
    peak["used"] = pynvml.nvmlDeviceGetMemoryInfo(h).used
    torch.cuda.reset_peak_memory_stats()
model.train()
if gc and not a.quantize:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
if lora:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        model,
        LoraConfig(
            r=lora, lora_alpha=2 * lora, target_modules=["q_proj", "v_proj"], lora_dropout=0.0
        ),
    )
params = sum(p.numel() for p in model.parameters())
trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
vocab = getattr(cfg, "vocab_size", None)


def inputs() -> dict:
    if auto is AutoModelForImageClassification:
        return dict(
            pixel_values=torch.randn(batch, 3, seq, seq, device="cuda", dtype=dtype),
            labels=torch.randint(0, 1000, (batch,), device="cuda"),
        )
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    if auto is AutoModelForSeq2SeqLM:
        return dict(
            input_ids=ids, labels=torch.randint(0, vocab, (batch, target or seq), device="cuda")
        )
    return dict(input_ids=ids, labels=ids.clone())


amp = precision.startswith("amp-")
adt = torch.bfloat16 if precision == "amp-bf16" else torch.float16


def step() -> torch.Tensor:
    with torch.autocast("cuda", dtype=adt, enabled=amp):
        loss = model(**inputs()).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


times: list[float] = []
err = None
try:
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
except torch.OutOfMemoryError:
    err = "OOM"
time.sleep(0.05)
stop = True
time.sleep(0.01)
st = torch.cuda.memory_stats()
tm = sorted(times[3:]) if len(times) > 3 else times
print(
    json.dumps(
        dict(
            config=cfg_path.split("/")[-1][:-5],
            batch=batch,
            seq=seq,
            target=target,
            precision=precision,
            attention=attention,
            gc=gc,
            lora=lora,
            quantize=a.quantize,
            params=params,
            trainable=trainable,
            error=err,
            max_allocated=torch.cuda.max_memory_allocated(),
            max_reserved=torch.cuda.max_memory_reserved(),
            nvml_peak_minus_base=peak["used"] - base_used,
            context=ctx,
            alloc_retries=st.get("num_alloc_retries"),
            steps=len(times),
            step_s=tm[len(tm) // 2] if tm else None,
            samples_per_s=(batch / tm[len(tm) // 2]) if tm else None,
            torch=torch.__version__,
            transformers=transformers.__version__,
            gpu=torch.cuda.get_device_name(0),
            bitsandbytes=__import__("bitsandbytes").__version__ if a.quantize else None,
            date=time.strftime("%Y-%m-%d", time.gmtime()),
        )
    ),
    flush=True,
)
