"""KERNELLAB_MATH_TILE_WGMMA (pipeline_dot_operands, on by default; `0` turns it off): a tile a wgmma reads only
after elementwise math, 8-bit tiles included, rides in the pipelined loop's stages (cp.async, read back with
ld.shared before its first use), as the mma.sync case already did. heldout_texts4's W4A16 matmul unpacks its uint8
weights (`(q >> shift) & 0xF`, cast, scaled) into the wgmma's B: without the knob the packed tile is one global
load per iteration that no stage hides (benchmarks/NOTES.md). Build test (GPU IR and PTX, sm_90a), GPU results at
both settings (the interpreter runs the tile IR, which the knob does not touch: tests/test_reload_vec.py)."""
from __future__ import annotations

import re

import pytest
import torch

from kernellab.errors import ToolchainError
from tests.test_reload_vec import CFG, _inputs, _launch, _reference, compiled, w4_scaled_mm


def _loop(gpu_ir: str) -> str:
    return gpu_ir[gpu_ir.index("scf.for"):]


@pytest.mark.parametrize("knob", ["0", "1"])
def test_the_packed_tile_rides_in_the_stages(monkeypatch, knob):
    monkeypatch.setenv("KERNELLAB_MATH_TILE_WGMMA", knob)
    ck = compiled(256, 256, 512)
    loop = _loop(ck.asm["gpu"])
    assert "wgmma" in loop
    q_load = re.search(r"%q = tt\.load .*u8", loop)
    if knob == "0":
        assert q_load is not None  # loaded in the body, a memory latency every iteration
    else:
        assert q_load is None
        assert re.search(r"local_alloc .*memdesc<3x128x64xu8", ck.asm["gpu"]), "no u8 stage for the packed tile"
        assert re.search(r"%q = ttg\.local_load .*tensor<128x64xu8", loop)
        # the packed bytes copied 16 at a time beside the fp16 A tile
        assert len(re.findall(r"cp\.async\.cg\.shared\.global \[[^]]*\], \[[^]]*\], 16", ck.asm["ptx"])) > 0


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
@pytest.mark.parametrize("cfg", [CFG, dict(BM=128, BN=128, BK=64, num_warps=4, num_stages=4),
                                 dict(BM=128, BN=256, BK=64, num_warps=8, num_stages=3)])
def test_gpu(knob, cfg, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_MATH_TILE_WGMMA", knob)
    for M, N, K in ((100, 192, 256), (256, 384, 640), (64, 64, 128)):
        a, qw, s, c = _inputs(M, N, K, 128 if K % 128 == 0 else 64, "cuda", seed=M + K)
        group = 128 if K % 128 == 0 else 64
        _launch(a, qw, s, c, group, **cfg)
        torch.testing.assert_close(c.double().cpu(), _reference(a.cpu(), qw.cpu(), s.cpu(), group), rtol=2e-2,
                                   atol=5e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("fused_side", ["0", "1"])
@pytest.mark.parametrize("programs", ["off", "3", "auto"])
def test_gpu_persistent(fused_side, programs, monkeypatch):
    """KERNELLAB_FUSED_SIDE_LOADS: the persistent variant's fused loop copies the packed tile and the scales ahead
    (the tile prologue's `if` recomputed for the copies); results as written, over a forced P = 3 and auto."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_FUSED_SIDE_LOADS", fused_side)
    monkeypatch.setenv("KERNELLAB_MATH_TILE_WGMMA", "1")
    monkeypatch.setenv("KERNELLAB_PERSISTENT", programs)
    for M, N, K in ((100, 192, 256), (320, 384, 1024)):
        a, qw, s, c = _inputs(M, N, K, 128, "cuda", seed=M + K)
        _launch(a, qw, s, c, 128, **CFG)
        torch.testing.assert_close(c.double().cpu(), _reference(a.cpu(), qw.cpu(), s.cpu(), 128), rtol=2e-2,
                                   atol=5e-2)


@pytest.mark.parametrize("knob", ["0", "1"])
def test_the_persistent_variant_copies_the_packed_tile(monkeypatch, knob):
    """KERNELLAB_FUSED_SIDE_LOADS (on by default): in the persistent variant's fused loop the packed tile's
    addresses need the tile prologue's `if`; recomputed for the copies ahead, the tile rides in the stages there
    too; sink_conversions moves the epilogue's conversions (offsets, masks) out of the loop body into its `if`."""
    from kernellab.compiler.codegen.target import Target
    from kernellab.runtime import persistent, targets

    monkeypatch.setenv("KERNELLAB_FUSED_SIDE_LOADS", knob)
    # carried in their readers' layouts (on by default, tests/test_carry_in_use_layout.py) nothing is left to sink
    monkeypatch.setenv("KERNELLAB_CARRY_IN_USE_LAYOUT", "0")
    monkeypatch.setattr(targets, "current_target", lambda: Target(90))
    ck = compiled(1024, 1024, 1024)
    try:
        st = persistent.state(w4_scaled_mm, ck)
        v = st.get_variant(on_gpu=False)
        v.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    stats = next(p.stats for p in v.trace.passes if p.name == "pipeline_dot_operands")
    assert int(stats.get("side_loads", 0)) == (1 if knob == "1" else 0)
    sunk = next(p.stats for p in v.trace.passes if p.name == "sink_conversions")
    assert int(sunk.get("sunk", 0)) >= 4
