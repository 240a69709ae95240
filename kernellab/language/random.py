"""Counter-based random numbers (Philox, 10 rounds by default), written in the kernel language itself.

`rand(seed, offset)` is a pure function of (seed, offset): the same pair gives the same number in
every program, on the interpreter and on the GPU, so dropout masks can be regenerated instead of stored.
The algorithms and constants are Triton's (`triton/language/random.py`), so a kernel draws the same
numbers under kernellab as under Triton: Philox-4x32 for 32-bit counters, Philox-4x64 for 64-bit ones.
"""
from .. import language as tl
from ..runtime.jit import jit
from .core import constexpr

N_ROUNDS_DEFAULT = 10

# Philox constants (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): key bumps
# (Weyl sequence) and round multipliers, for 32-bit and 64-bit words.
_KEY_A_32, _KEY_B_32, _ROUND_A_32, _ROUND_B_32 = 0x9E3779B9, 0xBB67AE85, 0xD2511F53, 0xCD9E8D57
_KEY_A_64, _KEY_B_64 = 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B
_ROUND_A_64, _ROUND_B_64 = 0xD2E7470EE14C6C93, 0xCA5A826395121157


@jit
def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """`n_rounds` Philox rounds on the counter (c0..c3) with key (k0, k1); all uint32 or all uint64."""
    if c0.dtype == tl.uint32:
        KEY_A: constexpr = _KEY_A_32
        KEY_B: constexpr = _KEY_B_32
        ROUND_A: constexpr = _ROUND_A_32
        ROUND_B: constexpr = _ROUND_B_32
    else:
        tl.static_assert(c0.dtype == tl.uint64, "philox_impl needs uint32 or uint64 words")
        KEY_A: constexpr = _KEY_A_64
        KEY_B: constexpr = _KEY_B_64
        ROUND_A: constexpr = _ROUND_A_64
        ROUND_B: constexpr = _ROUND_B_64
    for _ in tl.static_range(n_rounds):
        a = c0
        b = c2
        c0 = tl.umulhi(ROUND_B, b) ^ c1 ^ k0
        c2 = tl.umulhi(ROUND_A, a) ^ c3 ^ k1
        c1 = tl.mul(ROUND_B, b, sanitize_overflow=False)
        c3 = tl.mul(ROUND_A, a, sanitize_overflow=False)
        k0 = tl.add(k0, KEY_A, sanitize_overflow=False)
        k1 = tl.add(k1, KEY_B, sanitize_overflow=False)
    return c0, c1, c2, c3


@jit
def philox(seed, c0, c1, c2, c3, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Four random words from an integer seed and a counter (c0..c3) of 32-bit or 64-bit integers: 32-bit
    counters use the seed's two halves as the key, 64-bit ones the whole seed (and 0)."""
    seed = tl.to_tensor(seed)
    tl.static_assert(seed.dtype.is_int(), "philox needs an integer seed")
    seed = seed.to(tl.uint64)
    c0 = tl.to_tensor(c0)
    c1 = tl.to_tensor(c1)
    c2 = tl.to_tensor(c2)
    c3 = tl.to_tensor(c3)
    if c0.dtype.primitive_bitwidth == 32:
        word: constexpr = tl.uint32
        k_lo = (seed & 0xFFFFFFFF).to(tl.uint32)
        k_hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    else:
        tl.static_assert(c0.dtype.primitive_bitwidth == 64, "philox needs 32-bit or 64-bit counters")
        word: constexpr = tl.uint64
        k_lo = seed
        k_hi = seed * 0
    return philox_impl(c0.to(word, bitcast=True), c1.to(word, bitcast=True), c2.to(word, bitcast=True),
                       c3.to(word, bitcast=True), k_lo, k_hi, n_rounds)


@jit
def randint(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """One random uint32 per offset."""
    r, _, _, _ = randint4x(seed, offset, n_rounds)
    return r


@jit
def randint4x(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Four independent random uint32 per offset (the counter is the offset's two 32-bit halves)."""
    lo = offset.to(tl.uint32)
    zero = lo * 0
    if offset.dtype.primitive_bitwidth > 32:
        hi = (offset >> 32).to(tl.uint32)
    else:
        hi = zero
    return philox(seed, lo, hi, zero, zero, n_rounds)


@jit
def uint_to_uniform_float(x):
    """A random 32- or 64-bit integer to a float32 uniform in [0, 1): read as signed, folded onto the
    non-negative half (x < 0 -> -x - 1) and scaled by 2^-31 (2^-63), like Triton."""
    if x.dtype == tl.uint32 or x.dtype == tl.int32:
        x = x.to(tl.int32, bitcast=True)
        scale = 4.6566127342e-10
    else:
        tl.static_assert(x.dtype == tl.uint64 or x.dtype == tl.int64, "uint_to_uniform_float needs 32/64-bit ints")
        x = x.to(tl.int64, bitcast=True)
        scale = 1.0842020432385337e-19
    x = tl.where(x < 0, -x - 1, x)
    return x * scale


@jit
def rand(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Uniform float32 in [0, 1), one per offset."""
    return uint_to_uniform_float(randint(seed, offset, n_rounds))


@jit
def rand4x(seed, offsets, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Four independent uniform float32 in [0, 1) per offset."""
    i1, i2, i3, i4 = randint4x(seed, offsets, n_rounds)
    return uint_to_uniform_float(i1), uint_to_uniform_float(i2), uint_to_uniform_float(i3), \
        uint_to_uniform_float(i4)


@jit
def pair_uniform_to_normal(u1, u2):
    """Box-Muller: two independent standard normals from two uniforms (u1 kept away from 0)."""
    u1 = tl.maximum(1.0e-7, u1)
    th = 6.283185307179586 * u2
    r = tl.sqrt(-2.0 * tl.log(u1))
    return r * tl.cos(th), r * tl.sin(th)


@jit
def randn(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Standard normal float32, one per offset."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds)
    n1, _ = pair_uniform_to_normal(uint_to_uniform_float(i1), uint_to_uniform_float(i2))
    return n1


@jit
def randn4x(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Four independent standard normals per offset."""
    i1, i2, i3, i4 = randint4x(seed, offset, n_rounds)
    n1, n2 = pair_uniform_to_normal(uint_to_uniform_float(i1), uint_to_uniform_float(i2))
    n3, n4 = pair_uniform_to_normal(uint_to_uniform_float(i3), uint_to_uniform_float(i4))
    return n1, n2, n3, n4
