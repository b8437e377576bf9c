"""Kernel substitutions: dropout and SDPA routed to the ops a CUDA run uses, so that the meta
device saves what a GPU saves (the package docstring says why)."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def gpu_kernels(torch, amp_dtype):
    """Route dropout and SDPA to the ops a CUDA run uses (see the module docstring)."""
    functional = torch.nn.functional
    original_dropout = functional.dropout
    original_sdpa = functional.scaled_dot_product_attention

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and 0.0 < p < 1.0 and input.is_floating_point():
            return torch.native_dropout(input, p, True)[0]  # bool mask, as on CUDA
        return original_dropout(input, p, training, inplace)

    def sdpa(
        query,
        key,
        value,
        attn_mask=None,
        dropout_p=0.0,
        is_causal=False,
        scale=None,
        enable_gqa=False,
    ):
        # Why not the meta/CPU SDPA: it takes the math fallback, which materialises and
        # saves the b x heads x s x s scores and probabilities. CUDA picks flash attention
        # (half precision, no explicit mask, head_dim <= 256) or the memory-efficient kernel
        # (fp32, or an additive mask), both O(s): q, k, v, out and fp32 log-sum-exp.
        if amp_dtype is not None:  # autocast casts SDPA's inputs before the kernel choice
            query, key, value = (
                t.to(amp_dtype) if t.dtype == torch.float32 else t for t in (query, key, value)
            )
        aten = torch.ops.aten
        half = query.dtype in (torch.float16, torch.bfloat16)
        if half and attn_mask is None and query.shape[-1] <= 256:
            # FlashAttention-2 handles grouped-query attention natively (k, v at kv width).
            return aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale
            )[0]
        if enable_gqa and key.shape[-3] != query.shape[-3]:
            groups = query.shape[-3] // key.shape[-3]
            key = key.repeat_interleave(groups, dim=-3)
            value = value.repeat_interleave(groups, dim=-3)
        bias = attn_mask
        if bias is not None:
            if bias.dtype == torch.bool:  # SDPA turns a bool mask into an additive one
                bias = torch.zeros(bias.shape, dtype=query.dtype, device=query.device)
            elif bias.dtype != query.dtype:
                bias = bias.to(query.dtype)
            bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, bias, True, dropout_p, is_causal, scale=scale
        )[0]

    functional.dropout = dropout
    functional.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        functional.dropout = original_dropout
        functional.scaled_dot_product_attention = original_sdpa
