"""Compiles of one specialization that differ only in num_warps / num_stages (an autotuner's configs, mostly)
share the frontend's tile IR, unless the kernel reads those options while it is traced
(tl.extra.cuda.num_warps()). The GPU builds stay separate and equal to fresh compiles."""
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.codegen.target import Target
from kernellab.language.extra import cuda as kl_cuda


@kl.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3.0, mask=m)


@kl.jit
def _warps(y_ptr):
    tl.store(y_ptr, kl_cuda.num_warps())


def _fresh(k):
    return kl.jit(k.fn)


def test_warps_and_stages_share_the_tile_ir(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    k = _fresh(_scale)
    x, y = torch.randn(300), torch.empty(300)
    a = k.warmup(x, y, 300, BLOCK=256, num_warps=4, num_stages=3, grid=(1,))
    b = k.warmup(x, y, 300, BLOCK=256, num_warps=8, num_stages=2, grid=(1,))
    c = k.warmup(x, y, 300, BLOCK=128, num_warps=8, num_stages=2, grid=(1,))  # another specialization
    assert b is not a and b.module is a.module and c.module is not a.module
    assert b.options["num_warps"] == 8 and b.asm["tile"] == a.asm["tile"]
    b.build_gpu(Target(90))
    assert "ptx" not in a.asm and not any(r.stage == "gpu" for r in a.trace.passes)  # b's build is b's
    a.build_gpu(Target(90))
    assert ".reqntid 256" in b.asm["ptx"] and ".reqntid 128" in a.asm["ptx"]
    fresh = _fresh(_scale).warmup(x, y, 300, BLOCK=256, num_warps=8, num_stages=2, grid=(1,)).build_gpu(Target(90))
    assert fresh.asm["ptx"] == b.asm["ptx"]
    # both run (the interpreter runs the shared tile IR)
    k[(2,)](x, y, 300, BLOCK=256, num_warps=8, num_stages=2)
    torch.testing.assert_close(y, x * 3.0)


def test_a_kernel_reading_num_warps_is_traced_per_num_warps():
    k = _fresh(_warps)
    y = torch.zeros(1, dtype=torch.int32)
    a = k.warmup(y, num_warps=4, grid=(1,))
    b = k.warmup(y, num_warps=8, grid=(1,))
    assert b.module is not a.module
    k[(1,)](y, num_warps=8)
    assert y.item() == 8
    k[(1,)](y, num_warps=2)
    assert y.item() == 2


def test_a_cleared_cache_compiles_afresh():
    k = _fresh(_scale)
    x, y = torch.randn(64), torch.empty(64)
    a = k.warmup(x, y, 64, BLOCK=64, num_warps=4, grid=(1,))
    k.device_caches[0][0].clear()  # Triton's kernel.device_caches[device][0]: the compile cache
    b = k.warmup(x, y, 64, BLOCK=64, num_warps=8, grid=(1,))
    assert b.module is not a.module
