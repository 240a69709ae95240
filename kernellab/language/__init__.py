"""`import kernellab.language as tl`: Triton's language surface, compiled by kernellab."""
from . import builtins as _b
from .builtins import *  # noqa: F401,F403
from .builtins import abs, max, min, sum  # noqa: F401 - names that shadow Python's, exported on purpose
from .core import (  # noqa: F401
    BlockPtrType,
    PointerType,
    PropagateNan,
    TensorType,
    bfloat16,
    block_type,
    constexpr,
    dtype,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    pointer_type,
    range,
    static_range,
    tensor,
    tuple,
    uint8,
    uint16,
    uint32,
    uint64,
)

bool = int1  # noqa: A001 - tl.bool is Triton's name for int1
float8e4nv = None  # float8 types are not supported yet

_TENSOR_METHODS = {
    name: getattr(_b, name)
    for name in ["sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce", "cumsum", "cumprod",
                 "associative_scan", "reshape", "view", "ravel", "trans", "permute", "expand_dims",
                 "broadcast_to", "split", "item", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "abs",
                 "erf", "floor", "ceil", "sigmoid", "softmax", "cast"]
}

from . import extra, math  # noqa: E402,F401
from .random import philox, rand, randint, randint4x, randn, randn4x  # noqa: E402,F401
