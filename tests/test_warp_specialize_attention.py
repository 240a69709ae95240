"""Warp specialization of attention's key loop (passes/warp_specialize.py, issue 15): a producer warpgroup fills
the K and V stages by TMA, the consumer warps run q·kT, the softmax and p·v, two consumer warpgroups taking turns
on the tensor cores as passes/warpgroup_turns.py orders them.

Kernel texts: `benchmarks/attention_kernel.py`'s descriptor forward (rank-3 in-kernel descriptors, any sequence
length) and, where the file is on this machine, Triton's tutorial 06 forward (`_attn_fwd`, host `TensorDescriptor`s
or in-kernel ones; $TRITON_TUTORIALS or /work/triton-tests/python/tutorials), loaded from its file unchanged with
`triton` served by kernellab. Without a GPU: ptxas takes the PTX, registers per role, the split and the turns in
the PTX, and the interpreter (which ignores the hint) against float64. On the GPU (`-m gpu`): against float32
attention, outputs and log-sum-exp poisoned, each case in a child process with a timeout (a wrong mbarrier parity
hangs the kernel)."""
from __future__ import annotations

import ast
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from benchmarks.attention_kernel import LOG2E, attention_desc, make_attention_desc_kernel, make_attention_kernel
from kernellab.compiler.codegen.lower_warp_specialize import registers

from .test_warp_specialize import run_in_child

ROOT = Path(__file__).resolve().parents[1]
DESC = make_attention_desc_kernel(kl, tl)
TUTORIAL = Path(os.environ.get("TRITON_TUTORIALS", "/work/triton-tests/python/tutorials")) / "06-fused-attention.py"
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
needs_tutorial = pytest.mark.skipif(not TUTORIAL.exists(), reason=f"{TUTORIAL} is not on this machine")


def tutorial_kernel():
    """Tutorial 06's `_attn_fwd` (with `_attn_fwd_inner`, `_maybe_make_tensor_desc`) jitted by kernellab: its
    functions taken from the file as written, without the autotuner (the tests choose the config)."""
    tree = ast.parse(TUTORIAL.read_text())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and
            n.name in ("_attn_fwd_inner", "_maybe_make_tensor_desc", "_attn_fwd")]
    for n in keep:
        n.decorator_list = [d for d in n.decorator_list if not isinstance(d, ast.Call)]  # @triton.autotune(...)
    ns = {"triton": kl, "tl": tl}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(TUTORIAL), "exec"), ns)
    return ns["_attn_fwd"]


def reference(q, k, v, causal, sm_scale):
    """(softmax(q kT * sm_scale) v, log2-sum-exp2 of the log2-domain scores) in float32 (float64 on the CPU)."""
    dt = torch.float64 if q.device.type == "cpu" else torch.float32
    q, k, v = (t.to(dt) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1) * LOG2E


def _inputs(Z, H, S, D, seed, device):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(Z, H, S, D, generator=g).half().to(device) for _ in range(3)]


def run_desc(S, D, BN, stages, warps, causal, ws, device="cuda", warmup=False, Z=1, H=2, BM=128, seed=0):
    """(compiled kernel, out, lse, reference out, reference lse) of the descriptor text."""
    q, k, v = _inputs(Z, H, S, D, seed, device)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((Z, H, S), float("nan"), device=device)
    sm_scale = 1.0 / math.sqrt(D)
    cfg = dict(BLOCK_M=BM, BLOCK_N=BN, num_warps=warps, num_stages=stages)
    if warmup:
        ck = DESC.warmup(q, k, v, out, lse, sm_scale * LOG2E, Z, H, S, HEAD_DIM=D, CAUSAL=causal,
                         EVEN_N=S % BN == 0, WS=ws, grid=(1,), **cfg)
        return ck, None, None, None, None
    _, ck = attention_desc(q, k, v, causal, sm_scale, kl, DESC, out=out, lse=lse, warp_specialize=ws, **cfg)
    ref, ref_lse = reference(q, k, v, causal, sm_scale)
    return ck, out, lse, ref, ref_lse


def run_tutorial(S, D, BN, stages, warps, causal, ws, host, device="cuda", warmup=False, Z=1, H=2, seed=0):
    """(compiled kernel, out, lse, reference out, reference lse) of tutorial 06's forward, launched as its
    `_attention.forward` does on Hopper (host descriptors unless `host` is false: then the tensors themselves)."""
    from kernellab.tools.tensor_descriptor import TensorDescriptor

    q, k, v = _inputs(Z, H, S, D, seed, device)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((Z, H, S), float("nan"), device=device)
    sm_scale = 1.0 / math.sqrt(D)
    y = Z * H * S
    if host:
        descs = [TensorDescriptor(t, shape=[y, D], strides=[D, 1], block_shape=[bm, D])
                 for t, bm in ((q, 128), (k, BN), (v, BN), (out, 128))]
    else:
        descs = [q, k, v, out]
    args = (sm_scale, lse, Z, H, *descs, S)
    meta = dict(HEAD_DIM=D, BLOCK_M=128, BLOCK_N=BN, FP8_OUTPUT=False, STAGE=3 if causal else 1,
                warp_specialize=ws, IS_HOPPER=True, num_warps=warps, num_stages=stages)
    fn = tutorial_kernel()
    if warmup:
        return fn.warmup(*args, grid=(1,), **meta), None, None, None, None
    ck = fn[(kl.cdiv(S, 128), Z * H)](*args, **meta)
    ref, ref_lse = reference(q, k, v, causal, sm_scale)
    return ck, out, lse, ref, ref_lse


def ws_stats(ck):
    ck = getattr(ck, "_kl", ck)
    return next(p.stats for p in ck.trace.passes if p.name == "warp_specialize")


# ---------------------------------------------------------------------------------------------- no GPU needed

def _check_ptx(ck, warps, stages, loops):
    """The split and the consumers' loops as intended: `loops` key loops (causal: the off-band and the diagonal
    one), both filled by the one producer through one ring."""
    from kernellab.compiler.codegen.target import Target

    ck = getattr(ck, "_kl", ck)
    ck.build_gpu(Target(90))
    stats = ws_stats(ck)
    assert stats["warp_specialized"] == 1
    assert "not_specialized" not in stats
    gpu_ir = ck.asm["gpu"]  # one ring: K's and V's stage buffers and one full and one empty mbarrier ring
    assert gpu_ir.count('fill = "tma"') == 2 and gpu_ir.count("ttg.mbarrier_alloc") == 2
    assert gpu_ir.count("pipelined_stages") == loops
    assert ck.launch_warps == warps + 4 and ck.num_warps == warps
    ptx = ck.asm["ptx"]
    entry, dec, inc = registers(warps)
    assert f".reqntid {(warps + 4) * 32}\n.maxnreg {entry}\n" in ptx
    assert ptx.count(f"setmaxnreg.dec.sync.aligned.u32 {dec};") == 1
    assert ptx.count(f"setmaxnreg.inc.sync.aligned.u32 {inc};") == (1 if inc > entry else 0)
    assert ck.n_regs == entry and ck.n_spills == 0
    assert "setmaxnreg" not in ck.report.get("log", "") and not any(n.startswith("ptxas:") for n in ck.trace.notes)
    split = ptx.index("setmaxnreg.dec")
    assert all(m.start() < split for m in re.finditer(r"bar\.sync\s+0;", ptx)), "a CTA-wide barrier after the split"
    # one ring for every loop: full (count 1) and empty (one arrival per consumer warp) mbarriers
    assert len(re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], 1;", ptx)) == stages
    assert len(re.findall(rf"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], {warps};", ptx)) == stages
    assert ptx.count("mbarrier.inval") == 2 * stages
    assert "cp.async.cg" not in ptx
    # the producer's fills: K and V of a stage on one expect_tx, each after its empty wait
    assert ptx.count("mbarrier.arrive.expect_tx") >= stages
    consumer = ptx[ptx.index("setmaxnreg.inc") if inc > entry else split:]
    turns = "bar.arrive" in consumer
    assert turns == (warps == 8), "two consumer warpgroups take turns on the tensor cores, one does not"
    if turns:  # start, pass in the loop, finish: in each loop
        assert len(re.findall(r"bar\.arrive \d, 256;|bar\.arrive %r\d+, 256;", consumer)) == 3 * loops
    return ck


@needs_ptxas
@pytest.mark.parametrize("D, BN, stages, warps", [(128, 128, 3, 8), (128, 128, 2, 8), (64, 64, 3, 8),
                                                  (64, 64, 2, 4)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_desc_text_ptx(D, BN, stages, warps, causal, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, *_ = run_desc(1000, D, BN, stages, warps, causal, True, device="cpu", warmup=True)
    _check_ptx(ck, warps, stages, 2 if causal else 1)
    if warps == 4:
        assert "1 consumer warpgroup" in ws_stats(ck)["no_turns"]


@needs_ptxas
@needs_tutorial
@pytest.mark.parametrize("host", [True, False], ids=["host_desc", "kernel_desc"])
@pytest.mark.parametrize("D, BN, causal", [(128, 128, False), (128, 128, True), (64, 64, False)])
def test_tutorial_ptx(D, BN, causal, host, tmp_path, monkeypatch):
    """Tutorial 06's Hopper text: with host descriptors and with `tl.make_tensor_descriptor` over the
    `[Z * H * N_CTX, HEAD_DIM]` rows (an extent the launcher computes from the arguments)."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, *_ = run_tutorial(1024, D, BN, 3, 8, causal, True, host, device="cpu", warmup=True)
    _check_ptx(ck, 8, 3, 2 if causal else 1)


@needs_ptxas
def test_unmarked_loop_and_env_knob(tmp_path, monkeypatch):
    """WS=False: one launch of num_warps, no split; KERNELLAB_WARP_SPECIALIZE=1 specializes it anyway."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, *_ = run_desc(1024, 128, 128, 3, 8, False, False, device="cpu", warmup=True)
    ck.build_gpu(Target(90))
    assert ck.launch_warps == 8 and ws_stats(ck) == {"warp_specialized": 0} and "setmaxnreg" not in ck.asm["ptx"]
    monkeypatch.setenv("KERNELLAB_WARP_SPECIALIZE", "1")
    ck, *_ = run_desc(1024, 128, 128, 2, 8, False, False, device="cpu", warmup=True)  # another build
    _check_ptx(ck, 8, 2, 1)


@needs_ptxas
@pytest.mark.parametrize("D, warps, env, expected", [(128, 8, None, 1), (128, 8, "0", 0), (128, 4, None, 0),
                                                     (64, 8, None, 0)])
def test_unmarked_loop_by_default(D, warps, env, expected, tmp_path, monkeypatch):
    """WS=None (the loop's hint left unsaid): kernellab specializes attention's key loop by default where it measured
    faster (head dim 128, 8 warps), not at 4 warps or head dim 64, nor under KERNELLAB_WARP_SPECIALIZE=0; an
    explicit WS=False is never overridden (test_unmarked_loop_and_env_knob)."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    if env is None:
        monkeypatch.delenv("KERNELLAB_WARP_SPECIALIZE", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_WARP_SPECIALIZE", env)
    stages = 2 if env else 3  # another build: the launch cache in memory is not keyed by the environment
    ck, *_ = run_desc(1024, D, 128 if D == 128 else 64, stages, warps, True, None, device="cpu", warmup=True)
    ck.build_gpu(Target(90))
    stats = ws_stats(ck)
    assert stats["warp_specialized"] == expected, stats
    assert ("by_default" in stats) == bool(expected) and "not_specialized" not in stats
    assert ("setmaxnreg" in ck.asm["ptx"]) == bool(expected)


@needs_ptxas
def test_pointer_text_says_why(tmp_path, monkeypatch):
    """The benchmark's pointer text: its K/V tiles are tensors of pointers, which `fill_stages_with_tma` leaves to
    cp.async (only block pointers and descriptors name a tile TMA can fetch), so the knob leaves the loop alone and
    the stats say why."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELLAB_WARP_SPECIALIZE", "1")
    kernel = make_attention_kernel(kl, tl)
    q = torch.empty(1, 2, 1024, 128, dtype=torch.float16)
    ck = kernel.warmup(q, q, q, q, 0.1, *q.stride(), *q.stride(), *q.stride(), *q.stride(), 2, 1024, BLOCK_M=128,
                       BLOCK_N=128, HEAD_DIM=128, CAUSAL=False, num_warps=8, num_stages=3, grid=(1,))
    ck.build_gpu(Target(90))
    assert ck.launch_warps == 8
    (why,) = ws_stats(ck)["not_specialized"]
    assert "filled by cp.async, not TMA" in why


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("S", [40, 16])
def test_interpreter_ignores_the_hint(S, causal):
    """The descriptor text on the CPU interpreter (WS=True is an ordinary loop there): ragged and one key block."""
    q, k, v = _inputs(1, 2, S, 16, 5, "cpu")
    out = torch.full_like(q, float("nan"))
    lse = torch.full((1, 2, S), float("nan"))
    attention_desc(q, k, v, causal, 0.25, kl, DESC, BLOCK_M=16, BLOCK_N=16, out=out, lse=lse, warp_specialize=True)
    ref, ref_lse = reference(q, k, v, causal, 0.25)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=0)
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-3, rtol=1e-3)


@needs_tutorial
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("host", [True, False], ids=["host_desc", "kernel_desc"])
def test_interpreter_tutorial(host, causal):
    """Tutorial 06's text on the CPU interpreter through the GPU tests' harness (two query blocks, poisoned)."""
    _, out, lse, ref, ref_lse = run_tutorial(256, 64, 64, 2, 4, causal, True, host, device="cpu")
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=0)
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-3, rtol=1e-3)


# ---------------------------------------------------------------------------------------------- GPU

def gpu_cases(cases):
    """Several launches, each checked (one child process: one import and CUDA start for a group of cases)."""
    for case in cases:
        try:
            gpu_case(*case)
        except AssertionError as e:
            raise AssertionError(f"case {case}: {e}") from None


def gpu_case(text, S, D, BN, stages, warps, causal, ws, host=True):
    """One launch, checked."""
    if text == "desc":
        ck, out, lse, ref, ref_lse = run_desc(S, D, BN, stages, warps, causal, ws, Z=2, H=3, seed=S + D)
    else:
        ck, out, lse, ref, ref_lse = run_tutorial(S, D, BN, stages, warps, causal, ws, host, Z=2, H=3, seed=S + D)
    torch.cuda.synchronize()
    assert ws_stats(ck)["warp_specialized"] == (int(ws) if ws is not None else int(D >= 128 and warps == 8))
    assert_close_to_reference(out, lse, ref, ref_lse)


def assert_close_to_reference(out, lse, ref, ref_lse, label=""):
    """Every output and log-sum-exp element written (they start poisoned) and within fp16 attention's tolerance
    of the float32 reference."""
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), f"{label}unwritten (poisoned) elements"
    err = (out.float() - ref).abs().max().item()
    assert err < 2e-2, f"{label}max |out - ref| = {err:.3g}"
    lerr = (lse - ref_lse).abs().max().item()
    assert lerr < 1e-2, f"{label}max |lse - ref| = {lerr:.3g}"


def _child(cases, timeout=300):
    run_in_child(f"import tests.test_warp_specialize_attention as t; t.gpu_cases({cases!r})", timeout)


# (D, BLOCK_N, stages, warps); S: one key block (128), ragged (200, 1000), several (1024)
GPU_CFGS = [(128, 128, 3, 8), (128, 128, 2, 8), (64, 64, 3, 8), (64, 64, 2, 4), (128, 64, 3, 8)]


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("cfg", GPU_CFGS, ids=lambda c: "x".join(map(str, c)))
def test_gpu_desc_text(cfg, causal):
    """S: one key block (128), ragged (200: one full and one partial block; 1000), several even blocks (1024)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _child([("desc", S, *cfg, causal, True) for S in (128, 200, 1000, 1024)])


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_desc_text_unspecialized(causal):
    """The same text with the hint off (the variant timed against)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _child([("desc", 1000, 128, 128, 3, 8, causal, False), ("desc", 1024, 64, 64, 3, 4, causal, False)])


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_desc_text_unmarked(causal):
    """WS=None: specialized by default at hd128 / 8 warps, left alone at hd64; both correct."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _child([("desc", S, 128, 128, 3, 8, causal, None) for S in (200, 1024)]
           + [("desc", 1000, 128, 64, 3, 8, causal, None), ("desc", 1000, 64, 64, 3, 8, causal, None)])


@pytest.mark.gpu
@needs_tutorial
@pytest.mark.parametrize("host", [True, False], ids=["host_desc", "kernel_desc"])
@pytest.mark.parametrize("cfg", [(128, 128, 3, 8), (128, 128, 2, 8), (64, 64, 3, 8)],
                         ids=lambda c: "x".join(map(str, c)))
def test_gpu_tutorial(cfg, host):
    """Tutorial 06's text, full and causal, one key block (128) and several (1024): its sequence must be a
    multiple of the blocks (its rows run on into the next head's)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _child([("tutorial", S, *cfg, causal, True, host) for causal in (False, True) for S in (128, 1024)])


def test_benchmark_ws_row_on_cpu():
    """benchmarks/attention.py --warp-specialize's row: the descriptor text with and without the hint (the
    interpreter, a dummy timer), so the GPU script does not rot."""
    import functools

    from benchmarks.attention import _fmt, run_row

    impls = {"kernellab": (kl, DESC, functools.partial(attention_desc, warp_specialize=True)),
             "kernellab_nows": (kl, DESC, attention_desc)}
    row = run_row(impls, 1, 2, 48, 16, False, device="cpu", timer=lambda fn: (fn(), 1e-3)[1],
                  cfg=dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=3))
    assert row["kernellab"]["ok"] and row["kernellab_nows"]["ok"], row
    assert "kl no-ws" in _fmt(row) and "ws/no-ws     1.00" in _fmt(row)


def test_tensormap_recipe_arithmetic():
    """A tensor map's extent computed in the kernel from arguments (`Z * H * N_CTX`): the launcher evaluates the
    recipe as the kernel computes it, wrapping at the value's width."""
    from kernellab.runtime.tensormap import _value

    rows = ["muli", 32, ["muli", 32, ["arg", 0], ["arg", 1]], ["arg", 2]]
    assert _value(rows, [2, 3, 1000]) == 6000
    assert _value(["addi", 32, ["arg", 0], ["const", 16]], [7]) == 23
    assert _value(["muli", 32, ["arg", 0], ["arg", 1]], [1 << 16, 1 << 15]) == -(1 << 31)  # i32 wraps
    assert _value(["muli", 64, ["arg", 0], ["arg", 1]], [1 << 16, 1 << 15]) == 1 << 31
