"""What every resource of the test provider shares: the client, diagnostics, validation."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tf.iface import Config, DataSource, Resource
from tf.types import Unknown
from tf.utils import Diagnostics

from tests.sim.alicloud_provider.client import AliyunClient, ApiError

if TYPE_CHECKING:  # pragma: no cover
    from tests.sim.alicloud_provider.provider import AlicloudProvider


def known(value: Any) -> bool:
    return value is not None and value is not Unknown


class _Base:
    def __init__(self, provider: AlicloudProvider):
        self.provider = provider

    @property
    def client(self) -> AliyunClient:
        return self.provider.client()

    @staticmethod
    def api_error(diags: Diagnostics, what: str, exc: Exception) -> None:
        diags.add_error(f"{what} failed", str(exc))

    # ---------------------------------------------------------------- validation (ValidateFunc)

    @staticmethod
    def check_in(diags: Diagnostics, config: Config, name: str, allowed: Iterable[str]) -> None:
        value = config.get(name)
        allowed = list(allowed)
        if known(value) and value not in allowed:
            diags.add_error(f"expected {name} to be one of {allowed}, got {value}", path=[name])

    @staticmethod
    def check_match(diags: Diagnostics, config: Config, name: str, pattern: str, why: str) -> None:
        value = config.get(name)
        if known(value) and not re.search(pattern, value):
            diags.add_error(f"invalid value for {name} ({why})", path=[name])

    @staticmethod
    def check_len(diags: Diagnostics, config: Config, name: str, low: int, high: int) -> None:
        value = config.get(name)
        if known(value) and not low <= len(value) <= high:
            diags.add_error(
                f"expected length of {name} to be in the range ({low} - {high}), got {value}",
                path=[name],
            )

    @staticmethod
    def check_range(diags: Diagnostics, config: Config, name: str, low: float, high: float) -> None:
        value = config.get(name)
        if known(value) and not low <= value <= high:
            diags.add_error(
                f"expected {name} to be in the range ({low} - {high}), got {value}", path=[name]
            )


class BaseResource(_Base, Resource):
    """In-place updates: tags only (TagResources / UntagResources), unless a resource says more.

    TAGS names the product and the TagResources ResourceType; None: tags cannot change.
    """

    TAGS: tuple[str, str] | None = None

    def refresh(self, state: dict) -> dict | None:
        """Read the resource back (subclasses: their `_read(id, prior)`)."""
        return self._read(state["id"], state)  # type: ignore[attr-defined]

    def update(self, ctx: Any, current: dict, planned: dict) -> dict | None:
        changed = sorted(
            k for k in planned if k != "tags" and known(planned[k]) and planned[k] != current.get(k)
        )
        if changed or (self.TAGS is None and planned.get("tags") != current.get("tags")):
            ctx.diagnostics.add_error(
                f"{ctx.type_name}: the test provider cannot change {', '.join(changed) or 'tags'}"
                " in place"
            )
            return current
        try:
            if self.TAGS is not None:
                self.update_tags(current["id"], current.get("tags"), planned.get("tags"))
            state = self.refresh(planned)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, f"updating {ctx.type_name}", exc)
            return current
        return state if state is not None else current

    def update_tags(self, resource_id: str, old: dict | None, new: dict | None) -> None:
        assert self.TAGS is not None
        product, resource_type = self.TAGS
        old, new = old or {}, new or {}
        removed = [k for k in old if k not in new]
        if removed:
            self.client.rpc(
                product,
                "UntagResources",
                {"ResourceType": resource_type, "ResourceId": [resource_id], "TagKey": removed},
            )
        changed = {k: v for k, v in new.items() if old.get(k) != v}
        if changed:
            self.client.rpc(
                product,
                "TagResources",
                {
                    "ResourceType": resource_type,
                    "ResourceId": [resource_id],
                    "Tag": [{"Key": k, "Value": v} for k, v in changed.items()],
                },
            )


class BaseDataSource(_Base, DataSource):
    pass


__all__ = ["ApiError", "BaseDataSource", "BaseResource", "known"]
