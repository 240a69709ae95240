"""int8 dots on mma.sync pipelined through shared memory (issue 14, torchao's int8_scaled_matmul): a K loop counting
down (`range(K, 0, -BLOCK_K)`), A [M, K] and B [K, N] int8 tiles copied by cp.async num_stages - 1 iterations ahead;
B contiguous along N is read from its stage byte by byte, contiguous along K by ldmatrix; an M-contiguous A stays in
registers. Results exact against torch int64, outputs poisoned, on the interpreter and the GPU; the ptxas test
compiles for sm_90a on the CPU."""
import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

from .ptx import loop_bodies

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
gpu = pytest.mark.gpu
POISON = -(2 ** 31)


@kl.jit
def int8_scaled_mm(A, B, C, S, M, N, K, sam, sak, sbk, sbn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                   EVEN_K: tl.constexpr):
    """C = (A @ B) * S[:, None], the K loop counting down as torchao's kernel does."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    ram = rm % M
    rbn = rn % N
    rk = tl.arange(0, BK)
    a_ptrs = A + ram[:, None] * sam + rk[None, :] * sak
    b_ptrs = B + rk[:, None] * sbk + rbn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    for k in range(K, 0, -BK):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=rk[None, :] < k, other=0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k, other=0)
        acc += tl.dot(a, b)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    s = tl.load(S + rm, mask=rm < M, other=0)
    ok = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(C + rm[:, None] * N + rn[None, :], acc * s[:, None], mask=ok)


def _args(device, M, N, K, b_layout="n", a_layout="k", seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (K, N), generator=g, dtype=torch.int8)
    s = torch.randint(-3, 4, (M,), generator=g, dtype=torch.int32)
    want = (a.long() @ b.long()) * s.long()[:, None]
    a_d = a.to(device) if a_layout == "k" else a.t().contiguous().to(device).t()
    b_d = b.to(device) if b_layout == "n" else b.t().contiguous().to(device).t()
    c = torch.full((M, N), POISON, device=device, dtype=torch.int32)
    return (a_d, b_d, c, s.to(device), M, N, K, a_d.stride(0), a_d.stride(1), b_d.stride(0), b_d.stride(1)), c, want


def _run(device, M, N, K, warps, stages, b_layout="n", a_layout="k", BM=32, BN=32, BK=32):
    args, c, want = _args(device, M, N, K, b_layout, a_layout)
    grid = (-(-M // BM), -(-N // BN))
    int8_scaled_mm[grid](*args, BM=BM, BN=BN, BK=BK, EVEN_K=K % BK == 0, num_warps=warps, num_stages=stages)
    assert torch.equal(c.long().cpu(), want)


@pytest.mark.parametrize("b_layout", ["n", "k"])
def test_interpreter(b_layout):
    _run("cpu", 40, 24, 96, 4, 3, b_layout)


@gpu
@pytest.mark.parametrize("b_layout,a_layout", [("n", "k"), ("k", "k"), ("n", "m")])
@pytest.mark.parametrize("warps,stages", [(1, 1), (1, 3), (2, 2), (4, 3), (4, 4), (8, 3)])
@pytest.mark.parametrize("shape", [(64, 64, 256), (40, 24, 96), (96, 64, 80)])
def test_gpu(b_layout, a_layout, warps, stages, shape):
    _run("cuda", *shape, warps, stages, b_layout, a_layout)


@gpu
@pytest.mark.parametrize("tile", [(64, 64, 64), (16, 64, 32), (64, 8, 64)])
def test_gpu_tiles(tile):
    BM, BN, BK = tile
    _run("cuda", 100, 72, 192, 4, 3, BM=BM, BN=BN, BK=BK)


@needs_ptxas
def test_the_loop_reads_staged_int8():
    """torchao's configuration (32x32x32, 4 warps, 3 stages): the loop copies both tiles by cp.async and reads B's
    bytes from shared memory; no global load or st.shared is left in it (before: ld.global, st.shared, bar.sync,
    ldmatrix every iteration)."""
    args, _, _ = _args("cpu", 64, 64, 256)
    ck = int8_scaled_mm.warmup(*args, BM=32, BN=32, BK=32, EVEN_K=True, num_warps=4, num_stages=3, grid=(1,))
    ck = ck.build_gpu()
    assert "pipelined_stages = 3" in ck.asm["gpu"]
    (loop,) = loop_bodies(ck.asm["ptx"])
    assert "cp.async" in loop and re.search(r"ld\.shared\.[bu]8", loop) and "ldmatrix" in loop
    assert not re.search(r"ld\.global|st\.shared", loop)
    assert ck.n_spills == 0 and ck.n_regs <= 40, ck.n_regs  # Triton 3.6: 32
