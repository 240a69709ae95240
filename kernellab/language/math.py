"""`tl.math.*`: the elementwise math functions under Triton's submodule name."""
from .builtins import (  # noqa: F401
    abs,
    ceil,
    cos,
    div_rn,
    erf,
    exp,
    exp2,
    fdiv,
    floor,
    fma,
    log,
    log2,
    rsqrt,
    sin,
    sqrt,
    sqrt_rn,
    umulhi,
)
from .builtins import maximum as max  # noqa: F401
from .builtins import minimum as min  # noqa: F401
