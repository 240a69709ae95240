"""More kernel texts written the ways other users write them, on workloads tests/idioms.py does not cover (rotary
embeddings, dropout, max-with-index, int8 quantization, paged-KV decoding, SwiGLU and softmax backward, embedding
gather and scatter-add, a grouped GEMM over pointer arrays, matmuls with scale epilogues), for
comparing what kernellab and Triton compile from the same text without a GPU:

    python benchmarks/compile_time.py --texts benchmarks/heldout_texts2.py [case ...]

Same format as heldout_texts.py: `CASES` and `run(name)`, which launches a case's kernels on CPU tensors at GPU
sizes with every config (compile_time.py's hook records each specialization instead of compiling or running it).
`check(name)` runs each config on small random inputs (edge values included, outputs poisoned) and compares with a
torch float64 reference; run it with kernellab.compat installed (CPU interpreter) or with TRITON_INTERPRET=1 under
a real Triton (tests/test_heldout_texts2.py does the former). The module imports `triton`: kernellab.compat serves
it on kernellab's side."""
import triton
import triton.language as tl
from triton.language.extra import libdevice

# ---------------------------------------------------------------------------------------------------------------
# rotary embedding, half-split (NeoX / Llama): x [B, S, H, D], cos/sin [S, D/2]; one program per token, all heads


@triton.jit
def rope_halves(X, COS, SIN, OUT, S, H, sxb, sxs, sxh, sob, sos, soh,
                HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // S
    s = pid % S
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, HALF)
    hm = h[:, None] < H
    xin = X + b * sxb + s * sxs + h[:, None] * sxh + d[None, :]
    x1 = tl.load(xin, mask=hm, other=0.0).to(tl.float32)
    x2 = tl.load(xin + HALF, mask=hm, other=0.0).to(tl.float32)
    c = tl.load(COS + s * HALF + d).to(tl.float32)[None, :]
    sn = tl.load(SIN + s * HALF + d).to(tl.float32)[None, :]
    out = OUT + b * sob + s * sos + h[:, None] * soh + d[None, :]
    tl.store(out, (x1 * c - x2 * sn).to(OUT.dtype.element_ty), mask=hm)
    tl.store(out + HALF, (x2 * c + x1 * sn).to(OUT.dtype.element_ty), mask=hm)


# rotary embedding, interleaved pairs (GPT-J): rows of [B*S*H, D] flattened, pairs (2i, 2i+1) split with tl.split;
# a block of rows per program, the position from the row index


@triton.jit
def rope_pairs(X, COS, SIN, OUT, n_rows, H, S, D: tl.constexpr, BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n_rows
    pos = (rows // H) % S
    cols = tl.arange(0, D)
    x = tl.load(X + rows[:, None] * D + cols[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
    x = tl.reshape(x, (BLOCK_R, D // 2, 2))
    xe, xo = tl.split(x)
    half = tl.arange(0, D // 2)
    c = tl.load(COS + pos[:, None] * (D // 2) + half[None, :], mask=rmask[:, None], other=0.0)
    sn = tl.load(SIN + pos[:, None] * (D // 2) + half[None, :], mask=rmask[:, None], other=0.0)
    ye = xe * c - xo * sn
    yo = xo * c + xe * sn
    y = tl.reshape(tl.join(ye, yo), (BLOCK_R, D))
    tl.store(OUT + rows[:, None] * D + cols[None, :], y.to(OUT.dtype.element_ty), mask=rmask[:, None])


# ---------------------------------------------------------------------------------------------------------------
# fused dropout: tl.rand on the element offset, keep with probability 1 - p, scale by 1 / (1 - p); the mask kept
# as a uint8 tensor for the backward


@triton.jit
def dropout_fwd(X, Y, KEEP, n, p, seed, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask)
    r = tl.rand(seed, offs)
    keep = r > p
    y = tl.where(keep, x / (1 - p), 0.0)
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(KEEP + offs, keep.to(tl.uint8), mask=mask)


# dropout on a residual add, rows of [M, N] (a user fusing `x + dropout(h)` row by row with a 2-D seed offset)


@triton.jit
def dropout_add_rows(H_, X, Y, N, stride, p, seed, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        m = cols < N
        h = tl.load(H_ + row * stride + cols, mask=m, other=0.0).to(tl.float32)
        x = tl.load(X + row * stride + cols, mask=m, other=0.0).to(tl.float32)
        r = tl.rand(seed, row * N + cols)
        h = tl.where(r >= p, h * (1.0 / (1.0 - p)), 0.0)
        tl.store(Y + row * stride + cols, (x + h).to(Y.dtype.element_ty), mask=m)


# ---------------------------------------------------------------------------------------------------------------
# max with its index over rows, a block of rows per program, a loop over the columns (tl.max(return_indices=True))


@triton.jit
def row_max_index(X, VAL, IDX, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    best = tl.full((BM,), float("-inf"), tl.float32)
    best_i = tl.zeros((BM,), tl.int32)
    for off in range(0, N, BN):
        cols = off + tl.arange(0, BN)
        x = tl.load(X + rows[:, None] * stride + cols[None, :], mask=(rows[:, None] < M) & (cols[None, :] < N),
                    other=float("-inf")).to(tl.float32)
        v, i = tl.max(x, axis=1, return_indices=True)
        better = v > best
        best_i = tl.where(better, i + off, best_i)
        best = tl.where(better, v, best)
    tl.store(VAL + rows, best, mask=rows < M)
    tl.store(IDX + rows, best_i, mask=rows < M)


# ---------------------------------------------------------------------------------------------------------------
# int8 per-row quantization (absmax / 127, round half away from zero, clamp) and dequantization


@triton.jit
def quant_int8_rows(X, Q, SCALE, N, sx, sq, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * sx + cols, mask=mask, other=0.0).to(tl.float32)
    absmax = tl.max(tl.abs(x), axis=0)
    scale = tl.maximum(absmax, 1e-6) / 127.0
    q = x * (1.0 / scale)
    q = tl.where(q >= 0, q + 0.5, q - 0.5)
    q = tl.minimum(tl.maximum(q, -127.0), 127.0)
    tl.store(Q + row * sq + cols, q.to(tl.int8), mask=mask)
    tl.store(SCALE + row, scale)


@triton.jit
def dequant_int8(Q, SCALE, Y, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    m = (rm[:, None] < M) & (rn[None, :] < N)
    q = tl.load(Q + rm[:, None] * N + rn[None, :], mask=m, other=0)
    s = tl.load(SCALE + rm, mask=rm < M, other=0.0)
    tl.store(Y + rm[:, None] * N + rn[None, :], (q.to(tl.float32) * s[:, None]).to(Y.dtype.element_ty), mask=m)


# ---------------------------------------------------------------------------------------------------------------
# paged-KV decode attention (vLLM-like layout): one query token per sequence, caches [blocks, KV_H, BLOCK_T, D],
# a block table per sequence; one program per (sequence, head), grouped-query heads


@triton.jit
def paged_decode(Q, KC, VC, BT, LENS, O, scale, sqb, sqh, skb, skh, skt, sbt, sob, soh,
                 GROUP: tl.constexpr, D: tl.constexpr, BLOCK_T: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // GROUP
    seq_len = tl.load(LENS + b)
    d = tl.arange(0, D)
    t = tl.arange(0, BLOCK_T)
    q = tl.load(Q + b * sqb + h * sqh + d).to(tl.float32) * scale
    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros((D,), tl.float32)
    n_blocks = tl.cdiv(seq_len, BLOCK_T)
    for j in range(0, n_blocks):
        blk = tl.load(BT + b * sbt + j).to(tl.int64)
        pos = j * BLOCK_T + t
        valid = pos < seq_len
        off = blk * skb + kvh * skh + t[:, None] * skt + d[None, :]
        k = tl.load(KC + off, mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1)
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(VC + off, mask=valid[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    tl.store(O + b * sob + h * soh + d, (acc / l_i).to(O.dtype.element_ty))


# ---------------------------------------------------------------------------------------------------------------
# SwiGLU backward (Liger's shape: rows, one program per row, the whole row in one block): y = silu(g) * u


@triton.jit
def swiglu_bwd(DY, G, U, DG, DU, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    dy = tl.load(DY + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(g)
    silu = g * sig
    dg = dy * u * (sig + silu * (1.0 - sig))
    du = dy * silu
    tl.store(DG + row * stride + cols, dg.to(DG.dtype.element_ty), mask=mask)
    tl.store(DU + row * stride + cols, du.to(DU.dtype.element_ty), mask=mask)


# GeGLU (tanh) backward, flat elementwise over n elements, the tanh through libdevice


@triton.jit
def geglu_tanh_bwd(DY, G, U, DG, DU, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + offs, mask=mask, other=0.0).to(tl.float32)
    k = 0.7978845608028654
    inner = k * (g + 0.044715 * g * g * g)
    th = libdevice.tanh(inner)
    gelu = 0.5 * g * (1.0 + th)
    dgelu = 0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * g * g)
    tl.store(DG + offs, (dy * u * dgelu).to(DG.dtype.element_ty), mask=mask)
    tl.store(DU + offs, (dy * gelu).to(DU.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------------------------------------------
# softmax backward: dx = y * (dy - sum(y * dy)), one row per program


@triton.jit
def softmax_bwd(DX, DY, Y, sdx, sdy, sy, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    dy = tl.load(DY + row * sdy + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(Y + row * sy + cols, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(dy * y, axis=0)
    tl.store(DX + row * sdx + cols, (y * (dy - dot)).to(DX.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------------------------------------------
# embedding: gather rows of W by token ids (blocks of tokens x blocks of the hidden dim), and the backward's
# scatter-add of the output gradient into dW with atomics


@triton.jit
def embed_gather(IDS, W, OUT, n_tok, D, BT: tl.constexpr, BD: tl.constexpr):
    tok = tl.program_id(0) * BT + tl.arange(0, BT)
    dim = tl.program_id(1) * BD + tl.arange(0, BD)
    tm = tok < n_tok
    ids = tl.load(IDS + tok, mask=tm, other=0)
    m = tm[:, None] & (dim[None, :] < D)
    w = tl.load(W + ids[:, None].to(tl.int64) * D + dim[None, :], mask=m)
    tl.store(OUT + tok[:, None].to(tl.int64) * D + dim[None, :], w, mask=m)


@triton.jit
def embed_scatter_add(IDS, DOUT, DW, n_tok, D, BD: tl.constexpr):
    t = tl.program_id(0)
    idx = tl.load(IDS + t)
    for d0 in range(0, D, BD):
        dim = d0 + tl.arange(0, BD)
        m = dim < D
        g = tl.load(DOUT + t * D + dim, mask=m, other=0.0)
        tl.atomic_add(DW + idx * D + dim, g, mask=m)


# ---------------------------------------------------------------------------------------------------------------
# grouped GEMM over pointer arrays: grid (tiles of the largest group, groups); a program past its group's tiles
# returns; A [M, K], B [K, N], C [M, N] row-major per group, sizes in a [G, 3] int32 table


@triton.jit
def grouped_gemm(A_PTRS, B_PTRS, C_PTRS, SIZES, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    tile = tl.program_id(0)
    g = tl.program_id(1)
    M = tl.load(SIZES + g * 3)
    N = tl.load(SIZES + g * 3 + 1)
    K = tl.load(SIZES + g * 3 + 2)
    tiles_n = tl.cdiv(N, BN)
    if tile >= tl.cdiv(M, BM) * tiles_n:
        return
    a_ptr = tl.load(A_PTRS + g).to(tl.pointer_type(tl.float16))
    b_ptr = tl.load(B_PTRS + g).to(tl.pointer_type(tl.float16))
    c_ptr = tl.load(C_PTRS + g).to(tl.pointer_type(tl.float16))
    rm = (tile // tiles_n) * BM + tl.arange(0, BM)
    rn = (tile % tiles_n) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * K + rk[None, :]
    b = b_ptr + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        x = tl.load(a, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
        a += BK
        b += BK * N
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


# ---------------------------------------------------------------------------------------------------------------
# matmuls with scale epilogues: fp16 with a per-row scale and a bias (EVEN_K text, no K masks, hints on the
# offsets), and int8 x int8 -> int32 with per-row and per-column scales (SmoothQuant / W8A8)


@triton.jit
def mm_rowscale(A, B, C, RS, BIAS, M, N, K, sam, sbk, scm,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    ram = tl.max_contiguous(tl.multiple_of(rm % M, BM), BM)
    rbn = tl.max_contiguous(tl.multiple_of(rn % N, BN), BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + ram[:, None] * sam + rk[None, :]
    b_ptrs = B + rk[:, None] * sbk + rbn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
        a_ptrs += BK
        b_ptrs += BK * sbk
    rs = tl.load(RS + rm, mask=rm < M, other=0.0)
    bias = tl.load(BIAS + rn, mask=rn < N, other=0.0).to(tl.float32)
    out = acc * rs[:, None] + bias[None, :]
    tl.store(C + rm[:, None] * scm + rn[None, :], out.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def mm_int8_scaled(A, B, C, SA, SB, M, N, K, sam, sbn, scm,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
    # B stored [N, K] (a weight), read transposed through its pointers
    pid = tl.program_id(0)
    npm = tl.cdiv(M, BM)
    npn = tl.cdiv(N, BN)
    gid = pid // (GM * npn)
    gsz = tl.minimum(npm - gid * GM, GM)
    pid_m = gid * GM + (pid % (GM * npn)) % gsz
    pid_n = (pid % (GM * npn)) // gsz
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None] * sam + rk[None, :]
    b_ptrs = B + rn[None, :] * sbn + rk[:, None]
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0)
        b = tl.load(b_ptrs, mask=(rn[None, :] < N) & (rk[:, None] < K - k * BK), other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        a_ptrs += BK
        b_ptrs += BK
    sa = tl.load(SA + rm, mask=rm < M, other=0.0)
    sb = tl.load(SB + rn, mask=rn < N, other=0.0)
    out = acc.to(tl.float32) * sa[:, None] * sb[None, :]
    tl.store(C + rm[:, None] * scm + rn[None, :], out.to(C.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


# ===============================================================================================================
# launchers, inputs, references


def cdiv(a, b):
    return (a + b - 1) // b


class Case:
    """inputs(size, mk) -> dict of tensors (mk(shape, dtype, kind) makes one: random with edges when checking,
    empty at GPU sizes); launch(x, cfg); reference(x) -> {output name: float64 tensor or exact tensor};
    check(x, ref) optional replacement of the comparison (dropout)."""

    def __init__(self, inputs, launch, reference, configs, gpu_size, test_size, tol=1e-2, check=None):
        self.inputs, self.launch, self.reference = inputs, launch, reference
        self.configs, self.gpu_size, self.test_size, self.tol, self.compare = configs, gpu_size, test_size, tol, check


def _split(cfg):
    opts = {k: cfg[k] for k in ("num_warps", "num_stages") if k in cfg}
    return {k: v for k, v in cfg.items() if k not in opts}, opts


# rope ---------------------------------------------------------------------------------------------------------


def _rope_inputs(size, mk):
    import torch

    B, S, H, D = size
    return dict(x=mk((B, S, H, D), torch.float16), cos=mk((S, D // 2), torch.float32, "unit"),
                sin=mk((S, D // 2), torch.float32, "unit"), out=mk((B, S, H, D), torch.float16, "out"))


def _rope_ref(x, pairs=False):
    import torch

    xx = x["x"].double()
    c, s = x["cos"].double()[None, :, None, :], x["sin"].double()[None, :, None, :]
    if pairs:
        x1, x2 = xx[..., 0::2], xx[..., 1::2]
        out = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
    else:
        D = xx.shape[-1]
        x1, x2 = xx[..., :D // 2], xx[..., D // 2:]
        out = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    return {"out": out}


def _rope_halves_launch(x, cfg):
    meta, opts = _split(cfg)
    t, o = x["x"], x["out"]
    B, S, H, D = t.shape
    rope_halves[(B * S,)](t, x["cos"], x["sin"], o, S, H, t.stride(0), t.stride(1), t.stride(2), o.stride(0),
                          o.stride(1), o.stride(2), HALF=D // 2, BLOCK_H=triton.next_power_of_2(H), **opts)


def _rope_pairs_launch(x, cfg):
    meta, opts = _split(cfg)
    t = x["x"]
    B, S, H, D = t.shape
    rows = B * S * H
    rope_pairs[(cdiv(rows, meta["BLOCK_R"]),)](t, x["cos"], x["sin"], x["out"], rows, H, S, D=D, **meta, **opts)


# dropout ------------------------------------------------------------------------------------------------------


def _dropout_inputs(size, mk):
    import torch

    (n,) = size
    return dict(x=mk((n,), torch.float16), y=mk((n,), torch.float16, "out"), keep=mk((n,), torch.uint8, "out"))


def _dropout_launch(x, cfg):
    meta, opts = _split(cfg)
    n = x["x"].numel()
    dropout_fwd[(cdiv(n, meta["BLOCK"]),)](x["x"], x["y"], x["keep"], n, 0.25, 1234, **meta, **opts)


def _dropout_check(x, ref):
    """tl.rand's stream is Triton's Philox (checked against Triton elsewhere); here: every element is dropped or
    scaled by 1/(1-p) as its keep mask says, and about 1-p are kept."""
    import torch

    keep = x["keep"].bool()
    assert set(x["keep"].unique().tolist()) <= {0, 1}
    want = torch.where(keep, x["x"].double() / 0.75, 0.0)
    err = ((x["y"].double() - want).norm() / want.norm()).item()
    rate = keep.double().mean().item()
    assert err < 1e-3 and abs(rate - 0.75) < 0.05, (err, rate)


def _dropout_add_inputs(size, mk):
    import torch

    M, N = size
    return dict(h=mk((M, N), torch.bfloat16), x=mk((M, N), torch.bfloat16), y=mk((M, N), torch.bfloat16, "out"))


def _dropout_add_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["h"].shape
    dropout_add_rows[(M,)](x["h"], x["x"], x["y"], N, x["h"].stride(0), 0.1, 77, **meta, **opts)


def _dropout_add_check(x, ref):
    import torch

    h, xx, y = x["h"].double(), x["x"].double(), x["y"].double()
    kept = torch.isclose(y, xx + h / 0.9, rtol=2e-2, atol=2e-2)
    dropped = torch.isclose(y, xx, rtol=1e-2, atol=1e-2)
    assert bool((kept | dropped).all()), "an element neither kept nor dropped"
    rate = (kept & ~dropped).double().sum() / (~(kept & dropped)).double().sum()
    assert abs(rate.item() - 0.9) < 0.05, rate


# max with index ------------------------------------------------------------------------------------------------


def _argmax_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.float16, "ties"), val=mk((M,), torch.float32, "out"),
                idx=mk((M,), torch.int32, "out"))


def _argmax_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    row_max_index[(cdiv(M, meta["BM"]),)](x["x"], x["val"], x["idx"], M, N, x["x"].stride(0), **meta, **opts)


def _argmax_ref(x):
    v, i = x["x"].double().max(dim=1)  # first index of the maximum
    return {"val": v, "idx": i.to(x["idx"].dtype)}


# int8 quantization --------------------------------------------------------------------------------------------


def _quant_inputs(size, mk):
    import torch

    M, N = size
    return dict(x=mk((M, N), torch.float16), q=mk((M, N), torch.int8, "out"), scale=mk((M,), torch.float32, "out"))


def _quant_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["x"].shape
    quant_int8_rows[(M,)](x["x"], x["q"], x["scale"], N, x["x"].stride(0), x["q"].stride(0),
                          BLOCK=triton.next_power_of_2(N), **opts)


def _quant_ref(x):
    import torch

    xx = x["x"].double()
    scale = xx.abs().amax(dim=1).clamp_min(1e-6) / 127.0
    q = xx / scale.float().double()[:, None]
    q = torch.where(q >= 0, q + 0.5, q - 0.5).clamp(-127, 127).trunc()
    return {"q": q, "scale": scale}


def _quant_check(x, ref):
    import torch

    assert torch.allclose(x["scale"].double(), ref["scale"], rtol=1e-6)
    diff = (x["q"].double() - ref["q"]).abs()
    assert diff.max() <= 1 and (diff > 0).double().mean() < 1e-3, diff.max()  # x / scale vs x * (1 / scale)


def _dequant_inputs(size, mk):
    import torch

    M, N = size
    return dict(q=mk((M, N), torch.int8), scale=mk((M,), torch.float32, "unit"),
                y=mk((M, N), torch.bfloat16, "out"))


def _dequant_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["q"].shape
    dequant_int8[(cdiv(M, meta["BM"]), cdiv(N, meta["BN"]))](x["q"], x["scale"], x["y"], M, N, **meta, **opts)


def _dequant_ref(x):
    return {"y": x["q"].double() * x["scale"].double()[:, None]}


# paged decode --------------------------------------------------------------------------------------------------


def _paged_inputs(size, mk):
    import torch

    B, H, KVH, D, T, max_len = size
    blocks_per = cdiv(max_len, T)
    nblk = B * blocks_per + 3
    g = torch.Generator().manual_seed(5)
    lens = torch.randint(1, max_len + 1, (B,), generator=g, dtype=torch.int32)
    lens[0] = max_len
    table = torch.randperm(nblk, generator=g)[:B * blocks_per].reshape(B, blocks_per).to(torch.int32)
    return dict(q=mk((B, H, D), torch.float16), kc=mk((nblk, KVH, T, D), torch.float16),
                vc=mk((nblk, KVH, T, D), torch.float16), table=table, lens=lens,
                o=mk((B, H, D), torch.float16, "out"))


def _paged_launch(x, cfg):
    meta, opts = _split(cfg)
    q, kc, o = x["q"], x["kc"], x["o"]
    B, H, D = q.shape
    KVH, T = kc.shape[1], kc.shape[2]
    paged_decode[(B, H)](q, kc, x["vc"], x["table"], x["lens"], o, D ** -0.5, q.stride(0), q.stride(1),
                         kc.stride(0), kc.stride(1), kc.stride(2), x["table"].stride(0), o.stride(0), o.stride(1),
                         GROUP=H // KVH, D=D, BLOCK_T=T, **opts)


def _paged_ref(x):
    import torch

    q, kc, vc = x["q"].double(), x["kc"].double(), x["vc"].double()
    B, H, D = q.shape
    KVH, T = kc.shape[1], kc.shape[2]
    out = torch.empty(B, H, D, dtype=torch.float64)
    for b in range(B):
        L = int(x["lens"][b])
        blocks = x["table"][b, :cdiv(L, T)].long()
        k = kc[blocks].transpose(0, 1).reshape(KVH, -1, D)[:, :L]
        v = vc[blocks].transpose(0, 1).reshape(KVH, -1, D)[:, :L]
        k, v = k.repeat_interleave(H // KVH, 0), v.repeat_interleave(H // KVH, 0)
        s = (k @ q[b][:, :, None])[..., 0] * D ** -0.5
        out[b] = (torch.softmax(s, -1)[:, None, :] @ v)[:, 0]
    return {"o": out}


# swiglu / geglu backward -----------------------------------------------------------------------------------------


def _glu_inputs(size, mk):
    import torch

    M, N = size
    return dict(dy=mk((M, N), torch.bfloat16), g=mk((M, N), torch.bfloat16), u=mk((M, N), torch.bfloat16),
                dg=mk((M, N), torch.bfloat16, "out"), du=mk((M, N), torch.bfloat16, "out"))


def _swiglu_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["g"].shape
    swiglu_bwd[(M,)](x["dy"], x["g"], x["u"], x["dg"], x["du"], x["g"].stride(0), N, BLOCK=triton.next_power_of_2(N),
                     **opts)


def _geglu_launch(x, cfg):
    meta, opts = _split(cfg)
    n = x["g"].numel()
    geglu_tanh_bwd[(cdiv(n, meta["BLOCK"]),)](x["dy"], x["g"], x["u"], x["dg"], x["du"], n, **meta, **opts)


def _glu_ref(x, kind):
    import torch

    g = x["g"].double().requires_grad_()
    u = x["u"].double().requires_grad_()
    a = torch.nn.functional.silu(g) if kind == "swiglu" else torch.nn.functional.gelu(g, approximate="tanh")
    (a * u).backward(x["dy"].double())
    return {"dg": g.grad, "du": u.grad}


# softmax backward -------------------------------------------------------------------------------------------------


def _smbwd_inputs(size, mk):
    import torch

    M, N = size
    y = mk((M, N), torch.float32, "unit")
    if y.device.type == "cpu" and not y.is_meta and mk.__name__ == "rand":
        y = torch.softmax(y * 4, dim=-1)
    return dict(dy=mk((M, N), torch.float32), y=y, dx=mk((M, N), torch.float32, "out"))


def _smbwd_launch(x, cfg):
    meta, opts = _split(cfg)
    M, N = x["y"].shape
    softmax_bwd[(M,)](x["dx"], x["dy"], x["y"], x["dx"].stride(0), x["dy"].stride(0), x["y"].stride(0), N,
                      BLOCK=triton.next_power_of_2(N), **opts)


def _smbwd_ref(x):
    y, dy = x["y"].double(), x["dy"].double()
    return {"dx": y * (dy - (y * dy).sum(-1, keepdim=True))}


# embedding ----------------------------------------------------------------------------------------------------


def _embed_inputs(size, mk):
    import torch

    n_tok, V, D = size
    ids = torch.randint(0, V, (n_tok,), generator=torch.Generator().manual_seed(3), dtype=torch.int32)
    ids[:4] = 7  # repeated ids: the scatter-add's atomics collide
    return dict(ids=ids, w=mk((V, D), torch.float16), out=mk((n_tok, D), torch.float16, "out"),
                dout=mk((n_tok, D), torch.float32), dw=mk((V, D), torch.float32, "zeros"))


def _embed_launch(x, cfg):
    meta, opts = _split(cfg)
    n_tok, D = x["out"].shape
    embed_gather[(cdiv(n_tok, meta["BT"]), cdiv(D, meta["BD"]))](x["ids"], x["w"], x["out"], n_tok, D,
                                                                  BT=meta["BT"], BD=meta["BD"], **opts)
    embed_scatter_add[(n_tok,)](x["ids"], x["dout"], x["dw"], n_tok, D, BD=meta["SBD"], **opts)


def _embed_ref(x):
    import torch

    dw = torch.zeros(x["dw"].shape, dtype=torch.float64)
    dw.index_add_(0, x["ids"].long(), x["dout"].double())
    return {"out": x["w"].double()[x["ids"].long()], "dw": dw}


# grouped gemm ---------------------------------------------------------------------------------------------------


def _gg_inputs(size, mk):
    import torch

    x = {}
    for i, (M, N, K) in enumerate(size):
        x[f"a{i}"], x[f"b{i}"] = mk((M, K), torch.float16, "small"), mk((K, N), torch.float16, "small")
        x[f"c{i}"] = mk((M, N), torch.float16, "out")
    x["sizes"] = torch.tensor(size, dtype=torch.int32)
    return x


def _gg_launch(x, cfg):
    import torch

    meta, opts = _split(cfg)
    sizes = x["sizes"].tolist()
    G = len(sizes)
    ptrs = [torch.tensor([x[f"{n}{i}"].data_ptr() for i in range(G)], dtype=torch.int64) for n in "abc"]
    tiles = max(cdiv(M, meta["BM"]) * cdiv(N, meta["BN"]) for M, N, _ in sizes)
    grouped_gemm[(tiles, G)](*ptrs, x["sizes"], **meta, **opts)


def _gg_ref(x):
    G = x["sizes"].shape[0]
    return {f"c{i}": x[f"a{i}"].double() @ x[f"b{i}"].double() for i in range(G)}


# scaled matmuls ---------------------------------------------------------------------------------------------------


def _mmrs_inputs(size, mk):
    import torch

    M, N, K = size
    return dict(a=mk((M, K), torch.float16, "small"), b=mk((K, N), torch.float16, "small"),
                rs=mk((M,), torch.float32, "unit"), bias=mk((N,), torch.float16), c=mk((M, N), torch.float16, "out"))


def _mmrs_launch(x, cfg):
    meta, opts = _split(cfg)
    a, b, c = x["a"], x["b"], x["c"]
    M, K = a.shape
    N = b.shape[1]
    mm_rowscale[(cdiv(M, meta["BM"]), cdiv(N, meta["BN"]))](a, b, c, x["rs"], x["bias"], M, N, K, a.stride(0),
                                                              b.stride(0), c.stride(0), **meta, **opts)


def _mmrs_ref(x):
    return {"c": (x["a"].double() @ x["b"].double()) * x["rs"].double()[:, None] + x["bias"].double()[None, :]}


def _mmi8_inputs(size, mk):
    import torch

    M, N, K = size
    return dict(a=mk((M, K), torch.int8), b=mk((N, K), torch.int8), sa=mk((M,), torch.float32, "unit"),
                sb=mk((N,), torch.float32, "unit"), c=mk((M, N), torch.bfloat16, "out"))


def _mmi8_launch(x, cfg):
    meta, opts = _split(cfg)
    a, b, c = x["a"], x["b"], x["c"]
    M, K = a.shape
    N = b.shape[0]
    mm_int8_scaled[(cdiv(M, meta["BM"]) * cdiv(N, meta["BN"]),)](a, b, c, x["sa"], x["sb"], M, N, K, a.stride(0),
                                                                  b.stride(0), c.stride(0), **meta, **opts)


def _mmi8_ref(x):
    acc = x["a"].double() @ x["b"].double().T
    return {"c": acc * x["sa"].double()[:, None] * x["sb"].double()[None, :]}


CASE_DEFS = {
    "h2_rope_halves": Case(_rope_inputs, _rope_halves_launch, _rope_ref,
                           [dict(num_warps=4), dict(num_warps=8), dict(num_warps=2)],
                           gpu_size=(8, 2048, 32, 128), test_size=(2, 5, 3, 64)),
    "h2_rope_pairs": Case(_rope_inputs, _rope_pairs_launch, lambda x: _rope_ref(x, pairs=True),
                          [dict(BLOCK_R=16, num_warps=4), dict(BLOCK_R=32, num_warps=8), dict(BLOCK_R=4, num_warps=1)],
                          gpu_size=(8, 2048, 32, 128), test_size=(2, 5, 3, 64)),
    "h2_dropout": Case(_dropout_inputs, _dropout_launch, None,
                       [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8), dict(BLOCK=256, num_warps=2)],
                       gpu_size=(1 << 26,), test_size=(5000,), check=_dropout_check),
    "h2_dropout_add": Case(_dropout_add_inputs, _dropout_add_launch, None,
                           [dict(BLOCK_N=1024, num_warps=4), dict(BLOCK_N=2048, num_warps=8)],
                           gpu_size=(16384, 4096), test_size=(7, 3000), check=_dropout_add_check),
    "h2_row_max_index": Case(_argmax_inputs, _argmax_launch, _argmax_ref,
                             [dict(BM=4, BN=1024, num_warps=4), dict(BM=1, BN=4096, num_warps=8),
                              dict(BM=16, BN=256, num_warps=4)],
                             gpu_size=(16384, 32000), test_size=(37, 1500)),
    "h2_quant_int8": Case(_quant_inputs, _quant_launch, _quant_ref,
                          [dict(num_warps=4), dict(num_warps=8), dict(num_warps=16)],
                          gpu_size=(16384, 4096), test_size=(9, 1000), check=_quant_check),
    "h2_dequant_int8": Case(_dequant_inputs, _dequant_launch, _dequant_ref,
                            [dict(BM=32, BN=128, num_warps=4), dict(BM=64, BN=256, num_warps=8),
                             dict(BM=1, BN=1024, num_warps=4)],
                            gpu_size=(16384, 4096), test_size=(33, 300)),
    "h2_paged_decode": Case(_paged_inputs, _paged_launch, _paged_ref,
                            [dict(num_warps=4), dict(num_warps=8), dict(num_warps=2)],
                            gpu_size=(64, 32, 8, 128, 16, 4096), test_size=(3, 4, 2, 64, 16, 70), tol=2e-2),
    "h2_swiglu_bwd": Case(_glu_inputs, _swiglu_launch, lambda x: _glu_ref(x, "swiglu"),
                          [dict(num_warps=4), dict(num_warps=8), dict(num_warps=16)],
                          gpu_size=(16384, 11008), test_size=(5, 700)),
    "h2_geglu_bwd": Case(_glu_inputs, _geglu_launch, lambda x: _glu_ref(x, "geglu"),
                         [dict(BLOCK=1024, num_warps=4), dict(BLOCK=2048, num_warps=8), dict(BLOCK=512, num_warps=4)],
                         gpu_size=(16384, 11008), test_size=(5, 700)),
    "h2_softmax_bwd": Case(_smbwd_inputs, _smbwd_launch, _smbwd_ref,
                           [dict(num_warps=4), dict(num_warps=8), dict(num_warps=16)],
                           gpu_size=(16384, 4096), test_size=(6, 1000)),
    "h2_embedding": Case(_embed_inputs, _embed_launch, _embed_ref,
                         [dict(BT=16, BD=256, SBD=1024, num_warps=4), dict(BT=1, BD=1024, SBD=512, num_warps=4),
                          dict(BT=64, BD=128, SBD=4096, num_warps=8)],
                         gpu_size=(16384, 128256, 4096), test_size=(37, 50, 300)),
    "h2_grouped_gemm": Case(_gg_inputs, _gg_launch, _gg_ref,
                            [dict(BM=128, BN=128, BK=32, num_warps=4, num_stages=3),
                             dict(BM=128, BN=256, BK=64, num_warps=8, num_stages=3),
                             dict(BM=64, BN=64, BK=32, num_warps=4, num_stages=2)],
                            gpu_size=((4096, 4096, 4096), (1024, 4096, 2048), (512, 2048, 4096), (2048, 1024, 1024)),
                            test_size=((70, 50, 40), (33, 130, 65), (128, 64, 96)), tol=1e-2),
    "h2_mm_rowscale": Case(_mmrs_inputs, _mmrs_launch, _mmrs_ref,
                           [dict(BM=128, BN=128, BK=64, num_warps=4, num_stages=4),
                            dict(BM=128, BN=256, BK=64, num_warps=8, num_stages=3),
                            dict(BM=64, BN=64, BK=32, num_warps=4, num_stages=3)],
                           gpu_size=(4096, 4096, 4096), test_size=(128, 192, 128)),
    "h2_mm_int8": Case(_mmi8_inputs, _mmi8_launch, _mmi8_ref,
                       [dict(BM=128, BN=128, BK=128, GM=8, num_warps=4, num_stages=4),
                        dict(BM=128, BN=256, BK=128, GM=8, num_warps=8, num_stages=3),
                        dict(BM=64, BN=64, BK=64, GM=8, num_warps=4, num_stages=3)],
                       gpu_size=(4096, 4096, 4096), test_size=(100, 130, 200)),
}

# tests/idioms.py's workloads made of these texts (rope, quantize, stencil, paged_decode; timed against Triton by
# benchmarks/idioms.py), every variant and config compiled here too: the kernels are module attributes so that
# compile_time.py's workers find them by qualname; sizes with the benchmark sizes' divisibility, smaller
IDIOM_CASES = {"id_rope": ("rope", (2, 64, 32, 128)), "id_quantize": ("quantize", (64, 4096)),
               "id_stencil": ("stencil", (2, 256, 1024)), "id_paged_decode": ("paged_decode", (4, 32, 8, 128, 16, 256))}


def _idiom_workloads():
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.append(root)
    from tests.idioms import make_idioms

    return {w.name: w for w in make_idioms(triton.jit, tl) if w.name in {n for n, _ in IDIOM_CASES.values()}}


IDIOM_WORKLOADS = _idiom_workloads()
for _w in IDIOM_WORKLOADS.values():
    for _v in _w.variants:
        globals()[f"idiom_{_w.name}_{_v.name}"] = _v.kernel

CASES = tuple(CASE_DEFS) + tuple(IDIOM_CASES)


def _empty(shape, dtype, kind="in"):
    import torch

    return torch.empty(shape, dtype=dtype)


def run(name):
    if name in IDIOM_CASES:
        wname, size = IDIOM_CASES[name]
        w = IDIOM_WORKLOADS[wname]
        x = w.inputs(size, "cpu", 0)
        for v in w.variants:
            for cfg in v.configs:
                v.launch(v.kernel, x, cfg)
        return
    c = CASE_DEFS[name]
    x = c.inputs(c.gpu_size, _empty)
    for cfg in c.configs:
        c.launch(x, cfg)


def _maker(seed):
    import torch

    g = torch.Generator().manual_seed(seed)

    def rand(shape, dtype, kind="in"):
        if kind == "out":
            if dtype.is_floating_point:
                return torch.full(shape, float("nan"), dtype=dtype)
            return torch.full(shape, -99 if dtype != torch.uint8 else 99, dtype=dtype)
        if kind == "zeros":
            return torch.zeros(shape, dtype=dtype)
        if dtype in (torch.int8,):
            t = torch.randint(-128, 128, shape, generator=g, dtype=torch.int32)
            t.view(-1)[:2] = torch.tensor([-128, 127])[: t.numel()]
            return t.to(dtype)
        t = torch.randn(shape, generator=g, dtype=torch.float64)
        if kind == "unit":
            t = torch.rand(shape, generator=g, dtype=torch.float64) * 1.5 + 0.25
        elif kind == "small":
            t = t * 0.5
        elif kind == "ties":
            t = torch.randint(-20, 20, shape, generator=g).double()  # many equal maxima: the first index wins
        flat = t.view(-1)
        if kind == "in" and flat.numel() > 8:
            flat[:6] = torch.tensor([0.0, -0.0, 8.0, -8.0, 1e-3, -1e-3])
        return t.to(dtype)

    return rand


def check(name, seed=0, configs=None):
    """Every config of a case on small random inputs against the float64 reference; raises on a mismatch."""
    import torch

    c = CASE_DEFS[name]
    for i, cfg in enumerate(configs or c.configs):
        x = c.inputs(c.test_size, _maker(seed + i))
        c.launch(x, cfg)
        ref = c.reference(x) if c.reference else None
        if c.compare:
            c.compare(x, ref)
            continue
        for k, want in ref.items():
            got = x[k]
            if not got.dtype.is_floating_point:
                assert torch.equal(got.to(want.dtype), want), f"{name} {cfg}: {k} differs"
                continue
            got = got.double()
            assert not torch.isnan(got).any(), f"{name} {cfg}: {k} has unwritten (poisoned) elements"
            err = ((got - want).norm() / want.norm()).item()
            assert err < c.tol, f"{name} {cfg}: {k} relative error {err:.2e}"


if __name__ == "__main__":
    import sys

    for n in sys.argv[1:] or CASE_DEFS:
        check(n)
        print("ok", n)
