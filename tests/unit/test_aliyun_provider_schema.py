"""The alicloud test provider's schemas are a faithful subset of the real provider's.

tests/sim/alicloud_provider/upstream_schema.json holds the real aliyun/alicloud schemas at the
pinned release (extracted from its Go source; see the file's _source). Every attribute the test
provider declares must exist there with the same type and the same Required / Optional /
Computed / ForceNew flags, so a module that plans against the test provider plans the same way
against the real one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import require_module

require_module("tf")

from tests.sim.alicloud_provider import VERSION  # noqa: E402
from tests.sim.alicloud_provider.provider import AlicloudProvider  # noqa: E402
from tests.sim.alicloud_provider.schema import Object  # noqa: E402

UPSTREAM_FILE = (
    Path(__file__).resolve().parents[1] / "sim" / "alicloud_provider" / "upstream_schema.json"
)
UPSTREAM = json.loads(UPSTREAM_FILE.read_text())
PROVIDER = AlicloudProvider()
SCHEMAS = {
    **{f"alicloud_{r.get_name()}": r.get_schema() for r in PROVIDER.get_resources()},
    **{f"data.alicloud_{d.get_name()}": d.get_schema() for d in PROVIDER.get_data_sources()},
    "provider": PROVIDER.get_provider_schema(None),  # type: ignore[arg-type]
}
# What each tf type is called in the extracted Go schema.
SIMPLE = {"String": "string", "Number": "number", "Bool": "bool"}
COLLECTIONS = {"List": "list", "Set": "set", "Map": "map"}


def upstream_type(tf_type: Any) -> dict[str, Any]:
    kind = type(tf_type).__name__
    if kind in SIMPLE:
        return {"type": SIMPLE[kind]}
    if kind in COLLECTIONS:
        element = tf_type.element_type
        if isinstance(element, Object):
            return {"type": COLLECTIONS[kind], "elem": "object"}
        return {"type": COLLECTIONS[kind], "elem": SIMPLE[type(element).__name__]}
    raise AssertionError(f"unexpected type {kind}")


def attributes(name: str) -> list[tuple[str, Any]]:
    return [(name, attr) for attr in SCHEMAS[name].attributes if attr.name != "id"]


def test_the_fixture_is_for_the_pinned_version():
    assert UPSTREAM["_source"]["tag"] == f"v{VERSION}"


def test_every_upstream_resource_is_covered():
    assert set(SCHEMAS) == set(UPSTREAM["schemas"])


@pytest.mark.parametrize(
    ("name", "attr"),
    [pair for name in sorted(SCHEMAS) for pair in attributes(name)],
    ids=lambda value: value if isinstance(value, str) else value.name,
)
def test_attribute_matches_upstream(name, attr):
    real = UPSTREAM["schemas"][name]["attributes"].get(attr.name)
    assert real is not None, f"{name}.{attr.name} does not exist in the real provider"
    assert not real.get("removed"), f"{name}.{attr.name} was removed upstream"
    ours = upstream_type(attr.type)
    assert real["type"] == ours["type"], f"{name}.{attr.name}: type"
    if "elem" in ours:
        real_elem = real.get("elem")
        if ours["elem"] == "object":
            assert isinstance(real_elem, dict), f"{name}.{attr.name}: element is not an object"
            extra = set(attr.type.element_type.attributes) - set(real_elem)
            assert not extra, f"{name}.{attr.name}: unknown object attributes {extra}"
        else:
            assert real_elem == ours["elem"], f"{name}.{attr.name}: element type"
    for flag in ("required", "optional", "computed", "force_new"):
        mine = bool(attr.requires_replace if flag == "force_new" else getattr(attr, flag))
        assert mine == bool(real.get(flag)), f"{name}.{attr.name}: {flag}"
