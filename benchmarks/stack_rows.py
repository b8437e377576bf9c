"""Print the [[single_gpu]] rows of catalog/data/llm_throughput.toml for a file of real-GPU runs.

The throughput model calibrates each implementation class (stack) on its own runs, but the
package cannot read benchmarks/: the runs measured with benchmarks/gpu/measure_gpu.py are kept
raw in benchmarks/data/*.jsonl and copied into the catalog as rows this script prints (runs
that failed, e.g. OOM, are left out). tests/unit/test_stacks.py checks the two agree.

    python benchmarks/stack_rows.py benchmarks/data/h200_eager_2026-12-04.jsonl \
        --source h200-eager-2026-12-04 [--stack eager]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# measure_gpu.py's config names -> the catalog model (or llm_throughput.toml [arch.*]) with
# the same architecture (tests/unit/test_stacks.py compares their parameter counts).
CATALOG = {
    "bert-large": "bert-large-uncased",
    "gpt2-medium": "gpt2-medium",
    "vit-large": "vit-large",
    "mistral-7b": "mistral-7b",
    "llama-3-8b": "llama-3-8b",
    "llama-3.2-1b": "llama-3.2-1b",
    "qwen2.5-0.5b": "qwen2.5-0.5b",
    "qwen1.5-moe-a2.7b": "qwen1.5-moe-a2.7b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
}
VISION = ("vit-",)


def gpu_name(device: str) -> str:
    """The catalog's GPU name for torch.cuda.get_device_name()."""
    return {"NVIDIA H200": "H200", "NVIDIA H100 80GB HBM3": "H100-80GB"}.get(device, device)


def usable(row: dict) -> bool:
    return not row.get("error") and row.get("samples_per_s") is not None


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def toml_row(row: dict, source: str, stack: str) -> str:
    vision = row["config"].startswith(VISION)
    lines = [
        "[[single_gpu]]",
        f'gpu = "{gpu_name(row["gpu"])}"',
        f'stack = "{stack}"',
        f'precision = "{row["precision"]}"',
        f'arch = "{CATALOG[row["config"]]}"',
        f"image_size = {row['seq']}" if vision else f"seq = {row['seq']}",
        f"batch = {row['batch']}",
        f"grad_checkpointing = {'true' if row['gc'] else 'false'}",
        f"lora_rank = {row['lora']}",
    ]
    if row.get("quantize"):
        lines.append(f'quantize = "{row["quantize"]}"')
    lines += [f"samples_per_s = {row['samples_per_s']:.4f}", f'source = "{source}"', ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jsonl", type=Path)
    parser.add_argument("--source", required=True, help="the [sources.*] key of the file")
    parser.add_argument("--stack", default="eager", choices=("eager", "optimised"))
    args = parser.parse_args()
    for row in rows(args.jsonl):
        if usable(row):
            print(toml_row(row, args.source, args.stack))


if __name__ == "__main__":
    main()
