"""The language's objects: `constexpr`, `tensor`, dtypes, and the `@builtin` marker.

Builtins are ordinary Python functions that receive the compiler's `Semantic` object as `_sem`;
the frontend supplies it. Called outside a kernel they explain themselves instead of failing oddly.
"""
from __future__ import annotations

import builtins as _py
import functools

from ..compiler.types import (  # noqa: F401 - re-exported as tl.*
    BlockPtrType,
    DType,
    PointerType,
    TensorType,
    Type,
    bfloat16,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    literal_dtype,
    uint8,
    uint16,
    uint32,
    uint64,
)

dtype = DType
pointer_type = PointerType
block_type = TensorType


def get_int_dtype(bitwidth: int, signed: bool) -> DType:
    """The integer dtype of a width and signedness (Triton's `core.get_int_dtype`; int1 for width 1)."""
    bitwidth = unwrap(bitwidth)
    if bitwidth == 1:
        return int1
    found = {(8, True): int8, (16, True): int16, (32, True): int32, (64, True): int64, (8, False): uint8,
             (16, False): uint16, (32, False): uint32, (64, False): uint64}.get((bitwidth, bool(unwrap(signed))))
    if found is None:
        raise ValueError(f"get_int_dtype: no integer dtype of {bitwidth} bits (1, 8, 16, 32 or 64)")
    return found


class constexpr:
    """Marks a parameter whose value is known at compile time (`BLOCK: tl.constexpr`)."""

    def __init__(self, value):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self):
        return f"constexpr[{self.value!r}]"

    def __index__(self):
        return self.value

    def __bool__(self):
        return bool(self.value)

    def __eq__(self, other):
        return self.value == (other.value if isinstance(other, constexpr) else other)

    def __hash__(self):
        return hash(self.value)

    @property
    def type(self):
        return constexpr_type(self.value)


def _constexpr_op(op, reflected=False):
    """Python arithmetic on compile-time values stays compile-time (`tl.constexpr(4) * 2` is constexpr[8]), as in
    Triton, where helpers and aggregates compute shapes from constexprs; with a kernel tensor the tensor's
    operator runs instead."""

    def method(self, other):
        o = other.value if isinstance(other, constexpr) else other
        if isinstance(o, tensor):
            return NotImplemented
        return constexpr(op(o, self.value) if reflected else op(self.value, o))

    return method


def _install_constexpr_ops():
    import operator as _op

    for name, fn in [("add", _op.add), ("sub", _op.sub), ("mul", _op.mul), ("truediv", _op.truediv),
                     ("floordiv", _op.floordiv), ("mod", _op.mod), ("pow", _op.pow), ("lshift", _op.lshift),
                     ("rshift", _op.rshift), ("and", _op.and_), ("or", _op.or_), ("xor", _op.xor)]:
        setattr(constexpr, f"__{name}__", _constexpr_op(fn))
        setattr(constexpr, f"__r{name}__", _constexpr_op(fn, reflected=True))
    for name, fn in [("lt", _op.lt), ("le", _op.le), ("gt", _op.gt), ("ge", _op.ge)]:
        setattr(constexpr, f"__{name}__", _constexpr_op(fn))
    constexpr.__neg__ = lambda self: constexpr(-self.value)
    constexpr.__pos__ = lambda self: constexpr(+self.value)
    constexpr.__invert__ = lambda self: constexpr(~self.value)


class constexpr_type:
    """The type of a compile-time value (`isinstance(x.type, tl.constexpr_type)` tells constexprs apart)."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, constexpr_type) and self.value == other.value

    def __hash__(self):
        return hash(("constexpr_type", repr(self.value)))

    def __repr__(self):
        return f"constexpr_type[{self.value!r}]"


class const:
    """Annotation marking a pointer to constant data (`x_ptr: tl.const`); a no-op for kernellab."""


void = DType("void", "void", 0)
pi32_t = PointerType(int32)
TRITON_MAX_TENSOR_NUMEL = 2**20  # Triton's bound on a tile's elements; kernellab's semantic checks it too


def unwrap(v):
    """A constexpr's Python value; anything else unchanged."""
    return v.value if isinstance(v, constexpr) else v


_unwrap_if_constexpr = unwrap  # Triton's name, imported by library helpers
CONSTEXPR_0 = constexpr(0)  # Triton's default for constexpr flags (`descending: tl.constexpr = core.CONSTEXPR_0`)


class tensor:
    """A value inside a kernel: a handle to an SSA value plus its type.

    Python operators on tensors go through the active `Semantic`, so helpers written as plain
    Python (sigmoid, softmax, the philox rounds) type-check exactly like kernel code.
    """

    _sem = None  # the Semantic of the kernel being compiled; set by the frontend

    def __init__(self, handle, type):
        self.handle, self.type = handle, type

    @property
    def dtype(self):
        return self.type.scalar

    @property
    def shape(self):
        return _py.tuple(self.type.shape) if not self.type.is_block_ptr() else _py.tuple(self.type.block_shape)

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self):
        return f"tensor<{self.type}>"

    def __bool__(self):
        raise TypeError("a runtime tensor has no Python truth value here; use it in `if` / `while` "
                        "directly or use tl.where")

    # Operators: delegated to the Semantic.
    def _bin(op, reflected=False):
        def f(self, other):
            s = tensor._sem
            return s.binary(op, other, self) if reflected else s.binary(op, self, other)
        return f

    __add__, __radd__ = _bin("+"), _bin("+", True)
    __sub__, __rsub__ = _bin("-"), _bin("-", True)
    __mul__, __rmul__ = _bin("*"), _bin("*", True)
    __truediv__, __rtruediv__ = _bin("/"), _bin("/", True)
    __floordiv__, __rfloordiv__ = _bin("//"), _bin("//", True)
    __mod__, __rmod__ = _bin("%"), _bin("%", True)
    __and__, __rand__ = _bin("&"), _bin("&", True)
    __or__, __ror__ = _bin("|"), _bin("|", True)
    __xor__, __rxor__ = _bin("^"), _bin("^", True)
    __lshift__, __rlshift__ = _bin("<<"), _bin("<<", True)
    __rshift__, __rrshift__ = _bin(">>"), _bin(">>", True)
    __lt__, __le__ = _bin("<"), _bin("<=")
    __gt__, __ge__ = _bin(">"), _bin(">=")
    __eq__, __ne__ = _bin("=="), _bin("!=")
    __hash__ = object.__hash__
    del _bin

    def __pow__(self, other):
        raise TypeError("operator ** needs compile-time (constexpr) operands; for runtime values multiply "
                        "(x * x) or use tl.exp2(y * tl.log2(x))")

    __rpow__ = __pow__

    def __neg__(self):
        return tensor._sem.unary("-", self)

    def __pos__(self):
        return self

    def __invert__(self):
        return tensor._sem.unary("~", self)

    def __getitem__(self, index):
        return tensor._sem.subscript(self, index)

    # Methods: the builtins that take the tensor first.
    def to(self, dtype, fp_downcast_rounding=None, bitcast=False):
        return tensor._sem.cast(self, unwrap(dtype), bitcast=unwrap(bitcast), rounding=unwrap(fp_downcast_rounding))

    @property
    def T(self):
        return tensor._sem.permute(self, None)

    def __getattr__(self, name):
        from . import _TENSOR_METHODS

        if name in _TENSOR_METHODS:
            fn = _TENSOR_METHODS[name]
            return functools.partial(fn, self, _sem=tensor._sem)
        raise AttributeError(f"tensor has no attribute '{name}'")


class tuple(_py.tuple):
    """`tl.tuple`: an immutable sequence of kernel values. A Python tuple underneath, so indexing, `len`,
    iteration, `+`, `==` and unpacking behave as in Python; namedtuples work alike. Passed to or returned
    from @jit functions and launches, its runtime leaves travel as separate IR values."""

    def __new__(cls, args=(), type=None):
        return _py.tuple.__new__(cls, args)

    def __add__(self, other):
        return tuple(_py.tuple(self) + _py.tuple(other))

    def __radd__(self, other):
        return tuple(_py.tuple(other) + _py.tuple(self))

    def __mul__(self, n):
        return tuple(_py.tuple(self) * unwrap(n))

    def __getitem__(self, idx):
        out = _py.tuple.__getitem__(self, unwrap(idx))
        return tuple(out) if isinstance(idx, slice) else out

    def __repr__(self):
        return "(" + ", ".join(repr(x) for x in self) + ")"


class _DescriptorLayout:
    """The compile-time part of a tensor descriptor (block shape and padding): one leaf of the
    descriptor's tree, so passing it to a helper, returning it or carrying it through a loop keeps it
    compile-time instead of turning its numbers into runtime scalars."""

    __slots__ = ("block_shape", "padding")

    def __init__(self, block_shape, padding):
        self.block_shape, self.padding = _py.tuple(int(b) for b in block_shape), str(padding)

    def __eq__(self, other):
        return isinstance(other, _DescriptorLayout) and (self.block_shape, self.padding) == \
            (other.block_shape, other.padding)

    def __hash__(self):
        return hash((self.block_shape, self.padding))

    def __repr__(self):
        return f"block{list(self.block_shape)}{'' if self.padding == 'zero' else '_' + self.padding}"


class tensor_descriptor(_py.tuple):
    """`tl.tensor_descriptor`: a tensor in global memory (base pointer, shape, strides) read and written in
    tiles of `block_shape`; made by `tl.make_tensor_descriptor` or passed from the host as a
    `TensorDescriptor`. A tree of (base, shape, strides, layout) underneath, like a namedtuple, so it
    crosses helper calls, returns, loops and branches the way tuples do. Its loads and stores are
    block-pointer loads and stores checked on every dimension (out-of-bounds reads give the padding,
    out-of-bounds writes are dropped), so they share the block pointer's code paths (TMA on sm_90)."""

    _fields = ("base", "shape", "strides", "layout")

    def __new__(cls, base, shape, strides, layout):
        return _py.tuple.__new__(cls, (base, tuple(shape), tuple(strides), layout))

    base = property(lambda self: _py.tuple.__getitem__(self, 0))
    shape = property(lambda self: _py.tuple.__getitem__(self, 1))
    strides = property(lambda self: _py.tuple.__getitem__(self, 2))
    layout = property(lambda self: _py.tuple.__getitem__(self, 3))

    @property
    def block_shape(self):
        return tuple(self.layout.block_shape)

    @property
    def padding(self):
        return self.layout.padding

    @property
    def dtype(self):
        return self.base.type.elem

    @property
    def block_type(self):
        return TensorType(list(self.layout.block_shape), self.dtype)

    def __repr__(self):
        return f"tensor_descriptor<{self.dtype}, {self.layout!r}>"

    def load(self, offsets, cache_modifier="", eviction_policy=""):
        return tensor._sem.descriptor_load(self, offsets, unwrap(cache_modifier), unwrap(eviction_policy))

    def store(self, offsets, value, store_reduce=""):
        return tensor._sem.descriptor_store(self, offsets, value)

    def gather(self, *args):
        """Rows `x_offsets` (a 1-D tensor), columns from `y_offset`, of a 2-D descriptor with one-row blocks."""
        return tensor._sem.descriptor_gather(self, *args)

    def scatter(self, value, *args):
        return tensor._sem.descriptor_scatter(self, value, *args)

    def atomic_add(self, offsets, value):
        return tensor._sem.descriptor_atomic(self, "add", offsets, value)

    def atomic_min(self, offsets, value):
        return tensor._sem.descriptor_atomic(self, "min", offsets, value)

    def atomic_max(self, offsets, value):
        return tensor._sem.descriptor_atomic(self, "max", offsets, value)

    def atomic_and(self, offsets, value):
        return tensor._sem.descriptor_atomic(self, "and", offsets, value)

    def atomic_or(self, offsets, value):
        return tensor._sem.descriptor_atomic(self, "or", offsets, value)

    def atomic_xor(self, offsets, value):
        return tensor._sem.descriptor_atomic(self, "xor", offsets, value)


tensor_descriptor_base = tensor_descriptor


class _AssignedScalar:
    """Mixin for a Python number a kernel assigned to a variable (`x = 1`). Triton turns such a value into
    a scalar tensor: it has a `.dtype` (int32 for 1, fp32 for 1.0) and, in arithmetic with tensors, it
    promotes as that dtype, not as a weak literal. kernellab keeps it a Python number too, so it still
    works where a compile-time value is needed (`BLOCK = 128; tl.arange(0, BLOCK)`)."""

    __slots__ = ()

    @property
    def dtype(self):
        return literal_dtype(self.base())

    @property
    def type(self):
        return self.dtype


class scalar_int(_AssignedScalar, int):
    def base(self):
        return int(self)


class scalar_float(_AssignedScalar, float):
    def base(self):
        return float(self)


def as_assigned(v):
    """`v` tagged as an assigned scalar when it is a plain Python int or float (bool stays bool)."""
    if type(v) is int:
        return scalar_int(v)
    if type(v) is float:
        return scalar_float(v)
    return v


class CalledOutsideKernel(RuntimeError):
    pass


def builtin(fn):
    """Marks a language function; the frontend calls it with `_sem=`. Triton spells that parameter `_semantic`:
    a builtin written so (`@tl.core.builtin def f(x, _semantic=None)`) gets it under that name, and callers may
    pass either."""
    import inspect

    try:
        name = "_semantic" if "_semantic" in inspect.signature(fn).parameters else "_sem"
    except (TypeError, ValueError):
        name = "_sem"

    @functools.wraps(fn)
    def wrapper(*args, _sem=None, _semantic=None, **kwargs):
        sem = _sem if _sem is not None else _semantic if _semantic is not None else tensor._sem
        if sem is None:
            raise CalledOutsideKernel(f"tl.{fn.__name__} can only be called inside a @kernellab.jit function")
        kwargs[name] = sem
        return fn(*args, **kwargs)

    wrapper.__kl_builtin__ = True
    return wrapper


class static_range:
    """A `for` loop the frontend unrolls: every iteration sees a constexpr index."""

    def __init__(self, arg1, arg2=None, step=None):
        if arg2 is None:
            self.start, self.end = 0, unwrap(arg1)
        else:
            self.start, self.end = unwrap(arg1), unwrap(arg2)
        self.step = 1 if step is None else unwrap(step)


class range:
    """`tl.range`: a runtime loop with pipelining hints (`num_stages`, `loop_unroll_factor`: k copies of the body per
    iteration, compiler/passes/unroll_loops.py; `flatten`: fuse the
    loop with the one loop nested in it so the pipeliner runs across outer iterations, see
    compiler/passes/flatten_loops.py; `warp_specialize`: on sm_90 a producer warpgroup issues the loop's TMA copies,
    passes/warp_specialize.py (left unsaid, kernellab specializes attention's key loop where it measured faster);
    `disable_licm`: loop-invariant code stays in the loop, for kernellab's licm pass and
    LLVM's). Triton's other hints are accepted and do not change the loop."""

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None,
                 disallow_acc_multi_buffer=False, flatten=False, warp_specialize=None, disable_licm=False):
        if arg2 is None:
            self.start, self.end = 0, arg1
        else:
            self.start, self.end = arg1, arg2
        self.step = 1 if step is None else step
        self.num_stages = unwrap(num_stages)
        self.loop_unroll_factor = unwrap(loop_unroll_factor)
        self.disable_licm = bool(unwrap(disable_licm))
        self.flatten = bool(unwrap(flatten))
        ws = unwrap(warp_specialize)  # None: not said (the compiler may choose); True / False: the user's word
        self.warp_specialize = None if ws is None else bool(ws)


class PropagateNan:
    NONE = 0
    ALL = 0xFFFF


from .aggregate import _aggregate  # noqa: E402,F401 - tl.core._aggregate; defined over the classes above

_install_constexpr_ops()
