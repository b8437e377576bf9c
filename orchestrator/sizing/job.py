"""JobSpec: everything about a training job that sizing needs, as one plain value."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

PRECISIONS = ("fp32", "amp-fp16", "amp-bf16", "bf16")
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adamw-8bit")
ATTENTIONS = ("eager", "sdpa")
ZERO_STAGES = (0, 1, 2, 3)
STACKS = ("eager", "optimised")
QUANTIZE = ("4bit", "8bit")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A training job. `gpus` is the data-parallel world size the memory is split over.

    Exactly one of `model`, `hf_config` or `params_m` names the model.
    """

    model: str | None = None  # catalog name or alias
    hf_config: str | None = None  # path to a Hugging Face config.json
    params_m: float | None = None  # "parameters in millions" fallback
    batch: int = 8  # per-GPU micro-batch
    seq: int = 512  # sequence length (encoder / decoder input)
    target_seq: int | None = None  # encoder-decoder decoder length; None means = seq
    image_size: int | None = None  # vision models; None means the config's own
    precision: str = "amp-bf16"
    optimizer: str = "adamw"
    grad_checkpointing: bool = False
    attention: str = "sdpa"
    gpus: int = 1
    zero: int = 0  # 0..3; FSDP full-shard is 3
    lora_rank: int | None = None
    samples: int | None = None  # total training samples for the job (cost per job)
    epochs: float | None = None
    dataset_size: int | None = None
    trace: bool = False  # activations from a meta-device trace (sizing/trace/)
    # Overhead and implementation knobs (orchestrator/sizing/overhead.py).
    cuda_context_gib: float | None = None  # None: the default assumption
    cuda_context_basis: str | None = None  # where a given context figure comes from
    fused_ce: bool = False  # fused/chunked cross-entropy: no fp32 logits kept
    activation_offload: bool = False  # saved activations copied to host memory
    lora_dropout: float = 0.0  # > 0 keeps a mask and a dropped copy of each adapter's input
    # Implementation class the throughput model assumes (orchestrator/sizing/stacks.py).
    stack: str = "eager"  # "eager" (plain PyTorch, HF Trainer-style) | "optimised"
    quantize: str | None = None  # "4bit" (NF4) | "8bit" (LLM.int8) frozen base weights
    # Micro-batches per optimizer step (gradient accumulation): the effective batch is
    # batch x grad_accum x GPUs.
    grad_accum: int = 1
    # Memory-side runtime stack (sizing/runtime_stack.py); None: the one `stack` implies.
    memory_stack: str | None = None

    def with_gpus(self, gpus: int) -> JobSpec:
        return replace(self, gpus=gpus)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
