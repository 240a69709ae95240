"""A dot operand computed before the loop that reads it (attorch's flash-attention forward scales and casts q
there) is stored into shared memory once, not held in registers across the loop and staged by every dot
(passes/stage_invariant_dot_operands.py). attorch's fp16 forward at 128x64 queries, 4 warps: 255 registers
before, 228 after (Triton 3.6: 242); its fp32 (tf32) forward: 1524 spilled bytes before, 1000 after (Triton:
none; its key and value tiles still go through registers, see benchmarks/NOTES.md). CPU checks on the PTX and
ptxas' report; the compiled kernel against float64 on the GPU (marked gpu)."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402


@kl.jit
def scaled_q_attention(Q, K, V, Out, sm_scale, n_ctx, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       D: tl.constexpr):
    """One program: BLOCK_M queries of one head against all keys; the queries scaled (by sm_scale * log2 e) and
    cast to the keys' type once, before the key loop; exp2 online softmax."""
    head = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    base = head * n_ctx * D
    q = tl.load(Q + base + rows[:, None] * D + cols[None, :])
    q = (q * (sm_scale * 1.44269504)).to(K.dtype.element_ty)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    keys = tl.arange(0, BLOCK_N)
    for start in range(0, n_ctx, BLOCK_N):
        kt = tl.load(K + base + (start + keys)[None, :] * D + cols[:, None])
        v = tl.load(V + base + (start + keys)[:, None] * D + cols[None, :])
        qk = tl.dot(q, kt)
        m_new = tl.maximum(m, tl.max(qk, 1))
        alpha = tl.math.exp2(m - m_new)
        p = tl.math.exp2(qk - m_new[:, None])
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        s = s * alpha + tl.sum(p, 1)
        m = m_new
    tl.store(Out + base + rows[:, None] * D + cols[None, :], (acc / s[:, None]).to(Out.dtype.element_ty))


def _compile(dtype, D, warps):
    q = torch.empty(1, 256, D, dtype=dtype)
    ck = scaled_q_attention.warmup(q, q, q, q, 0.125, 256, BLOCK_M=128, BLOCK_N=64, D=D, num_warps=warps,
                                   num_stages=3, grid=(1,))
    return ck.build_gpu()


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("dtype,D,warps", [(torch.float16, 64, 4), (torch.float32, 64, 4),
                                           (torch.float16, 128, 8)], ids=["fp16-d64", "fp32-d64", "fp16-d128"])
def test_scaled_queries_are_stored_once_before_the_loop(dtype, D, warps):
    ck = _compile(dtype, D, warps)
    gpu = ck.asm["gpu"]
    assert gpu.count("ttg.local_store") == 1
    assert gpu.index("ttg.local_store") < gpu.index("scf.for")
    if dtype == torch.float16:
        assert ck.n_spills == 0, ck.n_spills


def _check(device, dtype, D, warps, H, S):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(H, S, D, generator=g).to(dtype) for _ in range(3))
    out = torch.full_like(q, float("nan")).to(device)
    scaled_q_attention[(S // 128, H)](q.to(device), k.to(device), v.to(device), out, D ** -0.5, S, BLOCK_M=128,
                                      BLOCK_N=64, D=D, num_warps=warps, num_stages=3)
    ref = torch.softmax((q.double() @ k.double().transpose(-1, -2)) * D ** -0.5, -1) @ v.double()
    tol = 2e-2 if dtype == torch.float16 else 5e-3  # fp16 inputs, or fp32 through tf32 tensor cores
    torch.testing.assert_close(out.cpu().double(), ref, atol=tol, rtol=tol)


def test_scaled_queries_attention_interpreter():
    """The kernel text itself (the CPU interpreter), so a GPU failure below is the compiler's."""
    _check("cpu", torch.float32, 32, 4, 1, 128)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,D,warps", [(torch.float16, 64, 4), (torch.float32, 64, 4),
                                           (torch.float16, 128, 8), (torch.float32, 128, 8)])
def test_scaled_queries_attention_on_gpu(dtype, D, warps):
    _check("cuda", dtype, D, warps, 3, 384)
