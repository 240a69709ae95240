"""fp8 probabilities straight from registers into wgmma (FA3's fp8 attention): a dot whose A operand is another
dot's accumulator converted to e4m3/e5m2 reads it from registers, its k32 fragments gathered from the quad's lanes
by shuffles and byte permutes (`lower_wgmma.a_fragment_8bit_from_accumulator`), instead of staging it in shared
memory. A two-dot chain with values whose products and sums are exact checks every byte's place: any misplaced
byte changes the result."""
from __future__ import annotations

import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl


@kl.jit
def chain_kernel(A, B, C, Out, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, D: tl.constexpr):
    rm = tl.arange(0, M)
    rk = tl.arange(0, K)
    rn = tl.arange(0, N)
    rd = tl.arange(0, D)
    a = tl.load(A + rm[:, None] * K + rk[None, :])  # [M, K]
    b = tl.load(B + rk[:, None] + rn[None, :] * K)  # [K, N], stored [N][K] (K-major, as 8-bit wgmma reads it)
    s = tl.dot(a, b)
    p = s.to(A.dtype.element_ty)
    c = tl.load(C + rn[:, None] + rd[None, :] * N)  # [N, D], stored [D][N]
    out = tl.dot(p, c)
    tl.store(Out + rm[:, None] * D + rd[None, :], out)


DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
VALUES = torch.tensor([-2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0])


def _inputs(M, N, K, D, dt, device, seed):
    g = torch.Generator().manual_seed(seed)
    pick = lambda *shape: VALUES[torch.randint(0, len(VALUES), shape, generator=g)]  # noqa: E731
    a, b_nk, c_dn = pick(M, K), pick(N, K), pick(D, N)
    return [t.to(dt).to(device) for t in (a, b_nk, c_dn)]


def _reference(a, b_nk, c_dn, dt):
    """float64: s = a b exactly, p = s rounded to the fp8 type (round to nearest even, as cvt.rn.satfinite), p c."""
    s = a.double().cpu() @ b_nk.double().cpu().T
    p = s.float().to(dt).double()
    return p @ c_dn.double().cpu().T


CASES = [(64, 32, 32, 32, 4), (64, 64, 64, 64, 4), (128, 128, 64, 128, 8), (128, 64, 128, 64, 8)]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_second_dot_reads_a_from_registers(fmt, tmp_path, monkeypatch):
    """sm_90a build (no GPU): the second wgmma takes A in four registers, no shared-memory staging of p, and the
    switch KERNELLAB_FP8_A_REGS=0 brings the staging back."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    M, N, K, D, w = 128, 128, 64, 128, 8
    x = torch.empty(1, dtype=DTYPES[fmt])

    def build():  # a fresh kernel object each time: the in-memory cache does not key on the switch
        ck = kl.jit(chain_kernel.fn).warmup(x, x, x, torch.empty(1), M=M, N=N, K=K, D=D, grid=(1,), num_warps=w)
        ck.build_gpu(Target(90))
        return ck.asm["ptx"]

    form = rf"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.f32\.{fmt}\.{fmt} \{{[^}}]*\}}, "
    ptx = build()
    assert len(re.findall(form + r"\{", ptx)) == N // 32, "the second dot's A in registers"
    assert "shfl.sync.idx" in ptx and "prmt.b32" in ptx
    monkeypatch.setenv("KERNELLAB_FP8_A_REGS", "0")
    ptx = build()
    assert not re.findall(form + r"\{", ptx), "KERNELLAB_FP8_A_REGS=0: A staged in shared memory"


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_chain_interpreter(fmt):
    """The same chain on the interpreter (the reference's rounding of p matches the language's)."""
    M, N, K, D = 64, 32, 32, 32
    a, b, c = _inputs(M, N, K, D, DTYPES[fmt], "cpu", seed=1)
    out = torch.full((M, D), float("nan"))
    chain_kernel[(1,)](a, b, c, out, M=M, N=N, K=K, D=D)
    torch.testing.assert_close(out.double(), _reference(a, b, c, DTYPES[fmt]), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("regs", ["1", "0"], ids=["regs", "staged"])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("M,N,K,D,warps", CASES, ids=[f"m{c[0]}n{c[1]}k{c[2]}d{c[3]}w{c[4]}" for c in CASES])
def test_chain_gpu_exact(M, N, K, D, warps, fmt, regs, monkeypatch):
    """On CUDA, with p from registers and staged: exactly the float64 reference (output poisoned with NaN)."""
    monkeypatch.setenv("KERNELLAB_FP8_A_REGS", regs)
    a, b, c = _inputs(M, N, K, D, DTYPES[fmt], "cuda", seed=M + N + K + D + warps)
    out = torch.full((M, D), float("nan"), device="cuda")
    kl.jit(chain_kernel.fn)[(1,)](a, b, c, out, M=M, N=N, K=K, D=D, num_warps=warps)  # fresh: built with `regs`
    torch.cuda.synchronize()
    torch.testing.assert_close(out.cpu().double(), _reference(a, b, c, DTYPES[fmt]), rtol=0, atol=0)
