"""`tl.extra.cuda`: num_warps() / num_threads() (constexprs from the launch's num_warps) and Triton's
convert_custom_float8_sm80/sm70 (fp8e4b15 <-> fp16/fp32).

References are independent of kernellab: the launch arguments for num_warps, and for e4b15 the format's
definition (4 exponent bits, bias 15, 3 mantissa bits, no NaN/inf) with Triton's conversion rule stated as
values: clamp |x| to 1.75, then the nearest e4b15 value with ties away from zero; fp32 first goes to fp16
toward zero. Interpreter tests run everywhere, ptxas tests need the CUDA toolkit, `gpu` tests a GPU.
"""
import shutil

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.language.extra import cuda

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
gpu = pytest.mark.gpu
POISON = -0x7F7F7F7F


@kl.jit
def _warps_of_helper(x):
    return x * 0 + cuda.num_warps()


@kl.jit
def threads_kernel(Out, Warps):
    n: tl.constexpr = cuda.num_threads()
    offs = tl.arange(0, n)
    tl.store(Out + offs, offs + 1000)
    tl.store(Warps + tl.arange(0, 2), tl.join(cuda.num_warps(), _warps_of_helper(n)))


def _check_threads(device, warps):
    out = torch.full((1024 + 32,), POISON, dtype=torch.int32, device=device)
    w = torch.full((2,), POISON, dtype=torch.int32, device=device)
    threads_kernel[(1,)](out, w, num_warps=warps)
    n = 32 * warps
    want = torch.full_like(out, POISON)
    want[:n] = torch.arange(n, dtype=torch.int32) + 1000
    assert torch.equal(out.cpu(), want.cpu()), f"num_warps={warps}: wrote {int((out != POISON).sum())} elements"
    assert w.tolist() == [warps, warps]


@pytest.mark.parametrize("warps", [1, 2, 4, 8, 32])
def test_num_threads_and_num_warps_follow_the_launch(warps):
    _check_threads("cpu", warps)


def test_each_num_warps_is_its_own_compile():
    """The constexpr is read at trace time, so the compile cache must key on num_warps."""
    for warps in (2, 8, 2):
        _check_threads("cpu", warps)
    assert len({ck.asm["tile"] for ck in threads_kernel.cache.values()}) >= 2


@needs_ptxas
def test_num_threads_assembles():
    ck = threads_kernel.warmup(torch.empty(1056, dtype=torch.int32), torch.empty(2, dtype=torch.int32),
                               num_warps=8, grid=(1,))
    ck.build_gpu()
    assert "cubin" in ck.asm and "end = 256" in ck.asm["tile"] and "reqntidx\", i32 256" in ck.asm["llir"]


@gpu
@pytest.mark.parametrize("warps", [1, 4, 8])
def test_num_threads_gpu(warps):
    _check_threads("cuda", warps)


# --------------------------------------------------------------------------- convert_custom_float8


def _e4b15_values():
    """The 256 e4b15 values by byte, from the format's definition."""
    out = np.empty(256)
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        v = (m / 8) * 2.0 ** -14 if e == 0 else (1 + m / 8) * 2.0 ** (e - 15)
        out[b] = -v if b & 0x80 else v
    return out


def _f16_toward_zero(x):
    """float32 values -> the float16 value of largest magnitude not above |x| (finite overflow: 65504)."""
    grid = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)  # 0 .. 65504, increasing
    a = np.abs(x.astype(np.float64))
    mag = grid[np.clip(np.searchsorted(grid, a, side="right") - 1, 0, None)]
    return np.where(np.isinf(x), x, np.copysign(mag, x))


def _to_e4b15_ref(x16):
    """float16 values -> e4b15 value (float64): clamp to 1.75 (NaN too), nearest with ties away from zero."""
    t = _e4b15_values()[:128]
    a = np.abs(x16.astype(np.float64))
    a = np.where(np.isnan(a), 1.75, np.minimum(a, 1.75))
    out = np.empty_like(a)
    for i, v in enumerate(a.ravel()):
        d = np.abs(t - v)
        best = np.flatnonzero(d == d.min())
        out.flat[i] = t[best].max()  # a tie: the one farther from zero
    return np.copysign(out, x16.astype(np.float64))


@kl.jit
def up_kernel(Bits, Out16, Out32, N: tl.constexpr, SM70: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(Bits + offs).to(tl.float8e4b15, bitcast=True)
    if SM70:
        tl.store(Out16 + offs, cuda.convert_custom_float8_sm70(x, tl.float16))
        tl.store(Out32 + offs, cuda.convert_custom_float8_sm70(x, tl.float32))
    else:
        tl.store(Out16 + offs, cuda.convert_custom_float8_sm80(x, tl.float16))
        tl.store(Out32 + offs, cuda.convert_custom_float8_sm80(x, tl.float32))


@kl.jit
def down_kernel(X, Bits, N: tl.constexpr):
    offs = tl.arange(0, N)
    y = cuda.convert_custom_float8_sm80(tl.load(X + offs), tl.float8e4b15)
    tl.store(Bits + offs, y.to(tl.uint8, bitcast=True))


def _check_up(device, sm70):
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8).to(device)
    o16 = torch.full((256,), float("nan"), dtype=torch.float16, device=device)
    o32 = torch.full((256,), float("nan"), dtype=torch.float32, device=device)
    up_kernel[(1,)](bits, o16, o32, N=256, SM70=sm70)
    want = _e4b15_values()
    assert np.array_equal(o16.cpu().double().numpy(), want)
    assert np.array_equal(o32.cpu().double().numpy(), want)


def _check_down(device, dtype):
    g = torch.Generator().manual_seed(7)
    x = torch.cat([torch.randn(200, generator=g) * 0.7, torch.tensor(
        [0.0, -0.0, 1.75, -1.75, 1.8, 1.875, 3.0, -100.0, 2.0 ** -17, 2.0 ** -18 * 3, 1e-9, float("inf"),
         float("-inf"), float("nan"), 1.0 + 2 ** -4, 1.0 + 3 * 2 ** -4])]).to(dtype)
    n = 256
    x = torch.cat([x, torch.randn(n - x.numel(), generator=g).to(dtype)])
    bits = torch.full((n,), 0x5A, dtype=torch.uint8, device=device)
    down_kernel[(1,)](x.to(device), bits, N=n)
    xn = x.float().numpy()
    x16 = _f16_toward_zero(xn).astype(np.float16) if dtype == torch.float32 else x.numpy()
    want = _to_e4b15_ref(x16)
    got = _e4b15_values()[bits.cpu().numpy()]
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(float(xn[i]), got[i], want[i]) for i in bad[:5]]


@pytest.mark.parametrize("sm70", [False, True])
def test_convert_custom_float8_up(sm70):
    _check_up("cpu", sm70)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_convert_custom_float8_down(dtype):
    _check_down("cpu", dtype)


def test_convert_custom_float8_rejects_other_types():
    with pytest.raises(kl.CompilationError, match="fp8e4b15"):
        down_kernel[(1,)](torch.zeros(16, dtype=torch.int32), torch.zeros(16, dtype=torch.uint8), N=16)


@needs_ptxas
def test_convert_custom_float8_assembles():
    ck = down_kernel.warmup(torch.empty(256), torch.empty(256, dtype=torch.uint8), N=256, grid=(1,))
    ck.build_gpu()
    assert "cvt.rz.f16.f32" in ck.asm["ptx"]


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_convert_custom_float8_gpu(dtype):
    _check_up("cuda", False)
    _check_down("cuda", dtype)
