"""Triton 3.6's language surface beyond the basics (issue 13): tuples and namedtuples as kernel arguments,
through @jit helpers and in kernels; typed assigned scalars; `.item()`; conditional expressions that run
one side; expand_dims with tuples of axes; tl.reduce of a 1-tuple; Triton's random-number functions; the
small tl.* names. Interpreter results against NumPy/torch with poisoned outputs; the same kernels compile to
PTX that ptxas assembles for sm_90a; GPU runs are marked `gpu`."""
from __future__ import annotations

import shutil
from typing import NamedTuple

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.codegen.target import Target

SENTINEL = 0x7F7F7F7F
has_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
gpu = pytest.mark.gpu


def poison_f(*shape):
    return torch.full(shape, float("nan"), dtype=torch.float32)


def poison_i(*shape, dtype=torch.int32):
    return torch.full(shape, SENTINEL, dtype=dtype)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def assembles(ck):
    """The compiled kernel goes through our backend to a cubin for sm_90a (no GPU needed)."""
    ck.build_gpu(Target(90))
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    assert ".entry" in ck.asm["ptx"]


def on(device, *ts):
    return [t.to(device) for t in ts]


# ============================================================================ tuples


@kl.jit
def _incr(values):
    return tl.tuple([v + 1 for v in values])


@kl.jit
def _store_each(ptrs, values):
    for i in tl.static_range(len(values)):
        tl.store(ptrs[i], values[i])


@kl.jit
def tuple_arg_kernel(ptrs, values, pair, N_PAIR: tl.constexpr):
    values = _incr(values)
    _store_each(ptrs, values)
    a, b = pair  # unpacking a tuple argument of runtime ints
    tl.store(ptrs[0] + 1, a * 10 + b + N_PAIR)


def run_tuple_args(device):
    outs = tuple(poison_f(2).to(device) for _ in range(3))
    vals = (1.5, -2.25, 7.0)
    tuple_arg_kernel[(1,)](outs, vals, (3, 17), 100)
    got = [o.cpu() for o in outs]
    for g, v in zip(got, vals):
        assert g[0].item() == v + 1
    assert got[0][1].item() == 3 * 10 + 17 + 100
    assert torch.isnan(got[1][1]) and torch.isnan(got[2][1])  # untouched


def test_tuple_arguments_and_helpers():
    run_tuple_args("cpu")


class Tile(NamedTuple):
    ptr: object
    shape: tuple
    stride: tuple


class Fn(NamedTuple):
    fn: object
    captured: tuple


@kl.jit
def _scale(x, a_ptr):
    return x * tl.load(a_ptr)


@kl.jit
def _make_tile(ptr, shape, stride):
    return Tile(ptr=ptr, shape=shape, stride=stride)


@kl.jit
def _mask(t, BM: tl.constexpr, BN: tl.constexpr):
    return (tl.arange(0, BM)[:, None] < t.shape[0]) & (tl.arange(0, BN)[None, :] < t.shape[1])


@kl.jit
def namedtuple_kernel(closure, X, Y, BM: tl.constexpr, BN: tl.constexpr):
    X = _make_tile(X.ptr, X.shape, X.stride)
    rm, rn = tl.arange(0, BM), tl.arange(0, BN)
    x = tl.load(X.ptr + rm[:, None] * X.stride[0] + rn[None, :] * X.stride[1], mask=_mask(X, BM, BN), other=0)
    y = closure.fn(x, *closure.captured)
    tl.store(Y.ptr + rm[:, None] * Y.stride[0] + rn[None, :] * Y.stride[1], y, mask=_mask(Y, BM, BN))


def run_namedtuple(device):
    g = gen(1)
    x = torch.randn(20, 24, generator=g).to(device)
    y = torch.full((9, 13), float("nan")).to(device)
    a = torch.tensor([1.75]).to(device)
    namedtuple_kernel[(1,)](Fn(_scale, (a,)), Tile(x, x.shape, x.stride()), Tile(y, y.shape, y.stride()), 32, 32)
    ref = x.cpu().double()[:9, :13] * 1.75
    torch.testing.assert_close(y.cpu().double(), ref, rtol=1e-6, atol=0)


def test_namedtuple_arguments_and_returns():
    run_namedtuple("cpu")


@kl.jit
def nested_kernel(out, t, c: tl.constexpr):
    tl.static_assert(t[1][1] is None)
    tl.static_assert(t[1][3] == 4)
    tl.store(out + 0, tl.load(t[0]))
    tl.store(out + 1, t[1][0] + c)
    tl.store(out + 2, tl.load(t[1][2]))


def test_nested_tuple_with_constexpr_and_none():
    x0, x1 = torch.tensor([8], dtype=torch.int32), torch.tensor([12], dtype=torch.int32)
    out = poison_i(3)
    nested_kernel[(1,)](out, (x0, (5, None, x1, tl.constexpr(4))), 20)
    assert out.tolist() == [8, 25, 12]


@kl.jit
def _three(a, b):
    return a + b, a - b, (a * b, None)


@kl.jit
def tuple_ops_kernel(X, Y, O):
    x = tl.load(X + tl.arange(0, 8))
    y = tl.load(Y + tl.arange(0, 8))
    s, d, (p, nothing) = _three(x, y)
    tl.static_assert(nothing is None)
    t = (1, 2) + tl.tuple((3, 4))
    tl.static_assert(len(t) == 4)
    tl.static_assert(t == (1, 2, 3, 4))
    tl.static_assert(tl.tuple((1, 2)) == (1, 2))
    tl.static_assert(((3, 4) and (5, 6)) == (5, 6))
    total = 0
    for v in t:
        total += v
    offs = tl.arange(0, 8)
    tl.store(O + offs, s)
    tl.store(O + 8 + offs, d)
    tl.store(O + 16 + offs, p + total)


def test_tuple_returns_and_operations():
    g = gen(2)
    x, y = torch.randn(8, generator=g), torch.randn(8, generator=g)
    o = poison_f(24)
    tuple_ops_kernel[(1,)](x, y, o)
    xd, yd = x.double(), y.double()
    torch.testing.assert_close(o.double(), torch.cat([xd + yd, xd - yd, xd * yd + 10]), rtol=1e-6, atol=1e-6)


def test_tuple_item_assignment_is_a_compilation_error():
    @kl.jit
    def k():
        t = tl.tuple([5, 6, 7])
        t[0] = 0

    with pytest.raises(kl.CompilationError):
        k[(1,)]()


def test_list_argument_is_refused_at_launch():
    @kl.jit
    def k(x):
        pass

    with pytest.raises(kl.LaunchError, match="unsupported type list"):
        k[(1,)]([1, 2])


# ============================================================================ semantics


@kl.jit
def scalars_kernel(X8, O, Z, BLOCK: tl.constexpr):
    value = 1
    tl.static_assert(value.dtype == tl.int32)
    f = 2.5
    tl.static_assert(f.dtype == tl.float32)
    x = tl.load(X8 + tl.arange(0, BLOCK))  # int8
    tl.static_assert((x + value).dtype == tl.int32)  # an assigned scalar promotes like an int32 tensor
    tl.static_assert((x + 1).dtype == tl.int8)  # a literal stays weak
    n = BLOCK  # still usable where a compile-time value is needed
    ones = tl.full([n], value=value, dtype=value.dtype)
    tl.store(O + tl.arange(0, BLOCK), x + value + ones)
    z = Z[None, None, :]  # on a scalar pointer
    tl.static_assert(z.shape == (1, 1))
    tl.store(z, f.to(tl.float32))


def test_assigned_scalars_have_dtypes():
    x = torch.randint(-100, 100, (16,), generator=gen(3), dtype=torch.int8)
    o, z = poison_i(16), poison_f(1)
    scalars_kernel[(1,)](x, o, z, BLOCK=16)
    assert o.tolist() == (x.to(torch.int32) + 2).tolist()
    assert z.item() == 2.5


@kl.jit
def expand_kernel(O, N: tl.constexpr):
    offs = tl.arange(0, N)
    t = tl.expand_dims(offs, (0, -1))
    tl.static_assert(t.shape == (1, N, 1))
    t2 = tl.expand_dims(offs, (3, 1, 2))
    tl.static_assert(t2.shape == (N, 1, 1, 1))
    t3 = tl.expand_dims(offs, (-4, 2, -1))
    tl.static_assert(t3.shape == (1, N, 1, 1))
    tl.store(O + tl.reshape(t, (N,)), offs * 3)


def test_expand_dims_tuple_of_axes():
    o = poison_i(8)
    expand_kernel[(1,)](o, N=8)
    assert o.tolist() == [3 * i for i in range(8)]


def test_expand_dims_duplicate_axes_is_an_error():
    @kl.jit
    def k(N: tl.constexpr):
        tl.expand_dims(tl.arange(0, N), (0, -3))

    with pytest.raises(kl.CompilationError, match="duplicate"):
        k[(1,)](N=8)


@kl.jit
def _add_combine(a, b):
    return a + b


@kl.jit
def reduce_tuple_kernel(X, O, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    out = tl.reduce((x,), 0, _add_combine)
    tl.static_assert(len(out) == 1)
    s, = out
    tl.store(O, s)


def test_reduce_of_a_one_tuple_returns_a_one_tuple():
    x = torch.randint(-1000, 1000, (32,), generator=gen(4), dtype=torch.int32)
    o = poison_i(1)
    reduce_tuple_kernel[(1,)](x, o, N=32)
    assert o.item() == int(x.sum())


@kl.jit
def _store_val(p, v):
    tl.store(p, v)


@kl.jit
def cond_kernel(X, O, IDX):
    one = tl.load(X + IDX + tl.arange(0, 1))  # a 1-element tensor
    if one > 0:  # `if` on a 1-element tensor
        tl.store(O, 1.0)
    else:
        tl.store(O, -1.0)
    v = one.item()
    tl.static_assert(v.shape == ())
    # both sides call functions returning None: only the chosen side runs
    _store_val(O + 1, v) if v > 0 else _store_val(O + 2, v)
    w = tl.load(X + IDX) if IDX >= 0 else tl.load(X - 1000000)  # the other side would fault
    tl.store(O + 3, w)


def run_cond(device, x, idx):
    o = poison_f(4).to(device)
    cond_kernel[(1,)](x.to(device), o, idx)
    return o.cpu()


def test_conditional_forms():
    x = torch.tensor([2.5, -1.25])
    o = run_cond("cpu", x, 0)
    assert o[0] == 1.0 and o[1] == 2.5 and torch.isnan(o[2]) and o[3] == 2.5
    o = run_cond("cpu", x, 1)
    assert o[0] == -1.0 and torch.isnan(o[1]) and o[2] == -1.25 and o[3] == -1.25


@kl.jit
def small_names_kernel(O, C: tl.constexpr):
    tl.static_assert(isinstance(C.type, tl.constexpr_type))
    tl.static_assert(tl.TRITON_MAX_TENSOR_NUMEL == 1048576)
    x = tl.to_tensor(3)
    tl.static_assert(x.dtype == tl.int32)
    y = tl.mul(tl.sub(tl.add(x, 2, sanitize_overflow=False), 1), C)
    tl.store(O, y)


def test_small_names():
    o = poison_i(1)
    small_names_kernel[(1,)](o, 7)
    assert o.item() == 28
    assert tl.pi32_t == tl.pointer_type(tl.int32)
    assert tl.void is not None and tl.const is not None


# ============================================================================ random numbers


def philox32(key, c0, c1, c2, c3, rounds=10):
    from tests.test_interpreter_features import philox_ref

    return philox_ref(key, c0, c1, c2, c3, rounds)


def uniform_ref(words):
    x = words.astype(np.uint32).view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return (x.astype(np.float32) * np.float32(4.6566127342e-10)).astype(np.float64)


@kl.jit
def random_kernel(U, N, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    u1, u2, u3, u4 = tl.rand4x(seed, offs)
    tl.store(U + offs, u1, mask=m)
    tl.store(U + N + offs, u4, mask=m)
    i1, i2, _, _ = tl.randint4x(seed, offs)
    n1, n2 = tl.pair_uniform_to_normal(tl.uint_to_uniform_float(i1), tl.uint_to_uniform_float(i2))
    tl.store(U + 2 * N + offs, n1, mask=m)
    z = offs.to(tl.uint32) * 0
    w0, _, _, _ = tl.philox_impl(offs.to(tl.uint32), z, z, z, (z + seed).to(tl.uint32), z)
    tl.store(U + 3 * N + offs, tl.uint_to_uniform_float(w0), mask=m)


def random_refs(n, seed):
    offs = np.arange(n, dtype=np.int64)
    zero = np.zeros(n, np.int64)
    w = philox32(seed, offs, zero, zero, zero)
    u1, u2, u4 = uniform_ref(w[0]), uniform_ref(w[1]), uniform_ref(w[3])
    normal = np.sqrt(-2.0 * np.log(np.maximum(u1, 1e-7))) * np.cos(2 * np.pi * u2)
    w_impl = philox32(seed, offs, zero, zero, zero)  # seed < 2^32: key (seed, 0) either way
    return u1, u4, normal, uniform_ref(w_impl[0])


def test_triton_random_functions():
    n, seed = 300, 12345
    u = poison_f(4 * n)
    random_kernel[(3,)](u, n, seed, BLOCK=128)
    u1, u4, normal, impl = random_refs(n, seed)
    u = u.double()
    torch.testing.assert_close(u[:n], torch.from_numpy(u1), rtol=0, atol=0)
    torch.testing.assert_close(u[n:2 * n], torch.from_numpy(u4), rtol=0, atol=0)
    torch.testing.assert_close(u[2 * n:3 * n], torch.from_numpy(normal), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(u[3 * n:], torch.from_numpy(impl), rtol=0, atol=0)


# ============================================================================ GPU codegen (compile only)


@has_ptxas
def test_frontend_kernels_assemble_for_sm90a():
    f32 = lambda *s: torch.zeros(*s)  # noqa: E731
    outs = tuple(f32(2) for _ in range(3))
    assembles(tuple_arg_kernel.warmup(outs, (1.5, -2.25, 7.0), (3, 17), 100, grid=(1,)))
    x, y, a = f32(20, 24), f32(9, 13), f32(1)
    assembles(namedtuple_kernel.warmup(Fn(_scale, (a,)), Tile(x, x.shape, x.stride()), Tile(y, y.shape, y.stride()),
                                       32, 32, grid=(1,)))
    assembles(tuple_ops_kernel.warmup(f32(8), f32(8), f32(24), grid=(1,)))
    assembles(scalars_kernel.warmup(torch.zeros(16, dtype=torch.int8), poison_i(16), f32(1), BLOCK=16, grid=(1,)))
    assembles(reduce_tuple_kernel.warmup(poison_i(32), poison_i(1), N=32, grid=(1,)))
    assembles(cond_kernel.warmup(f32(2), f32(4), 1, grid=(1,)))
    assembles(random_kernel.warmup(f32(1200), 300, 12345, BLOCK=128, grid=(1,)))


# ============================================================================ GPU runs


@gpu
def test_gpu_tuples_and_namedtuples():
    run_tuple_args("cuda")
    run_namedtuple("cuda")


@gpu
def test_gpu_conditional_forms():
    x = torch.tensor([2.5, -1.25])
    o = run_cond("cuda", x, 0)
    assert o[0] == 1.0 and o[1] == 2.5 and torch.isnan(o[2]) and o[3] == 2.5
    o = run_cond("cuda", x, 1)
    assert o[0] == -1.0 and torch.isnan(o[1]) and o[2] == -1.25 and o[3] == -1.25


@gpu
def test_gpu_random_functions():
    n, seed = 300, 12345
    u = poison_f(4 * n).cuda()
    random_kernel[(3,)](u, n, seed, BLOCK=128)
    u1, u4, normal, impl = random_refs(n, seed)
    u = u.cpu().double()
    torch.testing.assert_close(u[:n], torch.from_numpy(u1), rtol=0, atol=0)
    torch.testing.assert_close(u[n:2 * n], torch.from_numpy(u4), rtol=0, atol=0)
    torch.testing.assert_close(u[2 * n:3 * n], torch.from_numpy(normal), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(u[3 * n:], torch.from_numpy(impl), rtol=0, atol=0)


@gpu
def test_gpu_scalars_and_reduce():
    x = torch.randint(-100, 100, (16,), generator=gen(3), dtype=torch.int8)
    o, z = poison_i(16).cuda(), poison_f(1).cuda()
    scalars_kernel[(1,)](x.cuda(), o, z, BLOCK=16)
    assert o.cpu().tolist() == (x.to(torch.int32) + 2).tolist()
    assert z.item() == 2.5
    xs = torch.randint(-1000, 1000, (32,), generator=gen(4), dtype=torch.int32)
    o = poison_i(1).cuda()
    reduce_tuple_kernel[(1,)](xs.cuda(), o, N=32)
    assert o.item() == int(xs.sum())


# ============================================================================ inline assembly


@kl.jit
def asm_rotate_kernel(X, Y, Z, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    y = tl.load(Y + tl.arange(0, N))
    z = tl.inline_asm_elementwise("shf.l.wrap.b32 $0, $1, $2, $3;", "=r,r,r,r", [x, y, 3], dtype=tl.int32,
                                  is_pure=True, pack=1)
    tl.store(Z + tl.arange(0, N), z)


@kl.jit
def asm_pack4_kernel(A, B, C, D, BLOCK: tl.constexpr):
    a = tl.load(A + tl.arange(0, BLOCK))  # uint8: four per 32-bit register
    b = tl.load(B + tl.arange(0, BLOCK))
    c, d = tl.inline_asm_elementwise(
        asm="""
        {
            .reg .b8 t<4>;
            mov.b32 {t0, t1, t2, t3}, $8;
            cvt.u32.u8 $0, t0;
            cvt.u32.u8 $1, t1;
            cvt.u32.u8 $2, t2;
            cvt.u32.u8 $3, t3;
        }
        cvt.rn.f32.s32 $4, $0;
        cvt.rn.f32.s32 $5, $1;
        cvt.rn.f32.s32 $6, $2;
        cvt.rn.f32.s32 $7, $3;
        max.f32 $4, $4, $9;
        max.f32 $5, $5, $10;
        max.f32 $6, $6, $11;
        max.f32 $7, $7, $12;
        """,
        constraints="=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r", args=[a, b], dtype=(tl.int32, tl.float32), is_pure=True,
        pack=4)
    tl.store(C + tl.arange(0, BLOCK), c)
    tl.store(D + tl.arange(0, BLOCK), d)


def test_inline_asm_on_the_interpreter_is_a_clear_error():
    i32 = torch.zeros(32, dtype=torch.int32)
    with pytest.raises(kl.InterpreterError, match="inline_asm_elementwise.*GPU"):
        asm_rotate_kernel[(1,)](i32, i32, i32.clone(), N=32)


@has_ptxas
def test_inline_asm_assembles_for_sm90a():
    i32 = lambda n: torch.zeros(n, dtype=torch.int32)  # noqa: E731
    assembles(asm_rotate_kernel.warmup(i32(128), i32(128), i32(128), N=128, grid=(1,)))
    ck = asm_pack4_kernel.warmup(torch.zeros(512, dtype=torch.uint8), torch.zeros(512), i32(512), torch.zeros(512),
                                 BLOCK=512, grid=(1,))
    assembles(ck)
    assert "cvt.u32.u8" in ck.asm["ptx"] and "shf.l.wrap.b32" not in ck.asm["ptx"]


@gpu
def test_gpu_inline_asm():
    g = gen(5)
    x = torch.randint(-2**31, 2**31 - 1, (128,), generator=g, dtype=torch.int32)
    y = torch.randint(-2**31, 2**31 - 1, (128,), generator=g, dtype=torch.int32)
    z = poison_i(128).cuda()
    asm_rotate_kernel[(1,)](x.cuda(), y.cuda(), z, N=128)
    xu, yu = x.numpy().view(np.uint32).astype(np.uint64), y.numpy().view(np.uint32).astype(np.uint64)
    ref = (((yu << np.uint64(32)) | xu) << np.uint64(3) >> np.uint64(32)) & np.uint64(0xFFFFFFFF)
    assert (z.cpu().numpy().view(np.uint32) == ref.astype(np.uint32)).all()
    a = torch.randint(0, 256, (512,), generator=g, dtype=torch.uint8)
    b = torch.randn(512, generator=g) * 200
    c, d = poison_i(512).cuda(), poison_f(512).cuda()
    asm_pack4_kernel[(1,)](a.cuda(), b.cuda(), c, d, BLOCK=512)
    assert c.cpu().tolist() == a.to(torch.int32).tolist()
    assert torch.equal(d.cpu(), torch.maximum(a.to(torch.float32), b))


# ============================================================================ map_elementwise


@kl.jit
def _compare(x, y):
    if x < y:
        return -1
    elif x == y:
        return 0
    else:
        return 1


@kl.jit
def map_kernel(X, Y, Z, BLOCK: tl.constexpr):
    x = tl.load(X + tl.arange(0, BLOCK))
    y = tl.load(Y + tl.arange(0, BLOCK))
    tl.store(Z + tl.arange(0, BLOCK), tl.map_elementwise(_compare, x, y))


@kl.jit
def _divmod2(a0, a1, b0, b1):
    return a0 // b0, a1 // b1, a0 % b0, a1 % b1


@kl.jit
def map_pack_kernel(A, B, C, D, BLOCK: tl.constexpr):
    a = tl.load(A + tl.arange(0, BLOCK))
    b = tl.load(B + tl.arange(0, BLOCK))
    c, d = tl.map_elementwise(_divmod2, a, b, pack=2)
    tl.store(C + tl.arange(0, BLOCK), c)
    tl.store(D + tl.arange(0, BLOCK), d)


def map_inputs():
    g = gen(6)
    x = torch.randint(-5, 5, (128,), generator=g, dtype=torch.int32)
    y = torch.randint(-5, 5, (128,), generator=g, dtype=torch.int32)
    a = torch.randint(0, 2**31 - 1, (512,), generator=g, dtype=torch.int64).to(torch.uint32)
    b = torch.randint(1, 1000, (512,), generator=g, dtype=torch.int64).to(torch.uint32)
    return x, y, a, b


def run_map(device):
    x, y, a, b = map_inputs()
    z = poison_i(128).to(device)
    map_kernel[(1,)](x.to(device), y.to(device), z, BLOCK=128)
    assert torch.equal(z.cpu(), (x > y).int() - (y > x).int())
    c, d = (torch.full((512,), SENTINEL, dtype=torch.int64).to(torch.uint32).to(device) for _ in range(2))
    map_pack_kernel[(1,)](a.to(device), b.to(device), c, d, BLOCK=512)
    an, bn = a.numpy(), b.numpy()
    assert (c.cpu().numpy() == an // bn).all() and (d.cpu().numpy() == an % bn).all()


def test_map_elementwise():
    run_map("cpu")


@has_ptxas
def test_map_elementwise_assembles_for_sm90a():
    x, y, a, b = map_inputs()
    assembles(map_kernel.warmup(x, y, poison_i(128), BLOCK=128, grid=(1,)))
    assembles(map_pack_kernel.warmup(a, b, a.clone(), b.clone(), BLOCK=512, grid=(1,)))


@gpu
def test_gpu_map_elementwise():
    run_map("cuda")


def test_data_dependent_early_return_runs_on_the_interpreter():
    """A runtime `if` whose one branch returns and whose other falls through (regression: the merged
    tuple-template bookkeeping crashed on it)."""
    from tests.test_gpu_features import early_return_kernel

    n, block, G = 1000, 128, 12
    g = torch.Generator().manual_seed(3)
    x, flag = torch.randn(n, generator=g), (torch.rand(G, generator=g) < 0.4).to(torch.int32)
    y, done = torch.full((n,), float("nan")), torch.full((G,), -7, dtype=torch.int32)
    early_return_kernel[(G,)](x, flag, y, done, n, BLOCK=block)
    for p in range(G):
        rows = slice(p * block, min((p + 1) * block, n))
        if p * block >= n:
            assert done[p] == -7
        elif flag[p]:
            assert done[p] == -1 and torch.isnan(y[rows]).all()
        else:
            assert done[p] == 1 and torch.equal(y[rows], x[rows] + 1.0)


@kl.jit
def _scaled_rows(x_ptr, offs: tl.constexpr, SCALE: tl.constexpr):
    return tl.load(x_ptr + offs) * SCALE


def test_helper_constexpr_parameter_takes_a_runtime_value():
    """As in Triton, a @jit helper's parameter annotated tl.constexpr still accepts a runtime tensor (Triton's
    attention tutorial passes per-program offsets so); it is then an ordinary argument."""
    @kl.jit
    def k(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, _scaled_rows(x_ptr, offs, 3.0))

    x = torch.randn(256)
    y = torch.full_like(x, float("nan"))
    k[(2,)](x, y, BLOCK=128)
    assert torch.equal(y, x * 3.0)


@kl.jit
def _precision_dot(x_ptr, y_ptr, z_ptr, P: tl.constexpr):
    i = tl.arange(0, 32)
    x = tl.load(x_ptr + i[:, None] * 32 + i[None, :])
    y = tl.load(y_ptr + i[:, None] * 32 + i[None, :])
    tl.store(z_ptr + i[:, None] * 32 + i[None, :], tl.dot(x, y, input_precision=P))


@pytest.mark.parametrize("precision,bound", [("bf16x3", 2e-3), ("bf16x6", 2e-5)])
def test_bf16_split_precisions(precision, bound):
    """input_precision='bf16x3' / 'bf16x6': fp32 dots on bf16 tensor cores from split operands (Triton's)."""
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(32, 32, generator=g), torch.randn(32, 32, generator=g)
    z = torch.full((32, 32), float("nan"))
    _precision_dot[(1,)](x, y, z, precision)
    ref = x.double() @ y.double()
    assert (z.double() - ref).abs().max() < bound * ref.abs().max()
    ck = _precision_dot.warmup(x, y, z, precision, grid=(1,))
    ck.build_gpu()
    assert "f32.bf16.bf16" in ck.asm["ptx"]


def test_const_pointer_parameters():
    """`ptr: tl.const` makes the pointer's type const, as in Triton: loads work, stores and atomics are refused,
    and a runtime choice between a const and a plain pointer is a type mismatch."""
    @kl.jit
    def copy(src: tl.const, dst, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs))

    @kl.jit
    def store_to_const(src: tl.const, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(src + offs, 1.0)

    @kl.jit
    def choose(src: tl.const, dst, pick, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        out = src if pick else dst
        tl.store(dst + offs, tl.load(out + offs))

    @kl.jit
    def pass_const(a, b, pick_b):
        if pick_b:
            return b
        else:
            return a

    @kl.jit
    def choose_in_helper(src: tl.const, dst, pick, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(pass_const(dst, src, pick) + offs))

    x = torch.randn(32)
    y = torch.full_like(x, float("nan"))
    ck = copy[(1,)](x, y, BLOCK=32)
    assert torch.equal(x, y) and "!ptr<const f32>" in ck.asm["tile"]
    # a helper returning either: Triton's words (its test_const matches them) with the two types
    with pytest.raises(kl.CompilationError, match=r"Inconsistent return types: .*!ptr<const f32>"):
        choose_in_helper[(1,)](x, y, 0, BLOCK=32)
    with pytest.raises(kl.CompilationError, match="Cannot store to a constant pointer"):
        store_to_const[(1,)](x, BLOCK=32)
    with pytest.raises(kl.CompilationError, match="inconsistent type"):
        choose[(1,)](x, y, 0, BLOCK=32)  # 0: a runtime condition (an argument equal to 1 is a constexpr)
    ck = copy.warmup(x, y, BLOCK=32, grid=(1,))
    ck.build_gpu()  # the const type survives the GPU pipeline's reparse of the tile IR
    assert "cubin" in ck.asm


# --------------------------------------------------------------------------- dtype-annotated parameters


@kl.jit
def _annotated_scalars(out_ptr, h: tl.float16, b: tl.bfloat16, d: tl.float64, u: tl.uint8, s: "tl.int8",
                       n: tl.int64):
    """Each annotated number arrives with its annotation's type (not the f32 / i32 its Python value gives)."""
    tl.static_assert(h.dtype == tl.float16 and b.dtype == tl.bfloat16 and d.dtype == tl.float64)
    tl.static_assert(u.dtype == tl.uint8 and s.dtype == tl.int8 and n.dtype == tl.int64)
    tl.store(out_ptr + 0, h.to(tl.float64))
    tl.store(out_ptr + 1, b.to(tl.float64))
    tl.store(out_ptr + 2, d * 3.0)
    tl.store(out_ptr + 3, (u + u).to(tl.float64))  # uint8 arithmetic wraps at 256
    tl.store(out_ptr + 4, (s * s).to(tl.float64))  # int8 wraps too
    tl.store(out_ptr + 5, (n + 1).to(tl.float64))


def _annotated_expect(h, b, d, u, s, n):
    return np.array([float(np.float16(h)), float(torch.tensor(b).to(torch.bfloat16).double()), d * 3.0,
                     float((u + u) % 256), float(np.int8(np.int16(s) * np.int16(s) & 0xFF)), float(n + 1)])


@pytest.mark.parametrize("vals", [(1.0009765625, 3.140625, 1 / 3, 200, 100, 2 ** 40),
                                  (65504.0, -1e-3, 1e300, 1, -1, 1),
                                  (float("inf"), float("nan"), -0.0, 255, -128, -(2 ** 50))])
def test_annotated_parameters_take_the_annotation_type(vals, device="cpu"):
    out = torch.full((6,), float("nan"), dtype=torch.float64, device=device)
    _annotated_scalars[(1,)](out, *vals)
    np.testing.assert_allclose(out.cpu().numpy(), _annotated_expect(*vals), rtol=1e-15, equal_nan=True)


def test_annotated_parameters_check_range():
    out = torch.zeros(6, dtype=torch.float64)
    with pytest.raises(OverflowError, match="annotated type uint8"):
        _annotated_scalars[(1,)](out, 1.0, 1.0, 1.0, 256, 0, 0)
    with pytest.raises(kl.LaunchError, match="pass an integer"):
        _annotated_scalars[(1,)](out, 1.0, 1.0, 1.0, 1, 2.5, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("vals", [(1.0009765625, 3.140625, 1 / 3, 200, 100, 2 ** 40),
                                  (float("inf"), float("nan"), -0.0, 255, -128, -(2 ** 50))])
def test_gpu_annotated_parameters_take_the_annotation_type(vals):
    test_annotated_parameters_take_the_annotation_type(vals, device="cuda")
