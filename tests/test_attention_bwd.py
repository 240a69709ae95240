"""The flash-attention backward kernels of `benchmarks/attention.py` (preprocess, dK/dV, dQ) and the forward's
log-sum-exp output they read: the CPU interpreter against torch autograd of a float64 reference, the GPU backend
down to a cubin (ptxas, no GPU) with every dot on wgmma and each loop's tiles in one pipelined stage buffer, and
(marked gpu) the compiled kernels on CUDA."""
from __future__ import annotations

import math
import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from benchmarks.attention import BWD_CONFIGS, CONFIGS
from benchmarks.attention_kernel import (
    LOG2E,
    attention,
    attention_backward,
    make_attention_bwd_kernels,
    make_attention_kernel,
)
from tests.ptx import loads_after_copies, loop_bodies, shared_reuse_hazards

FWD = make_attention_kernel(kl, tl)
BWD = make_attention_bwd_kernels(kl, tl)


def reference(q, k, v, do, causal, sm_scale):
    """(out, lse in log2 units, dq, dk, dv) of softmax(q k^T * sm_scale) v in float64 on the CPU, by autograd."""
    q, k, v = (t.detach().cpu().double().requires_grad_() for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(s, dim=-1) @ v
    out.backward(do.detach().cpu().double())
    lse = torch.logsumexp(s, dim=-1) * LOG2E
    return out.detach(), lse.detach(), q.grad, k.grad, v.grad


def _inputs(Z, H, S, D, seed, dtype=torch.float16, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(Z, H, S, D, generator=g).to(dtype).to(device) for _ in range(4)]


def _run(q, k, v, do, causal, sm_scale, fwd_cfg, bwd_cfg):
    """Our forward (output and lse) then our backward, every output poisoned with NaN first."""
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device=q.device)
    attention(q, k, v, causal, sm_scale, kl, FWD, out=out, lse=lse, **fwd_cfg)
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    attention_backward(q, k, v, out, do, lse, causal, sm_scale, kl, BWD, dq=dq, dk=dk, dv=dv, **bwd_cfg)
    return out, lse, dq, dk, dv


def _check(got, want, dtype):
    """Each gradient within a fraction of its largest magnitude (fp16/bf16 operands of every dot, fp32 sums)."""
    tol = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}[dtype]
    for name, g, w in zip(("lse", "dq", "dk", "dv"), got, want):
        g = g.detach().cpu().double()
        assert not torch.isnan(g).any(), f"{name} has unwritten (NaN-poisoned) elements"
        err = (g - w).abs().max().item()
        assert err <= tol * max(1.0, w.abs().max().item()), (name, err, w.abs().max().item())


SMALL = [(64, 32, dict(BLOCK_M1=16, BLOCK_N1=32, BLOCK_M2=32, BLOCK_N2=16)),
         (128, 32, dict(BLOCK_M1=16, BLOCK_N1=64, BLOCK_M2=32, BLOCK_N2=32)),
         (96, 16, dict(BLOCK_M1=32, BLOCK_N1=32, BLOCK_M2=32, BLOCK_N2=16))]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("S,D,cfg", SMALL, ids=["s64", "s128", "s96"])
def test_attention_bwd_interpreter(S, D, cfg, causal, dtype):
    """Several key and query blocks per program (and, causal, diagonal blocks spanning several inner blocks),
    2 heads: the forward's lse and dq, dk, dv against float64 autograd."""
    q, k, v, do = _inputs(1, 2, S, D, seed=S + D + int(causal), dtype=dtype)
    sm_scale = 1.0 / math.sqrt(D)
    _, lse, dq, dk, dv = _run(q, k, v, do, causal, sm_scale, dict(BLOCK_M=32, BLOCK_N=16), cfg)
    _, lse_ref, *grads = reference(q, k, v, do, causal, sm_scale)
    _check((lse, dq, dk, dv), (lse_ref, *grads), dtype)


def test_attention_bwd_strides_interpreter():
    """Batch > 1 and [Z, S, H, D] buffers viewed as [Z, H, S, D] (do with its own strides): every stride is used,
    and dq/dk/dv come back with q's, k's and v's strides."""
    Z, H, S, D = 2, 3, 64, 16
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(Z, S, H, D, generator=g).half().transpose(1, 2) for _ in range(3))
    do = torch.randn(Z, H, D, S, generator=g).half().transpose(2, 3)
    _, lse, dq, dk, dv = _run(q, k, v, do, True, 0.3, dict(BLOCK_M=32, BLOCK_N=16),
                              dict(BLOCK_M1=16, BLOCK_N1=32, BLOCK_M2=32, BLOCK_N2=16))
    assert dq.stride() == q.stride() and dk.stride() == k.stride()
    _, lse_ref, *grads = reference(q, k, v, do, True, 0.3)
    _check((lse, dq, dk, dv), (lse_ref, *grads), torch.float16)


def _warm_dkdv(D, causal, BM, BN, B=4, H=16, N=1024, scale=None, **opts):
    """The dK/dV kernel compiled to tile IR (no launch) for B x H heads x N rows of head dim D."""
    t, lse = torch.empty(B, H, N, D, dtype=torch.float16), torch.empty(B, H, N)
    scale = scale if scale is not None else 1 / math.sqrt(D)
    return BWD[1].warmup(t, t, t, t, t, t, lse, lse, scale, scale * LOG2E, *(t.stride() * 4), H, N, BLOCK_M=BM,
                         BLOCK_N=BN, HEAD_DIM=D, CAUSAL=causal, grid=(1,), **opts)


def _warm_dq(D, causal, BM, BN, B=4, H=16, N=1024, scale=None, **opts):
    """The dQ kernel compiled to tile IR (no launch), shapes as `_warm_dkdv`'s."""
    t, lse = torch.empty(B, H, N, D, dtype=torch.float16), torch.empty(B, H, N)
    scale = scale if scale is not None else 1 / math.sqrt(D)
    return BWD[2].warmup(t, t, t, t, t, lse, lse, scale, scale * LOG2E, *(t.stride() * 4), H, N, BLOCK_M=BM,
                         BLOCK_N=BN, HEAD_DIM=D, CAUSAL=causal, grid=(1,), **opts)


CODEGEN_CASES = [(d, c) for d in (64, 128) for c in (False, True)]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("D,causal", CODEGEN_CASES, ids=[f"hd{d}-{'causal' if c else 'full'}" for d, c in CODEGEN_CASES])
def test_attention_bwd_assembles_with_tensor_cores(D, causal, tmp_path, monkeypatch):
    """The benchmark's configs to a cubin for sm_90a (no GPU needed): all four dots of the dK/dV loop and all
    three of the dQ loop on wgmma, k, v, q and do staged once, and each loop's tiles (qT and do; kT and vT)
    copied once into a pipelined stage buffer that both of their readers use, one of them through a transposed
    view: no dot stages a register tile, no spills in the loops. The row vectors (lse, delta) broadcast over the
    score tiles are not converted through shared memory; two wgmma waits per iteration."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    cfg = dict(BWD_CONFIGS[D])
    nw, ns = cfg.pop("num_warps"), cfg.pop("num_stages")
    kv = _warm_dkdv(D, causal, cfg["BLOCK_M1"], cfg["BLOCK_N1"], num_warps=nw, num_stages=ns)
    qq = _warm_dq(D, causal, cfg["BLOCK_M2"], cfg["BLOCK_N2"], num_warps=nw, num_stages=ns)
    loops = 2 if causal else 1
    for ck in (kv, qq):  # mma.sync and ldmatrix (sm_80) from the same shared stage buffers assemble too
        assert ck.build_gpu(Target(80)).asm["cubin"][:4] == b"\x7fELF" and "ldmatrix" in ck.asm["ptx"]
    for ck, dots in ((kv, 4), (qq, 3)):
        ck.build_gpu(Target(90))
        assert ck.asm["cubin"][:4] == b"\x7fELF"
        # words spilled around (not inside) the loops of the dK/dV kernel at hd64, at the 255-register cap (Triton
        # spills 8 bytes full, 32 causal): with lse/delta riding in the stages (pipelined side loads, the default)
        # 128-144 bytes, stored once before the loop and loaded once after; that kernel still measured 1.05-1.10x
        # Triton's (H100, 2026-11-26) against 0.80-0.91x without them
        assert ck.n_spills <= (160 if D == 64 else 0), (ck.name, ck.n_regs, ck.n_spills)
        ptx, gpu = ck.asm["ptx"], ck.asm["gpu"]
        assert "mma.sync" not in ptx and "ldmatrix" not in ptx
        ops = [ln for ln in gpu.splitlines() if " tt.dot " in ln]
        assert len(ops) == dots * loops and all("wgmma" in ln for ln in ops), ops
        # every dot operand is a stage of a buffer (or p/ds straight from registers): nothing staged per dot
        assert not any("smem_bytes" in ln for ln in ops), ops
        # qT and do (dK/dV) or kT (dQ) are read by two dots, one through a transposed view of the same stage
        views = re.findall(r"ttg\.memdesc_index (%b_stages\w*), %read_stage\w* : !memdesc<(\d+)x(\d+)xf16, order=(.),", gpu)
        assert len(views) == dots * loops, views  # two buffers per loop: 4 (dK/dV) or 3 (dQ) readers
        allocs = re.findall(r"ttg\.local_alloc \{.*?operand = \"(\w)\", .*stages = (\d+)\}", gpu)
        assert sorted(allocs) == sorted([("a", "1")] * 2 + [("b", str(ns))] * (2 * loops)), allocs
        bodies = loop_bodies(ptx)
        assert len(bodies) == loops
        for body in bodies:
            # lse and delta are loaded in the score tile's row slice (no conversion, no barrier for them): the stage
            # wait's bar.sync and the one before the refill
            assert body.count("bar.sync") == 2, body.count("bar.sync")
            # two waits per iteration, as Triton's: the first dot's retires the last dot of the iteration before (dK
            # or dQ, in flight across the back edge), dP's retires dV
            assert body.count("wgmma.commit_group") == dots and body.count("wgmma.wait_group") == 2
            # the refill's barrier and copies: right after the first dot's wait by default (KERNELLAB_CHAIN_COPIES
            # =first, until `auto`, after the last dot's issue as Triton's, is timed; test_..._chain_copies_knob)
            assert body.find("wgmma.wait_group") < body.rfind("bar.sync") < re.search(r"cp\.async\.c[ag]", body).start()
        assert "C7514" not in ck.report.get("log", "")
    if not causal:  # dQ fits as many programs per SM as Triton's (2 at hd128 with 8 warps, 3 at hd64 with 4): the
        # epilogue conversion's addresses no longer live across the loop (168 / 208 registers before)
        per_sm = 65536 // (-(-qq.n_regs // 8) * 8 * nw * 32)
        assert per_sm >= {128: 2, 64: 3}[D], (qq.n_regs, per_sm)


def _chain_copies(monkeypatch, where):
    """KERNELLAB_CHAIN_COPIES=where (None: unset) and the backward kernels' in-memory compiles dropped."""
    if where is None:
        monkeypatch.delenv("KERNELLAB_CHAIN_COPIES", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_CHAIN_COPIES", where)
    for k in BWD:
        k.device_caches.clear()


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("where", ["first", "end", "auto"])
def test_attention_bwd_chain_copies_knob(where, tmp_path, monkeypatch):
    """KERNELLAB_CHAIN_COPIES (the A/B switch of where a wgmma chain refills its stages): `first` puts the barrier
    and the copies right after the first dot's wait, before the second dot's issue (the schedule before the
    default moved them to the end of the body); `end` after the last dot's issue. Same waits either way."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    _chain_copies(monkeypatch, where)
    try:
        cfg = dict(BWD_CONFIGS[128])
        nw, ns = cfg.pop("num_warps"), cfg.pop("num_stages")
        for ck in (_warm_dkdv(128, False, cfg["BLOCK_M1"], cfg["BLOCK_N1"], num_warps=nw, num_stages=ns),
                   _warm_dq(128, False, cfg["BLOCK_M2"], cfg["BLOCK_N2"], num_warps=nw, num_stages=ns)):
            ck.build_gpu(Target(90))
            (body,) = loop_bodies(ck.asm["ptx"])
            assert body.count("bar.sync") == 2 and body.count("wgmma.wait_group") == 2
            copy = re.search(r"cp\.async\.c[ag]", body).start()
            refill = body.rfind("bar.sync")
            if where in ("end", "auto"):  # auto: the backward's chains have more than two dots
                assert body.rfind("wgmma.commit_group") < refill < copy
            else:
                first_wait = body.find("wgmma.wait_group")
                second_issue = body.find("wgmma.commit_group", body.find("wgmma.commit_group") + 1)
                assert first_wait < refill < copy < second_issue
            assert ck.n_spills == 0 and "C7514" not in ck.report.get("log", "")
    finally:
        _chain_copies(monkeypatch, None)


RACE_CASES = [(64, 4, 4, 90, (64, 128, 128, 64)), (64, 4, 3, 80, (32, 128, 128, 32))]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("D,warps,stages,arch,blocks", RACE_CASES, ids=["hd64-w4-s4-sm90", "hd64-w4-s3-sm80"])
def test_attention_bwd_shared_reuse_is_ordered(D, warps, stages, arch, blocks, tmp_path, monkeypatch):
    """With 4 warps the dQ kernel converts lse and delta through scratch once, above its pipelined loop, and the
    allocator gives kT's stage buffer the same address: the buffer's first cp.async must wait (bar.sync) until
    every warp has read delta. Without that barrier dQ was wrong on the GPU, run to run (and LLVM even moved the
    delta reads below the copies). Checked in the GPU IR and in the PTX of both kernels, wgmma and mma.sync."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    m1, n1, m2, n2 = blocks
    opts = dict(B=1, H=2, N=256, scale=0.125, num_warps=warps, num_stages=stages, enable_wgmma=arch >= 90)
    kv = _warm_dkdv(D, False, m1, n1, **opts)
    qq = _warm_dq(D, False, m2, n2, **opts)
    for ck in (kv, qq):
        ck.build_gpu(Target(arch))
        gpu = ck.asm["gpu"]
        assert shared_reuse_hazards(gpu) == [], (ck.name, shared_reuse_hazards(gpu))
    assert loads_after_copies(qq.asm["ptx"]) == [], loads_after_copies(qq.asm["ptx"])[:4]
    # dK/dV reads lse and delta from their own stages (pipelined side loads) while the next stages' copies are in
    # flight: those reads follow the stage's wait and barrier in the loop body (other stages are being written)
    body = kv.asm["gpu"].split("scf.for", 1)[1]
    reads = [m.start() for m in re.finditer(r"ttg\.local_load", body)]
    waits = [m.start() for m in re.finditer(r"ttg\.async_wait|ttg\.mbarrier_wait", body)]
    assert reads and waits and min(waits) < min(reads), (reads[:2], waits[:2])
    _fresh(monkeypatch)  # without side loads no ld.shared may follow a copy
    kv0 = _warm_dkdv(D, False, m1, n1, **opts)
    kv0.build_gpu(Target(arch))
    assert loads_after_copies(kv0.asm["ptx"]) == [], loads_after_copies(kv0.asm["ptx"])[:4]
    # the case this guards: the conversions sit where the stage buffer goes, separated by a barrier
    gpu = qq.asm["gpu"]
    conv = re.findall(r"ttg\.convert_layout %(?:lse|delta) \{smem_bytes = \d+, smem_offset = (\d+)\}", gpu)
    stage = re.search(r"%b_stages = ttg\.local_alloc \{[^}]*smem_offset = (\d+)", gpu).group(1)
    assert conv and stage in conv, (conv, stage)


def _gpu_reference(q, k, v, do, causal, sm_scale):
    """out, lse, dq, dk, dv in float32 on the GPU by autograd (float64 costs too much at these sizes)."""
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    s = (qf @ kf.transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    out = torch.softmax(s, dim=-1) @ vf
    out.backward(do.float())
    return out.detach(), (torch.logsumexp(s, dim=-1) * LOG2E).detach(), qf.grad, kf.grad, vf.grad


GPU_CASES = [(d, c, dt) for d in (64, 128) for c in (False, True) for dt in (torch.float16, torch.bfloat16)]


@pytest.mark.gpu
@pytest.mark.parametrize("D,causal,dtype", GPU_CASES,
                         ids=[f"hd{d}-{'causal' if c else 'full'}-{str(dt)[6:]}" for d, c, dt in GPU_CASES])
def test_attention_bwd_gpu(D, causal, dtype):
    """The compiled forward (with lse) and backward kernels on CUDA with the benchmark's configs, outputs
    poisoned, against float32 autograd: several key and query blocks per program, 2 x 3 heads."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    Z, H, S = 2, 3, 512
    q, k, v, do = _inputs(Z, H, S, D, seed=D + int(causal), dtype=dtype, device="cuda")
    sm_scale = 1.0 / math.sqrt(D)
    cfg = dict(BWD_CONFIGS[D])
    _, lse, dq, dk, dv = _run(q, k, v, do, causal, sm_scale, CONFIGS[D], cfg)
    torch.cuda.synchronize()
    _, lse_ref, *grads = _gpu_reference(q, k, v, do, causal, sm_scale)
    _check((lse, dq, dk, dv), (lse_ref.cpu().double(), *(g.cpu().double() for g in grads)), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_bwd_gpu_mma_sync(causal):
    """The same kernels on mma.sync (enable_wgmma=False): the shared stage buffers read through transposed views
    by ldmatrix (.trans where a tile runs along M or N) instead of wgmma descriptors."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    q, k, v, do = _inputs(1, 2, 256, 64, seed=11 + int(causal), device="cuda")
    sm_scale = 0.125
    cfg = dict(BWD_CONFIGS[64], enable_wgmma=False)
    _, lse, dq, dk, dv = _run(q, k, v, do, causal, sm_scale, CONFIGS[64], cfg)
    torch.cuda.synchronize()
    _, lse_ref, *grads = _gpu_reference(q, k, v, do, causal, sm_scale)
    _check((lse, dq, dk, dv), (lse_ref.cpu().double(), *(g.cpu().double() for g in grads)), torch.float16)


BLOCK_CASES = [(d, w, st, c) for d in (64, 128) for w in (4, 8) for st in (2, 4) for c in (False, True)]


@pytest.mark.gpu
@pytest.mark.parametrize("D,warps,stages,causal", BLOCK_CASES,
                         ids=[f"hd{d}-w{w}-s{st}-{'causal' if c else 'full'}" for d, w, st, c in BLOCK_CASES])
def test_attention_bwd_gpu_configs(D, warps, stages, causal):
    """Other block shapes, warp counts and stage counts than the benchmark's (64-row inner blocks, one inner
    block per program on the diagonal, 2 stages), fp16, against float32 autograd."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    q, k, v, do = _inputs(1, 2, 256, D, seed=D + warps + stages, device="cuda")
    sm_scale = 1.0 / math.sqrt(D)
    cfg = dict(BLOCK_M1=64, BLOCK_N1=128, BLOCK_M2=128, BLOCK_N2=64, num_warps=warps, num_stages=stages)
    _, lse, dq, dk, dv = _run(q, k, v, do, causal, sm_scale, CONFIGS[D], cfg)
    torch.cuda.synchronize()
    _, lse_ref, *grads = _gpu_reference(q, k, v, do, causal, sm_scale)
    _check((lse, dq, dk, dv), (lse_ref.cpu().double(), *(g.cpu().double() for g in grads)), torch.float16)


def test_benchmark_bwd_row_on_cpu():
    """benchmarks/attention.py's backward row (forward with lse, poisoned gradients checked against float32
    autograd, TFLOP/s, table line) with the interpreter and a dummy timer, so the GPU script does not rot."""
    from benchmarks.attention import _fmt, attention_bwd_flops, attention_flops, run_bwd_row

    row = run_bwd_row({"kernellab": (kl, FWD, BWD)}, 1, 2, 64, 32, True, device="cpu",
                      timer=lambda fn: (fn(), 1e-3)[1], fwd_cfg=dict(BLOCK_M=32, BLOCK_N=16),
                      cfg=dict(BLOCK_M1=16, BLOCK_N1=32, BLOCK_M2=32, BLOCK_N2=16))
    assert row["kernellab"]["ok"], row
    assert row["mode"] == "bwd" and row["flops"] == attention_bwd_flops(1, 2, 64, 32, True)
    assert row["flops"] == attention_flops(1, 2, 64, 32, True) * 5 // 2
    assert row["torch"]["rel_err"] < 1e-2
    assert _fmt(row).startswith("hd32 s64 causal bwd")


KNOBS = ("KERNELLAB_PIPELINE_SIDE_LOADS",)


def _fresh(monkeypatch, *on):
    """The schedule switches in `on` set ("1"), the others off ("0"), and the backward kernels' in-memory compiles
    dropped, so the next launch compiles under them (the disk cache keys on them)."""
    for k in KNOBS:
        monkeypatch.setenv(k, "1" if k in on else "0")
    for k in BWD:
        k.device_caches.clear()


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("D,causal", CODEGEN_CASES, ids=[f"hd{d}-{'causal' if c else 'full'}" for d, c in CODEGEN_CASES])
def test_attention_bwd_side_loads_ride_in_the_stages(D, causal, tmp_path, monkeypatch):
    """KERNELLAB_PIPELINE_SIDE_LOADS=1: the dK/dV loops' lse and delta (Triton copies them with the tiles; loaded in
    the body, each iteration waited for them from global memory) are copied with qT and do into stages of their own
    and read back from shared memory: no global load left in the loops, the waits and barriers as before, the stage
    reads ordered (sm_90 wgmma and sm_80 mma.sync)."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    _fresh(monkeypatch, "KERNELLAB_PIPELINE_SIDE_LOADS")
    cfg = dict(BWD_CONFIGS[D])
    nw, ns = cfg.pop("num_warps"), cfg.pop("num_stages")
    loops = 2 if causal else 1
    for arch in (90, 80):
        ck = _warm_dkdv(D, causal, cfg["BLOCK_M1"], cfg["BLOCK_N1"], num_warps=nw, num_stages=ns,
                        enable_wgmma=arch >= 90)
        ck.build_gpu(Target(arch))
        gpu, ptx = ck.asm["gpu"], ck.asm["ptx"]
        assert gpu.count('operand = "side"') == 2 * loops and gpu.count("ttg.local_load") == 2 * loops
        # 8-byte copies: the accumulator's columns come in pairs and lse/delta rows are 16-byte aligned
        assert sorted(set(re.findall(r"ttg\.async_copy .*\{vec = (\d+)\}", gpu))) == ["2", "8"]
        assert shared_reuse_hazards(gpu) == []
        bodies = loop_bodies(ptx)
        assert len(bodies) == loops
        for body in bodies:
            assert "ld.global" not in body and body.count("cp.async.commit_group") == 1
            assert body.count("bar.sync") == (2 if arch == 90 else 1)
            if arch == 90:
                assert body.count("wgmma.wait_group") == 2
        if arch == 90:
            assert ck.n_spills <= (160 if D == 64 else 0), (ck.n_regs, ck.n_spills)  # hd64: at the 255 cap
            assert "C7514" not in ck.report.get("log", "")
    _fresh(monkeypatch)


SCHEDULES = [()]  # the default (lse and delta through the stages) is test_attention_bwd_gpu's
SCHEDULE_IDS = ["no-side-loads"]


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", SCHEDULES, ids=SCHEDULE_IDS)
@pytest.mark.parametrize("D,causal,dtype", GPU_CASES,
                         ids=[f"hd{d}-{'causal' if c else 'full'}-{str(dt)[6:]}" for d, c, dt in GPU_CASES])
def test_attention_bwd_gpu_schedules(D, causal, dtype, knobs, monkeypatch):
    """test_attention_bwd_gpu with KERNELLAB_PIPELINE_SIDE_LOADS=0 (lse and delta loaded in the body)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    _fresh(monkeypatch, *knobs)
    try:
        Z, H, S = 2, 3, 512
        q, k, v, do = _inputs(Z, H, S, D, seed=D + int(causal) + 7, dtype=dtype, device="cuda")
        sm_scale = 1.0 / math.sqrt(D)
        _, lse, dq, dk, dv = _run(q, k, v, do, causal, sm_scale, CONFIGS[D], dict(BWD_CONFIGS[D]))
        torch.cuda.synchronize()
        _, lse_ref, *grads = _gpu_reference(q, k, v, do, causal, sm_scale)
        _check((lse, dq, dk, dv), (lse_ref.cpu().double(), *(g.cpu().double() for g in grads)), dtype)
    finally:
        _fresh(monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", SCHEDULES, ids=SCHEDULE_IDS)
@pytest.mark.parametrize("D,warps,stages,causal", [(64, 4, 2, False), (64, 4, 4, True), (128, 8, 2, True),
                                                   (128, 4, 3, False)])
@pytest.mark.parametrize("wgmma", [True, False], ids=["wgmma", "mma_sync"])
def test_attention_bwd_gpu_schedules_configs(D, warps, stages, causal, wgmma, knobs, monkeypatch):
    """The schedule switches with other stage counts, warps and block shapes, on wgmma and mma.sync."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    _fresh(monkeypatch, *knobs)
    try:
        q, k, v, do = _inputs(1, 2, 256, D, seed=D + warps + stages + 3, device="cuda")
        sm_scale = 1.0 / math.sqrt(D)
        cfg = dict(BLOCK_M1=64, BLOCK_N1=128, BLOCK_M2=128, BLOCK_N2=64, num_warps=warps, num_stages=stages,
                   enable_wgmma=wgmma)
        _, lse, dq, dk, dv = _run(q, k, v, do, causal, sm_scale, CONFIGS[D], cfg)
        torch.cuda.synchronize()
        _, lse_ref, *grads = _gpu_reference(q, k, v, do, causal, sm_scale)
        _check((lse, dq, dk, dv), (lse_ref.cpu().double(), *(g.cpu().double() for g in grads)), torch.float16)
    finally:
        _fresh(monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["first", "end"])
@pytest.mark.parametrize("D,warps,stages,causal", [(64, 4, 3, False), (128, 8, 3, False), (64, 4, 2, True),
                                                   (128, 8, 4, True)])
def test_attention_bwd_gpu_chain_copies(D, warps, stages, causal, where, monkeypatch):
    """Both KERNELLAB_CHAIN_COPIES schedules (refill after the first dot's wait, or after the last dot's issue)
    with 2 to 4 stages, poisoned gradients against float32 autograd: the stage refilled at the end of the body is
    the one the previous iteration read, never the one the dots in flight read."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    _chain_copies(monkeypatch, where)
    try:
        q, k, v, do = _inputs(2, 3, 384, D, seed=D + stages + int(causal) + 11, device="cuda")
        sm_scale = 1.0 / math.sqrt(D)
        cfg = dict(BWD_CONFIGS[D], num_warps=warps, num_stages=stages)
        _, lse, dq, dk, dv = _run(q, k, v, do, causal, sm_scale, CONFIGS[D], cfg)
        torch.cuda.synchronize()
        _, lse_ref, *grads = _gpu_reference(q, k, v, do, causal, sm_scale)
        _check((lse, dq, dk, dv), (lse_ref.cpu().double(), *(g.cpu().double() for g in grads)), torch.float16)
    finally:
        _chain_copies(monkeypatch, None)
