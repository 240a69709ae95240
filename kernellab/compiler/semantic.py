"""Typing rules and op construction: what `a + b`, `tl.load(...)` or `x.to(tl.float16)` means.

Follows Triton's semantics: NumPy-like broadcasting, C-style integer `//` and `%`, and Triton's
promotion (Python scalars are "weak": they don't widen a tensor of the same or a higher kind).
Every method returns a `tensor` (or a Python value for compile-time constants) and emits ops
through the builder at the current source location.
"""
from __future__ import annotations

import numbers

from ..errors import SemanticError
from ..language.core import TRITON_MAX_TENSOR_NUMEL, _AssignedScalar, tensor, unwrap
from .ir import Block, Builder
from .types import (
    DTYPES,
    BlockPtrType,
    DType,
    PointerType,
    TensorType,
    bfloat16,
    block_of,
    float16,
    float32,
    float64,
    int1,
    int32,
    int64,
    literal_dtype,
)


def _is_py_number(x):
    """A weak Python literal; a number the kernel assigned to a variable is a typed scalar instead."""
    return isinstance(x, numbers.Number) and not isinstance(x, (tensor, _AssignedScalar))


_TL_NAMES = {"i1": "int1", "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def tl_name(t: DType) -> str:
    """The `tl.*` spelling of a dtype (i32 -> int32, bf16 -> bfloat16), for messages."""
    return _TL_NAMES.get(t.ir) or t.name


_DTYPE_SPELLINGS = {**{tl_name(t): t for t in DTYPES.values()}, **DTYPES,
                    "bool": int1, "fp16": float16, "fp32": float32, "fp64": float64}


def as_dtype(value, what: str, pointers=False):
    """`value` as a dtype, or a SemanticError naming `what` wanted one: a string ('int32') or a Python
    type would otherwise fail deep inside typing with an AttributeError."""
    value = unwrap(value)
    if isinstance(value, DType) or (pointers and isinstance(value, PointerType)):
        return value
    if isinstance(value, PointerType):
        raise SemanticError(f"{what} needs a scalar dtype such as tl.float32, got the pointer type {value}")
    if isinstance(value, str) and value in _DTYPE_SPELLINGS:
        raise SemanticError(f"{what} needs a dtype object, got the string {value!r}; write "
                            f"tl.{tl_name(_DTYPE_SPELLINGS[value])}")
    raise SemanticError(f"{what} needs a dtype such as tl.float32 or tl.int32, got {value!r}")


def integer_promote(a: DType, b: DType) -> DType:
    if a.kind == "bool" and b.kind == "bool":
        return int1
    sa = "int" if a.kind in ("int", "bool") else a.kind
    sb = "int" if b.kind in ("int", "bool") else b.kind
    if sa == sb:
        return a if a.bits > b.bits else b
    if sa == "uint":
        return a if a.bits >= b.bits else b
    return b if b.bits >= a.bits else a


# Triton's kinds for scalar promotion: bool < integral (signed and unsigned alike) < floating point,
# so `uint8_tensor + 3` stays uint8 (Triton's docs: `(uint8, int) -> uint8`).
_PROMOTION_KIND = {"bool": 0, "int": 1, "uint": 1, "float": 2}


def computation_type(a: DType, a_scalar: bool, b: DType, b_scalar: bool, div_or_mod: bool) -> DType:
    """The dtype two operands are converted to before an arithmetic op (Triton's rules)."""
    if a_scalar != b_scalar:
        s, t = (a, b) if a_scalar else (b, a)
        if _PROMOTION_KIND[s.kind] <= _PROMOTION_KIND[t.kind]:
            if div_or_mod and t in (float16, bfloat16):
                return float32
            return t
    if a == float64 or b == float64:
        return float64
    if a == float32 or b == float32:
        return float32
    if a == float16 or b == float16:
        return float32 if div_or_mod else float16
    if a == bfloat16 or b == bfloat16:
        if div_or_mod or a != b:
            return float32
        return bfloat16
    if _is_fp8(a) and _is_fp8(b):  # two fp8 values: their type, or f16 when they differ (Triton)
        return a if a == b else float16
    if _is_fp8(a) or _is_fp8(b):
        raise SemanticError(f"cannot combine {tl_name(a)} and {tl_name(b)}; convert the fp8 operand with "
                            ".to(tl.float32) first")
    if div_or_mod and a.kind != b.kind and "bool" not in (a.kind, b.kind):
        raise SemanticError(f"Cannot use /, // or % with {tl_name(a)} and {tl_name(b)} because they have different "
                            "signedness; cast one operand first")
    return integer_promote(a, b)


def _is_fp8(t) -> bool:
    return getattr(t, "ir", "").startswith("f8")


_CMP_INT = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
_CMP_FLOAT = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}


class Semantic:
    def __init__(self, builder: Builder):
        self.b = builder
        self.call_jit = None  # set by the frontend: (JITFunction, args, kwargs) -> results
        self.options: dict = {}  # the launch options (num_warps, ...), set by the frontend
        self.loop_hints: dict = {}  # hints a loop's condition gives (tl.condition(..., disable_licm=True))

    # ---------------------------------------------------------------- helpers
    def emit(self, name, operands, result_type, attrs=None, regions=()):
        ops = [x.handle for x in operands]
        rtypes = [] if result_type is None else [result_type]
        op = self.b.create(name, ops, rtypes, attrs, regions)
        return tensor(op.result, result_type) if result_type is not None else op

    def const(self, value, ty) -> tensor:
        el = ty.scalar
        if el.is_floating():
            value = float(value)
        elif el == int1:
            value = bool(value)
        else:  # wrap to the type's range, as a cast of the literal would
            value = int(value) & ((1 << el.bits) - 1)
            if el.kind == "int" and value >= 1 << (el.bits - 1):
                value -= 1 << el.bits
        return self.emit("arith.constant", [], ty, {"value": value})

    def to_tensor(self, x, dtype: DType | None = None) -> tensor:
        x = unwrap(x)
        if isinstance(x, tensor):
            return x
        if isinstance(x, _AssignedScalar):
            return self.const(x.base(), dtype or x.dtype)
        if _is_py_number(x):
            return self.const(x, dtype or literal_dtype(x))
        if x is None:
            raise SemanticError("None cannot be used as a value here")
        if hasattr(x, "data_ptr") or hasattr(x, "__array_interface__"):
            shape = tuple(getattr(x, "shape", ()))
            raise SemanticError(f"a {type(x).__module__.split('.')[0]} {type(x).__name__} (shape {list(shape)}, dtype "
                                f"{getattr(x, 'dtype', '?')}) from Python cannot be used inside a kernel; pass it as "
                                "a kernel argument and tl.load from it")
        text = repr(x)
        text = text if len(text) <= 60 else text[:57] + "..."
        raise SemanticError(f"{type(x).__name__} value {text} cannot be used as a tensor")

    def numeric(self, x, what: str) -> tensor:
        """`x` as a tensor of numbers: a pointer handed to arithmetic (tl.abs(ptr)) gets an error that
        says to load first, instead of an AttributeError from the dtype checks that follow."""
        x = self.to_tensor(x)
        if x.type.is_block_ptr() or x.type.scalar.is_ptr():
            raise SemanticError(f"{what} needs numbers, got a pointer ({x.type}); load the values with "
                                "tl.load first")
        return x

    # ---------------------------------------------------------------- shapes
    def splat(self, x: tensor, shape) -> tensor:
        if tuple(shape) == x.shape:
            return x
        if x.shape:
            return self.broadcast_to(x, shape)
        check_numel(shape)
        return self.emit("tt.splat", [x], TensorType(shape, x.type))

    def broadcast_to(self, x, shape) -> tensor:
        x = self.to_tensor(x)
        shape = tuple(unwrap(s) for s in shape)
        if x.shape == shape:
            return x
        if not x.shape:
            return self.splat(x, shape)
        if len(x.shape) > len(shape):
            raise SemanticError(f"cannot broadcast shape {list(x.shape)} to {list(shape)}")
        while len(x.shape) < len(shape):
            x = self.expand_dims(x, 0)
        for have, want in zip(x.shape, shape):
            if have != want and have != 1:
                raise SemanticError(f"cannot broadcast shape {list(x.shape)} to {list(shape)}")
        check_numel(shape)
        return self.emit("tt.broadcast", [x], TensorType(shape, x.type.scalar))

    def broadcast_shapes(self, *shapes):
        rank = max(len(s) for s in shapes)
        out = []
        for i in range(rank):
            dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
            dims.discard(1)
            if len(dims) > 1:
                raise SemanticError("shapes are incompatible for broadcasting: "
                                    + " vs ".join(str(list(s)) for s in shapes))
            out.append(dims.pop() if dims else 1)
        return tuple(out)

    def broadcast_pair(self, a: tensor, b: tensor):
        if a.shape == b.shape:
            return a, b
        shape = self.broadcast_shapes(a.shape, b.shape)
        return self.broadcast_to(a, shape), self.broadcast_to(b, shape)

    def expand_dims(self, x, axis) -> tensor:
        """Insert size-1 dims. A tuple of axes (negative ones too) names positions in the result, as in
        Triton and NumPy: `expand_dims(x of [N], (0, -1))` is [1, N, 1]."""
        x = self.to_tensor(x)
        axes = [unwrap(a) for a in axis] if isinstance(unwrap(axis), (list, tuple)) else [unwrap(axis)]
        rank = len(x.shape) + len(axes)
        for ax in axes:
            if not isinstance(ax, int) or not -rank <= ax < rank:
                raise SemanticError(f"expand_dims: invalid axis {ax} for a result of rank {rank} (expected "
                                    f"{-rank} <= axis < {rank})")
        norm = [ax % rank for ax in axes]
        if len(set(norm)) != len(norm):
            raise SemanticError(f"expand_dims received duplicate axes, normalized axes = {norm}")
        for ax in sorted(norm):
            shape = list(x.shape)
            shape.insert(ax, 1)
            x = self.emit("tt.expand_dims", [x], TensorType(shape, x.type.scalar), {"axis": ax})
        return x

    def item(self, x) -> tensor:
        """A 1-element tensor as a scalar; anything larger is an error (Triton's unsplat)."""
        x = self.to_tensor(x)
        if not x.shape:
            return x
        if x.numel != 1:
            raise SemanticError(f".item() needs a tensor of one element, got shape {list(x.shape)}")
        return self.reshape(x, ())

    def reshape(self, x, shape, can_reorder=False) -> tensor:
        x = self.to_tensor(x)
        shape = tuple(unwrap(s) for s in (shape if isinstance(shape, (list, tuple)) else [shape]))
        n = 1
        for s in shape:
            n *= s
        if n != (x.numel if x.shape else 1):
            raise SemanticError(f"cannot reshape {list(x.shape)} ({x.numel} elements) to {list(shape)}")
        if shape == x.shape:
            return x
        if not x.shape:
            return self.splat(x, shape)
        return self.emit("tt.reshape", [x], block_of(shape, x.type.scalar))

    def permute(self, x, order) -> tensor:
        x = self.to_tensor(x)
        rank = len(x.shape)
        order = list(reversed(range(rank))) if order is None else [unwrap(o) for o in order]
        if sorted(order) != list(range(rank)):
            raise SemanticError(f"permute order {order} is not a permutation of {list(range(rank))}")
        if order == list(range(rank)):
            return x
        shape = [x.shape[o] for o in order]
        return self.emit("tt.trans", [x], TensorType(shape, x.type.scalar), {"order": order})

    def join(self, a, b) -> tensor:
        a, b = self.broadcast_pair(self.to_tensor(a), self.to_tensor(b))
        if a.type != b.type:
            raise SemanticError(f"join needs two tensors of one type, got {a.type} and {b.type}")
        return self.emit("tt.join", [a, b], TensorType(a.shape + (2,), a.type.scalar))

    def split(self, x):
        x = self.to_tensor(x)
        if not x.shape or x.shape[-1] != 2:
            raise SemanticError(f"split needs a last dimension of size 2, got shape {list(x.shape)}")
        ty = block_of(x.shape[:-1], x.type.scalar)
        op = self.b.create("tt.split", [x.handle], [ty, ty])
        return tensor(op.results[0], ty), tensor(op.results[1], ty)

    def cat(self, a, b) -> tensor:
        a, b = self.to_tensor(a), self.to_tensor(b)
        if a.type.scalar != b.type.scalar or a.shape[1:] != b.shape[1:] or not a.shape:
            raise SemanticError(f"cat needs tensors that differ only in dimension 0: {a.type} and {b.type}")
        shape = (a.shape[0] + b.shape[0],) + a.shape[1:]
        return self.emit("tt.cat", [a, b], TensorType(shape, a.type.scalar))

    def gather(self, src, index, axis) -> tensor:
        """tl.gather: the result has the index's shape and the source's dtype (Triton's rules)."""
        src, index = self.to_tensor(src), self.to_tensor(index)
        axis = unwrap(axis)
        if src.type.is_block_ptr() or index.type.is_block_ptr():
            raise SemanticError("tl.gather needs tensors of values, not block pointers; tl.load them first")
        if not index.dtype.is_int() or index.dtype.kind == "bool":
            raise SemanticError(f"tl.gather's index must be an integer tensor, got {index.dtype}")
        rank = len(src.shape)
        if rank == 0 or len(index.shape) != rank:
            raise SemanticError(f"tl.gather needs a source and an index of one rank (at least 1), got shapes "
                                f"{list(src.shape)} and {list(index.shape)}")
        if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
            raise SemanticError(f"tl.gather's axis must be a constexpr integer in [{-rank}, {rank}), got {axis!r}")
        axis %= rank
        for d in range(rank):
            if d != axis and index.shape[d] != src.shape[d]:
                raise SemanticError(f"tl.gather: the index's shape {list(index.shape)} must equal the source's "
                                    f"{list(src.shape)} except along axis {axis} (dimension {d} differs)")
        return self.emit("tt.gather", [src, index], block_of(index.shape, src.type.scalar), {"axis": axis})

    def histogram(self, x, num_bins, mask=None) -> tensor:
        """tl.histogram: i32 counts of the values 0 .. num_bins-1 in a 1-D integer tensor."""
        x = self.to_tensor(x)
        num_bins = unwrap(num_bins)
        if len(x.shape) != 1 or x.type.is_block_ptr():
            raise SemanticError(f"tl.histogram needs a 1-D tensor, got shape {list(x.shape)}")
        if not x.dtype.is_int() or x.dtype.kind == "bool":
            raise SemanticError(f"tl.histogram needs integer values, got {x.dtype}")
        if isinstance(num_bins, bool) or not isinstance(num_bins, int) or num_bins <= 0 or num_bins & (num_bins - 1):
            raise SemanticError(f"tl.histogram's num_bins must be a constexpr power of 2 (it is the result's "
                                f"shape), got {num_bins!r}")
        check_numel((num_bins,))
        ops = [x]
        mask = unwrap(mask)
        if mask is not None:
            mask = self.to_tensor(mask)
            if mask.type.scalar.is_ptr() or mask.dtype.kind != "bool":
                raise SemanticError(f"tl.histogram's mask must be boolean (e.g. offs < n), got {mask.type.scalar}")
            ops.append(self.broadcast_to(mask, x.shape))
        return self.emit("tt.histogram", ops, block_of((num_bins,), int32), {"num_bins": num_bins})

    def subscript(self, x, index) -> tensor:
        x = self.to_tensor(x)
        index = index if isinstance(index, tuple) else (index,)
        dim, out = 0, x
        for item in index:
            item = unwrap(item)
            if item is None:
                out = self.expand_dims(out, dim)
                dim += 1
            elif isinstance(item, slice) and item == slice(None):
                dim += 1
            else:
                raise SemanticError("unsupported tensor index: tensors can only be indexed with None and ':' "
                                    "(e.g. x[:, None])")
        if dim - sum(1 for i in index if unwrap(i) is None) > max(len(x.shape), 1):
            raise SemanticError(f"too many ':' indices for a tensor of rank {len(x.shape)}")
        return out

    # ---------------------------------------------------------------- casts
    def cast(self, x, dst, bitcast=False, rounding=None) -> tensor:
        x = self.to_tensor(x)
        if isinstance(unwrap(dst), TensorType):  # a block type (a block pointer's element_ty): its scalar, as Triton
            dst = unwrap(dst).scalar
        dst = as_dtype(dst, "tl.cast / .to()", pointers=True)
        src = x.type.scalar
        if src == dst:
            return x
        rty = block_of(x.shape, dst)
        if not bitcast and (_is_fp8(src) or _is_fp8(dst)):
            return self._cast_fp8(x, src, dst, rty, rounding)
        if bitcast:
            sbits = 64 if src.is_ptr() else src.bits
            dbits = 64 if dst.is_ptr() else dst.bits
            if sbits != dbits:
                raise SemanticError(f"bitcast needs equal bit widths: {src} has {sbits}, {dst} has {dbits}")
            if src.is_ptr() and not dst.is_ptr():
                return self.emit("tt.ptr_to_int", [x], rty)
            if dst.is_ptr() and not src.is_ptr():
                return self.emit("tt.int_to_ptr", [x], rty)
            return self.emit("arith.bitcast", [x], rty)
        if src.is_ptr() or dst.is_ptr():
            if src.is_ptr() and dst.is_ptr():
                return self.emit("arith.bitcast", [x], rty)
            if src.is_ptr() and dst.kind in ("int", "uint") and dst.bits == 64:
                return self.emit("tt.ptr_to_int", [x], rty)
            if dst.is_ptr() and src.kind in ("int", "uint") and src.bits == 64:
                return self.emit("tt.int_to_ptr", [x], rty)
            if src.is_ptr() and dst == int1:
                z = self.const(0, block_of(x.shape, int64))
                return self.emit("arith.cmpi", [self.emit("tt.ptr_to_int", [x], block_of(x.shape, int64)), z],
                                 block_of(x.shape, int1), {"predicate": "ne"})
            raise SemanticError(f"cannot cast {src} to {dst}")
        if dst == int1:
            zero = self.const(0, x.type)
            if src.is_floating():
                return self.emit("arith.cmpf", [x, zero], rty, {"predicate": "une"})
            return self.emit("arith.cmpi", [x, zero], rty, {"predicate": "ne"})
        if src.is_floating() and dst.is_floating():
            if src.bits == dst.bits:  # f16 <-> bf16 goes through f32
                return self.cast(self.cast(x, float32), dst)
            if (unwrap(rounding) or "rtne").lower() == "rtz" and dst.bits < src.bits:
                if src != float32:
                    raise SemanticError(f"rounding toward zero (rtz) is not supported for {tl_name(src)} to "
                                        f"{tl_name(dst)}; Triton supports it from float32 (to float16, bfloat16, "
                                        "float8e5): cast to tl.float32 first, or use the default 'rtne'")
                return self.emit("tt.fp_to_fp", [x], rty, {"rounding": "rtz"})  # cvt.rz, as Triton
            return self.emit("arith.extf" if dst.bits > src.bits else "arith.truncf", [x], rty)
        if src.is_int() and dst.is_floating():
            return self.emit("arith.sitofp" if src.kind == "int" else "arith.uitofp", [x], rty)
        if src.is_floating() and dst.is_int():
            return self.emit("arith.fptosi" if dst.kind == "int" else "arith.fptoui", [x], rty)
        # int -> int
        if dst.bits > src.bits:
            return self.emit("arith.extsi" if src.kind == "int" else "arith.extui", [x], rty)
        if dst.bits < src.bits:
            return self.emit("arith.trunci", [x], rty)
        return self.emit("arith.bitcast", [x], rty)

    def _cast_fp8(self, x, src, dst, rty, rounding):
        """Conversions with an 8-bit float side, as Triton 3.6 allows them on NVIDIA GPUs (tt.fp_to_fp)."""
        name = f"{tl_name(src)} to {tl_name(dst)}"
        if src.is_ptr() or dst.is_ptr() or not (src.is_floating() and dst.is_floating()):
            raise SemanticError(f"cannot cast {name}: fp8 values convert only to and from floating-point types "
                                "(go through tl.float32, or use bitcast=True for the raw byte)")
        if _is_fp8(src) and _is_fp8(dst):
            raise SemanticError(f"cannot cast {name} directly (Triton has no fp8 -> fp8 conversion); go through "
                                "tl.float16 or tl.float32")
        if dst == float64 or (src == float64 and "f8e4b15" not in (src.ir, dst.ir)):
            if _is_fp8(src):  # exact both ways: widen through f32
                return self.cast(self.emit("tt.fp_to_fp", [x], block_of(x.shape, float32)), float64)
            raise SemanticError(f"cannot cast {name}: Triton converts float64 to fp8 on no GPU; cast to "
                                "tl.float32 first")
        if "f8e4b15" in (src.ir, dst.ir) and (src.ir, dst.ir) not in (("f8e4b15", "f16"), ("f8e4b15", "f32"),
                                                                     ("f16", "f8e4b15"), ("f32", "f8e4b15")):
            raise SemanticError(f"cannot cast {name}: Triton converts float8e4b15 only to and from tl.float16 and "
                                "tl.float32")
        rounding = unwrap(rounding)
        if _is_fp8(src):
            if rounding is not None:
                raise SemanticError("fp_downcast_rounding should be set only for truncating fp conversions; "
                                    f"{name} widens")
            return self.emit("tt.fp_to_fp", [x], rty)
        rounding = (rounding or "rtne").lower()
        if rounding not in ("rtne", "rtz"):
            raise SemanticError(f"fp_downcast_rounding must be 'rtne' or 'rtz', got {rounding!r}")
        if rounding == "rtz" and dst.ir != "f8e4b15" and not (src == float32 and dst.ir == "f8e5"):
            raise SemanticError(f"rounding toward zero (rtz) is not supported for {name}; Triton supports it to "
                                "fp8 only from float32 to float8e5: use the default 'rtne'")
        return self.emit("tt.fp_to_fp", [x], rty, {"rounding": rounding})

    # ---------------------------------------------------------------- arithmetic
    def binary(self, op: str, a, b):
        a, b = unwrap(a), unwrap(b)
        if not isinstance(a, tensor) and not isinstance(b, tensor):
            return _python_binary(op, a, b)
        a_scalar, b_scalar = _is_py_number(a), _is_py_number(b)
        a_raw, b_raw = a, b
        a, b = self.to_tensor(a), self.to_tensor(b)
        if op in ("+", "-") and (a.type.scalar.is_ptr() or b.type.scalar.is_ptr()):
            return self.pointer_arith(op, a, b)
        if a.type.scalar.is_ptr() or b.type.scalar.is_ptr():
            if op in _CMP_INT and a.type.scalar.is_ptr() and b.type.scalar.is_ptr():
                a, b = self.cast(a, int64, bitcast=True), self.cast(b, int64, bitcast=True)
                return self.compare(op, a, b, int64)
            raise SemanticError(f"operator {op} is not defined for pointers ({a.type} and {b.type})")
        if a.type.is_block_ptr() or b.type.is_block_ptr():
            raise SemanticError("block pointers support no arithmetic; use tl.advance")
        div_or_mod = op in ("/", "//", "%")
        ta, tb = a.type.scalar, b.type.scalar
        if op in ("&", "|", "^", "<<", ">>"):
            if not (ta.is_int() and tb.is_int()):
                raise SemanticError(f"invalid operands of type {tl_name(ta)} and {tl_name(tb)} for operator {op}: it "
                                    "needs integer operands")
        ct = computation_type(ta, a_scalar, tb, b_scalar, div_or_mod)
        if _is_fp8(ct):
            raise SemanticError(f"operator {op} on {tl_name(ct)} values is not supported (GPUs have no fp8 "
                                "arithmetic); convert with .to(tl.float32) first")
        if op in ("//", "%") and ct.is_int() and _is_zero_constant(b_raw if b_scalar else b):
            raise SemanticError(f"integer {'division' if op == '//' else 'remainder'} by the constant 0 (`x {op} 0`) "
                                "has no defined result on a GPU; guard the divisor or use a nonzero constant")
        if ct.kind in ("int", "uint"):  # like Triton: a Python int must fit the computation type
            lo, hi = (0, (1 << ct.bits) - 1) if ct.kind == "uint" else (-(1 << ct.bits - 1), (1 << ct.bits - 1) - 1)
            for is_scalar, raw in ((a_scalar, a_raw), (b_scalar, b_raw)):
                if is_scalar and not lo <= raw <= hi:
                    if raw < 0 and ct.kind == "uint":
                        raise SemanticError(f"cannot use the negative scalar {raw} with an unsigned {ct} operand; "
                                            "cast one of them explicitly")
                    raise SemanticError(f"scalar {raw} is out of range for {ct}, the type of this operation; "
                                        "cast the tensor operand to a wider type first")
        if op == "/":
            if ct.is_int():
                ct = float32
        elif op == "//" and not ct.is_int():
            raise SemanticError(f"// is only defined for integers (got {ta} and {tb}); use / and tl.floor")
        # A Python literal becomes a constant of the computation type directly (no cast op).
        if a_scalar and (ct.is_floating() or not isinstance(a_raw, float)):
            a.handle.owner.erase()
            a = self.const(a_raw, ct)
        if b_scalar and (ct.is_floating() or not isinstance(b_raw, float)):
            b.handle.owner.erase()
            b = self.const(b_raw, ct)
        if op in _CMP_INT:
            a, b = self.broadcast_pair(self.cast(a, ct), self.cast(b, ct))
            return self.compare(op, a, b, ct)
        if op in ("&", "|", "^", "<<", ">>"):
            if op in ("<<", ">>") and ct == int1:
                ct = int32 if not (a_scalar or b_scalar) else ct
        a, b = self.broadcast_pair(self.cast(a, ct), self.cast(b, ct))
        f = ct.is_floating()
        name = {
            "+": "addf" if f else "addi", "-": "subf" if f else "subi", "*": "mulf" if f else "muli",
            "/": "divf", "//": "divsi" if ct.kind == "int" else "divui",
            "%": "remf" if f else ("remsi" if ct.kind == "int" else "remui"),
            "&": "andi", "|": "ori", "^": "xori", "<<": "shli",
            # as Triton: arithmetic or logical by the (tensor) left operand's own signedness, not the promoted
            # type's, so int8 >> uint8 sign-extends into the uint8 result
            ">>": "shrsi" if (tb if a_scalar and not b_scalar else ta).kind == "int" else "shrui",
        }.get(op)
        if name is None:
            raise SemanticError(f"unsupported operator {op}")
        return self.emit("arith." + name, [a, b], a.type)

    def compare(self, op, a, b, ct) -> tensor:
        if ct.is_floating():
            pred = _CMP_FLOAT[op]
            name = "arith.cmpf"
        else:
            p = _CMP_INT[op]
            pred = p if p in ("eq", "ne") else ("s" if ct.kind == "int" else "u") + p
            name = "arith.cmpi"
        return self.emit(name, [a, b], block_of(a.shape, int1), {"predicate": pred})

    def pointer_arith(self, op, a, b):
        if a.type.scalar.is_ptr() and b.type.scalar.is_ptr():
            raise SemanticError("cannot add or subtract two pointers; cast them to int64 first")
        if not a.type.scalar.is_ptr():
            if op == "-":
                raise SemanticError("cannot subtract a pointer from an integer")
            a, b = b, a
        if not b.type.scalar.is_int():
            raise SemanticError(f"pointer offsets must be integers, got {b.type.scalar}")
        if b.type.scalar == int1:
            b = self.cast(b, int32)
        if op == "-":
            b = self.unary("-", b)
        a, b = self.broadcast_pair(a, b)
        return self.emit("tt.addptr", [a, b], a.type)

    def unary(self, op, x):
        x = unwrap(x)
        if isinstance(x, tuple):
            # Triton has no unary operators on tuples (`not (0, 0)` is a compile error, not False)
            raise SemanticError(f"unary `{op}` is not defined on a tuple")
        if not isinstance(x, tensor):
            return {"-": lambda v: -v, "+": lambda v: +v, "~": lambda v: ~v, "not": lambda v: not v}[op](x)
        t = x.type.scalar
        if op == "+":
            return x
        if op == "-":
            if t.is_ptr():
                raise SemanticError("cannot negate a pointer")
            if t.is_floating():
                return self.emit("arith.negf", [x], x.type)
            return self.binary("-", self.const(0, x.type), x)
        if op == "~":
            if t.is_ptr() or not t.is_int():
                raise SemanticError(f"~ needs an integer, got {t}")
            return self.emit("arith.xori", [x, self.const(1 if t == int1 else -1 if t.kind == "int" else
                                                          (1 << t.bits) - 1, x.type)], x.type)
        if op == "not":
            return self.compare("==", self.cast(x, int1), self.const(False, block_of(x.shape, int1)), int1)
        raise SemanticError(f"unsupported unary operator {op}")

    def logical(self, op, a, b):
        """`and` / `or` on runtime values: elementwise on booleans."""
        a, b = self.cast(self.to_tensor(a), int1), self.cast(self.to_tensor(b), int1)
        a, b = self.broadcast_pair(a, b)
        return self.emit("arith.andi" if op == "and" else "arith.ori", [a, b], a.type)

    def where(self, cond, x, y):
        cond = self.cast(self.to_tensor(cond), int1)
        xs, ys = _is_py_number(unwrap(x)), _is_py_number(unwrap(y))
        x, y = self.to_tensor(unwrap(x)), self.to_tensor(unwrap(y))
        if x.type.scalar.is_ptr() and y.type.scalar.is_ptr() and x.type.scalar != y.type.scalar:
            raise SemanticError(f"Ternary expression with dynamic condition has inconsistent type: "
                                f"{x.type.scalar} and {y.type.scalar} (a select needs one pointer type)")
        if x.type.scalar.is_ptr() or y.type.scalar.is_ptr():
            ct = x.type.scalar if x.type.scalar.is_ptr() else y.type.scalar
        else:
            ct = computation_type(x.type.scalar, xs, y.type.scalar, ys, False)
        x, y = self.cast(x, ct), self.cast(y, ct)
        shape = self.broadcast_shapes(cond.shape, x.shape, y.shape)
        cond, x, y = self.broadcast_to(cond, shape), self.broadcast_to(x, shape), self.broadcast_to(y, shape)
        return self.emit("arith.select", [cond, x, y], x.type)

    def minmax(self, which, x, y, propagate_nan=0, what=None):
        xs, ys = _is_py_number(unwrap(x)), _is_py_number(unwrap(y))
        what = what or ("tl.maximum" if which == "max" else "tl.minimum")
        x, y = self.numeric(unwrap(x), what), self.numeric(unwrap(y), what)
        ct = computation_type(x.type.scalar, xs, y.type.scalar, ys, False)
        x, y = self.broadcast_pair(self.cast(x, ct), self.cast(y, ct))
        if ct.is_floating():
            name = ("maximumf" if which == "max" else "minimumf") if propagate_nan else \
                ("maxnumf" if which == "max" else "minnumf")
        else:
            name = which + ("si" if ct.kind == "int" else "ui")
        return self.emit("arith." + name, [x, y], x.type)

    def math(self, fn, x, *more):
        x = self.numeric(x, f"tl.{fn}")
        more = [self.numeric(o, f"tl.{fn}") if isinstance(unwrap(o), tensor) else o for o in more]
        t = x.type.scalar
        if fn == "abs":
            if t.is_floating():
                return self.emit("math.absf", [x], x.type)
            if t.kind == "int":
                return self.emit("math.absi", [x], x.type)
            return x
        if fn in ("floor", "ceil") and t.is_int():
            return x
        if not t.is_floating():
            raise SemanticError(f"tl.{fn} needs a floating-point input, got {t}; convert with .to(tl.float32)")
        if fn == "fma":
            ys, zs = more
            shape = self.broadcast_shapes(x.shape, self.to_tensor(ys).shape, self.to_tensor(zs).shape)
            ct = t
            for o in more:
                if not _is_py_number(unwrap(o)):
                    ct = computation_type(ct, False, self.to_tensor(o).type.scalar, False, False)
            ops = [self.broadcast_to(self.cast(self.to_tensor(v, ct if _is_py_number(unwrap(v)) else None), ct), shape)
                   for v in (x, ys, zs)]
            return self.emit("math.fma", ops, ops[0].type)
        names = {"sqrt_rn": "tt.precise_sqrt"}
        return self.emit(names.get(fn, "math." + fn), [x], x.type)

    def math_function(self, op_name, what, *args):
        """A math function of the op catalogue (`ops.math_functions`, e.g. tl.math.tanh or libdevice.atan2):
        operands promoted together as for arithmetic (Python numbers are weak) and broadcast; floats only.
        The result has their type, or int32 for the tests (isnan, isinf, isfinited, signbit), as libdevice."""
        from .ops import info

        op = info(op_name)
        if len(args) != op.arity:
            raise SemanticError(f"{what} takes {op.arity} argument{'s' if op.arity > 1 else ''}, got {len(args)}")
        raw = [unwrap(a) for a in args]
        scalar = [_is_py_number(a) for a in raw]
        xs = [None if weak else self.numeric(a, what) for a, weak in zip(raw, scalar)]
        types = [literal_dtype(a) if weak else x.type.scalar for a, x, weak in zip(raw, xs, scalar)]
        ct, ct_weak = types[0], scalar[0]
        for t, weak in zip(types[1:], scalar[1:]):
            ct, ct_weak = computation_type(ct, ct_weak, t, weak, False), ct_weak and weak
        if not ct.is_floating():
            raise SemanticError(f"{what} needs floating-point operands, got "
                                f"{', '.join(map(str, types))}; convert with .to(tl.float32)")
        if ct.ir == "f64" and op.libdevice and op.libdevice[1] is None:
            raise SemanticError(f"{what} takes float32 (libdevice has no float64 version); convert with "
                                ".to(tl.float32)")
        xs = [self.const(a, ct) if weak else self.cast(x, ct) for a, x, weak in zip(raw, xs, scalar)]
        shape = self.broadcast_shapes(*[x.shape for x in xs])
        xs = [self.broadcast_to(x, shape) for x in xs]
        rt = block_of(shape, int32) if op.result == "i32" else xs[0].type
        return self.emit(op_name, xs, rt)

    # ---------------------------------------------------------------- memory
    def load(self, ptr, mask=None, other=None, boundary_check=(), padding_option="", cache="", evict="",
             volatile=False):
        ptr = self.to_tensor(ptr)
        mask, other = unwrap(mask), unwrap(other)
        if ptr.type.is_block_ptr():
            if mask is not None or other is not None:
                raise SemanticError("block-pointer loads take boundary_check and padding_option, not mask/other")
            checks = self._boundary_check(ptr, boundary_check)
            attrs = {"boundary_check": checks}
            if padding_option:
                if padding_option not in ("zero", "nan"):
                    raise SemanticError(f"padding_option must be 'zero' or 'nan', got {padding_option!r}")
                attrs["padding"] = padding_option
            bt = ptr.type
            return self.emit("tt.load", [ptr], TensorType(bt.block_shape, bt.elem), attrs)
        if not ptr.type.scalar.is_ptr():
            raise SemanticError(f"tl.load needs a pointer, got a value of type {ptr.type}")
        if other is not None and mask is None:
            raise SemanticError("tl.load got `other` without `mask`: `other` only fills masked-off lanes, "
                                "so pass mask= too")
        elem = ptr.type.scalar.elem
        operands = [ptr]
        if mask is not None:
            mask = self._bool_mask(mask, "tl.load")
            if mask.shape and not ptr.shape:
                raise SemanticError(f"mask has shape {list(mask.shape)} but the pointer is a scalar")
            if other is not None and not ptr.shape and getattr(self.to_tensor(other), "shape", ()):
                raise SemanticError("`other` is a tensor but the pointer is a scalar; pass a scalar `other`")
            try:
                shape = self.broadcast_shapes(ptr.shape, mask.shape)
            except SemanticError:
                raise SemanticError(f"mask shape {list(mask.shape)} does not match pointer shape "
                                    f"{list(ptr.shape)}") from None
            ptr, mask = self.broadcast_to(ptr, shape), self.broadcast_to(mask, shape)
            operands = [ptr, mask]
            if other is not None:
                operands.append(self.broadcast_to(self.cast(self.to_tensor(other, elem if _is_py_number(other)
                                                                         and elem.is_floating() else None),
                                                            elem), shape))
        attrs = _cache_attrs("tl.load", cache, evict, _LOAD_CACHE)
        if volatile:
            attrs["volatile"] = True
        return self.emit("tt.load", operands, block_of(ptr.shape, elem), attrs)

    def _boundary_check(self, ptr, boundary_check):
        checks = [unwrap(c) for c in (unwrap(boundary_check) or ())]
        rank = len(ptr.type.block_shape)
        for c in checks:
            if not 0 <= c < rank:
                raise SemanticError(f"boundary_check dimension {c} is out of range for a rank-{rank} block")
        return sorted(set(checks))

    def store(self, ptr, value, mask=None, boundary_check=(), cache="", evict=""):
        ptr = self.to_tensor(ptr)
        mask = unwrap(mask)
        if ptr.type.is_block_ptr():
            bt = ptr.type
            value = self.broadcast_to(self.cast(self.to_tensor(value), bt.elem), bt.block_shape)
            self.emit("tt.store", [ptr, value], None, {"boundary_check": self._boundary_check(ptr, boundary_check)})
            return None
        if not ptr.type.scalar.is_ptr():
            raise SemanticError(f"tl.store needs a pointer as its first argument, got a value of type {ptr.type}")
        if ptr.type.scalar.const:
            raise SemanticError("Cannot store to a constant pointer (the parameter is annotated tl.const)")
        elem = ptr.type.scalar.elem
        value = self.to_tensor(value)
        if value.shape and not ptr.shape:
            raise SemanticError(f"cannot store a tensor of shape {list(value.shape)} through a scalar pointer")
        value = self.cast(value, elem)
        shape = ptr.shape
        if mask is not None:
            mask = self._bool_mask(mask, "tl.store")
            if mask.shape and not ptr.shape:
                raise SemanticError(f"mask has shape {list(mask.shape)} but the pointer is a scalar")
            try:
                self.broadcast_shapes(ptr.shape, mask.shape)
            except SemanticError:
                raise SemanticError(f"mask shape {list(mask.shape)} does not match pointer shape "
                                    f"{list(ptr.shape)}") from None
        try:
            shape = self.broadcast_shapes(ptr.shape, value.shape, *([mask.shape] if mask is not None else []))
        except SemanticError:
            raise SemanticError(f"tl.store value shape {list(value.shape)} does not match pointer shape "
                                f"{list(ptr.shape)}") from None
        if tuple(shape) != tuple(ptr.shape):
            # Triton refuses to widen the pointer: the store would write every broadcast copy
            what = "mask" if mask is not None and tuple(self.broadcast_shapes(ptr.shape, mask.shape)) != \
                tuple(ptr.shape) else "value"
            got = mask.shape if what == "mask" else value.shape
            raise SemanticError(f"tl.store {what} shape {list(got)} would broadcast the pointer of shape "
                                f"{list(ptr.shape)} to {list(shape)}; the {what} must broadcast to the pointer's "
                                "shape (build the pointer tensor with the full shape, e.g. ptr + rows[:, None] * "
                                "stride + cols[None, :])")
        ops = [self.broadcast_to(ptr, shape), self.broadcast_to(value, shape)]
        if mask is not None:
            ops.append(self.broadcast_to(mask, shape))
        self.emit("tt.store", ops, None, _cache_attrs("tl.store", cache, evict, _STORE_CACHE))
        return None

    def make_block_ptr(self, base, shape, strides, offsets, block_shape, order):
        base = self.to_tensor(base)
        if not base.type.is_ptr() or base.shape:
            raise SemanticError("make_block_ptr needs a scalar pointer as base")
        block_shape = [unwrap(s) for s in unwrap(block_shape)]
        n = len(block_shape)
        for name, lst in (("shape", shape), ("strides", strides), ("offsets", offsets), ("order", order)):
            if len(unwrap(lst)) != n:
                raise SemanticError(f"make_block_ptr: {name} has {len(unwrap(lst))} entries, block_shape has {n}")
        ops = [base]
        ops += [self.cast(self.to_tensor(s, int64), int64) for s in shape]
        ops += [self.cast(self.to_tensor(s, int64), int64) for s in strides]
        ops += [self.cast(self.to_tensor(o, int32), int32) for o in offsets]
        ty = BlockPtrType(base.type.elem, block_shape)
        return self.emit("tt.make_block_ptr", ops, ty, {"block_shape": block_shape,
                                                          "order": [unwrap(o) for o in order]})

    def advance(self, bp, offsets):
        bp = self.to_tensor(bp)
        if not bp.type.is_block_ptr():
            raise SemanticError("tl.advance needs a block pointer made by tl.make_block_ptr")
        if len(offsets) != len(bp.type.block_shape):
            raise SemanticError(f"tl.advance got {len(offsets)} offsets for a rank-{len(bp.type.block_shape)} block")
        return self.emit("tt.advance", [bp] + [self.cast(self.to_tensor(o, int32), int32) for o in offsets], bp.type)

    # ---------------------------------------------------------------- tensor descriptors
    def make_tensor_descriptor(self, base, shape, strides, block_shape, padding_option="zero"):
        """A `tensor_descriptor`, checked as Triton checks it: rank 1 to 5, a static block shape whose last
        dim spans at least 16 bytes, a last stride of 1. Shapes become i32 scalars, strides i64."""
        from ..language.core import _DescriptorLayout, tensor_descriptor

        base = self.to_tensor(base)
        if not base.type.is_ptr() or base.shape:
            raise SemanticError(f"tl.make_tensor_descriptor needs a scalar pointer as base, got {base.type}")
        shape, strides = list(unwrap(shape)), list(unwrap(strides))
        block_shape = [unwrap(b) for b in unwrap(block_shape)]
        n = len(shape)
        if not 1 <= n <= 5:
            raise SemanticError(f"Expected 1 <= ndim <= 5 but got {n} dimensions")
        if len(strides) != n:
            raise SemanticError(f"Expected {n} strides but got {len(strides)}")
        if len(block_shape) != n:
            raise SemanticError(f"Expected block_shape to have {n} dimensions but got {len(block_shape)}")
        for b in block_shape:
            if isinstance(b, tensor) or isinstance(b, bool) or not isinstance(b, int):
                raise SemanticError(f"tensor descriptor block_shape must be compile-time ints (constexpr), got "
                                    f"{block_shape}")
            if b <= 0 or b & (b - 1):
                raise SemanticError(f"tensor descriptor block_shape dims must be powers of 2, got {block_shape}")
        self._check_descriptor(base.type.elem, block_shape, unwrap(strides[-1]), unwrap(padding_option))
        shape = [self.cast(self.to_tensor(s, int32), int32) for s in shape]
        strides = [self.cast(self.to_tensor(s, int64), int64) for s in strides]
        base, strides = self._descriptor_alignment(base, strides)
        return tensor_descriptor(base, shape, strides, _DescriptorLayout(block_shape, unwrap(padding_option)))

    def _descriptor_alignment(self, base, strides):
        """A descriptor's base is 16-byte aligned and its outer strides are multiples of 16 bytes: Triton's
        contract for `make_tensor_descriptor`. Where the kernel computes them (a base loaded from a table of
        pointers), that promise becomes `tt.hint`s, so the pipeliner may copy 16-byte runs and TMA may serve
        the tiles; kernel arguments keep what their specialization proved (a misaligned launch still gets its
        own variant)."""
        def computed(x):
            d = x.handle.defining_op
            while d is not None and d.name in ("arith.extsi", "arith.extui"):
                d = d.operands[0].defining_op
            return d is not None and d.name != "arith.constant"

        elem_bytes = max(base.type.elem.bits // 8, 1)
        if computed(base):
            base = self.emit("tt.hint", [base], base.type, {"multiple_of": [16]})
        out = []
        for s in strides[:-1]:
            if computed(s) and 16 % elem_bytes == 0:
                s = self.emit("tt.hint", [s], s.type, {"multiple_of": [16 // elem_bytes]})
            out.append(s)
        return base, out + strides[-1:]

    @staticmethod
    def _check_descriptor(elem, block_shape, last_stride, padding):
        """The checks shared by in-kernel and host descriptors (the launcher calls this too)."""
        nbytes = max(elem.bits // 8, 1)
        if block_shape[-1] * nbytes < 16:
            raise SemanticError(f"Descriptor block shape must have at least 16 bytes in the last dimension, but "
                                f"got {block_shape[-1]} * {nbytes} = {block_shape[-1] * nbytes} bytes")
        if not isinstance(last_stride, tensor) and last_stride != 1:
            raise SemanticError(f"Tensor descriptor last dim must be 1 but got {last_stride}")
        if padding not in ("zero", "nan"):
            raise SemanticError(f"padding_option must be 'zero' or 'nan', got {padding!r}")
        if padding == "nan" and not elem.is_floating():
            raise SemanticError("Padding option `nan` is not supported for integer blocks")

    def _descriptor_offsets(self, desc, offsets, what):
        offsets = list(unwrap(offsets)) if isinstance(unwrap(offsets), (list, tuple)) else [offsets]
        n = len(desc.layout.block_shape)
        if len(offsets) != n:
            raise SemanticError(f"{what}: expected {n} offsets, but got {len(offsets)}")
        return offsets

    def _descriptor_block_ptr(self, desc, offsets, what):
        """The block pointer a descriptor access at `offsets` is: the one mechanism behind load and store."""
        offsets = self._descriptor_offsets(desc, offsets, what)
        n = len(offsets)
        bp = self.make_block_ptr(desc.base, list(desc.shape), list(desc.strides), offsets,
                                 list(desc.layout.block_shape), list(range(n - 1, -1, -1)))
        bp.handle.defining_op.attrs["descriptor"] = True  # TMA may make its map in the kernel (fill_stages_with_tma)
        return bp

    def descriptor_load(self, desc, offsets, cache="", evict=""):
        bp = self._descriptor_block_ptr(desc, offsets, "tensor descriptor load")
        n = len(desc.layout.block_shape)
        out = self.load(bp, boundary_check=list(range(n)), padding_option=desc.layout.padding)
        if cache or evict:
            out.handle.defining_op.attrs.update(_cache_attrs("tensor descriptor load", cache, evict, _LOAD_CACHE))
        return out

    def _descriptor_value(self, desc, value, what):
        value = self.to_tensor(value)
        block = tuple(desc.layout.block_shape)
        if value.shape and tuple(value.shape) != block:
            raise SemanticError(f"{what}: the value has shape {list(value.shape)} but the descriptor's block shape "
                                f"is {list(block)}; reshape it to the block shape")
        return self.broadcast_to(self.cast(value, desc.dtype), block)

    def descriptor_store(self, desc, offsets, value):
        value = self._descriptor_value(desc, value, "tensor descriptor store")
        bp = self._descriptor_block_ptr(desc, offsets, "tensor descriptor store")
        return self.store(bp, value, boundary_check=list(range(len(desc.layout.block_shape))))

    def _descriptor_tile(self, desc, starts, sizes):
        """(pointers, in-bounds mask) of the tile whose dim d covers starts[d] + [0, sizes[d]) — or, where
        starts[d] is a 1-D tensor, exactly those indices: for accesses a block pointer cannot express
        (gather, scatter, atomic reductions)."""
        n = len(sizes)
        ptr, mask = self.to_tensor(desc.base), None
        for d in range(n):
            s = starts[d]
            if isinstance(unwrap(s), tensor) and unwrap(s).shape:
                idx = self.cast(unwrap(s), int32)
            else:
                idx = self.binary("+", self.arange(0, sizes[d]), self.cast(self.to_tensor(s, int32), int32))
            for ax in range(n):
                if ax != d:
                    idx = self.expand_dims(idx, ax)
            inb = self.logical("and", self.binary(">=", idx, 0), self.binary("<", idx, desc.shape[d]))
            mask = inb if mask is None else self.binary("&", mask, inb)
            ptr = self.binary("+", ptr, self.binary("*", self.cast(idx, int64), desc.strides[d]))
        return self.broadcast_to(ptr, sizes), self.broadcast_to(mask, sizes)

    def _gather_checks(self, desc, x_offsets, what):
        bs = desc.layout.block_shape
        if len(bs) != 2 or bs[0] != 1:
            raise SemanticError(f"descriptor {what} needs a 2-D descriptor with blocks of 1 row, got block shape "
                                f"{list(bs)}")
        x = self.to_tensor(x_offsets)
        if len(x.shape) != 1:
            raise SemanticError(f"x offsets must be 1D, but got {list(x.shape)}")
        if x.shape[0] < 8:
            raise SemanticError(f"descriptor {what} must have at least 8 rows, but got {list(x.shape)}")
        min_cols = 32 // desc.dtype.bits * 8
        if bs[1] < min_cols:
            raise SemanticError(f"descriptor {what} of {desc.dtype} must have at least {min_cols} columns, but got "
                                f"{bs[1]}")
        return x

    def descriptor_gather(self, desc, x_offsets, y_offset, cache="", evict=""):
        x = self._gather_checks(desc, x_offsets, "gather")
        sizes = [x.shape[0], desc.layout.block_shape[1]]
        ptr, mask = self._descriptor_tile(desc, [x, y_offset], sizes)
        other = float("nan") if desc.layout.padding == "nan" else 0
        return self.load(ptr, mask, other)

    def descriptor_scatter(self, desc, value, x_offsets, y_offset):
        x = self._gather_checks(desc, x_offsets, "scatter")
        sizes = [x.shape[0], desc.layout.block_shape[1]]
        value = self.to_tensor(value)
        if tuple(value.shape) != tuple(sizes):
            raise SemanticError(f"descriptor scatter: the value has shape {list(value.shape)}, expected {sizes}")
        ptr, mask = self._descriptor_tile(desc, [x, y_offset], sizes)
        return self.store(ptr, value, mask)

    # what Triton's descriptor reductions take, per kind (sm_90's TMA reduce has 16-bit float min/max)
    _DESC_ATOMIC_DTYPES = {"add": ("u32", "i32", "u64", "f32", "f16", "bf16"),
                           "min": ("u32", "i32", "u64", "i64", "f16", "bf16"),
                           "max": ("u32", "i32", "u64", "i64", "f16", "bf16"), "and": ("u32", "i32", "u64", "i64"),
                           "or": ("u32", "i32", "u64", "i64"), "xor": ("u32", "i32", "u64", "i64")}

    def descriptor_atomic(self, desc, kind, offsets, value):
        """`desc.atomic_<kind>(offsets, value)`: an element-wise atomic read-modify-write of the block,
        out-of-bounds elements dropped."""
        ok = self._DESC_ATOMIC_DTYPES[kind]
        if str(desc.dtype) not in ok:
            raise SemanticError(f"descriptor atomic_{kind} does not support {desc.dtype}; supported: {', '.join(ok)}")
        value = self._descriptor_value(desc, value, f"descriptor atomic_{kind}")
        offsets = self._descriptor_offsets(desc, offsets, f"descriptor atomic_{kind}")
        ptr, mask = self._descriptor_tile(desc, offsets, list(desc.layout.block_shape))
        self.atomic(kind, ptr, value, mask, half_min_max=True)
        return None

    def atomic(self, kind, ptr, val, mask=None, sem=None, scope=None, half_min_max=False):
        """`half_min_max`: 16-bit float min/max allowed (descriptor reductions; `tl.atomic_min` refuses them,
        as Triton does)."""
        ptr = self.to_tensor(ptr)
        if not ptr.type.scalar.is_ptr():
            raise SemanticError(f"atomic_{kind} needs a pointer, got {ptr.type}")
        if ptr.type.scalar.const:
            raise SemanticError(f"Cannot store to a constant pointer: atomic_{kind} writes through it")
        elem = ptr.type.scalar.elem
        if elem.kind == "float" and elem.bits == 16 and kind != "add" and not (half_min_max and kind in ("min", "max")):
            raise SemanticError(f"atomic_{kind} does not support {elem.name}: 16-bit floats have only atomic_add")
        if elem.bits < 16 or (elem.bits == 16 and elem.kind != "float"):
            raise SemanticError(f"atomic_{kind} does not support {elem.name} (as in Triton); use a 32-bit element "
                                "type")
        val = self.cast(self.to_tensor(val), elem)
        shapes = [ptr.shape, val.shape] + ([self.to_tensor(unwrap(mask)).shape] if unwrap(mask) is not None else [])
        shape = self.broadcast_shapes(*shapes)
        ops = [self.broadcast_to(ptr, shape), self.broadcast_to(val, shape)]
        if unwrap(mask) is not None:
            ops.append(self.broadcast_to(self.cast(self.to_tensor(unwrap(mask)), int1), shape))
        k = kind
        if kind == "add" and elem.is_floating():
            k = "fadd"
        elif kind in ("max", "min") and elem.kind == "uint":
            k = "u" + kind
        elif kind in ("and", "or", "xor") and not elem.is_int():
            raise SemanticError(f"atomic_{kind} needs an integer pointer, got {elem}")
        attrs = {"kind": k, "sem": unwrap(sem) or "acq_rel", "scope": unwrap(scope) or "gpu"}
        return self.emit("tt.atomic_rmw", ops, block_of(shape, elem), attrs)

    def atomic_cas(self, ptr, cmp, val, sem=None, scope=None):
        ptr = self.to_tensor(ptr)
        if not ptr.type.scalar.is_ptr():
            raise SemanticError(f"atomic_cas needs a pointer, got {ptr.type}")
        elem = ptr.type.scalar.elem
        if elem.bits < 16:
            raise SemanticError(f"atomic_cas does not support {elem.name} (as in Triton); use a 16-, 32- or 64-bit "
                                "element type")
        cmp, val = self.cast(self.to_tensor(cmp), elem), self.cast(self.to_tensor(val), elem)
        shape = self.broadcast_shapes(ptr.shape, cmp.shape, val.shape)
        ops = [self.broadcast_to(v, shape) for v in (ptr, cmp, val)]
        return self.emit("tt.atomic_cas", ops, block_of(shape, elem),
                         {"sem": unwrap(sem) or "acq_rel", "scope": unwrap(scope) or "gpu"})

    # ---------------------------------------------------------------- compute
    def dot(self, a, b, acc=None, input_precision=None, out_dtype=float32, max_num_imprecise_acc=None):
        a, b = self.numeric(a, "tl.dot"), self.numeric(b, "tl.dot")
        if len(a.shape) > 3 and len(b.shape) == len(a.shape) and a.shape[:-2] == b.shape[:-2]:
            # several batch dimensions: one batch of their product, then the batch shape back
            batch = a.shape[:-2]
            n = 1
            for d in batch:
                n *= d
            flat = self.dot(self.reshape(a, (n,) + a.shape[-2:]), self.reshape(b, (n,) + b.shape[-2:]),
                            None if unwrap(acc) is None else self.reshape(self.to_tensor(unwrap(acc)),
                                                                          (n, a.shape[-2], b.shape[-1])),
                            input_precision, out_dtype, max_num_imprecise_acc)
            return self.reshape(flat, batch + flat.shape[-2:])
        if len(a.shape) not in (2, 3) or len(b.shape) != len(a.shape):
            raise SemanticError(f"tl.dot needs two 2-D tensors (or two 3-D ones: a batch of products), got shapes "
                                f"{list(a.shape)} and {list(b.shape)}")
        if a.shape[-1] != b.shape[-2]:
            raise SemanticError(f"tl.dot inner dimensions differ: a is {list(a.shape)}, b is {list(b.shape)} "
                                f"({a.shape[-1]} != {b.shape[-2]})")
        if len(a.shape) == 3 and a.shape[0] != b.shape[0]:
            raise SemanticError(f"tl.dot batch dimensions differ: a is {list(a.shape)}, b is {list(b.shape)}")
        min_k = 32 if a.type.scalar.bits == 8 else 16
        if a.shape[-1] < min_k:
            raise SemanticError(f"tl.dot needs K >= {min_k} for {a.type.scalar.name} operands (as Triton does), got "
                                f"{list(a.shape)} @ {list(b.shape)}; use a larger K block")
        ta, tb = a.type.scalar, b.type.scalar
        if _is_fp8(ta) and _is_fp8(tb) and (ta != tb or ta.ir == "f8e4b15"):
            # mixed fp8 formats, and e4b15 (no tensor-core type): products are exact in f16, as Triton upcasts
            a, b = self.cast(a, float16), self.cast(b, float16)
            ta = tb = float16
        if ta != tb:
            if ta.is_floating() and tb.is_floating():
                ct = computation_type(ta, False, tb, False, False)
                a, b = self.cast(a, ct), self.cast(b, ct)
                ta = ct
            else:
                raise SemanticError(f"tl.dot operands must have one dtype, got {ta} and {tb}")
        if ta.is_int():
            if ta.bits != 8:
                raise SemanticError(f"tl.dot supports int8 integers (int32 accumulation), got {ta}")
            rt = int32
        elif ta == float64:
            rt = float64
        else:
            rt = as_dtype(out_dtype, "tl.dot's out_dtype") if unwrap(out_dtype) is not None else float32
        shape = a.shape[:-1] + b.shape[-1:]
        if unwrap(acc) is None:
            acc = self.const(0, TensorType(shape, rt))
        else:
            acc = self.to_tensor(unwrap(acc))
            if acc.shape != shape:
                raise SemanticError(f"tl.dot acc has shape {list(acc.shape)}, expected {list(shape)}")
            rt = acc.type.scalar
        prec = unwrap(input_precision) or ("tf32" if ta == float32 else "ieee")
        if prec not in ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6"):
            raise SemanticError(f"input_precision must be 'tf32', 'tf32x3', 'ieee', 'bf16x3' or 'bf16x6', got "
                                f"{prec!r}")
        if prec in ("bf16x3", "bf16x6") and ta == float32:
            return self._dot_split_bf16(a, b, acc, shape, rt, 3 if prec == "bf16x3" else 6)
        if prec == "tf32x3" and ta == float32:
            return self._dot_split_tf32(a, b, acc, shape, rt)
        attrs = {"input_precision": prec}
        if unwrap(max_num_imprecise_acc) is not None and _is_fp8(ta) and rt == float32:
            # fp8 products accumulated in the tensor cores' reduced precision at most this many at a time
            attrs["max_num_imprecise_acc"] = int(unwrap(max_num_imprecise_acc))
        return self.emit("tt.dot", [a, b, acc], TensorType(shape, rt), attrs)

    def _dot_split_tf32(self, a, b, acc, shape, rt):
        """fp32 dot on tf32 tensor cores, as Triton's tf32x3: each operand is split into a tf32 part (its low 13
        mantissa bits cleared) and the rest (exact in fp32, rounded to tf32 by the tensor cores); the two cross
        products are summed first, with NaN (an infinite operand's inf - inf rest) read as 0 so infinities
        come from the big product alone, then the big product is added."""
        def split(x):
            bits = self.cast(x, int32, bitcast=True)
            hi = self.cast(self.binary("&", bits, self.const(-8192, int32)), float32, bitcast=True)
            return hi, self.binary("-", x, hi)

        (ah, al), (bh, bl) = split(a), split(b)
        t = TensorType(shape, rt)
        small = self.emit("tt.dot", [al, bh, self.const(0.0, t)], t, {"input_precision": "tf32"})
        small = self.emit("tt.dot", [ah, bl, small], t, {"input_precision": "tf32"})
        small = self.where(self.binary("!=", small, small), self.const(0.0, t), small)
        return self.emit("tt.dot", [ah, bh, self.binary("+", acc, small)], t, {"input_precision": "tf32"})

    def _dot_split_bf16(self, a, b, acc, shape, rt, terms: int):
        """fp32 dot on bf16 tensor cores, as Triton's bf16x3 / bf16x6: each operand is split into bf16 parts
        (x = hi + mid + lo, each the bf16 rounding of what is left) and the largest cross products are
        summed in fp32, smallest first: 3 products (hi*hi, hi*mid, mid*hi) or 6 (plus mid*mid, hi*lo, lo*hi)."""
        def split(x):
            parts, rest = [], x
            for _ in range(3):
                p = self.cast(rest, bfloat16)
                parts.append(p)
                rest = self.binary("-", rest, self.cast(p, float32))
            return parts

        (ah, am, al), (bh, bm, bl) = split(a), split(b)
        pairs = [(ah, bh), (ah, bm), (am, bh)] if terms == 3 else \
            [(ah, bh), (ah, bm), (am, bh), (am, bm), (ah, bl), (al, bh)]
        out = acc
        for x, y in reversed(pairs):
            out = self.emit("tt.dot", [x, y, out], TensorType(shape, rt), {"input_precision": "ieee"})
        return out

    def _region(self, arg_types):
        region = Block(arg_types)
        return region, [tensor(v, v.type) for v in region.args]

    def reduction(self, inputs, axis, combine, keep_dims=False, scan=False, reverse=False):
        """Reduce (or scan) `inputs` along `axis`; `combine(a_list, b_list) -> list` builds the region."""
        inputs = [self.to_tensor(x) for x in inputs]
        axis = unwrap(axis)
        if axis is None and not scan:
            rank = len(inputs[0].shape)
            inputs = [self.reshape(x, (x.numel,)) if len(x.shape) != 1 else x for x in inputs]
            if not inputs[0].shape:
                return inputs if len(inputs) > 1 else inputs[0]
            out = self.reduction(inputs, 0, combine, keep_dims=False)
            if keep_dims:  # like Triton: every dim kept, as size 1
                outs = [self.expand_dims(o, tuple(range(rank))) for o in (out if len(inputs) > 1 else [out])]
                return outs if len(inputs) > 1 else outs[0]
            return out
        shape = inputs[0].shape
        rank = len(shape)
        if rank == 0:
            raise SemanticError("cannot reduce or scan a scalar")
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise SemanticError(f"the reduction axis must be a constexpr integer, got {axis!r}")
        if not -rank <= axis < rank:
            raise SemanticError(f"axis {axis} is out of range for a tensor of rank {rank} "
                                f"(shape {list(shape)})")
        axis %= rank
        scalars = [x.type.scalar for x in inputs]
        region, args = self._region(scalars + scalars)
        saved = (self.b.block, self.b.index)
        self.b.set_insertion_point_to_end(region)
        results = combine(args[:len(inputs)], args[len(inputs):])
        results = results if isinstance(results, (list, tuple)) else [results]
        results = [self.cast(self.to_tensor(r), s) for r, s in zip(results, scalars)]
        self.b.create("tt.reduce.return", [r.handle for r in results], [])
        self.b.block, self.b.index = saved
        if scan:
            rtypes = [x.type for x in inputs]
            op = self.b.create("tt.scan", [x.handle for x in inputs], rtypes,
                               {"axis": axis, "reverse": bool(reverse)}, [region])
        else:
            rshape = shape[:axis] + shape[axis + 1:]
            rtypes = [block_of(rshape, s) for s in scalars]
            op = self.b.create("tt.reduce", [x.handle for x in inputs], rtypes, {"axis": axis}, [region])
        outs = [tensor(r, r.type) for r in op.results]
        if keep_dims and not scan:
            outs = [self.expand_dims(o, axis) for o in outs]
        return outs if len(outs) > 1 else outs[0]

    def map_elementwise(self, args, body, pack) -> list:
        """Triton's map_elementwise: `body(scalars) -> scalars` builds the region, which sees `pack` elements of
        each operand (argument i*pack + j is element j of operand i) and gives `pack` values per output
        (result k*pack + j); the operands broadcast to one shape, their dtypes kept."""
        if not isinstance(pack, int) or pack < 1:
            raise SemanticError(f"map_elementwise: pack must be an integer >= 1, got {pack!r}")
        args = [self.to_tensor(a) for a in args]
        if not args:
            raise SemanticError("map_elementwise needs at least one tensor argument")
        shape = ()
        for a in args:
            shape = self.broadcast_shapes(shape, a.shape)
        args = [self.broadcast_to(a, shape) if a.shape != shape else a for a in args]
        region, rargs = self._region([a.type.scalar for a in args for _ in range(pack)])
        saved = (self.b.block, self.b.index)
        self.b.set_insertion_point_to_end(region)
        try:
            results = body(rargs)
            results = list(results) if isinstance(results, (list, tuple)) else [results]
            if not results or any(r is None for r in results):
                raise SemanticError("map_elementwise's function must return one or more values")
            results = [self.to_tensor(r) for r in results]
            if any(r.shape for r in results):
                raise SemanticError("map_elementwise's function must return scalars")
            if len(results) % pack:
                raise SemanticError(f"map_elementwise with pack={pack} needs a multiple of {pack} results, "
                                    f"got {len(results)}")
            n_out = len(results) // pack
            for k in range(n_out):
                kinds = {results[k * pack + j].type for j in range(pack)}
                if len(kinds) > 1:
                    raise SemanticError(f"map_elementwise: the {pack} values of output {k} have different types")
            self.b.create("tt.reduce.return", [r.handle for r in results], [])
        finally:
            self.b.block, self.b.index = saved
        types = [block_of(tuple(shape), results[k * pack].type.scalar) for k in range(n_out)]
        op = self.b.create("tt.map_elementwise", [a.handle for a in args], types, {"pack": pack}, [region])
        return [tensor(r, r.type) for r in op.results]

    def inline_asm(self, asm, constraints, args, dtypes, is_pure, pack) -> list:
        """Triton's inline_asm_elementwise: the operands broadcast to one shape (their dtypes kept), one
        result per dtype of that shape."""
        args = [self.to_tensor(a) for a in args]
        shape = ()
        for a in args:
            shape = self.broadcast_shapes(shape, a.shape)
        args = [self.broadcast_to(a, shape) if a.shape != shape else a for a in args]
        if not isinstance(pack, int) or pack < 1:
            raise SemanticError(f"inline_asm_elementwise: pack must be an integer >= 1, got {pack!r}")
        if not dtypes:
            raise SemanticError("inline_asm_elementwise needs at least one output dtype")
        types = [block_of(tuple(shape), as_dtype(d, "inline_asm_elementwise's dtype")) for d in dtypes]
        op = self.b.create("tt.inline_asm", [a.handle for a in args], types,
                           {"asm": str(asm), "constraints": str(constraints), "pure": bool(is_pure), "pack": pack})
        return [tensor(r, r.type) for r in op.results]

    # ---------------------------------------------------------------- misc
    def program_id(self, axis, num=False):
        axis = unwrap(axis)
        if axis not in (0, 1, 2):
            raise SemanticError(f"program_id axis must be 0, 1, or 2 but got {axis!r}")
        return self.emit("tt.get_num_programs" if num else "tt.get_program_id", [], int32, {"axis": axis})

    def _bool_mask(self, mask, what):
        """A mask as an i1 tensor. Like Triton, a mask must already be boolean (a comparison): an integer or
        float tensor is refused rather than silently read as `!= 0`."""
        mask = self.to_tensor(mask)
        if mask.type.scalar.is_ptr() or mask.dtype != int1:
            raise SemanticError(f"{what}'s mask must be boolean (e.g. offs < n), got {mask.type.scalar}; "
                                "compare it explicitly, e.g. mask=(m != 0)")
        return mask

    def arange(self, start, end):
        start, end = unwrap(start), unwrap(end)
        for name, v in (("start", start), ("end", end)):
            if isinstance(v, tensor):
                raise SemanticError(f"tl.arange needs constexpr (compile-time integer) bounds, but {name} is a "
                                    "runtime value; mark the parameter `: tl.constexpr`")
            if isinstance(v, bool) or not isinstance(v, int):
                raise SemanticError(f"tl.arange's {name} must be an int, got {type(v).__name__} {v!r}"
                                    + ("; a bool is not a size" if isinstance(v, bool) else
                                       "; pass an int (e.g. BLOCK=128, not 128.0)" if isinstance(v, float) else ""))
        n = end - start
        if n <= 0 or n & (n - 1):
            raise SemanticError(f"tl.arange({start}, {end}) has {n} elements; the range must be a power of 2",
                                triton="arange's range must be a power of 2")
        check_numel((n,))
        if not (-2**31 <= start and end <= 2**31):
            raise SemanticError(f"tl.arange({start}, {end}) does not fit in int32 (its values are i32)")
        return self.emit("tt.make_range", [], TensorType((n,), int32), {"start": start, "end": end})

    def full(self, shape, value, dtype, what="tl.full"):
        shape = [unwrap(s) for s in (unwrap(shape) if isinstance(unwrap(shape), (list, tuple)) else [unwrap(shape)])]
        dtype = as_dtype(dtype, what)
        for i, s in enumerate(shape):
            if isinstance(s, bool) or not isinstance(s, int) or s <= 0 or s & (s - 1):
                raise SemanticError(f"tensor shapes must be constexpr powers of 2, got {shape}"
                                    + ("; a bool is not a size" if any(isinstance(x, bool) for x in shape) else ""),
                                    triton=f"Shape element {i} must be a power of 2"
                                    if isinstance(s, int) and not isinstance(s, bool) else None)
        check_numel(shape)
        value = unwrap(value)
        if isinstance(value, tensor):
            return self.splat(self.cast(value, dtype), shape)
        check_constant_range(value, dtype, what)
        return self.const(value, block_of(tuple(shape), dtype))


def _is_zero_constant(b) -> bool:
    """Whether `b` is the number 0 or a tensor made by an arith.constant of 0 (splat or not)."""
    if _is_py_number(b):
        return b == 0
    op = getattr(getattr(b, "handle", None), "owner", None)
    while op is not None and getattr(op, "name", None) in ("tt.splat", "tt.broadcast", "arith.extsi", "arith.trunci"):
        op = getattr(op.operands[0], "owner", None)
    return getattr(op, "name", None) == "arith.constant" and op.attrs.get("value") == 0


# Triton's TRITON_MAX_TENSOR_NUMEL (tl.TRITON_MAX_TENSOR_NUMEL): no tile may hold more elements (a 65536 x 65536
# tile would ask for 16 GiB).
MAX_TENSOR_NUMEL = TRITON_MAX_TENSOR_NUMEL


def check_numel(shape):
    n = 1
    for d in shape:
        n *= d
    if n > MAX_TENSOR_NUMEL:
        raise SemanticError(f"a tile of shape {list(shape)} has {n} elements, over the limit of {MAX_TENSOR_NUMEL} "
                            "(2^20, as in Triton); use a smaller BLOCK and loop over the data")


def check_constant_range(value, dtype, what):
    """A Python int given as the value of an integer tensor must fit its dtype (as a signed or unsigned bit
    pattern, so -1 and 0xFFFFFFFF both work for 32 bits); Triton would silently keep the low bits."""
    if isinstance(value, bool) or not isinstance(value, int) or not dtype.is_int() or dtype == int1:
        return
    lo, hi = -(1 << (dtype.bits - 1)), (1 << dtype.bits) - 1
    if not lo <= value <= hi:
        raise SemanticError(f"{what}: the value {value} does not fit in {dtype} (range {lo}..{hi}); use a wider "
                            "dtype such as tl.int64, or reduce the value")


def _python_binary(op, a, b):
    """Constexpr arithmetic: plain Python semantics, like Triton's constexpr."""
    import operator as o

    table = {"+": o.add, "-": o.sub, "*": o.mul, "/": o.truediv, "//": o.floordiv, "%": o.mod, "&": o.and_,
             "|": o.or_, "^": o.xor, "<<": o.lshift, ">>": o.rshift, "<": o.lt, "<=": o.le, ">": o.gt, ">=": o.ge,
             "==": o.eq, "!=": o.ne}
    try:
        return table[op](a, b)
    except Exception as e:  # e.g. None + 1
        raise SemanticError(f"cannot compute {a!r} {op} {b!r}: {e}") from None


# Triton's cache modifiers and eviction policies; codegen turns them into PTX qualifiers (ld.global.cg, ...)
_LOAD_CACHE = ("", ".ca", ".cg", ".cv")
_STORE_CACHE = ("", ".wb", ".cg", ".cs", ".wt")
_EVICT = ("", "evict_normal", "evict_first", "evict_last")


def _cache_attrs(what, cache, evict, allowed) -> dict:
    cache, evict = cache or "", evict or ""
    if cache not in allowed:
        raise SemanticError(f"{what}: cache_modifier {cache!r} is not supported; use one of "
                            f"{', '.join(repr(c) for c in allowed if c)}")
    if evict not in _EVICT:
        raise SemanticError(f"{what}: eviction_policy {evict!r} is not supported; use one of "
                            f"{', '.join(repr(e) for e in _EVICT if e)}")
    attrs = {}
    if cache:
        attrs["cache"] = cache
    if evict and evict != "evict_normal":
        attrs["evict"] = evict
    return attrs
