"""`tl.dot_scaled` (microscaling operands: fp4 e2m1 packed in bytes, fp8 e4m3 / e5m2 bytes, e8m0 scales per 32
elements of K) against a float64 NumPy decoding written here from the formats' definitions."""
import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl

FIELDS = {"e2m1": (2, 1), "e4m3": (4, 3), "e5m2": (5, 2)}


def decode(codes: np.ndarray, fmt: str) -> np.ndarray:
    """float64 values of small-float codes (one code per array element)."""
    e_bits, m_bits = FIELDS[fmt]
    bias = (1 << (e_bits - 1)) - 1
    c = codes.astype(np.int64)
    sign = np.where(c >> (e_bits + m_bits), -1.0, 1.0)
    e, m = (c >> m_bits) & ((1 << e_bits) - 1), c & ((1 << m_bits) - 1)
    v = sign * np.where(e == 0, m * 2.0 ** (1 - bias - m_bits), (1 + m / 2 ** m_bits) * 2.0 ** (e - bias))
    if fmt == "e5m2":
        v = np.where(e == 31, np.where(m == 0, sign * np.inf, np.nan), v)
    if fmt == "e4m3":
        v = np.where((c & 0x7F) == 0x7F, np.nan, v)
    return v


def upcast(x: np.ndarray, fmt: str, k_axis: int) -> np.ndarray:
    if fmt in ("bf16", "fp16"):
        return x.astype(np.float64)
    if fmt != "e2m1":
        return decode(x, fmt)
    lo, hi = decode(x & 0xF, fmt), decode(x >> 4, fmt)  # the low nibble is the earlier element along K
    pairs = np.stack([lo, hi], axis=k_axis + 1)
    shape = list(x.shape)
    shape[k_axis] *= 2
    return pairs.reshape(shape)


@kl.jit
def scaled_kernel(a_ptr, sa_ptr, b_ptr, sb_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                  FA: tl.constexpr, FB: tl.constexpr, SCALE_A: tl.constexpr, SCALE_B: tl.constexpr):
    KA: tl.constexpr = K // 2 if FA == "e2m1" else K
    KB: tl.constexpr = K // 2 if FB == "e2m1" else K
    a = tl.load(a_ptr + tl.arange(0, M)[:, None] * KA + tl.arange(0, KA)[None, :])
    b = tl.load(b_ptr + tl.arange(0, KB)[:, None] * N + tl.arange(0, N)[None, :])
    sa = None
    sb = None
    if SCALE_A:
        sa = tl.load(sa_ptr + tl.arange(0, M)[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    if SCALE_B:
        sb = tl.load(sb_ptr + tl.arange(0, N)[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    c = tl.dot_scaled(a, sa, FA, b, sb, FB)
    tl.store(o_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], c)


CASES = [("e2m1", "e4m3", True, False), ("e4m3", "e5m2", True, True), ("e5m2", "e2m1", True, True),
         ("e2m1", "bf16", True, False), ("e4m3", "fp16", True, False), ("e2m1", "e2m1", True, True)]


def _run(fa, fb, scale_a, scale_b, device, M=32, N=32, K=64):
    rs = np.random.RandomState(hash((fa, fb)) % 2**31)

    def operand(fmt, shape):
        if fmt in ("bf16", "fp16"):
            t = torch.from_numpy(rs.uniform(-4, 4, shape).astype(np.float32))
            return t.to(torch.bfloat16 if fmt == "bf16" else torch.float16)
        codes = rs.randint(0, 256, shape).astype(np.uint8)
        if fmt in ("e4m3", "e5m2"):
            codes[(codes & 0x7F) >= 0x78] = 0x3A  # no inf/NaN codes in the data; they are tested below
        codes.flat[:4] = [0x01, 0x80, 0x7, 0x30]  # a subnormal, negative zero, more edge codes
        return torch.from_numpy(codes)

    a = operand(fa, (M, K // 2 if fa == "e2m1" else K))
    b = operand(fb, (K // 2 if fb == "e2m1" else K, N))
    sa = torch.from_numpy(rs.randint(118, 136, (M, K // 32)).astype(np.uint8))
    sb = torch.from_numpy(rs.randint(118, 136, (N, K // 32)).astype(np.uint8))
    out = torch.full((M, N), float("nan"), device=device)
    scaled_kernel[(1,)](a.to(device), sa.to(device), b.to(device), sb.to(device), out, M, N, K, fa, fb, scale_a,
                        scale_b)
    A = upcast(a.float().numpy() if fa in ("bf16", "fp16") else a.numpy(), fa, 1)
    B = upcast(b.float().numpy() if fb in ("bf16", "fp16") else b.numpy(), fb, 0)
    if scale_a:
        A = A * np.repeat(2.0 ** (sa.numpy().astype(np.int64) - 127), 32, axis=1)
    if scale_b:
        B = B * np.repeat(2.0 ** (sb.numpy().astype(np.int64) - 127), 32, axis=1).T
    comp = torch.float16 if "fp16" in (fa, fb) else torch.bfloat16  # operands are rounded to this, as in Triton
    A = torch.from_numpy(A).to(comp).double().numpy()
    B = torch.from_numpy(B).to(comp).double().numpy()
    ref = A @ B
    got = out.cpu().double().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_dot_scaled_interpreter(case):
    _run(*case, device="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_dot_scaled_gpu(case):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _run(*case, device="cuda")


def test_dot_scaled_special_codes():
    """NaN scale (0xFF) and the formats' NaN / inf codes propagate through the product."""
    M = N = 32
    K = 64
    a = torch.full((M, K), 0x38, dtype=torch.uint8)  # e4m3 1.0
    a[0, 0] = 0x7F  # e4m3 NaN
    b = torch.full((K, N), 0x3C, dtype=torch.uint8)  # e5m2 1.0
    b[0, 1] = 0x7C  # e5m2 +inf
    sa = torch.full((M, K // 32), 127, dtype=torch.uint8)
    sa[2, 0] = 0xFF  # NaN scale
    sb = torch.full((N, K // 32), 127, dtype=torch.uint8)
    out = torch.zeros(M, N)
    scaled_kernel[(1,)](a, sa, b, sb, out, M, N, K, "e4m3", "e5m2", True, True)
    assert torch.isnan(out[0]).all() and torch.isnan(out[2]).all()
    assert torch.isinf(out[1, 1]) and out[1, 1] > 0 and out[1, 0] == K


def test_dot_scaled_compiles_to_tensor_cores():
    M = N = 64
    K = 64
    a, b = torch.zeros(M, K // 2, dtype=torch.uint8), torch.zeros(K, N, dtype=torch.uint8)
    s = torch.zeros(M, K // 32, dtype=torch.uint8)
    ck = scaled_kernel.warmup(a, s, b, s, torch.empty(M, N), M, N, K, "e2m1", "e4m3", True, True, grid=(1,))
    ck.build_gpu()
    assert "cubin" in ck.asm and ("mma.sync" in ck.asm["ptx"] or "wgmma" in ck.asm["ptx"])


def test_dot_scaled_errors():
    with pytest.raises(kl.CompilationError, match="format"):
        scaled_kernel.warmup(torch.zeros(32, 64, dtype=torch.uint8), torch.zeros(32, 2, dtype=torch.uint8),
                             torch.zeros(64, 32, dtype=torch.uint8), torch.zeros(32, 2, dtype=torch.uint8),
                             torch.empty(32, 32), 32, 32, 64, "e3m3", "e4m3", True, True, grid=(1,))
