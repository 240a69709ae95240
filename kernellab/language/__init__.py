"""`import kernellab.language as tl`: Triton's language surface, compiled by kernellab."""
from . import builtins as _b
from .builtins import *  # noqa: F401,F403
from .builtins import abs, max, min, sum  # noqa: F401 - names that shadow Python's, exported on purpose
from .core import (  # noqa: F401
    TRITON_MAX_TENSOR_NUMEL,
    BlockPtrType,
    PointerType,
    PropagateNan,
    TensorType,
    bfloat16,
    block_type,
    const,
    constexpr,
    constexpr_type,
    dtype,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    pi32_t,
    pointer_type,
    range,
    static_range,
    tensor,
    tensor_descriptor,
    tensor_descriptor_base,
    tuple,
    uint8,
    uint16,
    uint32,
    uint64,
    void,
)
from .scaled_dot import dot_scaled  # noqa: F401
from .standard import (  # noqa: F401
    bitonic_merge,
    flip,
    interleave,
    reduce_or,
    sort,
    squeeze,
    swizzle2d,
    topk,
    unsqueeze,
)

bool = int1  # noqa: A001 - tl.bool is Triton's name for int1
from ..compiler.types import float8e4b8, float8e4b15, float8e4nv, float8e5, float8e5b16  # noqa: E402,F401

_TENSOR_METHODS = {
    name: getattr(_b, name) if hasattr(_b, name) else globals()[name]
    for name in ["flip", "reduce_or", "gather", "histogram",
                 "sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce", "cumsum", "cumprod",
                 "associative_scan", "reshape", "view", "ravel", "trans", "permute", "expand_dims",
                 "broadcast_to", "split", "item", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "abs",
                 "erf", "floor", "ceil", "sigmoid", "softmax", "cast"]
}

from . import extra, math, target_info  # noqa: E402,F401
from .random import (  # noqa: E402,F401
    pair_uniform_to_normal,
    philox,
    philox_impl,
    rand,
    rand4x,
    randint,
    randint4x,
    randn,
    randn4x,
    uint_to_uniform_float,
)


def str_to_ty(name: str, c=None):
    """The dtype (or pointer type) a Triton signature string names: "fp32", "i8", "u1", "*fp16", "*kfp16"."""
    from ..compiler.types import DTYPES, FP8_DTYPES

    if name.startswith("*"):
        inner = name[1:]
        return PointerType(str_to_ty(inner[1:] if inner.startswith("k") else inner))
    canonical = {"u1": "int1", "i1": "int1", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64"}
    found = dtype(canonical.get(name, name)) if name not in DTYPES and name not in FP8_DTYPES else None
    return found or DTYPES.get(name) or FP8_DTYPES[name]


def _serve_language_functions_from_core():
    """Triton's `triton.language.core` holds every language function (`core.static_assert`, `core.load`, ...);
    library code calls them through it (FlagGems' topk: `core.static_assert`). Ours are defined in the
    `builtins` module, so core gets the same objects under the same names."""
    import sys

    from . import core, standard

    here = sys.modules[__name__]
    for name in ("add", "sub", "mul", "advance", "arange", "associative_scan", "assume", "atomic_add", "atomic_and",
                 "atomic_cas", "atomic_max", "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor", "broadcast",
                 "broadcast_to", "cast", "cat", "clamp", "condition", "debug_barrier", "device_assert",
                 "device_print", "dot", "dot_scaled", "expand_dims", "float8e4b15", "float8e4b8", "float8e4nv",
                 "float8e5", "float8e5b16", "full", "gather", "histogram", "inline_asm_elementwise", "item", "join",
                 "load", "load_tensor_descriptor", "make_block_ptr", "make_tensor_descriptor", "map_elementwise",
                 "max_constancy", "max_contiguous", "maximum", "minimum", "multiple_of", "num_programs", "permute",
                 "program_id", "reduce", "reshape", "split", "static_assert", "static_print", "store",
                 "store_tensor_descriptor", "to_tensor", "trans", "view", "where", "zeros", "zeros_like", "sum",
                 "max", "min", "argmax", "argmin", "xor_sum", "cumsum", "cumprod", "sort", "flip", "ravel",
                 "swizzle2d", "cdiv", "sigmoid", "softmax", "umulhi", "fma", "exp", "exp2", "log", "log2", "sqrt",
                 "rsqrt", "sin", "cos", "abs", "erf", "floor", "ceil", "fdiv", "div_rn", "sqrt_rn", "range",
                 "static_range", "tensor", "constexpr", "dtype"):
        if hasattr(here, name) and not hasattr(core, name):
            setattr(core, name, getattr(here, name))
    # and Triton's `triton.language.standard` holds the reductions, scans and helpers defined over core
    for name in ("argmax", "argmin", "cdiv", "constexpr_function", "cumprod", "cumsum", "max", "min", "ravel",
                 "sigmoid", "softmax", "sum", "xor_sum", "zeros", "zeros_like", "core", "math"):
        if hasattr(here, name) and not hasattr(standard, name):
            setattr(standard, name, getattr(here, name))


_serve_language_functions_from_core()
