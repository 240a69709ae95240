"""`tl.core._aggregate`: a class decorator for struct-like kernel values (Triton's aggregates).

    @tl.core._aggregate
    class Pair:
        x: tl.tensor
        n: tl.constexpr
        def __init__(self, x, n): self.x = x; self.n = n      # runs at compile time
        @triton.jit
        def scaled(self): return self.x * self.n            # a device method: `p.scaled()`

The annotated fields are the whole state: the constructor must set each, and nothing else can be set.
An instance is a tree node like a tuple (its fields, in annotation order, are the children), so it is
passed to and returned from @jit functions, carried through loops and merged after branches as one value
per runtime leaf, the same way tuples are. @jit methods are called with the instance as first argument."""
from __future__ import annotations

from .core import _AssignedScalar, constexpr, tensor


class BoundJitMethod:
    """`obj.method` for a @jit method of an aggregate: the frontend calls `method(obj, ...)`."""

    def __init__(self, obj, fn):
        self.obj, self.fn = obj, fn
        self.__name__ = getattr(fn, "__name__", "method")
        self.__kl_must_use__ = getattr(fn, "__kl_must_use__", None)  # must_use_result holds for the method too


class _JitMethod:
    """A descriptor that binds a @jit function to the instance it is read from."""

    def __init__(self, fn):
        self.fn = fn

    def __get__(self, obj, owner=None):
        return self.fn if obj is None else BoundJitMethod(obj, self.fn)


def _fits(value, annotation) -> bool:
    if _is_static(annotation):
        return not isinstance(value, tensor)
    if annotation is tensor:
        return isinstance(value, tensor)
    return not isinstance(annotation, type) or isinstance(value, annotation)


def _is_static(annotation) -> bool:
    return annotation is constexpr or annotation == "tl.constexpr"


def _aggregate(cls):
    """Make `cls` an aggregate kernel value type (see the module docstring). Its constexpr fields are part
    of the value's type (they specialize helpers and must agree where branches merge); only the other
    fields are the tree's children, so a loop or a call never turns a constexpr field into a runtime value."""
    fields = list(getattr(cls, "__annotations__", {}))
    static = [f for f in fields if _is_static(cls.__annotations__[f])]
    dynamic = [f for f in fields if f not in static]
    init = cls.__dict__.get("__init__")

    def __new__(this, *args, **kwargs):
        obj = object.__new__(this)
        if init is not None:
            init(obj, *args, **kwargs)
        missing = [f for f in fields if f not in obj.__dict__]
        if missing:
            raise AttributeError(f"the constructor of {cls.__name__} did not set field '{missing[0]}'; an aggregate's "
                                 "constructor must set every annotated field")
        return obj

    def __setattr__(self, name, value):
        if name not in fields:
            raise AttributeError(f"{cls.__name__} has no field '{name}' (its fields are the annotated names: "
                                 f"{', '.join(fields)})")
        ann = cls.__annotations__[name]
        if ann is tensor and isinstance(value, _AssignedScalar) and tensor._sem is not None:
            value = tensor._sem.to_tensor(value)  # `x = 11` is a scalar tensor in Triton: it fits a tensor field
        if not _fits(value, ann):
            raise TypeError(f"{cls.__name__}.{name} is annotated {getattr(ann, '__name__', ann)}, got "
                            f"{type(value).__name__}")
        object.__setattr__(self, name, value)

    def _kl_rebuild(self, items):
        """A copy of this instance holding `items` as its non-constexpr fields, without running the
        constructor (the pytree's rebuild: values cross a call or a loop as their runtime leaves)."""
        obj = object.__new__(type(self))
        for f in static:
            object.__setattr__(obj, f, self.__dict__[f])
        for f, v in zip(dynamic, items):
            object.__setattr__(obj, f, v)
        return obj

    def _kl_static(self):
        """The constexpr fields' values: with the class, the part of the value's type fixed at compile time."""
        return tuple(self.__dict__[f] for f in static)

    def __repr__(self):
        return f"{cls.__name__}({', '.join(f'{f}={self.__dict__.get(f)!r}' for f in fields)})"

    body = {"__kl_aggregate__": True, "_kl_fields": tuple(fields), "__new__": __new__,
            "__init__": lambda self, *a, **k: None, "__setattr__": __setattr__,
            "_kl_rebuild": _kl_rebuild, "_kl_static": _kl_static, "__repr__": __repr__,
            "__iter__": lambda self: iter([self.__dict__[f] for f in dynamic]),  # the pytree walks these
            "__len__": lambda self: len(dynamic),
            "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
            "__annotations__": dict(getattr(cls, "__annotations__", {}))}
    for name, member in cls.__dict__.items():
        if name in body or name in ("__dict__", "__weakref__", "__init__"):
            continue
        body[name] = _JitMethod(member) if hasattr(member, "_kl_source") else member
    return type(cls.__name__, (), body)


def is_aggregate(v) -> bool:
    return getattr(type(v), "__kl_aggregate__", False)
