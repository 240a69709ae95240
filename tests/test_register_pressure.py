"""Register pressure where Triton does not spill (issue 14): the launch bounds ptxas gets, 32-bit shared addresses,
fp32 (tf32) wgmma operands pipelined into shared memory, and pointer tiles of tf32 operands left uncarried.

The kernels have the shapes of the library kernels that showed each gap (attorch's layer-norm backward: one row
of 4096 fp32 with a strided gradient; Liger's neighborhood attention A.V: a 64x64x64 tf32 dot loop whose B tile
is contiguous along N). ptxas tests compile for sm_90a on the CPU (registers, spills, PTX); `gpu` tests check the
results against torch float64 with poisoned outputs (on the CPU interpreter too).
"""
import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
gpu = pytest.mark.gpu
POISON = float("nan")


@kl.jit
def row_norm_backward(DY, X, Mean, Rstd, W, DX, DW, DB, n_rows, n_cols, dy_row_stride, dy_col_stride,
                      x_row_stride, dx_row_stride, BLOCK: tl.constexpr):
    """d/dx of w * (x - mean) * rstd + b for one row, plus that row's contributions to dw and db."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = (cols < n_cols) & (row < n_rows)
    dy = tl.load(DY + row * dy_row_stride + cols * dy_col_stride, mask=ok, other=0.0)
    x = tl.load(X + row * x_row_stride + cols, mask=ok, other=0.0)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = (x - mean) * rstd
    wdy = tl.load(W + cols, mask=cols < n_cols, other=0.0) * dy
    c1 = tl.sum(xhat * wdy, axis=0) / n_cols
    c2 = tl.sum(wdy, axis=0) / n_cols
    tl.store(DX + row * dx_row_stride + cols, rstd * (wdy - (xhat * c1 + c2)), mask=ok)
    tl.store(DW + row * n_cols + cols, dy * xhat, mask=ok)
    tl.store(DB + row * n_cols + cols, dy, mask=ok)


@kl.jit
def tf32_loop_dot(A, B, C, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A @ B over a K loop; A [M, K] K-contiguous, B [K, N] N-contiguous, addresses rebuilt from the counter."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(A + rm[:, None] * sam + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(B + rk[:, None] * sbk + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(C + rm[:, None] * scm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@kl.jit
def tf32_block_ptr_dot(A, B, C, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The same product through block pointers (boundary-checked: TMA may fill A's stages, not B's K-major ones)."""
    pm, pn = tl.program_id(0) * BM, tl.program_id(1) * BN
    a_bp = tl.make_block_ptr(A, (M, K), (sam, 1), (pm, 0), (BM, BK), (1, 0))
    b_bp = tl.make_block_ptr(B, (K, N), (sbk, 1), (0, pn), (BK, BN), (1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        acc += tl.dot(tl.load(a_bp, boundary_check=(0, 1)), tl.load(b_bp, boundary_check=(0, 1)))
        a_bp = tl.advance(a_bp, (0, BK))
        b_bp = tl.advance(b_bp, (BK, 0))
    c_bp = tl.make_block_ptr(C, (M, N), (scm, 1), (pm, pn), (BM, BN), (1, 0))
    tl.store(c_bp, acc, boundary_check=(0, 1))


@kl.jit
def tf32_scores(Q, K, S, M, N, sq, sk, ss, scale, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    """S = scale * Q K^T for one tile, no loop: q [M, D] and k [N, D] both D-contiguous, k read transposed."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rd = tl.arange(0, D)
    q = tl.load(Q + rm[:, None] * sq + rd[None, :], mask=rm[:, None] < M, other=0.0)
    k = tl.load(K + rn[:, None] * sk + rd[None, :], mask=rn[:, None] < N, other=0.0)
    s = tl.dot(q, tl.trans(k)) * scale
    tl.store(S + rm[:, None] * ss + rn[None, :], s, mask=(rm[:, None] < M) & (rn[None, :] < N))


@kl.jit
def tf32_attention(Q, K, V, O, L, sm_scale, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    """softmax(q k^T * sm_scale) v over L keys, fp32 everywhere (tf32 dots), online softmax as flash attention's
    forward: q staged once, k and v pipelined, the probabilities (an accumulator tile) staged for the second dot."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(Q + rm[:, None] * D + rd[None, :]) * (sm_scale * 1.4426950408889634)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for n0 in range(0, L, BN):
        rn = n0 + tl.arange(0, BN)
        k = tl.load(K + rd[:, None] + rn[None, :] * D)  # k^T: [D, BN]
        s = tl.dot(q, k)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, tl.load(V + rn[:, None] * D + rd[None, :]))
        m_i = m_new
    tl.store(O + rm[:, None] * D + rd[None, :], acc / l_i[:, None])


def _attention_args(device, M=256, L=512, D=64):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(n, D, generator=g, dtype=torch.float64) for n in (M, L, L))
    o = torch.full((M, D), POISON, device=device, dtype=torch.float32)
    scale = D ** -0.5
    want = torch.softmax(q @ k.T * scale, -1) @ v
    return (*(x.to(device, torch.float32) for x in (q, k, v)), o, L, scale), o, want


def _norm_args(device, rows=3, cols=4096, dtype=torch.float32):
    g = torch.Generator().manual_seed(14)
    x = torch.randn(rows, cols, generator=g, dtype=torch.float64) * 3 + 0.5
    dy_full = torch.randn(rows, 2 * cols, generator=g, dtype=torch.float64)
    w = torch.rand(cols, generator=g, dtype=torch.float64) + 0.5
    mean = x.mean(1)
    rstd = 1 / (x.var(1, unbiased=False) + 1e-5).sqrt()
    ref = dict(x=x, dy=dy_full[:, ::2], w=w, mean=mean, rstd=rstd)
    dev = {k: v.to(device, dtype) for k, v in (("x", x), ("dy_full", dy_full), ("w", w), ("mean", mean),
                                                 ("rstd", rstd))}
    outs = [torch.full((rows, cols), POISON, device=device, dtype=dtype) for _ in range(3)]
    dy = dev["dy_full"]
    args = (dy, dev["x"], dev["mean"], dev["rstd"], dev["w"], *outs, rows, cols, dy.stride(0), 2, cols, cols)
    return args, outs, ref


def _norm_reference(r):
    xhat = (r["x"] - r["mean"][:, None]) * r["rstd"][:, None]
    wdy = r["w"] * r["dy"]
    n = r["x"].shape[1]
    c1 = (xhat * wdy).sum(1, keepdim=True) / n
    c2 = wdy.sum(1, keepdim=True) / n
    return r["rstd"][:, None] * (wdy - (xhat * c1 + c2)), r["dy"] * xhat, r["dy"]


def _tf32_args(device, M=128, N=64, K=256):
    g = torch.Generator().manual_seed(41)
    a = torch.randn(M, K, generator=g, dtype=torch.float64)
    b = torch.randn(K, N, generator=g, dtype=torch.float64)
    c = torch.full((M, N), POISON, device=device, dtype=torch.float32)
    da, db = a.to(device, torch.float32), b.to(device, torch.float32)
    return (da, db, c, M, N, K, K, N, N), c, a @ b


def _compile(kernel, args, num_warps, **constexprs):
    ck = kernel.warmup(*args, **constexprs, num_warps=num_warps, grid=(1,))
    return ck.build_gpu()


def _stats(ck, name):
    return next(r.stats for r in ck.trace.passes if r.name == name)


@needs_ptxas
def test_exact_block_size_lets_ptxas_use_the_registers_it_needs():
    """With only `.maxntid 64`, ptxas capped the 2-warp kernel at 32 registers and spilled ~11 KB (attorch
    layer_norm_backward, Triton: 255 registers, 364 bytes); `.reqntid` (Triton's) leaves it the full budget."""
    args, _, _ = _norm_args("cpu")
    ck = _compile(row_norm_backward, args, 2, BLOCK=4096)
    assert re.search(r"^\.reqntid 64\b", ck.asm["ptx"], re.M) and ".maxntid" not in ck.asm["ptx"]
    assert ck.n_regs > 128 and ck.n_spills < 512, (ck.n_regs, ck.n_spills)


@needs_ptxas
def test_shared_addresses_are_32_bit():
    """Layout conversions address shared memory with 32-bit registers (LLVM's -nvptx-short-ptr, as Triton): with
    64-bit addresses LLVM kept one conversion's addresses live for the next (206 registers at 4 warps; Triton 183)."""
    args, _, _ = _norm_args("cpu")
    ck = _compile(row_norm_backward, args, 4, BLOCK=4096)
    ptx = ck.asm["ptx"]
    shared = re.findall(r"(?:st|ld)\.shared[.\w]*\s+(?:\{[^}]*\},\s*)?\[(%\w+)", ptx)
    assert shared and not [r for r in shared if r.startswith("%rd")], shared[:4]
    assert ck.n_regs <= 184 and ck.n_spills == 0, (ck.n_regs, ck.n_spills)


@needs_ptxas
def test_tf32_wgmma_operands_are_pipelined_k_major():
    """fp32 tiles a wgmma reads as tf32 go through cp.async stages like 16-bit ones: A as loaded (16-byte copies),
    B (N-contiguous in memory) K-major, 4 bytes per copy. Kept in registers instead, both tiles and their pointer
    tiles held ~176 registers (Liger's neighborhood attention; Triton 96)."""
    args, _, _ = _tf32_args("cpu")
    ck = _compile(tf32_loop_dot, args, 4, BM=64, BN=64, BK=64)
    st = _stats(ck, "pipeline_dot_operands")
    assert st["pipelined"] == 1 and st["buffers"] == 2, st
    assert re.search(r"b_stages = ttg\.local_alloc .*order=0,1", ck.asm["gpu"]), "B must be staged K-major"
    ptx = ck.asm["ptx"]
    assert re.search(r"cp\.async\.cg\.shared\.global \[[^]]+\], \[[^]]+\], 16", ptx)
    assert re.search(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], 4", ptx)
    assert "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32" in ptx
    assert ck.n_regs <= 136 and ck.n_spills == 0, (ck.n_regs, ck.n_spills)


@needs_ptxas
def test_tf32_block_pointer_stages_tma_only_as_laid_out():
    """TMA copies a tile as it lies in memory: it fills A's stages (K-contiguous, as wgmma reads them) but not B's,
    which are K-major across B's contiguous N (cp.async, 4 bytes a copy)."""
    args, _, _ = _tf32_args("cpu")
    ck = _compile(tf32_block_ptr_dot, args, 4, BM=64, BN=64, BK=64)
    assert _stats(ck, "pipeline_dot_operands")["pipelined"] == 1
    st = _stats(ck, "fill_stages_with_tma")
    assert st["tma"] == 1 and len(st["no_tma"]) == 1 and "K-major tf32" in st["no_tma"][0], st
    assert re.search(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], 4", ck.asm["ptx"])


def _scores_args(device, M=128, N=64, D=64):
    g = torch.Generator().manual_seed(7)
    q = torch.randn(M, D, generator=g, dtype=torch.float64)
    k = torch.randn(N, D, generator=g, dtype=torch.float64)
    s = torch.full((M, N), POISON, device=device, dtype=torch.float32)
    return (q.to(device, torch.float32), k.to(device, torch.float32), s, M, N, D, D, N, 0.125), s, 0.125 * q @ k.T


@needs_ptxas
def test_tf32_tiles_loaded_once_are_stored_at_their_load():
    """fp32 tiles loaded outside loops and read only by a tf32 wgmma (k through tl.trans) go to shared memory right
    after their loads, not at the dot: both 64x64 tiles in registers up to the dot cost 93 registers (Liger's
    neighborhood attention q.k^T; Triton 66)."""
    args, _, _ = _scores_args("cpu")
    ck = _compile(tf32_scores, args, 4, BM=64, BN=64, D=64)
    assert _stats(ck, "stage_invariant_dot_operands")["staged_once"] == 2
    gpu_ir = ck.asm["gpu"]
    assert "tt.trans" not in gpu_ir and gpu_ir.count("ttg.local_store") == 2 and "tf32 = true" in gpu_ir, gpu_ir
    assert ck.n_regs <= 84 and ck.n_spills == 0, (ck.n_regs, ck.n_spills)


@needs_ptxas
def test_tf32_attention_loop_holds_no_invariant_addresses():
    """attorch's fp32 flash forward held 64-bit wgmma descriptors of its fixed tiles (q, the probabilities'
    scratch) and one shared address per staged probability across the loop: 255 registers, 980 bytes spilled
    (Triton 200, none). Descriptors are now made next to their wgmma and the probabilities stored in pairs
    (st.shared.v2) from shared bases."""
    from .ptx import loop_bodies

    args, _, _ = _attention_args("cpu")
    ck = _compile(tf32_attention, args, 4, BM=128, BN=64, D=64)
    assert ck.n_spills == 0 and ck.n_regs <= 250, (ck.n_regs, ck.n_spills)
    loop = max(loop_bodies(ck.asm["ptx"]), key=len)
    assert loop.count("wgmma.mma_async") == 32 and "st.shared.v2.b32" in loop
    assert "st.shared.b32" not in loop  # every probability goes out in a pair


@pytest.mark.parametrize("layout_text, shape, order", [
    ("#blocked<[1, 4], [2, 16], [4, 1], [1, 0]>", (64, 64), (0, 1)),  # tf32 B, N-contiguous rows into K-major
    ("#blocked<[1, 4], [2, 16], [4, 1], [1, 0]>", (64, 64), (1, 0)),
    ("#mma<[4, 1]>", (128, 64), (1, 0)),                               # attention's fp32 probabilities
    ("#blocked<[4, 1], [16, 2], [1, 4], [0, 1]>", (64, 64), (1, 0))])
def test_swizzled_stage_addresses_share_bases_where_every_thread_agrees(layout_text, shape, order):
    """Register addresses into a swizzled stage reuse an earlier register's plus a constant when the distance is
    the same in every thread (`lower_async._ThreadBytes`), checked here against each thread's own elements from
    the layout's ownership (tests/gpu_passes/test_layouts.py). The tf32 B stage of Liger's neighborhood attention
    needs 4 bases per thread instead of 16 (64x64 fp32 over 4 warps; A.V 128 -> 80 registers, Triton 96)."""
    from kernellab.compiler.codegen.lower_async import _ThreadBytes
    from kernellab.compiler.gpu.layouts import parse_layout
    from kernellab.compiler.gpu.smem_layout import element_byte, linear_delta, swizzled
    from kernellab.compiler.types import float32

    from .gpu_passes.test_layouts import ownership

    layout = parse_layout(layout_text)
    t = swizzled(shape, float32, order)
    offs = layout.registers(shape)
    tb = _ThreadBytes(t, layout, shape)
    reps, base_of = [], {}
    for g in range(len(offs)):
        for rg in reps:
            d = linear_delta(t, offs[g][0] - offs[rg][0], offs[g][1] - offs[rg][1])
            d = tb.delta(offs[g], offs[rg]) if d is None else d
            if d is not None:
                base_of[g] = (rg, d)
                break
        else:
            reps.append(g)
            base_of[g] = (g, 0)
    owners, _ = ownership(layout, shape, layout.num_warps)
    by_thread = {}
    for idx, holders in owners.items():
        for th, r in holders:
            by_thread.setdefault(th, {})[r] = element_byte(t, *idx)
    for th, regs in by_thread.items():
        for g, byte in regs.items():
            rg, d = base_of[g]
            assert regs[rg] + d == byte, (th, g, rg, d)
    if order == (0, 1) and layout_text.startswith("#blocked<[1, 4]"):
        only_linear = []
        for g in range(len(offs)):
            if not any(linear_delta(t, offs[g][0] - offs[r][0], offs[g][1] - offs[r][1]) is not None
                       for r in only_linear):
                only_linear.append(g)
        assert (len(reps), len(only_linear)) == (4, 16)


def test_tf32_dot_operand_pointers_are_not_carried():
    """strength_reduce_pointers carries the pointer tile of a 16-bit dot operand, not of a tf32 one (one 64-bit
    pointer per element when its copies move 4 bytes each)."""
    args, _, _ = _tf32_args("cpu")
    ck32 = tf32_loop_dot.warmup(*args, BM=64, BN=64, BK=64, num_warps=4, grid=(1,))
    a16, b16 = args[0].half(), args[1].half()
    ck16 = tf32_loop_dot.warmup(a16, b16, *args[2:], BM=64, BN=64, BK=64, num_warps=4, grid=(1,))
    assert _stats(ck32, "strength_reduce_pointers")["carried"] == 0
    assert _stats(ck16, "strength_reduce_pointers")["carried"] == 2


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
@pytest.mark.parametrize("warps", [1, 2, 4, 8])
def test_row_norm_backward(device, warps):
    args, outs, ref = _norm_args(device)
    row_norm_backward[(3,)](*args, BLOCK=4096, num_warps=warps)
    for got, want in zip(outs, _norm_reference(ref)):
        torch.testing.assert_close(got.double().cpu(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
@pytest.mark.parametrize("shape", [(128, 64, 256), (100, 50, 200)])
@pytest.mark.parametrize("kernel", ["pointers", "block_ptr"])
def test_tf32_loop_dot(device, shape, kernel):
    args, c, want = _tf32_args(device, *shape)
    M, N, _ = shape
    k = tf32_loop_dot if kernel == "pointers" else tf32_block_ptr_dot
    k[(triton_cdiv(M, 64), triton_cdiv(N, 64))](*args, BM=64, BN=64, BK=64, num_warps=4)
    # tf32 operands (10 mantissa bits, truncated by the tensor cores): relative error ~1e-3 of the row's scale
    torch.testing.assert_close(c.double().cpu(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item() ** 0.5)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
@pytest.mark.parametrize("shape", [(128, 64), (100, 50)])
def test_tf32_scores(device, shape):
    M, N = shape
    args, s, want = _scores_args(device, M, N)
    tf32_scores[(triton_cdiv(M, 64), triton_cdiv(N, 64))](*args, BM=64, BN=64, D=64, num_warps=4)
    torch.testing.assert_close(s.double().cpu(), want, rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
def test_tf32_attention(device):
    args, o, want = _attention_args(device)
    tf32_attention[(2,)](*args, BM=128, BN=64, D=64, num_warps=4)
    torch.testing.assert_close(o.double().cpu(), want, rtol=2e-2, atol=1e-2)


def triton_cdiv(a, b):
    return (a + b - 1) // b


@gpu
@pytest.mark.parametrize("op", ["fused_neighborhood_attention", "layer_norm"])
def test_liger_kernels_gpu(op):
    """The library kernels themselves (Liger through kernellab.compat, at their GPU sizes): forward and backward
    against torch float64, outputs poisoned (benchmarks/libraries.py checks)."""
    import importlib.util
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    if importlib.util.find_spec("liger_kernel") is None:
        pytest.skip("liger_kernel is not installed")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(root / "benchmarks" / "libraries.py"), "--child", op, "kernellab",
                        "cuda"], capture_output=True, text=True, env=env, cwd=str(root), timeout=900)
    rows = [json.loads(ln.split(" ", 1)[1]) for ln in p.stdout.splitlines() if ln.startswith("@@libraries")]
    assert rows, p.stderr[-3000:]
    r = rows[0]
    assert "error" not in r, r.get("traceback", r["error"])
    assert r["correct"], f"{r['worst']} is off by {r['worst_err_over_tol']:.3g} x the tolerance"


_ATTORCH_CHILD = r"""
import json, os, sys
import torch
torch.utils.deterministic.fill_uninitialized_memory = True  # torch.empty outputs come back NaN: unwritten shows
import kernellab.compat
kernellab.compat.install()
sys.path.insert(0, os.environ["ATTORCH_PATH"])
from attorch.layer_norm_layer import LayerNormAutoGrad
from attorch.multi_head_attention_kernels import _attention
out = {}
g = torch.Generator().manual_seed(5)
for rows, cols in ((512, 4096), (300, 1000)):
    x = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    w, b = torch.rand(cols, generator=g, dtype=torch.float64) + 0.5, torch.randn(cols, generator=g, dtype=torch.float64)
    dy = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    ins = [t.cuda().float().requires_grad_() for t in (x, w, b)]
    y = LayerNormAutoGrad.apply(*ins, 1e-5)
    y.backward(dy.cuda().float())
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    yr = torch.nn.functional.layer_norm(ref[0], (cols,), ref[1], ref[2], 1e-5)
    yr.backward(dy)
    errs = [((a.detach().double().cpu() - r.detach()).abs().max() / (r.detach().abs().max() + 1e-12)).item()
            for a, r in zip([y] + [t.grad for t in ins], [yr] + [t.grad for t in ref])]
    out[f"layer_norm {rows}x{cols}"] = errs
for d in (64, 128):
    q, k, v = (torch.randn(2, 3, 512, d, generator=g, dtype=torch.float64) for _ in range(3))
    ctx = type("Ctx", (), {"save_for_backward": lambda self, *a: None})()
    o = _attention.forward(ctx, *(t.cuda().float() for t in (q, k, v)), False, d ** -0.5)
    want = torch.softmax(q @ k.transpose(-1, -2) * d ** -0.5, -1) @ v
    out[f"flash fp32 d{d}"] = [((o.double().cpu() - want).abs().max() / want.abs().max()).item()]
print("@@result " + json.dumps(out))
"""


@gpu
def test_attorch_layer_norm_and_fp32_flash_gpu():
    """attorch's own kernels (ATTORCH_PATH: a checkout of BobMcDear/attorch) through kernellab.compat, against torch
    float64: layer norm forward and backward at every autotuned warp count it picks, the fp32 flash forward (tf32
    dots) at d64 and d128. NaN-filled allocations make unwritten outputs fail."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not os.environ.get("ATTORCH_PATH"):
        pytest.skip("set ATTORCH_PATH to a checkout of BobMcDear/attorch")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", _ATTORCH_CHILD], capture_output=True, text=True, env=env,
                       cwd=str(root), timeout=900)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("@@result ")]
    assert lines, p.stderr[-3000:]
    for name, errs in json.loads(lines[0].split(" ", 1)[1]).items():
        limit = 2e-2 if name.startswith("flash") else 1e-4  # tf32 dots; fp32 elsewhere
        assert all(e <= limit for e in errs), (name, errs)
