"""Counter-based random numbers (Philox-4x32, 10 rounds), written in the kernel language itself.

`rand(seed, offset)` is a pure function of (seed, offset): the same pair gives the same number in
every program, on the interpreter and on the GPU, so dropout masks can be regenerated instead of stored.
"""
from .. import language as tl
from ..runtime.jit import jit
from .core import constexpr

# Philox-4x32 constants (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
_MUL_A = 0xD2511F53
_MUL_B = 0xCD9E8D57
_KEY_BUMP_A = 0x9E3779B9
_KEY_BUMP_B = 0xBB67AE85


@jit
def _u32(x):
    if x.dtype.primitive_bitwidth == 32:
        return x.to(tl.uint32, bitcast=True)
    else:
        return x.to(tl.uint32)


@jit
def philox(seed, c0, c1, c2, c3, n_rounds: constexpr = 10):
    """Four 32-bit random words from a 64-bit seed and a 128-bit counter (c0..c3)."""
    seed = tl.cast(seed, tl.uint64)
    k0 = tl.cast(seed & 0xFFFFFFFF, tl.uint32)
    k1 = tl.cast(seed >> 32, tl.uint32)
    c0 = _u32(c0)
    c1 = _u32(c1)
    c2 = _u32(c2)
    c3 = _u32(c3)
    for _ in tl.static_range(n_rounds):
        a = c0
        b = c2
        c0 = tl.umulhi(b, _MUL_B) ^ c1 ^ k0
        c2 = tl.umulhi(a, _MUL_A) ^ c3 ^ k1
        c1 = b * _MUL_B
        c3 = a * _MUL_A
        k0 = k0 + _KEY_BUMP_A
        k1 = k1 + _KEY_BUMP_B
    return c0, c1, c2, c3


@jit
def randint(seed, offset, n_rounds: constexpr = 10):
    """One random uint32 per offset."""
    r, _, _, _ = randint4x(seed, offset, n_rounds)
    return r


@jit
def randint4x(seed, offset, n_rounds: constexpr = 10):
    """Four independent random uint32 per offset."""
    if offset.dtype.primitive_bitwidth > 32:
        wide = offset.to(tl.uint64, bitcast=True)
        lo = (wide & 0xFFFFFFFF).to(tl.uint32)
        hi = (wide >> 32).to(tl.uint32)
        zero = lo * 0
        return philox(seed, lo, hi, zero, zero, n_rounds)
    else:
        zero = offset * 0
        return philox(seed, offset, zero, zero, zero, n_rounds)


@jit
def uint_to_uniform_float(x):
    """A uint32 to a float32 uniform in [0, 1): the top 24 bits scaled by 2^-24."""
    return (x >> 8).to(tl.float32) * 5.9604644775390625e-08


@jit
def rand(seed, offset, n_rounds: constexpr = 10):
    """Uniform float32 in [0, 1), one per offset."""
    return uint_to_uniform_float(randint(seed, offset, n_rounds))


@jit
def rand4x(seed, offset, n_rounds: constexpr = 10):
    i1, i2, i3, i4 = randint4x(seed, offset, n_rounds)
    return uint_to_uniform_float(i1), uint_to_uniform_float(i2), uint_to_uniform_float(i3), \
        uint_to_uniform_float(i4)


@jit
def _box_muller(u1, u2):
    """Two independent standard normals from two uniforms (u1 kept away from 0)."""
    u1 = tl.maximum(u1, 1.0e-7)
    r = tl.sqrt(-2.0 * tl.log(u1))
    th = 6.283185307179586 * u2
    return r * tl.cos(th), r * tl.sin(th)


@jit
def randn(seed, offset, n_rounds: constexpr = 10):
    """Standard normal float32, one per offset."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds)
    n1, _ = _box_muller(uint_to_uniform_float(i1), uint_to_uniform_float(i2))
    return n1


@jit
def randn4x(seed, offset, n_rounds: constexpr = 10):
    i1, i2, i3, i4 = randint4x(seed, offset, n_rounds)
    n1, n2 = _box_muller(uint_to_uniform_float(i1), uint_to_uniform_float(i2))
    n3, n4 = _box_muller(uint_to_uniform_float(i3), uint_to_uniform_float(i4))
    return n1, n2, n3, n4
