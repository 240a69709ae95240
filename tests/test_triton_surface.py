"""Conformance with Triton's language semantics where its own unit tests found kernellab wanting (issue 13).

Each case runs on the CPU interpreter against a torch float64/int64 reference into a poisoned output, builds
through the GPU pipeline to PTX that ptxas assembles (no GPU needed; skipped without ptxas), and runs on a GPU
(`gpu` mark, skipped without CUDA).
"""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# ---------------------------------------------------------------- a reshaped range addressing a large tile
@kl.jit
def permuted_sums_kernel(X, Y, D0: tl.constexpr, D1: tl.constexpr, D2: tl.constexpr, D3: tl.constexpr,
                         P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr, P3: tl.constexpr,
                         A0: tl.constexpr, A1: tl.constexpr):
    """A 4-D tile addressed by one range reshaped, permuted, then summed over two axes in turn."""
    offs = tl.reshape(tl.arange(0, D0 * D1 * D2 * D3), (D0, D1, D2, D3))
    v = tl.permute(tl.load(X + offs), (P0, P1, P2, P3))
    r = tl.sum(tl.sum(v, A0), A1)
    out = tl.reshape(tl.arange(0, r.shape[0] * r.shape[1]), r.shape)
    tl.store(Y + out, r)


# (shape, permutation, the two summed axes, num_warps); the first ones hold 32768 elements: their pointer tile
# (256 KB) must not be converted through shared memory
PERMUTED_SUMS = [
    ((16, 32, 16, 4), (2, 1, 0, 3), (2, 0), 4),
    ((8, 4, 32, 32), (3, 0, 2, 1), (1, 1), 4),
    ((4, 8, 16, 2), (1, 3, 0, 2), (0, 2), 2),
    ((2, 2, 8, 64), (0, 3, 2, 1), (3, 0), 8),
]


def _permuted_sums(shape, perm, axes, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1000, 1000, shape, generator=g, dtype=torch.int32)
    x.view(-1)[::97] = torch.iinfo(torch.int32).max // 4096  # large values, no overflow in the sums
    ref = x.to(torch.int64).permute(perm).sum(axes[0]).sum(axes[1])
    y = torch.full(ref.shape, -0x7F7F7F7F, dtype=torch.int32)
    return x.to(device), y.to(device), ref


def _launch_permuted_sums(x, y, shape, perm, axes, nw):
    return permuted_sums_kernel[(1,)](x, y, *shape, *perm, *axes, num_warps=nw)


@pytest.mark.parametrize("shape,perm,axes,nw", PERMUTED_SUMS)
def test_permuted_sums_interpreter(shape, perm, axes, nw):
    x, y, ref = _permuted_sums(shape, perm, axes)
    _launch_permuted_sums(x, y, shape, perm, axes, nw)
    assert torch.equal(y.to(torch.int64), ref)


@pytest.mark.parametrize("shape,perm,axes,nw", PERMUTED_SUMS)
def test_permuted_sums_convert_no_pointer_tile(shape, perm, axes, nw, tmp_path, monkeypatch):
    """The load takes the addresses in its own layout: the reshaped range is recomputed in it, so no pointer
    tile goes through shared memory (Triton's test_chained_reductions asked 256 KB of it)."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x, y, _ = _permuted_sums(shape, perm, axes)
    compiled = permuted_sums_kernel.warmup(x, y, *shape, *perm, *axes, num_warps=nw, grid=(1,))
    try:
        compiled = compiled.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    converted = [b for b in compiled.shared_plan if b["op"] == "ttg.convert_layout"]
    assert all(b["size"] <= 4096 for b in converted), compiled.shared_plan
    assert "!ptr<i32>, #" not in "".join(ln for ln in compiled.asm["gpu"].splitlines() if "convert_layout" in ln)
    assert ".entry" in compiled.asm["ptx"]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("shape,perm,axes,nw", PERMUTED_SUMS)
def test_permuted_sums_gpu(shape, perm, axes, nw):
    for seed in range(2):
        x, y, ref = _permuted_sums(shape, perm, axes, "cuda", seed)
        _launch_permuted_sums(x, y, shape, perm, axes, nw)
        assert torch.equal(y.cpu().to(torch.int64), ref)


@kl.jit
def permuted_sums5_kernel(X, Y, SHAPE: tl.constexpr, PERM: tl.constexpr, AXES: tl.constexpr):
    """The 5-D form: a range reshaped to SHAPE addresses the load, the tile is permuted, three sums follow."""
    n: tl.constexpr = SHAPE[0] * SHAPE[1] * SHAPE[2] * SHAPE[3] * SHAPE[4]
    offs = tl.reshape(tl.arange(0, n), SHAPE)
    v = tl.permute(tl.load(X + offs), PERM)
    r = tl.sum(tl.sum(tl.sum(v, AXES[0]), AXES[1]), AXES[2])
    tl.store(Y + tl.reshape(tl.arange(0, r.shape[0] * r.shape[1]), r.shape), r)


# Triton's test_chained_reductions cases and one at 2 warps
PERMUTED_SUMS5 = [((4, 32, 32, 4, 2), (2, 1, 0, 3, 4), (3, 1, 0), 4),
                  ((8, 2, 32, 4, 16), (4, 0, 1, 3, 2), (0, 2, 0), 4),
                  ((2, 4, 8, 8, 4), (1, 0, 4, 2, 3), (2, 2, 0), 2)]


def _permuted_sums5(shape, perm, axes, nw, device, seed=0):
    x, y, _ = _permuted_sums(shape, perm, axes[:2], seed=seed)
    ref = x.to(torch.int64).permute(perm).sum(axes[0]).sum(axes[1]).sum(axes[2])
    y = torch.full(ref.shape, -0x7F7F7F7F, dtype=torch.int32)
    x, y = x.to(device), y.to(device)
    permuted_sums5_kernel[(1,)](x, y, shape, perm, axes, num_warps=nw)
    assert torch.equal(y.cpu().to(torch.int64), ref)


@pytest.mark.parametrize("shape,perm,axes,nw", PERMUTED_SUMS5)
def test_permuted_sums5_interpreter_and_ptx(shape, perm, axes, nw, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    _permuted_sums5(shape, perm, axes, nw, "cpu")
    x = torch.empty(shape, dtype=torch.int32)
    y = torch.empty(x.permute(perm).sum(axes[0]).sum(axes[1]).sum(axes[2]).shape, dtype=torch.int32)
    try:
        compiled = permuted_sums5_kernel.warmup(x, y, shape, perm, axes, num_warps=nw, grid=(1,)).build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    assert all(b["size"] <= 8192 for b in compiled.shared_plan), compiled.shared_plan
    assert "!ptr<i32>, #" not in "".join(ln for ln in compiled.asm["gpu"].splitlines() if "convert_layout" in ln)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("shape,perm,axes,nw", PERMUTED_SUMS5)
def test_permuted_sums5_gpu(shape, perm, axes, nw):
    for seed in range(2):
        _permuted_sums5(shape, perm, axes, nw, "cuda", seed)


@kl.jit
def plus_reshaped_range_kernel(X, Y, R: tl.constexpr, C: tl.constexpr):
    """A loaded tile plus `arange(R * C).reshape(R, C)`: the index tile is made in the loaded tile's layout
    (through the reshape, in a bit layout where no blocked one fits) instead of converted through shared memory."""
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    idx = tl.reshape(tl.arange(0, R * C), (R, C))
    tl.store(Y + offs, tl.load(X + offs) * 2.0 + idx.to(tl.float32))


PLUS_RESHAPED = [(16, 64, 4), (32, 32, 4), (8, 256, 8), (64, 16, 2)]


def _plus_reshaped(R, C, nw, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(R, C, generator=g) * 100
    y = torch.full((R, C), float("nan"))
    x, y = x.to(device), y.to(device)
    plus_reshaped_range_kernel[(1,)](x, y, R=R, C=C, num_warps=nw)
    ref = x.cpu().double() * 2 + torch.arange(R * C, dtype=torch.float64).reshape(R, C)
    torch.testing.assert_close(y.cpu().double(), ref, rtol=1e-6, atol=1e-3)


@pytest.mark.parametrize("R,C,nw", PLUS_RESHAPED)
def test_reshaped_range_is_made_in_the_tiles_layout(R, C, nw, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    _plus_reshaped(R, C, nw, "cpu")
    x = torch.empty(R, C)
    try:
        compiled = plus_reshaped_range_kernel.warmup(x, x, R=R, C=C, num_warps=nw, grid=(1,)).build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    assert "ttg.convert_layout" not in compiled.asm["gpu"] and compiled.shared == 0, compiled.asm["gpu"]
    if (R, C, nw) == (8, 256, 8):
        assert "#bits" in compiled.asm["gpu"]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("R,C,nw", PLUS_RESHAPED)
def test_reshaped_range_is_made_in_the_tiles_layout_gpu(R, C, nw):
    for seed in range(2):
        _plus_reshaped(R, C, nw, "cuda", seed)


# ---------------------------------------------------------------- the type of a compile-time tuple
@kl.jit
def constexpr_tuple_type_kernel(Out, T: tl.constexpr):
    """A tuple of constants, given as a constexpr argument or assigned to a constexpr name, is a compile-time
    value: its `.type` is `constexpr_type(value)` as for a number (Triton boxes both in `constexpr`)."""
    P: tl.constexpr = (3, -4, (5, 2.5))
    tl.static_assert(P.type == tl.constexpr_type((3, -4, (5, 2.5))))
    tl.static_assert(T.type == P.type)
    tl.static_assert(T.type != tl.constexpr_type((3, -4)))
    offs = tl.arange(0, 8)
    tl.store(Out + offs, offs * T[0] + T[1] + T[2][0])


def _constexpr_tuple(device):
    out = torch.full((8,), -0x7F7F7F7F, dtype=torch.int32, device=device)
    constexpr_tuple_type_kernel[(1,)](out, (3, -4, (5, 2.5)))
    assert torch.equal(out.cpu(), torch.arange(8, dtype=torch.int32) * 3 + 1)


def test_constexpr_tuple_type_interpreter():
    _constexpr_tuple("cpu")


def test_constexpr_tuple_type_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    out = torch.empty(8, dtype=torch.int32)
    try:
        compiled = constexpr_tuple_type_kernel.warmup(out, (3, -4, (5, 2.5)), grid=(1,)).build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    assert ".entry" in compiled.asm["ptx"]


@pytest.mark.gpu
@needs_cuda
def test_constexpr_tuple_type_gpu():
    _constexpr_tuple("cuda")


# ---------------------------------------------------------------- Triton's wording in an error's cause
@kl.jit
def bad_shapes_kernel(X, V: tl.constexpr):
    if V == 0:
        r = tl.arange(2, 7)
    elif V == 1:
        r = tl.full((8, 48), 0, dtype=tl.int64)
    else:
        a = tl.full((32, 64), 7, tl.uint8)
        b = tl.full((64, 32), 7, tl.uint8)
        s = tl.full((32, 2), 127, tl.uint8)
        r = tl.dot_scaled(a, s, "e5m2", b, tl.full((32, 8), 127, tl.uint8), "e5m2")
    tl.store(X + tl.arange(0, 1), tl.sum(tl.ravel(r)).to(tl.float32))


# (variant, kernellab's message contains, the cause as Triton 3.6.0 words it: its semantic.py, not later main's "[..., 32, 2]")
BAD_SHAPES = [
    (0, "tl.arange(2, 7) has 5 elements", "arange's range must be a power of 2"),
    (1, "powers of 2, got [8, 48]", "Shape element 1 must be a power of 2"),
    (2, "a scale tile must be [32, 2]", "rhs_scale must be a tensor of shape [32, 2]. Got ['32', '8']"),
]


def _bad_shape(v, ours, theirs, device):
    x = torch.full((1,), float("nan"), device=device)
    with pytest.raises(kl.CompilationError) as e:
        bad_shapes_kernel[(1,)](x, V=v)
    assert ours in str(e.value), str(e.value)
    assert str(e.value.__cause__) == theirs and e.value.__cause__.__traceback__ is None
    assert torch.isnan(x).all()


@pytest.mark.parametrize("v,ours,theirs", BAD_SHAPES)
def test_shape_errors_cause_in_tritons_words_interpreter(v, ours, theirs):
    _bad_shape(v, ours, theirs, "cpu")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("v,ours,theirs", BAD_SHAPES)
def test_shape_errors_cause_in_tritons_words_gpu(v, ours, theirs):
    _bad_shape(v, ours, theirs, "cuda")


# ---------------------------------------------------------------- tl.range(..., loop_unroll_factor=k)
@kl.jit
def unrolled_kernel(Out, Acc, lb, ub, STEP: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    """Each iteration writes its row and folds it into a carried tile; bounds at run time."""
    offs = tl.arange(0, N)
    acc = tl.zeros((N,), tl.float32)
    for i in tl.range(lb, ub, STEP, loop_unroll_factor=K):
        v = (offs * 3 + i).to(tl.float32)
        tl.store(Out + i * N + offs, v)
        acc = acc * 0.5 + v
    tl.store(Acc + offs, acc)


@kl.jit
def unrolled_const_kernel(Out, K: tl.constexpr):
    """Constant bounds (10 iterations): the remainder loop exists only where k does not divide 10."""
    offs = tl.arange(0, 16)
    s = tl.zeros((16,), tl.int32)
    for i in tl.range(0, 10, loop_unroll_factor=K):
        s += offs * i + 1
    tl.store(Out + offs, s)


# (lb, ub, step, k): remainders of every size, fewer iterations than k, none at all (ub <= lb)
UNROLLED = [(0, 10, 1, 4), (3, 17, 2, 3), (0, 8, 1, 8), (5, 7, 1, 4), (9, 2, 1, 2), (4, 4, 3, 2), (1, 30, 3, 5),
            (0, 12, 1, 1)]


def _unrolled(lb, ub, step, k, device):
    n = 16
    out = torch.full((32, n), float("nan"), device=device)
    acc = torch.full((n,), float("nan"), device=device)
    unrolled_kernel[(1,)](out, acc, lb, ub, STEP=step, K=k, N=n)
    ref_out = torch.full((32, n), float("nan"), dtype=torch.float64)
    ref_acc = torch.zeros(n, dtype=torch.float64)
    for i in range(lb, ub, step):
        v = torch.arange(n, dtype=torch.float64) * 3 + i
        ref_out[i] = v
        ref_acc = ref_acc * 0.5 + v
    torch.testing.assert_close(out.cpu().double(), ref_out, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(acc.cpu().double(), ref_acc, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("lb,ub,step,k", UNROLLED)
def test_unrolled_loop_interpreter(lb, ub, step, k):
    _unrolled(lb, ub, step, k, "cpu")


@pytest.mark.parametrize("k", [1, 2, 3, 5, 10, 16])
def test_unrolled_loop_has_k_bodies(k):
    """The tile IR holds k copies of the body in the main loop, plus one in a remainder loop unless k divides the
    trip count (Triton's test_unroll_attr counts them the same way)."""
    out = torch.full((16,), -1, dtype=torch.int32)
    compiled = unrolled_const_kernel.warmup(out, K=k, grid=(1,))
    ir = compiled.asm["tile"]
    main, rest = 10 // k > 0, 10 % k > 0
    assert ir.count("arith.muli") == k * main + rest, ir  # one `offs * i` per copy of the body
    assert ir.count("scf.for") == main + rest, ir
    unrolled_const_kernel[(1,)](out, K=k)
    ref = sum(torch.arange(16) * i + 1 for i in range(10)).to(torch.int32)
    assert torch.equal(out, ref)


@kl.jit
def unrolled_dot_kernel(A, B, C, KT: tl.constexpr, U: tl.constexpr):
    """A K loop of dots unrolled by U: the GPU pipeline (cp.async stages, wgmma) takes the unrolled body."""
    rm = tl.arange(0, 64)
    rn = tl.arange(0, 64)
    rk = tl.arange(0, 32)
    acc = tl.zeros((64, 64), tl.float32)
    for k in tl.range(0, KT, loop_unroll_factor=U):
        a = tl.load(A + rm[:, None] * (32 * KT) + (k * 32 + rk)[None, :])
        b = tl.load(B + (k * 32 + rk)[:, None] * 64 + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(C + rm[:, None] * 64 + rn[None, :], acc)


def _unrolled_dot(kt, u, device):
    g = torch.Generator().manual_seed(kt * 10 + u)
    a = torch.randn(64, 32 * kt, generator=g).half()
    b = torch.randn(32 * kt, 64, generator=g).half()
    c = torch.full((64, 64), float("nan"))
    a, b, c = a.to(device), b.to(device), c.to(device)
    unrolled_dot_kernel[(1,)](a, b, c, KT=kt, U=u)
    ref = a.cpu().double() @ b.cpu().double()
    torch.testing.assert_close(c.cpu().double(), ref, rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("kt,u", [(5, 2), (4, 4), (3, 4)])
def test_unrolled_dot_loop_interpreter_and_ptx(kt, u, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    _unrolled_dot(kt, u, "cpu")
    a, b, c = torch.empty(64, 32 * kt).half(), torch.empty(32 * kt, 64).half(), torch.empty(64, 64)
    try:
        compiled = unrolled_dot_kernel.warmup(a, b, c, KT=kt, U=u, grid=(1,)).build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    assert ".entry" in compiled.asm["ptx"]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("lb,ub,step,k", UNROLLED)
def test_unrolled_loop_gpu(lb, ub, step, k):
    _unrolled(lb, ub, step, k, "cuda")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("kt,u", [(5, 2), (4, 4), (3, 4), (8, 2)])
def test_unrolled_dot_loop_gpu(kt, u):
    _unrolled_dot(kt, u, "cuda")


# ---------------------------------------------------------------- disable_licm on tl.range and tl.condition
@kl.jit
def no_licm_kernel(Out, x, n, HINT: tl.constexpr, WHILE: tl.constexpr):
    """A loop-invariant `x * 3 + 1` computed in the loop; with the hint it stays there."""
    offs = tl.arange(0, 16)
    acc = tl.zeros((16,), tl.float32)
    if WHILE:
        i = 0
        while tl.condition(i < n, disable_licm=HINT):
            acc += (x * 3.0 + 1.0) * (offs + i)
            i += 1
    else:
        for i in tl.range(0, n, disable_licm=HINT):
            acc += (x * 3.0 + 1.0) * (offs + i)
    tl.store(Out + offs, acc)


def _no_licm(hint, use_while, device):
    x, n = 0.75, 7
    out = torch.full((16,), float("nan"), device=device)
    no_licm_kernel[(1,)](out, x, n, HINT=hint, WHILE=use_while)
    ref = sum((x * 3 + 1) * (torch.arange(16, dtype=torch.float64) + i) for i in range(n))
    torch.testing.assert_close(out.cpu().double(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("use_while", [False, True])
@pytest.mark.parametrize("hint", [False, True])
def test_disable_licm_interpreter_and_ir(hint, use_while, tmp_path, monkeypatch):
    """Results do not change; with the hint the invariant multiply stays in the loop's body (kernellab's licm
    leaves the loop alone) and the LLVM IR's back edge carries `llvm.licm.disable`, in a self-referential loop ID."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    _no_licm(hint, use_while, "cpu")
    out = torch.empty(16)
    compiled = no_licm_kernel.warmup(out, 0.75, 7, HINT=hint, WHILE=use_while, grid=(1,))
    loop = next(op for op in compiled.module.kernel.walk() if op.name in ("scf.for", "scf.while"))
    assert any(op.name == "arith.mulf" and not op.result.type.is_block() for op in loop.walk()) == hint  # x * 3
    try:
        compiled = compiled.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    llir = compiled.asm["llir"]
    assert ("llvm.licm.disable" in llir) == hint
    if hint:
        import re
        assert re.search(r"^(!\d+) = distinct !\{\1, !\d+ \}$", llir, flags=re.M), llir


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("use_while", [False, True])
@pytest.mark.parametrize("hint", [False, True])
def test_disable_licm_gpu(hint, use_while):
    _no_licm(hint, use_while, "cuda")
