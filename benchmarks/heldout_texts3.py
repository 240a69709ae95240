"""A third set of held-out kernel texts (issue 14), written the ways other users write them, on workloads neither
heldout_texts.py, heldout_texts2.py nor tests/idioms.py cover: residual + dropout + layer norm fused, an online
log-softmax over long rows (several rows a program, exp2 domain), log-softmax backward, argmin/argmax with ties,
column cumsum and a linear recurrence through tl.associative_scan, a reversed tl.cumprod, int8 and fp16 matmuls with
row scales / bias + GELU(tanh) epilogues, split-K with atomics, a batched matmul through a 3-D tl.dot, a block-pointer
matmul over a transposed B (order (0, 1)), causal attention masked with tl.where and -inf, interleaved rotary through
stride-2 loads, Welford in a loop combined with a tuple tl.reduce, tl.topk and tl.sort, an embedding bag over CSR
offsets (a data-dependent loop), a causal depthwise conv1d, histograms (tl.histogram and scattered atomics), fp8
quantization with tl.clamp, a tl.swizzle2d-ordered matmul over a 2-D grid, and a bisection search in a while loop
whose trip count depends on the data.

    python benchmarks/compile_time.py --texts benchmarks/heldout_texts3.py --dump DIR [case ...]   # CPU, both sides
    python benchmarks/idioms.py --texts benchmarks/heldout_texts3.py [case ...]                    # GPU, timed

CASE_DEFS, checked by `check(name, device=...)` against float64 references, and the glue are heldout_common.py's.
The module imports `triton`: kernellab.compat serves it on kernellab's side."""
import os
import sys

import triton
import triton.language as tl
from triton.language.extra import libdevice

if os.path.dirname(os.path.realpath(__file__)) not in sys.path:  # heldout_common beside it (through links too)
    sys.path.append(os.path.dirname(os.path.realpath(__file__)))
from heldout_common import Case, cdiv, maker, screen  # noqa: E402
from heldout_common import mm_flop as _mm_flop  # noqa: E402
from heldout_common import nbytes as _nbytes  # noqa: E402
from heldout_common import split as _split  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------
# residual add + dropout + layer norm, one row per program, the whole row in one block; the new residual stream is
# written too (bf16), the dropout keyed on the element's flat offset


@triton.jit
def add_dropout_layernorm(X, R, W, B, H_OUT, Y, N, stride, p, seed, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    base = row * stride
    x = tl.load(X + base + offs, mask=mask, other=0.).to(tl.float32)
    r = tl.load(R + base + offs, mask=mask, other=0.).to(tl.float32)
    keep = tl.rand(seed, base + offs) > p
    h = tl.where(keep, x / (1 - p), 0.) + r
    tl.store(H_OUT + base + offs, h.to(H_OUT.dtype.element_ty), mask=mask)
    mean = tl.sum(h, axis=0) / N
    diff = tl.where(mask, h - mean, 0.)
    var = tl.sum(diff * diff, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    w = tl.load(W + offs, mask=mask)
    b = tl.load(B + offs, mask=mask)
    tl.store(Y + base + offs, (diff * rstd * w + b).to(Y.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------------------------------------------
# online log-softmax over long rows (a vocabulary), ROWS rows a program, in the exp2 domain: a running max and sum
# per row, then a second sweep writing x - lse; the row's lse (natural log) stored for the backward


@triton.jit
def log_softmax_long(X, Y, LSE, M, N, sx, sy, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = rows < M
    xrow = X + rows.to(tl.int64)[:, None] * sx
    m = tl.full([ROWS], -float("inf"), dtype=tl.float32)
    l = tl.zeros([ROWS], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        msk = rmask[:, None] & (cols[None, :] < N)
        x = tl.load(xrow + cols[None, :], mask=msk, other=-float("inf")).to(tl.float32) * 1.4426950408889634
        m_new = tl.maximum(m, tl.max(x, axis=1))
        m_safe = tl.where(m_new == -float("inf"), 0., m_new)
        l = l * tl.exp2(m - m_safe) + tl.sum(tl.exp2(x - m_safe[:, None]), axis=1)
        m = m_new
    lse2 = m + tl.log2(l)
    tl.store(LSE + rows, lse2 * 0.6931471805599453, mask=rmask)
    yrow = Y + rows.to(tl.int64)[:, None] * sy
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        msk = rmask[:, None] & (cols[None, :] < N)
        x = tl.load(xrow + cols[None, :], mask=msk, other=0.).to(tl.float32)
        y = x - lse2[:, None] * 0.6931471805599453
        tl.store(yrow + cols[None, :], y.to(Y.dtype.element_ty), mask=msk)


# ---------------------------------------------------------------------------------------------------------------
# log-softmax backward: dx = dy - exp(y) * sum(dy), a [BLOCK_M, BLOCK_N] tile of whole rows a program


@triton.jit
def log_softmax_bwd(Y, DY, DX, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    rn = tl.arange(0, BLOCK_N)[None, :]
    mask = (rm < M) & (rn < N)
    off = rm * stride + rn
    y = tl.load(Y + off, mask=mask, other=0.).to(tl.float32)
    dy = tl.load(DY + off, mask=mask, other=0.).to(tl.float32)
    s = tl.sum(dy, axis=1, keep_dims=True)
    dx = dy - tl.exp(y) * s
    tl.store(DX + off, dx.to(DX.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------------------------------------------
# argmin and argmax of rows with many ties (the first index wins), tl.argmin / tl.argmax over a tile of rows


@triton.jit
def argminmax_rows(X, IMIN, IMAX, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    ptrs = X + rows[:, None] * stride + cols[None, :]
    x = tl.load(ptrs, mask=mask, other=float("inf"))
    imin = tl.argmin(x, axis=1, tie_break_left=True)
    x = tl.where(mask, x, -float("inf"))
    imax = tl.argmax(x, axis=1)
    tl.store(IMIN + rows, imin, mask=rows < M)
    tl.store(IMAX + rows, imax, mask=rows < M)


# ---------------------------------------------------------------------------------------------------------------
# cumulative sum down the columns (axis 0) with tl.associative_scan, the column totals carried over row blocks


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def cumsum_cols(X, Y, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    carry = tl.zeros([BLOCK_N], dtype=tl.float32)
    for m0 in range(0, M, BLOCK_M):
        rows = m0 + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & cmask[None, :]
        x = tl.load(X + rows[:, None] * stride + cols[None, :], mask=mask, other=0.)
        c = tl.associative_scan(x, 0, _add) + carry[None, :]
        tl.store(Y + rows[:, None] * stride + cols[None, :], c, mask=mask)
        carry += tl.sum(x, axis=0)


# ---------------------------------------------------------------------------------------------------------------
# a first-order linear recurrence h[t] = a[t] * h[t-1] + b[t] along rows (an SSM / decayed cumsum), chunks scanned
# with tl.associative_scan over (a, b) pairs, the last state carried between chunks


@triton.jit
def _affine(a1, b1, a2, b2):
    return a1 * a2, b1 * a2 + b2


@triton.jit
def linear_recurrence(A, Bx, H, L, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    h0 = 0.0
    idx = tl.arange(0, BLOCK)
    for s in range(0, L, BLOCK):
        t = s + idx
        m = t < L
        a = tl.load(A + row * stride + t, mask=m, other=1.0)
        b = tl.load(Bx + row * stride + t, mask=m, other=0.0)
        pa, pb = tl.associative_scan((a, b), axis=0, combine_fn=_affine)
        h = pa * h0 + pb
        tl.store(H + row * stride + t, h, mask=m)
        h0 = tl.sum(tl.where(idx == BLOCK - 1, h, 0.0), axis=0)


# a reversed cumulative product (discount factors to the end of an episode), whole rows in a tile


@triton.jit
def rev_cumprod(X, Y, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(X + rows[:, None] * stride + cols[None, :], mask=mask, other=1.0)
    y = tl.cumprod(x, axis=1, reverse=True)
    tl.store(Y + rows[:, None] * stride + cols[None, :], y, mask=mask)


# ---------------------------------------------------------------------------------------------------------------
# int8 x int8 -> int32 matmul, B stored [K, N] (row-major, as a user keeps it), per-row scales of A and one scale
# of B read from memory, fp16 out; offsets wrapped with % (the tutorial's way), K masked


@triton.jit
def mm_i8_rowscale(A, B, C, SA, SB, M, N, K, sam, sbk, scm,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = (pid_m * BM + tl.arange(0, BM)) % M
    offs_n = (pid_n * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    a_ptrs = A + offs_m[:, None] * sam + offs_k[None, :]
    b_ptrs = B + offs_k[:, None] * sbk + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        a_ptrs += BK
        b_ptrs += BK * sbk
    sa = tl.load(SA + offs_m)
    sb = tl.load(SB)
    c = acc.to(tl.float32) * sa[:, None] * sb
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    tl.store(C + rm[:, None] * scm + rn[None, :], c.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


# ---------------------------------------------------------------------------------------------------------------
# fp16 matmul + bias + GELU (tanh form through libdevice) -> fp16; a 1-D grid grouped by hand


@triton.jit
def mm_bias_gelu(A, B, BIAS, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP, GROUP)
    pid_m = group_id * GROUP + (pid % group_size)
    pid_n = (pid % width) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(A + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.)
        b = tl.load(B + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.)
        acc += tl.dot(a, b)
    acc += tl.load(BIAS + rn, mask=rn < N, other=0.).to(tl.float32)[None, :]
    inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
    y = 0.5 * acc * (1. + libdevice.tanh(inner))
    tl.store(C + rm[:, None] * scm + rn[None, :] * scn, y.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


# ---------------------------------------------------------------------------------------------------------------
# split-K matmul: grid (tiles, SPLIT_K), each split's partial tile added into a zeroed fp32 C with tl.atomic_add


@triton.jit
def mm_splitk_atomic(A, B, C, M, N, K, sam, sbk, scm,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT_K: tl.constexpr):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_n = tl.cdiv(N, BN)
    pid_m = pid // num_n
    pid_n = pid % num_n
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = pid_k * BK + tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK * SPLIT_K)):
        kk = k * BK * SPLIT_K + rk
        a = tl.load(A + rm[:, None] * sam + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.)
        b = tl.load(B + kk[:, None] * sbk + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.)
        acc += tl.dot(a, b)
    tl.atomic_add(C + rm[:, None] * scm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


# ---------------------------------------------------------------------------------------------------------------
# batched matmul through a 3-D tl.dot: BB batches of [BM, BK] x [BK, BN] a program (many small matrices)


@triton.jit
def bmm_3d_dot(A, B, C, NB, M, N, K, sab, sam, sbb, sbk, scb, scm,
               BB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rb = tl.program_id(0) * BB + tl.arange(0, BB)
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    rn = tl.program_id(2) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    bmask = (rb < NB)[:, None, None]
    acc = tl.zeros((BB, BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rb[:, None, None] * sab + rm[None, :, None] * sam + (k + rk)[None, None, :],
                    mask=bmask & (rm < M)[None, :, None] & ((k + rk) < K)[None, None, :], other=0.)
        b = tl.load(B + rb[:, None, None] * sbb + (k + rk)[None, :, None] * sbk + rn[None, None, :],
                    mask=bmask & ((k + rk) < K)[None, :, None] & (rn < N)[None, None, :], other=0.)
        acc = tl.dot(a, b, acc)
    tl.store(C + rb[:, None, None] * scb + rm[None, :, None] * scm + rn[None, None, :], acc.to(C.dtype.element_ty),
             mask=bmask & (rm < M)[None, :, None] & (rn < N)[None, None, :])


# ---------------------------------------------------------------------------------------------------------------
# block-pointer matmul, B a weight stored [N, K] read as its [K, N] transpose (strides (1, ldb), order (0, 1)),
# boundary checks on every load and the store, bf16 in and out


@triton.jit
def mm_bptr_bt(A, B, C, M, N, K, sam, sbn, scm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_bp = tl.make_block_ptr(A, shape=(M, K), strides=(sam, 1), offsets=(pid_m * BM, 0), block_shape=(BM, BK),
                             order=(1, 0))
    b_bp = tl.make_block_ptr(B, shape=(K, N), strides=(1, sbn), offsets=(0, pid_n * BN), block_shape=(BK, BN),
                             order=(0, 1))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_bp, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_bp, boundary_check=(0, 1), padding_option="zero")
        acc = tl.dot(a, b, acc)
        a_bp = tl.advance(a_bp, (0, BK))
        b_bp = tl.advance(b_bp, (BK, 0))
    c_bp = tl.make_block_ptr(C, shape=(M, N), strides=(scm, 1), offsets=(pid_m * BM, pid_n * BN),
                             block_shape=(BM, BN), order=(1, 0))
    tl.store(c_bp, acc.to(tl.bfloat16), boundary_check=(0, 1))


# ---------------------------------------------------------------------------------------------------------------
# causal attention forward, [B, S, H, D] tensors (flash-attn's layout), pointer arithmetic, the causal and the
# length masks applied in every block with tl.where(..., -inf), the loop running to the diagonal


@triton.jit
def causal_attn(Q, K, V, O, sm_scale, S, H, s_b, s_s, s_h, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = (bh // H) * s_b + (bh % H) * s_h
    offs_m = start_m * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    d = tl.arange(0, D)
    q = tl.load(Q + base + offs_m[:, None] * s_s + d[None, :], mask=offs_m[:, None] < S, other=0.)
    m_i = tl.full([BM], -float("inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    hi = tl.minimum((start_m + 1) * BM, S)
    for start_n in range(0, hi, BN):
        kn = start_n + offs_n
        k = tl.load(K + base + kn[None, :] * s_s + d[:, None], mask=kn[None, :] < S, other=0.)
        qk = tl.dot(q, k) * sm_scale
        qk = tl.where((offs_m[:, None] >= kn[None, :]) & (kn[None, :] < S), qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + base + kn[:, None] * s_s + d[None, :], mask=kn[:, None] < S, other=0.)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(O + base + offs_m[:, None] * s_s + d[None, :], acc.to(O.dtype.element_ty), mask=offs_m[:, None] < S)


# ---------------------------------------------------------------------------------------------------------------
# rotary embedding on interleaved pairs (x[2i], x[2i+1]) read with stride-2 pointers, the angle computed in the
# kernel from the position and an inverse-frequency table; x [T, H, D], a block of heads a program


@triton.jit
def rope_interleaved(X, INV_FREQ, OUT, T, H, sxt, sxh, BH: tl.constexpr, HALF: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1) * BH + tl.arange(0, BH)
    i = tl.arange(0, HALF)
    hm = h[:, None] < H
    src = X + t * sxt + h[:, None] * sxh + 2 * i[None, :]
    xe = tl.load(src, mask=hm, other=0.).to(tl.float32)
    xo = tl.load(src + 1, mask=hm, other=0.).to(tl.float32)
    ang = t.to(tl.float32) * tl.load(INV_FREQ + i)
    c = tl.cos(ang)[None, :]
    s = tl.sin(ang)[None, :]
    dst = OUT + t * sxt + h[:, None] * sxh + 2 * i[None, :]
    tl.store(dst, (xe * c - xo * s).to(OUT.dtype.element_ty), mask=hm)
    tl.store(dst + 1, (xe * s + xo * c).to(OUT.dtype.element_ty), mask=hm)


# ---------------------------------------------------------------------------------------------------------------
# mean and 1/std of rows with Welford's update per lane in a loop, the lanes merged by a tuple tl.reduce


@triton.jit
def _welford_merge(m1, s1, n1, m2, s2, n2):
    n = n1 + n2
    w = tl.where(n == 0, 0., n2 / tl.where(n == 0, 1., n))
    d = m2 - m1
    return m1 + d * w, s1 + s2 + d * d * n1 * w, n


@triton.jit
def welford_rows(X, MEAN, RSTD, N, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    mean = tl.zeros([BLOCK], tl.float32)
    m2 = tl.zeros([BLOCK], tl.float32)
    cnt = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * stride + cols, mask=mask, other=0.).to(tl.float32)
        cnt_new = cnt + mask.to(tl.float32)
        delta = x - mean
        mean = tl.where(mask, mean + delta / cnt_new, mean)
        m2 = tl.where(mask, m2 + delta * (x - mean), m2)
        cnt = cnt_new
    mu, s, n = tl.reduce((mean, m2, cnt), 0, _welford_merge)
    tl.store(MEAN + row, mu)
    tl.store(RSTD + row, 1. / tl.sqrt(s / n + eps))


# ---------------------------------------------------------------------------------------------------------------
# top-k of rows (a router picking experts) with tl.topk, and rows sorted descending with tl.sort


@triton.jit
def topk_rows(X, V, M, N: tl.constexpr, K: tl.constexpr, BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    x = tl.load(X + rows[:, None] * N + tl.arange(0, N)[None, :], mask=rows[:, None] < M, other=0.)
    top = tl.topk(x, K, dim=1)
    tl.store(V + rows[:, None] * K + tl.arange(0, K)[None, :], top, mask=rows[:, None] < M)


@triton.jit
def sort_rows(X, Y, stride, N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, N)
    x = tl.load(X + row * stride + cols)
    tl.store(Y + row * stride + cols, tl.sort(x, descending=True))


# ---------------------------------------------------------------------------------------------------------------
# embedding bag (mean) over CSR offsets: a bag's loop runs from offsets[bag] to offsets[bag + 1] (a trip count read
# from memory), one index loaded a step; empty bags give 0


@triton.jit
def embedding_bag_mean(IDX, OFFS, W, OUT, D, BLOCK_D: tl.constexpr):
    bag = tl.program_id(0)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    dm = d < D
    start = tl.load(OFFS + bag)
    end = tl.load(OFFS + bag + 1)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for i in range(start, end):
        tok = tl.load(IDX + i).to(tl.int64)
        acc += tl.load(W + tok * D + d, mask=dm, other=0.).to(tl.float32)
    cnt = (end - start).to(tl.float32)
    out = tl.where(cnt > 0, acc / tl.maximum(cnt, 1.), 0.)
    tl.store(OUT + bag.to(tl.int64) * D + d, out.to(OUT.dtype.element_ty), mask=dm)


# ---------------------------------------------------------------------------------------------------------------
# causal depthwise conv1d + bias + SiLU over x [B, D, L] (mamba's short conv), taps unrolled with tl.static_range


@triton.jit
def causal_conv1d_silu(X, W, BIAS, Y, D, L, sxb, sxd, KW: tl.constexpr, BLOCK_D: tl.constexpr,
                       BLOCK_L: tl.constexpr):
    ls = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    ds = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    b = tl.program_id(2)
    dmask = ds < D
    acc = tl.zeros([BLOCK_D, BLOCK_L], tl.float32) + tl.load(BIAS + ds, mask=dmask, other=0.)[:, None]
    for k in tl.static_range(KW):
        pos = ls - (KW - 1 - k)
        m = dmask[:, None] & (pos[None, :] >= 0) & (pos[None, :] < L)
        x = tl.load(X + b * sxb + ds[:, None] * sxd + pos[None, :], mask=m, other=0.)
        w = tl.load(W + ds * KW + k, mask=dmask, other=0.)
        acc += x.to(tl.float32) * w[:, None]
    y = acc * tl.sigmoid(acc)
    tl.store(Y + b * sxb + ds[:, None] * sxd + ls[None, :], y.to(Y.dtype.element_ty),
             mask=dmask[:, None] & (ls[None, :] < L))


# ---------------------------------------------------------------------------------------------------------------
# histograms: int32 values in [0, NUM_BINS) counted per block with tl.histogram, then added to the global counts;
# and float values binned by hand, one scattered atomic add per element


@triton.jit
def histogram_blocks(X, HIST, n, NUM_BINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(X + offs, mask=m, other=0)
    h = tl.histogram(v, NUM_BINS, mask=m)
    tl.atomic_add(HIST + tl.arange(0, NUM_BINS), h)


@triton.jit
def histogram_atomic(X, HIST, n, lo, inv_width, NUM_BINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m, other=0.)
    b = ((x - lo) * inv_width).to(tl.int32)
    b = tl.minimum(tl.maximum(b, 0), NUM_BINS - 1)
    tl.atomic_add(HIST + b, 1, mask=m)


# ---------------------------------------------------------------------------------------------------------------
# fp32 -> fp8 e4m3 with a per-tensor scale read from memory, saturated with tl.clamp; the block's absmax folded into
# a global amax with tl.atomic_max for the next step's scale


@triton.jit
def quant_fp8(X, Y, SCALE, AMAX, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m, other=0.)
    scale = tl.load(SCALE)
    y = tl.clamp(x * scale, -448.0, 448.0)
    tl.store(Y + offs, y.to(tl.float8e4nv), mask=m)
    tl.atomic_max(AMAX, tl.max(tl.abs(x), axis=0))


# ---------------------------------------------------------------------------------------------------------------
# matmul over a 2-D grid reordered with tl.swizzle2d, bf16 in, fp32 out, EVEN_K (K a multiple of BK: no K masks),
# offsets hinted with multiple_of / max_contiguous


@triton.jit
def mm_swizzle2d_grid(A, B, C, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                      G: tl.constexpr):
    pid_m, pid_n = tl.swizzle2d(tl.program_id(0), tl.program_id(1), tl.num_programs(0), tl.num_programs(1), G)
    rm = tl.max_contiguous(tl.multiple_of((pid_m * BM + tl.arange(0, BM)) % M, BM), BM)
    rn = tl.max_contiguous(tl.multiple_of((pid_n * BN + tl.arange(0, BN)) % N, BN), BN)
    rk = tl.arange(0, BK)
    a_ptr = A + rm[:, None] * sam + rk[None, :]
    b_ptr = B + rk[:, None] * sbk + rn[None, :]
    acc = tl.zeros((BM, BN), tl.float32)
    for _ in range(K // BK):
        acc += tl.dot(tl.load(a_ptr), tl.load(b_ptr))
        a_ptr += BK
        b_ptr += BK * sbk
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    tl.store(C + cm[:, None] * scm + cn[None, :], acc, mask=(cm[:, None] < M) & (cn[None, :] < N))


# ---------------------------------------------------------------------------------------------------------------
# searchsorted (left) by bisection: every lane halves its own interval; the while loop runs until the widest
# interval of the block is empty (a trip count that depends on the data and the block)


@triton.jit
def searchsorted_left(SORTED, Q, OUT, n_sorted, n_q, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n_q
    q = tl.load(Q + offs, mask=m, other=0.)
    lo = tl.zeros([BLOCK], tl.int32)
    hi = tl.zeros([BLOCK], tl.int32) + n_sorted
    hi = tl.where(m, hi, 0)
    while tl.max(hi - lo, axis=0) > 0:
        active = lo < hi
        mid = (lo + hi) // 2
        v = tl.load(SORTED + mid, mask=active, other=0.)
        right = active & (v < q)
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(active & (v >= q), mid, hi)
    tl.store(OUT + offs, lo, mask=m)


# ===============================================================================================================
# launchers, inputs, references


# residual + dropout + layer norm ---------------------------------------------------------------------------------


def _adl_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.bfloat16), r=mk((M, N), torch.bfloat16), w=mk((N,), torch.float32, "unit"),
                b=mk((N,), torch.float32), h=mk((M, N), torch.bfloat16, "out"), y=mk((M, N), torch.bfloat16, "out"))


def _adl_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    add_dropout_layernorm[(M,)](x["x"], x["r"], x["w"], x["b"], x["h"], x["y"], N, x["x"].stride(0), 0.2, 4321,
                                1e-5, BLOCK_N=triton.next_power_of_2(N), **opts)


def _adl_check(x, ref):
    import torch

    xx, r, h = x["x"].double(), x["r"].double(), x["h"].double()
    kept = torch.isclose(h, xx / 0.8 + r, rtol=2e-2, atol=2e-2)
    dropped = torch.isclose(h, r, rtol=1e-2, atol=1e-2)
    assert bool((kept | dropped).all()), "a residual element neither kept nor dropped"
    rate = (kept & ~dropped).double().sum() / (~(kept & dropped)).double().sum()
    assert abs(rate.item() - 0.8) < 0.06, rate
    y = torch.nn.functional.layer_norm(h, (h.shape[1],), x["w"].double(), x["b"].double(), 1e-5)
    err = ((x["y"].double() - y).norm() / y.norm()).item()
    assert err < 2e-2, err


# online log-softmax ----------------------------------------------------------------------------------------------


def _lsm_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.bfloat16), y=mk((M, N), torch.float32, "out"), lse=mk((M,), torch.float32, "out"))


def _lsm_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    log_softmax_long[(cdiv(M, meta["ROWS"]),)](x["x"], x["y"], x["lse"], M, N, x["x"].stride(0), x["y"].stride(0),
                                                **meta, **opts)


def _lsm_ref(x):
    import torch

    xx = x["x"].double()
    return {"y": torch.log_softmax(xx, -1), "lse": torch.logsumexp(xx, -1)}


# log-softmax backward -------------------------------------------------------------------------------------------


def _lsmb_inputs(size, mk):
    import torch

    M, N = size
    return dict(y=mk((M, N), torch.float16, "logp"), dy=mk((M, N), torch.float16),
                dx=mk((M, N), torch.float16, "out"))


def _lsmb_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["y"].shape
    log_softmax_bwd[(cdiv(M, meta["BLOCK_M"]),)](x["y"], x["dy"], x["dx"], M, N, x["y"].stride(0),
                                                  BLOCK_N=triton.next_power_of_2(N), **meta, **opts)


def _lsmb_ref(x):
    y, dy = x["y"].double(), x["dy"].double()
    return {"dx": dy - y.exp() * dy.sum(-1, keepdim=True)}


# argmin / argmax ---------------------------------------------------------------------------------------------------


def _amm_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.float32, "ties"), imin=mk((M,), torch.int32, "out"),
                imax=mk((M,), torch.int32, "out"))


def _amm_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    argminmax_rows[(cdiv(M, meta["BLOCK_M"]),)](x["x"], x["imin"], x["imax"], M, N, x["x"].stride(0),
                                                 BLOCK_N=triton.next_power_of_2(N), **meta, **opts)


def _amm_ref(x):
    import torch

    xx = x["x"].double()
    # the first index of the extreme: torch's argmin/argmax pick the first occurrence
    first = torch.arange(xx.shape[1], 0, -1, dtype=torch.float64)
    return {"imin": ((xx == xx.min(1, keepdim=True).values) * first).argmax(1).to(torch.int32),
            "imax": ((xx == xx.max(1, keepdim=True).values) * first).argmax(1).to(torch.int32)}


# scans -------------------------------------------------------------------------------------------------------------


def _cumcols_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.float32), y=mk((M, N), torch.float32, "out"))


def _cumcols_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    cumsum_cols[(cdiv(N, meta["BLOCK_N"]),)](x["x"], x["y"], M, N, x["x"].stride(0), **meta, **opts)


def _cumcols_ref(x):
    return {"y": x["x"].double().cumsum(0)}


def _linrec_inputs(size, mk):
    import torch

    M, L = size
    return dict(a=mk((M, L), torch.float32, "decay"), b=mk((M, L), torch.float32), h=mk((M, L), torch.float32, "out"))


def _linrec_launch(x, cfg):
    meta, opts = _split(cfg)
    M, L = x["a"].shape
    linear_recurrence[(M,)](x["a"], x["b"], x["h"], L, x["a"].stride(0), **meta, **opts)


def _linrec_ref(x):
    import torch

    a, b = x["a"].double(), x["b"].double()
    h = torch.empty_like(a)
    state = torch.zeros(a.shape[0], dtype=torch.float64)
    for t in range(a.shape[1]):
        state = a[:, t] * state + b[:, t]
        h[:, t] = state
    return {"h": h}


def _revcp_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.float32, "near1"), y=mk((M, N), torch.float32, "out"))


def _revcp_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    rev_cumprod[(cdiv(M, meta["BLOCK_M"]),)](x["x"], x["y"], M, N, x["x"].stride(0),
                                             BLOCK_N=triton.next_power_of_2(N), **meta, **opts)


def _revcp_ref(x):
    return {"y": x["x"].double().flip(1).cumprod(1).flip(1)}


# int8 matmul with row scales ------------------------------------------------------------------------------------


def _mmi8r_inputs(size, mk):
    import torch

    M, N, K = size
    return dict(a=mk((M, K), torch.int8), b=mk((K, N), torch.int8), sa=mk((M,), torch.float32, "scale"),
                sb=mk((1,), torch.float32, "scale"), c=mk((M, N), torch.float16, "out"))


def _mmi8r_launch(x, cfg):
    meta, opts = _split(cfg)
    a, b, c = x["a"], x["b"], x["c"]
    M, K = a.shape
    N = b.shape[1]
    mm_i8_rowscale[(cdiv(M, meta["BM"]), cdiv(N, meta["BN"]))](a, b, c, x["sa"], x["sb"], M, N, K, a.stride(0),
                                                                b.stride(0), c.stride(0), **meta, **opts)


def _mmi8r_ref(x):
    return {"c": (x["a"].double() @ x["b"].double()) * x["sa"].double()[:, None] * x["sb"].double()}


# fp16 matmul + bias + gelu --------------------------------------------------------------------------------------


def _mmg_inputs(size, mk):
    import torch

    M, N, K = size
    return dict(a=mk((M, K), torch.float16, "small"), b=mk((K, N), torch.float16, "small"),
                bias=mk((N,), torch.float16), c=mk((M, N), torch.float16, "out"))


def _mmg_launch(x, cfg):
    meta, opts = _split(cfg)
    a, b, c = x["a"], x["b"], x["c"]
    M, K = a.shape
    N = b.shape[1]
    mm_bias_gelu[(cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"]),)](
        a, b, x["bias"], c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        **meta, **opts)


def _mmg_ref(x):
    import torch

    z = x["a"].double() @ x["b"].double() + x["bias"].double()[None, :]
    return {"c": torch.nn.functional.gelu(z, approximate="tanh")}


# split-K -----------------------------------------------------------------------------------------------------------


def _splitk_inputs(size, mk):
    import torch

    M, N, K = size
    return dict(a=mk((M, K), torch.float16, "small"), b=mk((K, N), torch.float16, "small"),
                c=mk((M, N), torch.float32, "zeros"))


def _splitk_launch(x, cfg):
    meta, opts = _split(cfg)
    a, b, c = x["a"], x["b"], x["c"]
    M, K = a.shape
    N = b.shape[1]
    mm_splitk_atomic[(cdiv(M, meta["BM"]) * cdiv(N, meta["BN"]), meta["SPLIT_K"])](
        a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), **meta, **opts)


def _splitk_ref(x):
    return {"c": x["a"].double() @ x["b"].double()}


# batched 3-D dot ---------------------------------------------------------------------------------------------------


def _bmm3_inputs(size, mk):
    import torch

    NB, M, N, K = size
    return dict(a=mk((NB, M, K), torch.float16, "small"), b=mk((NB, K, N), torch.float16, "small"),
                c=mk((NB, M, N), torch.float16, "out"))


def _bmm3_launch(x, cfg):
    meta, opts = _split(cfg)
    a, b, c = x["a"], x["b"], x["c"]
    NB, M, K = a.shape
    N = b.shape[2]
    bmm_3d_dot[(cdiv(NB, meta["BB"]), cdiv(M, meta["BM"]), cdiv(N, meta["BN"]))](
        a, b, c, NB, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        **meta, **opts)


def _bmm3_ref(x):
    return {"c": x["a"].double() @ x["b"].double()}


# block-pointer matmul, transposed B ----------------------------------------------------------------------------------


def _bpbt_inputs(size, mk):
    import torch

    M, N, K = size
    return dict(a=mk((M, K), torch.bfloat16, "small"), w=mk((N, K), torch.bfloat16, "small"),
                c=mk((M, N), torch.bfloat16, "out"))


def _bpbt_launch(x, cfg):
    meta, opts = _split(cfg)
    a, w, c = x["a"], x["w"], x["c"]
    M, K = a.shape
    N = w.shape[0]
    mm_bptr_bt[(cdiv(M, meta["BM"]), cdiv(N, meta["BN"]))](a, w, c, M, N, K, a.stride(0), w.stride(0), c.stride(0),
                                                            **meta, **opts)


def _bpbt_ref(x):
    return {"c": x["a"].double() @ x["w"].double().T}


# causal attention ----------------------------------------------------------------------------------------------------


def _attn_inputs(size, mk):
    import torch

    B, S, H, D = size
    return dict(q=mk((B, S, H, D), torch.float16), k=mk((B, S, H, D), torch.float16),
                v=mk((B, S, H, D), torch.float16), o=mk((B, S, H, D), torch.float16, "out"))


def _attn_launch(x, cfg):
    meta, opts = _split(cfg)
    q = x["q"]
    B, S, H, D = q.shape
    causal_attn[(cdiv(S, meta["BM"]), B * H)](q, x["k"], x["v"], x["o"], D ** -0.5, S, H, q.stride(0), q.stride(1),
                                               q.stride(2), D=D, **meta, **opts)


def _attn_ref(x):
    import torch

    q, k, v = (x[n].double().transpose(1, 2) for n in "qkv")
    S, D = q.shape[2], q.shape[3]
    s = q @ k.transpose(-1, -2) * D ** -0.5
    s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    return {"o": (torch.softmax(s, -1) @ v).transpose(1, 2)}


# interleaved rope -----------------------------------------------------------------------------------------------------


def _ropei_inputs(size, mk):
    import torch

    T, H, D = size
    return dict(x=mk((T, H, D), torch.float16), inv_freq=mk((D // 2,), torch.float32, "inv_freq"),
                out=mk((T, H, D), torch.float16, "out"))


def _ropei_launch(x, cfg):
    meta, opts = _split(cfg)
    T, H, D = x["x"].shape
    rope_interleaved[(T, cdiv(H, meta["BH"]))](x["x"], x["inv_freq"], x["out"], T, H, x["x"].stride(0),
                                               x["x"].stride(1), HALF=D // 2, **meta, **opts)


def _ropei_ref(x):
    import torch

    xx = x["x"].double()
    T = xx.shape[0]
    ang = torch.arange(T, dtype=torch.float64)[:, None] * x["inv_freq"].double()[None, :]
    c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
    xe, xo = xx[..., 0::2], xx[..., 1::2]
    out = torch.empty_like(xx)
    out[..., 0::2] = xe * c - xo * s
    out[..., 1::2] = xe * s + xo * c
    return {"out": out}


# welford -------------------------------------------------------------------------------------------------------------


def _welf_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.bfloat16, "offset"), mean=mk((M,), torch.float32, "out"),
                rstd=mk((M,), torch.float32, "out"))


def _welf_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    welford_rows[(M,)](x["x"], x["mean"], x["rstd"], N, x["x"].stride(0), 1e-5, **meta, **opts)


def _welf_ref(x):
    xx = x["x"].double()
    return {"mean": xx.mean(1), "rstd": (xx.var(1, unbiased=False) + 1e-5).rsqrt()}


# top-k and sort ------------------------------------------------------------------------------------------------------


def _topk_inputs(size, mk):
    import torch

    M, N, K = size
    return dict(x=mk((M, N), torch.float32), v=mk((M, K), torch.float32, "out"))


def _topk_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    K = x["v"].shape[1]
    topk_rows[(cdiv(M, meta["BLOCK_M"]),)](x["x"], x["v"], M, N=N, K=K, **meta, **opts)


def _topk_ref(x):
    return {"v": x["x"].double().topk(x["v"].shape[1], dim=1).values}


def _sort_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.float32, "ties"), y=mk((M, N), torch.float32, "out"))


def _sort_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    sort_rows[(M,)](x["x"], x["y"], x["x"].stride(0), N=N, **opts)


def _sort_ref(x):
    return {"y": x["x"].double().sort(1, descending=True).values}


# embedding bag -------------------------------------------------------------------------------------------------------


def _ebag_inputs(size, mk):
    import torch

    n_bags, per_bag, V, D = size
    return dict(idx=mk((n_bags * per_bag,), torch.int32, f"index:{V}"),
                offs=mk((n_bags + 1,), torch.int32, f"csr:{n_bags * per_bag}"),
                w=mk((V, D), torch.float16), out=mk((n_bags, D), torch.float16, "out"))


def _ebag_launch(x, cfg):
    meta, opts = _split(cfg)
    n_bags = x["offs"].shape[0] - 1
    D = x["w"].shape[1]
    embedding_bag_mean[(n_bags, cdiv(D, meta["BLOCK_D"]))](x["idx"], x["offs"], x["w"], x["out"], D, **meta, **opts)


def _ebag_ref(x):
    import torch

    w, idx, offs = x["w"].double(), x["idx"].long(), x["offs"].tolist()
    out = torch.zeros(len(offs) - 1, w.shape[1], dtype=torch.float64)
    for i in range(len(offs) - 1):
        if offs[i + 1] > offs[i]:
            out[i] = w[idx[offs[i]:offs[i + 1]]].mean(0)
    return {"out": out}


def _ebag_moves(x):
    return x["idx"].numel() * (4 + x["w"].shape[1] * 2) + x["out"].numel() * 2


# causal conv1d -----------------------------------------------------------------------------------------------------


def _conv_inputs(size, mk):
    import torch

    B, D, L, KW = size
    return dict(x=mk((B, D, L), torch.bfloat16), w=mk((D, KW), torch.float32, "small"), bias=mk((D,), torch.float32),
                y=mk((B, D, L), torch.bfloat16, "out"))


def _conv_launch(x, cfg):
    meta, opts = _split(cfg)
    B, D, L = x["x"].shape
    causal_conv1d_silu[(cdiv(L, meta["BLOCK_L"]), cdiv(D, meta["BLOCK_D"]), B)](
        x["x"], x["w"], x["bias"], x["y"], D, L, x["x"].stride(0), x["x"].stride(1), KW=x["w"].shape[1], **meta,
        **opts)


def _conv_ref(x):
    import torch

    xx, w = x["x"].double(), x["w"].double()
    D, KW = w.shape
    z = torch.nn.functional.conv1d(torch.nn.functional.pad(xx, (KW - 1, 0)), w[:, None, :], x["bias"].double(),
                                   groups=D)
    return {"y": torch.nn.functional.silu(z)}


# histograms ----------------------------------------------------------------------------------------------------------


def _histb_inputs(size, mk):
    import torch

    n, bins = size
    return dict(x=mk((n,), torch.int32, f"index:{bins}"), hist=mk((bins,), torch.int32, "zeros"))


def _histb_launch(x, cfg):
    meta, opts = _split(cfg)
    n = x["x"].numel()
    histogram_blocks[(cdiv(n, meta["BLOCK"]),)](x["x"], x["hist"], n, NUM_BINS=x["hist"].numel(), **meta, **opts)


def _histb_ref(x):
    import torch

    return {"hist": torch.bincount(x["x"].long(), minlength=x["hist"].numel()).to(torch.int32)}


def _hista_inputs(size, mk):
    import torch

    n, bins = size
    return dict(x=mk((n,), torch.float32), hist=mk((bins,), torch.int32, "zeros"))


def _hista_launch(x, cfg):
    meta, opts = _split(cfg)
    n = x["x"].numel()
    bins = x["hist"].numel()
    histogram_atomic[(cdiv(n, meta["BLOCK"]),)](x["x"], x["hist"], n, -4.0, bins / 8.0, NUM_BINS=bins, **meta, **opts)


def _hista_ref(x):
    import torch

    bins = x["hist"].numel()
    b = ((x["x"].float() - -4.0) * (bins / 8.0)).to(torch.int32).clamp(0, bins - 1)  # the kernel's fp32 math
    return {"hist": torch.bincount(b.long(), minlength=bins).to(torch.int32)}


# fp8 quantization ----------------------------------------------------------------------------------------------------


def _fp8_inputs(size, mk):
    import torch

    (n,) = size
    return dict(x=mk((n,), torch.float32, "wide"), scale=mk((1,), torch.float32, "scale"),
                y=mk((n,), torch.float8_e4m3fn, "zeros"), amax=mk((1,), torch.float32, "zeros"))


def _fp8_launch(x, cfg):
    meta, opts = _split(cfg)
    n = x["x"].numel()
    quant_fp8[(cdiv(n, meta["BLOCK"]),)](x["x"], x["y"], x["scale"], x["amax"], n, **meta, **opts)


def _fp8_check(x, ref):
    import torch

    want = (x["x"].float() * x["scale"].float()).clamp(-448, 448).to(torch.float8_e4m3fn)
    got = x["y"]
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), \
        f"{(got.view(torch.uint8) != want.view(torch.uint8)).sum().item()} fp8 values differ"
    assert x["amax"].item() == x["x"].abs().max().item(), (x["amax"].item(), x["x"].abs().max().item())


# swizzled matmul -----------------------------------------------------------------------------------------------------


def _mmsw_inputs(size, mk):
    import torch

    M, N, K = size
    return dict(a=mk((M, K), torch.bfloat16, "small"), b=mk((K, N), torch.bfloat16, "small"),
                c=mk((M, N), torch.float32, "out"))


def _mmsw_launch(x, cfg):
    meta, opts = _split(cfg)
    a, b, c = x["a"], x["b"], x["c"]
    M, K = a.shape
    N = b.shape[1]
    mm_swizzle2d_grid[(cdiv(M, meta["BM"]), cdiv(N, meta["BN"]))](a, b, c, M, N, K, a.stride(0), b.stride(0),
                                                                   c.stride(0), **meta, **opts)


def _mmsw_ref(x):
    return {"c": x["a"].double() @ x["b"].double()}


# searchsorted --------------------------------------------------------------------------------------------------------


def _ss_inputs(size, mk):
    import torch

    n_sorted, n_q = size
    return dict(sorted=mk((n_sorted,), torch.float32, "sorted"), q=mk((n_q,), torch.float32, "queries"),
                out=mk((n_q,), torch.int32, "out"))


def _ss_launch(x, cfg):
    meta, opts = _split(cfg)
    n_q = x["q"].numel()
    searchsorted_left[(cdiv(n_q, meta["BLOCK"]),)](x["sorted"], x["q"], x["out"], x["sorted"].numel(), n_q, **meta,
                                                   **opts)


def _ss_ref(x):
    import torch

    return {"out": torch.searchsorted(x["sorted"].double(), x["q"].double(), right=False).to(torch.int32)}


MM_CONFIGS = [dict(BM=128, BN=128, BK=64, num_warps=4, num_stages=4), dict(BM=128, BN=256, BK=64, num_warps=8,
                                                                         num_stages=3),
              dict(BM=64, BN=64, BK=32, num_warps=4, num_stages=3)]

CASE_DEFS = {
    "h3_add_dropout_ln": Case(_adl_inputs, _adl_launch, None,
                              [dict(num_warps=4), dict(num_warps=8), dict(num_warps=16)],
                              gpu_size=(8192, 4096), test_size=(7, 1000), check=_adl_check,
                              moves=_nbytes("x", "r", "h", "y")),
    "h3_log_softmax_long": Case(_lsm_inputs, _lsm_launch, _lsm_ref,
                                [dict(ROWS=1, BLOCK=4096, num_warps=8), dict(ROWS=2, BLOCK=2048, num_warps=8),
                                 dict(ROWS=4, BLOCK=1024, num_warps=4)],
                                gpu_size=(256, 128256), test_size=(5, 3000), moves=_nbytes("x", "x", "y")),
    "h3_log_softmax_bwd": Case(_lsmb_inputs, _lsmb_launch, _lsmb_ref,
                               [dict(BLOCK_M=4, num_warps=4), dict(BLOCK_M=8, num_warps=8),
                                dict(BLOCK_M=1, num_warps=4)],
                               gpu_size=(32768, 1024), test_size=(9, 300), tol=2e-2,
                               moves=_nbytes("y", "dy", "dx")),
    "h3_argminmax": Case(_amm_inputs, _amm_launch, _amm_ref,
                         [dict(BLOCK_M=4, num_warps=4), dict(BLOCK_M=16, num_warps=8), dict(BLOCK_M=1, num_warps=4)],
                         gpu_size=(16384, 1024), test_size=(37, 300), moves=_nbytes("x")),
    "h3_cumsum_cols": Case(_cumcols_inputs, _cumcols_launch, _cumcols_ref,
                           [dict(BLOCK_M=32, BLOCK_N=32, num_warps=4), dict(BLOCK_M=64, BLOCK_N=64, num_warps=4),
                            dict(BLOCK_M=16, BLOCK_N=128, num_warps=4)],
                           gpu_size=(2048, 8192), test_size=(100, 70), tol=1e-5, moves=_nbytes("x", "y")),
    "h3_linear_recurrence": Case(_linrec_inputs, _linrec_launch, _linrec_ref,
                                 [dict(BLOCK=1024, num_warps=4), dict(BLOCK=2048, num_warps=8),
                                  dict(BLOCK=256, num_warps=2)],
                                 gpu_size=(4096, 4096), test_size=(5, 700), tol=1e-5,
                                 moves=_nbytes("a", "b", "h")),
    "h3_rev_cumprod": Case(_revcp_inputs, _revcp_launch, _revcp_ref,
                           [dict(BLOCK_M=4, num_warps=4), dict(BLOCK_M=1, num_warps=4), dict(BLOCK_M=8, num_warps=8)],
                           gpu_size=(32768, 512), test_size=(9, 200), tol=1e-5, moves=_nbytes("x", "y")),
    "h3_mm_i8_rowscale": Case(_mmi8r_inputs, _mmi8r_launch, _mmi8r_ref,
                              [dict(BM=128, BN=128, BK=128, num_warps=4, num_stages=4),
                               dict(BM=128, BN=256, BK=128, num_warps=8, num_stages=3),
                               dict(BM=64, BN=64, BK=64, num_warps=4, num_stages=3)],
                              gpu_size=(4096, 4096, 4096), test_size=(100, 130, 200), moves=_mm_flop("a", "b")),
    "h3_mm_bias_gelu": Case(_mmg_inputs, _mmg_launch, _mmg_ref,
                            [dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP=8, num_warps=4, num_stages=4),
                             dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP=8, num_warps=8, num_stages=3),
                             dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, GROUP=4, num_warps=4, num_stages=4)],
                            gpu_size=(4096, 4096, 4096), test_size=(100, 130, 200), moves=_mm_flop("a", "b")),
    "h3_splitk_atomic": Case(_splitk_inputs, _splitk_launch, _splitk_ref,
                             [dict(BM=128, BN=128, BK=64, SPLIT_K=4, num_warps=4, num_stages=4),
                              dict(BM=64, BN=128, BK=64, SPLIT_K=8, num_warps=4, num_stages=3),
                              dict(BM=128, BN=256, BK=64, SPLIT_K=2, num_warps=8, num_stages=3)],
                             gpu_size=(1024, 1024, 16384), test_size=(70, 90, 600), moves=_mm_flop("a", "b")),
    "h3_bmm_3d_dot": Case(_bmm3_inputs, _bmm3_launch, _bmm3_ref,
                          [dict(BB=2, BM=64, BN=64, BK=32, num_warps=4, num_stages=3),
                           dict(BB=1, BM=128, BN=128, BK=64, num_warps=4, num_stages=3),
                           dict(BB=4, BM=32, BN=64, BK=32, num_warps=4, num_stages=2)],
                          gpu_size=(1024, 128, 128, 128), test_size=(5, 40, 70, 50), moves=_mm_flop("a", "b")),
    "h3_mm_bptr_bt": Case(_bpbt_inputs, _bpbt_launch, _bpbt_ref, MM_CONFIGS,
                          gpu_size=(4096, 4096, 4096), test_size=(100, 130, 200), moves=_mm_flop("a", "w")),
    "h3_causal_attn": Case(_attn_inputs, _attn_launch, _attn_ref,
                           [dict(BM=128, BN=64, num_warps=4, num_stages=3), dict(BM=128, BN=128, num_warps=8,
                                                                                  num_stages=3),
                            dict(BM=64, BN=64, num_warps=4, num_stages=2)],
                           gpu_size=(4, 4096, 32, 64), test_size=(1, 200, 2, 64), tol=2e-2,
                           moves=lambda x: ("flop", 2 * x["q"].numel() * x["q"].shape[1])),
    "h3_rope_interleaved": Case(_ropei_inputs, _ropei_launch, _ropei_ref,
                                [dict(BH=8, num_warps=4), dict(BH=32, num_warps=8), dict(BH=4, num_warps=2)],
                                gpu_size=(8192, 32, 128), test_size=(6, 5, 64), moves=_nbytes("x", "out")),
    "h3_welford": Case(_welf_inputs, _welf_launch, _welf_ref,
                       [dict(BLOCK=1024, num_warps=4), dict(BLOCK=2048, num_warps=8), dict(BLOCK=512, num_warps=4)],
                       gpu_size=(4096, 8192), test_size=(6, 2500), tol=1e-4, moves=_nbytes("x")),
    "h3_topk": Case(_topk_inputs, _topk_launch, _topk_ref,
                    [dict(BLOCK_M=4, num_warps=4), dict(BLOCK_M=16, num_warps=8), dict(BLOCK_M=1, num_warps=1)],
                    gpu_size=(32768, 256, 16), test_size=(13, 256, 16), tol=1e-6, moves=_nbytes("x", "v")),
    "h3_sort_rows": Case(_sort_inputs, _sort_launch, _sort_ref,
                         [dict(num_warps=4), dict(num_warps=8), dict(num_warps=2)],
                         gpu_size=(16384, 1024), test_size=(5, 1024), tol=1e-6, moves=_nbytes("x", "y")),
    "h3_embedding_bag": Case(_ebag_inputs, _ebag_launch, _ebag_ref,
                             [dict(BLOCK_D=256, num_warps=2), dict(BLOCK_D=128, num_warps=1),
                              dict(BLOCK_D=64, num_warps=1)],
                             gpu_size=(16384, 20, 100000, 256), test_size=(9, 4, 50, 200), tol=2e-3,
                             moves=_ebag_moves),
    "h3_causal_conv1d": Case(_conv_inputs, _conv_launch, _conv_ref,
                             [dict(BLOCK_D=16, BLOCK_L=256, num_warps=4), dict(BLOCK_D=64, BLOCK_L=64, num_warps=4),
                              dict(BLOCK_D=8, BLOCK_L=512, num_warps=8)],
                             gpu_size=(8, 4096, 1024, 4), test_size=(2, 20, 300, 4), moves=_nbytes("x", "y")),
    "h3_histogram_blocks": Case(_histb_inputs, _histb_launch, _histb_ref,
                                [dict(BLOCK=4096, num_warps=4), dict(BLOCK=8192, num_warps=8),
                                 dict(BLOCK=1024, num_warps=4)],
                                gpu_size=(1 << 24, 256), test_size=(20000, 256), moves=_nbytes("x")),
    "h3_histogram_atomic": Case(_hista_inputs, _hista_launch, _hista_ref,
                                [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8)],
                                gpu_size=(1 << 22, 512), test_size=(20000, 512), moves=_nbytes("x")),
    "h3_quant_fp8": Case(_fp8_inputs, _fp8_launch, None,
                         [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8), dict(BLOCK=512, num_warps=2)],
                         gpu_size=(1 << 24,), test_size=(20000,), check=_fp8_check, moves=_nbytes("x", "y")),
    "h3_mm_swizzle2d": Case(_mmsw_inputs, _mmsw_launch, _mmsw_ref,
                            [dict(BM=128, BN=128, BK=64, G=8, num_warps=4, num_stages=4),
                             dict(BM=128, BN=256, BK=64, G=8, num_warps=8, num_stages=3),
                             dict(BM=64, BN=128, BK=32, G=4, num_warps=4, num_stages=4)],
                            gpu_size=(4096, 4096, 4096), test_size=(130, 260, 128), moves=_mm_flop("a", "b")),
    "h3_searchsorted": Case(_ss_inputs, _ss_launch, _ss_ref,
                            [dict(BLOCK=1024, num_warps=4), dict(BLOCK=256, num_warps=2),
                             dict(BLOCK=4096, num_warps=8)],
                            gpu_size=(1 << 20, 1 << 24), test_size=(3000, 5000), moves=_nbytes("q", "out")),
}

CASES, run, bench_inputs, check = screen(CASE_DEFS)
_maker = maker

if __name__ == "__main__":
    from heldout_common import main

    main(CASE_DEFS, check, sys.argv[1:])
