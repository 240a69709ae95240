"""A fifth set of held-out kernel texts (issues 13 and 14), written the ways other users write them, on workloads
heldout_texts.py .. heldout_texts4.py, tests/corpus.py and tests/idioms.py do not cover: a Mamba-style selective scan
(tl.associative_scan over (decay, input) pairs of a [time, state] tile, the state carried between chunks),
flash-decoding split over the KV length with a separate log-sum-exp combine kernel, a block-sparse matmul driven by
a CSR lookup table of k-blocks, a 3x3 NHWC convolution as an implicit GEMM with tl.dot, a KL-divergence loss forward
and backward over long rows, fused QK RMS norm + rotary embedding over packed QKV (Qwen3's way), column absmax /
signed max by float tl.atomic_max, a bucketed row accumulation under a tl.atomic_cas spin lock, causal ALiBi softmax
on a 3-D grid (NaN / inf rows as torch gives them), an int64 permutation gather whose index math passes 2^31, a
3x3 blur through tl.make_block_ptr halos (boundary_check, padding_option="zero", tl.static_range), Sinkhorn
iterations in a `while` loop whose trip count depends on the matrix, a row logsumexp through tl.reduce with a
tuple-returning combine_fn (±inf and NaN rows), an EMA weight update with cache_modifier / eviction_policy hints,
vLLM's reshape_and_cache scatter into a paged KV cache (padding slots skipped by an early return), a sigmoid focal
loss forward + backward with a constexpr gamma branch, and a bilinear upsample (align_corners=False) by gathers.

    python benchmarks/compile_time.py --texts benchmarks/heldout_texts5.py --dump DIR [case ...]   # CPU, both sides
    python benchmarks/idioms.py --texts benchmarks/heldout_texts5.py [case ...]                    # GPU, timed

CASE_DEFS, checked by `check(name, device=...)` against float64 references, and the glue are heldout_common.py's.
The module imports `triton`: kernellab.compat serves it on kernellab's side."""
import os
import sys

import triton
import triton.language as tl

if os.path.dirname(os.path.realpath(__file__)) not in sys.path:  # heldout_common beside it (through links too)
    sys.path.append(os.path.dirname(os.path.realpath(__file__)))
from heldout_common import Case, cdiv, close, close_nonfinite, maker, nbytes, screen, split  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------
# Mamba-style selective scan: one program per (batch, channel); h_t = exp(dt_t * A) * h_{t-1} + dt_t * B_t * x_t
# over a [BLOCK_L, N] tile by tl.associative_scan on (decay, input) pairs, y_t = C_t . h_t + D * x_t; dt through a
# softplus; the last state row carried into the next chunk


@triton.jit
def _ssm_combine(a1, b1, a2, b2):
    return a1 * a2, b1 * a2 + b2


@triton.jit
def selective_scan(X, DT, A, Bm, Cm, Dskip, Y, L, D, N: tl.constexpr, BLOCK_L: tl.constexpr):
    pid_b = tl.program_id(0)
    d = tl.program_id(1)
    n = tl.arange(0, N)
    a = tl.load(A + d * N + n)
    dskip = tl.load(Dskip + d)
    h = tl.zeros([N], dtype=tl.float32)
    last = (tl.arange(0, BLOCK_L) == BLOCK_L - 1)[:, None]
    for l0 in range(0, L, BLOCK_L):
        t = l0 + tl.arange(0, BLOCK_L)
        tm = t < L
        row = pid_b * L + t
        x = tl.load(X + row * D + d, mask=tm, other=0.).to(tl.float32)
        dt = tl.load(DT + row * D + d, mask=tm, other=0.).to(tl.float32)
        dt = tl.where(tm, tl.where(dt > 20., dt, tl.log(1. + tl.exp(dt))), 0.)
        bmat = tl.load(Bm + row[:, None] * N + n[None, :], mask=tm[:, None], other=0.).to(tl.float32)
        cmat = tl.load(Cm + row[:, None] * N + n[None, :], mask=tm[:, None], other=0.).to(tl.float32)
        decay = tl.exp(dt[:, None] * a[None, :])
        inp = dt[:, None] * bmat * x[:, None]
        ga, gb = tl.associative_scan((decay, inp), 0, _ssm_combine)
        hs = ga * h[None, :] + gb
        y = tl.sum(hs * cmat, axis=1) + dskip * x
        tl.store(Y + row * D + d, y.to(Y.dtype.element_ty), mask=tm)
        h = tl.sum(tl.where(last, hs, 0.), axis=0)


# ---------------------------------------------------------------------------------------------------------------
# flash decoding: the KV length split into NUM_SPLITS chunks (a program each, per (batch, head)), every chunk's
# normalized output and log-sum-exp written; a second kernel merges the chunks by their lse. Sequences have their
# own lengths, so late chunks may be empty (lse = -inf, weight 0)


@triton.jit
def decode_split(Q, K, V, LENS, O_PART, LSE_PART, sm_scale, H, chunk, s_kb, s_ks, s_kh, NUM_SPLITS,
                 D: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(0)
    split_id = tl.program_id(1)
    b = bh // H
    h = bh % H
    seqlen = tl.load(LENS + b)
    start = split_id * chunk
    end = tl.minimum(start + chunk, seqlen)
    d = tl.arange(0, D)
    q = tl.load(Q + bh * D + d).to(tl.float32) * sm_scale
    m_i = float("-inf")
    l_i = 0.
    acc = tl.zeros([D], dtype=tl.float32)
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        nm = n < end
        off = b.to(tl.int64) * s_kb + n[:, None] * s_ks + h * s_kh + d[None, :]
        k = tl.load(K + off, mask=nm[:, None], other=0.).to(tl.float32)
        s = tl.where(nm, tl.sum(k * q[None, :], axis=1), float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(V + off, mask=nm[:, None], other=0.).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    out = bh * NUM_SPLITS + split_id
    if end > start:
        tl.store(O_PART + out * D + d, acc / l_i)
        tl.store(LSE_PART + out, m_i + tl.log(l_i))
    else:
        tl.store(O_PART + out * D + d, tl.zeros([D], dtype=tl.float32))
        tl.store(LSE_PART + out, float("-inf"))


@triton.jit
def decode_combine(O_PART, LSE_PART, O, NUM_SPLITS, D: tl.constexpr, BLOCK_S: tl.constexpr):
    bh = tl.program_id(0)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, D)
    sm = s < NUM_SPLITS
    lse = tl.load(LSE_PART + bh * NUM_SPLITS + s, mask=sm, other=float("-inf"))
    m = tl.max(lse, axis=0)
    w = tl.exp(lse - m)
    o = tl.load(O_PART + (bh * NUM_SPLITS + s)[:, None] * D + d[None, :], mask=sm[:, None], other=0.)
    res = tl.sum(w[:, None] * o, axis=0) / tl.sum(w, axis=0)
    tl.store(O + bh * D + d, res.to(O.dtype.element_ty))


# ---------------------------------------------------------------------------------------------------------------
# block-sparse (BSR) matmul: A's nonzero BLOCK x BLOCK blocks listed per block row by a CSR lookup table (row
# pointers, k-block indices), a block row with no blocks writes zeros


@triton.jit
def bsr_matmul(A, B, C, ROWPTR, KIDX, M, N, K, sam, sbk, scm, BLOCK: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK + tl.arange(0, BLOCK)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BLOCK)
    start = tl.load(ROWPTR + pid_m)
    end = tl.load(ROWPTR + pid_m + 1)
    acc = tl.zeros((BLOCK, BN), dtype=tl.float32)
    for i in range(start, end):
        kb = tl.load(KIDX + i)
        kk = kb * BLOCK + rk
        a = tl.load(A + rm[:, None] * sam + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.)
        b = tl.load(B + kk[:, None] * sbk + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.)
        acc += tl.dot(a, b)
    tl.store(C + rm[:, None] * scm + rn[None, :], acc.to(C.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


# ---------------------------------------------------------------------------------------------------------------
# 3x3 convolution, stride 1, padding 1, NHWC activations and [3, 3, C, F] weights, as an implicit GEMM: output
# pixels x filters tiles, K = the taps x channel blocks, the padding by masks


@triton.jit
def conv3x3_nhwc_igemm(X, Wt, Y, NB, H, W, C, F, BM: tl.constexpr, BF: tl.constexpr, BC: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_f = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rf = pid_f * BF + tl.arange(0, BF)
    rc = tl.arange(0, BC)
    npix = NB * H * W
    img = rm // (H * W)
    hw = rm % (H * W)
    oh = hw // W
    ow = hw % W
    acc = tl.zeros([BM, BF], dtype=tl.float32)
    for kh in range(3):
        for kw in range(3):
            ih = oh + kh - 1
            iw = ow + kw - 1
            ok = (rm < npix) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            base = ((img * H + ih) * W + iw).to(tl.int64) * C
            for c0 in range(0, C, BC):
                cc = c0 + rc
                a = tl.load(X + base[:, None] + cc[None, :], mask=ok[:, None] & (cc[None, :] < C), other=0.)
                b = tl.load(Wt + ((kh * 3 + kw) * C + cc)[:, None] * F + rf[None, :],
                            mask=(cc[:, None] < C) & (rf[None, :] < F), other=0.)
                acc += tl.dot(a, b)
    tl.store(Y + rm[:, None] * F + rf[None, :], acc.to(Y.dtype.element_ty),
             mask=(rm[:, None] < npix) & (rf[None, :] < F))


# ---------------------------------------------------------------------------------------------------------------
# KL divergence (input log-probabilities, target probabilities, reduction "batchmean") forward and backward in one
# pass a row (Liger's way), targets of exactly 0 contribute 0


@triton.jit
def kl_div_fwd_bwd(INP, TGT, LOSS, DINP, V, stride, inv_b, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, V, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        m = cols < V
        x = tl.load(INP + row * stride + cols, mask=m, other=0.).to(tl.float32)
        t = tl.load(TGT + row * stride + cols, mask=m, other=0.).to(tl.float32)
        acc += tl.where(t > 0, t * (tl.log(t) - x), 0.)
        tl.store(DINP + row * stride + cols, (-t * inv_b).to(DINP.dtype.element_ty), mask=m)
    tl.store(LOSS + row, tl.sum(acc, axis=0) * inv_b)


# ---------------------------------------------------------------------------------------------------------------
# Qwen3-style QK norm + rotary: packed QKV rows [T, (HQ + 2 HK) * D], one program per (token, q or k head): RMS norm
# over the head with the q or k weight, then neox rotary with cos / sin from a position-indexed cache


@triton.jit
def qk_norm_rope(QKV, POS, COS_SIN, QW, KW, Q_OUT, K_OUT, HQ, HK, s_t, eps, D: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    half = tl.arange(0, D // 2)
    src = QKV + t.to(tl.int64) * s_t + h * D
    x1 = tl.load(src + half).to(tl.float32)
    x2 = tl.load(src + D // 2 + half).to(tl.float32)
    if h < HQ:
        w1 = tl.load(QW + half)
        w2 = tl.load(QW + D // 2 + half)
    else:
        w1 = tl.load(KW + half)
        w2 = tl.load(KW + D // 2 + half)
    r = tl.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / D + eps)
    y1 = x1 * r * w1
    y2 = x2 * r * w2
    pos = tl.load(POS + t)
    cos = tl.load(COS_SIN + pos * D + half)
    sin = tl.load(COS_SIN + pos * D + D // 2 + half)
    o1 = y1 * cos - y2 * sin
    o2 = y2 * cos + y1 * sin
    if h < HQ:
        dst = Q_OUT + (t * HQ + h) * D
    else:
        dst = K_OUT + (t * HK + h - HQ) * D
    tl.store(dst + half, o1.to(Q_OUT.dtype.element_ty))
    tl.store(dst + D // 2 + half, o2.to(Q_OUT.dtype.element_ty))


# ---------------------------------------------------------------------------------------------------------------
# per-column absmax (for fp8 scales) and signed max of bf16 activations: a [BM, BN] tile reduced over rows, merged
# across row blocks by float tl.atomic_max (signed values: negative maxima too)


@triton.jit
def col_max_atomic(X, AMAX, CMAX, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(X + rows[:, None] * stride + cols[None, :], mask=mask, other=0.).to(tl.float32)
    am = tl.max(tl.abs(x), axis=0)
    cm = tl.max(tl.where(mask, x, float("-inf")), axis=0)
    tl.atomic_max(AMAX + cols, am, mask=cols < N)
    tl.atomic_max(CMAX + cols, cm, mask=cols < N)


# ---------------------------------------------------------------------------------------------------------------
# rows added into buckets under a per-bucket spin lock (the layer-norm-backward tutorial's way): acquire by
# tl.atomic_cas, a plain read-modify-write of the bucket's row and count, release by tl.atomic_xchg


@triton.jit
def bucket_accum_lock(X, BUCKET, OUT, COUNT, LOCKS, N, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    b = tl.load(BUCKET + row)
    cols = tl.arange(0, BLOCK_N)
    m = cols < N
    x = tl.load(X + row * stride + cols, mask=m, other=0.).to(tl.float32)
    lock = LOCKS + b
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    acc = tl.load(OUT + b * N + cols, mask=m, other=0.)
    tl.store(OUT + b * N + cols, acc + x, mask=m)
    cnt = tl.load(COUNT + b)
    tl.store(COUNT + b, cnt + 1)
    tl.debug_barrier()
    tl.atomic_xchg(lock, 0)


# ---------------------------------------------------------------------------------------------------------------
# ALiBi + causal softmax over attention scores [B, H, Lq, Lk] (the queries the last Lq positions), a 3-D grid
# (row block, head, batch), whole rows a program


@triton.jit
def alibi_causal_softmax(S, P, SLOPES, Lq, Lk, s_b, s_h, s_q, scale, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    off = b.to(tl.int64) * s_b + h * s_h + rows[:, None] * s_q + cols[None, :]
    inb = (rows[:, None] < Lq) & (cols[None, :] < Lk)
    x = tl.load(S + off, mask=inb, other=float("-inf"))
    slope = tl.load(SLOPES + h)
    qpos = rows + (Lk - Lq)
    x = x * scale + slope * (cols[None, :] - qpos[:, None]).to(tl.float32)
    x = tl.where(cols[None, :] <= qpos[:, None], x, float("-inf"))
    mx = tl.max(x, axis=1)
    e = tl.exp(x - mx[:, None])
    p = e / tl.sum(e, axis=1)[:, None]
    tl.store(P + off, p, mask=inb)


# ---------------------------------------------------------------------------------------------------------------
# a permutation gather y[i] = x[(i * mult + add) % n] with mult and add past 2^31 (int64 index math throughout)


@triton.jit
def perm_gather_i64(X, Y, IDX, n, mult, add, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    src = (offs * mult + add) % n
    tl.store(IDX + offs, src, mask=m)
    tl.store(Y + offs, tl.load(X + src, mask=m), mask=m)


# ---------------------------------------------------------------------------------------------------------------
# a 3x3 weighted blur of a batch of images through block pointers: nine halo tiles, each its own block pointer
# (negative offsets at the edges) loaded with boundary_check and zero padding, the taps unrolled by tl.static_range


@triton.jit
def blur3x3_block_ptr(X, Y, WTS, H, W, sx_img, sx_row, BH: tl.constexpr, BW: tl.constexpr):
    tile = tl.program_id(0)
    img = tl.program_id(1)
    n_tw = tl.cdiv(W, BW)
    r0 = (tile // n_tw) * BH
    c0 = (tile % n_tw) * BW
    acc = tl.zeros([BH, BW], dtype=tl.float32)
    for dy in tl.static_range(3):
        for dx in tl.static_range(3):
            p = tl.make_block_ptr(X + img * sx_img, shape=(H, W), strides=(sx_row, 1),
                                  offsets=(r0 + dy - 1, c0 + dx - 1), block_shape=(BH, BW), order=(1, 0))
            v = tl.load(p, boundary_check=(0, 1), padding_option="zero")
            acc += tl.load(WTS + dy * 3 + dx) * v.to(tl.float32)
    q = tl.make_block_ptr(Y + img * sx_img, shape=(H, W), strides=(sx_row, 1), offsets=(r0, c0),
                          block_shape=(BH, BW), order=(1, 0))
    tl.store(q, acc.to(Y.dtype.element_ty), boundary_check=(0, 1))


# ---------------------------------------------------------------------------------------------------------------
# Sinkhorn scaling of K = exp(-cost / eps) to marginals (a, b), one small matrix a program, iterating while the row
# marginal error exceeds tol (a data-dependent trip count, capped); the plan and the iteration count stored


@triton.jit
def sinkhorn(COST, A, B, P, ITERS, R, C, inv_eps, tol, max_iter, BR: tl.constexpr, BC: tl.constexpr):
    pid = tl.program_id(0)
    r = tl.arange(0, BR)
    c = tl.arange(0, BC)
    rm = r < R
    cm = c < C
    m = rm[:, None] & cm[None, :]
    offs = pid * R * C + r[:, None] * C + c[None, :]
    cost = tl.load(COST + offs, mask=m, other=0.)
    k = tl.where(m, tl.exp(-cost * inv_eps), 0.)
    a = tl.load(A + pid * R + r, mask=rm, other=0.)
    b = tl.load(B + pid * C + c, mask=cm, other=0.)
    u = tl.where(rm, 1., 0.)
    v = tl.where(cm, 1., 0.)
    err = tol + 1.
    it = 0
    while (err > tol) & (it < max_iter):
        u = tl.where(rm, a / tl.sum(k * v[None, :], axis=1), 0.)
        v = tl.where(cm, b / tl.sum(k * u[:, None], axis=0), 0.)
        err = tl.sum(tl.abs(u * tl.sum(k * v[None, :], axis=1) - a), axis=0)
        it += 1
    tl.store(P + offs, u[:, None] * k * v[None, :], mask=m)
    tl.store(ITERS + pid, it)


# ---------------------------------------------------------------------------------------------------------------
# row logsumexp through tl.reduce over (max, scaled sum) pairs with a tuple-returning combine_fn, BLOCK_M rows a
# program and the columns in blocks (the pairs of blocks merged by the same function); +inf rows give +inf, NaN
# rows NaN (torch.logsumexp's answers)


@triton.jit
def _lse_combine(m1, s1, m2, s2):
    m = tl.maximum(m1, m2)
    ms = tl.where(m == float("-inf"), 0., m)
    return m, s1 * tl.exp(m1 - ms) + s2 * tl.exp(m2 - ms)


@triton.jit
def logsumexp_rows(X, OUT, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    m_run = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    s_run = tl.zeros([BLOCK_M], dtype=tl.float32)
    has_inf = tl.zeros([BLOCK_M], dtype=tl.int1)
    has_nan = tl.zeros([BLOCK_M], dtype=tl.int1)
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        mask = rmask[:, None] & (cols[None, :] < N)
        x = tl.load(X + rows[:, None] * stride + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        has_inf |= tl.max((x == float("inf")).to(tl.int32), axis=1) > 0
        has_nan |= tl.max((x != x).to(tl.int32), axis=1) > 0
        xf = tl.where((x == float("inf")) | (x != x), float("-inf"), x)
        bm, bs = tl.reduce((xf, tl.where(xf == float("-inf"), 0., 1.)), 1, _lse_combine)
        m_run, s_run = _lse_combine(m_run, s_run, bm, bs)
    lse = m_run + tl.log(s_run)
    lse = tl.where(has_inf, float("inf"), lse)
    lse = tl.where(has_nan, float("nan"), lse)
    tl.store(OUT + rows, lse, mask=rmask)


# ---------------------------------------------------------------------------------------------------------------
# an EMA of fp32 weights from bf16 parameters, in place, with the cache hints a user adds: the parameters read
# around L1 (.cg), the EMA kept (evict_last), written back (.wb), an fp16 copy written streaming (.cs). (.cg with
# evict_first on one load is what ptxas refuses under Triton 3.6: "'.evict_first' cannot be combined with '.cg'")


@triton.jit
def ema_update_hints(EMA, PARAM, EMA_HALF, n, decay, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    p = tl.load(PARAM + offs, mask=m, other=0., cache_modifier=".cg").to(tl.float32)
    e = tl.load(EMA + offs, mask=m, other=0., eviction_policy="evict_last")
    e = e * decay + (1. - decay) * p
    tl.store(EMA + offs, e, mask=m, cache_modifier=".wb")
    tl.store(EMA_HALF + offs, e.to(tl.float16), mask=m, cache_modifier=".cs")


# ---------------------------------------------------------------------------------------------------------------
# vLLM's reshape_and_cache: each token's keys and values [H, D] scattered into a paged cache laid out [block,
# head, slot in block, D] at the token's slot; slot -1 (padding) returns early


@triton.jit
def reshape_and_cache(KEY, VALUE, K_CACHE, V_CACHE, SLOTS, s_kt, s_vt, block_size, H: tl.constexpr,
                      D: tl.constexpr):
    t = tl.program_id(0)
    slot = tl.load(SLOTS + t)
    if slot < 0:
        return
    blk = slot // block_size
    off = slot % block_size
    h = tl.arange(0, H)[:, None]
    d = tl.arange(0, D)[None, :]
    k = tl.load(KEY + t * s_kt + h * D + d)
    v = tl.load(VALUE + t * s_vt + h * D + d)
    dst = ((blk * H + h) * block_size + off) * D + d
    tl.store(K_CACHE + dst, k)
    tl.store(V_CACHE + dst, v)


# ---------------------------------------------------------------------------------------------------------------
# sigmoid focal loss (RetinaNet) forward and backward elementwise, log-sigmoid written stably, gamma a constexpr
# with the common gamma = 2 as its own branch


@triton.jit
def sigmoid_focal_fwd_bwd(X, T, LOSS, DX, n, alpha, GAMMA: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m, other=0.).to(tl.float32)
    t = tl.load(T + offs, mask=m, other=0.).to(tl.float32)
    p = tl.sigmoid(x)
    log_p = tl.minimum(x, 0.) - tl.log(1. + tl.exp(-tl.abs(x)))
    log_1mp = log_p - x
    pt = p * t + (1. - p) * (1. - t)
    log_pt = t * log_p + (1. - t) * log_1mp
    at = alpha * t + (1. - alpha) * (1. - t)
    one_m = 1. - pt
    if GAMMA == 2.0:
        mod = one_m * one_m
        dmod = 2. * one_m
    else:
        mod = tl.exp(GAMMA * tl.log(one_m))
        dmod = GAMMA * tl.exp((GAMMA - 1.) * tl.log(one_m))
    loss = -at * mod * log_pt
    dpt = (2. * t - 1.) * p * (1. - p)
    dx = -at * (mod * (t - p) - dmod * dpt * log_pt)
    tl.store(LOSS + offs, loss, mask=m)
    tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=m)


# ---------------------------------------------------------------------------------------------------------------
# bilinear upsample (align_corners=False) of NCHW planes to any size, the four neighbours gathered


@triton.jit
def upsample_bilinear(X, Y, H, W, OH, OW, scale_h, scale_w, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nc = tl.program_id(1)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < OH * OW
    oy = offs // OW
    ox = offs % OW
    sy = tl.maximum((oy.to(tl.float32) + 0.5) * scale_h - 0.5, 0.)
    sx = tl.maximum((ox.to(tl.float32) + 0.5) * scale_w - 0.5, 0.)
    y0 = sy.to(tl.int32)
    x0 = sx.to(tl.int32)
    y1 = tl.minimum(y0 + 1, H - 1)
    x1 = tl.minimum(x0 + 1, W - 1)
    ly = sy - y0
    lx = sx - x0
    base = X + nc.to(tl.int64) * H * W
    v00 = tl.load(base + y0 * W + x0, mask=m, other=0.)
    v01 = tl.load(base + y0 * W + x1, mask=m, other=0.)
    v10 = tl.load(base + y1 * W + x0, mask=m, other=0.)
    v11 = tl.load(base + y1 * W + x1, mask=m, other=0.)
    out = (1. - ly) * ((1. - lx) * v00 + lx * v01) + ly * ((1. - lx) * v10 + lx * v11)
    tl.store(Y + nc.to(tl.int64) * OH * OW + offs, out, mask=m)


# ===============================================================================================================
# cases: inputs, launches, references

# selective scan -----------------------------------------------------------------------------------------------------


def _ssm_inputs(size, mk):
    import torch

    Bn, L, D, N = size
    return dict(x=mk((Bn, L, D), torch.bfloat16), dt=mk((Bn, L, D), torch.float32, "small"),
                a=-mk((D, N), torch.float32, "unit"), b=mk((Bn, L, N), torch.bfloat16, "small"),
                c=mk((Bn, L, N), torch.bfloat16, "small"), dskip=mk((D,), torch.float32),
                y=mk((Bn, L, D), torch.float32, "out"))


def _ssm_launch(x, cfg):
    meta, opts = split(cfg)
    Bn, L, D = x["x"].shape
    selective_scan[(Bn, D)](x["x"], x["dt"], x["a"], x["b"], x["c"], x["dskip"], x["y"], L, D,
                            N=x["a"].shape[1], **meta, **opts)


def _ssm_ref(x):
    import torch

    xx, dt = x["x"].double(), torch.nn.functional.softplus(x["dt"].double())
    a, b, c = x["a"].double(), x["b"].double(), x["c"].double()
    Bn, L, D = xx.shape
    h = torch.zeros(Bn, D, a.shape[1], dtype=torch.float64)
    ys = []
    for t in range(L):
        h = torch.exp(dt[:, t, :, None] * a[None]) * h + dt[:, t, :, None] * b[:, t, None, :] * xx[:, t, :, None]
        ys.append((h * c[:, t, None, :]).sum(-1) + x["dskip"].double() * xx[:, t])
    return {"y": torch.stack(ys, 1)}


# flash decoding ----------------------------------------------------------------------------------------------------


def _fdec_inputs(size, mk):
    import torch

    Bn, S, H, D = size
    return dict(q=mk((Bn, H, D), torch.float16), k=mk((Bn, S, H, D), torch.float16),
                v=mk((Bn, S, H, D), torch.float16), lens=mk((Bn,), torch.int32, f"lens:{S}"),
                opart=mk((Bn * H * 16, D), torch.float32, "out"), lsepart=mk((Bn * H * 16,), torch.float32, "out"),
                o=mk((Bn, H, D), torch.float16, "out"))


def _fdec_launch(x, cfg):
    meta, opts = split(cfg)
    splits = meta.pop("SPLITS")
    Bn, S, H, D = x["k"].shape
    k = x["k"]
    decode_split[(Bn * H, splits)](x["q"], k, x["v"], x["lens"], x["opart"], x["lsepart"], D ** -0.5, H,
                                   cdiv(S, splits), k.stride(0), k.stride(1), k.stride(2), splits, D=D, **meta,
                                   **opts)
    decode_combine[(Bn * H,)](x["opart"], x["lsepart"], x["o"], splits, D=D, BLOCK_S=triton.next_power_of_2(splits),
                              num_warps=1)


def _fdec_ref(x):
    import torch

    q, k, v = x["q"].double(), x["k"].double(), x["v"].double()
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        n = int(x["lens"][b])
        s = torch.einsum("hd,shd->hs", q[b], k[b, :n]) * q.shape[-1] ** -0.5
        out[b] = torch.einsum("hs,shd->hd", torch.softmax(s, -1), v[b, :n])
    return {"o": out}


def _fdec_moves(x):
    return sum(int(n) for n in x["lens"].cpu()) * x["k"].shape[2] * x["k"].shape[3] * 2 * 2


# block-sparse matmul -----------------------------------------------------------------------------------------------


def _bsr_inputs(size, mk):
    import torch

    M, N, K = size
    return dict(a=mk((M, K), torch.float16), b=mk((K, N), torch.float16), c=mk((M, N), torch.float16, "out"))


def _bsr_layout(x, block):
    """The CSR table of A's nonzero blocks at `block` (a fixed pattern per block size, ~35 % dense, the second block
    row empty), built once per inputs; x["amask"] the dense element mask the reference applies."""
    import torch

    key = f"_lut{block}"
    if key not in x:
        M, K = x["a"].shape
        mb, kb = cdiv(M, block), cdiv(K, block)
        g = torch.Generator().manual_seed(1000 + block)
        lay = torch.rand(mb, kb, generator=g) < 0.35
        lay[0, 0] = True
        if mb > 1:
            lay[1] = False
        counts = lay.sum(1)
        rowptr = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32)
        kidx = lay.nonzero()[:, 1].to(torch.int32)
        mask = lay.repeat_interleave(block, 0).repeat_interleave(block, 1)[:M, :K]
        dev = x["a"].device
        x[key] = (rowptr.to(dev), kidx.to(dev), mask, int(lay.sum()))
    return x[key]


def _bsr_launch(x, cfg):
    meta, opts = split(cfg)
    M, K = x["a"].shape
    N = x["b"].shape[1]
    rowptr, kidx, mask, _ = _bsr_layout(x, meta["BLOCK"])
    x["amask"] = mask
    bsr_matmul[(cdiv(M, meta["BLOCK"]), cdiv(N, meta["BN"]))](x["a"], x["b"], x["c"], rowptr, kidx, M, N, K,
                                                               x["a"].stride(0), x["b"].stride(0), x["c"].stride(0),
                                                               **meta, **opts)


def _bsr_ref(x):
    return {"c": (x["a"].double() * x["amask"].double()) @ x["b"].double()}


def _bsr_flop(x):
    block = next(int(k[4:]) for k in x if k.startswith("_lut"))
    return ("flop", 2 * x[f"_lut{block}"][3] * block * block * x["b"].shape[1])


# implicit-GEMM conv --------------------------------------------------------------------------------------------------


def _conv_inputs(size, mk):
    import torch

    Nb, H, W, C, F = size
    return dict(x=mk((Nb, H, W, C), torch.float16), w=mk((3, 3, C, F), torch.float16, "small"),
                y=mk((Nb, H, W, F), torch.float16, "out"))


def _conv_launch(x, cfg):
    meta, opts = split(cfg)
    Nb, H, W, C = x["x"].shape
    F = x["w"].shape[3]
    conv3x3_nhwc_igemm[(cdiv(Nb * H * W, meta["BM"]), cdiv(F, meta["BF"]))](x["x"], x["w"], x["y"], Nb, H, W, C, F,
                                                                             **meta, **opts)


def _conv_ref(x):
    import torch

    xx = x["x"].double().permute(0, 3, 1, 2)
    w = x["w"].double().permute(3, 2, 0, 1)
    return {"y": torch.nn.functional.conv2d(xx, w, padding=1).permute(0, 2, 3, 1)}


def _conv_flop(x):
    Nb, H, W, C = x["x"].shape
    return ("flop", 2 * Nb * H * W * C * 9 * x["w"].shape[3])


# KL divergence -------------------------------------------------------------------------------------------------------


def _kl_inputs(size, mk):
    import torch

    Bn, V = size
    return dict(inp=mk((Bn, V), torch.float32, "logp"), tgt=mk((Bn, V), torch.float32, "probs"),
                loss=mk((Bn,), torch.float32, "out"), dinp=mk((Bn, V), torch.bfloat16, "out"))


def _kl_launch(x, cfg):
    meta, opts = split(cfg)
    Bn, V = x["inp"].shape
    kl_div_fwd_bwd[(Bn,)](x["inp"], x["tgt"], x["loss"], x["dinp"], V, x["inp"].stride(0), 1.0 / Bn, **meta, **opts)


def _kl_ref(x):
    import torch

    inp = x["inp"].double().requires_grad_()
    Bn = inp.shape[0]
    loss = torch.nn.functional.kl_div(inp, x["tgt"].double(), reduction="none").sum(-1) / Bn
    loss.sum().backward()
    return {"loss": loss.detach(), "dinp": inp.grad}


def _kl_check(x, ref):
    close("loss", x["loss"], ref["loss"], 1e-4)
    close("dinp", x["dinp"], ref["dinp"], 1e-2)  # bf16


# QK norm + rope ------------------------------------------------------------------------------------------------------


def _qkr_inputs(size, mk):
    import torch

    T, HQ, HK, D, P = size
    return dict(qkv=mk((T, (HQ + 2 * HK) * D), torch.bfloat16), pos=mk((T,), torch.int32, f"index:{P}"),
                cs=mk((P, D), torch.float32, "cos_sin"), qw=mk((D,), torch.float32, "unit"),
                kw=mk((D,), torch.float32, "unit"), q=mk((T, HQ, D), torch.bfloat16, "out"),
                k=mk((T, HK, D), torch.bfloat16, "out"), HQ=HQ, HK=HK)


def _qkr_launch(x, cfg):
    meta, opts = split(cfg)
    T, D = x["qkv"].shape[0], x["qw"].shape[0]
    qk_norm_rope[(T, x["HQ"] + x["HK"])](x["qkv"], x["pos"], x["cs"], x["qw"], x["kw"], x["q"], x["k"], x["HQ"],
                                         x["HK"], x["qkv"].stride(0), 1e-6, D=D, **meta, **opts)


def _qkr_ref(x):
    import torch

    T, HQ, HK, D = x["qkv"].shape[0], x["HQ"], x["HK"], x["qw"].shape[0]
    heads = x["qkv"].double().view(T, HQ + 2 * HK, D)
    cs = x["cs"].double()[x["pos"].long()]
    cos, sin = cs[:, None, : D // 2], cs[:, None, D // 2:]

    def one(h, w):
        y = h * torch.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6) * w.double()
        y1, y2 = y[..., : D // 2], y[..., D // 2:]
        return torch.cat([y1 * cos - y2 * sin, y2 * cos + y1 * sin], -1)

    return {"q": one(heads[:, :HQ], x["qw"]), "k": one(heads[:, HQ:HQ + HK], x["kw"])}


# column max by atomics -----------------------------------------------------------------------------------------------


def _cmax_inputs(size, mk):
    import torch

    M, N = size
    amax = mk((N,), torch.float32, "zeros")
    return dict(x=mk((M, N), torch.bfloat16, "offset") * -1, amax=amax,
                cmax=torch.full((N,), float("-inf"), dtype=torch.float32, device=amax.device))


def _cmax_launch(x, cfg):
    meta, opts = split(cfg)
    M, N = x["x"].shape
    col_max_atomic[(cdiv(M, meta["BM"]), cdiv(N, meta["BN"]))](x["x"], x["amax"], x["cmax"], M, N, x["x"].stride(0),
                                                                **meta, **opts)


def _cmax_ref(x):
    xx = x["x"].double()
    return {"amax": xx.abs().amax(0), "cmax": xx.amax(0)}


# bucket accumulation under a lock ----------------------------------------------------------------------------------


def _lock_inputs(size, mk):
    import torch

    M, N, NB = size
    return dict(x=mk((M, N), torch.float16), bucket=mk((M,), torch.int32, f"index:{NB}"),
                out=mk((NB, N), torch.float32, "zeros"), count=mk((NB,), torch.int32, "zeros"),
                locks=mk((NB,), torch.int32, "zeros"))


def _lock_launch(x, cfg):
    meta, opts = split(cfg)
    M, N = x["x"].shape
    bucket_accum_lock[(M,)](x["x"], x["bucket"], x["out"], x["count"], x["locks"], N, x["x"].stride(0),
                            BLOCK_N=triton.next_power_of_2(N), **opts)


def _lock_ref(x):
    import torch

    nb = x["out"].shape[0]
    out = torch.zeros(nb, x["x"].shape[1], dtype=torch.float64).index_add_(0, x["bucket"].long(), x["x"].double())
    return {"out": out, "count": torch.bincount(x["bucket"].long(), minlength=nb).to(torch.int32),
            "locks": torch.zeros(nb, dtype=torch.int32)}


# ALiBi causal softmax ------------------------------------------------------------------------------------------------


def _alibi_inputs(size, mk):
    import torch

    Bn, H, Lq, Lk = size
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)], dtype=torch.float32)
    return dict(s=mk((Bn, H, Lq, Lk), torch.float32, "nonfinite"), slopes=slopes.to(mk.device),
                p=mk((Bn, H, Lq, Lk), torch.float32, "out"))


def _alibi_launch(x, cfg):
    meta, opts = split(cfg)
    Bn, H, Lq, Lk = x["s"].shape
    s = x["s"]
    alibi_causal_softmax[(cdiv(Lq, meta["BM"]), H, Bn)](s, x["p"], x["slopes"], Lq, Lk, s.stride(0), s.stride(1),
                                                         s.stride(2), 0.125, BN=triton.next_power_of_2(Lk), **meta,
                                                         **opts)


def _alibi_ref(x):
    import torch

    Bn, H, Lq, Lk = x["s"].shape
    i = torch.arange(Lq, dtype=torch.float64)[:, None] + (Lk - Lq)
    j = torch.arange(Lk, dtype=torch.float64)[None, :]
    z = x["s"].double() * 0.125 + x["slopes"].double()[:, None, None] * (j - i)
    z = z.masked_fill(j > i, float("-inf"))
    return {"p": torch.softmax(z, -1)}


def _alibi_check(x, ref):
    close_nonfinite("p", x["p"], ref["p"], 1e-4)


# int64 permutation gather --------------------------------------------------------------------------------------------

_PERM_MULT, _PERM_ADD = 2654435761, 3_000_000_019


def _perm_inputs(size, mk):
    import torch

    (n,) = size
    return dict(x=mk((n,), torch.float32), y=mk((n,), torch.float32, "out"), idx=mk((n,), torch.int64, "out"))


def _perm_launch(x, cfg):
    meta, opts = split(cfg)
    n = x["x"].numel()
    perm_gather_i64[(cdiv(n, meta["BLOCK"]),)](x["x"], x["y"], x["idx"], n, _PERM_MULT, _PERM_ADD, **meta, **opts)


def _perm_ref(x):
    import torch

    n = x["x"].numel()
    src = (torch.arange(n, dtype=torch.int64) * _PERM_MULT + _PERM_ADD) % n
    return {"idx": src, "y": x["x"].double()[src]}


# block-pointer blur --------------------------------------------------------------------------------------------------


def _blur_inputs(size, mk):
    import torch

    NI, H, W = size
    wts = torch.tensor([1.0, 2.0, 1.0, 2.0, 4.0, 2.0, 1.0, 2.0, 1.0], dtype=torch.float32) / 16
    return dict(x=mk((NI, H, W), torch.float16), w=wts.to(mk.device), y=mk((NI, H, W), torch.float16, "out"))


def _blur_launch(x, cfg):
    meta, opts = split(cfg)
    NI, H, W = x["x"].shape
    grid = (cdiv(H, meta["BH"]) * cdiv(W, meta["BW"]), NI)
    blur3x3_block_ptr[grid](x["x"], x["y"], x["w"], H, W, x["x"].stride(0), x["x"].stride(1), **meta, **opts)


def _blur_ref(x):
    import torch

    w = x["w"].double().view(1, 1, 3, 3)
    return {"y": torch.nn.functional.conv2d(x["x"].double()[:, None], w, padding=1)[:, 0]}


# Sinkhorn ------------------------------------------------------------------------------------------------------------

_SK = dict(eps=0.1, tol=1e-4, max_iter=500)


def _sk_inputs(size, mk):
    import torch

    NB, R, C = size
    a = mk((NB, R), torch.float32, "unit")
    b = mk((NB, C), torch.float32, "unit")
    return dict(cost=mk((NB, R, C), torch.float32, "unit") - 0.25, a=a / a.sum(-1, keepdim=True),
                b=b / b.sum(-1, keepdim=True), p=mk((NB, R, C), torch.float32, "out"),
                iters=mk((NB,), torch.int32, "out"))


def _sk_launch(x, cfg):
    meta, opts = split(cfg)
    NB, R, C = x["cost"].shape
    sinkhorn[(NB,)](x["cost"], x["a"], x["b"], x["p"], x["iters"], R, C, 1 / _SK["eps"], _SK["tol"],
                    _SK["max_iter"], BR=triton.next_power_of_2(R), BC=triton.next_power_of_2(C), **opts)


def _sk_check(x, ref):
    import torch

    k = torch.exp(-x["cost"].double() / _SK["eps"])
    a, b = x["a"].double(), x["b"].double()
    it = x["iters"]
    assert bool(((it >= 1) & (it <= _SK["max_iter"])).all()), f"iteration counts {it.tolist()}"
    assert len(set(it.tolist())) > 1 or it.numel() == 1, "every matrix took the same number of iterations"
    for i in range(k.shape[0]):  # the float64 iteration, as many steps as the kernel took
        v = torch.ones_like(b[i])
        for _ in range(int(it[i])):
            u = a[i] / (k[i] @ v)
            v = b[i] / (k[i].T @ u)
        close(f"plan {i}", x["p"][i], u[:, None] * k[i] * v[None, :], 2e-3)
        close(f"column marginals {i}", x["p"][i].double().sum(0), b[i], 1e-4)


# row logsumexp (tuple reduce) --------------------------------------------------------------------------------------


def _lse_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.float32, "nonfinite"), out=mk((M,), torch.float32, "out"))


def _lse_launch(x, cfg):
    meta, opts = split(cfg)
    M, N = x["x"].shape
    logsumexp_rows[(cdiv(M, meta["BLOCK_M"]),)](x["x"], x["out"], M, N, x["x"].stride(0), **meta, **opts)


def _lse_ref(x):
    import torch

    return {"out": torch.logsumexp(x["x"].double(), -1)}


def _lse_check(x, ref):
    close_nonfinite("out", x["out"], ref["out"], 1e-5)


# EMA with cache hints ----------------------------------------------------------------------------------------------

_EMA_DECAY = 0.999


def _ema_inputs(size, mk):
    (n,) = size
    import torch

    e = mk((n,), torch.float32)
    return dict(ema=e, ema0=e.clone(), p=mk((n,), torch.bfloat16, "offset"), half=mk((n,), torch.float16, "out"))


def _ema_launch(x, cfg):
    meta, opts = split(cfg)
    n = x["ema"].numel()
    ema_update_hints[(cdiv(n, meta["BLOCK"]),)](x["ema"], x["p"], x["half"], n, _EMA_DECAY, **meta, **opts)


def _ema_ref(x):
    e = x["ema0"].double() * _EMA_DECAY + (1 - _EMA_DECAY) * x["p"].double()
    return {"ema": e, "half": e}


# paged KV cache scatter --------------------------------------------------------------------------------------------


def _kvc_inputs(size, mk):
    import torch

    T, H, D, NBLK, BS = size
    slots = torch.randperm(NBLK * BS, generator=torch.Generator().manual_seed(T))[:T]
    slots[1::5] = -1  # padding tokens
    return dict(key=mk((T, H, D), torch.float16), value=mk((T, H, D), torch.float16),
                kc=mk((NBLK, H, BS, D), torch.float16, "out"), vc=mk((NBLK, H, BS, D), torch.float16, "out"),
                slots=slots.to(mk.device))


def _kvc_launch(x, cfg):
    meta, opts = split(cfg)
    T, H, D = x["key"].shape
    reshape_and_cache[(T,)](x["key"], x["value"], x["kc"], x["vc"], x["slots"], x["key"].stride(0),
                            x["value"].stride(0), x["kc"].shape[2], H=H, D=D, **meta, **opts)


def _kvc_check(x, ref):
    import torch

    NBLK, H, BS, D = x["kc"].shape
    for src, cache in (("key", "kc"), ("value", "vc")):
        c = x[cache].permute(0, 2, 1, 3).reshape(NBLK * BS, H, D)
        written = torch.zeros(NBLK * BS, dtype=torch.bool)
        for t, s in enumerate(x["slots"].tolist()):
            if s >= 0:
                written[s] = True
                assert torch.equal(c[s], x[src][t]), f"{cache}: slot {s} is not token {t}'s"
        assert bool(torch.isnan(c[~written].float()).all()), f"{cache}: a padding token wrote a slot"


# focal loss ----------------------------------------------------------------------------------------------------------

_FOCAL_ALPHA = 0.25


def _focal_inputs(size, mk):
    import torch

    (n,) = size
    return dict(x=mk((n,), torch.bfloat16, "logits"), t=mk((n,), torch.float32, "keep"),
                loss=mk((n,), torch.float32, "out"), dx=mk((n,), torch.bfloat16, "out"))


def _focal_launch(x, cfg):
    meta, opts = split(cfg)
    n = x["x"].numel()
    sigmoid_focal_fwd_bwd[(cdiv(n, meta["BLOCK"]),)](x["x"], x["t"], x["loss"], x["dx"], n, _FOCAL_ALPHA, **meta,
                                                     **opts)


def _focal_ref_for(gamma):
    def ref(x):
        import torch

        xx = x["x"].double().requires_grad_()
        t = x["t"].double()
        p = torch.sigmoid(xx)
        ce = torch.nn.functional.binary_cross_entropy_with_logits(xx, t, reduction="none")
        pt = p * t + (1 - p) * (1 - t)
        loss = (_FOCAL_ALPHA * t + (1 - _FOCAL_ALPHA) * (1 - t)) * ce * (1 - pt) ** gamma
        loss.sum().backward()
        return {"loss": loss.detach(), "dx": xx.grad}
    return ref


# bilinear upsample ---------------------------------------------------------------------------------------------------


def _up_inputs(size, mk):
    import torch

    NC, H, W, OH, OW = size
    return dict(x=mk((NC, H, W), torch.float32), y=mk((NC, OH, OW), torch.float32, "out"))


def _up_launch(x, cfg):
    meta, opts = split(cfg)
    NC, H, W = x["x"].shape
    OH, OW = x["y"].shape[1:]
    upsample_bilinear[(cdiv(OH * OW, meta["BLOCK"]), NC)](x["x"], x["y"], H, W, OH, OW, H / OH, W / OW, **meta,
                                                          **opts)


def _up_ref(x):
    import torch

    y = torch.nn.functional.interpolate(x["x"].double()[None], size=tuple(x["y"].shape[1:]), mode="bilinear",
                                        align_corners=False)
    return {"y": y[0]}


CASE_DEFS = {
    "h5_selective_scan": Case(_ssm_inputs, _ssm_launch, _ssm_ref,
                              [dict(BLOCK_L=64, num_warps=4), dict(BLOCK_L=128, num_warps=4),
                               dict(BLOCK_L=32, num_warps=2)],
                              gpu_size=(4, 2048, 1024, 16), test_size=(2, 150, 5, 16), tol=2e-3,
                              moves=nbytes("x", "dt", "y")),
    "h5_flash_decode_split": Case(_fdec_inputs, _fdec_launch, _fdec_ref,
                                  [dict(SPLITS=8, BLOCK_N=64, num_warps=4), dict(SPLITS=16, BLOCK_N=32, num_warps=4),
                                   dict(SPLITS=4, BLOCK_N=64, num_warps=8, num_stages=2)],
                                  gpu_size=(16, 8192, 8, 128), test_size=(3, 300, 2, 64), tol=1e-2,
                                  moves=_fdec_moves),
    "h5_bsr_matmul": Case(_bsr_inputs, _bsr_launch, _bsr_ref,
                          [dict(BLOCK=64, BN=128, num_warps=4, num_stages=3),
                           dict(BLOCK=32, BN=64, num_warps=4, num_stages=2),
                           dict(BLOCK=128, BN=128, num_warps=8, num_stages=3)],
                          gpu_size=(4096, 4096, 4096), test_size=(200, 96, 300), moves=_bsr_flop),
    "h5_conv3x3_igemm": Case(_conv_inputs, _conv_launch, _conv_ref,
                             [dict(BM=128, BF=64, BC=32, num_warps=4, num_stages=3),
                              dict(BM=64, BF=64, BC=64, num_warps=4, num_stages=2),
                              dict(BM=128, BF=128, BC=32, num_warps=8, num_stages=3)],
                             gpu_size=(32, 56, 56, 128, 128), test_size=(2, 9, 7, 40, 48), moves=_conv_flop),
    "h5_kl_div": Case(_kl_inputs, _kl_launch, _kl_ref,
                      [dict(BLOCK=2048, num_warps=8), dict(BLOCK=4096, num_warps=8), dict(BLOCK=1024, num_warps=4)],
                      gpu_size=(1024, 32000), test_size=(5, 3000), check=_kl_check, moves=nbytes("inp", "tgt", "dinp")),
    "h5_qk_norm_rope": Case(_qkr_inputs, _qkr_launch, _qkr_ref,
                            [dict(num_warps=1), dict(num_warps=2), dict(num_warps=4)],
                            gpu_size=(16384, 32, 8, 128, 32768), test_size=(7, 4, 2, 64, 50), tol=1e-2,
                            moves=nbytes("qkv", "q", "k")),
    "h5_col_max_atomic": Case(_cmax_inputs, _cmax_launch, _cmax_ref,
                              [dict(BM=64, BN=128, num_warps=4), dict(BM=128, BN=64, num_warps=8),
                               dict(BM=32, BN=256, num_warps=4)],
                              gpu_size=(16384, 8192), test_size=(300, 200), tol=1e-6, moves=nbytes("x")),
    "h5_bucket_lock": Case(_lock_inputs, _lock_launch, _lock_ref,
                           [dict(num_warps=4), dict(num_warps=1), dict(num_warps=8)],
                           gpu_size=(65536, 256, 64), test_size=(60, 100, 7), tol=1e-5, moves=nbytes("x")),
    "h5_alibi_softmax_3d": Case(_alibi_inputs, _alibi_launch, _alibi_ref,
                                [dict(BM=16, num_warps=4), dict(BM=4, num_warps=4), dict(BM=32, num_warps=8)],
                                gpu_size=(4, 32, 512, 1024), test_size=(2, 3, 20, 50), check=_alibi_check,
                                moves=nbytes("s", "p")),
    "h5_perm_gather_i64": Case(_perm_inputs, _perm_launch, _perm_ref,
                               [dict(BLOCK=1024, num_warps=4), dict(BLOCK=256, num_warps=2),
                                dict(BLOCK=4096, num_warps=8)],
                               gpu_size=(1 << 24,), test_size=(5000,), tol=1e-7, moves=nbytes("x", "y", "idx")),
    "h5_blur_block_ptr": Case(_blur_inputs, _blur_launch, _blur_ref,
                              [dict(BH=32, BW=32, num_warps=4), dict(BH=16, BW=64, num_warps=4),
                               dict(BH=64, BW=64, num_warps=8)],
                              gpu_size=(64, 1024, 1024), test_size=(2, 45, 70), tol=2e-3, moves=nbytes("x", "y")),
    "h5_sinkhorn_while": Case(_sk_inputs, _sk_launch, None,
                              [dict(num_warps=4), dict(num_warps=1), dict(num_warps=8)],
                              gpu_size=(4096, 64, 64), test_size=(5, 13, 20), check=_sk_check,
                              moves=nbytes("cost", "p")),
    "h5_logsumexp_tuple": Case(_lse_inputs, _lse_launch, _lse_ref,
                               [dict(BLOCK_M=4, BLOCK_N=512, num_warps=4), dict(BLOCK_M=1, BLOCK_N=2048, num_warps=8),
                                dict(BLOCK_M=16, BLOCK_N=128, num_warps=4)],
                               gpu_size=(8192, 8192), test_size=(9, 1500), check=_lse_check, moves=nbytes("x")),
    "h5_ema_cache_hints": Case(_ema_inputs, _ema_launch, _ema_ref,
                               [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8),
                                dict(BLOCK=512, num_warps=2)],
                               gpu_size=(1 << 25,), test_size=(10000,), tol=1e-3,
                               moves=nbytes("ema", "ema", "p", "half")),
    "h5_reshape_and_cache": Case(_kvc_inputs, _kvc_launch, None,
                                 [dict(num_warps=4), dict(num_warps=1), dict(num_warps=8)],
                                 gpu_size=(8192, 8, 128, 1024, 16), test_size=(23, 2, 32, 8, 16), check=_kvc_check,
                                 moves=nbytes("key", "value", "key", "value")),
    "h5_focal_gamma2": Case(_focal_inputs, _focal_launch, _focal_ref_for(2.0),
                            [dict(GAMMA=2.0, BLOCK=1024, num_warps=4), dict(GAMMA=2.0, BLOCK=4096, num_warps=8)],
                            gpu_size=(1 << 24,), test_size=(5000,), tol=1e-2, moves=nbytes("x", "t", "loss", "dx")),
    "h5_focal_gamma1_5": Case(_focal_inputs, _focal_launch, _focal_ref_for(1.5),
                              [dict(GAMMA=1.5, BLOCK=1024, num_warps=4), dict(GAMMA=1.5, BLOCK=512, num_warps=2)],
                              gpu_size=(1 << 24,), test_size=(5000,), tol=1e-2,
                              moves=nbytes("x", "t", "loss", "dx")),
    "h5_upsample_bilinear": Case(_up_inputs, _up_launch, _up_ref,
                                 [dict(BLOCK=1024, num_warps=4), dict(BLOCK=256, num_warps=2),
                                  dict(BLOCK=2048, num_warps=8)],
                                 gpu_size=(256, 128, 128, 256, 256), test_size=(3, 13, 10, 29, 17), tol=1e-5,
                                 moves=nbytes("x", "y")),
}


CASES, run, bench_inputs, check = screen(CASE_DEFS)
_maker = maker

if __name__ == "__main__":
    from heldout_common import main

    main(CASE_DEFS, check, sys.argv[1:])
