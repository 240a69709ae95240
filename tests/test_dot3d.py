"""Batched (3-D) `tl.dot`: [B, M, K] x [B, K, N] -> [B, M, N], on the interpreter, through the
decompose_batched_dot pass (IR in, IR out), to PTX with tensor-core instructions, and on the GPU."""
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.passes import decompose_batched_dot
from tests.gpu_passes.conftest import OPTIONS, printed, run_check, run_gpu_pass

IR_IN = """
tt.func @k(%pa: !ptr<f16>, %pb: !ptr<f16>, %pc: !ptr<f32>) {
  %ta = tt.splat %pa : tensor<2x16x16x!ptr<f16>>
  %tb = tt.splat %pb : tensor<2x16x16x!ptr<f16>>
  %tc = tt.splat %pc : tensor<2x16x16x!ptr<f32>>
  %a = tt.load %ta : tensor<2x16x16xf16>
  %b = tt.load %tb : tensor<2x16x16xf16>
  %zero = arith.constant {value = 0.0} : tensor<2x16x16xf32>
  %d = tt.dot %a, %b, %zero {input_precision = "ieee"} : tensor<2x16x16xf32>
  tt.store %tc, %d
  tt.return
}
"""

IR_OUT = """
tt.func @k(%pa: !ptr<f16>, %pb: !ptr<f16>, %pc: !ptr<f32>) {
  %ta = tt.splat %pa : tensor<2x16x16x!ptr<f16>>
  %tb = tt.splat %pb : tensor<2x16x16x!ptr<f16>>
  %tc = tt.splat %pc : tensor<2x16x16x!ptr<f32>>
  %a = tt.load %ta : tensor<2x16x16xf16>
  %b = tt.load %tb : tensor<2x16x16xf16>
  %zero = arith.constant {value = 0.0} : tensor<2x16x16xf32>
  %0 = arith.constant {value = 0.0} : tensor<16x16xf32>
  %1 = tt.trans %a {order = [1, 2, 0]} : tensor<16x16x2xf16>
  %2 = tt.reshape %1 : tensor<16x16x1x2xf16>
  %3, %4 = tt.split %2 : tensor<16x16x1xf16>, tensor<16x16x1xf16>
  %5 = tt.reshape %3 : tensor<16x16xf16>
  %6 = tt.reshape %4 : tensor<16x16xf16>
  %7 = tt.trans %b {order = [1, 2, 0]} : tensor<16x16x2xf16>
  %8 = tt.reshape %7 : tensor<16x16x1x2xf16>
  %9, %10 = tt.split %8 : tensor<16x16x1xf16>, tensor<16x16x1xf16>
  %11 = tt.reshape %9 : tensor<16x16xf16>
  %12 = tt.reshape %10 : tensor<16x16xf16>
  %13 = tt.dot %5, %11, %0 {input_precision = "ieee"} : tensor<16x16xf32>
  %14 = tt.dot %6, %12, %0 {input_precision = "ieee"} : tensor<16x16xf32>
  %15 = tt.reshape %13 : tensor<16x16x1xf32>
  %16 = tt.reshape %14 : tensor<16x16x1xf32>
  %17 = tt.join %15, %16 : tensor<16x16x1x2xf32>
  %18 = tt.reshape %17 : tensor<16x16x2xf32>
  %19 = tt.trans %18 {order = [2, 0, 1]} : tensor<2x16x16xf32>
  tt.store %tc, %19
  tt.return
}
"""


def test_pass_splits_the_batch_into_2d_dots(monkeypatch):
    # KERNELLAB_BATCHED_SPLIT=0: the split at the dot (the fallback where a value cannot be rebuilt per entry)
    monkeypatch.setenv("KERNELLAB_BATCHED_SPLIT", "0")
    _, stats = run_check(decompose_batched_dot, IR_IN, IR_OUT)
    assert stats == {"batched_dots": 1}


def test_pass_by_default_loads_each_entry(monkeypatch):
    # the default takes the batch apart at the loads: four 2-D loads, no tt.split left (tests/test_batched_split.py)
    monkeypatch.delenv("KERNELLAB_BATCHED_SPLIT", raising=False)
    m, stats = run_gpu_pass(decompose_batched_dot, IR_IN, OPTIONS)
    got = printed(m)
    assert stats == {"batched_dots": 1}
    assert got.count("tt.load") == 4 and "tt.split" not in got and got.count("tt.dot") == 2, got


def test_pass_leaves_2d_dots_alone():
    text = IR_IN.replace("2x16x16", "16x16")
    _, stats = run_check(decompose_batched_dot, text, text)
    assert stats == {"batched_dots": 0}


@kl.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, o_ptr, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
               WITH_ACC: tl.constexpr, OUT: tl.constexpr):
    b = tl.arange(0, B)[:, None, None]
    m = tl.arange(0, M)[None, :, None]
    n = tl.arange(0, N)[None, None, :]
    k = tl.arange(0, K)
    a = tl.load(a_ptr + b * M * K + m * K + k[None, None, :])
    w = tl.load(b_ptr + b * K * N + k[None, :, None] * N + n)
    if WITH_ACC:
        out = tl.dot(a, w, tl.load(c_ptr + b * M * N + m * N + n), out_dtype=OUT)
    else:
        out = tl.dot(a, w, out_dtype=OUT)
    tl.store(o_ptr + b * M * N + m * N + n, out)


CASES = [  # (dtype, out torch dtype, B, M, N, K, with_acc)
    (torch.float16, torch.float32, 2, 16, 16, 16, False),
    (torch.float16, torch.float32, 4, 32, 16, 32, True),
    (torch.float16, torch.float16, 8, 16, 32, 16, False),
    (torch.bfloat16, torch.float32, 2, 64, 32, 32, True),
    (torch.float32, torch.float32, 4, 16, 16, 32, True),
    (torch.int8, torch.int32, 2, 16, 16, 32, True),
    (torch.float16, torch.float32, 1, 16, 16, 16, True),
]
_TL = {torch.float32: tl.float32, torch.float16: tl.float16, torch.int32: tl.int32}


def _inputs(dtype, out_dtype, B, M, N, K, device):
    g = torch.Generator().manual_seed(B * 1000 + M + N + K)
    if dtype == torch.int8:
        a = torch.randint(-128, 128, (B, M, K), generator=g, dtype=torch.int8)
        w = torch.randint(-128, 128, (B, K, N), generator=g, dtype=torch.int8)
        c = torch.randint(-2**20, 2**20, (B, M, N), generator=g, dtype=torch.int32)
    else:
        a = torch.randn(B, M, K, generator=g).to(dtype)
        w = torch.randn(B, K, N, generator=g).to(dtype)
        a[0, 0, :4] = torch.tensor([0.5, -2.0, 3.25, -0.125]).to(dtype)  # exact edge values
        c = torch.randn(B, M, N, generator=g).to(out_dtype)
    return a.to(device), w.to(device), c.to(device)


def _check(device, dtype, out_dtype, B, M, N, K, with_acc):
    a, w, c = _inputs(dtype, out_dtype, B, M, N, K, device)
    poison = -7 if out_dtype == torch.int32 else float("nan")
    out = torch.full((B, M, N), poison, dtype=out_dtype, device=device)
    bmm_kernel[(1,)](a, w, c, out, B, M, N, K, with_acc, _TL[out_dtype])
    if dtype == torch.int8:
        ref = torch.bmm(a.cpu().long(), w.cpu().long()) + (c.cpu().long() if with_acc else 0)
        assert torch.equal(out.cpu().long(), ref)
        return
    ref = torch.bmm(a.cpu().double(), w.cpu().double()) + (c.cpu().double() if with_acc else 0)
    tol = 2e-2 if out_dtype == torch.float16 or dtype == torch.float32 else 2e-3  # fp32 inputs run as tf32
    torch.testing.assert_close(out.cpu().double(), ref, rtol=tol, atol=tol * K ** 0.5)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'x'.join(map(str, c[2:6]))}-acc{c[6]}")
def test_dot3d_interpreter(case):
    _check("cpu", *case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'x'.join(map(str, c[2:6]))}-acc{c[6]}")
def test_dot3d_compiles_to_tensor_core_ptx(case):
    dtype, out_dtype, B, M, N, K, with_acc = case
    a, w, c = _inputs(dtype, out_dtype, B, M, N, K, "cpu")
    out = torch.empty((B, M, N), dtype=out_dtype)
    ck = bmm_kernel.warmup(a, w, c, out, B, M, N, K, with_acc, _TL[out_dtype], grid=(1,))
    ck.build_gpu()
    ptx = ck.asm["ptx"]
    assert "cubin" in ck.asm and "batched_dots=1" in ck.trace.summary()
    if M * N >= 4 * 16 * 8 and out_dtype != torch.float16:  # 16x8 tiles for 4 warps, an fp32 accumulator
        assert "mma.sync" in ptx or "wgmma" in ptx, "no tensor-core instruction in the PTX"


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'x'.join(map(str, c[2:6]))}-acc{c[6]}")
def test_dot3d_gpu(case):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _check("cuda", *case)


def test_dot3d_shape_errors():
    @kl.jit
    def bad(a_ptr, o_ptr):
        i = tl.arange(0, 16)
        a = tl.load(a_ptr + i[:, None, None] * 0 + i[None, :, None] * 16 + i[None, None, :])
        w = tl.load(a_ptr + tl.arange(0, 2)[:, None, None] * 0 + i[None, :, None] * 16 + i[None, None, :])
        tl.store(o_ptr + i[:, None, None] * 0 + i[None, :, None] * 16 + i[None, None, :], tl.dot(a, w))

    with pytest.raises(kl.CompilationError, match="batch dimensions differ"):
        bad[(1,)](torch.zeros(256), torch.zeros(256))


@kl.jit
def multidim_kernel(X, Y, Z, RANK: tl.constexpr, TRANS_A: tl.constexpr, TRANS_B: tl.constexpr):
    x = tl.load(X + tl.arange(0, 256 << RANK)).reshape([2] * (RANK - 2) + [32, 32])
    y = tl.load(Y + tl.arange(0, 256 << RANK)).reshape([2] * (RANK - 2) + [32, 32])
    if TRANS_A:
        x = tl.trans(x)  # no dims: the last two axes swap (a batched transpose), as in Triton
    if TRANS_B:
        y = tl.trans(y)
    z = tl.dot(x, y)
    tl.store(Z + tl.arange(0, 256 << RANK), z.reshape([256 << RANK]))


@pytest.mark.parametrize("rank", [2, 3, 4, 5])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True)])
def test_dot_with_several_batch_dims(rank, trans_a, trans_b):
    shape = (2,) * (rank - 2) + (32, 32)
    g = torch.Generator().manual_seed(rank)
    a = torch.randint(-4, 5, shape, generator=g).to(torch.float16)
    b = torch.randint(-4, 5, shape, generator=g).to(torch.float16)
    c = torch.full(shape, float("nan"))
    multidim_kernel[(1,)](a, b, c, rank, trans_a, trans_b)
    ta = a.transpose(-1, -2) if trans_a else a
    tb = b.transpose(-1, -2) if trans_b else b
    assert torch.equal(c, ta.float() @ tb.float())
    if rank == 4:
        ck = multidim_kernel.warmup(a, b, c, rank, trans_a, trans_b, grid=(1,))
        ck.build_gpu()
        assert "cubin" in ck.asm
