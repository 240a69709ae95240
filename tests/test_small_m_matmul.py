"""Small-M (skinny) matmul on mma.sync: BLOCK_M 16 or 32 over 4 or 8 warps, where sm_90a has no wgmma (it needs 64
rows per warpgroup). The warps split the tile as Triton's do ([1, 4] for 16 x 32 and 32 x 64 over 4 warps: each
warp all of M and its own columns of B), a warp's lone 8-column B tile is read two k-steps per ldmatrix .x4 and
the ldmatrix addresses are a register plus an immediate. CPU tests compile the loop and count its instructions in
the PTX (ptxas must assemble it, no spills); `gpu` tests compare with torch in float64 on ragged shapes (M = 1, 7,
16, 33; N and K not multiples of the tile) with NaN-poisoned outputs, B row- and column-major."""
from __future__ import annotations

import re
import shutil

import pytest
import torch

from .ptx import loop_bodies
from .test_gpu_matmul import _operands, check, matmul_kernel, run_matmul

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")


def _build(config, stages, kind="fp16", trans_b=False, arch=90, M=16, N=512, K=512):
    from kernellab.compiler.codegen.target import Target

    bm, bn, bk, warps = config
    a, b = _operands(kind, M, N, K, False, trans_b, "cpu", 0)
    c = torch.empty(M, N, dtype=torch.int32 if kind == "int8" else torch.float32)
    ck = matmul_kernel.warmup(a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), N, 1,
                              BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, INT=kind == "int8",
                              PREC="tf32" if kind == "tf32" else "ieee", num_warps=warps, num_stages=stages,
                              grid=(1,))
    ck.build_gpu(Target(arch))
    return ck


def _loop(ptx):
    body = max(loop_bodies(ptx), key=len)
    return {"mma": len(re.findall(r"mma\.sync\.aligned", body)),
            "x4": len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared", body)),
            "x4.trans": len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans", body)),
            "x2": len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x2", body)),
            "body": body}


@needs_ptxas
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("config, stages, split, mma, a_x4, b_x4, b_x2", [
    # 16 x 32 x 256 over 4 warps: each warp one 16x8 tile, 16 k-steps: 16 mma, A 16 x4, B 8 x4 (two k-steps each)
    ((16, 32, 256, 4), 4, [1, 4], 16, 16, 8, 0),
    ((16, 32, 128, 4), 6, [1, 4], 8, 8, 4, 0),
    ((16, 64, 128, 4), 4, [1, 4], 16, 8, 8, 0),   # 16 columns a warp: one x4 per k-step, as before
    ((32, 64, 128, 4), 4, [1, 4], 32, 16, 8, 0),  # Triton's split (was [2, 2]): A 2 x4, B 1 x4 per k-step
    ((16, 32, 16, 4), 3, [1, 4], 1, 1, 0, 1),     # one k-step: nothing to pair, an x2
    ((16, 32, 64, 8), 3, [2, 4], 4, 4, 2, 0),     # 8 warps on 16 rows: two hold copies
    ((16, 32, 64, 4), 1, [1, 4], 4, 4, 2, 0),     # not pipelined: B staged from registers, read the same way
])
def test_small_m_loop_form(arch, config, stages, split, mma, a_x4, b_x4, b_x2, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _build(config, stages, arch=arch)
    assert f"#mma<{split}>" in ck.asm["gpu"] and "instr = \"mma.sync" in ck.asm["gpu"]
    loop = _loop(ck.asm["ptx"])
    assert (loop["mma"], loop["x4"], loop["x4.trans"], loop["x2"]) == (mma, a_x4, b_x4, b_x2)
    # ldmatrix addresses are 32-bit adds on the shared window's base, not each a 64-bit pointer truncated
    addrs = set(re.findall(r"ldmatrix[^\n]*\[(%r\d+)\]", loop["body"]))
    truncated = set(re.findall(r"cvt\.u32\.u64\s+(%r\d+),", loop["body"]))
    assert addrs and not addrs & truncated
    assert ck.n_regs <= 80  # Triton 3.6: 72 at 16x32x256 and 32x64x128
    # none in the loop; the epilogue's conversion (addressed as one base + immediates) may leave 2 words at 6 stages
    assert ck.n_spills <= 8 and "st.local" not in loop["body"] and "ld.local" not in loop["body"]


@needs_ptxas
def test_lone_tile_of_a_column_major_b(tmp_path, monkeypatch):
    """B column-major (w.T of a row-major w): the stage is stored k-contiguous and the lone 8-column tile is read
    without .trans, still two k-steps per x4."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _build((16, 32, 256, 4), 4, trans_b=True)
    loop = _loop(ck.asm["ptx"])
    assert (loop["mma"], loop["x4"], loop["x4.trans"], loop["x2"]) == (16, 24, 0, 0)
    assert ck.n_spills == 0


@needs_ptxas
@pytest.mark.parametrize("kind, k_step", [("tf32", 8), ("int8", 32), ("bf16", 16)])
def test_lone_tile_other_types(kind, k_step, tmp_path, monkeypatch):
    """The pairing works in bytes: two k-steps of 16 bytes per lane row for tf32 (k8) and int8 (k32) too."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _build((16, 32, 128, 4), 3, kind=kind, trans_b=kind != "bf16")
    loop = _loop(ck.asm["ptx"])
    assert loop["mma"] == 128 // k_step and loop["x2"] == 0 and ck.n_spills == 0


def _fresh_kernel():
    """The same kernel text in a new JIT function: its compiles are not the ones cached by earlier tests (an
    environment knob changes codegen but not the in-memory cache key)."""
    import kernellab as kl

    return kl.jit(matmul_kernel.fn)


@needs_ptxas
@pytest.mark.parametrize("arch", [80, 90])
def test_small_m_loop_copies_before_the_dot(arch, tmp_path, monkeypatch):
    """mma.sync small-M loop: the copies of iteration i + S - 1 go before the dot into the stage iteration i - 1
    read (S stages, one barrier in the loop), no shared-memory hazard, the mma / ldmatrix counts, no spills."""
    from kernellab.compiler.codegen.target import Target

    from .ptx import loads_after_copies, shared_reuse_hazards

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    k = _fresh_kernel()
    a, b = _operands("fp16", 16, 512, 512, False, False, "cpu", 0)
    c = torch.empty(16, 512)
    ck = k.warmup(a, b, c, 16, 512, 512, 512, 1, 512, 1, 512, 1, BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, GROUP_M=8,
                  INT=False, PREC="ieee", num_warps=4, num_stages=4, grid=(1,))
    ck.build_gpu(Target(arch))
    loop = _loop(ck.asm["ptx"])
    assert (loop["mma"], loop["x4"], loop["x4.trans"]) == (16, 16, 8)
    assert loop["body"].count("bar.sync") == 1
    assert not loads_after_copies(ck.asm["ptx"]) and not shared_reuse_hazards(ck.asm["gpu"])
    assert ck.shared >= 4 * (16 * (256 + 8) * 2 + 256 * (32 + 8) * 2)
    assert ck.n_spills == 0, ck.n_spills


# ----------------------------------------------------------------------------------------------------- GPU
SMALL_CONFIGS = [((16, 32, 256, 4), 4), ((16, 64, 128, 4), 4), ((32, 64, 128, 4), 4), ((16, 32, 128, 4), 6),
                 ((16, 32, 16, 4), 3), ((16, 128, 128, 4), 4), ((16, 32, 64, 8), 3),
                 ((16, 32, 64, 4), 1)]  # one stage: the register path stages B itself
SMALL_SHAPES = [(1, 130, 300), (7, 257, 520), (16, 200, 1000), (33, 72, 264)]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["fp16", "bf16"])
@pytest.mark.parametrize("cfg", SMALL_CONFIGS, ids=lambda c: "x".join(map(str, c[0])) + f"s{c[1]}")
@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_small_m_matmul(shape, cfg, kind):
    M, N, K = shape
    config, stages = cfg
    got, ref = run_matmul(kind, M, N, K, config, stages, seed=M * 7 + N + K)
    check(kind, got, ref, K)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["fp16", "tf32", "int8"])
@pytest.mark.parametrize("cfg", [((16, 32, 256, 4), 4), ((32, 64, 64, 4), 3)], ids=["16x32x256", "32x64x64"])
@pytest.mark.parametrize("shape", [(7, 257, 520), (33, 72, 264)], ids=lambda s: "x".join(map(str, s)))
def test_small_m_matmul_column_major_b(shape, cfg, kind):
    M, N, K = shape
    config, stages = cfg
    got, ref = run_matmul(kind, M, N, K, config, stages, trans_b=True, seed=M + N * 3 + K)
    check(kind, got, ref, K)
