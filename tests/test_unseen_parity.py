"""Kernels of real libraries built the way Triton builds them (issue 14). Each test pins one difference found by
compiling a library's specialization with both compilers for sm_90a and comparing SASS: the fix is general, the
kernel here is a small stand-in. Interpreter and GPU runs against float64 with NaN-poisoned outputs; the GPU
stages (ptxas, no GPU needed) check the instruction that differed."""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError


def _built(kernel, *args, **kw):
    compiled = kernel.warmup(*args, **kw)
    try:
        return compiled.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")


# --- tl.sqrt is the fast square root (FlagGems' hypot: 400 SASS instructions to Triton's 232) ----------------

@kl.jit
def hypot_kernel(X, Y, Out, Rn, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.abs(tl.load(X + offs, mask=m, other=0.0))
    y = tl.abs(tl.load(Y + offs, mask=m, other=0.0))
    t, s = tl.maximum(x, y), tl.minimum(x, y)
    r = s / tl.where(t > 0, t, 1.0)
    tl.store(Out + offs, tl.where(t > 0, t * tl.sqrt(1.0 + r * r), s), mask=m)
    tl.store(Rn + offs, tl.sqrt_rn(x), mask=m)


def _hypot_args(n, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen, dtype=torch.float64) * 1e3
    y = torch.randn(n, generator=gen, dtype=torch.float64) * 1e-2
    x[:4] = torch.tensor([3.0, 0.0, 1e-30, 1e30])
    y[:4] = torch.tensor([4.0, 0.0, 1e-30, -1e30])
    out = [torch.full((n,), float("nan"), device=device) for _ in range(2)]
    return x.float().to(device), y.float().to(device), out


def _check_hypot(x, y, out, rn):
    want = torch.hypot(x.double().cpu(), y.double().cpu())
    torch.testing.assert_close(out.double().cpu(), want, rtol=1e-6, atol=0)
    torch.testing.assert_close(rn.double().cpu(), x.double().cpu().abs().sqrt(), rtol=1.2e-7, atol=0)


def test_hypot_interpreter():
    x, y, (out, rn) = _hypot_args(1000)
    hypot_kernel[(2,)](x, y, out, rn, 1000, BLOCK=512)
    _check_hypot(x, y, out, rn)


def test_sqrt_is_approximate_and_sqrt_rn_is_ieee(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x, y, (out, rn) = _hypot_args(1000)
    ptx = _built(hypot_kernel, x, y, out, rn, 1000, BLOCK=512, grid=(2,)).asm["ptx"]
    assert "sqrt.approx.ftz.f32" in ptx  # Triton's tl.sqrt
    assert "sqrt.rn.f32" in ptx  # tl.sqrt_rn stays correctly rounded


@pytest.mark.gpu
def test_hypot_gpu():
    for seed in range(3):
        x, y, (out, rn) = _hypot_args(3000, "cuda", seed)
        hypot_kernel[(6,)](x, y, out, rn, 3000, BLOCK=512)
        _check_hypot(x, y, out, rn)


# --- a loop-carried value keeps the layout its load gives it (Inductor's welford layer norm: 14 barriers to 3) --

@kl.jit
def welford_rows_kernel(X, Mean, Var, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rbase = tl.arange(0, RBLOCK)[None, :]
    mean = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    m2 = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    weight = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    for roffset in range(0, rnumel, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < rnumel
        x = tl.load(X + (rindex + rnumel * xindex), rmask & xmask, other=0.0)
        w_next = weight + 1.0
        delta = x - mean
        mean_next = mean + delta / w_next
        m2_next = m2 + delta * (x - mean_next)
        mean = tl.where(rmask & xmask, mean_next, mean)  # the select's mask was converted from the stores' layout
        m2 = tl.where(rmask & xmask, m2_next, m2)
        weight = tl.where(rmask & xmask, w_next, weight)
    total = tl.sum(weight, 1)[:, None]
    row_mean = tl.sum(mean * weight, 1)[:, None] / total
    row_m2 = tl.sum(m2 + weight * (mean - row_mean) * (mean - row_mean), 1)[:, None]
    tl.store(Mean + xindex, row_mean, xmask)
    tl.store(Var + xindex, row_m2 / total, xmask)


def _welford_args(rows, cols, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, cols, generator=gen, dtype=torch.float64) * 2 + 3).float().to(device)
    return x, torch.full((rows,), float("nan"), device=device), torch.full((rows,), float("nan"), device=device)


def _check_welford(x, mean, var):
    xd = x.double().cpu()
    torch.testing.assert_close(mean.double().cpu(), xd.mean(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(var.double().cpu(), xd.var(1, unbiased=False), rtol=1e-4, atol=1e-4)


def test_welford_interpreter():
    x, mean, var = _welford_args(5, 70)
    welford_rows_kernel[(3,)](x, mean, var, 5, 70, XBLOCK=2, RBLOCK=32)
    _check_welford(x, mean, var)


def test_welford_loop_needs_no_conversion(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x, mean, var = _welford_args(5, 70)
    compiled = _built(welford_rows_kernel, x, mean, var, 5, 70, XBLOCK=2, RBLOCK=32, grid=(3,))
    gpu = compiled.asm["gpu"]
    loop = gpu[gpu.index("scf.for"):gpu.index("tt.reduce")]
    assert "ttg.convert_layout" not in loop, loop


@pytest.mark.gpu
@pytest.mark.parametrize("rows,cols", [(5, 70), (64, 1000)])
def test_welford_gpu(rows, cols):
    for seed in range(2):
        x, mean, var = _welford_args(rows, cols, "cuda", seed)
        welford_rows_kernel[((rows + 1) // 2,)](x, mean, var, rows, cols, XBLOCK=2, RBLOCK=32)
        _check_welford(x, mean, var)


# --- CUDA-core dots: the next iteration's tiles load during this one's FMAs, the K loop written out ----------
# (FlagGems' bmm, fp32 with allow_tf32=False, num_stages=2: Triton pipelines it with cp.async; before, each
# iteration waited for its own loads and the dot's K loop was rolled, 64 FMAs a trip)

@kl.jit
def fma_bmm_kernel(A, B, O, M, N, K, s_ab, s_am, s_bb, s_bk, s_ob, s_om,
                   TILE_M: tl.constexpr, TILE_N: tl.constexpr, TILE_K: tl.constexpr):
    pid_b = tl.program_id(2)
    A += pid_b * s_ab
    B += pid_b * s_bb
    O += pid_b * s_ob
    offs_m = tl.program_id(0) * TILE_M + tl.arange(0, TILE_M)
    offs_n = tl.program_id(1) * TILE_N + tl.arange(0, TILE_N)
    offs_k = tl.arange(0, TILE_K)
    mask_m, mask_n = offs_m < M, offs_n < N
    a_ptrs = A + offs_m[:, None] * s_am + offs_k[None, :]
    b_ptrs = B + offs_k[:, None] * s_bk + offs_n[None, :]
    o = tl.zeros((TILE_M, TILE_N), dtype=tl.float32)
    for _ in range(tl.cdiv(K, TILE_K)):
        mask_k = offs_k < K
        a = tl.load(a_ptrs, mask_m[:, None] & mask_k[None, :])
        b = tl.load(b_ptrs, mask_k[:, None] & mask_n[None, :])
        offs_k += TILE_K
        a_ptrs += TILE_K
        b_ptrs += TILE_K * s_bk
        o += tl.dot(a, b, allow_tf32=False)
    tl.store(O + offs_m[:, None] * s_om + offs_n[None, :], o, mask_m[:, None] & mask_n[None, :])


def _bmm_args(batch, M, N, K, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, M, K, generator=gen, dtype=torch.float64).float().to(device)
    b = torch.randn(batch, K, N, generator=gen, dtype=torch.float64).float().to(device)
    return a, b, torch.full((batch, M, N), float("nan"), device=device)


def _launch_bmm(a, b, o, tile=32, **kw):
    batch, M, K = a.shape
    N = b.shape[2]
    grid = ((M + tile - 1) // tile, (N + tile - 1) // tile, batch)
    args = (a, b, o, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), o.stride(0), o.stride(1))
    return fma_bmm_kernel, args, dict(TILE_M=tile, TILE_N=tile, TILE_K=tile, num_stages=2, **kw), grid


def test_fma_bmm_interpreter():
    a, b, o = _bmm_args(3, 17, 24, 40)
    kernel, args, kw, grid = _launch_bmm(a, b, o)
    kernel[grid](*args, **kw)
    torch.testing.assert_close(o.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-4)


def test_fma_bmm_prefetches_and_writes_out_its_k_loop(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a, b, o = _bmm_args(3, 17, 24, 40)
    kernel, args, kw, grid = _launch_bmm(a, b, o)
    compiled = _built(kernel, *args, **kw, grid=grid)
    stats = next(p.stats for p in compiled.trace.passes if p.name == "prefetch_fma_dot_loads")
    assert stats == {"prefetched_loads": 2}
    ptx = compiled.asm["ptx"]
    assert ptx.count("fma.rn.f32") == 32 * 32 * 32 // 128  # a thread's 8 outputs times K, no loop around them
    one = _built(kernel, *args, **dict(kw, num_stages=1), grid=grid)
    assert not next(p.stats for p in one.trace.passes if p.name == "prefetch_fma_dot_loads")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(3, 17, 24, 40), (2, 64, 96, 130), (1, 5, 7, 1)])
@pytest.mark.parametrize("stages", [1, 2, 3])
def test_fma_bmm_gpu(shape, stages):
    a, b, o = _bmm_args(*shape, device="cuda")
    kernel, args, kw, grid = _launch_bmm(a, b, o)
    kw["num_stages"] = stages
    kernel[grid](*args, **kw)
    torch.testing.assert_close(o.double().cpu(), a.double().cpu() @ b.double().cpu(), rtol=1e-5, atol=1e-4)


# --- a state carried through a loop as a dot's accumulator stays in the dot's layout, converted for its store ----
# (fla's chunk_fwd_kernel_h: `store(h); h *= decay; h = dot(k, v, h)`: the carry took the store's layout and each
# iteration converted it into the accumulator's and back; Triton converts once, for the store)

@kl.jit
def decayed_state_kernel(Kt, V, G, H, NT, BK: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr):
    o_k, o_v, o_t = tl.arange(0, BK), tl.arange(0, BV), tl.arange(0, BT)
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    for i_t in range(NT):
        tl.store(H + i_t * BK * BV + o_k[:, None] * BV + o_v[None, :], b_h)
        b_k = tl.load(Kt + o_k[:, None] * (NT * BT) + i_t * BT + o_t[None, :])
        b_v = tl.load(V + (i_t * BT + o_t[:, None]) * BV + o_v[None, :])
        b_h *= tl.exp(tl.load(G + i_t))
        b_h = tl.dot(b_k, b_v, b_h)
    tl.store(H + NT * BK * BV + o_k[:, None] * BV + o_v[None, :], b_h)


def _state_args(NT, BK, BV, BT, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    kt = torch.randn(BK, NT * BT, generator=gen, dtype=torch.float64).half().to(device)
    v = torch.randn(NT * BT, BV, generator=gen, dtype=torch.float64).half().to(device)
    g = (-torch.rand(NT, generator=gen, dtype=torch.float64)).float().to(device)
    return kt, v, g, torch.full((NT + 1, BK, BV), float("nan"), device=device)


def _check_state(kt, v, g, h, NT, BT):
    kt, v, g = kt.double().cpu(), v.double().cpu(), g.double().cpu()
    want, state = [], torch.zeros(kt.shape[0], v.shape[1], dtype=torch.float64)
    for t in range(NT):
        want.append(state.clone())
        state = state * g[t].exp() + kt[:, t * BT:(t + 1) * BT] @ v[t * BT:(t + 1) * BT]
    want.append(state)
    torch.testing.assert_close(h.double().cpu(), torch.stack(want), rtol=1e-3, atol=1e-3)


def test_decayed_state_interpreter():
    kt, v, g, h = _state_args(3, 32, 32, 64)
    decayed_state_kernel[(1,)](kt, v, g, h, 3, BK=32, BV=32, BT=64)
    _check_state(kt, v, g, h, 3, 64)


def test_decayed_state_stays_in_the_accumulator_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    kt, v, g, h = _state_args(3, 32, 32, 64)
    gpu = _built(decayed_state_kernel, kt, v, g, h, 3, BK=32, BV=32, BT=64, num_warps=1, grid=(1,)).asm["gpu"]
    loop = gpu[gpu.index("scf.for"):gpu.index("scf.yield")]
    state_converts = [ln for ln in loop.splitlines() if "ttg.convert_layout" in ln and "32x32xf32" in ln]
    assert len(state_converts) == 1, state_converts  # for the store only


@pytest.mark.gpu
@pytest.mark.parametrize("nw", [1, 4])
def test_decayed_state_gpu(nw):
    for seed in range(2):
        kt, v, g, h = _state_args(4, 32, 32, 64, "cuda", seed)
        decayed_state_kernel[(1,)](kt, v, g, h, 4, BK=32, BV=32, BT=64, num_warps=nw)
        _check_state(kt, v, g, h, 4, 64)


# --- fp8 quantization as Triton builds it (torchao's blockwise weight quant: 1360 SASS to Triton's 904) -------
# two values a `cvt.rn.satfinite.e4m3x2.f32`; abs.f32 folded into the max; the fp8 tile stored in the layout it
# was computed in (4 bytes a thread, whole sectors) instead of through 18 KB of shared memory for 16-byte stores

@kl.jit
def fp8_block_quant_kernel(X, Y, S, M, N, BLOCK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs_n = pid_n * BLOCK + tl.arange(0, BLOCK)
    offs = offs_m[:, None] * N + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(X + offs, mask=mask).to(tl.float32)
    s = tl.max(tl.abs(x)) / 448.0
    tl.store(Y + offs, (x / s).to(Y.dtype.element_ty), mask=mask)
    tl.store(S + pid_m * tl.cdiv(N, BLOCK) + pid_n, s)


def _quant_args(M, N, BLOCK, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(M, N, generator=gen, dtype=torch.float64) * 3).float()
    x[0, :3] = torch.tensor([1e-30, -0.0, 7.5])
    y = torch.full((M, N), float("nan")).to(torch.float8_e4m3fn)
    s = torch.full((-(-M // BLOCK), -(-N // BLOCK)), float("nan"))
    return x.to(device), y.to(device), s.to(device)


def _check_quant(x, y, s, BLOCK):
    x = x.cpu().double()
    M, N = x.shape
    want_s = torch.zeros(s.shape, dtype=torch.float64)
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            want_s[i, j] = x[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK].abs().max() / 448.0
    torch.testing.assert_close(s.cpu().double(), want_s, rtol=1e-6, atol=0)
    scale = want_s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:M, :N]
    want = (x / scale).float().to(torch.float8_e4m3fn).double()
    # div.full.f32 (2 ulp) may round a quotient next to an fp8 rounding boundary the other way: one fp8 step
    torch.testing.assert_close(y.cpu().double(), want, rtol=0.13, atol=2.0 ** -9)


def test_fp8_quant_interpreter():
    x, y, s = _quant_args(70, 130, 64)
    fp8_block_quant_kernel[(2, 3)](x, y, s, 70, 130, BLOCK=64)
    _check_quant(x, y, s, 64)


def test_fp8_quant_pairs_its_conversions_and_stores_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x, y, s = _quant_args(256, 256, 128)
    compiled = _built(fp8_block_quant_kernel, x, y, s, 256, 256, BLOCK=128, grid=(2, 2))
    ptx, gpu = compiled.asm["ptx"], compiled.asm["gpu"]
    assert ptx.count("cvt.rn.satfinite.e4m3x2.f32") == 128 * 128 // 128 // 2  # a thread's 128 values, two a cvt
    assert "abs.f32" in ptx and "2147483647" not in ptx
    assert "ttg.convert_layout" not in gpu, gpu
    # the load takes the fp8 store's run (KERNELLAB_STORE_RUN, on by default) or the store keeps the values' layout
    layouts = next(p.stats for p in compiled.trace.passes if p.name == "assign_layouts")
    stats = next(p.stats for p in compiled.trace.passes if p.name == "store_in_value_layout")
    assert layouts.get("loads_to_store_run") == 1 or stats == {"stores_in_value_layout": 1}, (layouts, stats)


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,BLOCK", [(70, 130, 64), (256, 384, 128)])
def test_fp8_quant_gpu(M, N, BLOCK):
    for seed in range(2):
        x, y, s = _quant_args(M, N, BLOCK, "cuda", seed)
        fp8_block_quant_kernel[(-(-M // BLOCK), -(-N // BLOCK))](x, y, s, M, N, BLOCK=BLOCK)
        _check_quant(x, y, s, BLOCK)


# --- a scan along a dimension the layout repeats over: one barrier (fla's chunk_local_cumsum_vector: 8 to 1) ---

@kl.jit
def column_cumsum_kernel(S, O, T, BT: tl.constexpr, BS: tl.constexpr, REVERSE: tl.constexpr):
    o_t = tl.program_id(0) * BT + tl.arange(0, BT)
    o_s = tl.arange(0, BS)
    m = (o_t[:, None] < T) & (o_s[None, :] < BS)
    b_s = tl.load(S + o_t[:, None] * BS + o_s[None, :], mask=m, other=0.0)
    tl.store(O + o_t[:, None] * BS + o_s[None, :], tl.cumsum(b_s, axis=0, reverse=REVERSE) * 0.5, mask=m)


def _cumsum_args(T, BS, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(T, BS, generator=gen, dtype=torch.float64).float().to(device)
    return s, torch.full((T, BS), float("nan"), device=device)


def _check_cumsum(s, o, BT, reverse):
    sd = s.double().cpu()
    want = torch.cat([(c.flip(0).cumsum(0).flip(0) if reverse else c.cumsum(0)) for c in sd.split(BT)]) * 0.5
    torch.testing.assert_close(o.double().cpu(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
def test_column_cumsum_interpreter(reverse):
    s, o = _cumsum_args(100, 32)
    column_cumsum_kernel[(2,)](s, o, 100, BT=64, BS=32, REVERSE=reverse, num_warps=2)
    _check_cumsum(s, o, 64, reverse)


def test_column_cumsum_has_one_barrier(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    s, o = _cumsum_args(100, 32)
    ptx = _built(column_cumsum_kernel, s, o, 100, BT=64, BS=32, REVERSE=False, num_warps=2, grid=(2,)).asm["ptx"]
    assert ptx.count("bar.sync") == 1, ptx.count("bar.sync")


@pytest.mark.gpu
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("BT,nw", [(64, 2), (64, 4), (128, 8), (32, 1)])
def test_column_cumsum_gpu(reverse, BT, nw):
    s, o = _cumsum_args(300, 32, "cuda")
    column_cumsum_kernel[(-(-300 // BT),)](s, o, 300, BT=BT, BS=32, REVERSE=reverse, num_warps=nw)
    _check_cumsum(s, o, BT, reverse)


# --- fp8 dequantization: two bytes a cvt.rn.f16x2.{e4m3x2,e5m2x2} (torchao's weight dequant: 840 SASS -> 520,
# Triton's 616) ---------------------------------------------------------------------------------------------

@kl.jit
def fp8_dequant_kernel(X, S, Y, M, N, BLOCK: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    offs = offs_m[:, None] * N + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    s = tl.load(S + tl.program_id(0) * tl.cdiv(N, BLOCK) + tl.program_id(1))
    tl.store(Y + offs, tl.load(X + offs, mask=mask).to(tl.float32) * s, mask=mask)


def _dequant_args(M, N, BLOCK, fp8, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(M, N, generator=gen, dtype=torch.float64) * 40).float().to(fp8)
    s = torch.rand(-(-M // BLOCK), -(-N // BLOCK), generator=gen, dtype=torch.float64).float() + 0.5
    return x.to(device), s.to(device), torch.full((M, N), float("nan"), device=device)


def _check_dequant(x, s, y, BLOCK):
    M, N = x.shape
    scale = s.cpu().double().repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:M, :N]
    torch.testing.assert_close(y.cpu().double(), x.cpu().double() * scale, rtol=1e-6, atol=0)


FP8_TYPES = [torch.float8_e4m3fn, torch.float8_e5m2]


@pytest.mark.parametrize("fp8", FP8_TYPES)
def test_fp8_dequant_interpreter(fp8):
    x, s, y = _dequant_args(70, 130, 64, fp8)
    fp8_dequant_kernel[(2, 3)](x, s, y, 70, 130, BLOCK=64)
    _check_dequant(x, s, y, 64)


@pytest.mark.parametrize("fp8", FP8_TYPES)
def test_fp8_dequant_converts_two_bytes_at_once(fp8, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x, s, y = _dequant_args(256, 256, 128, fp8)
    ptx = _built(fp8_dequant_kernel, x, s, y, 256, 256, BLOCK=128, grid=(2, 2)).asm["ptx"]
    kind = "e4m3x2" if fp8 == torch.float8_e4m3fn else "e5m2x2"
    assert ptx.count(f"cvt.rn.f16x2.{kind}") == 128 * 128 // 128 // 2


@pytest.mark.gpu
@pytest.mark.parametrize("fp8", FP8_TYPES)
@pytest.mark.parametrize("M,N,BLOCK", [(70, 130, 64), (256, 384, 128)])
def test_fp8_dequant_gpu(fp8, M, N, BLOCK):
    x, s, y = _dequant_args(M, N, BLOCK, fp8, "cuda")
    fp8_dequant_kernel[(-(-M // BLOCK), -(-N // BLOCK))](x, s, y, M, N, BLOCK=BLOCK)
    _check_dequant(x, s, y, BLOCK)


# --- interleaved rotary: the split halves take a blocked layout, so the cos/sin rows broadcast into their math
# are converted as rows, not as broadcast tiles (flash_attn's rotary, interleaved: 6 barriers -> 4, Triton 3) ---

@kl.jit
def interleaved_rotary_kernel(X, Cos, Sin, Out, seqlen, nheads, BLOCK_H: tl.constexpr, BLOCK_M: tl.constexpr,
                              HALF: tl.constexpr):
    rh = tl.arange(0, BLOCK_H)
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.arange(0, 2 * HALF)
    rk_half = tl.arange(0, HALF)
    cs = rm[:, None] * HALF + rk_half[None, :]
    m_cs = rm[:, None] < seqlen
    cos = tl.load(Cos + cs, mask=m_cs, other=1.0)
    sin = tl.load(Sin + cs, mask=m_cs, other=0.0)
    offs = rh[:, None, None] * (2 * HALF) + rm[None, :, None] * (nheads * 2 * HALF) + rk[None, None, :]
    mask = (rh[:, None, None] < nheads) & (rm[None, :, None] < seqlen)
    x = tl.load(X + offs, mask=mask, other=0.0)
    x0, x1 = tl.split(tl.reshape(x, [BLOCK_H, BLOCK_M, HALF, 2]))
    o = tl.reshape(tl.join(x0 * cos - x1 * sin, x0 * sin + x1 * cos), [BLOCK_H, BLOCK_M, 2 * HALF])
    tl.store(Out + offs, o, mask=mask)


def _rotary_args(seqlen, nheads, half, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(seqlen, nheads, 2 * half, generator=gen, dtype=torch.float64).float()
    ang = torch.randn(seqlen, half, generator=gen, dtype=torch.float64) * 3
    out = torch.full_like(x, float("nan"))
    return x.to(device), ang.cos().float().to(device), ang.sin().float().to(device), out.to(device)


def _check_rotary(x, cos, sin, out):
    x, cos, sin = x.double().cpu(), cos.double().cpu()[:, None], sin.double().cpu()[:, None]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    want = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).reshape(x.shape)
    torch.testing.assert_close(out.double().cpu(), want, rtol=1e-5, atol=1e-5)


def test_interleaved_rotary_interpreter():
    x, cos, sin, out = _rotary_args(13, 2, 32)
    interleaved_rotary_kernel[(2,)](x, cos, sin, out, 13, 2, BLOCK_H=2, BLOCK_M=8, HALF=32)
    _check_rotary(x, cos, sin, out)


def test_interleaved_rotary_converts_rows_only(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x, cos, sin, out = _rotary_args(13, 2, 32)
    gpu = _built(interleaved_rotary_kernel, x, cos, sin, out, 13, 2, BLOCK_H=2, BLOCK_M=8, HALF=32,
                 grid=(2,)).asm["gpu"]
    converted = [ln.split(": ")[-1] for ln in gpu.splitlines() if "ttg.convert_layout" in ln]
    assert len(converted) == 2 and all(t.startswith("tensor<8x32xf32") for t in converted), converted  # cos, sin


@pytest.mark.gpu
@pytest.mark.parametrize("seqlen,nheads", [(13, 2), (64, 3)])
def test_interleaved_rotary_gpu(seqlen, nheads):
    x, cos, sin, out = _rotary_args(seqlen, nheads, 32, "cuda")
    interleaved_rotary_kernel[(-(-seqlen // 8),)](x, cos, sin, out, seqlen, nheads, BLOCK_H=4, BLOCK_M=8, HALF=32)
    _check_rotary(x, cos, sin, out)


# --- `row[:, None] - tile`: the loaded tile's layout, the row converted (fla's chunk_gla_fwd_A intra-chunk kernel:
# 728 SASS -> 496, Triton 432; before, the tile went into the broadcast's layout and the result back) --------

@kl.jit
def gated_pair_kernel(Q, G, K, GK, GN, QG, KG, T, BC: tl.constexpr, BK: tl.constexpr):
    o_i = tl.arange(0, BC)
    o_k = tl.arange(0, BK)
    gn = tl.load(GN + o_k)
    rows = o_i[:, None] * BK + o_k[None, :]  # [BC, BK], row-major
    cols = o_k[:, None] + o_i[None, :] * BK  # [BK, BC], read down the columns
    m = (o_i[None, :] < T)
    qg = tl.load(Q + rows, mask=o_i[:, None] < T, other=0.0)
    qg = qg * tl.exp2(tl.load(G + rows, mask=o_i[:, None] < T, other=0.0) - gn[None, :])
    kg = tl.load(K + cols, mask=m, other=0.0) * tl.exp2(gn[:, None] - tl.load(GK + cols, mask=m, other=0.0))
    tl.store(QG + rows, qg, mask=o_i[:, None] < T)
    tl.store(KG + cols, kg, mask=m)


def _gated_args(BC, BK, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, g, k, gk = (torch.randn(BC, BK, generator=gen, dtype=torch.float64).float().to(device) for _ in range(4))
    gn = torch.randn(BK, generator=gen, dtype=torch.float64).float().to(device)
    return q, g, k, gk, gn, torch.full_like(q, float("nan")), torch.full_like(q, float("nan"))


def _check_gated(q, g, k, gk, gn, qg, kg, T):
    q, g, k, gk, gn = (t.double().cpu() for t in (q, g, k, gk, gn))
    want_q = q * torch.exp2(g - gn[None, :])
    want_k = k * torch.exp2(gn[None, :] - gk)  # KG[i, k] = K[i, k] * 2^(gn[k] - GK[i, k]) in memory order
    torch.testing.assert_close(qg.double().cpu()[:T], want_q[:T], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(kg.double().cpu()[:T], want_k[:T], rtol=1e-5, atol=1e-6)


def test_gated_pair_interpreter():
    args = _gated_args(16, 32)
    gated_pair_kernel[(1,)](*args, 13, BC=16, BK=32, num_warps=1)
    _check_gated(*args, 13)


def test_gated_pair_converts_no_tile(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    args = _gated_args(16, 32)
    gpu = _built(gated_pair_kernel, *args, 13, BC=16, BK=32, num_warps=1, grid=(1,)).asm["gpu"]
    converted = [ln.split(": ")[-1] for ln in gpu.splitlines() if "ttg.convert_layout" in ln]
    tiles = [t for t in converted if len(t[len("tensor<"):].split(",")[0].split("x")) > 2]  # 2-D shapes
    assert not tiles, converted


@pytest.mark.gpu
@pytest.mark.parametrize("nw", [1, 4])
def test_gated_pair_gpu(nw):
    args = _gated_args(16, 32, "cuda")
    gated_pair_kernel[(1,)](*args, 13, BC=16, BK=32, num_warps=nw)
    _check_gated(*args, 13)
