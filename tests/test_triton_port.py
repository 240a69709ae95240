"""Kernels written the way Triton's tutorials teach, ported by changing only the imports."""
import torch

import kernellab as triton
import kernellab.language as tl


def test_tutorial_style_softmax_with_tl_range_and_autotune_surface():
    @triton.jit
    def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                       BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
        row_start = tl.program_id(0)
        row_step = tl.num_programs(0)
        for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
            row_start_ptr = input_ptr + row_idx * input_row_stride
            col_offsets = tl.arange(0, BLOCK_SIZE)
            input_ptrs = row_start_ptr + col_offsets
            mask = col_offsets < n_cols
            row = tl.load(input_ptrs, mask=mask, other=-float('inf'))
            row_minus_max = row - tl.max(row, axis=0)
            numerator = tl.exp(row_minus_max)
            denominator = tl.sum(numerator, axis=0)
            softmax_output = numerator / denominator
            output_row_start_ptr = output_ptr + row_idx * output_row_stride
            tl.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(23, 81, generator=g)
    y = torch.full_like(x, float("nan"))
    block = triton.next_power_of_2(x.shape[1])
    softmax_kernel[(5, 1, 1)](y, x, x.stride(0), y.stride(0), x.shape[0], x.shape[1], BLOCK_SIZE=block,
                              num_stages=2, num_warps=4)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), 1), atol=1e-6, rtol=1e-5)


def test_tutorial_style_matmul_with_autotune_activation_and_grouping():
    @triton.jit
    def leaky_relu(x):
        return tl.where(x >= 0, x, 0.01 * x)

    @triton.autotune(
        configs=[triton.Config({'BLOCK_SIZE_M': 32, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 4},
                               num_stages=3, num_warps=4),
                 triton.Config({'BLOCK_SIZE_M': 16, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 16, 'GROUP_SIZE_M': 2},
                               num_stages=4, num_warps=4)],
        key=['M', 'N', 'K'],
    )
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                      stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                      BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, ACTIVATION: tl.constexpr):
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        num_pid_in_group = GROUP_SIZE_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
        offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        if ACTIVATION == "leaky_relu":
            accumulator = leaky_relu(accumulator)
        c = accumulator.to(tl.float16)
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, c, mask=c_mask)

    g = torch.Generator().manual_seed(1)
    M, N, K = 50, 40, 70
    a = torch.randn(M, K, generator=g).half()
    b = torch.randn(K, N, generator=g).half()
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META['BLOCK_SIZE_M']) * triton.cdiv(N, META['BLOCK_SIZE_N']), )
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), ACTIVATION="leaky_relu")
    ref = a.double() @ b.double()
    ref = torch.where(ref >= 0, ref, 0.01 * ref)
    torch.testing.assert_close(c.double(), ref, atol=2e-2, rtol=2e-2)
    assert matmul_kernel.best_config is not None


def test_heuristics_and_warmup_trace():
    @triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
    @triton.jit
    def scale_kernel(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        if EVEN:
            tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)
        else:
            m = offs < n
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)

    x = torch.randn(100, generator=torch.Generator().manual_seed(2))
    ref = x.double() * 2
    scale_kernel[(triton.cdiv(100, 32),)](x, 100, BLOCK=32)
    torch.testing.assert_close(x.double(), ref)
    compiled = scale_kernel.warmup(x, 96, BLOCK=32, grid=(3,))
    assert "tt.load" in compiled.asm["tile"]
    assert compiled.trace.passes[0].name == "frontend"
