"""IR types. The scalar dtypes double as the language's `tl.float32`, `tl.int32`, ..."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..errors import SemanticError


class Type:
    """Base of every IR type; types are immutable and compared by value."""

    def __eq__(self, other):
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self):
        return hash((type(self).__name__, self._key()))

    def _key(self):
        raise NotImplementedError

    # Shape helpers shared by every type: a scalar has shape ().
    @property
    def shape(self) -> tuple:
        return ()

    @property
    def scalar(self) -> Type:
        return self

    def is_block(self) -> bool:
        return False

    def is_ptr(self) -> bool:
        return False

    def is_memdesc(self) -> bool:
        return False

    def is_block_ptr(self) -> bool:
        return False


_TRITON_NAMES = {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64", "f8e4nv": "fp8e4nv", "f8e5": "fp8e5",
                 "f8e4b15": "fp8e4b15", "f8e4b8": "fp8e4b8", "f8e5b16": "fp8e5b16"}


def _dtype_by_ir(ir: str, kind: str, bits: int):
    found = DTYPES.get(ir)
    return found if found is not None else DType(ir, kind, bits)


class DType(Type):
    """A scalar element type: int1, int8..int64, uint8..uint64, float16, bfloat16, float32, float64."""

    def __new__(cls, ir: str, kind: str | None = None, bits: int | None = None):
        if kind is None:  # `tl.dtype("int32")`: Triton's constructor by name gives the existing dtype
            found = _BY_NAME.get(ir)
            if found is None:
                raise ValueError(f"unknown dtype {ir!r}; one of {', '.join(sorted(_BY_NAME))}")
            return found
        return super().__new__(cls)

    def __init__(self, ir: str, kind: str | None = None, bits: int | None = None):
        if kind is None:
            return
        self.ir, self.kind, self.bits = ir, kind, bits

    def _key(self):
        return self.ir

    def __reduce__(self):
        """Pickled by IR name: unpickling gives back the one instance of the type (a kernel's specialization
        travels this way, e.g. Triton's `preload`)."""
        return (_dtype_by_ir, (self.ir, self.kind, self.bits))

    # Set by kernellab.compat.install() to "triton.language": repr becomes Triton's evaluatable
    # `triton.language.float32` there; otherwise repr (like str) is the IR spelling.
    repr_module = None

    def __repr__(self):
        if DType.repr_module is None:
            return self.ir
        name = self.name
        name = "float" + name[2:] if name.startswith("fp") else "bfloat" + name[2:] if name.startswith("bf") else name
        return f"{DType.repr_module}.{name}"

    def __str__(self):
        return self.ir

    @property
    def name(self) -> str:
        """Triton's spelling (`fp32`, `int32`, `uint8`, `bf16`), which ported code and Triton's test helpers read;
        the IR spells the same type `ir` (`f32`, `i32`, `u8`)."""
        ir = self.ir
        return _TRITON_NAMES.get(ir) or ("uint" + ir[1:] if ir[0] == "u" else "int" + ir[1:])

    # Triton's predicate names, so ported kernels that inspect dtypes keep working.
    def is_floating(self):
        return self.kind == "float"

    def is_int(self):
        return self.kind in ("int", "uint", "bool")

    def is_int_signed(self):
        return self.kind == "int"

    def is_int_unsigned(self):
        return self.kind == "uint"

    def is_bool(self):
        return self.kind == "bool"

    def is_fp16(self):
        return self.ir == "f16"

    def is_bf16(self):
        return self.ir == "bf16"

    def is_fp32(self):
        return self.ir == "f32"

    def is_fp64(self):
        return self.ir == "f64"

    @property
    def primitive_bitwidth(self):
        return self.bits

    @property
    def int_bitwidth(self):
        return self.bits

    @property
    def itemsize(self):
        return max(1, self.bits // 8)

    @property
    def np(self):
        return NUMPY_OF[self.ir]

    # Triton's dtype helpers, for ported kernels and test suites that inspect dtypes.
    SINT_TYPES = ["int8", "int16", "int32", "int64"]
    UINT_TYPES = ["int1", "uint8", "uint16", "uint32", "uint64"]
    FP_TYPES = ["fp8e4b15", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp16", "bf16", "fp32", "fp64"]
    STANDARD_FP_TYPES = ["fp16", "bf16", "fp32", "fp64"]
    OTHER_TYPES = ["void"]

    @property
    def fp_mantissa_width(self):
        return _FLOAT_LAYOUT[self.ir][0]

    @property
    def exponent_bias(self):
        return _FLOAT_LAYOUT[self.ir][1]

    def is_fp8(self):
        return self.kind == "float" and self.bits == 8

    def is_standard_floating(self):
        return self.ir in ("f16", "bf16", "f32", "f64")

    def get_int_max_value(self):
        return (1 << (self.bits - 1)) - 1 if self.kind == "int" else (1 << self.bits) - 1

    def get_int_min_value(self):
        return -(1 << (self.bits - 1)) if self.kind == "int" else 0

    @staticmethod
    def is_dtype(type_str):
        return type_str in DType.SINT_TYPES + DType.UINT_TYPES + DType.FP_TYPES + DType.OTHER_TYPES

    @staticmethod
    def is_void():
        return False

    @staticmethod
    def is_const():
        return False

    def cache_key_part(self) -> str:
        return self.name

    def mangle(self) -> str:
        return self.ir

    def __getattr__(self, attr):
        # is_fp8e4nv(), is_int32(), is_uint8() ...: one predicate per dtype, as Triton has them
        if attr.startswith("is_") and attr[3:] in _ALL_TRITON_NAMES:
            return lambda: self.name == attr[3:]
        raise AttributeError(attr)

    def to(self, *a, **k):  # pragma: no cover - guard against misuse outside kernels
        raise TypeError("dtype.to is not a thing; did you mean tensor.to(dtype)?")


int1 = DType("i1", "bool", 1)
int8 = DType("i8", "int", 8)
int16 = DType("i16", "int", 16)
int32 = DType("i32", "int", 32)
int64 = DType("i64", "int", 64)
uint8 = DType("u8", "uint", 8)
uint16 = DType("u16", "uint", 16)
uint32 = DType("u32", "uint", 32)
uint64 = DType("u64", "uint", 64)
float16 = DType("f16", "float", 16)
bfloat16 = DType("bf16", "float", 16)
float32 = DType("f32", "float", 32)
float64 = DType("f64", "float", 64)

# The 8-bit float formats (Triton's names): e4m3 and e5m2 as Hopper's tensor cores take them, and three
# variants with other exponent biases. Declared so kernels and tests can name them; see semantic.py for
# what is supported on them.
float8e4nv = DType("f8e4nv", "float", 8)
float8e5 = DType("f8e5", "float", 8)
float8e4b15 = DType("f8e4b15", "float", 8)
float8e4b8 = DType("f8e4b8", "float", 8)
float8e5b16 = DType("f8e5b16", "float", 8)
FP8_DTYPES = {t.ir: t for t in [float8e4nv, float8e5, float8e4b15, float8e4b8, float8e5b16]}

# float formats: (mantissa bits, exponent bias)
_FLOAT_LAYOUT = {"f8e4b15": (3, 15), "f8e4nv": (3, 7), "f8e4b8": (3, 8), "f8e5": (2, 15), "f8e5b16": (2, 16),
                 "f16": (10, 15), "bf16": (7, 127), "f32": (23, 127), "f64": (52, 1023)}
_ALL_TRITON_NAMES = set(DType.SINT_TYPES + DType.UINT_TYPES + DType.FP_TYPES)

DTYPES = {t.ir: t for t in [int1, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
                               float16, bfloat16, float32, float64, *FP8_DTYPES.values()]}

_BY_NAME = {t.name: t for t in DTYPES.values()}


def literal_dtype(v) -> DType:
    """The type Triton gives a Python literal."""
    if isinstance(v, bool):
        return int1
    if isinstance(v, numbers.Integral):
        if -2**31 <= v < 2**31:
            return int32
        if 2**31 <= v < 2**32:
            return uint32
        if -2**63 <= v < 2**63:
            return int64
        if 2**63 <= v < 2**64:
            return uint64
        raise SemanticError(f"integer literal {v} does not fit in 64 bits")
    if isinstance(v, numbers.Real):
        return float32 if (math.isinf(v) or math.isnan(v) or abs(v) <= 3.4028234663852886e38) else float64
    raise SemanticError(f"{v!r} is not a number")

# bfloat16 and the fp8 formats have no NumPy dtype: the interpreter carries them in float32, on their value
# grid (bf16 rounded after every op; fp8 values come only from loads, constants and conversions: see fp8.py).
NUMPY_OF = {**{f: np.dtype(np.float32) for f in FP8_DTYPES},
    "i1": np.dtype(np.bool_), "i8": np.dtype(np.int8), "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32), "i64": np.dtype(np.int64), "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "bf16": np.dtype(np.float32), "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}


class PointerType(Type):
    """A pointer into global memory (address space 1) to elements of `elem`; `const` (a parameter annotated
    `tl.const`) forbids stores through it, and is part of the type as in Triton."""

    def __init__(self, elem: Type, addrspace: int = 1, const: bool = False):
        self.elem, self.addrspace, self.const = elem, addrspace, const

    @property
    def element_ty(self):
        return self.elem

    def _key(self):
        return (self.elem._key(), self.addrspace, self.const)

    def __repr__(self):
        return f"!ptr<const {self.elem}>" if self.const else f"!ptr<{self.elem}>"

    def is_const(self):
        return self.const

    def is_ptr(self):
        return True

    @property
    def itemsize(self):
        return 8

    @property
    def name(self):
        return repr(self)


class BlockPtrType(Type):
    """A block pointer made by `tl.make_block_ptr`: a typed window onto a strided tensor."""

    def __init__(self, elem: DType, block_shape: tuple):
        self.elem, self.block_shape = elem, tuple(block_shape)

    def _key(self):
        return (self.elem._key(), self.block_shape)

    def __repr__(self):
        return f"!blockptr<{self.elem}, {'x'.join(map(str, self.block_shape))}>"

    def is_block_ptr(self):
        return True

    @property
    def element_ty(self):
        """What the block pointer points to, as Triton types it: a block of `elem` with the block's shape
        (`bp.type.element_ty` casts a value to the pointee's dtype: `x.to(bp.type.element_ty)`)."""
        return TensorType(self.block_shape, self.elem)


class TensorType(Type):
    """A tile: a statically shaped block of scalars or pointers."""

    def __init__(self, shape: tuple, elem: Type, layout=None):
        assert not isinstance(elem, TensorType)
        self._shape, self.elem = tuple(int(s) for s in shape), elem
        self.layout = layout  # a gpu.layouts.Layout once the GPU passes have assigned one

    def _key(self):
        return (self._shape, self.elem._key(), str(self.layout) if self.layout is not None else None)

    def with_layout(self, layout) -> TensorType:
        return TensorType(self._shape, self.elem, layout)

    def __repr__(self):
        dims = "".join(f"{s}x" for s in self._shape)
        lay = f", {self.layout}" if self.layout is not None else ""
        return f"tensor<{dims}{self.elem}{lay}>"

    @property
    def shape(self):
        return self._shape

    @property
    def scalar(self):
        return self.elem

    @property
    def element_ty(self):  # Triton's name for a block type's scalar
        return self.elem

    @property
    def numel(self):
        n = 1
        for s in self._shape:
            n *= s
        return n

    def is_block(self):
        return True

    def is_ptr(self):
        return self.elem.is_ptr()


class MemDescType(Type):
    """A tile in shared memory (GPU IR): `shape` may lead with a stage count, `order` lists the dims from
    fastest-varying in memory, and each row of the fastest dim is followed by `pad` unused elements (the
    padding that keeps ldmatrix free of bank conflicts)."""

    layout = None  # not a distributed (register) layout: no thread owns an element

    def __init__(self, shape: tuple, elem: DType, order: tuple = (1, 0), pad: int = 0, swizzle: int = 0):
        self._shape, self.elem = tuple(int(s) for s in shape), elem
        self.order, self.pad, self.swizzle = tuple(order), int(pad), int(swizzle)

    def _key(self):
        return ("memdesc", self._shape, self.elem._key(), self.order, self.pad, self.swizzle)

    def __repr__(self):
        dims = "x".join(map(str, self._shape))
        swz = f", swizzle={self.swizzle}" if self.swizzle else ""
        return f"!memdesc<{dims}x{self.elem}, order={','.join(map(str, self.order))}, pad={self.pad}{swz}>"

    @property
    def shape(self):
        return self._shape

    @property
    def scalar(self):
        return self.elem

    def is_memdesc(self):
        return True

    def tile(self) -> MemDescType:
        """One stage of a multi-stage buffer."""
        return MemDescType(self._shape[1:], self.elem, self.order, self.pad, self.swizzle)

    @property
    def tile_bytes(self) -> int:
        """Bytes of one stage: rows padded and rounded up to 16 bytes, or (swizzled) to 1024 bytes, the
        period of the swizzle pattern."""
        rows, cols = self._shape[-2:]
        if self.order[0] == 0:
            rows, cols = cols, rows
        n = rows * (cols + self.pad) * (self.elem.bits // 8)
        align = 1024 if self.swizzle else 16
        return (n + align - 1) // align * align


def block_of(shape: tuple, elem: Type) -> Type:
    """The type of a value with `shape` and element `elem`; shape () means a scalar."""
    return TensorType(shape, elem) if shape else elem


class FunctionType(Type):
    def __init__(self, inputs, outputs):
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)

    def _key(self):
        return (tuple(t._key() for t in self.inputs), tuple(t._key() for t in self.outputs))

    def __repr__(self):
        return f"({', '.join(map(str, self.inputs))}) -> ({', '.join(map(str, self.outputs))})"


def parse_type(text: str) -> Type:
    """Read back a type as the printer writes it."""
    text = text.strip()
    if text in DTYPES:
        return DTYPES[text]
    if text.startswith("!ptr<") and text.endswith(">"):
        inner = text[5:-1]
        if inner.startswith("const "):
            return PointerType(parse_type(inner[6:]), const=True)
        return PointerType(parse_type(inner))
    if text.startswith("!blockptr<") and text.endswith(">"):
        inner = text[len("!blockptr<"):-1]
        elem, shape = inner.split(",")
        return BlockPtrType(DTYPES[elem.strip()], tuple(int(s) for s in shape.strip().split("x")))
    if text.startswith("!memdesc<") and text.endswith(">"):
        import re

        m = re.fullmatch(r"!memdesc<((?:\d+x)+)(\w+), order=([\d,]+), pad=(\d+)(?:, swizzle=(\d+))?>", text)
        if not m:
            raise ValueError(f"cannot parse type {text!r}")
        dims = tuple(int(d) for d in m.group(1).rstrip("x").split("x"))
        return MemDescType(dims, DTYPES[m.group(2)], tuple(int(o) for o in m.group(3).split(",")), int(m.group(4)),
                           int(m.group(5) or 0))
    if text.startswith("tensor<") and text.endswith(">"):
        inner = text[len("tensor<"):-1]
        layout = None
        if ", #" in inner:
            from .gpu.layouts import parse_layout

            inner, _, lay = inner.partition(", #")
            layout = parse_layout("#" + lay)
        dims = []
        while True:
            head, sep, rest = inner.partition("x")
            if sep and head.isdigit():
                dims.append(int(head))
                inner = rest
            else:
                break
        return TensorType(tuple(dims), parse_type(inner), layout)
    raise ValueError(f"cannot parse type {text!r}")


# Triton's canonical dtype spellings, keyed by every alias it accepts (its signature strings use these).
TYPE_CANONICAL_NAMES = {
    "bool": "u1", "int1": "u1", "uint1": "u1", "i1": "u1",
    "float8e4nv": "fp8e4nv", "float8_e4m3fn": "fp8e4nv", "float8e5": "fp8e5", "float8_e5m2": "fp8e5",
    "float8e4b15": "fp8e4b15", "float8e4b8": "fp8e4b8", "float8_e4m3fnuz": "fp8e4b8",
    "float8e5b16": "fp8e5b16", "float8_e5m2fnuz": "fp8e5b16",
    "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float": "fp32", "float32": "fp32",
    "double": "fp64", "float64": "fp64",
    "int8": "i8", "int16": "i16", "int": "i32", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "void": "void",
}
for _v in list(TYPE_CANONICAL_NAMES.values()):
    TYPE_CANONICAL_NAMES[_v] = _v
