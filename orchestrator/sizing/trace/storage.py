"""Saved tensors and storages: what the pack hook hands autograd, and how storages are told
apart on the meta device."""

from __future__ import annotations

from typing import Any


class Saved:
    """What the pack hook hands autograd: alive exactly as long as autograd keeps it."""

    __slots__ = ("tensor", "layer", "__weakref__")

    def __init__(self, tensor: Any, layer: int) -> None:
        self.tensor = tensor
        self.layer = layer


def storage_key(tensor: Any) -> tuple[int, int]:
    # Meta storages have no data pointer; the StorageImpl's address identifies them (all
    # counted storages are alive at once, held by `Saved`, so addresses are not reused).
    storage = tensor.untyped_storage()
    return storage._cdata, storage.nbytes()
