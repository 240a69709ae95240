"""fp32 (tf32) dots on mma.sync whose tiles are pipelined through shared memory (issue 14, fla's chunk_fwd_kernel_h):
a state [BK, BV] decayed and updated chunk by chunk, `h = h * exp2(g_last)[:, None] + (k * exp2(g_last - g)) @ v`,
k and g loaded [BK, BT] contiguous along BK, v [BT, BV]. At one warp the dot is an mma.sync m16n8k8.tf32: v is
copied by cp.async into a K-major stage, k and g (read by the dot only after math) ride in the stages too and are
read back where the math needs them. Before, the three tiles sat in registers (255 registers, 200 bytes of spills;
Triton 96 registers, none). ptxas tests compile for sm_90a on the CPU; the others check the states against torch
float64 with poisoned outputs, on the interpreter and the GPU."""
import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
gpu = pytest.mark.gpu


@kl.jit
def decayed_state(Kp, V, G, Hs, T, K: tl.constexpr, NV: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                  BV: tl.constexpr, DECAY: tl.constexpr):
    """Hs[t] = the state before chunk t; k, g: [T, K] rows; v: [T, NV] rows (NV columns of which BV are this
    program's)."""
    i_v = tl.program_id(0)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    h = tl.zeros([BK, BV], dtype=tl.float32)
    n_t = tl.cdiv(T, BT)
    for i_t in range(n_t):
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < T
        tl.store(Hs + i_t * K * NV + o_k[:, None] * NV + o_v[None, :], h)
        kt = tl.load(Kp + o_k[:, None] + o_t[None, :] * K, mask=m_t[None, :], other=0.0)
        vt = tl.load(V + o_t[:, None] * NV + o_v[None, :], mask=m_t[:, None], other=0.0)
        if DECAY:
            last = tl.minimum(i_t * BT + BT, T) - 1
            g_last = tl.load(G + last * K + o_k)
            gt = tl.load(G + o_k[:, None] + o_t[None, :] * K, mask=m_t[None, :], other=0.0)
            h *= tl.exp2(g_last)[:, None]
            kt = kt * tl.exp2(g_last[:, None] - gt)
        h = tl.dot(kt, vt, h)
    tl.store(Hs + n_t * K * NV + o_k[:, None] * NV + o_v[None, :], h)


@kl.jit
def tf32_once(A, B, C, sam, sak, sbk, sbn, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """C = A[:M] @ B + A[M:] @ B, each tile loaded once outside any loop: A[M:] waits in registers while the first
    dot runs, so stage_invariant_dot_operands stores it at its load (fla's chunk_gla_bwd_kernel_inter)."""
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a2 = tl.load(A + (M + rm)[:, None] * sam + rk[None, :] * sak)
    a = tl.load(A + rm[:, None] * sam + rk[None, :] * sak)
    b = tl.load(B + rk[:, None] * sbk + rn[None, :] * sbn)
    c = tl.dot(a, b)
    tl.store(C + rm[:, None] * N + rn[None, :], tl.dot(a2, b, c))


def _once(device, warps, a_major, b_major, M=64, N=32, K=64):
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(2 * M, K, generator=g, dtype=torch.float64), torch.randn(K, N, generator=g, dtype=torch.float64)
    # "m": A stored column-major (contiguous along M); "k": B stored column-major (contiguous along K)
    a_d = a.float().to(device) if a_major == "k" else a.t().contiguous().float().to(device).t()
    b_d = b.float().to(device) if b_major == "n" else b.t().contiguous().float().to(device).t()
    c = torch.full((M, N), float("nan"), device=device)
    tf32_once[(1,)](a_d, b_d, c, a_d.stride(0), a_d.stride(1), b_d.stride(0), b_d.stride(1), M=M, N=N, K=K,
                    num_warps=warps)
    want = a[:M] @ b + a[M:] @ b
    torch.testing.assert_close(c.double().cpu(), want, rtol=1e-2, atol=4e-2 * K ** 0.5)


def test_interpreter_once():
    _once("cpu", 2, "k", "n")


@gpu
@pytest.mark.parametrize("warps", [1, 2, 4])
@pytest.mark.parametrize("a_major,b_major", [("k", "n"), ("m", "n"), ("k", "k"), ("m", "k")])
def test_gpu_once(warps, a_major, b_major):
    _once("cuda", warps, a_major, b_major)


def _args(device, T=200, K=32, NV=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(T, K, generator=g, dtype=torch.float64) * 0.5
    v = torch.randn(T, NV, generator=g, dtype=torch.float64)
    gk = -torch.rand(T, K, generator=g, dtype=torch.float64) * 0.2  # log2 decays in (-0.2, 0]
    return [t.to(device=device, dtype=torch.float32) for t in (k, v, gk)], (k, v, gk)


def _reference(k, v, gk, BT, decay):
    T, K = k.shape
    h = torch.zeros(K, v.shape[1], dtype=torch.float64)
    out = []
    for t0 in range(0, T, BT):
        out.append(h.clone())
        kt, vt, gt = k[t0:t0 + BT], v[t0:t0 + BT], gk[t0:t0 + BT]
        if decay:
            g_last = gt[-1]
            h = h * torch.exp2(g_last)[:, None]
            kt = kt * torch.exp2(g_last[None, :] - gt)
        h = h + kt.T @ vt
    out.append(h)
    return torch.stack(out)


def _run(device, warps, stages, decay, BV=32, T=200):
    (k, v, gk), ref = _args(device, T=T)
    BT, K, NV = 64, 32, 64
    n_t = -(-T // BT)
    hs = torch.full((n_t + 1, K, NV), float("nan"), device=device, dtype=torch.float32)
    decayed_state[(NV // BV,)](k, v, gk, hs, T, K=K, NV=NV, BT=BT, BK=K, BV=BV, DECAY=decay, num_warps=warps,
                               num_stages=stages)
    want = _reference(*ref, BT, decay)
    # tf32 operands (10 mantissa bits; the stages are truncated, not rounded): ~1e-3 relative per product
    torch.testing.assert_close(hs.double().cpu(), want, rtol=1e-2, atol=2e-2 * want.abs().max().item() ** 0.5)


@pytest.mark.parametrize("decay", [False, True])
def test_interpreter(decay):
    _run("cpu", 1, 2, decay)


@gpu
@pytest.mark.parametrize("decay", [False, True])
@pytest.mark.parametrize("warps,stages", [(1, 1), (1, 2), (1, 3), (2, 2), (4, 3), (8, 2)])
@pytest.mark.parametrize("T", [200, 256])
def test_gpu(decay, warps, stages, T):
    _run("cuda", warps, stages, decay, T=T)


def _compile(decay, warps=1, stages=2):
    (k, v, gk), _ = _args("cpu")
    hs = torch.empty(5, 32, 64)
    ck = decayed_state.warmup(k, v, gk, hs, 200, K=32, NV=64, BT=64, BK=32, BV=32, DECAY=decay, num_warps=warps,
                              num_stages=stages, grid=(1,))
    return ck.build_gpu()


@needs_ptxas
@pytest.mark.parametrize("decay", [False, True])
def test_tiles_are_staged_and_nothing_spills(decay):
    ck = _compile(decay)
    gpu_ir = ck.asm["gpu"]
    assert "pipelined_stages = 2" in gpu_ir
    assert "mma.sync.m16n8k8.tf32" in gpu_ir
    # v: a K-major stage ([N][K], K contiguous) with rows padded by 16 bytes for ldmatrix
    assert "!memdesc<2x64x32xf32, order=0,1, pad=4>" in gpu_ir
    # no 2-D tile is loaded from global memory in the loop (only the decay's row g_last)
    assert not re.search(r"= tt\.load .*: tensor<\d+x\d+x", gpu_ir), gpu_ir
    assert ("side_stages" in gpu_ir) == decay
    # before: 94 registers / 255 and 12 bytes of spills with the decay; Triton 3.6 on this text: 126 / 168, none
    assert ck.n_spills == 0 and ck.n_regs <= (126 if not decay else 168), ck.n_regs


# KERNELLAB_REGISTER_DOT_OPERAND=1 (passes/register_dot_operand.py): the decayed k (`kt * exp2(g_last - gt)`) is
# computed in the #mma layout and handed to mma.sync from registers, k permuted within each step (B's rows read to
# match): no staging store, barrier or ldmatrix for it, and v's stage goes back to its load's order (16-byte copies).
@needs_ptxas
def test_register_operand_compiles(monkeypatch):
    monkeypatch.setenv("KERNELLAB_REGISTER_DOT_OPERAND", "1")
    decayed_state.device_caches.clear()
    try:
        ck = _compile(True)
    finally:
        decayed_state.device_caches.clear()
    gpu_ir = ck.asm["gpu"]
    assert "a_in_registers = true" in gpu_ir and "!memdesc<2x64x32xf32, order=1,0, pad=4>" in gpu_ir, gpu_ir
    ptx = ck.asm["ptx"]
    assert "ldmatrix" not in ptx and ptx.count("mma.sync.aligned.m16n8k8") == 64
    assert "cp.async.cg.shared.global" in ptx
    # before: 168 registers (Triton 3.6 on this text: 168)
    assert ck.n_spills == 0 and ck.n_regs <= 112, ck.n_regs


@gpu
@pytest.mark.parametrize("decay", [False, True])
@pytest.mark.parametrize("warps,stages", [(1, 1), (1, 2), (1, 3), (2, 2), (4, 3)])
@pytest.mark.parametrize("T", [200, 256])
def test_gpu_register_operand(decay, warps, stages, T, monkeypatch):
    monkeypatch.setenv("KERNELLAB_REGISTER_DOT_OPERAND", "1")
    decayed_state.device_caches.clear()
    try:
        _run("cuda", warps, stages, decay, T=T)
    finally:
        decayed_state.device_caches.clear()


@kl.jit
def chained(Q, Kp, V, O, M: tl.constexpr, N: tl.constexpr, D: tl.constexpr, E: tl.constexpr):
    """O = ((Q @ K^T) * 0.5) @ V in fp32 (tf32 dots): the first dot's accumulator, scaled, is the second's A
    (KERNELLAB_REGISTER_DOT_OPERAND=2 hands it to mma.sync from registers)."""
    rm, rn, rd, re_ = tl.arange(0, M), tl.arange(0, N), tl.arange(0, D), tl.arange(0, E)
    q = tl.load(Q + rm[:, None] * D + rd[None, :])
    kt = tl.load(Kp + rn[None, :] * D + rd[:, None])
    v = tl.load(V + rn[:, None] * E + re_[None, :])
    s = tl.dot(q, kt) * 0.5
    tl.store(O + rm[:, None] * E + re_[None, :], tl.dot(s, v))


def _chained(device, warps, M=32, N=64, D=32, E=32):
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((M, D), (N, D), (N, E)))
    o = torch.full((M, E), float("nan"), device=device)
    chained[(1,)](*(t.float().to(device) for t in (q, k, v)), o, M=M, N=N, D=D, E=E, num_warps=warps)
    want = ((q @ k.T) * 0.5) @ v
    torch.testing.assert_close(o.double().cpu(), want, rtol=2e-2, atol=5e-2 * want.abs().max().item())


def test_interpreter_chained():
    _chained("cpu", 1)


@needs_ptxas
def test_chained_accumulator_from_registers(monkeypatch):
    monkeypatch.setenv("KERNELLAB_REGISTER_DOT_OPERAND", "2")
    chained.device_caches.clear()
    try:
        ck = chained.warmup(torch.float32, torch.float32, torch.float32, torch.float32, M=32, N=64, D=32, E=32,
                            num_warps=1, grid=(1,)).build_gpu()
    finally:
        chained.device_caches.clear()
    assert ck.asm["gpu"].count("a_in_registers = true") == 1 and ck.n_spills == 0
    # 2 m-tiles x 8 n-tiles x 4 k-steps, then 2 x 4 x 8
    assert ck.asm["ptx"].count("mma.sync.aligned.m16n8k8") == 128


@gpu
@pytest.mark.parametrize("knob", ["0", "2"])
@pytest.mark.parametrize("warps", [1, 2])
def test_gpu_chained(knob, warps, monkeypatch):
    monkeypatch.setenv("KERNELLAB_REGISTER_DOT_OPERAND", knob)
    chained.device_caches.clear()
    try:
        _chained("cuda", warps)
    finally:
        chained.device_caches.clear()
