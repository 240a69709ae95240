"""accelerate_matmul: which mma.sync instruction each dot gets (fp16/bf16 m16n8k16 with fp32 or fp16
accumulation, tf32 m16n8k8, int8 m16n8k32), which wgmma form on sm_90a (per operand and accumulator type, as
Triton picks), how the warps split the tile, and the recorded reason when a dot stays on CUDA cores."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import accelerate_matmul


def dot_ir(m, n, k, ab, acc, prec="ieee", feed=""):
    return f"""
tt.func @k(%a: tensor<{m}x{k}x{ab}>, %b: tensor<{k}x{n}x{ab}>, %c: tensor<{m}x{n}x{acc}>) {{
  %d = tt.dot %a, %b, %c {{input_precision = "{prec}"}} : tensor<{m}x{n}x{acc}>
{feed}  tt.print %d
  tt.return
}}
"""


def the_dot(m):
    return next(op for op in m.kernel.walk() if op.name == "tt.dot")


@pytest.mark.parametrize("ab, acc, prec, instr", [
    ("f16", "f32", "ieee", "mma.sync.m16n8k16.f16"),
    ("bf16", "f32", "ieee", "mma.sync.m16n8k16.bf16"),
    ("f32", "f32", "tf32", "mma.sync.m16n8k8.tf32"),
    ("i8", "i32", "ieee", "mma.sync.m16n8k32.s8"),
    ("f16", "f16", "ieee", "mma.sync.m16n8k16.f16.f16acc"),
])
def test_instruction_per_dtype(run_pass, ab, acc, prec, instr):
    m, stats = run_pass(accelerate_matmul, dot_ir(128, 128, 64, ab, acc, prec), GpuOptions(num_warps=8, arch=80))
    d = the_dot(m)
    assert d.attrs["instr"] == instr and stats == {"mma": 1, "cuda_core": 0}
    assert d.attrs["mma"] == [2, 4]  # Triton's split: 4 x 4 instruction tiles (64 x 32) per warp


@pytest.mark.parametrize("ab", ["f16", "bf16"])
def test_wgmma_on_sm90_one_m64_block_per_warpgroup(run_pass, ab):
    m, _ = run_pass(accelerate_matmul, dot_ir(128, 128, 64, ab, "f32"), GpuOptions(num_warps=8, arch=90))
    d = the_dot(m)
    assert d.attrs["instr"] == f"wgmma.m64n128k16.{ab}" and d.attrs["mma"] == [8, 1]
    m, _ = run_pass(accelerate_matmul, dot_ir(128, 128, 64, ab, "f32"), GpuOptions(num_warps=8, arch=90, wgmma=False))
    assert the_dot(m).attrs["not_wgmma"] == "no wgmma: enable_wgmma=False"


@pytest.mark.parametrize("m, warps", [(128, 4), (256, 4), (256, 8)])
def test_wgmma_with_several_m64_blocks_per_warpgroup(run_pass, m, warps):
    """A tile taller than 64 rows per warpgroup issues several m64 instructions per k-step: the #mma layout
    with every warp along M interleaves warps by 16 rows, exactly as those instructions do."""
    mod, _ = run_pass(accelerate_matmul, dot_ir(m, 128, 64, "f16", "f32"), GpuOptions(num_warps=warps, arch=90))
    d = the_dot(mod)
    assert d.attrs["instr"] == "wgmma.m64n128k16.f16" and d.attrs["mma"] == [warps, 1]


@pytest.mark.parametrize("m, n, warps, ab, instr, mma", [
    (64, 128, 8, "f16", "wgmma.m64n64k16.f16", [4, 2]), (64, 256, 16, "bf16", "wgmma.m64n64k16.bf16", [4, 4]),
    (128, 256, 16, "f16", "wgmma.m64n128k16.f16", [8, 2]), (64, 64, 8, "f32", "wgmma.m64n32k8.tf32", [4, 2])])
def test_wgmma_warpgroups_side_by_side_along_n(run_pass, m, n, warps, ab, instr, mma):
    """Fewer 64-row blocks than warpgroups: the rest of the warpgroups split N, each issuing m64n(N/wn) on its own
    columns (Triton's warpsPerCTA [4, 2] for a 64-row tile over 8 warps), instead of mma.sync."""
    mod, _ = run_pass(accelerate_matmul, dot_ir(m, n, 64, ab, "f32", "tf32" if ab == "f32" else "ieee"),
                      GpuOptions(num_warps=warps, arch=90))
    d = the_dot(mod)
    assert d.attrs["instr"] == instr and d.attrs["mma"] == mma


@pytest.mark.parametrize("m, n, k, ab, acc, warps, why", [
    (64, 64, 64, "f16", "f32", 8, "split evenly between warpgroups"),
    (96, 128, 64, "f16", "f32", 4, "multiple of 64 per warpgroup"),
    (128, 128, 64, "f16", "f32", 2, "whole warpgroups"),
    (128, 128, 48, "f16", "f32", 8, "BLOCK_K = 48 cannot be swizzled"),
    (128, 128, 24, "f32", "f32", 8, "BLOCK_K = 24 cannot be swizzled"),
])
def test_why_not_wgmma_is_recorded(run_pass, m, n, k, ab, acc, warps, why):
    mod, _ = run_pass(accelerate_matmul, dot_ir(m, n, k, ab, acc, "tf32" if ab == "f32" else "ieee"),
                      GpuOptions(num_warps=warps, arch=90))
    d = the_dot(mod)
    assert d.attrs["instr"].startswith("mma.sync") and why in d.attrs["not_wgmma"]


@pytest.mark.parametrize("ab, acc, prec, instr", [
    ("f16", "f32", "ieee", "wgmma.m64n128k16.f16"),
    ("f16", "f16", "ieee", "wgmma.m64n128k16.f16.f16acc"),
    ("f32", "f32", "tf32", "wgmma.m64n128k8.tf32"),
    ("i8", "i32", "ieee", "wgmma.m64n128k32.s8"),
    ("f8e4nv", "f32", "ieee", "wgmma.m64n128k32.e4m3"),
    ("f8e5", "f32", "ieee", "wgmma.m64n128k32.e5m2"),
    ("f8e4nv", "f16", "ieee", "wgmma.m64n128k32.e4m3.f16acc"),
])
def test_wgmma_form_per_dtype(run_pass, ab, acc, prec, instr):
    """The wgmma form Triton's test_dot expects per (operand, accumulator) type: 32 bytes of K per instruction."""
    m, stats = run_pass(accelerate_matmul, dot_ir(128, 128, 64, ab, acc, prec), GpuOptions(num_warps=8, arch=90))
    d = the_dot(m)
    assert d.attrs["instr"] == instr and d.attrs["mma"] == [8, 1] and stats == {"mma": 1, "cuda_core": 0}


@pytest.mark.parametrize("m, n, k, ab, acc, prec, reason", [
    (128, 128, 64, "f32", "f32", "ieee", "IEEE fp32 runs on CUDA cores"),
    (128, 128, 64, "bf16", "f16", "ieee", "f16 accumulator"),
    (32, 128, 64, "f8e4nv", "f32", "ieee", "multiple of 64 per warpgroup"),
    (128, 128, 24, "f16", "f32", "ieee", "not a multiple of the 16x8x16"),
    (128, 128, 16, "i8", "i32", "ieee", "not a multiple of the 16x8x32"),
    (16, 64, 8, "f16", "f32", "ieee", "not a multiple"),
])
def test_fallbacks_say_why(run_pass, m, n, k, ab, acc, prec, reason):
    mod, stats = run_pass(accelerate_matmul, dot_ir(m, n, k, ab, acc, prec), GpuOptions(num_warps=4, arch=90))
    d = the_dot(mod)
    assert "mma" not in d.attrs and reason in d.attrs["mma_fallback"] and stats == {"mma": 0, "cuda_core": 1}


def test_sm75_has_no_mma_sync(run_pass):
    mod, _ = run_pass(accelerate_matmul, dot_ir(64, 64, 32, "f16", "f32"), GpuOptions(num_warps=4, arch=75))
    assert "sm_75 has no mma.sync" in the_dot(mod).attrs["mma_fallback"]


def test_scores_feeding_a_row_reduction_keep_warps_along_m(run_pass):
    feed = """  %r = tt.reduce %d {axis = 1} : tensor<128xf32> {
  ^bb(%x: f32, %y: f32):
    %z = arith.maxnumf %x, %y : f32
    tt.reduce.return %z
  }
  tt.print %r
"""
    mod, _ = run_pass(accelerate_matmul, dot_ir(128, 64, 64, "f16", "f32", feed=feed), GpuOptions(num_warps=8))
    assert the_dot(mod).attrs["mma"] == [8, 1]


@pytest.mark.parametrize("m, n, k, ab, acc, warps, split", [
    (16, 16, 16, "f16", "f32", 4, [2, 2]),     # two 16x8 blocks, four warps: two warps hold copies
    (32, 32, 128, "f16", "f16", 16, [4, 4]),   # eight blocks, sixteen warps
    (32, 32, 128, "i8", "i32", 16, [4, 4]),
    (16, 16, 16, "f32", "f32", 4, [2, 2]),
    (2, 4, 32, "f16", "f32", 1, [1, 1]),       # smaller than one block: rows and columns wrap onto it
    (8, 64, 16, "f16", "f32", 4, [1, 4]),
])
def test_tiles_with_fewer_blocks_than_warps_take_tensor_cores(run_pass, m, n, k, ab, acc, warps, split):
    """As Triton's layouts do, the warps (and rows or columns) past a small tile's edge hold copies: test_dot's
    16x16x16 over 4 warps and 2x4x32 on one warp run on mma.sync (wgmma needs 64 rows per warpgroup)."""
    mod, stats = run_pass(accelerate_matmul, dot_ir(m, n, k, ab, acc, "tf32" if ab == "f32" else "ieee"),
                          GpuOptions(num_warps=warps, arch=90))
    d = the_dot(mod)
    assert d.attrs["instr"].startswith("mma.sync") and d.attrs["mma"] == split and stats["mma"] == 1


def test_a_small_chained_dot_keeps_its_warps_along_m(run_pass):
    feed = "  %e = tt.dot %d, %b, %c {input_precision = \"ieee\"} : tensor<16x16xf32>\n"
    mod, _ = run_pass(accelerate_matmul, dot_ir(16, 16, 16, "f32", "f32", "tf32", feed), GpuOptions(num_warps=4, arch=80))
    assert the_dot(mod).attrs["mma"] == [4, 1]


# (M, N, num_warps) -> warpsPerCTA of the mma layout Triton 3.6 gives a plain fp16 dot (read from its ttgir for sm_80
# and for the skinny matmul's BLOCK_M 16 / 32 tiles on sm_90)
TRITON_SPLITS = [
    (16, 32, 4, [1, 4]), (16, 64, 4, [1, 4]), (16, 128, 4, [1, 4]), (32, 64, 4, [1, 4]), (64, 32, 4, [2, 2]),
    (32, 32, 4, [2, 2]), (64, 64, 8, [2, 4]), (16, 64, 8, [1, 8]), (128, 32, 4, [4, 1]), (32, 128, 4, [1, 4]),
    (64, 128, 4, [1, 4]), (128, 64, 8, [4, 2]), (32, 256, 8, [1, 8]), (256, 32, 8, [8, 1]), (16, 16, 4, [2, 2]),
    (64, 16, 4, [4, 1]), (32, 16, 8, [4, 2]), (128, 128, 4, [2, 2]), (128, 256, 8, [2, 4]),
]


@pytest.mark.parametrize("m, n, warps, split", TRITON_SPLITS)
def test_warps_split_the_tile_as_triton_does(run_pass, m, n, warps, split):
    """Small-M tiles put every warp on its own columns (16 x 32 over 4 warps: [1, 4], each warp one 16x8 tile, a
    quarter of B's tile), so the skinny matmul's large operand is read from shared memory
    once per k-step; larger tiles split so that each warp has as many 16-row as 8-column tiles (M on a tie)."""
    mod, _ = run_pass(accelerate_matmul, dot_ir(m, n, 64, "f16", "f32"), GpuOptions(num_warps=warps, arch=80))
    assert the_dot(mod).attrs["mma"] == split
    if m < 16 * warps:  # sm_90a: too few rows for wgmma, the same mma.sync split
        mod, _ = run_pass(accelerate_matmul, dot_ir(m, n, 64, "f16", "f32"), GpuOptions(num_warps=warps, arch=90))
        assert the_dot(mod).attrs["mma"] == split and the_dot(mod).attrs["instr"].startswith("mma.sync")
