"""CUDA autocast's policy as data, applied at the torch-function level for meta tensors.

The op lists follow aten/src/ATen/autocast_mode.cpp (CUDA): matmuls, convolutions and SDPA run
in the half dtype (weights that are leaves requiring grad are cast once per forward and cached,
as autocast's cast cache does); the fp32 list (norms, softmax, losses, exp/log/pow/rsqrt, sum)
runs in fp32; the promote list casts to the widest input dtype. Every other op runs in its
inputs' dtype. Each op is named by its path under `torch` ("Tensor.matmul",
"nn.functional.linear", "ops.aten.<op>.default") and looked up when a trace runs.
"""

from __future__ import annotations

from typing import Any

from orchestrator.sizing.trace.routing import mode_base
from orchestrator.sizing.trace.storage import storage_key

# Run in the half dtype (autocast's lower_precision_fp list).
LOW_PRECISION = (
    "nn.functional.linear",
    "nn.functional.bilinear",
    "matmul",
    "Tensor.matmul",
    "Tensor.__matmul__",
    "Tensor.__rmatmul__",
    "mm",
    "Tensor.mm",
    "bmm",
    "Tensor.bmm",
    "baddbmm",
    "Tensor.baddbmm",
    "addmm",
    "Tensor.addmm",
    "addbmm",
    "addmv",
    "mv",
    "Tensor.mv",
    "einsum",
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.conv3d",
    "nn.functional.conv_transpose1d",
    "nn.functional.conv_transpose2d",
    "nn.functional.conv_transpose3d",
    "nn.functional.prelu",
    "ops.aten._scaled_dot_product_flash_attention.default",
    "ops.aten._scaled_dot_product_efficient_attention.default",
)
# Run in fp32: the inputs are cast (autocast's fp32 list).
FP32 = (
    "nn.functional.layer_norm",
    "nn.functional.group_norm",
    "nn.functional.cross_entropy",
    "nn.functional.nll_loss",
    "nn.functional.mse_loss",
    "nn.functional.l1_loss",
    "nn.functional.smooth_l1_loss",
    "nn.functional.kl_div",
    "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.softplus",
    "nn.functional.cosine_similarity",
    "exp",
    "Tensor.exp",
    "log",
    "Tensor.log",
    "log1p",
    "Tensor.log1p",
    "expm1",
    "reciprocal",
    "Tensor.reciprocal",
    "rsqrt",
    "Tensor.rsqrt",
    "pow",
    "Tensor.pow",
    "Tensor.__pow__",
    "logsumexp",
    "Tensor.logsumexp",
    "norm",
    "Tensor.norm",
    "cdist",
)
# fp32 by an output dtype argument ("fp32_set_opt_dtype"): the input is not copied.
FP32_OUTPUT = (
    "nn.functional.softmax",
    "nn.functional.log_softmax",
    "softmax",
    "Tensor.softmax",
    "log_softmax",
    "Tensor.log_softmax",
    "sum",
    "Tensor.sum",
    "cumsum",
    "Tensor.cumsum",
    "prod",
    "Tensor.prod",
)
# Cast to the widest floating input dtype.
PROMOTE = (
    "addcmul",
    "Tensor.addcmul",
    "addcdiv",
    "index_put",
    "Tensor.index_put",
    "Tensor.index_put_",
    "scatter_add",
    "Tensor.scatter_add",
    "Tensor.scatter_add_",
    "dot",
    "cross",
    "atan2",
    "tensordot",
)


def resolve(torch: Any, names: tuple[str, ...]) -> set[Any]:
    """The torch callables named by `names` (paths under the torch module)."""
    found = set()
    for name in names:
        value = torch
        for part in name.split("."):
            value = getattr(value, part)
        found.add(value)
    return found


class Policy:
    """What one autocast region does to a call's tensors: the op lists resolved, the cast
    cache of the weights, and the storages of the weights' half copies (`cast_keys`)."""

    def __init__(self, torch: Any, half: Any) -> None:
        self.torch = torch
        self.half = half
        self.low = resolve(torch, LOW_PRECISION)
        self.fp32 = resolve(torch, FP32)
        self.fp32_output = resolve(torch, FP32_OUTPUT)
        self.promote = resolve(torch, PROMOTE)
        self.cache: dict[int, Any] = {}
        self.cast_keys: list[tuple[int, int]] = []

    def eligible(self, value: Any) -> bool:
        torch = self.torch
        return (
            isinstance(value, torch.Tensor)
            and value.is_floating_point()
            and value.dtype != torch.float64
        )

    def cast(self, value: Any, dtype: Any) -> Any:
        if not self.eligible(value) or value.dtype == dtype:
            return value
        half = self.half
        if dtype == half and value.is_leaf and value.requires_grad:
            cached = self.cache.get(id(value))
            if cached is None or cached[0] is not value:
                cached = (value, value.to(dtype))
                self.cache[id(value)] = cached
                self.cast_keys.append(storage_key(cached[1]))
            return cached[1]
        cast = value.to(dtype)
        base = value._base
        if dtype == half and base is not None and base.is_leaf and base.requires_grad:
            # A view of a weight (an MoE expert's slice of a 3-D parameter) is not
            # cached: each call makes a copy, which the matmul saves. It is counted
            # with the weights' half copies (memory.py adds those per parameter).
            self.cast_keys.append(storage_key(cast))
        return cast

    def map(self, args: tuple, kwargs: dict, dtype: Any) -> tuple[tuple, dict]:
        def one(value):
            if isinstance(value, list | tuple):
                return type(value)(one(v) for v in value)
            return self.cast(value, dtype)

        return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}

    def apply(self, func: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """`func`'s arguments cast as CUDA autocast casts them."""
        if func in self.low:
            return self.map(args, kwargs, self.half)
        if func in self.fp32:
            return self.map(args, kwargs, self.torch.float32)
        if func in self.fp32_output:
            if args and self.eligible(args[0]) and kwargs.get("dtype") is None:
                kwargs["dtype"] = self.torch.float32
        elif func in self.promote:
            floats = [a for a in (*args, *kwargs.values()) if self.eligible(a)]
            if floats:
                widest = max((a.dtype for a in floats), key=lambda d: d.itemsize)
                return self.map(args, kwargs, widest)
        return args, kwargs


def cuda_autocast(torch: Any, half: Any) -> Any:
    """A TorchFunctionMode (above autograd, as the real Autocast dispatch key is) that applies
    CUDA autocast's `Policy` to `half`; its `cast_keys` are the weights' half copies."""
    policy = Policy(torch, half)

    class Mode(mode_base(torch, "function")):
        cast_keys = policy.cast_keys

        def __torch_function__(self, func, types, args=(), kwargs=None):
            args, kwargs = policy.apply(func, args, dict(kwargs or {}))
            return func(*args, **kwargs)

    return Mode()
