"""A fourth set of held-out kernel texts (issues 13 and 14), written the ways other users write them, on workloads
heldout_texts.py, heldout_texts2.py, heldout_texts3.py and tests/idioms.py do not cover: group norm forward and
backward (per-channel dW / dB by atomics), cross entropy with label smoothing and ignore_index (an early return),
a fused AdamW step (in place), RMS norm backward with dW partial sums over a strided row loop, a W4A16 matmul
dequantizing int4 nibbles (shift / mask) with group scales, GEGLU backward through a tuple-returning helper, softmax
with temperature and a top-p mask (tl.sort + tl.cumsum), 3x3 / stride-2 max pooling with argmax indices over a 2-D
grid (tl.static_range windows), a block-pointer bf16 transpose + scale, a sloppy padded transpose, tl.gather within
rows, an index_add of rows by atomics, a segment sum over sorted keys (a tuple tl.associative_scan + atomics), fp16
attention decode over a KV cache with per-sequence lengths and GQA, bias + dropout + residual backward with a stored
mask, LayerNorm with per-row mean / rstd (constexpr bias branch, hints, several rows a program), a persistent-grid
bias + GELU with a `tanh.approx` inline asm, Gumbel-max sampling from tl.randint (Philox), a Fibonacci hash with
tl.umulhi bucketing, and an fp32 -> fp16 round-toward-zero downcast with exponents read through a bitcast.

    python benchmarks/compile_time.py --texts benchmarks/heldout_texts4.py --dump DIR [case ...]   # CPU, both sides
    python benchmarks/idioms.py --texts benchmarks/heldout_texts4.py [case ...]                    # GPU, timed

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
from heldout_common import close as _close  # noqa: E402
from heldout_common import nbytes as _nbytes  # noqa: E402
from heldout_common import split as _split  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------
# group norm forward: one program per (sample, group), the group's channels contiguous (NCHW), sums in one sweep,
# the normalized values in a second; mean / rstd per (n, g) kept for the backward


@triton.jit
def group_norm_fwd(X, W, B, Y, MEAN, RSTD, C, HW, G, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    n = pid // G
    g = pid % G
    cpg = C // G
    gsize = cpg * HW
    base = n.to(tl.int64) * C * HW + g * gsize
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    for off in tl.range(0, gsize, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        x = tl.load(X + base + idx, mask=idx < gsize, other=0.).to(tl.float32)
        acc += x
        acc2 += x * x
    mean = tl.sum(acc, axis=0) / gsize
    var = tl.sum(acc2, axis=0) / gsize - mean * mean
    rstd = tl.rsqrt(tl.maximum(var, 0.) + eps)
    tl.store(MEAN + pid, mean)
    tl.store(RSTD + pid, rstd)
    for off in tl.range(0, gsize, BLOCK, num_stages=2):
        idx = off + tl.arange(0, BLOCK)
        m = idx < gsize
        c = g * cpg + idx // HW
        x = tl.load(X + base + idx, mask=m, other=0.).to(tl.float32)
        w = tl.load(W + c, mask=m, other=1.)
        b = tl.load(B + c, mask=m, other=0.)
        tl.store(Y + base + idx, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty), mask=m)


# group norm backward: per channel of the group the sums of dy * xhat and dy go to dW / dB by one scalar atomic each
# (summed over the batch by the atomics), the group's two reductions give dx in a second sweep


@triton.jit
def group_norm_bwd(X, DY, W, MEAN, RSTD, DX, DW, DB, C, HW, G, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    n = pid // G
    g = pid % G
    cpg = C // G
    base = n.to(tl.int64) * C * HW + g * cpg * HW
    mean = tl.load(MEAN + pid)
    rstd = tl.load(RSTD + pid)
    sum_dyw = 0.
    sum_dywx = 0.
    for ci in range(cpg):
        c = g * cpg + ci
        w = tl.load(W + c).to(tl.float32)
        a_dy = tl.zeros([BLOCK], dtype=tl.float32)
        a_dyx = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, HW, BLOCK):
            hw = off + tl.arange(0, BLOCK)
            m = hw < HW
            x = tl.load(X + base + ci * HW + hw, mask=m, other=0.).to(tl.float32)
            dy = tl.load(DY + base + ci * HW + hw, mask=m, other=0.).to(tl.float32)
            xhat = (x - mean) * rstd
            a_dy += dy
            a_dyx += tl.where(m, dy * xhat, 0.)
        s_dy = tl.sum(a_dy, axis=0)
        s_dyx = tl.sum(a_dyx, axis=0)
        tl.atomic_add(DW + c, s_dyx)
        tl.atomic_add(DB + c, s_dy)
        sum_dyw += s_dy * w
        sum_dywx += s_dyx * w
    inv = 1.0 / (cpg * HW)
    c1 = sum_dywx * inv
    c2 = sum_dyw * inv
    for ci in range(cpg):
        w = tl.load(W + g * cpg + ci).to(tl.float32)
        for off in range(0, HW, BLOCK):
            hw = off + tl.arange(0, BLOCK)
            m = hw < HW
            x = tl.load(X + base + ci * HW + hw, mask=m, other=0.).to(tl.float32)
            dy = tl.load(DY + base + ci * HW + hw, mask=m, other=0.).to(tl.float32)
            xhat = (x - mean) * rstd
            dx = (dy * w - (xhat * c1 + c2)) * rstd
            tl.store(DX + base + ci * HW + hw, dx.to(DX.dtype.element_ty), mask=m)


# ---------------------------------------------------------------------------------------------------------------
# cross entropy with label smoothing and ignore_index (Liger's way: the ignored row returns early with zero grads),
# one row a program, the online max / sum and the sum of logits in one sweep, the gradient in a second; the loss is
# the mean over the rows not ignored (their count passed in)


@triton.jit
def cross_entropy_ls(LOGITS, LABELS, LOSS, DLOGITS, V, stride, ignore_index, smoothing, inv_n_valid,
                     BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    label = tl.load(LABELS + row)
    x_row = LOGITS + row * stride
    d_row = DLOGITS + row * stride
    if label == ignore_index:
        for off in range(0, V, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            tl.store(d_row + cols, tl.zeros([BLOCK], dtype=tl.float32), mask=cols < V)
        tl.store(LOSS + row, 0.)
        return
    m = float("-inf")
    d = 0.
    sx = 0.
    for off in range(0, V, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        sx += tl.sum(tl.where(cols < V, x, 0.), axis=0)
        m = m_new
    lse = m + tl.log(d)
    x_lab = tl.load(x_row + label).to(tl.float32)
    eps_v = smoothing / V
    loss = lse - (1. - smoothing) * x_lab - eps_v * sx
    tl.store(LOSS + row, loss * inv_n_valid)
    for off in range(0, V, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=0.).to(tl.float32)
        g = tl.exp(x - lse) - eps_v
        g = tl.where(cols == label, g - (1. - smoothing), g)
        tl.store(d_row + cols, (g * inv_n_valid).to(DLOGITS.dtype.element_ty), mask=cols < V)


# ---------------------------------------------------------------------------------------------------------------
# a fused AdamW step over flat fp32 parameters with bf16 gradients, updated in place; bias corrections from the host


@triton.jit
def adamw_step(P, G, M, V, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(P + offs, mask=mask)
    g = tl.load(G + offs, mask=mask).to(tl.float32)
    m = tl.load(M + offs, mask=mask)
    v = tl.load(V + offs, mask=mask)
    p = p * (1 - lr * weight_decay)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    denom = tl.sqrt(v / bc2) + eps
    p = p - lr * (m / bc1) / denom
    tl.store(P + offs, p, mask=mask)
    tl.store(M + offs, m, mask=mask)
    tl.store(V + offs, v, mask=mask)


# ---------------------------------------------------------------------------------------------------------------
# RMS norm backward: a grid of programs strides over the rows (row = pid, pid + nprog, ...), dx per row, dW summed
# in registers and written once a program as a partial sum (the host adds the partials)


@triton.jit
def rmsnorm_bwd(DY, X, W, RSTD, DX, DW_PART, M, N, stride, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    cm = cols < N
    w = tl.load(W + cols, mask=cm, other=0.).to(tl.float32)
    dw = tl.zeros_like(w)
    for row in range(pid, M, nprog):
        x = tl.load(X + row * stride + cols, mask=cm, other=0.).to(tl.float32)
        dy = tl.load(DY + row * stride + cols, mask=cm, other=0.).to(tl.float32)
        rstd = tl.load(RSTD + row)
        xhat = x * rstd
        wdy = w * dy
        c = tl.sum(xhat * wdy, axis=0) / N
        dx = (wdy - xhat * c) * rstd
        tl.store(DX + row * stride + cols, dx.to(DX.dtype.element_ty), mask=cm)
        dw += dy * xhat
    tl.store(DW_PART + pid * N + cols, dw, mask=cm)


# ---------------------------------------------------------------------------------------------------------------
# W4A16: fp16 activations times int4 weights packed two to a byte along K ([K / 2, N] uint8, low nibble first),
# zero point 8, one fp16 scale per GROUP rows of K; the nibble picked with a per-row shift (the loads of a byte row
# are repeated for its two K rows), a 1-D grid in row-major tile order


@triton.jit
def mm_w4a16(A, QW, SCALES, C, M, N, K, sam, sqk, ssg, scm, GROUP: tl.constexpr,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BN)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
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
        s = tl.load(SCALES + (k // GROUP) * ssg + offs_n, mask=offs_n < N, other=0.)
        w = ((q >> shifts[:, None]) & 0xF).to(tl.int32) - 8
        b = w.to(tl.float16) * s[None, :]
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        q_ptrs += (BK // 2) * sqk
    c = acc.to(tl.float16)
    tl.store(C + offs_m[:, None] * scm + offs_n[None, :], c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# ---------------------------------------------------------------------------------------------------------------
# GEGLU backward (erf GELU): y = gelu(a) * b; a helper returns the GELU and its derivative as a tuple; a 2-D grid
# (rows, column blocks), int64 row offsets


@triton.jit
def _gelu_and_grad(a):
    cdf = 0.5 * (1.0 + tl.math.erf(a * 0.7071067811865476))
    pdf = tl.exp(-0.5 * a * a) * 0.3989422804014327
    return a * cdf, cdf + a * pdf


@triton.jit
def geglu_bwd(A, B, DY, DA, DB, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    off = row * stride + cols
    a = tl.load(A + off, mask=mask, other=0).to(tl.float32)
    b = tl.load(B + off, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + off, mask=mask, other=0).to(tl.float32)
    g, dg = _gelu_and_grad(a)
    tl.store(DB + off, (dy * g).to(DB.dtype.element_ty), mask=mask)
    tl.store(DA + off, (dy * b * dg).to(DA.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------------------------------------------
# sampling filter: softmax with a temperature, then the top-p (nucleus) mask: the probabilities sorted descending,
# their exclusive cumsum < p keeps an entry, the smallest kept probability is the threshold; renormalized


@triton.jit
def softmax_top_p(X, P, N, stride, inv_temp, top_p, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(X + row * stride + cols, mask=cols < N, other=float("-inf")).to(tl.float32) * inv_temp
    e = tl.exp(x - tl.max(x, axis=0))
    p = e / tl.sum(e, axis=0)
    ps = tl.sort(p, descending=True)
    before = tl.cumsum(ps, axis=0) - ps
    thresh = tl.min(tl.where(before < top_p, ps, 2.0), axis=0)
    kept = tl.where(p >= thresh, p, 0.)
    tl.store(P + row * stride + cols, kept / tl.sum(kept, axis=0), mask=cols < N)


# ---------------------------------------------------------------------------------------------------------------
# 2-D max pooling with argmax indices (PyTorch's return_indices: the flat h * W + w of the first maximum in window
# order), a 2-D grid (planes, output tiles), the window unrolled with tl.static_range


@triton.jit
def maxpool2d_argmax(X, Y, IDX, H, W, OH, OW, KS: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr,
                     BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    tiles_w = tl.cdiv(OW, BLOCK_W)
    oh = (tile // tiles_w) * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    ow = (tile % tiles_w) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    x_plane = X + plane * H * W
    best = tl.full([BLOCK_H, BLOCK_W], float("-inf"), dtype=tl.float32)
    best_i = tl.full([BLOCK_H, BLOCK_W], -1, dtype=tl.int64)
    for kh in tl.static_range(KS):
        for kw in tl.static_range(KS):
            ih = oh * STRIDE - PAD + kh
            iw = ow * STRIDE - PAD + kw
            ok = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            v = tl.load(x_plane + ih * W + iw, mask=ok, other=float("-inf")).to(tl.float32)
            take = ok & ((v > best) | (best_i < 0))
            best = tl.where(take, v, best)
            best_i = tl.where(take, (ih * W + iw).to(tl.int64), best_i)
    out = (oh < OH) & (ow < OW)
    tl.store(Y + plane * OH * OW + oh * OW + ow, best.to(Y.dtype.element_ty), mask=out)
    tl.store(IDX + plane * OH * OW + oh * OW + ow, best_i, mask=out)


# ---------------------------------------------------------------------------------------------------------------
# bf16 transpose + scale through block pointers (boundary checks, zero padding), a 2-D grid


@triton.jit
def transpose_scale_bf16(X, Y, M, N, sxm, sym, scale, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    xb = tl.make_block_ptr(X, shape=(M, N), strides=(sxm, 1), offsets=(pid_m * BM, pid_n * BN),
                           block_shape=(BM, BN), order=(1, 0))
    x = tl.load(xb, boundary_check=(0, 1), padding_option="zero")
    y = (x.to(tl.float32) * scale).to(tl.bfloat16)
    yb = tl.make_block_ptr(Y, shape=(N, M), strides=(sym, 1), offsets=(pid_n * BN, pid_m * BM),
                           block_shape=(BN, BM), order=(1, 0))
    tl.store(yb, tl.trans(y), boundary_check=(0, 1))


# a sloppy padded transpose: Y [N_pad, M_pad] = X^T with zeros in the padding, the transposition left to the store's
# pointers (no tl.trans), one flat grid, int64 row products, an int `other` on a half load


@triton.jit
def transpose_pad(X, Y, M, N, M_pad, N_pad, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M_pad, BLOCK)
    rm = (pid % grid_m) * BLOCK + tl.arange(0, BLOCK)
    rn = (pid // grid_m) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + rm[:, None].to(tl.int64) * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N), other=0)
    tl.store(Y + rn[None, :].to(tl.int64) * M_pad + rm[:, None], x, mask=(rm[:, None] < M_pad) & (rn[None, :] < N_pad))


# ---------------------------------------------------------------------------------------------------------------
# tl.gather within rows: y[i, j] = x[i, idx[i, j]] (a per-row permutation / selection of K of N), BLOCK_M rows a
# program, the row tile held whole


@triton.jit
def gather_in_rows(X, IDX, Y, M, N: tl.constexpr, K, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    cols = tl.arange(0, N)
    ks = tl.arange(0, BLOCK_K)
    x = tl.load(X + rows[:, None] * N + cols[None, :], mask=rmask[:, None], other=0.)
    kmask = rmask[:, None] & (ks[None, :] < K)
    idx = tl.load(IDX + rows[:, None] * K + ks[None, :], mask=kmask, other=0)
    y = tl.gather(x, idx, axis=1)
    tl.store(Y + rows[:, None] * K + ks[None, :], y, mask=kmask)


# index_add of rows: out[idx[i], :] += src[i, :] (an embedding's backward), int64 indices, atomics, a 2-D grid


@triton.jit
def index_add_rows(SRC, IDX, OUT, n_idx, D, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr):
    ii = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
    dd = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    imask = ii < n_idx
    dst = tl.load(IDX + ii, mask=imask, other=0)
    mask = imask[:, None] & (dd[None, :] < D)
    v = tl.load(SRC + ii[:, None].to(tl.int64) * D + dd[None, :], mask=mask, other=0.)
    tl.atomic_add(OUT + dst[:, None] * D + dd[None, :], v, mask=mask, sem="relaxed")


# ---------------------------------------------------------------------------------------------------------------
# segment sum over sorted keys: a segmented inclusive scan (a (key, value) tuple scan) inside the block, the last
# element of each run in the block adds its running sum to out[key] by an atomic


@triton.jit
def _seg_combine(k1, v1, k2, v2):
    return k2, tl.where(k1 == k2, v1 + v2, v2)


@triton.jit
def segment_sum_sorted(KEYS, VALS, OUT, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    k = tl.load(KEYS + offs, mask=m, other=-1)
    v = tl.load(VALS + offs, mask=m, other=0.)
    k_next = tl.load(KEYS + offs + 1, mask=offs + 1 < n, other=-1)
    _, s = tl.associative_scan((k, v), 0, _seg_combine)
    last = m & ((k_next != k) | (tl.arange(0, BLOCK) == BLOCK - 1))
    tl.atomic_add(OUT + k, s, mask=last)


# ---------------------------------------------------------------------------------------------------------------
# attention decode: one query token per (batch, head) against a KV cache [B, KVH, S_max, D] with per-sequence
# lengths (a loop bound loaded from memory), grouped heads (H / KVH queries share a KV head), online softmax in
# fp32, no tl.dot (a [BLOCK_N, D] tile reduced along D)


@triton.jit
def attn_decode_kvcache(Q, K, V, O, LENS, sm_scale, H, KVH, sqb, sqh, skb, skh, sks,
                        BLOCK_N: tl.constexpr, D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // (H // KVH)
    seqlen = tl.load(LENS + b)
    d = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + d).to(tl.float32) * sm_scale
    kv_base = b.to(tl.int64) * skb + kvh * skh
    m_i = float("-inf")
    l_i = 0.
    acc = tl.zeros([D], dtype=tl.float32)
    for start in tl.range(0, seqlen, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        nmask = n < seqlen
        k = tl.load(K + kv_base + n[:, None] * sks + d[None, :], mask=nmask[:, None], other=0.)
        s = tl.sum(q[None, :] * k.to(tl.float32), axis=1)
        s = tl.where(nmask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        v = tl.load(V + kv_base + n[:, None] * sks + d[None, :], mask=nmask[:, None], other=0.)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        m_i = m_new
    tl.store(O + b * sqb + h * sqh + d, (acc / l_i).to(O.dtype.element_ty))


# ---------------------------------------------------------------------------------------------------------------
# backward of y = dropout(x + bias) + residual with the dropout mask stored as bytes: dres = dy, dx = dy * keep /
# (1 - p), dbias = column sums of dx by atomics; a 2-D grid (column blocks, row blocks)


@triton.jit
def bias_dropout_res_bwd(DY, KEEP, DX, DRES, DBIAS, M, N, scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    msk = (rows[:, None] < M) & (cols[None, :] < N)
    off = rows[:, None].to(tl.int64) * N + cols[None, :]
    dy = tl.load(DY + off, mask=msk, other=0.)
    keep = tl.load(KEEP + off, mask=msk, other=0) != 0
    dx = tl.where(keep, dy.to(tl.float32) * scale, 0.)
    tl.store(DRES + off, dy, mask=msk)
    tl.store(DX + off, dx.to(DX.dtype.element_ty), mask=msk)
    tl.atomic_add(DBIAS + cols, tl.sum(dx, axis=0), mask=cols < N)


# ---------------------------------------------------------------------------------------------------------------
# LayerNorm forward writing per-row mean and rstd, ROWS rows a program unrolled by tl.static_range (a runtime
# row < M test inside), an optional bias through a constexpr branch, contiguity hints on the column range


@triton.jit
def layernorm_fwd_stats(X, W, B, Y, MEAN, RSTD, M, N, stride, eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
                        HAS_BIAS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.max_contiguous(tl.multiple_of(tl.arange(0, BLOCK_N), BLOCK_N), BLOCK_N)
    cm = cols < N
    w = tl.load(W + cols, mask=cm, other=0.).to(tl.float32)
    if HAS_BIAS:
        bias = tl.load(B + cols, mask=cm, other=0.).to(tl.float32)
    for r in tl.static_range(ROWS):
        row = pid * ROWS + r
        if row < M:
            xp = X + row.to(tl.int64) * stride
            x = tl.load(xp + cols, mask=cm, other=0.).to(tl.float32)
            mean = tl.sum(x, axis=0) / N
            xc = tl.where(cm, x - mean, 0.)
            var = tl.sum(xc * xc, axis=0) / N
            rstd = libdevice.rsqrt(var + eps)
            y = xc * rstd * w
            if HAS_BIAS:
                y = y + bias
            tl.store(Y + row.to(tl.int64) * stride + cols, y.to(Y.dtype.element_ty), mask=cm)
            tl.store(MEAN + row, mean)
            tl.store(RSTD + row, rstd)


# ---------------------------------------------------------------------------------------------------------------
# a persistent-grid bias + GELU(tanh): a fixed number of programs loop over the flat tiles
# (for tile in range(pid, n_tiles, num_programs)), tanh by a one-instruction inline asm


@triton.jit
def _tanh_approx(x):
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def persistent_bias_gelu(X, BIAS, Y, n_elem, N, BLOCK: tl.constexpr):
    n_tiles = tl.cdiv(n_elem, BLOCK)
    for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        offs = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n_elem
        x = tl.load(X + offs, mask=m, other=0.).to(tl.float32)
        b = tl.load(BIAS + offs % N, mask=m, other=0.).to(tl.float32)
        z = x + b
        t = _tanh_approx(0.7978845608028654 * (z + 0.044715 * z * z * z))
        tl.store(Y + offs, (0.5 * z * (1 + t)).to(Y.dtype.element_ty), mask=m)


# ---------------------------------------------------------------------------------------------------------------
# Gumbel-max sampling: uniform noise from tl.randint (Philox, keyed on seed and the element's flat offset; 24 bits
# to a float in (0, 1)), one row a program over a vocabulary loop, the running best score and its index


@triton.jit
def gumbel_sample(LOGITS, OUT, V, stride, seed, inv_temp, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    best = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    best_i = tl.zeros([BLOCK], dtype=tl.int32)
    for off in range(0, V, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < V
        x = tl.load(LOGITS + row * stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
        r = tl.randint(seed, row * V + cols)
        u = ((r >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
        score = x * inv_temp - tl.log(-tl.log(u))
        better = score > best
        best = tl.where(better, score, best)
        best_i = tl.where(better, cols, best_i)
    top = tl.max(best, axis=0)
    idx = tl.min(tl.where(best == top, best_i, V), axis=0)
    tl.store(OUT + row, idx)


# ---------------------------------------------------------------------------------------------------------------
# a Fibonacci hash of int32 keys (uint32 wrap-around multiply and xor-shift), the bucket by Lemire's multiply-high
# (tl.umulhi(h, n_buckets)), stored and counted by atomics


@triton.jit
def hash_bucket_count(KEYS, BUCKET, COUNTS, n, n_buckets, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    k = tl.load(KEYS + offs, mask=m, other=0).to(tl.uint32, bitcast=True)
    h = k * 0x9E3779B1
    h = h ^ (h >> 16)
    bucket = tl.umulhi(h, tl.full([BLOCK], n_buckets, tl.uint32))
    tl.store(BUCKET + offs, bucket.to(tl.int32), mask=m)
    tl.atomic_add(COUNTS + bucket, 1, mask=m)


# ---------------------------------------------------------------------------------------------------------------
# fp32 -> fp16 rounding toward zero (large values saturate at 65504, not inf), and each value's unbiased binary
# exponent read from its bits (a bitcast), stored as int8


@triton.jit
def downcast_rtz_exponent(X, Y, E, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m, other=1.0)
    y = x.to(tl.float16, fp_downcast_rounding="rtz")
    bits = x.to(tl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) - 127
    tl.store(Y + offs, y, mask=m)
    tl.store(E + offs, e.to(tl.int8), mask=m)


# ---------------------------------------------------------------------------------------------------------------
# cases: inputs, launches, references


# group norm ---------------------------------------------------------------------------------------------------------


def _gnf_inputs(size, mk):
    import torch

    N, C, HW, G = size
    return dict(x=mk((N, C, HW), torch.float16, "offset"), w=mk((C,), torch.float32), b=mk((C,), torch.float32),
                y=mk((N, C, HW), torch.float16, "out"), mean=mk((N * G,), torch.float32, "out"),
                rstd=mk((N * G,), torch.float32, "out"), G=G)


def _gnf_launch(x, cfg):
    meta, opts = _split(cfg)
    N, C, HW = x["x"].shape
    G = x["G"]
    group_norm_fwd[(N * G,)](x["x"], x["w"], x["b"], x["y"], x["mean"], x["rstd"], C, HW, G, 1e-5, **meta, **opts)


def _gnf_ref(x):
    N, C, HW = x["x"].shape
    G = x["G"]
    xg = x["x"].double().reshape(N, G, -1)
    mean = xg.mean(-1)
    var = xg.var(-1, unbiased=False)
    rstd = (var + 1e-5).rsqrt()
    y = ((xg - mean[..., None]) * rstd[..., None]).reshape(N, C, HW) * x["w"].double()[:, None] + \
        x["b"].double()[:, None]
    return {"y": y, "mean": mean.reshape(-1), "rstd": rstd.reshape(-1)}


def _gnb_inputs(size, mk):
    import torch

    N, C, HW, G = size
    return dict(x=mk((N, C, HW), torch.float16), dy=mk((N, C, HW), torch.float16), w=mk((C,), torch.float32),
                mean=mk((N * G,), torch.float32, "small"), rstd=mk((N * G,), torch.float32, "unit"),
                dx=mk((N, C, HW), torch.float16, "out"), dw=mk((C,), torch.float32, "zeros"),
                db=mk((C,), torch.float32, "zeros"), G=G)


def _gnb_launch(x, cfg):
    meta, opts = _split(cfg)
    N, C, HW = x["x"].shape
    G = x["G"]
    group_norm_bwd[(N * G,)](x["x"], x["dy"], x["w"], x["mean"], x["rstd"], x["dx"], x["dw"], x["db"], C, HW, G,
                             **meta, **opts)


def _gnb_ref(x):
    N, C, HW = x["x"].shape
    G = x["G"]
    xg, dy, w = x["x"].double().reshape(N, G, -1), x["dy"].double(), x["w"].double()
    mean = x["mean"].double().reshape(N, G, 1)
    rstd = x["rstd"].double().reshape(N, G, 1)
    xh = (xg - mean) * rstd
    wdy = (dy * w[:, None]).reshape(N, G, -1)
    c1 = (wdy * xh).mean(-1, keepdim=True)
    c2 = wdy.mean(-1, keepdim=True)
    dx = ((wdy - (xh * c1 + c2)) * rstd).reshape(N, C, HW)
    return {"dx": dx, "dw": (dy * xh.reshape(N, C, HW)).sum((0, 2)), "db": dy.sum((0, 2))}


# cross entropy -------------------------------------------------------------------------------------------------------


def _ce_inputs(size, mk):
    import torch

    M, V = size
    labels = mk((M,), torch.int32, f"index:{V}").to(torch.int64)
    if M > 3:
        labels[1] = -100
        labels[3] = V - 1
    return dict(logits=mk((M, V), torch.bfloat16), labels=labels, loss=mk((M,), torch.float32, "out"),
                dlogits=mk((M, V), torch.bfloat16, "out"))


def _ce_launch(x, cfg):
    meta, opts = _split(cfg)
    M, V = x["logits"].shape
    n_valid = max(int((x["labels"] != -100).sum().item()), 1) if x["labels"].device.type != "meta" else M
    cross_entropy_ls[(M,)](x["logits"], x["labels"], x["loss"], x["dlogits"], V, x["logits"].stride(0), -100, 0.1,
                           1.0 / n_valid, **meta, **opts)


def _ce_ref(x):
    import torch

    lg = x["logits"].double()
    lab = x["labels"]
    M, V = lg.shape
    valid = lab != -100
    n_valid = max(int(valid.sum()), 1)
    lsm = torch.log_softmax(lg, -1)
    tgt = torch.full_like(lg, 0.1 / V)
    tgt[valid, lab[valid]] += 0.9
    loss = -(tgt * lsm).sum(-1) / n_valid
    grad = (lsm.exp() - tgt) / n_valid
    loss[~valid] = 0
    grad[~valid] = 0
    return {"loss": loss, "dlogits": grad}


# adamw -------------------------------------------------------------------------------------------------------------


_ADAM = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, step=10)


def _adam_inputs(size, mk):
    import torch

    (n,) = size
    p = mk((n,), torch.float32)
    m = mk((n,), torch.float32, "small")
    v = mk((n,), torch.float32, "unit")
    v = v * v * 1e-3
    return dict(p=p, g=mk((n,), torch.bfloat16), m=m, v=v, p0=p.clone(), m0=m.clone(), v0=v.clone())


def _adam_launch(x, cfg):
    meta, opts = _split(cfg)
    n = x["p"].numel()
    a = _ADAM
    adamw_step[(cdiv(n, meta["BLOCK"]),)](x["p"], x["g"], x["m"], x["v"], n, a["lr"], a["beta1"], a["beta2"], a["eps"],
                                          a["weight_decay"], 1 - a["beta1"] ** a["step"], 1 - a["beta2"] ** a["step"],
                                          **meta, **opts)


def _adam_ref(x):
    a = _ADAM
    p, g, m, v = x["p0"].double(), x["g"].double(), x["m0"].double(), x["v0"].double()
    p = p * (1 - a["lr"] * a["weight_decay"])
    m = a["beta1"] * m + (1 - a["beta1"]) * g
    v = a["beta2"] * v + (1 - a["beta2"]) * g * g
    p = p - a["lr"] * (m / (1 - a["beta1"] ** a["step"])) / ((v / (1 - a["beta2"] ** a["step"])).sqrt() + a["eps"])
    return {"p": p, "m": m, "v": v}


def _adam_check(x, ref):
    for k in ("m", "v"):
        _close(k, x[k], ref[k], 1e-5)
    # the step is ~1e-3 of p: compare the update itself
    _close("p - p0", x["p"].double() - x["p0"].double(), ref["p"] - x["p0"].double(), 1e-4)


# rms norm backward -------------------------------------------------------------------------------------------------


def _rmsb_inputs(size, mk):
    import torch

    M, N, P = size
    return dict(dy=mk((M, N), torch.bfloat16), x=mk((M, N), torch.bfloat16), w=mk((N,), torch.float32),
                rstd=mk((M,), torch.float32, "unit"), dx=mk((M, N), torch.bfloat16, "out"),
                dw_part=mk((P, N), torch.float32, "out"))


def _rmsb_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    rmsnorm_bwd[(x["dw_part"].shape[0],)](x["dy"], x["x"], x["w"], x["rstd"], x["dx"], x["dw_part"], M, N,
                                          x["x"].stride(0), BLOCK_N=triton.next_power_of_2(N), **meta, **opts)


def _rmsb_ref(x):
    dy, xx, w, rstd = x["dy"].double(), x["x"].double(), x["w"].double(), x["rstd"].double()[:, None]
    xhat = xx * rstd
    wdy = w * dy
    c = (xhat * wdy).mean(1, keepdim=True)
    return {"dx": (wdy - xhat * c) * rstd, "dw": (dy * xhat).sum(0)}


def _rmsb_check(x, ref):
    _close("dx", x["dx"], ref["dx"], 1e-2)
    _close("dw (sum of partials)", x["dw_part"].double().sum(0), ref["dw"], 1e-5)


# w4a16 matmul ------------------------------------------------------------------------------------------------------


def _w4_inputs(size, mk):
    import torch

    M, N, K, GROUP = size
    return dict(a=mk((M, K), torch.float16, "small"), qw=mk((K // 2, N), torch.uint8, "bytes"),
                scales=mk((K // GROUP, N), torch.float16, "scale"), c=mk((M, N), torch.float16, "out"), GROUP=GROUP)


def _w4_launch(x, cfg):
    meta, opts = _split(cfg)
    a, qw, c = x["a"], x["qw"], x["c"]
    M, K = a.shape
    N = qw.shape[1]
    mm_w4a16[(cdiv(M, meta["BM"]) * cdiv(N, meta["BN"]),)](a, qw, x["scales"], c, M, N, K, a.stride(0), qw.stride(0),
                                                           x["scales"].stride(0), c.stride(0), GROUP=x["GROUP"],
                                                           **meta, **opts)


def _w4_ref(x):
    import torch

    q = x["qw"].to(torch.int64)
    K = q.shape[0] * 2
    w = torch.stack([q & 0xF, q >> 4], dim=1).reshape(K, -1).double() - 8
    s = x["scales"].double().repeat_interleave(x["GROUP"], 0)
    return {"c": x["a"].double() @ (w * s)}


# geglu backward ----------------------------------------------------------------------------------------------------


def _geglu_inputs(size, mk):
    import torch

    M, N = size
    return dict(a=mk((M, N), torch.bfloat16), b=mk((M, N), torch.bfloat16), dy=mk((M, N), torch.bfloat16),
                da=mk((M, N), torch.bfloat16, "out"), db=mk((M, N), torch.bfloat16, "out"))


def _geglu_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["a"].shape
    geglu_bwd[(M, cdiv(N, meta["BLOCK"]))](x["a"], x["b"], x["dy"], x["da"], x["db"], N, x["a"].stride(0), **meta,
                                           **opts)


def _geglu_ref(x):
    import torch

    a = x["a"].double().requires_grad_()
    b = x["b"].double().requires_grad_()
    y = torch.nn.functional.gelu(a) * b
    y.backward(x["dy"].double())
    return {"da": a.grad, "db": b.grad}


# softmax + top-p ---------------------------------------------------------------------------------------------------


def _topp_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.float32, "logits"), p=mk((M, N), torch.float32, "out"))


def _topp_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    softmax_top_p[(M,)](x["x"], x["p"], N, x["x"].stride(0), 1 / 0.7, 0.9, BLOCK_N=triton.next_power_of_2(N), **meta,
                        **opts)


def _topp_ref(x):
    import torch

    p = torch.softmax(x["x"].double() / 0.7, -1)
    ps, order = p.sort(-1, descending=True)
    keep_sorted = (ps.cumsum(-1) - ps) < 0.9
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = torch.where(keep, p, 0.)
    return {"p": kept / kept.sum(-1, keepdim=True)}


# max pooling -------------------------------------------------------------------------------------------------------


def _pool_inputs(size, mk):
    import torch

    N, C, H, W = size
    OH, OW = (H + 2 - 3) // 2 + 1, (W + 2 - 3) // 2 + 1
    return dict(x=mk((N, C, H, W), torch.float16, "ties"), y=mk((N, C, OH, OW), torch.float16, "out"),
                idx=mk((N, C, OH, OW), torch.int64, "out"))


def _pool_launch(x, cfg):
    meta, opts = _split(cfg)
    N, C, H, W = x["x"].shape
    OH, OW = x["y"].shape[2:]
    maxpool2d_argmax[(N * C, cdiv(OH, meta["BLOCK_H"]) * cdiv(OW, meta["BLOCK_W"]))](
        x["x"], x["y"], x["idx"], H, W, OH, OW, KS=3, STRIDE=2, PAD=1, **meta, **opts)


def _pool_ref(x):
    import torch

    y, idx = torch.nn.functional.max_pool2d(x["x"].double(), 3, 2, 1, return_indices=True)
    return {"y": y, "idx": idx}


# transposes --------------------------------------------------------------------------------------------------------


def _trs_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.bfloat16), y=mk((N, M), torch.bfloat16, "out"))


def _trs_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    transpose_scale_bf16[(cdiv(M, meta["BM"]), cdiv(N, meta["BN"]))](x["x"], x["y"], M, N, x["x"].stride(0),
                                                                     x["y"].stride(0), 0.125, **meta, **opts)


def _trs_ref(x):
    return {"y": x["x"].double().T * 0.125}


def _trp_inputs(size, mk):
    import torch

    M, N, PAD = size
    Mp, Np = cdiv(M, PAD) * PAD, cdiv(N, PAD) * PAD
    return dict(x=mk((M, N), torch.float16), y=mk((Np, Mp), torch.float16, "out"))


def _trp_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    Np, Mp = x["y"].shape
    transpose_pad[(cdiv(Mp, meta["BLOCK"]) * cdiv(Np, meta["BLOCK"]),)](x["x"], x["y"], M, N, Mp, Np, **meta, **opts)


def _trp_ref(x):
    import torch

    M, N = x["x"].shape
    y = torch.zeros(x["y"].shape, dtype=torch.float64)
    y[:N, :M] = x["x"].double().T
    return {"y": y}


# gather / index_add ------------------------------------------------------------------------------------------------


def _gat_inputs(size, mk):
    import torch

    M, N, K = size
    return dict(x=mk((M, N), torch.float32), idx=mk((M, K), torch.int32, f"index:{N}"),
                y=mk((M, K), torch.float32, "out"))


def _gat_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    K = x["idx"].shape[1]
    gather_in_rows[(cdiv(M, meta["BLOCK_M"]),)](x["x"], x["idx"], x["y"], M, N, K,
                                                BLOCK_K=triton.next_power_of_2(K), **meta, **opts)


def _gat_ref(x):
    return {"y": x["x"].double().gather(1, x["idx"].long())}


def _iadd_inputs(size, mk):
    import torch

    n_idx, V, D = size
    return dict(src=mk((n_idx, D), torch.float32), idx=mk((n_idx,), torch.int32, f"index:{V}").to(torch.int64),
                out=mk((V, D), torch.float32, "zeros"))


def _iadd_launch(x, cfg):
    meta, opts = _split(cfg)
    n_idx, D = x["src"].shape
    index_add_rows[(cdiv(n_idx, meta["BLOCK_I"]), cdiv(D, meta["BLOCK_D"]))](x["src"], x["idx"], x["out"], n_idx, D,
                                                                            **meta, **opts)


def _iadd_ref(x):
    import torch

    out = torch.zeros(x["out"].shape, dtype=torch.float64)
    return {"out": out.index_add_(0, x["idx"], x["src"].double())}


def _iadd_moves(x):
    return x["src"].numel() * 4 * 2 + x["idx"].numel() * 8


# segment sum ----------------------------------------------------------------------------------------------------------


def _seg_inputs(size, mk):
    import torch

    n, n_seg = size
    return dict(keys=mk((n,), torch.int32, f"sortedint:{n_seg}"), vals=mk((n,), torch.float32),
                out=mk((n_seg,), torch.float32, "zeros"))


def _seg_launch(x, cfg):
    meta, opts = _split(cfg)
    n = x["keys"].numel()
    segment_sum_sorted[(cdiv(n, meta["BLOCK"]),)](x["keys"], x["vals"], x["out"], n, **meta, **opts)


def _seg_ref(x):
    import torch

    out = torch.zeros(x["out"].shape, dtype=torch.float64)
    return {"out": out.index_add_(0, x["keys"].long(), x["vals"].double())}


# attention decode --------------------------------------------------------------------------------------------------


def _dec_inputs(size, mk):
    import torch

    B, H, KVH, S, D = size
    return dict(q=mk((B, H, D), torch.float16), k=mk((B, KVH, S, D), torch.float16),
                v=mk((B, KVH, S, D), torch.float16), lens=mk((B,), torch.int32, f"lens:{S}"),
                o=mk((B, H, D), torch.float16, "out"))


def _dec_launch(x, cfg):
    meta, opts = _split(cfg)
    q, k = x["q"], x["k"]
    B, H, D = q.shape
    KVH = k.shape[1]
    attn_decode_kvcache[(B, H)](q, k, x["v"], x["o"], x["lens"], D ** -0.5, H, KVH, q.stride(0), q.stride(1),
                                k.stride(0), k.stride(1), k.stride(2), D=D, **meta, **opts)


def _dec_ref(x):
    import torch

    q, k, v = x["q"].double(), x["k"].double(), x["v"].double()
    B, H, D = q.shape
    rep = H // k.shape[1]
    o = torch.empty(B, H, D, dtype=torch.float64)
    for b in range(B):
        L = int(x["lens"][b])
        kk = k[b, :, :L].repeat_interleave(rep, 0)
        vv = v[b, :, :L].repeat_interleave(rep, 0)
        s = torch.einsum("hd,hnd->hn", q[b], kk) * D ** -0.5
        o[b] = torch.einsum("hn,hnd->hd", torch.softmax(s, -1), vv)
    return {"o": o}


def _dec_moves(x):
    S = x["k"].shape[2]
    frac = x["lens"].double().mean().item() / S if x["lens"].numel() else 1.0
    return int((x["k"].numel() + x["v"].numel()) * 2 * frac)


# bias + dropout + residual backward --------------------------------------------------------------------------------


def _bdr_inputs(size, mk):
    import torch

    M, N = size
    return dict(dy=mk((M, N), torch.bfloat16), keep=mk((M, N), torch.uint8, "keep"),
                dx=mk((M, N), torch.bfloat16, "out"), dres=mk((M, N), torch.bfloat16, "out"),
                dbias=mk((N,), torch.float32, "zeros"))


def _bdr_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["dy"].shape
    bias_dropout_res_bwd[(cdiv(N, meta["BLOCK_N"]), cdiv(M, meta["BLOCK_M"]))](
        x["dy"], x["keep"], x["dx"], x["dres"], x["dbias"], M, N, 1 / 0.9, **meta, **opts)


def _bdr_ref(x):
    dx = x["dy"].double() * (x["keep"] != 0).double() / 0.9
    return {"dx": dx, "dres": x["dy"].double(), "dbias": dx.sum(0)}


# layernorm with stats ----------------------------------------------------------------------------------------------


def _lns_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.float16, "offset"), w=mk((N,), torch.float16), b=mk((N,), torch.float16),
                y=mk((M, N), torch.float16, "out"), mean=mk((M,), torch.float32, "out"),
                rstd=mk((M,), torch.float32, "out"))


def _lns_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    layernorm_fwd_stats[(cdiv(M, meta["ROWS"]),)](x["x"], x["w"], x["b"], x["y"], x["mean"], x["rstd"], M, N,
                                                   x["x"].stride(0), 1e-6, BLOCK_N=triton.next_power_of_2(N), **meta,
                                                   **opts)


def _lns_ref(x):
    xx = x["x"].double()
    mean = xx.mean(1)
    rstd = (xx.var(1, unbiased=False) + 1e-6).rsqrt()
    y = (xx - mean[:, None]) * rstd[:, None] * x["w"].double()
    return {"y": y, "y_bias": y + x["b"].double(), "mean": mean, "rstd": rstd}


def _lns_check_for(has_bias):
    def f(x, ref):
        _close("y", x["y"], ref["y_bias" if has_bias else "y"], 1e-2)
        _close("mean", x["mean"], ref["mean"], 1e-4)
        _close("rstd", x["rstd"], ref["rstd"], 1e-4)
    return f


# persistent bias + gelu ----------------------------------------------------------------------------------------------


def _pers_inputs(size, mk):
    import torch

    M, N, progs = size
    return dict(x=mk((M, N), torch.bfloat16), bias=mk((N,), torch.bfloat16), y=mk((M, N), torch.bfloat16, "out"),
                progs=progs)


def _pers_launch(x, cfg):
    meta, opts = _split(cfg)
    n = x["x"].numel()
    grid = min(x["progs"] * meta.pop("WAVES"), cdiv(n, meta["BLOCK"]))
    persistent_bias_gelu[(grid,)](x["x"], x["bias"], x["y"], n, x["x"].shape[1], **meta, **opts)


def _pers_ref(x):
    import torch

    z = x["x"].double() + x["bias"].double()
    return {"y": torch.nn.functional.gelu(z, approximate="tanh")}


# gumbel sampling ---------------------------------------------------------------------------------------------------


def _philox_randint(seed, offsets, rounds=10):
    """Triton's tl.randint(seed, offset): the first word of Philox4x32-10 on the counter (offset, 0, 0, 0) and the key
    (seed low word, seed high word), in NumPy."""
    import numpy as np

    M32 = np.uint64(0xFFFFFFFF)
    c0 = offsets.astype(np.uint64) & M32
    c1 = np.zeros_like(c0)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    k0 = np.full_like(c0, seed & 0xFFFFFFFF)
    k1 = np.full_like(c0, (seed >> 32) & 0xFFFFFFFF)
    A, B = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    for _ in range(rounds):
        p0, p2 = A * c0, B * c2
        c0, c1, c2, c3 = ((p2 >> np.uint64(32)) ^ c1 ^ k0, p2 & M32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & M32)
        k0 = (k0 + np.uint64(0x9E3779B9)) & M32
        k1 = (k1 + np.uint64(0xBB67AE85)) & M32
    return c0


_GUMBEL_SEED = 1234


def _gum_inputs(size, mk):
    import torch

    M, V = size
    return dict(logits=mk((M, V), torch.float16), out=mk((M,), torch.int32, "out"))


def _gum_launch(x, cfg):
    meta, opts = _split(cfg)
    M, V = x["logits"].shape
    gumbel_sample[(M,)](x["logits"], x["out"], V, x["logits"].stride(0), _GUMBEL_SEED, 1 / 0.8, **meta, **opts)


def _gum_scores(x):
    import numpy as np
    import torch

    M, V = x["logits"].shape
    r = _philox_randint(_GUMBEL_SEED, np.arange(M * V, dtype=np.int64)).reshape(M, V)
    u = ((r >> np.uint64(8)).astype(np.float64) + 0.5) / 16777216.0
    return x["logits"].double() / 0.8 - torch.from_numpy(np.log(-np.log(u)))


def _gum_check(x, ref):
    import torch

    s = _gum_scores(x)
    got = x["out"].long()
    assert ((got >= 0) & (got < s.shape[1])).all(), "sample index out of range (or unwritten)"
    chosen = s.gather(1, got[:, None])[:, 0]
    best = s.max(1).values
    assert (best - chosen <= 1e-4 * (1 + best.abs())).all(), \
        f"{int((best - chosen > 1e-4).sum())} rows sampled a non-maximal score: {(best - chosen).max().item():.3g}"
    assert (got == s.argmax(1)).double().mean() > 0.9, "samples disagree with the Philox reference"
    del torch


# hash buckets ---------------------------------------------------------------------------------------------------------


def _hash_inputs(size, mk):
    import torch

    n, nb = size
    return dict(keys=mk((n,), torch.int32, "bits32"), bucket=mk((n,), torch.int32, "out"),
                counts=mk((nb,), torch.int32, "zeros"))


def _hash_launch(x, cfg):
    meta, opts = _split(cfg)
    n = x["keys"].numel()
    hash_bucket_count[(cdiv(n, meta["BLOCK"]),)](x["keys"], x["bucket"], x["counts"], n, x["counts"].numel(), **meta,
                                                 **opts)


def _hash_ref(x):
    import numpy as np
    import torch

    k = x["keys"].numpy().view(np.uint32).astype(np.uint64)
    h = (k * np.uint64(0x9E3779B1)) & np.uint64(0xFFFFFFFF)
    h = h ^ (h >> np.uint64(16))
    nb = x["counts"].numel()
    b = torch.from_numpy(((h * np.uint64(nb)) >> np.uint64(32)).astype(np.int32))
    return {"bucket": b, "counts": torch.bincount(b.long(), minlength=nb).to(torch.int32)}


# rtz downcast ---------------------------------------------------------------------------------------------------------


def _rtz_inputs(size, mk):
    import torch

    (n,) = size
    return dict(x=mk((n,), torch.float32, "fp16range"), y=mk((n,), torch.float16, "out"),
                e=mk((n,), torch.int8, "out"))


def _rtz_launch(x, cfg):
    meta, opts = _split(cfg)
    n = x["x"].numel()
    downcast_rtz_exponent[(cdiv(n, meta["BLOCK"]),)](x["x"], x["y"], x["e"], n, **meta, **opts)


def _rtz_check(x, ref):
    import torch

    xx = x["x"]
    rn = xx.to(torch.float16)
    bits = rn.view(torch.int16).clone()
    over = rn.float().abs() > xx.abs()  # round-to-nearest went away from zero: one ulp back (inf -> 65504)
    bits[over] -= 1
    want = bits.view(torch.float16)
    got = x["y"]
    bad = got.view(torch.int16) != want.view(torch.int16)
    assert not bad.any(), f"{int(bad.sum())} rtz values differ, e.g. x={xx[bad][:4].tolist()} " \
                          f"got={got[bad][:4].tolist()} want={want[bad][:4].tolist()}"
    e = ((xx.view(torch.int32) >> 23) & 0xFF) - 127
    assert torch.equal(x["e"].to(torch.int32), e.to(torch.int8).to(torch.int32)), "exponents differ"


MM_CONFIGS = [dict(BM=128, BN=128, BK=64, num_warps=4, num_stages=4),
              dict(BM=128, BN=256, BK=64, num_warps=8, num_stages=3),
              dict(BM=64, BN=64, BK=128, num_warps=4, num_stages=3)]

CASE_DEFS = {
    "h4_group_norm_fwd": Case(_gnf_inputs, _gnf_launch, _gnf_ref,
                              [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8),
                               dict(BLOCK=512, num_warps=4)],
                              gpu_size=(32, 512, 4096, 32), test_size=(2, 12, 50, 3), tol=2e-3,
                              moves=_nbytes("x", "x", "y")),
    "h4_group_norm_bwd": Case(_gnb_inputs, _gnb_launch, _gnb_ref,
                              [dict(BLOCK=1024, num_warps=4), dict(BLOCK=2048, num_warps=8),
                               dict(BLOCK=256, num_warps=2)],
                              gpu_size=(16, 512, 4096, 32), test_size=(3, 8, 40, 2), tol=2e-3,
                              moves=_nbytes("x", "dy", "x", "dy", "dx")),
    "h4_cross_entropy_ls": Case(_ce_inputs, _ce_launch, _ce_ref,
                                [dict(BLOCK=4096, num_warps=8), dict(BLOCK=2048, num_warps=4),
                                 dict(BLOCK=8192, num_warps=16)],
                                gpu_size=(1024, 32768), test_size=(6, 1000), tol=1e-2,
                                moves=_nbytes("logits", "logits", "dlogits")),
    "h4_adamw": Case(_adam_inputs, _adam_launch, _adam_ref,
                     [dict(BLOCK=1024, num_warps=4), dict(BLOCK=2048, num_warps=8), dict(BLOCK=512, num_warps=2)],
                     gpu_size=(1 << 22,), test_size=(5000,), check=_adam_check,
                     moves=_nbytes("p", "g", "m", "v", "p", "m", "v")),
    "h4_rmsnorm_bwd": Case(_rmsb_inputs, _rmsb_launch, _rmsb_ref,
                           [dict(num_warps=4), dict(num_warps=8), dict(num_warps=16)],
                           gpu_size=(8192, 4096, 264), test_size=(23, 300, 5), check=_rmsb_check,
                           moves=_nbytes("dy", "x", "dx")),
    "h4_mm_w4a16": Case(_w4_inputs, _w4_launch, _w4_ref, MM_CONFIGS,
                        gpu_size=(4096, 4096, 4096, 128), test_size=(100, 192, 256, 128), tol=1e-2,
                        moves=lambda x: ("flop", 2 * x["a"].shape[0] * x["a"].shape[1] * x["qw"].shape[1])),
    "h4_geglu_bwd": Case(_geglu_inputs, _geglu_launch, _geglu_ref,
                         [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8), dict(BLOCK=512, num_warps=2)],
                         gpu_size=(4096, 4096), test_size=(5, 1500), moves=_nbytes("a", "b", "dy", "da", "db")),
    "h4_softmax_top_p": Case(_topp_inputs, _topp_launch, _topp_ref,
                             [dict(num_warps=4), dict(num_warps=8), dict(num_warps=16)],
                             gpu_size=(2048, 4096), test_size=(7, 1000), tol=1e-5, moves=_nbytes("x", "p")),
    "h4_maxpool2d_argmax": Case(_pool_inputs, _pool_launch, _pool_ref,
                                [dict(BLOCK_H=8, BLOCK_W=32, num_warps=4), dict(BLOCK_H=16, BLOCK_W=16, num_warps=4),
                                 dict(BLOCK_H=4, BLOCK_W=64, num_warps=8)],
                                gpu_size=(32, 128, 112, 112), test_size=(2, 3, 17, 38), tol=1e-6,
                                moves=_nbytes("x", "y", "idx")),
    "h4_transpose_scale_bf16": Case(_trs_inputs, _trs_launch, _trs_ref,
                                    [dict(BM=64, BN=64, num_warps=4), dict(BM=128, BN=32, num_warps=4),
                                     dict(BM=32, BN=128, num_warps=8)],
                                    gpu_size=(8192, 4096), test_size=(100, 70), tol=1e-2, moves=_nbytes("x", "y")),
    "h4_transpose_pad": Case(_trp_inputs, _trp_launch, _trp_ref,
                             [dict(BLOCK=32, num_warps=4), dict(BLOCK=64, num_warps=4), dict(BLOCK=64, num_warps=8)],
                             gpu_size=(8000, 4000, 128), test_size=(70, 45, 16), tol=1e-6, moves=_nbytes("x", "y")),
    "h4_gather_in_rows": Case(_gat_inputs, _gat_launch, _gat_ref,
                              [dict(BLOCK_M=4, num_warps=4), dict(BLOCK_M=16, num_warps=8),
                               dict(BLOCK_M=1, num_warps=2)],
                              gpu_size=(65536, 256, 128), test_size=(13, 64, 40), tol=1e-7,
                              moves=_nbytes("x", "idx", "y")),
    "h4_index_add_rows": Case(_iadd_inputs, _iadd_launch, _iadd_ref,
                              [dict(BLOCK_I=16, BLOCK_D=128, num_warps=4), dict(BLOCK_I=4, BLOCK_D=256, num_warps=4),
                               dict(BLOCK_I=64, BLOCK_D=64, num_warps=8)],
                              gpu_size=(65536, 32000, 256), test_size=(300, 40, 70), tol=1e-6, moves=_iadd_moves),
    "h4_segment_sum": Case(_seg_inputs, _seg_launch, _seg_ref,
                           [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8), dict(BLOCK=256, num_warps=2)],
                           gpu_size=(1 << 24, 1 << 16), test_size=(20000, 900), tol=1e-5,
                           moves=_nbytes("keys", "vals")),
    "h4_attn_decode": Case(_dec_inputs, _dec_launch, _dec_ref,
                           [dict(BLOCK_N=64, num_warps=4), dict(BLOCK_N=128, num_warps=8),
                            dict(BLOCK_N=32, num_warps=2)],
                           gpu_size=(16, 32, 8, 4096, 128), test_size=(3, 4, 2, 150, 64), tol=1e-2,
                           moves=_dec_moves),
    "h4_bias_dropout_res_bwd": Case(_bdr_inputs, _bdr_launch, _bdr_ref,
                                    [dict(BLOCK_M=32, BLOCK_N=128, num_warps=4),
                                     dict(BLOCK_M=64, BLOCK_N=256, num_warps=8),
                                     dict(BLOCK_M=8, BLOCK_N=512, num_warps=4)],
                                    gpu_size=(8192, 4096), test_size=(70, 300), tol=1e-2,
                                    moves=_nbytes("dy", "keep", "dx", "dres")),
    "h4_layernorm_stats": Case(_lns_inputs, _lns_launch, _lns_ref,
                               [dict(ROWS=1, HAS_BIAS=True, num_warps=4), dict(ROWS=4, HAS_BIAS=False, num_warps=8),
                                dict(ROWS=2, HAS_BIAS=True, num_warps=4)],
                               gpu_size=(16384, 4096), test_size=(7, 700), moves=_nbytes("x", "y"),
                               check_for=lambda cfg: _lns_check_for(cfg["HAS_BIAS"])),
    "h4_persistent_gelu": Case(_pers_inputs, _pers_launch, _pers_ref,
                               [dict(BLOCK=1024, WAVES=4, num_warps=4), dict(BLOCK=4096, WAVES=2, num_warps=8),
                                dict(BLOCK=512, WAVES=8, num_warps=4)],
                               gpu_size=(8192, 4096, 132), test_size=(13, 700, 3), tol=1e-2,
                               moves=_nbytes("x", "y")),
    "h4_gumbel_sample": Case(_gum_inputs, _gum_launch, None,
                             [dict(BLOCK=2048, num_warps=8), dict(BLOCK=1024, num_warps=4),
                              dict(BLOCK=4096, num_warps=8)],
                             gpu_size=(2048, 32000), test_size=(5, 3000), check=_gum_check,
                             moves=_nbytes("logits")),
    "h4_hash_bucket": Case(_hash_inputs, _hash_launch, _hash_ref,
                           [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8), dict(BLOCK=256, num_warps=2)],
                           gpu_size=(1 << 24, 4096), test_size=(20000, 1000), moves=_nbytes("keys", "bucket")),
    "h4_downcast_rtz": Case(_rtz_inputs, _rtz_launch, None,
                            [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8),
                             dict(BLOCK=512, num_warps=2)],
                            gpu_size=(1 << 24,), test_size=(20000,), check=_rtz_check, moves=_nbytes("x", "y", "e")),
}


CASES, run, bench_inputs, check = screen(CASE_DEFS)
_maker = maker

if __name__ == "__main__":
    from heldout_common import main

    main(CASE_DEFS, check, sys.argv[1:])
