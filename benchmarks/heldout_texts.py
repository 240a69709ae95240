"""Kernel texts written the ways other users write them (not tests/corpus.py's), for comparing what kernellab
and Triton compile from the same text without a GPU:

    python benchmarks/compile_time.py --texts benchmarks/heldout_texts.py [case ...]

`run(name)` launches a case's kernels on CPU tensors at GPU sizes; compile_time.py's hook records each
specialization instead of compiling or running it, then builds it with both compilers for sm_90a (registers,
spills, SASS instructions in all and per loop). The module imports `triton`: kernellab.compat serves it on
kernellab's side."""
import triton
import triton.language as tl


@triton.jit
def mm_bias_relu(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    per_group = GROUP * num_n
    gid = pid // per_group
    first_m = gid * GROUP
    gsize = min(num_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % gsize
    pid_n = (pid % per_group) // gsize
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] + k < K), other=0.0)
        y = tl.load(b, mask=(rk[:, None] + k < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
        a += BK * sak
        b += BK * sbk
    bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0)
    acc = acc + bias[None, :].to(tl.float32)
    acc = tl.maximum(acc, 0.0)
    c = c_ptr + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def mm_kindex(A, B, C, M, N, K, stride_am, stride_bk, stride_cm,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_m = tl.max_contiguous(tl.multiple_of(offs_m, BLOCK_M), BLOCK_M)
    offs_n = tl.max_contiguous(tl.multiple_of(offs_n, BLOCK_N), BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=3):
        offs_k = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        a = tl.load(A + offs_m[:, None] * stride_am + offs_k[None, :])
        b = tl.load(B + offs_k[:, None] * stride_bk + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(C + rm[:, None] * stride_cm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def online_softmax(X, Y, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = X + row * stride
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    mx = tl.max(m, 0)
    total = tl.sum(s * tl.exp(m - mx), 0)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        tl.store(Y + row * stride + cols, (tl.exp(x - mx) / total).to(Y.dtype.element_ty), mask=cols < N)


@triton.jit
def layernorm_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc2 = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        d = tl.where(cols < N, x - mean, 0.)
        acc2 += d * d
    rstd = 1 / tl.sqrt(tl.sum(acc2, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        tl.store(Y + cols, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def attn_fwd_exp(Q, K, V, O, sm_scale, L, sqz, sqh, sqm, skz, skh, skn, svz, svh, svn, soz, soh, som,
                 H, N_CTX, HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    z = off_hz // H
    h = off_hz % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD)
    q = tl.load(Q + z * sqz + h * sqh + offs_m[:, None] * sqm + offs_d[None, :])
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD], dtype=tl.float32)
    hi = (start_m + 1) * BLOCK_M if CAUSAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + z * skz + h * skh + cols[:, None] * skn + offs_d[None, :])
        qk = tl.dot(q, tl.trans(k)) * sm_scale
        if CAUSAL:
            qk = tl.where(offs_m[:, None] >= cols[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + z * svz + h * svh + cols[:, None] * svn + offs_d[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(L + off_hz * N_CTX + offs_m, m_i + tl.log(l_i))
    tl.store(O + z * soz + h * soh + offs_m[:, None] * som + offs_d[None, :], acc.to(tl.float16))


@triton.jit
def rmsnorm_bwd_atomic(DY, X, W, Rstd, DX, DW, stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    dy = tl.load(DY + row * stride + cols, mask=mask, other=0.).to(tl.float32)
    x = tl.load(X + row * stride + cols, mask=mask, other=0.).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.).to(tl.float32)
    r = tl.load(Rstd + row)
    xhat = x * r
    wdy = w * dy
    c = tl.sum(xhat * wdy, axis=0) / N
    dx = (wdy - xhat * c) * r
    tl.store(DX + row * stride + cols, dx.to(DX.dtype.element_ty), mask=mask)
    tl.atomic_add(DW + cols, dy * xhat, mask=mask)


@triton.jit
def row_argmax(X, Out, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + cols, mask=cols < N, other=float("-inf"))
    tl.store(Out + row, tl.argmax(x, axis=0))


def run(name):
    import torch

    def g(*s, dt=torch.float16):
        return torch.empty(*s, dtype=dt)

    if name == "ho_mm_bias_relu":
        M = N = K = 4096
        a, b, bias, c = g(M, K), g(K, N), g(N), g(M, N)
        for BM, BN, BK, w, s in ((128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (64, 128, 32, 4, 4)):
            mm_bias_relu[(1,)](a, b, bias, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BM=BM, BN=BN, BK=BK,
                               GROUP=8, num_warps=w, num_stages=s)
    elif name == "ho_mm_kindex":
        M = N = K = 4096
        a, b, c = g(M, K, dt=torch.bfloat16), g(K, N, dt=torch.bfloat16), g(M, N, dt=torch.float32)
        for BM, BN, BK, w in ((128, 128, 64, 4), (128, 256, 64, 8)):
            mm_kindex[(1, 1)](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BLOCK_M=BM, BLOCK_N=BN,
                              BLOCK_K=BK, num_warps=w)
    elif name == "ho_online_softmax":
        x = g(4096, 32768)
        online_softmax[(1,)](x, x, 32768, x.stride(0), BLOCK=2048, num_warps=8)
    elif name == "ho_layernorm_fwd":
        x = g(4096, 8192)
        w = g(8192)
        st = torch.empty(4096)
        layernorm_fwd[(1,)](x, x, w, w, st, st, x.stride(0), 8192, 1e-5, BLOCK_SIZE=1024, num_warps=8)
    elif name.startswith("ho_attn_exp"):
        d = 128 if name.endswith("128") else 64
        q = g(4, 16, 4096, d)
        lse = torch.empty(4, 16, 4096)
        for causal in (False, True):
            attn_fwd_exp[(1, 1)](q, q, q, q, d ** -0.5, lse, *q.stride()[:3], *q.stride()[:3], *q.stride()[:3],
                                 *q.stride()[:3], 16, 4096, HEAD=d, BLOCK_M=128, BLOCK_N=64 if d == 64 else 128,
                                 CAUSAL=causal, num_warps=4 if d == 64 else 8, num_stages=3)
    elif name == "ho_rmsnorm_bwd":
        x = g(4096, 4096)
        w = g(4096)
        r = torch.empty(4096)
        dw = torch.empty(4096)
        rmsnorm_bwd_atomic[(1,)](x, x, w, r, x, dw, x.stride(0), 4096, BLOCK_N=4096, num_warps=8)
    elif name == "ho_row_argmax":
        x = g(8192, 4096, dt=torch.float32)
        o = torch.empty(8192, dtype=torch.int32)
        row_argmax[(1,)](x, o, 4096, x.stride(0), BLOCK=4096, num_warps=8)
    else:
        raise KeyError(name)


# the batched matmul, cross entropy, gemv and transpose texts of the same audit (NOTES, session 10) became
# workloads of tests/idioms.py, timed against Triton there
CASES = ("ho_mm_bias_relu", "ho_mm_kindex", "ho_online_softmax", "ho_layernorm_fwd", "ho_attn_exp64",
         "ho_attn_exp128", "ho_rmsnorm_bwd", "ho_row_argmax")
