"""`@record`: a dataclass whose methods are shared code instead of code generated per class.

`dataclasses.dataclass(frozen=True)` writes `__init__`, `__repr__`, `__eq__`, `__hash__`,
`__setattr__` and `__delattr__` as source text and compiles each with `exec()`: about 1 ms a
class on a slow machine. `orch plan` defines some forty value types before it prints a line,
so generated methods were a third of its start-up (issue 10: start-up at most 3x bare Python).

`record` lets `dataclass` collect the fields and generate nothing (`init=False, repr=False,
eq=False`), then installs the shared methods below. Callers keep what dataclasses give them:
`fields()`, `replace()`, `asdict()`, defaults and `field(default_factory=...)`, `init=False`,
`repr=False` and `compare=False` fields, `__post_init__`, and `FrozenInstanceError` on
assignment to a frozen record. Equality, hashing and repr follow the dataclass rules: equal
when the classes are the same and the compared fields are equal; a frozen record hashes its
compared fields, a mutable one is unhashable.

Not supported (refused at class creation where it would silently differ): keyword-only
fields, `InitVar`, inheritance between records, `order=True`, `slots=True`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError, dataclass, fields
from typing import Any, TypeVar, overload

T = TypeVar("T", bound=type)

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


def _build(cls: T, frozen: bool) -> T:
    for base in cls.__mro__[1:]:
        if "__record_init__" in base.__dict__ or "__dataclass_fields__" in base.__dict__:
            raise TypeError(f"{cls.__name__}: records do not inherit from dataclasses")
    for name in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__"):
        if name in cls.__dict__ and not (name == "__hash__" and cls.__dict__[name] is None):
            raise TypeError(f"{cls.__name__} defines {name}; use @dataclass instead")
    if not cls.__doc__:
        # dataclass would derive one from inspect.signature(cls), which for the inherited
        # object.__init__ parses a text signature with tokenize and ast: ~0.5 ms a class.
        cls.__doc__ = f"{cls.__name__}({', '.join(cls.__dict__.get('__annotations__', ()))})"
    cls = dataclass(cls, init=False, repr=False, eq=False)  # collects fields, generates nothing
    spec = []
    for f in fields(cls):
        if f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: records take no keyword-only fields")
        spec.append((f.name, f.init, f.default, f.default_factory))
    cls.__record_init__ = tuple(spec)
    cls.__record_positional__ = tuple(name for name, in_signature, *_ in spec if in_signature)
    cls.__record_compared__ = tuple(f.name for f in fields(cls) if f.compare)
    cls.__record_shown__ = tuple(f.name for f in fields(cls) if f.repr)
    cls.__init__ = _init
    cls.__repr__ = _repr
    cls.__eq__ = _eq
    cls.__hash__ = _hash if frozen else None  # the dataclass rule for eq=True
    if frozen:
        cls.__setattr__ = _refuse_setattr
        cls.__delattr__ = _refuse_delattr
    cls.__dataclass_params__.frozen = frozen  # type: ignore[attr-defined]
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
