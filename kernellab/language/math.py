"""`tl.math.*`: the elementwise math functions under Triton's submodule name.

Besides the core functions, every math function of the op catalogue (`compiler.ops.math_functions`:
tanh, atan2, isnan, ...) is defined here from its catalogue entry, so adding one to the catalogue
adds it to `tl.math` and to `tl.extra.cuda.libdevice` with no change in this file.
"""
from ..compiler.ops import math_functions as _catalogue
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
from .core import builtin as _builtin


def _function(op):
    """The language function of catalogue math op `op`: Triton's libdevice names (arg0, arg1)."""
    what = f"tl.math.{op.tl_name}"
    if op.arity == 1:
        def f(arg0, _sem=None):
            return _sem.math_function(op.name, what, arg0)
    else:
        def f(arg0, arg1, _sem=None):
            return _sem.math_function(op.name, what, arg0, arg1)
    f.__name__ = f.__qualname__ = op.tl_name
    f.__doc__ = f"{op.summary} (elementwise; float32/float64, float16/bfloat16 computed in float32)."
    return _builtin(f)


CATALOGUE_FUNCTIONS = {op.tl_name: _function(op) for op in _catalogue()}
globals().update(CATALOGUE_FUNCTIONS)
