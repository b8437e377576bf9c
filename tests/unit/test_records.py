"""`@record` behaves as the dataclass it replaces, without generating code per class and
without importing `dataclasses` (a real dataclass is the reference here)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import ClassVar

import pytest

from orchestrator import records
from orchestrator.records import FrozenInstanceError, asdict, field, fields, record, replace


@record
class Point:
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    note: str = field(default="", repr=False, compare=False)


@record(frozen=False)
class Counter:
    name: str
    count: int = 0
    seen: list[int] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.seen.append(self.count)


@dataclasses.dataclass(frozen=True)
class ReferencePoint:
    x: int
    y: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)
    note: str = dataclasses.field(default="", repr=False, compare=False)


def test_init_takes_positions_keywords_defaults_and_factories():
    p = Point(1, tags=["a"])
    assert (p.x, p.y, p.tags, p.note) == (1, 0, ["a"], "")
    assert Point(1).tags is not Point(1).tags  # a fresh list per instance, as dataclasses do


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: Point(), "missing required argument: 'x'"),
        (lambda: Point(1, x=2), "multiple values for argument 'x'"),
        (lambda: Point(1, z=2), "unexpected keyword argument 'z'"),
        (lambda: Point(1, 2, [], "n", 5), "takes 4 positional arguments but 5 were given"),
        (lambda: Counter("c", 0, []), "takes 2 positional arguments but 3 were given"),
        (lambda: Counter("c", seen=[]), "unexpected keyword argument 'seen'"),
    ],
)
def test_bad_calls_raise_type_error_like_a_dataclass(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_repr_eq_and_hash_follow_the_dataclass_rules():
    for cls in (Point, ReferencePoint):
        a, b = cls(1, 2, note="left"), cls(1, 2, note="right")
        assert a == b  # `note` is compare=False
        assert a != cls(1, 3)
        assert hash(cls(1, 2, ("t",))) == hash(cls(1, 2, ("t",), note="other"))
    assert repr(Point(1, 2, ["t"], "hidden")) == "Point(x=1, y=2, tags=['t'])"
    assert repr(Point(1, 2, ["t"])).replace("Point", "ReferencePoint") == repr(
        ReferencePoint(1, 2, ["t"])
    )
    assert Point(1) != ReferencePoint(1)  # another class is never equal
    with pytest.raises(TypeError, match="unhashable"):
        hash(Counter("c"))  # a mutable record, like an eq=True dataclass, has no hash


def test_frozen_refuses_assignment_and_deletion_mutable_allows_it():
    p = Point(1)
    with pytest.raises(FrozenInstanceError):
        p.x = 2
    with pytest.raises(AttributeError):  # FrozenInstanceError is one, as in dataclasses
        del p.y
    c = Counter("c", 3)
    c.count = 4
    assert (c.count, c.seen) == (4, [3])  # __post_init__ ran, init=False field was set


def test_the_helpers_give_what_the_dataclass_helpers_give():
    p, ref = Point(1, 2, ["t"], "n"), ReferencePoint(1, 2, ["t"], "n")
    assert records.is_record(p) and records.is_record(Point) and not records.is_record(ref)
    assert [f.name for f in fields(p)] == [f.name for f in dataclasses.fields(ref)]
    for mine, theirs in zip(fields(Point), dataclasses.fields(ReferencePoint), strict=True):
        assert (mine.default, mine.init, mine.repr, mine.compare) == (
            theirs.default if theirs.default is not dataclasses.MISSING else records.MISSING,
            theirs.init,
            theirs.repr,
            theirs.compare,
        )
    assert replace(p, y=5) == Point(1, 5, ["t"])
    assert asdict(p) == dataclasses.asdict(ref) == {"x": 1, "y": 2, "tags": ["t"], "note": "n"}
    assert copy.deepcopy(p) == p
    assert pickle.loads(pickle.dumps(p)) == p
    with pytest.raises(ValueError, match="init=False"):
        replace(Counter("c"), seen=[1])
    with pytest.raises(TypeError):
        fields(ref)  # a dataclass is not a record
    with pytest.raises(TypeError):
        asdict(Point)  # a class, not an instance


@record
class Inner:
    values: tuple[int, ...]
    extra: dict[str, list[int]] = field(default_factory=dict)


@record
class Outer:
    inner: Inner
    items: list[Inner]
    named: dict[str, Inner]


def test_asdict_recurses_and_copies_as_dataclasses_does():
    inner = Inner((1, 2), {"k": [3]})
    outer = Outer(inner, [inner], {"a": inner})
    flat = asdict(outer)
    as_dict = {"values": (1, 2), "extra": {"k": [3]}}
    assert flat == {"inner": as_dict, "items": [as_dict], "named": {"a": as_dict}}
    flat["inner"]["extra"]["k"].append(4)
    assert inner.extra == {"k": [3]}  # a copy, not the record's own list


@record
class Base:
    name: str
    size: int = 1


@record
class Extended(Base):
    note: str = ""
    size: int = 2  # a redefined field keeps its place and takes the new default


def test_a_record_extends_a_record_as_a_dataclass_extends_a_dataclass():
    @dataclasses.dataclass(frozen=True)
    class RefBase:
        name: str
        size: int = 1

    @dataclasses.dataclass(frozen=True)
    class RefExtended(RefBase):
        note: str = ""
        size: int = 2

    assert [f.name for f in fields(Extended)] == [f.name for f in dataclasses.fields(RefExtended)]
    assert repr(Extended("e")).partition("(")[2] == repr(RefExtended("e")).partition("(")[2]
    assert Extended("e") != Base("e", 2)  # another class is never equal
    assert isinstance(Extended("e"), Base)


def test_unsupported_or_wrong_shapes_are_refused_when_the_class_is_made():
    with pytest.raises(TypeError, match="do not inherit from dataclasses"):

        @record
        class FromDataclass(ReferencePoint):
            z: int = 0

    with pytest.raises(TypeError, match="frozen and mutable"):

        @record(frozen=False)
        class Thawed(Point):
            z: int = 0

    with pytest.raises(TypeError, match="defines __eq__"):

        @record
        class OwnEq:
            x: int

            def __eq__(self, other: object) -> bool:
                return True

    with pytest.raises(TypeError, match="records.field"):

        @record
        class DataclassField:
            x: int = dataclasses.field(default=0)

    # As dataclasses refuse them:
    with pytest.raises(ValueError, match="mutable default"):

        @record
        class MutableDefault:
            x: list = []  # noqa: RUF012

    with pytest.raises(TypeError, match="non-default argument 'y' follows default argument"):

        @record
        class Order:
            x: int = 0
            y: int

    with pytest.raises(ValueError, match="both default and default_factory"):
        field(default=1, default_factory=list)


def test_class_variables_are_not_fields():
    @record
    class WithClassVar:
        LIMIT: ClassVar[int] = 3
        x: int = 0

    assert [f.name for f in fields(WithClassVar)] == ["x"]
    assert WithClassVar.LIMIT == 3
