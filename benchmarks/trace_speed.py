"""The traced activation model (sizing/trace/): how long a trace takes and how it compares
with the analytic model.

1. Speed on full-size configs (meta device, no real memory): Llama-3-70B, Mixtral-8x7B and
   Llama-2-7B, in a fresh interpreter each (import of torch and transformers included, as a
   first `orch estimate --trace` pays it), then again in the same process (cached imports).
2. Trace vs analytic activations on the families where the analytic model is exact, at
   the job defaults (amp-bf16, SDPA) and in fp32 with eager attention.

Needs the `trace` extra: pip install 'orch[trace]'.
Usage: .venv/bin/python benchmarks/trace_speed.py [--seq 4096] [--batch 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "tests" / "fixtures" / "hf_configs"

# Published config.json values (meta-llama/Meta-Llama-3-70B, mistralai/Mixtral-8x7B-v0.1).
BIG = {
    "llama-3-70b": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "num_hidden_layers": 80,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    },
    "mixtral-8x7b": {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1e6,
        "hidden_act": "silu",
        "router_aux_loss_coef": 0.02,
        "tie_word_embeddings": False,
    },
}
EXACT = [  # (fixture, layers kept) for the analytic model's exact families
    ("bert-large-uncased", 4),
    ("gpt2", 2),
    ("llama-2-7b", 1),
    ("mistral-7b", 1),
    ("qwen2-7b", 1),
    ("opt-125m", 2),
    ("pythia-160m", 2),
]
CHILD = """
import json, sys, time
started = time.perf_counter()
sys.path.insert(0, {root!r})
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.trace import trace_config, trace_key
config = json.loads({config!r})
job = JobSpec(batch={batch}, seq={seq}, precision={precision!r})
first = trace_config(json.dumps(config, sort_keys=True), trace_key(job))
cold = time.perf_counter() - started
trace_config.cache_clear()
again = time.perf_counter()
trace_config(json.dumps(config, sort_keys=True), trace_key(job))
print(json.dumps({{"cold": cold, "warm": time.perf_counter() - again,
    "activations": first.activation_bytes, "parameters": first.parameters,
    "casts": first.weight_cast_bytes, "tensors": first.saved_tensors}}))
"""


def speed(batch: int, seq: int) -> None:
    print(f"## Trace time, full-size configs (batch {batch}, seq {seq}, SDPA)\n")
    print(
        "| config | precision | parameters | activations GiB | weight casts GiB | "
        "saved tensors | fresh process s | warm s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    configs = {**BIG, "llama-2-7b": json.loads((FIXTURES / "llama-2-7b.json").read_text())}
    for name, config in configs.items():
        for precision in ("amp-bf16", "bf16"):
            code = CHILD.format(
                root=str(ROOT),
                config=json.dumps(config),
                batch=batch,
                seq=seq,
                precision=precision,
            )
            out = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(
                f"| {name} | {precision} | {r['parameters'] / 1e9:.2f}B | "
                f"{r['activations'] / 2**30:.2f} | {r['casts'] / 2**30:.1f} | {r['tensors']:,} | "
                f"{r['cold']:.1f} | {r['warm']:.1f} |",
                flush=True,
            )


def agreement() -> float:
    from orchestrator.sizing.architectures import from_hf_config
    from orchestrator.sizing.job import JobSpec
    from orchestrator.sizing.memory import activation_bytes
    from orchestrator.sizing.trace import trace_config, trace_key

    print("\n## Trace vs analytic activations (batch 2, seq 128; analytic with bool masks)\n")
    print("| config | layers | precision, attention | trace MiB | analytic MiB | analytic err |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for fixture, layers in EXACT:
        config = json.loads((FIXTURES / f"{fixture}.json").read_text())
        for key in ("num_hidden_layers", "n_layer", "num_layers"):
            if key in config:
                config[key] = layers
        for precision, attention in (("fp32", "eager"), ("amp-bf16", "sdpa"), ("bf16", "sdpa")):
            job = JobSpec(batch=2, seq=128, precision=precision, attention=attention)
            traced = trace_config(json.dumps(config, sort_keys=True), trace_key(job))
            analytic = activation_bytes(from_hf_config(config, fixture), job)
            err = analytic / traced.activation_bytes - 1
            if precision == "fp32":
                worst = max(worst, abs(err))
            print(
                f"| {fixture} | {layers} | {precision}, {attention} | "
                f"{traced.activation_bytes / 2**20:,.1f} | {analytic / 2**20:,.1f} | "
                f"{err * 100:+.2f}% |",
                flush=True,
            )
    print(f"\nworst fp32/eager disagreement: {worst * 100:.2f}%")
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        print("needs the trace extra: pip install 'orch[trace]'")
        return 2
    started = time.perf_counter()
    if not args.skip_speed:
        speed(args.batch, args.seq)
    agreement()
    print(f"\n({time.perf_counter() - started:.0f} s in all)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
