"""`tl.extra.cuda.libdevice`: NVIDIA libdevice's math functions under Triton's names
(`from triton.language.extra.cuda import libdevice`; `libdevice.tanh(x)`).

Each name is a kernellab language function: the catalogue's math functions (which the GPU backend
lowers to `__nv_<name>f` / `__nv_<name>` and the interpreter evaluates in float64) and the core
`tl.*` functions libdevice also names.
"""
from ... import builtins as _b
from ...math import CATALOGUE_FUNCTIONS as _CATALOGUE

globals().update(_CATALOGUE)

# libdevice names that are core tl.* functions
abs = _b.abs  # noqa: A001
ceil, floor, cos, sin, erf = _b.ceil, _b.floor, _b.cos, _b.sin, _b.erf
exp, exp2, log, log2 = _b.exp, _b.exp2, _b.log, _b.log2
sqrt, rsqrt, fma, umulhi, div_rn, sqrt_rn = _b.sqrt_rn, _b.rsqrt, _b.fma, _b.umulhi, _b.div_rn, _b.sqrt_rn
finitef = _CATALOGUE["isfinited"]  # libdevice spells the float32 test __nv_finitef

__all__ = sorted([*_CATALOGUE, "abs", "ceil", "floor", "cos", "sin", "erf", "exp", "exp2", "log", "log2", "sqrt",
                  "rsqrt", "fma", "umulhi", "div_rn", "sqrt_rn", "finitef"])
