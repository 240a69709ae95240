"""KERNELLAB_CARRY_IN_USE_LAYOUT=1 (remove_layout_conversions, default off until timed on a GPU): the persistent
W4A16 matmul's fused loop carries its packed-weight mask and its epilogue offsets in the layouts their readers want,
so no 128x64 mask crosses shared memory every iteration. Built for sm_90a on any machine (GPU IR, registers);
results against float64 on the GPU, persistent (forced) and as written, ragged sizes."""
from __future__ import annotations

import pytest
import torch

from kernellab.compiler.codegen.target import Target
from kernellab.errors import ToolchainError
from kernellab.runtime import persistent, targets
from tests.test_reload_vec import CFG, _inputs, _launch, _reference, w4_scaled_mm

KNOB = "KERNELLAB_CARRY_IN_USE_LAYOUT"


def _variant(monkeypatch, knob):
    monkeypatch.setenv(KNOB, knob)
    monkeypatch.setattr(targets, "current_target", lambda: Target(90))
    M = N = K = 4096
    a, qw, s, c = _inputs(M, N, K, 128)
    ck = w4_scaled_mm.warmup(a, qw, s, c, M, N, K, a.stride(0), qw.stride(0), s.stride(0), c.stride(0), GROUP=128,
                             **CFG, grid=(1,))
    try:
        ck.build_gpu()
        st = persistent.state(w4_scaled_mm, ck)
        v = st.get_variant(on_gpu=False)
        v.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    assert st.fused()
    return v


def test_the_fused_loop_converts_no_mask_each_iteration(monkeypatch):
    off = _variant(monkeypatch, "0")
    on = _variant(monkeypatch, "1")
    rec = next(p for p in on.trace.passes if p.name == "remove_layout_conversions")
    assert rec.stats.get("carried", 0) >= 1, rec.stats
    masks = [c for c in on.asm["gpu"].splitlines() if "ttg.convert_layout" in c and "xi1," in c]
    assert not masks, masks  # off: the 128x64 packed-weight mask, through 8 KB of shared memory
    assert any("ttg.convert_layout" in c and "128x64xi1" in c for c in off.asm["gpu"].splitlines())
    assert on.n_regs < off.n_regs, (on.n_regs, off.n_regs)  # 183 -> 134 when written


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
@pytest.mark.parametrize("persist", ["1", "0"])
def test_gpu(knob, persist, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv(KNOB, knob)
    monkeypatch.setenv("KERNELLAB_PERSISTENT", persist)
    for M, N, K in ((100, 192, 256), (333, 130, 512), (1024, 768, 1024)):
        for cfg in (CFG, dict(CFG, BM=128, BN=128, BK=64, num_warps=8), dict(CFG, BN=128, num_stages=4)):
            a, qw, s, c = _inputs(M, N, K, 128, "cuda", seed=M + N)
            _launch(a, qw, s, c, 128, **cfg)
            torch.testing.assert_close(c.double().cpu(), _reference(a.cpu(), qw.cpu(), s.cpu(), 128), rtol=2e-2,
                                       atol=5e-2, msg=lambda m: f"{M}x{N}x{K} {cfg}: {m}")
