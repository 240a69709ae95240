"""A stencil's shifted taps (x[h + i - 1, w + j - 1]: contiguous, but one element off any vector) take the run per
thread of the aligned accesses of their shape (assign_layouts' widening, as Triton's coalescing does for loads):
the taps read scalars in the store's layout and the sum needs no conversion through shared memory. CPU: the
compiled PTX has no shared memory; interpreter and GPU: the result against torch's float64 conv."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402


def _taps_kernel():
    """The idioms stencil's `taps_2d` text (tests/idioms.py), built by kernellab."""
    from tests.idioms import _stencil

    return next(v.kernel for v in _stencil(kl.jit, tl).variants if v.name == "taps_2d")


conv3x3 = _taps_kernel()


def _run(device, P=3, H=37, W=70, BH=16, BW=64, num_warps=4):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(P, H, W, generator=g).half().to(device)
    wt = torch.randn(P, 9, generator=g).to(device)
    y = torch.full_like(x, float("nan"))
    conv3x3[(triton_cdiv(W, BW), triton_cdiv(H, BH), P)](x, wt, y, H, W, BH=BH, BW=BW, num_warps=num_warps)
    ref = torch.nn.functional.conv2d(x.double().cpu()[None], wt.double().cpu().reshape(P, 1, 3, 3), padding=1,
                                     groups=P)[0]
    err = (y.double().cpu() - ref).norm() / ref.norm()
    assert err < 1e-3, err


def triton_cdiv(a, b):
    return (a + b - 1) // b


def test_stencil_interpreter():
    _run("cpu")


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("BH, BW, num_warps", [(16, 64, 4), (32, 128, 8), (8, 32, 2)])
def test_stencil_taps_need_no_shared_memory(BH, BW, num_warps):
    x = torch.empty(4, 512, 512, dtype=torch.float16)
    ck = conv3x3.warmup(x, torch.empty(4, 9), x, 512, 512, BH=BH, BW=BW, num_warps=num_warps, grid=(1, 1, 1))
    ck.build_gpu()
    assert "ttg.convert_layout" not in ck.asm["gpu"]
    assert "ld.shared" not in ck.asm["ptx"] and "st.shared" not in ck.asm["ptx"]
    assert ck.n_spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("BH, BW, num_warps", [(16, 64, 4), (32, 128, 8), (8, 32, 2)])
def test_stencil_gpu(BH, BW, num_warps):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    _run("cuda", P=5, H=300, W=517, BH=BH, BW=BW, num_warps=num_warps)
    _run("cuda", P=2, H=512, W=512, BH=BH, BW=BW, num_warps=num_warps)
