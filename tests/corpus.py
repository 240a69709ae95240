"""The kernel corpus: Triton-style kernels with a runner and a float64 torch reference each.

Shared by the interpreter tests, the pass-equivalence tests, the GPU tests and the benchmarks.
Each case: `run(kl, tl, device, gen) -> (outputs, references)`; the kernel text is written once
and compiled by whichever `kl` (kernellab, or Triton for the benchmarks) is given.
"""
from __future__ import annotations

import torch


def make_kernels(kl, tl):
    """Define every corpus kernel with the given `jit` and language module."""

    @kl.jit
    def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(axis=0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(z_ptr + offs, x + y, mask=mask)

    @kl.jit
    def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        step = tl.num_programs(0)
        for r in range(row, n_rows, step):
            cols = tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(in_ptr + r * in_stride + cols, mask=mask, other=-float("inf"))
            z = x - tl.max(x, axis=0)
            num = tl.exp(z)
            den = tl.sum(num, axis=0)
            tl.store(out_ptr + r * out_stride + cols, num / den, mask=mask)

    @kl.jit
    def layer_norm_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        Y += row * stride
        X += row * stride
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
            acc += a
        mean = tl.sum(acc, axis=0) / N
        acc2 = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
            x = tl.where(cols < N, x - mean, 0.)
            acc2 += x * x
        var = tl.sum(acc2, axis=0) / N
        rstd = 1 / tl.sqrt(var + eps)
        tl.store(Mean + row, mean)
        tl.store(Rstd + row, rstd)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            w = tl.load(W + cols, mask=mask)
            b = tl.load(B + cols, mask=mask)
            x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
            y = (x - mean) * rstd * w + b
            tl.store(Y + cols, y, mask=mask)

    @kl.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                      stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        c = accumulator.to(c_ptr.dtype.element_ty)
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, c, mask=c_mask)

    @kl.jit
    def cumsum_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * n_cols + cols, tl.cumsum(x, axis=0), mask=mask)

    @kl.jit
    def argmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        tl.store(out_ptr + row, tl.argmax(x, axis=0))

    @kl.jit
    def histogram_kernel(x_ptr, hist_ptr, n, n_bins, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(x_ptr + offs, mask=mask, other=0)
        tl.atomic_add(hist_ptr + v % n_bins, 1, mask=mask)

    @kl.jit
    def transpose_kernel(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        tile = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask)
        tl.store(y_ptr + rn[None, :] * M + rm[:, None], tile, mask=mask)

    @kl.jit
    def loop_carry_kernel(x_ptr, out_ptr, n_steps, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        peak = tl.full([BLOCK], -float("inf"), tl.float32)
        i = 0
        while i < n_steps:
            acc = acc * 0.5 + x
            peak = tl.maximum(peak, acc)
            i += 1
        for j in range(n_steps):
            if j % 2 == 0:
                acc = acc + 1.0
            else:
                acc = acc - 0.25
        tl.store(out_ptr + offs, acc + peak)

    @kl.jit
    def dropout_kernel(x_ptr, out_ptr, n, p, seed, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        r = tl.rand(seed, offs)
        keep = r > p
        tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)

    @kl.jit
    def block_ptr_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                                stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                BLOCK_K: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        a_block = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                                    offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
        b_block = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                                    offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N), order=(1, 0))
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = tl.load(a_block, boundary_check=(0, 1), padding_option="zero")
            b = tl.load(b_block, boundary_check=(0, 1), padding_option="zero")
            acc += tl.dot(a, b)
            a_block = tl.advance(a_block, (0, BLOCK_K))
            b_block = tl.advance(b_block, (BLOCK_K, 0))
        c_block = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                                    offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N),
                                    order=(1, 0))
        tl.store(c_block, acc.to(tl.float32), boundary_check=(0, 1))

    return {k: v for k, v in locals().items() if k.endswith("_kernel")}


def _poison(shape, dtype, device):
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.full(shape, -12345, dtype=dtype, device=device)


class Case:
    """One corpus entry: a kernel name, a size preset and a runner returning (outs, refs, tolerances)."""

    def __init__(self, name, kernel, fn, sizes):
        self.name, self.kernel, self.fn, self.sizes = name, kernel, fn, sizes

    def run(self, kernels, device="cpu", seed=0, size="small"):
        gen = torch.Generator().manual_seed(seed)
        return self.fn(kernels[self.kernel], device, gen, **self.sizes[size])


def _rand(gen, *shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, generator=gen).to(dtype).to(device)


def run_add(k, device, gen, n):
    x, y = _rand(gen, n, device=device), _rand(gen, n, device=device)
    z = _poison((n,), torch.float32, device)
    k[lambda meta: (triton_cdiv(n, meta["BLOCK"]),)](x, y, z, n, BLOCK=1024)
    return [z], [x.double() + y.double()], 1e-6


def triton_cdiv(a, b):
    return (a + b - 1) // b


def run_softmax(k, device, gen, rows, cols):
    x = _rand(gen, rows, cols, device=device)
    y = _poison((rows, cols), torch.float32, device)
    block = 1 << (cols - 1).bit_length()
    k[(min(rows, 8),)](y, x, x.stride(0), y.stride(0), rows, cols, BLOCK=block)
    return [y], [torch.softmax(x.double(), dim=1)], 1e-5


def run_layer_norm(k, device, gen, rows, cols):
    x = _rand(gen, rows, cols, device=device)
    w, b = _rand(gen, cols, device=device), _rand(gen, cols, device=device)
    y = _poison((rows, cols), torch.float32, device)
    mean, rstd = _poison((rows,), torch.float32, device), _poison((rows,), torch.float32, device)
    k[(rows,)](x, y, w, b, mean, rstd, x.stride(0), cols, 1e-5, BLOCK=128)
    xd = x.double()
    ref = torch.nn.functional.layer_norm(xd, (cols,), w.double(), b.double(), 1e-5)
    var = xd.var(dim=1, unbiased=False)
    return [y, mean, rstd], [ref, xd.mean(dim=1), 1 / torch.sqrt(var + 1e-5)], 1e-4


def run_matmul(k, device, gen, M, N, K):
    a, b = _rand(gen, M, K, dtype=torch.float16, device=device), _rand(gen, K, N, dtype=torch.float16, device=device)
    c = _poison((M, N), torch.float16, device)
    grid = lambda meta: (triton_cdiv(M, meta["BLOCK_M"]) * triton_cdiv(N, meta["BLOCK_N"]),)
    k[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4)
    return [c], [(a.double() @ b.double())], 2e-2


def run_cumsum(k, device, gen, rows, cols):
    x = _rand(gen, rows, cols, device=device)
    y = _poison((rows, cols), torch.float32, device)
    k[(rows,)](x, y, cols, BLOCK=1 << (cols - 1).bit_length())
    return [y], [torch.cumsum(x.double(), dim=1)], 1e-4


def run_argmax(k, device, gen, rows, cols):
    x = _rand(gen, rows, cols, device=device)
    out = _poison((rows,), torch.int32, device)
    k[(rows,)](x, out, cols, BLOCK=1 << (cols - 1).bit_length())
    return [out], [torch.argmax(x.double(), dim=1)], 0


def run_histogram(k, device, gen, n, bins):
    x = torch.randint(0, 10_000, (n,), generator=gen, dtype=torch.int32).to(device)
    hist = torch.zeros(bins, dtype=torch.int32, device=device)
    k[(triton_cdiv(n, 256),)](x, hist, n, bins, BLOCK=256)
    return [hist], [torch.bincount((x % bins).long(), minlength=bins)], 0


def run_transpose(k, device, gen, M, N):
    x = _rand(gen, M, N, device=device)
    y = _poison((N, M), torch.float32, device)
    k[(triton_cdiv(M, 32), triton_cdiv(N, 32))](x, y, M, N, BM=32, BN=32)
    return [y], [x.double().t()], 0


def run_loop_carry(k, device, gen, steps):
    x = _rand(gen, 64, device=device)
    out = _poison((64,), torch.float32, device)
    k[(1,)](x, out, steps, BLOCK=64)
    acc = torch.zeros(64, dtype=torch.float64)
    peak = torch.full((64,), float("-inf"), dtype=torch.float64)
    xd = x.double().cpu()
    for _ in range(steps):
        acc = acc * 0.5 + xd
        peak = torch.maximum(peak, acc)
    for j in range(steps):
        acc = acc + 1.0 if j % 2 == 0 else acc - 0.25
    return [out], [acc + peak], 1e-5


def run_dropout(k, device, gen, n):
    x = _rand(gen, n, device=device)
    out = _poison((n,), torch.float32, device)
    out2 = _poison((n,), torch.float32, device)
    p = 0.3
    k[(triton_cdiv(n, 1024),)](x, out, n, p, 1234, BLOCK=1024)
    k[(triton_cdiv(n, 1024),)](x, out2, n, p, 1234, BLOCK=1024)
    kept = out != 0
    frac = kept.double().mean().item()
    ref = torch.where(kept, x.double() / (1 - p), torch.zeros((), dtype=torch.float64, device=device))
    # kept elements are scaled exactly, the mask is deterministic for a seed, and about 70% are kept
    ok = torch.tensor(abs(frac - (1 - p)) < 0.05 and bool(torch.equal(out, out2)))
    return [out, ok], [ref, torch.tensor(True)], 1e-6


def run_block_ptr_matmul(k, device, gen, M, N, K):
    a, b = _rand(gen, M, K, dtype=torch.float16, device=device), _rand(gen, K, N, dtype=torch.float16, device=device)
    c = _poison((M, N), torch.float32, device)
    k[(triton_cdiv(M, 32), triton_cdiv(N, 32))](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                 b.stride(1), c.stride(0), c.stride(1), BLOCK_M=32, BLOCK_N=32,
                                                 BLOCK_K=32)
    return [c], [a.double() @ b.double()], 1e-3


CASES = [
    Case("vector_add", "add_kernel", run_add, {"small": dict(n=5000), "large": dict(n=1 << 20)}),
    Case("fused_softmax", "softmax_kernel", run_softmax,
         {"small": dict(rows=37, cols=100), "large": dict(rows=1024, cols=512)}),
    Case("layer_norm", "layer_norm_kernel", run_layer_norm,
         {"small": dict(rows=16, cols=300), "large": dict(rows=256, cols=1024)}),
    Case("matmul_dot", "matmul_kernel", run_matmul,
         {"small": dict(M=70, N=50, K=90), "large": dict(M=256, N=256, K=256)}),
    Case("cumsum", "cumsum_kernel", run_cumsum, {"small": dict(rows=9, cols=100), "large": dict(rows=512, cols=256)}),
    Case("argmax", "argmax_kernel", run_argmax, {"small": dict(rows=21, cols=77), "large": dict(rows=1024, cols=256)}),
    Case("histogram_atomics", "histogram_kernel", run_histogram,
         {"small": dict(n=3000, bins=17), "large": dict(n=1 << 18, bins=64)}),
    Case("tiled_transpose", "transpose_kernel", run_transpose,
         {"small": dict(M=70, N=45), "large": dict(M=512, N=512)}),
    Case("loop_carried", "loop_carry_kernel", run_loop_carry, {"small": dict(steps=7), "large": dict(steps=200)}),
    Case("dropout_rand", "dropout_kernel", run_dropout, {"small": dict(n=5000), "large": dict(n=1 << 18)}),
    Case("block_ptr_matmul", "block_ptr_matmul_kernel", run_block_ptr_matmul,
         {"small": dict(M=70, N=50, K=90), "large": dict(M=256, N=256, K=256)}),
]


def check(outs, refs, tol):
    for o, r in zip(outs, refs):
        o = o.cpu()
        r = r.cpu()
        assert not (o.is_floating_point() and torch.isnan(o).any()), "output has unwritten (NaN-poisoned) elements"
        if tol == 0:
            assert torch.equal(o.to(r.dtype), r), f"mismatch:\n{o}\nvs\n{r}"
        else:
            torch.testing.assert_close(o.double(), r.double(), atol=tol, rtol=tol)
