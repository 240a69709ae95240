"""Attention's softmax under the warpgroup's own p·v (passes/overlap_softmax.py, KERNELLAB_ATTN_OVERLAP=1, issue 15):
the warp-specialized key loop of `benchmarks/attention_kernel.py`'s descriptor text issues the next scores' wgmma and
the previous p·v back to back and waits for p·v only after the softmax.

Without a GPU: ptxas takes the PTX (no spills, no serialized wgmma, the consumers within their setmaxnreg budget) and
the SASS shows the schedule: in the loop, the scores' HGMMAs and the p·v HGMMAs (A from registers) issued together,
`WARPGROUP.DEPBAR.LE gsb0, 0x1` (the scores), every MUFU.EX2 of the softmax, then `WARPGROUP.DEPBAR.LE gsb0, 0x0`
(p·v). The interpreter runs the tile IR, which the pass (GPU lowering only) does not touch. On the GPU (`-m gpu`):
each case with the knob on and off against float32 attention (outputs and log-sum-exp poisoned), and on against off
bit for bit (the pass reorders the issue of the same instructions, not the arithmetic), in a child process with a
timeout (a wrong mbarrier parity hangs the kernel)."""
from __future__ import annotations

import os
import re
import shutil

import pytest
import torch

from kernellab.compiler.codegen.lower_warp_specialize import registers

from .test_warp_specialize import run_in_child
from .test_warp_specialize_attention import DESC, assert_close_to_reference, run_desc

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")


def overlap_stats(ck):
    ck = getattr(ck, "_kl", ck)
    return next(p.stats for p in ck.trace.passes if p.name == "overlap_softmax")


def build(S, D, BN, stages, warps, causal, on: bool, monkeypatch, tmp_path):
    """The descriptor text built for sm_90a with the knob on or off (the in-memory compile cache, not keyed by the
    environment, is dropped before and after)."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELLAB_ATTN_OVERLAP", "1" if on else "0")
    DESC.device_caches.clear()
    try:
        ck, *_ = run_desc(S, D, BN, stages, warps, causal, True, device="cpu", warmup=True)
        ck = getattr(ck, "_kl", ck)
        ck.build_gpu(Target(90))
    finally:
        DESC.device_caches.clear()
    return ck


def loop_schedule(sass: str) -> list:
    """Per overlapped loop body in the SASS: (HGMMAs with A from shared memory, HGMMAs with A from registers, both
    issued before the first wait; MUFU.EX2 between `DEPBAR.LE gsb0, 0x1` and the next `DEPBAR.LE gsb0, 0x0`)."""
    lines = [ln.strip() for ln in sass.splitlines()]
    out = []
    for i, ln in enumerate(lines):
        if "WARPGROUP.DEPBAR.LE gsb0, 0x1" not in ln:
            continue
        j = i - 1
        while j >= 0 and "WARPGROUP.DEPBAR" not in lines[j] and "BAR.SYNC" not in lines[j]:
            j -= 1
        issued = lines[j + 1:i]
        shared_a = sum(bool(re.search(r"HGMMA\.\S+ R\d+, gdesc", x)) for x in issued)
        regs_a = sum(bool(re.search(r"HGMMA\.\S+ R\d+, R\d+, gdesc", x)) for x in issued)
        k = next(k for k in range(i + 1, len(lines)) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in lines[k])
        out.append((shared_a, regs_a, sum("MUFU.EX2" in x for x in lines[i + 1:k])))
    return out


def consumer_registers(sass: str) -> int:
    """The highest register the consumer warps use (after their setmaxnreg), plus one."""
    tail = sass[sass.index("USETMAXREG.TRY_ALLOC"):]
    return max(int(r) for r in re.findall(r"\bR(\d+)\b", tail)) + 1


# (D, BLOCK_N, stages, warps): the benchmark's hd128 row (8 warps: two consumer warpgroups taking turns), hd64 at
# 4 warps (one consumer warpgroup, no turns), 64-key blocks, 2 stages
CFGS = [(128, 128, 3, 8), (128, 64, 2, 8), (64, 64, 3, 4), (64, 64, 3, 8)]


@needs_ptxas
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("cfg", CFGS, ids=lambda c: "x".join(map(str, c)))
def test_schedule_in_sass(cfg, causal, monkeypatch, tmp_path):
    from kernellab.viz.data import sass

    D, BN, stages, warps = cfg
    ck = build(1000, D, BN, stages, warps, causal, True, monkeypatch, tmp_path)
    loops = 2 if causal else 1
    assert overlap_stats(ck) == {"overlapped": loops}
    entry, _, inc = registers(warps)
    assert ck.n_spills == 0 and ck.n_regs == entry
    log = ck.report.get("log", "")
    assert "C75" not in log, log  # no "wgmma.mma_async instructions are serialized"
    ptx = ck.asm["ptx"]
    assert "%dynamic_smem_size" in ptx  # the pin that keeps the p·v wait after the softmax
    text, why = sass(ck.asm["cubin"])
    if text is None:
        pytest.skip(why)
    sched = loop_schedule(text)
    # causal with BLOCK_N = BLOCK_M: the diagonal's loop runs one iteration, prologue and epilogue: LLVM drops the
    # loop left between them (no iteration)
    assert len(sched) == (1 if causal and BN == 128 else loops)
    exps = 128 // (warps // 4) * BN // 128  # one per score a consumer thread holds
    for shared_a, regs_a, mufu in sched:
        steps = D // 16  # k-steps of the scores (K = head dim) and of p·v (K = BLOCK_N)
        assert shared_a == steps * (128 // (warps // 4) // 64) and regs_a == BN // 16 * (128 // (warps // 4) // 64)
        assert mufu >= exps, (mufu, exps)
    if inc > entry:
        assert consumer_registers(text) <= inc


@needs_ptxas
def test_knob_off_is_unchanged(monkeypatch, tmp_path):
    """KERNELLAB_ATTN_OVERLAP=0 (the default): the pass records nothing and the PTX has no pin."""
    ck = build(1024, 128, 128, 3, 8, False, False, monkeypatch, tmp_path)
    assert overlap_stats(ck) == {"overlapped": 0}
    assert "%dynamic_smem_size" not in ck.asm["ptx"]
    monkeypatch.delenv("KERNELLAB_ATTN_OVERLAP")
    ck2 = build(1024, 128, 128, 3, 8, False, False, monkeypatch, tmp_path)
    monkeypatch.delenv("KERNELLAB_ATTN_OVERLAP", raising=False)
    assert ck2.asm["ptx"] == ck.asm["ptx"]


def test_interpreter_unaffected(monkeypatch):
    """The pass is part of GPU lowering: the interpreter's result with the knob on equals the one with it off."""
    from .test_warp_specialize_attention import _inputs, attention_desc, kl, reference

    outs = []
    for on in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_ATTN_OVERLAP", on)
        q, k, v = _inputs(1, 2, 40, 16, 7, "cpu")
        out = torch.full_like(q, float("nan"))
        attention_desc(q, k, v, True, 0.25, kl, DESC, BLOCK_M=16, BLOCK_N=16, out=out, warp_specialize=True)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    torch.testing.assert_close(outs[1].double(), reference(q, k, v, True, 0.25)[0], atol=2e-2, rtol=0)


# ---------------------------------------------------------------------------------------------- GPU

def gpu_cases(cases):
    """Each case with the knob off and on (the compile cache dropped between), both against float32 attention, and
    on against off bit for bit."""
    for case in cases:
        got = {}
        for on in ("0", "1"):
            os.environ["KERNELLAB_ATTN_OVERLAP"] = on
            DESC.device_caches.clear()
            S, D, BN, stages, warps, causal = case
            ck, out, lse, ref, ref_lse = run_desc(S, D, BN, stages, warps, causal, True, Z=2, H=3, seed=S + D)
            torch.cuda.synchronize()
            stats = overlap_stats(ck)
            assert stats["overlapped"] == (0 if on == "0" else 2 if causal else 1), (case, on, stats)
            assert_close_to_reference(out, lse, ref, ref_lse, f"case {case} on={on}: ")
            got[on] = (out, lse)
        assert torch.equal(got["0"][0], got["1"][0]) and torch.equal(got["0"][1], got["1"][1]), \
            f"case {case}: knob on and off differ"


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("cfg", CFGS, ids=lambda c: "x".join(map(str, c)))
def test_gpu_overlap_on_off(cfg, causal):
    """S: less than one key block (64), one (128: causal's off-band loop runs no iteration), ragged (200, 1000),
    several even blocks (1024)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    cases = [(S, *cfg, causal) for S in (64, 128, 200, 1000, 1024)]
    run_in_child(f"import tests.test_attention_overlap as t; t.gpu_cases({cases!r})", 300)


def test_benchmark_overlap_column_on_cpu(monkeypatch):
    """benchmarks/attention.py --warp-specialize --overlap: the column compiled with the knob (the interpreter, a
    dummy timer), so the GPU script does not rot; the environment is set for the compiling call only."""
    import functools

    import kernellab as kl
    import kernellab.language as tl
    from benchmarks.attention import _fmt, compiled_with, run_row
    from benchmarks.attention_kernel import attention_desc, make_attention_desc_kernel

    monkeypatch.delenv("KERNELLAB_ATTN_OVERLAP", raising=False)
    seen = []

    def spy(*args, **kwargs):
        seen.append(os.environ.get("KERNELLAB_ATTN_OVERLAP"))
        return attention_desc(*args, warp_specialize=True, **kwargs)

    impls = {"kernellab": (kl, DESC, functools.partial(attention_desc, warp_specialize=True)),
             "kernellab_overlap": (kl, make_attention_desc_kernel(kl, tl), compiled_with(spy,
                                                                                        KERNELLAB_ATTN_OVERLAP="1"))}
    row = run_row(impls, 1, 2, 48, 16, True, device="cpu", timer=lambda fn: (fn(), fn(), 1e-3)[2],
                  cfg=dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=3))
    assert row["kernellab"]["ok"] and row["kernellab_overlap"]["ok"], row
    assert "kl overlap" in _fmt(row) and "overlap/ws     1.00" in _fmt(row)
    assert seen == ["1", None, None] and "KERNELLAB_ATTN_OVERLAP" not in os.environ
