"""Float -> integer casts from f32 (f16 / bf16 widened first) to 8, 16 and 32 bits are one `cvt.rzi` in the PTX:
PTX's cvt already saturates at the destination's range and makes NaN 0 there (the interpreter's rule), where
NVPTX's expansion of llvm.fpto*i.sat added clamps and a NaN select (3-5 instructions per element; Triton's plain
fptosi has none). f64 sources and 64-bit results keep the intrinsic: cvt gives NaN -> MININT there. The values are
checked on the GPU by tests/test_gpu_features.py::test_cast (the saturating cases)."""
from __future__ import annotations

import re
import shutil

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402


@kl.jit
def _cast(X, Y, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs).to(Y.dtype.element_ty))


def _ptx(src, dst):
    x, y = torch.empty(1024, dtype=src), torch.empty(1024, dtype=dst)
    ck = _cast.warmup(x, y, BLOCK=128, grid=(1,))
    ck.build_gpu()
    return ck.asm["ptx"]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("src, dst, cvt", [
    (torch.float32, torch.int32, "cvt.rzi.s32.f32"), (torch.float32, torch.uint32, "cvt.rzi.u32.f32"),
    (torch.float32, torch.int16, "cvt.rzi.s16.f32"), (torch.float32, torch.int8, "cvt.rzi.s16.f32"),
    (torch.float32, torch.uint8, "cvt.rzi.u16.f32"), (torch.float16, torch.int8, "cvt.rzi.s16.f32"),
    (torch.bfloat16, torch.int32, "cvt.rzi.s32.f32"),
])
def test_one_cvt_per_element(src, dst, cvt):
    ptx = _ptx(src, dst)
    assert len(re.findall(re.escape(cvt), ptx)) == 1
    assert not re.search(r"setp\.nan|\b(min|max)\.f32|selp", ptx), "the saturation is expanded again"


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("src, dst", [(torch.float32, torch.int64), (torch.float64, torch.int32)])
def test_nan_to_zero_kept_where_cvt_differs(src, dst):
    assert re.search(r"setp\.nan", _ptx(src, dst)), "cvt makes NaN MININT from f64 or to 64 bits: keep the select"
