"""`@record` behaves as the dataclass it replaces, without generating code per class."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from orchestrator.records import record


@record
class Point:
    x: int
    y: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)
    note: str = dataclasses.field(default="", repr=False, compare=False)


@record(frozen=False)
class Counter:
    name: str
    count: int = 0
    seen: list[int] = dataclasses.field(default_factory=list, init=False)

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
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.y
    c = Counter("c", 3)
    c.count = 4
    assert (c.count, c.seen) == (4, [3])  # __post_init__ ran, init=False field was set


def test_dataclass_helpers_keep_working():
    p = Point(1, 2, ["t"], "n")
    assert dataclasses.is_dataclass(p)
    assert [f.name for f in dataclasses.fields(p)] == ["x", "y", "tags", "note"]
    assert dataclasses.replace(p, y=5) == Point(1, 5, ["t"])
    assert dataclasses.asdict(p) == {"x": 1, "y": 2, "tags": ["t"], "note": "n"}
    assert copy.deepcopy(p) == p
    assert pickle.loads(pickle.dumps(p)) == p


def test_unsupported_shapes_are_refused_when_the_class_is_made():
    with pytest.raises(TypeError, match="do not inherit"):

        @record
        class Sub(Point):
            z: int = 0

    with pytest.raises(TypeError, match="defines __eq__"):

        @record
        class OwnEq:
            x: int

            def __eq__(self, other: object) -> bool:
                return True

    with pytest.raises(TypeError, match="keyword-only"):

        @record
        class KwOnly:
            x: int = dataclasses.field(kw_only=True)
