"""float32 -> float16 / bfloat16 with fp_downcast_rounding="rtz" (Triton: tt.fp_to_fp, PTX cvt.rz): toward zero,
a finite value past the largest finite one gives that one, infinities and NaN stay. On the interpreter and the GPU
against a reference made from the float32 bits (bfloat16: the top half; float16: rtne stepped back toward zero)."""
import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import KernelLabError


@kl.jit
def downcast(x_ptr, y_ptr, N, ROUNDING: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty, fp_downcast_rounding=ROUNDING), mask=m)


def _inputs(n=4096, seed=0):
    g = np.random.default_rng(seed)
    bits = g.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32).copy()
    edges = np.array([65504.0, 65519.99, 65520.0, 65535.0, 1e6, -1e6, -65520.0, 3.4e38, -3.4e38, np.inf, -np.inf,
                      np.nan, 5.96e-8, 2.98e-8, -2.99e-8, 1e-40, -1e-45, 0.1, -0.1, 1.0 + 2**-11, 1.0 - 2**-25],
                     np.float32)
    x[:len(edges)] = edges
    x[len(edges):len(edges) + 16] = np.float32(3.3895314e38) * np.linspace(0.999, 1.001, 16, dtype=np.float32)
    return x


def _ref_f16(x):
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float16)
        over = np.isfinite(x) & (np.abs(r.astype(np.float64)) > np.abs(x.astype(np.float64)))
        toward = np.nextafter(r, np.float16(0)).astype(np.float16)
    return np.where(over, toward, r).view(np.uint16)


def _ref_bf16(x):
    top = (x.view(np.uint32) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0) | (top & 0x8000), top)


def _same(got_bits, want_bits, x, nan_mask_bits):
    nan_got = (got_bits & 0x7FFF) > nan_mask_bits
    nan_want = np.isnan(x)
    assert np.array_equal(nan_got, nan_want)
    ok = ~nan_want
    bad = np.nonzero(got_bits[ok] != want_bits[ok])[0]
    assert bad.size == 0, f"{bad.size} mismatches, first x={x[ok][bad[0]]!r}: {got_bits[ok][bad[0]]:#x} vs " \
                          f"{want_bits[ok][bad[0]]:#x}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rtz_downcast_on_the_interpreter(dtype):
    x = _inputs()
    y = torch.full((x.size,), 7, dtype=dtype)  # poisoned
    downcast[(x.size // 1024,)](torch.from_numpy(x), y, x.size, ROUNDING="rtz", BLOCK=1024)
    got = y.view(torch.int16).numpy().view(np.uint16)
    if dtype == torch.float16:
        _same(got, _ref_f16(x), x, 0x7C00)
    else:
        _same(got, _ref_bf16(x), x, 0x7F80)


def test_rtz_differs_from_rtne_where_it_should():
    x = torch.tensor([1.0 + 2**-11 + 2**-12, 65520.0, -70000.0], dtype=torch.float32)
    y = torch.empty(3, dtype=torch.float16)
    downcast[(1,)](x, y, 3, ROUNDING="rtz", BLOCK=4)
    assert y.tolist() == [1.0, 65504.0, -65504.0]
    downcast[(1,)](x, y, 3, ROUNDING="rtne", BLOCK=4)
    assert y[0].item() == 1.0 + 2**-10 and y[1].item() == float("inf")


def test_rtz_from_float64_is_refused():
    x = torch.ones(4, dtype=torch.float64)
    y = torch.empty(4, dtype=torch.float16)
    with pytest.raises(KernelLabError, match="rtz"):
        downcast[(1,)](x, y, 4, ROUNDING="rtz", BLOCK=4)


def test_rtz_downcast_ptx():
    x = torch.empty(8, dtype=torch.float32)
    for dtype, name in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
        ptx = downcast.warmup(x, torch.empty(8, dtype=dtype), 8, ROUNDING="rtz", BLOCK=128, grid=(1,)).asm["ptx"]
        assert f"cvt.rz.{name}.f32" in ptx


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rtz_downcast_on_the_gpu(dtype):
    x = _inputs(1 << 16, seed=1)
    y = torch.full((x.size,), 7, dtype=dtype, device="cuda")
    downcast[(x.size // 1024,)](torch.from_numpy(x).cuda(), y, x.size, ROUNDING="rtz", BLOCK=1024)
    got = y.view(torch.int16).cpu().numpy().view(np.uint16)
    if dtype == torch.float16:
        _same(got, _ref_f16(x), x, 0x7C00)
    else:
        _same(got, _ref_bf16(x), x, 0x7F80)
