"""KERNELLAB_SCAN_LEAN (codegen of tt.scan, on by default; `0` turns it off): a scan across warps stores each warp's
total from the lane holding it (no shfl.idx broadcast), and with one element per thread and repetition along the
axis the result is the earlier warps' prefix combined with the inclusive lane scan (no exclusive shfl.up, the thread's
own value not kept across the barrier). Built for sm_90a here (the selective scan of heldout_texts5: shuffles and
registers); GPU results against float64 at both settings in tests/test_gpu_features.py (cumsum, cumprod, a
non-commutative associative_scan, forward and reverse, several warps and repetitions) and
tests/test_carry_as_made.py (the selective scan)."""
from __future__ import annotations

import re

import pytest

from kernellab.errors import ToolchainError
from tests.test_carry_as_made import _inputs, ssm_scan


def _build(block_l, warps):
    x, dt, a, b, c, y = _inputs(1, 256, 4, 16)
    ck = ssm_scan.warmup(x, dt, a, b, c, y, 256, 4, N=16, BLOCK_L=block_l, num_warps=warps, grid=(1,))
    try:
        ck.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    return ck


def _shfl(ptx, kind):
    return len(re.findall(rf"shfl\.sync\.{kind}\.b32", ptx))


@pytest.mark.parametrize("block_l,warps", [(64, 4), (128, 4), (32, 2)])
def test_fewer_shuffles_and_registers(monkeypatch, block_l, warps):
    monkeypatch.setenv("KERNELLAB_SCAN_LEAN", "0")
    off = _build(block_l, warps)
    monkeypatch.setenv("KERNELLAB_SCAN_LEAN", "1")
    on = _build(block_l, warps)
    # [BLOCK_L, 16] over [16, 2] lanes: 8 columns a thread, two values, BLOCK_L / (16 * warps) repetitions
    per_rep = 8 * 2
    reps = block_l // (16 * warps)
    assert _shfl(off.asm["ptx"], "idx") - _shfl(on.asm["ptx"], "idx") == per_rep * reps  # the warp totals
    assert _shfl(off.asm["ptx"], "up") - _shfl(on.asm["ptx"], "up") == per_rep * reps  # the exclusive values
    assert on.n_spills == 0 and on.n_regs < off.n_regs
