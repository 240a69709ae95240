"""KERNELLAB_RELOAD_VEC=1 (remove_layout_conversions, default off until timed on a GPU): a small load the pass issues
again in its users' layout takes the vector width of the final IR's facts. heldout_texts4's W4A16 matmul loads its
per-column scales in the packed weights' layout (16 contiguous columns a thread); the width, computed from the
facts at the start of the round that rebuilt the column index math, was 1: 16 scalar 2-byte loads a thread and no
pipelining of them (benchmarks/NOTES.md). Build test (GPU IR and PTX, sm_90a), interpreter and GPU results."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError


@kl.jit
def w4_scaled_mm(A, QW, S, C, M, N, K, sam, sqk, ssg, scm, GROUP: tl.constexpr, BM: tl.constexpr,
                 BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)  # one grid axis (persistence applies: tests/test_math_tile_wgmma.py)
    pid_m = pid // tl.cdiv(N, BN)
    pid_n = pid % tl.cdiv(N, BN)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = A + offs_m[:, None] * sam + offs_k[None, :]
    q_ptrs = QW + (offs_k[:, None] // 2) * sqk + offs_n[None, :]
    shifts = ((offs_k % 2) * 4).to(tl.uint8)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.)
        q = tl.load(q_ptrs, mask=offs_n[None, :] < N, other=0)
        s = tl.load(S + (k // GROUP) * ssg + offs_n, mask=offs_n < N, other=0.)
        w = ((q >> shifts[:, None]) & 0xF).to(tl.int32) - 8
        acc = tl.dot(a, w.to(tl.float16) * s[None, :], acc)
        a_ptrs += BK
        q_ptrs += (BK // 2) * sqk
    tl.store(C + offs_m[:, None] * scm + offs_n[None, :], acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _inputs(M, N, K, group, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(M, K, generator=g) * 0.5).to(torch.float16)
    qw = torch.randint(0, 256, (K // 2, N), generator=g, dtype=torch.uint8)
    s = (torch.rand(K // group, N, generator=g) * 0.1 + 0.01).to(torch.float16)
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    return [t.to(device) for t in (a, qw, s, c)]


def _reference(a, qw, s, group):
    K = a.shape[1]
    lo, hi = (qw & 0xF).long() - 8, (qw >> 4).long() - 8
    w = torch.stack([lo, hi], dim=1).reshape(K, -1).double()
    w = w * s.double().repeat_interleave(group, dim=0)
    return a.double() @ w


def _launch(a, qw, s, c, group, **cfg):
    M, K = a.shape
    N = qw.shape[1]
    grid = (-(-M // cfg["BM"]) * -(-N // cfg["BN"]),)
    return w4_scaled_mm[grid](a, qw, s, c, M, N, K, a.stride(0), qw.stride(0), s.stride(0), c.stride(0),
                              GROUP=group, **cfg)


CFG = dict(BM=64, BN=64, BK=128, num_warps=4, num_stages=3)


def compiled(M, N, K, group=128):
    """The kernel specialized for these sizes and built for sm_90a (skipped where ptxas is missing)."""
    a, qw, s, c = _inputs(M, N, K, group)
    ck = w4_scaled_mm.warmup(a, qw, s, c, M, N, K, a.stride(0), qw.stride(0), s.stride(0), c.stride(0), GROUP=group,
                             **CFG, grid=(1,))
    try:
        ck.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    return ck


@pytest.mark.parametrize("knob", ["0", "1"])
def test_the_scales_reload_takes_its_run(monkeypatch, knob):
    monkeypatch.setenv("KERNELLAB_RELOAD_VEC", knob)
    ck = compiled(256, 256, 512)
    ptx = ck.asm["ptx"]
    if knob == "0":
        line = next(ln for ln in ck.asm["gpu"].splitlines() if re.search(r"%s\S* = tt\.load", ln))
        assert "vec = 1" in line, line
        assert ptx.count("ld.global.b16") >= 16  # the scales one 2-byte load at a time
    else:
        # 8 scales a vector: the loop's pipeliner then copies them with the tiles (no 2-byte global load left)
        assert ptx.count("ld.global.b16") == 0 and "cp.async" in ptx


def test_interpreter():
    a, qw, s, c = _inputs(100, 192, 256, 128)
    _launch(a, qw, s, c, 128, **CFG)
    torch.testing.assert_close(c.double(), _reference(a, qw, s, 128), rtol=2e-2, atol=5e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
def test_gpu(knob, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_RELOAD_VEC", knob)
    for M, N, K in ((100, 192, 256), (256, 384, 512)):
        a, qw, s, c = _inputs(M, N, K, 128, "cuda")
        _launch(a, qw, s, c, 128, **CFG)
        torch.testing.assert_close(c.double().cpu(), _reference(a.cpu(), qw.cpu(), s.cpu(), 128), rtol=2e-2, atol=5e-2)
