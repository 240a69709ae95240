"""Warp specialization (passes/warp_specialize.py) of TMA matmul loops on sm_90: a block-pointer matmul whose K loop
is `tl.range(..., warp_specialize=True)`, Triton's tutorial-09 descriptor kernels (in-kernel descriptors in a
persistent tile loop, host descriptors in a plain one), fp16 / bf16 / fp8 e4m3, one and two consumer warpgroups.

Without a GPU: the PTX through ptxas (register counts, setmaxnreg, the mbarrier operations counted, no CTA-wide
bar.sync after the split). On the GPU (`-m gpu`): against torch in float32 on ragged shapes with poisoned outputs;
each case runs in a child process with a timeout, so a deadlock (a wrong mbarrier parity hangs the kernel) fails
the test instead of hanging the run. The CPU interpreter ignores the hint (same results)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.codegen.lower_warp_specialize import registers

ROOT = Path(__file__).resolve().parents[1]


@kl.jit
def ws_bp_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, WS: tl.constexpr, ACC_F16: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_bp = tl.make_block_ptr(a_ptr, (M, K), (stride_am, 1), (pid_m * BLOCK_M, 0), (BLOCK_M, BLOCK_K), (1, 0))
    b_bp = tl.make_block_ptr(b_ptr, (K, N), (stride_bk, 1), (0, pid_n * BLOCK_N), (BLOCK_K, BLOCK_N), (1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16 if ACC_F16 else tl.float32)
    for k in tl.range(0, K, BLOCK_K, warp_specialize=WS):
        a = tl.load(a_bp, boundary_check=(0, 1))
        b = tl.load(b_bp, boundary_check=(0, 1))
        acc = tl.dot(a, b, acc, out_dtype=tl.float16 if ACC_F16 else tl.float32)
        a_bp = tl.advance(a_bp, (0, BLOCK_K))
        b_bp = tl.advance(b_bp, (BLOCK_K, 0))
    c_bp = tl.make_block_ptr(c_ptr, (M, N), (stride_cm, 1), (pid_m * BLOCK_M, pid_n * BLOCK_N), (BLOCK_M, BLOCK_N),
                             (1, 0))
    tl.store(c_bp, acc.to(tl.float32), boundary_check=(0, 1))


@kl.jit
def _tile_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M: tl.constexpr):
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    return first_pid_m + (tile_id % group_size_m), (tile_id % num_pid_in_group) // group_size_m


@kl.jit
def ws_desc_persistent(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr, WS: tl.constexpr):
    """Tutorial 09's matmul_kernel_descriptor_persistent (EPILOGUE_SUBTILE off): B given [N, K]."""
    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    tile_id_c = start_pid - NUM_SMS
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, warp_specialize=WS):
        pid_m, pid_n = _tile_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        offs_am = pid_m * BLOCK_M
        offs_bn = pid_n * BLOCK_N
        accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_K
            a = a_desc.load([offs_am, offs_k])
            b = b_desc.load([offs_bn, offs_k])
            accumulator = tl.dot(a, b.T, accumulator)
        tile_id_c += NUM_SMS
        pid_m, pid_n = _tile_pid(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], accumulator.to(c_ptr.dtype.element_ty))


@kl.jit
def ws_desc_matmul(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, WS: tl.constexpr):
    """Tutorial 09's matmul_kernel_tma (host descriptors, the K loop marked), without the grouped order."""
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(k_tiles, warp_specialize=WS):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}


def _operands(kind, M, N, K, device, seed=0, b_nk=False):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g)
    b = torch.randn(N, K, generator=g) if b_nk else torch.randn(K, N, generator=g)
    if kind == "e4m3":  # edge values too: the largest finite and a subnormal
        a[0, :2] = torch.tensor([448.0, 2.0 ** -9])
    return a.to(TORCH[kind]).to(device), b.to(TORCH[kind]).to(device)


def launch(kernel, kind, shape, cfg, ws, device="cuda", warmup=False, num_sms=3, seed=0):
    """(compiled kernel, c, reference): one launch of one of the kernels above (`warmup`: compile only)."""
    from kernellab.tools.tensor_descriptor import TensorDescriptor

    M, N, K = shape
    bm, bn, bk, stages, warps = cfg
    opts = dict(num_stages=stages, num_warps=warps)
    acc16, kind = kind == "fp16_acc16", _kind(kind)
    if kernel == "bp":
        a, b = _operands(kind, M, N, K, device, seed)
        c = torch.full((M, N), float("nan"), device=device)
        args = (a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0))
        meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, WS=ws, ACC_F16=acc16, **opts)
        grid = (kl.cdiv(M, bm), kl.cdiv(N, bn))
        fn = ws_bp_matmul
    else:
        a, b = _operands(kind, M, N, K, device, seed, b_nk=True)
        c = torch.full((M, N), float("nan"), device=device, dtype=torch.float16)
        if kernel == "persistent":
            args = (a, b, c, M, N, K)
            meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_SIZE_M=8, NUM_SMS=num_sms, WS=ws, **opts)
            grid = (num_sms,)
            fn = ws_desc_persistent
        else:
            args = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bn, bk]),
                    TensorDescriptor.from_tensor(c, [bm, bn]), M, N, K)
            meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, WS=ws, **opts)
            grid = (kl.cdiv(M, bm) * kl.cdiv(N, bn),)
            fn = ws_desc_matmul
    ref = a.float() @ (b.float().T if kernel != "bp" else b.float())
    if warmup:
        return fn.warmup(*args, grid=grid, **meta), c, ref
    return fn[grid](*args, **meta), c, ref


def ws_stats(ck):
    return next(p.stats for p in ck.trace.passes if p.name == "warp_specialize")


# ---------------------------------------------------------------------------------------------- no GPU needed

# (kernel, element type, (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps)); fp16_acc16: an fp16 accumulator (its wgmma
# waits at once: each warp releases the stage right after it)
PTX_CASES = [("bp", "fp16", (128, 128, 64, 3, 8)), ("bp", "bf16", (128, 128, 64, 4, 8)),
             ("bp", "fp16", (64, 128, 64, 3, 4)), ("bp", "fp16_acc16", (64, 64, 64, 2, 4)),
             ("persistent", "fp16", (128, 128, 64, 3, 8)), ("persistent", "fp16", (128, 256, 64, 3, 8)),
             ("persistent", "bf16", (64, 128, 64, 4, 4)), ("persistent", "e4m3", (128, 128, 128, 3, 8)),
             ("desc", "fp16", (128, 128, 64, 3, 8)), ("desc", "fp16", (64, 64, 64, 2, 4))]


def _kind(kind):
    return "fp16" if kind == "fp16_acc16" else kind


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("kernel, kind, cfg", PTX_CASES, ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple)
                         else str(x))
def test_ptx(kernel, kind, cfg, tmp_path, monkeypatch):
    """ptxas takes the PTX; the launch has a producer warpgroup on top; one warp of it waits on the empty mbarrier
    and fills each stage; the consumers wait on the full one and release each stage once; setmaxnreg moves registers
    from the producer to the consumers within what the register file holds; no bar.sync 0 after the split."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    bm, bn, bk, stages, warps = cfg
    ck, _, _ = launch(kernel, kind, (256, 256, 512), cfg, True, device="cpu", warmup=True)
    ck.build_gpu(Target(90))
    assert ws_stats(ck) == {"warp_specialized": 1}
    assert ck.launch_warps == warps + 4 and ck.num_warps == warps and ck.metadata.num_warps == warps
    ptx = ck.asm["ptx"]
    entry, dec, inc = registers(warps)
    assert f".reqntid {(warps + 4) * 32}\n.maxnreg {entry}\n" in ptx
    assert ptx.count(f"setmaxnreg.dec.sync.aligned.u32 {dec};") == 1
    assert ptx.count("setmaxnreg.inc") == (1 if inc > entry else 0)
    if inc > entry:
        assert f"setmaxnreg.inc.sync.aligned.u32 {inc};" in ptx
        assert warps * 32 * (inc - entry) <= 128 * (entry - dec)  # the pool the producer frees
    assert ck.n_regs == entry and ck.n_spills == 0
    # ptxas honours setmaxnreg (C7508: "'setmaxnreg' ignored; unable to determine register count at entry") and
    # keeps the wgmmas asynchronous (C7514 and the like become "ptxas: ..." notes)
    assert "setmaxnreg" not in ck.report.get("log", "") and not any(n.startswith("ptxas:") for n in ck.trace.notes)
    # 2 x S mbarriers: full (count 1: the expect_tx) and empty (one arrival per consumer warp)
    assert len(re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], 1;", ptx)) == stages
    assert len(re.findall(rf"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], {warps};", ptx)) == stages
    # the producer: S fills (S - 1 ahead of the loop, one in it; LLVM may duplicate some), each after its empty
    # wait, skipped past the end
    fills = ptx.count("mbarrier.arrive.expect_tx")
    assert fills >= stages and ptx.count("@!go bra.uni skip_wait") == fills
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global") % fills == 0
    # the consumers: one full wait; each stage released once: in the loop (iteration i-1's) and after it (the last),
    # or right after a wgmma that waits at once
    assert ptx.count("mbarrier.try_wait.parity") == fills + 1
    assert ptx.count("mbarrier.arrive.shared::cta.b64") == (1 if kind == "fp16_acc16" else 2)
    assert "cp.async.cg" not in ptx and "cp.async.wait_group 0" in ptx
    split = ptx.index("setmaxnreg.dec")
    ctas = [m.start() for m in re.finditer(r"bar\.sync\s+0;", ptx)]
    assert ctas and all(p < split for p in ctas), "a CTA-wide barrier after the split"
    assert re.search(rf"bar\.sync\s+3, {warps * 32};", ptx)
    assert ptx.count("mbarrier.inval") == 2 * stages


def test_registers():
    assert registers(8) == (168, 40, 232)  # CUTLASS's split for two consumer warpgroups
    assert registers(4) == (240, 40, 240)  # one consumer warpgroup has all it can use already
    assert registers(8, maxnreg=128) == (128, 40, 168)
    for w in (4, 8, 12, 16):
        entry, dec, inc = registers(w)
        assert (w + 4) * 32 * entry <= 65536 and w * 32 * inc + 128 * dec <= (w + 4) * 32 * entry


def _compile_stats(kernel, cfg, ws=False):
    from kernellab.compiler.codegen.target import Target

    ck, _, _ = launch(kernel, "fp16", (256, 256, 512), cfg, ws, device="cpu", warmup=True)
    ck.build_gpu(Target(90))
    return ck


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_env_knob_specializes_unmarked_loops(tmp_path, monkeypatch):
    """KERNELLAB_WARP_SPECIALIZE=1 specializes the same kernel unmarked (and is part of the disk-cache key)."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _compile_stats("persistent", (128, 128, 64, 3, 8))
    assert ck.launch_warps == 8 and ws_stats(ck) == {"warp_specialized": 0}
    monkeypatch.setenv("KERNELLAB_WARP_SPECIALIZE", "1")
    ck = _compile_stats("desc", (128, 128, 64, 3, 8))
    assert ck.launch_warps == 12 and ws_stats(ck) == {"warp_specialized": 1}


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_marked_loop_without_tma_says_why(tmp_path, monkeypatch):
    """enable_tma=False: the loop keeps cp.async and one launch of num_warps; the stats say why."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a, b = _operands("fp16", 256, 256, 256, "cpu")
    c = torch.empty(256, 256)
    ck = ws_bp_matmul.warmup(a, b, c, 256, 256, 256, 256, 256, 256, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, WS=True,
                             ACC_F16=False, num_warps=8, num_stages=3, enable_tma=False, grid=(1,))
    ck.build_gpu(Target(90))
    assert ck.launch_warps == 8 and "setmaxnreg" not in ck.asm["ptx"]
    (why,) = ws_stats(ck)["not_specialized"]
    assert why.startswith("line ") and "filled by cp.async, not TMA" in why


def test_interpreter_ignores_the_hint():
    """On the CPU interpreter the marked loop is an ordinary loop."""
    M, N, K = 40, 24, 72
    a, b = _operands("fp16", M, N, K, "cpu", seed=3)
    c = torch.full((M, N), float("nan"))
    ws_bp_matmul[(kl.cdiv(M, 16), kl.cdiv(N, 16))](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0),
                                                      BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, WS=True, ACC_F16=False)
    ref = a.double().numpy() @ b.double().numpy()
    np.testing.assert_allclose(c.numpy(), ref, rtol=1e-2, atol=1e-2)


# ---------------------------------------------------------------------------------------------- GPU

# ragged shapes: M not a multiple of BLOCK_M, N not of BLOCK_N, K not of BLOCK_K, K shorter than one block and than
# S blocks; N and K multiples of 16 elements (the argument specialization that lets TMA describe the tensors, as in
# test_gpu_tma.py). The persistent kernel runs 3 programs: with 4 tiles one program runs two, so the stage and phase
# counters carry from one tile's K loop into the next; with one tile two programs have none (zero iterations)
GPU_SHAPES = [(200, 208, 336), (130, 272, 80), (72, 48, 16), (256, 256, 512)]
GPU_CASES = [(k, kind, cfg) for k, kind, cfg in PTX_CASES if not (k == "persistent" and cfg[1] == 256)]


def gpu_case(kernel, kind, cfg, shape, ws):
    """One launch, checked (run in a child process by the tests below)."""
    ck, c, ref = launch(kernel, kind, shape, cfg, ws, seed=sum(shape))
    torch.cuda.synchronize()
    assert ws_stats(ck) == ({"warp_specialized": 1} if ws else {"warp_specialized": 0})
    got = c.float()
    assert not torch.isnan(got).any(), "unwritten (poisoned) elements"
    err = ((got - ref).norm() / ref.norm()).item()
    tol = {"fp16": 2e-3, "bf16": 1e-2, "e4m3": 2e-3, "fp16_acc16": 3e-2}[kind]
    assert err < tol, f"relative error {err:.3g}"


def run_in_child(code: str, timeout: float):
    """Run `code` in a fresh Python (a warp-specialized kernel that hangs on an mbarrier fails the test, not the
    session)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no result within {timeout} s: the kernel hangs (an mbarrier wait that never completes?)")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def _child(*args, timeout=180):
    run_in_child(f"import tests.test_warp_specialize as t; t.gpu_case(*{args!r})", timeout)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel, kind, cfg", GPU_CASES, ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple)
                         else str(x))
def test_gpu_matches_torch(kernel, kind, cfg, shape):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _child(kernel, kind, cfg, shape, True)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["bp", "persistent", "desc"])
def test_gpu_unspecialized_baseline(kernel):
    """The same kernels with the hint off (the variant timed against)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _child(kernel, "fp16", (128, 128, 64, 3, 8), (200, 136, 328), False)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_persistent_stages_that_no_longer_fit_build_unspecialized(tmp_path, monkeypatch):
    """128x256x128 with 2 stages: live across the tile loop, the stages no longer share the epilogue's shared memory
    (264 KB); the build drops the producer, not a stage, and the trace says so."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _compile_stats("persistent", (128, 256, 128, 2, 8), ws=True)
    assert ck.launch_warps == 8 and ck.shared <= 232448
    assert "built without warp specialization" in ck.trace.notes[-1]
    (why,) = ws_stats(ck)["not_specialized"]
    assert "off for this build" in why
    stats = {k: v for p in ck.trace.passes if p.name == "pipeline_dot_operands" for k, v in p.stats.items()}
    assert stats["pipelined"] == 1
