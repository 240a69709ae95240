"""An @jit helper in its own module, for tests/test_line_info.py's check that an inlined helper's ops carry
this file's lines (not the kernel's file at the same numbers)."""
import kernellab as kl
import kernellab.language as tl

# padding, so the helper's lines do not exist in the kernel's file


@kl.jit
def scaled_exp(x, s):
    y = x * s
    return tl.exp(y)


@kl.jit
def row_max(x):
    m = tl.max(x, axis=0)
    return m
