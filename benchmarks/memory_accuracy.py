"""Accuracy of the memory estimator against PyTorch, on models built from configs (CPU).

For each config (tests/fixtures/hf_configs, scaled down in depth where needed so a CPU run
stays small; widths and vocabularies stay real) this builds the `transformers` model with
random weights (nothing is downloaded) and measures, in fp32 with eager attention:

- parameters: sum of numel over model.parameters(), for the full-size config (meta device)
  and for the scaled one;
- activations: bytes autograd saves for backward, caught with
  torch.autograd.graph.saved_tensors_hooks, counting each storage once (by data_ptr) and
  leaving out parameters;
- gradients and AdamW state bytes after one optimizer step (models under 200M parameters).

and prints them beside `orchestrator.sizing.memory` and two rules of thumb: the seed's
"activations = batch x seq x params x 4 B" and "training needs 4 x the model size".

PyTorch's CPU dropout keeps a float mask (the CUDA kernel keeps a bool one), so the estimator
is asked with mask_bytes=4 here.

Needs the `accuracy` extra: pip install torch==2.13.0 transformers (see docs/accuracy.md).
Usage: HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/memory_accuracy.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "tests" / "fixtures" / "hf_configs"
OPTIMIZER_STEP_LIMIT = 200_000_000  # parameters; above this only the forward is measured

from orchestrator.sizing.architectures import from_hf_config  # noqa: E402
from orchestrator.sizing.job import JobSpec  # noqa: E402
from orchestrator.sizing.memory import activation_bytes, estimate_memory  # noqa: E402


@dataclass
class Case:
    label: str
    fixture: str
    batch: int = 2
    seq: int = 128
    target_seq: int | None = None
    image_size: int | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    lora_rank: int | None = None  # freeze the model, add adapters on q and v


LAYER_KEYS = (
    "num_hidden_layers",
    "n_layer",
    "n_layers",
    "num_layers",
    "num_decoder_layers",
    "encoder_layers",
    "decoder_layers",
)


def layers(n: int, vocab: int | None = None) -> dict[str, Any]:
    return {"__layers__": n, **({"vocab_size": vocab} if vocab else {})}


def full_config(name: str) -> dict[str, Any]:
    """A fixture's config.json, or the config of a catalog model of that name."""
    path = FIXTURES / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    from orchestrator.catalog.loader import find_model

    return copy.deepcopy(dict(find_model(name).config))


CASES = [
    Case("bert-large (4 of 24 layers)", "bert-large-uncased", overrides=layers(4)),
    Case("roberta-base (2 of 12)", "roberta-base", overrides=layers(2)),
    Case("distilbert-base (2 of 6)", "distilbert-base-uncased", overrides=layers(2)),
    Case("albert-base-v2 (12, shared)", "albert-base-v2"),
    Case(
        "albert-base-v2 (2 layers, dropout 0.1)",
        "albert-base-v2",
        overrides={**layers(2), "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
    ),
    Case("electra-small disc. (12)", "electra-small-discriminator"),
    Case("deberta-v3-base (2 of 12)", "deberta-v3-base", overrides=layers(2)),
    Case("gpt2 (2 of 12)", "gpt2", overrides=layers(2)),
    Case("opt-125m (2 of 12)", "opt-125m", overrides=layers(2)),
    Case("pythia-160m (2 of 12)", "pythia-160m", overrides=layers(2)),
    Case("llama-2-7b (1 of 32)", "llama-2-7b", batch=1, overrides=layers(1)),
    Case("mistral-7b GQA (1 of 32)", "mistral-7b", batch=1, overrides=layers(1)),
    Case(
        "qwen2-7b GQA (1 of 28, vocab 32000)",
        "qwen2-7b",
        batch=1,
        overrides={**layers(1), "vocab_size": 32000},
    ),
    Case("t5-small (6+6)", "t5-small", seq=128, target_seq=64),
    Case("vit-base/16 (2 of 12)", "vit-base-patch16-224", image_size=224, overrides=layers(2)),
    Case("resnet-50", "resnet-50", batch=2, image_size=224),
    # Families added for issue 10 (configs from the catalog, orchestrator/catalog/data/models.toml;
    # depth cut, and vocabularies over 64k cut to 32000, to fit a 24 GiB / 2-core machine).
    Case("gemma-7b (1 of 28, vocab 32000)", "gemma-7b", batch=1, overrides=layers(1, 32000)),
    Case("gemma-2-9b (1 of 42, vocab 32000)", "gemma-2-9b", batch=1, overrides=layers(1, 32000)),
    Case("gemma-3-1b (2 of 26, vocab 32000)", "gemma-3-1b", overrides=layers(2, 32000)),
    Case("phi-3-mini (1 of 32)", "phi-3-mini-4k", batch=1, overrides=layers(1)),
    Case("qwen3-8b (1 of 36, vocab 32000)", "qwen3-8b", batch=1, overrides=layers(1, 32000)),
    Case("olmo-2-7b (1 of 32, vocab 32000)", "olmo-2-7b", batch=1, overrides=layers(1, 32000)),
    Case("falcon-7b MQA (1 of 32)", "falcon-7b", batch=1, overrides=layers(1)),
    Case("bloom-560m ALiBi (2 of 24, vocab 32000)", "bloom-560m", overrides=layers(2, 32000)),
    Case(
        "mixtral-8x7b (1 of 32, MLP 3584)",
        "mixtral-8x7b",
        batch=1,
        overrides={**layers(1), "intermediate_size": 3584},
    ),
    Case(
        "qwen1.5-moe-a2.7b (2 of 24, vocab 32000)",
        "qwen1.5-moe-a2.7b",
        batch=1,
        overrides=layers(2, 32000),
    ),
    Case(
        "qwen3-30b-a3b (1 of 48, 32 of 128 experts, vocab 32000)",
        "qwen3-30b-a3b",
        batch=1,
        overrides={**layers(1, 32000), "num_experts": 32},
    ),
    Case(
        "deepseek-v2-lite MLA+MoE (2 of 27: 1 dense + 1 MoE, vocab 32000)",
        "deepseek-v2-lite",
        batch=1,
        overrides=layers(2, 32000),
    ),
    Case(
        "deepseek-v3 (2 of 61: 1 dense + 1 MoE; hidden 2048, 16 of 256 experts, top-4)",
        "deepseek-v3",
        batch=1,
        overrides={
            **layers(2, 32000),
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "first_k_dense_replace": 1,
            "n_routed_experts": 16,
            "n_group": 4,
            "topk_group": 2,
            "num_experts_per_tok": 4,
        },
    ),
    Case(
        "xlm-roberta-large (2 of 24, vocab 32000)", "xlm-roberta-large", overrides=layers(2, 32000)
    ),
    Case("modernbert-base (3 of 22)", "modernbert-base", overrides=layers(3)),
    Case("bart-large (2+2 of 12+12)", "bart-large", target_seq=64, overrides=layers(2)),
    Case(
        "mbart-large-50 pre-LN (2+2, vocab 32000)",
        "mbart-large-50",
        target_seq=64,
        overrides=layers(2, 32000),
    ),
    Case(
        "whisper-small (2+2 of 12+12, 300 of 1500 frames)",
        "whisper-small",
        seq=64,
        target_seq=64,
        overrides={**layers(2), "max_source_positions": 300},
    ),
    Case(
        "convnext-base (depths 1-1-3-1 of 3-3-27-3)",
        "convnext-base",
        image_size=224,
        overrides={"depths": [1, 1, 3, 1]},
    ),
    Case(
        "clip-vit-base-patch32 (2+2 of 12+12)", "clip-vit-base-patch32", seq=77, overrides=layers(2)
    ),
    Case(
        "siglip-base-patch16-224 (2+2 of 12+12)",
        "siglip-base-patch16-224",
        seq=64,
        overrides=layers(2),
    ),
    Case(
        "swin-base (depths 2-2-2-2 of 2-2-18-2)",
        "swin-base",
        image_size=224,
        overrides={"depths": [2, 2, 2, 2]},
    ),
    Case("bert-large LoRA r=8 (4 layers)", "bert-large-uncased", overrides=layers(4), lora_rank=8),
    Case("gpt2 LoRA r=8 (4 layers)", "gpt2", overrides=layers(4), lora_rank=8),
    Case("llama-2-7b LoRA r=8 (2 layers)", "llama-2-7b", batch=1, overrides=layers(2), lora_rank=8),
]

# PEFT's default LoRA target modules for these families (query and value projections).
LORA_TARGETS = ("query", "value", "c_attn", "q_proj", "v_proj")


def load_config(case: Case) -> dict[str, Any]:
    config = full_config(case.fixture)
    for key, value in case.overrides.items():
        if key == "__layers__":
            for part in (config, config.get("text_config"), config.get("vision_config")):
                for layer_key in LAYER_KEYS:
                    if isinstance(part, dict) and layer_key in part:
                        part[layer_key] = value
        else:
            config[key] = value
    for token in ("pad_token_id", "bos_token_id", "eos_token_id"):
        # A cut vocabulary must still hold the special tokens' ids (padding_idx is checked).
        if isinstance(config.get(token), int) and config[token] >= config.get("vocab_size", 1e9):
            config[token] = 0
    return config


def build(config: dict[str, Any], device: str | None = None):
    import torch
    import transformers

    config = dict(config)
    model_type = config.pop("model_type")
    arch_name = (config.get("architectures") or ["DebertaV2ForMaskedLM"])[0]
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    hf_config._attn_implementation = "eager"
    model_class = getattr(transformers, arch_name)
    if device == "meta":
        with torch.device("meta"):
            return model_class(hf_config)
    return model_class(hf_config)


def add_lora(model, rank: int) -> None:
    """Freeze the model and wrap its q/v projections as PEFT does: base(x) + B(A(x))."""
    import torch

    class LoRA(torch.nn.Module):
        def __init__(self, base: torch.nn.Module):
            super().__init__()
            self.base = base
            if isinstance(base, torch.nn.Linear):
                fan_in, fan_out = base.in_features, base.out_features
            else:  # GPT-2's Conv1D keeps its weight as (in, out)
                fan_in, fan_out = base.weight.shape
            self.lora_A = torch.nn.Linear(fan_in, rank, bias=False)
            self.lora_B = torch.nn.Linear(rank, fan_out, bias=False)

        def forward(self, x):
            return self.base(x) + self.lora_B(self.lora_A(x))

    for param in model.parameters():
        param.requires_grad_(False)
    targets = [
        (parent, child)
        for parent in model.modules()
        for child, _ in parent.named_children()
        if child in LORA_TARGETS
    ]
    for parent, child in targets:
        setattr(parent, child, LoRA(getattr(parent, child)))


def inputs_for(config: dict[str, Any], case: Case):
    import torch

    b, s = case.batch, case.seq
    kind = config["model_type"]
    vocab = config.get("vocab_size", 1000)
    if kind in ("vit", "resnet", "convnext", "swin"):
        size = case.image_size or 224
        return {
            "pixel_values": torch.randn(b, config.get("num_channels", 3), size, size),
            "labels": torch.randint(0, 1000, (b,)),
        }
    ids = torch.randint(5, min(vocab, 30000), (b, s))
    if kind in ("clip", "siglip"):  # image-text pairs; the model returns its contrastive loss
        text = config["text_config"]
        size = config["vision_config"].get("image_size", 224)
        return {
            "input_ids": torch.randint(5, min(text.get("vocab_size", 1000), 30000), (b, s)),
            "pixel_values": torch.randn(b, 3, size, size),
            "return_loss": True,
        }
    if kind == "whisper":  # log-mel frames: twice the encoder positions (conv2 has stride 2)
        frames = 2 * config.get("max_source_positions", 1500)
        return {
            "input_features": torch.randn(b, config.get("num_mel_bins", 80), frames),
            "labels": torch.randint(5, min(vocab, 30000), (b, case.target_seq or s)),
        }
    if kind in ("t5", "bart", "mbart"):
        target = torch.randint(5, min(vocab, 30000), (b, case.target_seq or s))
        return {"input_ids": ids, "labels": target}
    if config.get("architectures", [""])[0] == "ElectraForPreTraining":
        return {"input_ids": ids, "labels": torch.randint(0, 2, (b, s))}
    labels = torch.randint(5, min(vocab, 30000), (b, s))
    return {"input_ids": ids, "labels": labels}


def measure(case: Case) -> dict[str, Any]:
    import torch

    config = load_config(case)
    full = full_config(case.fixture)
    full_model = build(full, "meta")
    full_params = sum(p.numel() for p in full_model.parameters())
    del full_model

    torch.manual_seed(0)
    model = build(config)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    if case.lora_rank:
        add_lora(model, case.lora_rank)
    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        if ptr and ptr not in param_ptrs and ptr not in saved:
            saved[ptr] = storage.nbytes()
        return tensor

    inputs = inputs_for(config, case)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(**inputs).loss
    result: dict[str, Any] = {
        "full_params": full_params,
        "params": params,
        "activations": sum(saved.values()),
    }
    if params <= OPTIMIZER_STEP_LIMIT:
        loss.backward()
        grads = {
            p.grad.untyped_storage().data_ptr(): p.grad.untyped_storage().nbytes()
            for p in model.parameters()
            if p.grad is not None
        }
        result["gradients"] = sum(grads.values())
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=1e-4)
        optimizer.step()
        states = {}
        for state in optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value):
                    states[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
        result["optimizer"] = sum(states.values())
        del optimizer
    else:  # only the forward was needed; the backward frees its graph, which otherwise kept
        loss.backward()  # each case's weights alive (1.8 GB for llama-2-7b; 2026-12-06)
    del model, loss, inputs
    gc.collect()
    return result


def estimate(case: Case) -> dict[str, Any]:
    config = load_config(case)
    full = full_config(case.fixture)
    arch = from_hf_config(config, case.fixture)
    job = JobSpec(
        hf_config=str(FIXTURES / f"{case.fixture}.json"),
        batch=case.batch,
        seq=case.seq,
        target_seq=case.target_seq,
        image_size=case.image_size,
        precision="fp32",
        optimizer="adamw",
        attention="eager",
        lora_rank=case.lora_rank,
    )
    memory = estimate_memory(arch, job)
    seq = case.seq
    if arch.kind == "vit":
        seq = arch.vision_tokens(case.image_size or arch.image_size)
    elif arch.kind == "cnn":
        seq = 1
    return {
        "full_params": from_hf_config(full, case.fixture).parameters,
        "params": arch.parameters,
        "activations": activation_bytes(arch, job, mask_bytes=4),
        "gradients": memory.gradients_bytes,
        "optimizer": memory.optimizer_bytes,
        "seed_rule": case.batch * seq * arch.parameters * 4,
        "tokens": case.batch * seq,
    }


def pct(ours: float, measured: float) -> str:
    return f"{(ours - measured) / measured * 100:+.2f}%" if measured else "-"


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="fixture names or label parts to run")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        import transformers
    except ImportError:
        print("needs torch and transformers (the `accuracy` extra); see docs/accuracy.md")
        return 2
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    cases = [
        c
        for c in CASES
        if not args.only or c.fixture in args.only or any(o in c.label for o in args.only)
    ]
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, fp32, eager")
    header = (
        "| config | batch x seq | params (full) | ours | err | params (run) | "
        "activations MiB measured | ours | err | seed rule | err | "
        "grads+AdamW MiB measured | ours | err | total MiB measured | ours | 4x model size |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    worst_params = worst_act = 0.0
    for case in cases:
        started = time.perf_counter()
        got = measure(case)
        est = estimate(case)
        shape = (
            f"{case.batch}x{case.image_size}px"
            if case.image_size
            else (f"{case.batch}x{case.seq}" + (f"->{case.target_seq}" if case.target_seq else ""))
        )
        states_measured = got.get("gradients", 0) + got.get("optimizer", 0)
        states_ours = est["gradients"] + est["optimizer"]
        has_states = "gradients" in got
        total_measured = got["params"] * 4 + states_measured + got["activations"]
        total_ours = est["params"] * 4 + states_ours + est["activations"]
        worst_params = max(worst_params, abs(est["full_params"] / got["full_params"] - 1))
        worst_act = max(worst_act, abs(est["activations"] / got["activations"] - 1))
        print(
            f"| {case.label} | {shape} | {got['full_params']:,} | {est['full_params']:,} | "
            f"{pct(est['full_params'], got['full_params'])} | {got['params']:,} | "
            f"{mib(got['activations'])} | {mib(est['activations'])} | "
            f"{pct(est['activations'], got['activations'])} | {mib(est['seed_rule'])} | "
            f"{pct(est['seed_rule'], got['activations'])} | "
            + (
                f"{mib(states_measured)} | {mib(states_ours)} | "
                f"{pct(states_ours, states_measured)} | {mib(total_measured)} | "
                f"{mib(total_ours)} | {mib(16 * got['params'])} |"
                if has_states
                else "- | - | - | - | - | - |"
            ),
            flush=True,
        )
        print(f"  ({time.perf_counter() - started:.1f}s)", file=sys.stderr, flush=True)
    llama = from_hf_config(json.loads((FIXTURES / "llama-2-7b.json").read_text()))
    job = JobSpec(batch=8, seq=4096, zero=3, gpus=8)
    started = time.perf_counter()
    for _ in range(1000):
        estimate_memory(llama, job)
    per_call = (time.perf_counter() - started) / 1000
    print(f"\nestimate_memory: {per_call * 1e6:.0f} us per call (llama-2-7b)")
    print(
        f"worst parameter error {worst_params * 100:.2f}% (target 1%), "
        f"worst activation error {worst_act * 100:.1f}% (target 10%)"
    )
    return 0 if worst_params <= 0.01 and worst_act <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
