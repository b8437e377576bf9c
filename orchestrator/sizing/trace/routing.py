"""MoE routing on the meta device: experts modules found by name, a stack of the experts in
flight (forward hooks), and a dispatch mode that answers the data-dependent ops with balanced
routing while it counts FLOPs."""

from __future__ import annotations

from typing import Any


def expert_count(module: Any) -> int:
    """Experts of an MoE experts module (the one that loops over experts), else 0."""
    name = type(module).__name__.lower()
    if "expert" not in name and "moe" not in name:
        return 0
    for attr in ("num_experts", "num_local_experts", "n_routed_experts"):
        value = getattr(module, attr, None)
        if isinstance(value, int) and value > 1:
            return value
    return 0


def push(stack: list[int], count: int):
    def hook(*_args):
        stack.append(count)

    return hook


def pop(stack: list[int]):
    def hook(*_args):
        if stack:
            stack.pop()

    return hook


def mode_base(torch, kind: str):
    if kind == "dispatch":
        from torch.utils._python_dispatch import TorchDispatchMode

        return TorchDispatchMode
    from torch.overrides import TorchFunctionMode

    return TorchFunctionMode


def balanced_routing(torch: Any, experts: list[int]) -> Any:
    """A dispatch mode that counts matmul/conv/attention FLOPs (torch.utils.flop_counter's
    formulas, without FlopCounterMode's per-module bookkeeping, which tripled trace times)
    and answers the data-dependent ops the meta device cannot: nonzero and scalar reads.
    Inside an MoE experts module of E experts (`experts`: the stack of those in flight), a
    1-D expert-hit mask is all hit and a routing mask (top-k x tokens) holds numel / E true
    entries (balanced routing); elsewhere masks are all true, bool checks true (transformers
    asks "is every sequence unpacked?") and numbers read 0 (masks and numbers counted in
    `guesses`)."""
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten

    class Mode(mode_base(torch, "dispatch")):
        guesses = 0
        flops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            packet = getattr(func, "overloadpacket", None)
            first = args[0] if args else None
            on_meta = getattr(first, "is_meta", False)
            if on_meta and packet is aten.nonzero:
                numel = first.numel()
                if experts:
                    rows = min(numel, experts[-1]) if first.dim() == 1 else numel // experts[-1]
                else:
                    rows = numel
                    Mode.guesses += 1
                return torch.empty(rows, first.dim(), dtype=torch.long, device="meta")
            if on_meta and packet is aten._local_scalar_dense:
                if first.dtype != torch.bool:
                    Mode.guesses += 0 if experts else 1
                    return 0
                # In the experts loop a test is "is this the padding expert" (no);
                # elsewhere a check such as transformers' "no packed sequences" (yes).
                return not experts
            out = func(*args, **kwargs)
            count = flop_registry.get(packet)
            if count is not None:
                Mode.flops += count(*args, **kwargs, out_val=out)
            return out

    return Mode()
