"""Schema helpers: attribute shorthand in the real provider's terms, plus an Object type.

`attr(...)` takes the SDKv2 flags the real provider's Go schemas use (Required, Optional,
Computed, ForceNew, Sensitive) so each resource's schema reads like its Go source.
The `tf` package has no object type; computed lists of objects (data "alicloud_images".images)
need one, hence `Object`.
"""

from __future__ import annotations

import json
from typing import Any

from tf import types
from tf.schema import Attribute, Schema

String = types.String
Number = types.Number
Bool = types.Bool
List = types.List
Set = types.Set
Map = types.Map


class Object(types.TfType):
    """cty object type: a dict with a fixed set of typed attributes."""

    def __init__(self, attributes: dict[str, types.TfType]):
        self.attributes = attributes

    def encode(self, value: Any) -> Any:
        if value is None or value is types.Unknown:
            return value
        return {k: t.encode(value.get(k)) for k, t in self.attributes.items()}

    def decode(self, value: Any) -> Any:
        if value is None or value is types.Unknown:
            return value
        return {k: t.decode(value.get(k)) for k, t in self.attributes.items()}

    def tf_type(self) -> bytes:
        inner = {k: json.loads(t.tf_type()) for k, t in self.attributes.items()}
        return json.dumps(["object", inner], separators=(",", ":")).encode()


def attr(
    name: str,
    type_: types.TfType,
    *,
    required: bool = False,
    optional: bool = False,
    computed: bool = False,
    force_new: bool = False,
    sensitive: bool = False,
    description: str | None = None,
) -> Attribute:
    return Attribute(
        name,
        type_,
        description=description,
        required=required,
        optional=optional,
        computed=computed,
        sensitive=sensitive,
        requires_replace=force_new,
    )


def id_attr() -> Attribute:
    """SDKv2 adds `id` (Optional + Computed) to every resource and data source."""
    return attr("id", String(), optional=True, computed=True)


def schema(*attributes: Attribute) -> Schema:
    return Schema(version=0, attributes=[id_attr(), *attributes])
