"""tl.max / tl.min with return_indices and tl.argmax / tl.argmin on floats: a NaN wins (like torch.argmax), equal
values give the first index. The combine is written as the unordered compare !(a <= b) and an ordered b (two float
compares where (a > b) | (isnan(a) & !isnan(b)) took three): rows with ties, infinities, signed zeros and a NaN,
against torch on the interpreter and the GPU."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402


@kl.jit
def _arg_rows(X, VMAX, IMAX, VMIN, IMIN, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * N + cols, mask=cols < N, other=float("nan"))
    x = tl.where(cols < N, x, float("-inf"))
    v, i = tl.max(x, axis=0, return_indices=True)
    tl.store(VMAX + row, v)
    tl.store(IMAX + row, i)
    y = tl.where(cols < N, tl.load(X + row * N + cols, mask=cols < N, other=0.0), float("inf"))
    tl.store(VMIN + row, tl.min(y, axis=0))
    tl.store(IMIN + row, tl.argmin(y, axis=0))


def _inputs(rows=64, n=300, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-8, 8, (rows, n), generator=g).to(torch.float32)  # many ties
    x[1, 5] = float("nan")
    x[2, 0] = float("nan")
    x[3, n - 1] = float("nan")
    x[4, :] = -0.0
    x[4, 7] = 0.0
    x[5, 9] = float("inf")
    x[5, 10] = float("-inf")
    x[6, :] = float("-inf")
    return x.to(dtype).to(device)


def _check(device, dtype, num_warps):
    x = _inputs(dtype=dtype, device=device)
    rows, n = x.shape
    vmax, vmin = (torch.full((rows,), 7.0, dtype=dtype, device=device) for _ in range(2))
    imax, imin = (torch.full((rows,), -1, dtype=torch.int32, device=device) for _ in range(2))
    _arg_rows[(rows,)](x, vmax, imax, vmin, imin, n, BLOCK=512, num_warps=num_warps)
    xc = x.cpu().float()
    tv, ti = xc.max(dim=1)
    mv, mi = xc.min(dim=1)
    assert torch.equal(imax.cpu().long(), ti), (imax.cpu(), ti)
    assert torch.equal(imin.cpu().long(), mi), (imin.cpu(), mi)
    torch.testing.assert_close(vmax.cpu().float(), tv, equal_nan=True)
    ok = ~torch.isnan(xc).any(dim=1)  # plain tl.min, as Triton's, does not propagate NaN (torch's min does)
    torch.testing.assert_close(vmin.cpu().float()[ok], mv[ok])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_arg_reductions_interpreter(dtype):
    _check("cpu", dtype, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_arg_reductions_gpu(dtype, num_warps):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    _check("cuda", dtype, num_warps)
