"""A layout conversion through shared memory addresses its accesses as one base per thread plus an immediate
(`KernelLowering.linear_parts`), not one address register per access. Built from the per-dimension indices, LLVM
turned the register offsets into `or`s (disjoint bits) that ptxas does not fold, and ptxas computed the 32
addresses of a 128x128 accumulator's epilogue conversion before the loop and held them across it: the attention
backward's dQ kernel used 168 registers at hd128 (8 warps; Triton 3.6: 124), one program per SM where Triton
fits two. CPU checks on the PTX and ptxas' report; the converted tiles against torch on the GPU (marked gpu)."""
from __future__ import annotations

import re
import shutil

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402


@kl.jit
def acc_then_store(A, B, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CAST: tl.constexpr):
    """C[BM, BN] = A[BM, K] @ B[K, BN], one program: the accumulator's conversion to the store layout comes after
    the loop, so what it keeps live across the loop shows in the register count."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(B + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    if CAST:
        tl.store(C + rm[:, None] * BN + rn[None, :], acc.to(C.dtype.element_ty))
    else:
        tl.store(C + rm[:, None] * BN + rn[None, :], acc)


@kl.jit
def transpose_through_scratch(X, Y, R: tl.constexpr, C: tl.constexpr):
    """y = x^T, loaded along rows and stored along columns: a blocked-to-blocked conversion."""
    r = tl.arange(0, R)
    c = tl.arange(0, C)
    x = tl.load(X + r[:, None] * C + c[None, :])
    tl.store(Y + c[:, None] * R + r[None, :], tl.trans(x) * 2.0)


CASES = [(128, 128, 64, 8, torch.float16, True), (128, 128, 64, 4, torch.float16, True),
         (64, 128, 32, 4, torch.float32, False), (128, 64, 32, 8, torch.float16, False)]
IDS = [f"{m}x{n}x{k}-w{w}-{'f16' if c else 'f32'}out" for m, n, k, w, _, c in CASES]


def _epilogue_accesses(ptx: str):
    """(st.shared, ld.shared) address operands after the last loop of the kernel."""
    last = list(re.finditer(r"@%p\d+ bra\s+\$L__BB\d+_\d+;", ptx))
    tail = ptx[last[-1].end():] if last else ptx
    st = re.findall(r"(?:st\.shared|stmatrix)[.\w]*\s+\[([^\]]+)\]", tail)  # (sm_90: stmatrix, lower_async)
    ld = re.findall(r"ld\.shared[.\w]*\s+\{?[^\[]*\[([^\]]+)\]", tail)
    return st, ld


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("M,N,K,warps,dtype,cast", CASES, ids=IDS)
@pytest.mark.parametrize("arch", [90, 80], ids=["sm90", "sm80"])
def test_conversion_accesses_are_base_plus_immediate(M, N, K, warps, dtype, cast, arch, tmp_path, monkeypatch):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a = torch.empty(M, 256, dtype=torch.float16)
    b = torch.empty(256, N, dtype=torch.float16)
    c = torch.empty(M, N, dtype=torch.float16 if cast else torch.float32)
    ck = acc_then_store.warmup(a, b, c, 256, BM=M, BN=N, BK=K, CAST=cast, num_warps=warps, num_stages=3,
                               grid=(1,), enable_wgmma=arch >= 90)
    ck.build_gpu(Target(arch))
    assert "ttg.convert_layout" in ck.asm["gpu"]
    st, ld = _epilogue_accesses(ck.asm["ptx"])
    assert st and ld, "the epilogue conversion goes through shared memory"
    # every access of one side is an immediate away from one base register
    for side in (st, ld):
        bases = {re.split(r"\+", x)[0].strip() for x in side}
        assert len(bases) == 1, (len(side), sorted(bases)[:8])
    assert ck.n_spills == 0


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_switch_restores_per_register_addresses(tmp_path, monkeypatch):
    """KERNELLAB_CONVERT_ADDRESSES=per_register (kept to time the two) gives the old code, from its own cache entry."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELLAB_STMATRIX", "0")  # the conversion's stores by st.shared, where the switch acts
    a = torch.empty(128, 256, dtype=torch.float16)
    c = torch.empty(128, 128, dtype=torch.float16)

    def build():
        return acc_then_store.warmup(a, a, c, 256, BM=128, BN=128, BK=64, CAST=True, num_warps=8, num_stages=3,
                                     grid=(1,)).build_gpu()

    new = build()
    monkeypatch.setenv("KERNELLAB_CONVERT_ADDRESSES", "per_register")
    acc_then_store.device_caches.clear()  # the in-memory compiles; the disk cache keys on the switch
    old = build()
    st_new, _ = _epilogue_accesses(new.asm["ptx"])
    st_old, _ = _epilogue_accesses(old.asm["ptx"])
    assert len({x.split("+")[0] for x in st_new}) == 1 < len({x.split("+")[0] for x in st_old})
    assert old.n_regs > new.n_regs, (old.n_regs, new.n_regs)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_transposing_conversion_is_base_plus_immediate(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x = torch.empty(64, 128)
    ck = transpose_through_scratch.warmup(x, x, R=64, C=128, num_warps=4, grid=(1,)).build_gpu()
    ptx = ck.asm["ptx"]
    st = re.findall(r"st\.shared[.\w]*\s+\[([^\]]+)\]", ptx)
    assert st and len({re.split(r"\+", s)[0].strip() for s in st}) == 1, st[:8]


@pytest.mark.parametrize("M,N,K,warps,dtype,cast", CASES[:1] + CASES[2:3], ids=IDS[:1] + IDS[2:3])
def test_interpreter(M, N, K, warps, dtype, cast):
    g = torch.Generator().manual_seed(M + N)
    a = torch.randn(M, 128, generator=g).half()
    b = torch.randn(128, N, generator=g).half()
    c = torch.full((M, N), float("nan"), dtype=torch.float16 if cast else torch.float32)
    acc_then_store[(1,)](a, b, c, 128, BM=M, BN=N, BK=K, CAST=cast, num_warps=warps)  # CPU tensors: the interpreter
    want = a.double() @ b.double()
    assert torch.allclose(c.double(), want, rtol=2e-3, atol=2e-2 if cast else 1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,warps,dtype,cast", CASES, ids=IDS)
@pytest.mark.parametrize("wgmma", [True, False], ids=["wgmma", "mma_sync"])
def test_gpu(M, N, K, warps, dtype, cast, wgmma):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    g = torch.Generator().manual_seed(M + N + K + warps)
    a = torch.randn(M, 512, generator=g).half().cuda()
    b = torch.randn(512, N, generator=g).half().cuda()
    c = torch.full((M, N), float("nan"), dtype=torch.float16 if cast else torch.float32, device="cuda")
    acc_then_store[(1,)](a, b, c, 512, BM=M, BN=N, BK=K, CAST=cast, num_warps=warps, num_stages=3,
                         enable_wgmma=wgmma)
    want = a.double() @ b.double()
    assert not torch.isnan(c).any()
    assert torch.allclose(c.double(), want, rtol=2e-3, atol=5e-2 if cast else 1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("R,C,warps", [(64, 128, 4), (32, 256, 8), (128, 16, 2)])
def test_gpu_transpose(R, C, warps):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    x = torch.randn(R, C, device="cuda")
    y = torch.full((C, R), float("nan"), device="cuda")
    transpose_through_scratch[(1,)](x, y, R=R, C=C, num_warps=warps)
    assert torch.equal(y, x.t() * 2.0)
