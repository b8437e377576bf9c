"""Quantised frozen base weights (QLoRA): bitsandbytes NF4 with double quantisation (`4bit`)
or LLM.int8 (`8bit`), as transformers' BitsAndBytesConfig + peft's
prepare_model_for_kbit_training + LoRA build them.

- Every nn.Linear but the output head is quantised (transformers keeps `lm_head` and the
  modules tied to it in full precision: integrations/bitsandbytes.py, get_keys_to_not_convert).
- NF4 (QLoRA paper, Dettmers et al. 2023, arXiv:2305.14314, section 3 "Double Quantization"):
  4 bits per weight; one absmax per block of 64 weights, itself quantised to 8 bits with one
  fp32 constant per 256 absmax values: 0.5 + 1/64 + 4/(64 x 256) bytes per weight (the paper's
  "0.127 bits per parameter" of constants after double quantisation, from 0.5).
- LLM.int8 (Dettmers et al. 2022, arXiv:2208.07339; bitsandbytes Linear8bitLt): one int8 per
  weight and one fp32 scale per output row (SCB).
- prepare_model_for_kbit_training casts every weight that is not quantised (embeddings, norms,
  the output head) to fp32 (peft/utils/other.py); LoRA adapters are fp32 and trained by AdamW.
- A quantised linear dequantises its whole weight to the compute dtype for each matmul,
  forward and backward (bitsandbytes autograd MatMul4Bit: F.dequantize_4bit(B).to(A.dtype)):
  one weight-sized transient of the largest linear.
"""

from __future__ import annotations

from orchestrator.sizing.architectures import Architecture

NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)  # NF4 + double-quantised absmax
INT8_BYTES_PER_WEIGHT = 1.0


def _quantized_groups(arch: Architecture):
    """The weights bitsandbytes quantises: every nn.Linear's matrix but the output head's
    (3-D expert tensors of transformers 5's MoE layers are parameters, not nn.Linear)."""
    return [w for w in arch.weights if w.matmul and len(w.shape) == 2 and w.name != "lm_head"]


def quantized_parameters(arch: Architecture) -> int:
    return sum(w.numel for w in _quantized_groups(arch))


def quantized_weight_bytes(arch: Architecture, quantize: str, trainable: int) -> float:
    """Bytes of the base model's weights plus the fp32 LoRA adapters."""
    groups = _quantized_groups(arch)
    linear = sum(w.numel for w in groups)
    rest = arch.parameters - linear  # embeddings, norms, biases, the head: fp32 after prep
    if quantize == "4bit":
        weights = linear * NF4_BYTES_PER_WEIGHT
    else:  # one int8 per weight, one fp32 scale per output row
        weights = linear * INT8_BYTES_PER_WEIGHT + sum(4 * w.shape[0] * w.count for w in groups)
    return weights + rest * 4 + trainable * 4


def dequant_transient_bytes(arch: Architecture, act_bytes: int) -> float:
    """The largest quantised linear dequantised to the compute dtype (forward and backward)."""
    return max((w.shape[0] * w.shape[1] for w in _quantized_groups(arch)), default=0) * act_bytes
