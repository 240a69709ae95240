"""Tensor descriptors (`tl.make_tensor_descriptor`, host `TensorDescriptor` arguments) with Triton 3.6's
semantics: tiles read out of bounds give the padding (0 or NaN), tiles written out of bounds drop those
elements. Checked against torch on random data with poisoned outputs, on the interpreter; compile-only
checks that the sm_90 path assembles (and takes TMA for a descriptor matmul); GPU runs marked `gpu`."""
from __future__ import annotations

import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import CompilationError, LaunchError

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32]
POISON = {torch.float32: float("nan"), torch.float16: float("nan"), torch.bfloat16: float("nan"),
          torch.int8: 0x5A, torch.int32: 0x7F5A5A5A}


def rand(shape, dtype, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3 + 0.5).to(dtype).to(device)
    return torch.randint(-100, 100, shape, generator=g).to(dtype).to(device)


def poisoned(shape, dtype, device="cpu"):
    return torch.full(shape, POISON[dtype], dtype=dtype, device=device)


def window(src, starts, block, fill=0.0):
    """`src[starts : starts + block]` with out-of-bounds elements `fill` (what a descriptor load gives)."""
    out = torch.full(block, fill, dtype=torch.float64)
    src_sl, out_sl = [], []
    for s, b, n in zip(starts, block, src.shape):
        lo, hi = max(s, 0), min(s + b, n)
        src_sl.append(slice(lo, max(hi, lo)))
        out_sl.append(slice(lo - s, max(hi, lo) - s))
    out[tuple(out_sl)] = src[tuple(src_sl)].double()
    return out


@kl.jit
def load2d(out_ptr, a_ptr, M, N, m0, n0, BM: tl.constexpr, BN: tl.constexpr, PAD: tl.constexpr):
    desc = tl.make_tensor_descriptor(a_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN], padding_option=PAD)
    tl.static_assert(desc.block_shape == [BM, BN])
    assert desc.shape[0] == M
    assert desc.strides[0] == N
    block = desc.load([m0, n0])
    idx = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + idx, block)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m0, n0", [(8, 32), (20, 40), (-3, -5), (30, 0)], ids=["in", "edge", "before", "past"])
def test_load_2d(dtype, m0, n0):
    M, N, BM, BN = 27, 70, 8, 32
    a = rand((M, N), dtype)
    out = poisoned((BM, BN), dtype)
    load2d[(1,)](out, a, M, N, m0, n0, BM, BN, "zero")
    assert torch.equal(out.double(), window(a, (m0, n0), (BM, BN)))


def test_load_nan_padding():
    M, N, BM, BN = 10, 20, 8, 16
    a = rand((M, N), torch.float32)
    out = poisoned((BM, BN), torch.float32)
    out.fill_(7.0)
    load2d[(1,)](out, a, M, N, 6, 12, BM, BN, "nan")
    torch.testing.assert_close(out.double(), window(a, (6, 12), (BM, BN), float("nan")), equal_nan=True)


@kl.jit
def copy3d(out_ptr, a_ptr, A, B, C, sa, sb, BA: tl.constexpr, BB: tl.constexpr, BC: tl.constexpr):
    src = tl.make_tensor_descriptor(a_ptr, [A, B, C], [sa, sb, 1], [BA, BB, BC])
    dst = tl.make_tensor_descriptor(out_ptr, [A, B, C], [sa, sb, 1], [BA, BB, BC])
    offs = [tl.program_id(0) * BA, tl.program_id(1) * BB, tl.program_id(2) * BC]
    tl.store_tensor_descriptor(dst, offs, tl.load_tensor_descriptor(src, offs) * 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32], ids=str)
def test_copy_3d_ragged(dtype):
    """Every tile of a ragged 3-D tensor: the edge tiles load zeros and drop their out-of-bounds stores."""
    A, B, C, BA, BB, BC = 5, 9, 37, 2, 4, 16
    a = rand((A, B, C), dtype, seed=3)
    out = poisoned((A, B, C), dtype)
    grid = (kl.cdiv(A, BA), kl.cdiv(B, BB), kl.cdiv(C, BC))
    copy3d[grid](out, a, A, B, C, a.stride(0), a.stride(1), BA, BB, BC)
    assert torch.equal(out, a * 2)


@kl.jit
def store2d(out_ptr, M, N, m0, n0, BM: tl.constexpr, BN: tl.constexpr):
    desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    val = (tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :] + 1).to(tl.float32)
    desc.store([m0, n0], val)  # converted to the descriptor's dtype, as in Triton


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8], ids=str)
@pytest.mark.parametrize("m0, n0", [(0, 16), (5, 20), (-2, -7)], ids=["in", "edge", "before"])
def test_store_2d(dtype, m0, n0):
    M, N, BM, BN = 9, 40, 8, 16
    out = poisoned((M, N), dtype)
    store2d[(1,)](out, M, N, m0, n0, BM, BN)
    expect = poisoned((M, N), dtype).double()
    val = (torch.arange(BM)[:, None] * BN + torch.arange(BN)[None, :] + 1).to(dtype).double()
    for i in range(BM):
        for j in range(BN):
            if 0 <= m0 + i < M and 0 <= n0 + j < N:
                expect[m0 + i, n0 + j] = val[i, j]
    torch.testing.assert_close(out.double(), expect, rtol=0, atol=0, equal_nan=True)


@kl.jit
def host_copy(in_desc, out_desc, M: tl.constexpr, N: tl.constexpr):
    BM: tl.constexpr = in_desc.block_shape[0]
    BN: tl.constexpr = in_desc.block_shape[1]
    m0, n0 = tl.program_id(0) * BM, tl.program_id(1) * BN
    out_desc.store([m0, n0], in_desc.load([m0, n0]) + 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32], ids=str)
def test_host_descriptor_argument(dtype):
    M, N, BM, BN = 19, 72, 8, 32
    a = rand((M, N), dtype, seed=1)
    out = poisoned((M, N), dtype)
    D = kl.TensorDescriptor
    host_copy[(kl.cdiv(M, BM), kl.cdiv(N, BN))](D.from_tensor(a, [BM, BN]), D(out, out.shape, out.stride(), [BM, BN]),
                                                 M, N)
    assert torch.equal(out, a + 1)


@kl.jit
def _pick(a_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    return tl.make_tensor_descriptor(a_ptr, [M, N], [N, 1], [BM, BN])


@kl.jit
def _scale(desc, m0, n0, factor):
    desc.store([m0, n0], desc.load([m0, n0]) * factor)


@kl.jit
def helpers_and_loops(a_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    desc = _pick(a_ptr, M, N, BM, BN)
    m0 = tl.program_id(0) * BM
    for n0 in range(0, N, BN):
        if n0 % (2 * BN) == 0:
            desc = _pick(a_ptr, M, N, BM, BN)
        _scale(desc, m0, n0, 3)


def test_descriptor_through_helpers_loops_and_branches():
    M, N, BM, BN = 20, 100, 8, 16
    a = rand((M, N), torch.float32, seed=2)
    ref = a.clone()
    helpers_and_loops[(kl.cdiv(M, BM),)](a, M, N, BM, BN)
    torch.testing.assert_close(a, ref * 3)


@kl.jit
def gather_rows(out_ptr, in_ptr, idx_ptr, X, Y, y0, BX: tl.constexpr, BY: tl.constexpr):
    desc = tl.make_tensor_descriptor(in_ptr, [X, Y], [Y, 1], [1, BY])
    rows = tl.load(idx_ptr + tl.arange(0, BX))
    vals = desc.gather(rows, y0)
    tl.store(out_ptr + tl.arange(0, BX)[:, None] * BY + tl.arange(0, BY)[None, :], vals)


@kl.jit
def scatter_rows(out_ptr, idx_ptr, X, Y, y0, BX: tl.constexpr, BY: tl.constexpr):
    desc = tl.make_tensor_descriptor(out_ptr, [X, Y], [Y, 1], [1, BY])
    rows = tl.load(idx_ptr + tl.arange(0, BX))
    desc.scatter((tl.arange(0, BX)[:, None] * BY + tl.arange(0, BY)[None, :]).to(tl.float32), rows, y0)


def test_gather_and_scatter():
    X, Y, BX, BY = 12, 40, 8, 16
    a = rand((X, Y), torch.float32, seed=4)
    rows = torch.tensor([3, 0, 11, 12, -1, 5, 7, 2], dtype=torch.int32)  # 12 and -1 are out of bounds
    out = poisoned((BX, BY), torch.float32)
    gather_rows[(1,)](out, a, rows, X, Y, 30, BX, BY)
    expect = torch.stack([window(a, (int(r), 30), (1, BY))[0] for r in rows])
    assert torch.equal(out.double(), expect)
    dst = poisoned((X, Y), torch.float32)
    scatter_rows[(1,)](dst, rows, X, Y, 30, BX, BY)
    want = poisoned((X, Y), torch.float32).double()
    for i, r in enumerate(rows.tolist()):
        for j in range(BY):
            if 0 <= r < X and 30 + j < Y:
                want[r, 30 + j] = i * BY + j
    torch.testing.assert_close(dst.double(), want, equal_nan=True)


@kl.jit
def atomic_add_tiles(out_ptr, a_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    desc = tl.make_tensor_descriptor(out_ptr, [M, N], [N, 1], [BM, BN])
    m0, n0 = tl.program_id(0) * BM, tl.program_id(1) * BN
    val = tl.load(a_ptr + (tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]))
    desc.atomic_add([m0, n0], val)


def test_atomic_add():
    M, N, BM, BN = 10, 40, 8, 16
    out = rand((M, N), torch.int32, seed=5)
    a = rand((BM, BN), torch.int32, seed=6)
    ref = out.clone()
    grid = (kl.cdiv(M, BM), kl.cdiv(N, BN))
    atomic_add_tiles[grid](out, a, M, N, BM, BN)
    tiled = a.repeat(grid[0], grid[1])[:M, :N]
    assert torch.equal(out, ref + tiled)


@kl.jit
def min_max_tiles(out_ptr, a_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, KIND: tl.constexpr):
    desc = tl.make_tensor_descriptor(out_ptr, [M, N], [N, 1], [BM, BN])
    m0, n0 = tl.program_id(0) * BM, tl.program_id(1) * BN
    val = tl.load(a_ptr + (tl.program_id(0) * BM + tl.arange(0, BM))[:, None] * (BN * tl.num_programs(1))
                  + (tl.program_id(1) * BN + tl.arange(0, BN))[None, :])
    if KIND == "min":
        desc.atomic_min([m0, n0], val)
    else:
        desc.atomic_max([m0, n0], val)


def _min_max_case(kind, dtype, device):
    """Tiles past the ragged edge (dropped there), values of both signs and a -0.0 / +0.0 pair."""
    M, N, BM, BN = 10, 40, 8, 16
    grid = (kl.cdiv(M, BM), kl.cdiv(N, BN))
    out = rand((M, N), dtype, seed=7, device=device)
    a = rand((grid[0] * BM, grid[1] * BN), dtype, seed=8, device=device)
    out[0, 0], a[0, 0] = -0.0, 0.0
    ref = out.clone()
    min_max_tiles[grid](out, a, M, N, BM, BN, kind)
    pick = torch.minimum if kind == "min" else torch.maximum
    want = pick(ref.double(), a[:M, :N].double())
    assert torch.equal(out.double()[1:], want[1:]) and torch.equal(out.double()[0, 1:], want[0, 1:])


@pytest.mark.parametrize("kind", ["min", "max"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_atomic_min_max_16bit_floats(kind, dtype):
    """Triton's descriptor reductions take f16/bf16 min and max (sm_90's TMA reduce has them)."""
    _min_max_case(kind, dtype, "cpu")


def test_plain_16bit_float_atomic_min_still_refused():
    @kl.jit
    def k(p):
        tl.atomic_min(p + tl.arange(0, 16), tl.full((16,), 1.0, tl.float16))

    with pytest.raises(CompilationError, match="atomic_min"):
        k.warmup(torch.empty(16, dtype=torch.float16), grid=(1,))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["min", "max"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gpu_atomic_min_max_16bit_floats(kind, dtype):
    _min_max_case(kind, dtype, "cuda")


# ---------------------------------------------------------------------------------------------- errors
@kl.jit
def too_narrow(a_ptr, M, N, BN: tl.constexpr):
    tl.make_tensor_descriptor(a_ptr, [M, N], [N, 1], [8, BN])


@kl.jit
def strided_last(a_ptr, M, N):
    tl.make_tensor_descriptor(a_ptr, [M, N], [N, 2], [8, 16])


@kl.jit
def nan_int(a_ptr, M, N):
    tl.make_tensor_descriptor(a_ptr, [M, N], [N, 1], [8, 16], padding_option="nan")


@kl.jit
def wrong_offsets(a_ptr, M, N):
    tl.make_tensor_descriptor(a_ptr, [M, N], [N, 1], [8, 16]).load([0])


@kl.jit
def wrong_value_shape(a_ptr, M, N):
    tl.make_tensor_descriptor(a_ptr, [M, N], [N, 1], [8, 16]).store([0, 0], tl.zeros((16, 8), tl.float32))


@pytest.mark.parametrize("kernel, args, message", [
    (too_narrow, (torch.zeros(8, 8), 8, 8, 2), "Descriptor block shape must have at least 16 bytes"),
    (strided_last, (torch.zeros(8, 16), 8, 16), "last dim must be 1"),
    (nan_int, (torch.zeros(8, 16, dtype=torch.int32), 8, 16), "`nan` is not supported for integer"),
    (wrong_offsets, (torch.zeros(8, 16), 8, 16), "expected 2 offsets"),
    (wrong_value_shape, (torch.zeros(8, 16), 8, 16), "block shape is [8, 16]"),
], ids=["16_bytes", "last_stride", "nan_int", "offsets", "value_shape"])
def test_compile_errors(kernel, args, message):
    with pytest.raises(CompilationError) as e:
        kernel[(1,)](*args)
    assert message in str(e.value) and kernel.__name__ in str(e.value)


def test_host_descriptor_errors():
    with pytest.raises(LaunchError, match="last stride must be 1"):
        kl.TensorDescriptor(torch.zeros(8, 16), [8, 16], [1, 8], [8, 16])
    with pytest.raises(LaunchError, match="powers of 2"):
        kl.TensorDescriptor.from_tensor(torch.zeros(8, 16), [8, 12])
    desc = kl.TensorDescriptor.from_tensor(torch.zeros(8, 16, dtype=torch.float16), [8, 4])
    with pytest.raises(LaunchError, match="host_copy.*at least 16 bytes"):
        host_copy[(1,)](desc, desc, 8, 16)


# ---------------------------------------------------------------------------------------------- sm_90 PTX
@kl.jit
def desc_matmul(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([pid_m * BM, k]), b_desc.load([k, pid_n * BN]), acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


@kl.jit
def desc_matmul_device(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [N, 1], [BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BM, BN])
    desc_matmul(a_desc, b_desc, c_desc, K, BM, BN, BK)


def _matmul_operands(M, N, K, device):
    a, b = rand((M, K), torch.float16, 7, device), rand((K, N), torch.float16, 8, device) * 0.1
    return a, b, torch.full((M, N), float("nan"), dtype=torch.float16, device=device)


def _launch_matmul(which, a, b, c, warmup=False):
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK = 128, 128, 64
    grid = (kl.cdiv(M, BM), kl.cdiv(N, BN))
    D = kl.TensorDescriptor.from_tensor
    if which == "host":
        fn, args = desc_matmul, (D(a, [BM, BK]), D(b, [BK, BN]), D(c, [BM, BN]), K)
    else:
        fn, args = desc_matmul_device, (a, b, c, M, N, K)
    meta = dict(BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=3)
    return fn.warmup(*args, grid=grid, **meta) if warmup else fn[grid](*args, **meta)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("which", ["host", "device"])
def test_sm90_matmul_uses_tma(which, tmp_path, monkeypatch):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _launch_matmul(which, *_matmul_operands(256, 256, 256, "cpu"), warmup=True)
    ck.build_gpu(Target(90))
    ptx = ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    if which == "host":  # the helper call is inlined before the pipeliner, so both should get TMA
        stats = next(p.stats for p in ck.trace.passes if p.name == "fill_stages_with_tma")
        assert stats.get("tma", 0) == 2, stats
        assert "cp.async.bulk.tensor.2d" in ptx


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("kernel, args", [
    (copy3d, lambda: (torch.empty(4, 8, 32), torch.empty(4, 8, 32), 4, 8, 32, 256, 32, 2, 4, 16)),
    (helpers_and_loops, lambda: (torch.empty(16, 64), 16, 64, 8, 16)),
    (gather_rows, lambda: (torch.empty(8, 16), torch.empty(12, 40), torch.zeros(8, dtype=torch.int32), 12, 40, 0, 8,
                           16)),
    (atomic_add_tiles, lambda: (torch.empty(16, 32, dtype=torch.int32), torch.empty(8, 16, dtype=torch.int32), 16,
                                32, 8, 16)),
    (min_max_tiles, lambda: (torch.empty(16, 32, dtype=torch.bfloat16), torch.empty(16, 32, dtype=torch.bfloat16), 16,
                             32, 8, 16, "min")),
], ids=["copy3d", "loops", "gather", "atomic", "min16"])
def test_sm90_ptx_assembles(kernel, args, tmp_path, monkeypatch):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = kernel.warmup(*args(), grid=(1, 1, 1))
    ck.build_gpu(Target(90))
    assert ck.asm["cubin"][:4] == b"\x7fELF"


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("which", ["host", "device"])
@pytest.mark.parametrize("shape", [(256, 256, 256), (200, 136, 520)], ids=["square", "ragged"])
def test_gpu_matmul(which, shape):
    a, b, c = _matmul_operands(*shape, "cuda")
    _launch_matmul(which, a, b, c)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert not torch.isnan(c).any()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    assert err < 2e-3, err


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gpu_load_store(dtype):
    M, N, BM, BN = 27, 70, 8, 32
    a = rand((M, N), dtype, device="cuda")
    for m0, n0 in [(8, 32), (20, 40), (-3, -5)]:
        out = poisoned((BM, BN), dtype, "cuda")
        load2d[(1,)](out, a, M, N, m0, n0, BM, BN, "zero")
        assert torch.equal(out.cpu().double(), window(a.cpu(), (m0, n0), (BM, BN)))
    A, B, C = 5, 9, 40
    x = rand((A, B, C), dtype, device="cuda")
    y = poisoned((A, B, C), dtype, "cuda")
    copy3d[(3, 3, 3)](y, x, A, B, C, x.stride(0), x.stride(1), 2, 4, 16)
    assert torch.equal(y, x * 2)


@pytest.mark.gpu
def test_gpu_host_descriptor_helpers_gather_atomics():
    M, N = 19, 72
    a = rand((M, N), torch.float16, seed=1, device="cuda")
    out = poisoned((M, N), torch.float16, "cuda")
    D = kl.TensorDescriptor.from_tensor
    host_copy[(3, 3)](D(a, [8, 32]), D(out, [8, 32]), M, N)
    assert torch.equal(out, a + 1)
    x = rand((20, 100), torch.float32, seed=2, device="cuda")
    ref = x.clone()
    helpers_and_loops[(3,)](x, 20, 100, 8, 16)
    torch.testing.assert_close(x, ref * 3)
    src = rand((12, 40), torch.float32, seed=4, device="cuda")
    rows = torch.tensor([3, 0, 11, 12, -1, 5, 7, 2], dtype=torch.int32, device="cuda")
    g = poisoned((8, 16), torch.float32, "cuda")
    gather_rows[(1,)](g, src, rows, 12, 40, 30, 8, 16)
    expect = torch.stack([window(src.cpu(), (int(r), 30), (1, 16))[0] for r in rows.cpu()])
    assert torch.equal(g.cpu().double(), expect)
    o = rand((10, 40), torch.int32, seed=5, device="cuda")
    v = rand((8, 16), torch.int32, seed=6, device="cuda")
    r0 = o.clone()
    atomic_add_tiles[(2, 3)](o, v, 10, 40, 8, 16)
    assert torch.equal(o, r0 + v.repeat(2, 3)[:10, :40])


@kl.jit
def _bool_block_copy(a_ptr, b_ptr, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_block_ptr(a_ptr, (N,), (1,), (pid * BLOCK,), (BLOCK,), (0,))
    dst = tl.make_block_ptr(b_ptr, (N,), (1,), (pid * BLOCK,), (BLOCK,), (0,))
    tl.store(dst, tl.load(src, boundary_check=(0,), padding_option="zero"), boundary_check=(0,))


def test_bool_block_pointer_copy_builds_for_the_gpu():
    """Regression (Triton's test_block_copy with bool): the vector-width planner divided by int1's 0 bytes."""
    g = torch.Generator().manual_seed(1)
    a = torch.rand(128, generator=g) > 0.5
    b = torch.ones(128, dtype=torch.bool)
    _bool_block_copy[(2,)](a, b, 100, 64)
    assert torch.equal(b[:100], a[:100]) and b[100:].all()
    ck = _bool_block_copy.warmup(a, b, 100, 64, grid=(2,))
    ck.build_gpu()
    assert "cubin" in ck.asm

