"""Rank-3 descriptor tiles with a leading unit dim, as Liger's mlp uses them: `x_desc.load([b, m, k])` of a
[1, BM, BK] block reshaped to [BM, BK] for `tl.dot`, and `o_desc.store([b, m, n], tl.reshape(acc, [1, BM, BN]))`.
On sm_90 the load is a dot operand like a 2-D one (pipelined, its stages filled by TMA through a rank-3 tensor
map with a box of 1 along the batch) and the store goes out by TMA from the 2-D tile; sm_80 pipelines the load
with cp.async. Checked against torch float64 on ragged shapes with poisoned outputs, an out-of-range batch index
(reads zeros, writes nothing), on the interpreter; compile-only checks of the passes and ptxas; GPU runs marked
`gpu` (fp32 tiles are read as tf32 by the tensor cores there)."""
from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

needs_liger = pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None, reason="liger_kernel not installed")
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")


@kl.jit
def bmm3d(x_desc, w_desc, o_desc, K, B_OFF, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
          CAST: tl.constexpr):
    """o[b] = x[b + B_OFF] @ w.T, one [BM, BN] tile per program; x and o through [1, BM, *] blocks."""
    pid_m, pid_n, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.reshape(x_desc.load([b + B_OFF, pid_m * BM, k]), [BM, BK])
        w = w_desc.load([pid_n * BN, k])
        acc = tl.dot(a, tl.trans(w), acc)
    out = tl.reshape(acc, [1, BM, BN])
    if CAST:  # the cast after the reshape, as Liger writes `desc.store(..., A_block.to(dtype))`
        out = out.to(o_desc.dtype)
    o_desc.store([b, pid_m * BM, pid_n * BN], out)


DT = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _operands(kind, B, S, N, K, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(B, S, K, generator=g) + 0.25).to(DT[kind]).to(device)
    w = (torch.randn(N, K, generator=g) / K ** 0.5).to(DT[kind]).to(device)
    o = torch.full((B, S, N), float("nan"), dtype=DT[kind], device=device)
    return x, w, o


def _launch(x, w, o, cfg=(128, 128, 64, 8), stages=3, b_off=0, grid_b=None, warmup=False, **meta):
    BM, BN, BK, warps = cfg
    B, S, K = x.shape
    N = w.shape[0]
    D = kl.TensorDescriptor.from_tensor
    args = (D(x, [1, BM, BK]), D(w, [BN, BK]), D(o, [1, BM, BN]), K, b_off)
    kw = dict(BM=BM, BN=BN, BK=BK, CAST=o.dtype != torch.float32, num_warps=warps, num_stages=stages, **meta)
    grid = (kl.cdiv(S, BM), kl.cdiv(N, BN), grid_b or B)
    return bmm3d.warmup(*args, grid=grid, **kw) if warmup else bmm3d[grid](*args, **kw)


def _reference(x, w, b_off):
    xs = x.double().cpu()
    ref = torch.zeros(x.shape[0], x.shape[1], w.shape[0], dtype=torch.float64)
    for b in range(x.shape[0]):
        if 0 <= b + b_off < x.shape[0]:  # an out-of-range batch reads zeros (the descriptor's boundary check)
            ref[b] = xs[b + b_off] @ w.double().cpu().T
    return ref


# ---------------------------------------------------------------------------------------------- interpreter
@pytest.mark.parametrize("b_off", [0, 1], ids=["in", "batch_past_end"])
def test_interpreter_ragged(b_off):
    x, w, o = _operands("fp32", 2, 70, 56, 72, "cpu", seed=b_off)
    _launch(x, w, o, cfg=(32, 32, 16, 4), b_off=b_off, grid_b=3)  # a third batch program: its store is dropped
    assert not torch.isnan(o).any()
    torch.testing.assert_close(o.double(), _reference(x, w, b_off), rtol=1e-5, atol=1e-5)


@needs_liger
def test_interpreter_liger_mlp_backward_kernels(triton):
    """Liger's mlp kernels on the interpreter (LigerMLPFunction asserts CUDA tensors, so its steps are called
    directly): the forward's A, G, U, then dG and dU written over G and U in place, dI, and the torch GEMMs for the
    weight gradients, against float64 autograd on a ragged shape (S not a multiple of BLOCK_M)."""
    import liger_kernel.ops.mlp as mlp

    B, S, dim, hid = 2, 70, 72, 136
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, S, dim, generator=g)
    Wg, Wu = (torch.randn(hid, dim, generator=g) / dim ** 0.5 for _ in range(2))
    Wd = torch.randn(dim, hid, generator=g) / hid ** 0.5
    dO = torch.randn(B, S, dim, generator=g)
    AGU, cfg = mlp.gemm_swiglu(x, Wg, Wu, 1.0, True)
    y = AGU[..., :hid] @ Wd.T
    dWd = dO.reshape(-1, dim).T @ AGU[..., :hid].reshape(-1, hid)
    mlp.swiglu_backward_dGU(dO, Wd, AGU, cfg, 1.0, 1.0)
    dWug = AGU[..., hid:].reshape(-1, 2 * hid).T @ x.reshape(-1, dim)
    dI = mlp.swiglu_backward_dI(Wg, Wu, AGU)
    refs = [t.double().requires_grad_() for t in (x, Wg, Wu, Wd)]
    yr = (torch.nn.functional.silu(refs[0] @ refs[1].T) * (refs[0] @ refs[2].T)) @ refs[3].T
    yr.backward(dO.double())
    for got, ref in [(y, yr), (dI, refs[0].grad), (dWug[:hid], refs[1].grad), (dWug[hid:], refs[2].grad),
                     (dWd, refs[3].grad)]:
        torch.testing.assert_close(got.double(), ref.detach(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------- sm_90 / sm_80
def _stats(ck):
    return {p.name: p.stats for p in ck.trace.passes}


@needs_ptxas
@pytest.mark.parametrize("kind", ["fp32", "bf16"])
def test_sm90_3d_tiles_pipelined_by_tma(kind, tmp_path, monkeypatch):
    """The [1, BM, BK] operand is pipelined and filled by TMA (rank-3 map, box 1 along the batch), the [1, BM, BN]
    result goes out by TMA; no operand left in registers (before: 'operand a: not loaded in the loop body', the
    wgmmas serialized by ptxas (C7515), and 'not a 2-D tile' for the store)."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _launch(*_operands(kind, 2, 256, 256, 256, "cpu"), stages=2 if kind == "fp32" else 3, warmup=True)
    ck.build_gpu(Target(90))
    st = _stats(ck)
    assert st["pipeline_dot_operands"]["pipelined"] == 1 and st["pipeline_dot_operands"]["skipped"] == []
    assert st["fill_stages_with_tma"]["tma"] == 2 and "no_tma" not in st["fill_stages_with_tma"]
    assert st["tma_store"] == {"tma_store": 1}
    ptx = ck.asm["ptx"]
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group" in ptx
    assert "st.global" not in ptx and "ld.global" not in ptx
    maps = [k["tensormap"] for k in ck.arg_kinds if isinstance(k, dict) and "tensormap" in k]
    esize = 4 if kind == "fp32" else 2
    x_map = next(m for m in maps if m["base"] == 0)
    assert len(x_map["dims"]) == 3 and len(x_map["strides"]) == 2 and x_map["box"] == [128 // esize, 128, 1]
    assert sorted(len(m["dims"]) for m in maps) == [2, 3, 3]
    assert ck.n_spills == 0 and not any("C7515" in n or "C7514" in n for n in ck.trace.notes)


@needs_ptxas
@pytest.mark.parametrize("arch, stages", [(80, 3), (90, 1)], ids=["sm80_cp_async", "sm90_registers"])
def test_squeezed_load_other_paths_assemble(arch, stages, tmp_path, monkeypatch):
    """sm_80 pipelines the [1, BM, BK] operand with cp.async (the addresses of a lower-rank tile of the block);
    with one stage nothing is pipelined and the squeezed load goes through registers."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _launch(*_operands("bf16", 2, 256, 256, 256, "cpu"), stages=stages, warmup=True)
    ck.build_gpu(Target(arch))
    st = _stats(ck)
    ptx = ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    if stages > 1:
        assert st["pipeline_dot_operands"]["pipelined"] == 1 and st["pipeline_dot_operands"]["skipped"] == []
        assert "cp.async.cg.shared.global" in ptx and "cp.async.bulk" not in ptx
    else:
        assert "ld.global" in ptx and "mbarrier::complete_tx" not in ptx and "cp.async.cg" not in ptx
        assert st["pipeline_dot_operands"]["pipelined"] == 0


# ---------------------------------------------------------------------------------------------- GPU
SHAPES = [(2, 256, 256, 256), (3, 200, 136, 520), (2, 70, 56, 72)]  # ragged S, N; K a multiple of 8 (TMA strides)
CONFIGS = [(128, 128, 64, 8), (64, 128, 32, 4)]


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("kind", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gpu_bmm3d(shape, kind, cfg, stages):
    B, S, N, K = shape
    if kind == "fp32" and cfg[0] == 128 and stages == 3:
        stages = 2  # 3 fp32 stages of 128x64 + 128x64 do not fit next to the store buffer
    for b_off in (0, 1):
        x, w, o = _operands(kind, B, S, N, K, "cuda", seed=b_off + S)
        _launch(x, w, o, cfg=cfg, stages=stages, b_off=b_off, grid_b=B + 1)
        torch.cuda.synchronize()
        got = o.double().cpu()
        assert not torch.isnan(got).any(), "unwritten (poisoned) elements"
        ref = _reference(x, w, b_off)
        err = ((got - ref).norm() / ref.norm()).item()
        assert err < {"fp32": 5e-3, "bf16": 8e-3, "fp16": 2e-3}[kind], err  # fp32: tf32, truncated from stages
        if b_off:
            assert torch.equal(got[-1], torch.zeros_like(got[-1]))


@pytest.mark.gpu
@needs_liger
@pytest.mark.parametrize("shape", [(2, 200, 256, 384)], ids=["ragged"])
def test_gpu_liger_mlp_forward_backward(triton, shape):
    """Liger's fused SwiGLU MLP (3-D descriptor tiles, G and U overwritten in place by dG and dU) against float64;
    the kernels' fp32 dots are tf32 on the tensor cores, hence the normwise tolerance."""
    import liger_kernel.ops.mlp as mlp

    B, S, dim, hid = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, S, dim, generator=g)
    Wg, Wu = (torch.randn(hid, dim, generator=g) / dim ** 0.5 for _ in range(2))
    Wd = torch.randn(dim, hid, generator=g) / hid ** 0.5
    dO = torch.randn(B, S, dim, generator=g)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # torch.empty gives NaN: unwritten elements show
    try:
        ins = [t.cuda().requires_grad_() for t in (x, Wg, Wu, Wd)]
        y = mlp.LigerMLPFunction.apply(*ins)
        y.backward(dO.cuda())
    finally:
        torch.use_deterministic_algorithms(False)
    refs = [t.double().requires_grad_() for t in (x, Wg, Wu, Wd)]
    yr = (torch.nn.functional.silu(refs[0] @ refs[1].T) * (refs[0] @ refs[2].T)) @ refs[3].T
    yr.backward(dO.double())
    for name, got, ref in [("y", y, yr)] + [(f"d{n}", t.grad, r.grad) for n, t, r in
                                            zip(("x", "Wg", "Wu", "Wd"), ins, refs)]:
        got = got.detach().double().cpu()
        assert not torch.isnan(got).any(), name
        err = ((got - ref.detach()).norm() / ref.detach().norm()).item()
        assert err < 1e-2, (name, err)  # tf32 (truncated: biased by ~1e-3 per dot), dWd over 400 rows
