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

from orchestrator.sizing.activation_layers import dtypes
from orchestrator.sizing.architectures import Architecture, Stack
from orchestrator.sizing.job import JobSpec

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


def kbit_saved_bytes(arch: Architecture, job: JobSpec, saves_4bit_input: bool) -> float:
    """Per layer (summed over the layers that keep them): what quantised matmuls save for
    backward beyond a LoRA layer's own tensors.

    LLM.int8 (MatMul8bitLt) keeps its input A and the int8 transposed copy CAt of it for every
    linear (`ctx.tensors = (CAt, subA, A)`); bitsandbytes' MatMul4Bit kept its input only in
    releases up to 0.41 (`saves_4bit_input`, the stack's). Inputs shared by several linears
    (q/k/v, gate/up) are one storage. Under checkpointing only the recomputed layer keeps them.
    """
    if not job.quantize or (job.quantize == "4bit" and not saves_4bit_input):
        return 0.0
    dt = dtypes(job.precision)
    total = 0.0
    for st in arch.stacks:
        t = job.batch * job.seq
        per = _distinct_inputs(st) * (dt.stream if job.quantize == "8bit" else dt.act)
        if job.quantize == "8bit":
            per += _linear_inputs(st)  # CAt: one int8 copy per linear
        total += per * t * (1 if job.grad_checkpointing else st.layers)
    return total


def _distinct_inputs(st: Stack) -> int:
    """Widths of the inputs a layer's linears read that the LoRA layer does not save already
    (the q/v adapters keep the attention input): o_proj's, the MLP's, down_proj's."""
    return st.q_width + st.hidden + st.intermediate


def _linear_inputs(st: Stack) -> int:
    mlp_in = (2 if st.gated else 1) * st.hidden
    return 3 * st.hidden + st.q_width + mlp_in + st.intermediate
