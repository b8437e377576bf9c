"""`@record`: value classes in the manner of dataclasses, without the `dataclasses` module.

`dataclasses.dataclass(frozen=True)` writes `__init__`, `__repr__`, `__eq__`, `__hash__`,
`__setattr__` and `__delattr__` as source text and compiles each with `exec()`: about 1 ms a
class on a slow machine, and `orch plan` defines some forty value types before it prints a
line. Importing `dataclasses` itself costs 15-17 ms more, because it imports `inspect` (and
with it ast, dis, tokenize and linecache): a fifth of `orch plan` (issue 10: start-up at most
3x bare Python). A record's methods are shared code, and its fields are collected here.

The dataclass rules are kept, and `tests/unit/test_records.py` checks them against a real
dataclass: `field(default=..., default_factory=..., init=..., repr=..., compare=...)`,
`fields()`, `replace()`, `asdict()`, `__post_init__`, equality (same class, equal compared
fields), hashing (a frozen record hashes its compared fields, a mutable one is unhashable),
`FrozenInstanceError` (an AttributeError) on assignment to a frozen record, a mutable default
refused (ValueError), a field without a default after one with a default refused (TypeError).
A record may extend another record (its fields first, then the new ones), frozen or not as
its base is. Not supported, and refused at class creation: keyword-only fields, `InitVar`,
`dataclasses.field()` (use this module's `field`), a record defining its own `__init__`,
`__repr__`, `__eq__`, `__hash__` or `__setattr__`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

T = TypeVar("T", bound=type)


class _MissingType:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _MissingType()  # no default given


class FrozenInstanceError(AttributeError):
    """Assignment to, or deletion of, a field of a frozen record."""


class Field:
    """One field of a record, as `fields()` returns it."""

    __slots__ = ("name", "default", "default_factory", "init", "repr", "compare")

    def __init__(
        self,
        default: Any = MISSING,
        default_factory: Any = MISSING,
        init: bool = True,
        repr: bool = True,  # noqa: A002 - the dataclasses name
        compare: bool = True,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.compare = compare

    def __repr__(self) -> str:
        return (
            f"Field(name={self.name!r}, default={self.default!r}, "
            f"default_factory={self.default_factory!r}, init={self.init}, repr={self.repr}, "
            f"compare={self.compare})"
        )


def field(
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
    init: bool = True,
    repr: bool = True,  # noqa: A002 - the dataclasses name
    compare: bool = True,
) -> Any:
    """A field with a default, a default factory, or left out of __init__/repr/comparison."""
    return Field(default, default_factory, init, repr, compare)


def is_record(obj: object) -> bool:
    """Whether `obj` is a record class or a record instance."""
    cls = obj if isinstance(obj, type) else type(obj)
    return "__record_fields__" in getattr(cls, "__dict__", {})


def fields(record_or_class: object) -> tuple[Field, ...]:
    """The fields of a record class or instance, in definition order (base fields first)."""
    cls = record_or_class if isinstance(record_or_class, type) else type(record_or_class)
    found = cls.__dict__.get("__record_fields__") if isinstance(cls, type) else None
    if found is None:
        raise TypeError("must be called with a record type or instance")
    return found


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of the record `obj` with some fields changed, built through its __init__."""
    for f in fields(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(
                    f"field {f.name} is declared with init=False, it cannot be specified with "
                    "replace()"
                )
        elif f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


_SCALARS = (str, int, float, bool, type(None))


def asdict(obj: object) -> dict[str, Any]:
    """The record's fields as a dict, recursing into records, lists, tuples and dicts (other
    values are deep-copied), as dataclasses.asdict does."""
    if isinstance(obj, type) or not is_record(obj):
        raise TypeError("asdict() should be called on record instances")
    return _asdict_value(obj)


def _asdict_value(value: Any) -> Any:
    if type(value) in _SCALARS:
        return value
    if not isinstance(value, type) and is_record(value):
        return {f.name: _asdict_value(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*[_asdict_value(v) for v in value])
    if isinstance(value, list | tuple):
        return type(value)(_asdict_value(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_asdict_value(k), _asdict_value(v)) for k, v in value.items())
    import copy  # only for values that are not plain data

    return copy.deepcopy(value)


# One field as __init__ sees it: (name, in the signature, default, default factory).
_InitField = tuple[str, bool, Any, Any]


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    cls = type(self)
    spec: tuple[_InitField, ...] = cls.__record_init__
    positional = cls.__record_positional__
    if len(args) > len(positional):
        raise TypeError(
            f"{cls.__name__}() takes {len(positional)} positional arguments "
            f"but {len(args)} were given"
        )
    setter = object.__setattr__  # frozen records refuse plain assignment, as dataclasses do
    given = 0
    for name, in_signature, default, factory in spec:
        if in_signature and given < len(args):
            if name in kwargs:
                raise TypeError(f"{cls.__name__}() got multiple values for argument '{name}'")
            value = args[given]
            given += 1
        elif in_signature and name in kwargs:
            value = kwargs.pop(name)
        elif default is not MISSING:
            value = default
        elif factory is not MISSING:
            value = factory()
        elif in_signature:
            raise TypeError(f"{cls.__name__}() missing required argument: '{name}'")
        else:
            continue  # init=False without a default: left unset, as dataclasses leave it
        setter(self, name, value)
    if kwargs:
        unexpected = next(iter(kwargs))
        raise TypeError(f"{cls.__name__}() got an unexpected keyword argument '{unexpected}'")
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _compared(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, name) for name in type(self).__record_compared__)


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _compared(self) == _compared(other)


def _hash(self: Any) -> int:
    return hash(_compared(self))


def _repr(self: Any) -> str:
    cls = type(self)
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in cls.__record_shown__)
    return f"{cls.__qualname__}({shown})"


def _refuse_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _is_class_var(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return str(text).split("[", 1)[0].rsplit(".", 1)[-1] in ("ClassVar", "InitVar")


def _own_field(cls: type, name: str) -> Field:
    value = cls.__dict__.get(name, MISSING)
    if isinstance(value, Field):
        f = value
    elif type(value).__name__ == "Field" and type(value).__module__ == "dataclasses":
        raise TypeError(f"{cls.__name__}.{name}: use orchestrator.records.field, not dataclasses'")
    else:
        f = Field(default=value)
    f.name = name
    if f.default is not MISSING and type(f.default).__hash__ is None:
        raise ValueError(
            f"mutable default {type(f.default)} for field {name} is not allowed: "
            "use default_factory"
        )
    # As dataclasses leave it: the class attribute is the default, or absent.
    if f.default is not MISSING:
        setattr(cls, name, f.default)
    elif name in cls.__dict__:
        delattr(cls, name)
    return f


def _collect_fields(cls: type, frozen: bool) -> tuple[Field, ...]:
    collected: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        if "__dataclass_fields__" in base.__dict__:
            raise TypeError(f"{cls.__name__}: records do not inherit from dataclasses")
        if "__record_fields__" in base.__dict__:
            if base.__record_frozen__ != frozen:
                raise TypeError(f"{cls.__name__}: frozen and mutable records do not mix")
            collected.update((f.name, f) for f in base.__record_fields__)
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if _is_class_var(annotation):
            if "InitVar" in str(annotation):
                raise TypeError(f"{cls.__name__}.{name}: records take no InitVar")
            continue
        collected[name] = _own_field(cls, name)
    result = tuple(collected.values())
    seen_default = False
    for f in result:
        if not f.init:
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument '{f.name}' follows default argument")
    return result


def _build(cls: T, frozen: bool) -> T:
    for name in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__"):
        if name in cls.__dict__ and not (name == "__hash__" and cls.__dict__[name] is None):
            raise TypeError(f"{cls.__name__} defines {name}; use @dataclass instead")
    found = _collect_fields(cls, frozen)
    if not cls.__doc__:
        cls.__doc__ = f"{cls.__name__}({', '.join(f.name for f in found)})"
    cls.__record_fields__ = found
    cls.__record_frozen__ = frozen
    cls.__record_init__ = tuple((f.name, f.init, f.default, f.default_factory) for f in found)
    cls.__record_positional__ = tuple(f.name for f in found if f.init)
    cls.__record_compared__ = tuple(f.name for f in found if f.compare)
    cls.__record_shown__ = tuple(f.name for f in found if f.repr)
    cls.__match_args__ = cls.__record_positional__
    cls.__init__ = _init
    cls.__repr__ = _repr
    cls.__eq__ = _eq
    cls.__hash__ = _hash if frozen else None  # the dataclass rule for eq=True
    if frozen:
        cls.__setattr__ = _refuse_setattr
        cls.__delattr__ = _refuse_delattr
    return cls


@overload
def record(cls: T, /) -> T: ...
@overload
def record(*, frozen: bool = True) -> Callable[[T], T]: ...
def record(cls: T | None = None, /, *, frozen: bool = True) -> T | Callable[[T], T]:
    """Decorate a class as a record: `@record` (frozen) or `@record(frozen=False)`."""
    if cls is None:
        return lambda c: _build(c, frozen)
    return _build(cls, frozen)
