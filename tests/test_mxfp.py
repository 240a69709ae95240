"""`kernellab.tools.mxfp` (served as `triton.tools.mxfp`): fp4 e2m1 and e8m0 host data for microscaling.

References are written here from the OCP MX formats: e2m1 = sign, 2 exponent bits (bias 1), 1 mantissa bit
(subnormal at exponent 0), rounding to nearest with ties to the even code and saturation at 6; e8m0 =
2**(code - 127) with 255 as NaN, from a float by its exact binary exponent. The data then feeds
tl.dot_scaled on the interpreter (and the GPU), checked against a float64 matmul of the decoded values.
"""
import math
import sys

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.compat
import kernellab.language as tl
from kernellab.tools.mxfp import MXFP4Tensor, MXScaleTensor

gpu = pytest.mark.gpu


def e2m1_value(code: int) -> float:
    s, e, m = code >> 3 & 1, code >> 1 & 3, code & 1
    v = m * 0.5 if e == 0 else (1 + m / 2) * 2.0 ** (e - 1)
    return -v if s else v


def e2m1_ref(x: float) -> int:
    """The code for x: nearest magnitude (ties: even code), saturating at 6, sign kept (also for zero)."""
    sign = 8 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if math.isnan(a) or a >= 6:
        return sign | 7
    best = min(range(8), key=lambda c: (abs(e2m1_value(c) - a), c & 1))
    return sign | best


def floats():
    g = torch.Generator().manual_seed(11)
    edge = [0.0, -0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0, 6.0, 6.5, 7.0, -100.0, 0.1, -0.2, 0.2500001,
            1e-30, float("inf"), float("-inf"), float("nan"), -float("nan"), 0.5, -1.5, 2.9999, 3.0001]
    return torch.cat([torch.tensor(edge), torch.randn(500, generator=g) * 3]).to(torch.float32)


def test_e2m1_decode_matches_the_format():
    t = MXFP4Tensor(size=(16,))
    t.data = torch.arange(16, dtype=torch.uint8)
    got = t.to(torch.float32)
    want = torch.tensor([e2m1_value(c) for c in range(16)])
    assert torch.equal(got, want) and torch.signbit(got[8]) and not torch.signbit(got[0])


def test_e2m1_from_float_rounds_to_nearest_even_and_saturates():
    x = floats()
    got = MXFP4Tensor(x).data.tolist()
    want = [e2m1_ref(v) for v in x.tolist()]
    bad = [(v, g, w) for v, g, w in zip(x.tolist(), got, want) if g != w]
    assert not bad, bad[:5]


def test_e2m1_random_roundtrip_and_empty():
    torch.manual_seed(3)
    t = MXFP4Tensor(size=(64, 33)).random()
    assert t.data.dtype == torch.uint8 and int(t.data.max()) <= 15 and len(t.data.unique()) == 16
    assert torch.equal(MXFP4Tensor(t.to(torch.float32)).data, t.data)
    assert MXFP4Tensor(torch.tensor([])).to(torch.float32).numel() == 0


@pytest.mark.parametrize("shape, dim", [((10,), 0), ((7, 5), 1), ((7, 5), 0), ((4, 6, 9), 2), ((3, 8, 2), 1)])
def test_e2m1_packing(shape, dim):
    torch.manual_seed(len(shape) * 10 + dim)
    t = MXFP4Tensor(size=shape).random()
    packed = t.to_packed_tensor(dim)
    codes = np.moveaxis(t.data.numpy(), dim, -1)
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros(codes.shape[:-1] + (1,), np.uint8)], axis=-1)
    want = np.moveaxis(codes[..., 0::2] | (codes[..., 1::2] << 4), -1, dim)
    assert packed.dtype == torch.uint8 and np.array_equal(packed.numpy(), want)
    assert torch.equal(t.unpack_packed_tensor(packed, dim, shape), t.data)
    with pytest.raises(AssertionError):
        t.to_packed_tensor(len(shape))


def test_e8m0_from_float_and_back():
    vals = [1.0, 2.0, 0.75, 3.9999, 1e-40, 2.0 ** -127, 2.0 ** -130, 2.0 ** 127, 3e38, 0.5, 1.5,
            0.0, -0.0, -1.0, float("inf"), float("-inf"), float("nan")]
    x = torch.tensor(vals, dtype=torch.float32)
    got = MXScaleTensor(x).data.tolist()

    def ref(v):
        if not math.isfinite(v) or v <= 0:
            return 255
        return min(max(math.frexp(v)[1] - 1 + 127, 0), 254)

    assert got == [ref(float(v)) for v in x.tolist()]
    t = MXScaleTensor(size=(256,))
    t.data = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    back = t.to(torch.float32)
    assert [float(v) for v in back[:255]] == [float(np.float32(math.ldexp(1.0, c - 127))) for c in range(255)]
    assert torch.isnan(back[255])


def test_e8m0_random_bounds():
    torch.manual_seed(4)
    t = MXScaleTensor(size=(4000,)).random()
    assert int(t.data.min()) == 0 and int(t.data.max()) == 254
    t = MXScaleTensor(size=(4000,)).random(low=0.25, high=64.0)
    assert int(t.data.min()) == 125 and int(t.data.max()) == 133
    assert torch.equal(MXScaleTensor(t.to(torch.float32)).data, t.data)
    with pytest.raises(ValueError):
        MXScaleTensor(size=(2,)).random(low=8.0, high=1.0)


def test_served_as_triton_tools_mxfp():
    saved = {k: v for k, v in sys.modules.items() if k == "triton" or k.startswith("triton.")}
    for k in saved:
        del sys.modules[k]
    kernellab.compat.install()
    try:
        from triton.tools.mxfp import MXFP4Tensor as A
        from triton.tools.mxfp import MXScaleTensor as B

        assert A is MXFP4Tensor and B is MXScaleTensor
    finally:
        kernellab.compat.uninstall()
        sys.modules.update(saved)


# --------------------------------------------------------------------------- feeding tl.dot_scaled


@kl.jit
def mx_dot(a_ptr, sa_ptr, b_ptr, sb_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    a = tl.load(a_ptr + tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :])  # e4m3 bytes
    b = tl.load(b_ptr + tl.arange(0, K // 2)[:, None] * N + tl.arange(0, N)[None, :])  # e2m1 pairs along K
    sa = tl.load(sa_ptr + tl.arange(0, M)[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    sb = tl.load(sb_ptr + tl.arange(0, N)[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    c = tl.dot_scaled(a, sa, "e4m3", b, sb, "e2m1")
    tl.store(o_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], c)


def _mx_dot(device, M=32, N=32, K=64):
    torch.manual_seed(9)
    a = (torch.randn(M, K) * 2).to(torch.float8_e4m3fn)
    b_mx = MXFP4Tensor(size=(K, N)).random()
    b = b_mx.to_packed_tensor(dim=0)
    sa = MXScaleTensor(size=(M, K // 32)).random(low=0.125, high=8.0)
    sb = MXScaleTensor(size=(N, K // 32)).random(low=0.125, high=8.0)
    out = torch.full((M, N), float("nan"), device=device)
    mx_dot[(1,)](a.view(torch.uint8).to(device), sa.data.to(device), b.to(device), sb.data.to(device), out, M, N, K)
    a_ref = a.double() * sa.to(torch.float32).double().repeat_interleave(32, dim=1)
    b_ref = b_mx.to(torch.float32).double() * sb.to(torch.float32).double().repeat_interleave(32, dim=1).T
    torch.testing.assert_close(out.cpu().double(), a_ref @ b_ref, rtol=1e-5, atol=1e-4)


def test_mx_data_feeds_dot_scaled_interpreter():
    _mx_dot("cpu")


@gpu
def test_mx_data_feeds_dot_scaled_gpu():
    _mx_dot("cuda")
