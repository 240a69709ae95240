"""KERNELLAB_REUSE_CONVERSIONS (passes/reuse_conversions.py) on a kernel: an epilogue that stores the gate and up
accumulators and silu(gate) * up (Liger's fused MoE up-projection stores pre_act and post_act so) converts two
tiles instead of three. The sm_90a build (no GPU needed), the interpreter, and on a GPU (`gpu`) the knob's output
against the default's, bit for bit, and float64."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError

KNOB = "KERNELLAB_REUSE_CONVERSIONS"


@kl.jit
def gate_up_store(x_ptr, wg_ptr, wu_ptr, pre_ptr, post_ptr, M, N, K, sxm, swn, spm, som, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        kk = k + rk
        x = tl.load(x_ptr + rm[:, None] * sxm + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        wmask = (rn[:, None] < N) & (kk[None, :] < K)
        acc_g = tl.dot(x, tl.trans(tl.load(wg_ptr + rn[:, None] * swn + kk[None, :], mask=wmask, other=0.0)), acc_g)
        acc_u = tl.dot(x, tl.trans(tl.load(wu_ptr + rn[:, None] * swn + kk[None, :], mask=wmask, other=0.0)), acc_u)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    pre = pre_ptr + rm[:, None] * spm + rn[None, :]
    tl.store(pre, acc_g.to(pre_ptr.dtype.element_ty), mask=mask)
    tl.store(pre + N, acc_u.to(pre_ptr.dtype.element_ty), mask=mask)
    h = acc_g * tl.sigmoid(acc_g) * acc_u
    tl.store(post_ptr + rm[:, None] * som + rn[None, :], h.to(post_ptr.dtype.element_ty), mask=mask)


def _operands(M, N, K, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(M, K, generator=g) * 0.5).to(dtype)
    x[0, :2] = torch.tensor([3.0, -2.5]).to(dtype)
    wg = (torch.randn(N, K, generator=g) * K ** -0.5).to(dtype)
    wu = (torch.randn(N, K, generator=g) * K ** -0.5).to(dtype)
    return [t.to(device) for t in (x, wg, wu)]


def _run(x, wg, wu, cfg, dtype):
    M, K, N = x.shape[0], x.shape[1], wg.shape[0]
    pre = torch.full((M, 2 * N), float("nan"), dtype=dtype, device=x.device)
    post = torch.full((M, N), float("nan"), dtype=dtype, device=x.device)
    bm, bn, bk, nw, ns = cfg
    gate_up_store[(kl.cdiv(M, bm), kl.cdiv(N, bn))](x, wg, wu, pre, post, M, N, K, x.stride(0), wg.stride(0),
                                                     pre.stride(0), post.stride(0), BLOCK_M=bm, BLOCK_N=bn,
                                                     BLOCK_K=bk, num_warps=nw, num_stages=ns)
    return pre, post


def _reference(x, wg, wu):
    g, u = x.double() @ wg.double().T, x.double() @ wu.double().T
    return torch.cat([g, u], 1), g * torch.sigmoid(g) * u


def test_interpreter():
    x, wg, wu = _operands(70, 40, 50, torch.float32, "cpu", seed=3)
    pre, post = _run(x, wg, wu, (64, 32, 16, 4, 2), torch.float32)
    rp, rh = _reference(x, wg, wu)
    torch.testing.assert_close(pre.double(), rp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(post.double(), rh, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cfg", [(64, 64, 32, 4, 2), (64, 128, 32, 8, 3)], ids=["64x64x32-4w2s", "64x128x32-8w3s"])
def test_sm90_build_converts_two_tiles(monkeypatch, tmp_path, cfg):
    """tf32 at the MoE's sizes: two conversions in the GPU IR instead of three, fewer shared stores, no spills."""
    from kernellab.compiler.codegen.target import Target

    built = {}
    for knob in ("0", "1"):
        monkeypatch.setenv(KNOB, knob)
        monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path / knob))
        M, N, K = 8192, 1024, 2048
        x, w = torch.empty(M, K), torch.empty(N, K)
        pre, post = torch.empty(M, 2 * N), torch.empty(M, N)
        bm, bn, bk, nw, ns = cfg
        ck = gate_up_store.warmup(x, w, w, pre, post, M, N, K, K, K, 2 * N, N, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                  num_warps=nw, num_stages=ns, grid=(1,))
        try:
            ck.build_gpu(Target(90))
        except ToolchainError as e:
            pytest.skip(f"no ptxas here: {e}")
        built[knob] = ck
    off, on = built["0"], built["1"]
    assert off.asm["gpu"].count("ttg.convert_layout") == 3 and on.asm["gpu"].count("ttg.convert_layout") == 2
    assert {r.name: r.stats for r in on.trace.passes}["reuse_conversions"] == {"reused": 1}
    sts = [len(re.findall(r"\bst\.shared", ck.asm["ptx"])) for ck in (off, on)]
    assert sts[1] < sts[0], sts
    assert off.n_spills == 0 and on.n_spills == 0, (on.n_regs, on.n_spills)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["tf32", "bf16"])
def test_gpu_reuse_matches_the_default_bit_for_bit(monkeypatch, dtype):
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    for M, N, K in [(4096, 1024, 2048), (1000, 300, 1000)]:
        x, wg, wu = _operands(M, N, K, dtype, "cuda", seed=M + K)
        outs = []
        for knob in ("0", "1"):
            monkeypatch.setenv(KNOB, knob)
            pre, post = _run(x, wg, wu, (64, 64, 32, 4, 2), dtype)
            torch.cuda.synchronize()
            assert not pre.isnan().any() and not post.isnan().any(), (knob, M, N, K)
            outs.append((pre, post))
        assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1]), (M, N, K)
        rp, rh = _reference(x, wg, wu)
        tol = 2e-2 if dtype != torch.float32 else 1e-2
        torch.testing.assert_close(outs[1][1].double(), rh, rtol=tol, atol=tol)
        torch.testing.assert_close(outs[1][0].double(), rp, rtol=tol, atol=tol)
