"""fp8 (Triton 3.6 semantics): tensors as arguments, loads/stores, casts with Triton's rounding, tl.dot.

The reference here is written from the format definitions alone: every byte decoded by formula, and a value
encoded by picking the nearest of the 256 decoded values (ties to the even code), saturating as PTX's
`cvt.rn.satfinite` does. Interpreter tests run everywhere; `gpu` tests need CUDA; ptxas tests compile only.
"""
import math
import shutil

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import KernelLabError

# name -> (exponent bits, mantissa bits, bias, style)
FMT = {"float8e4nv": (4, 3, 7, "fn"), "float8e5": (5, 2, 15, "ieee"), "float8e4b15": (4, 3, 15, "none"),
       "float8e4b8": (4, 3, 8, "fnuz"), "float8e5b16": (5, 2, 16, "fnuz")}
STANDARD = ["float8e4nv", "float8e5"]


def ref_decode(name, byte):
    e, m, bias, style = FMT[name]
    s, ex, man = byte >> 7, (byte >> m) & ((1 << e) - 1), byte & ((1 << m) - 1)
    if style == "ieee" and ex == (1 << e) - 1:
        return math.nan if man else (-math.inf if s else math.inf)
    if (style == "fn" and byte & 0x7F == 0x7F) or (style == "fnuz" and byte == 0x80):
        return math.nan
    v = (man / 2 ** m) * 2.0 ** (1 - bias) if ex == 0 else (1 + man / 2 ** m) * 2.0 ** (ex - bias)
    return -v if s else v


def ref_table(name):
    return np.array([ref_decode(name, b) for b in range(256)])


def ref_encode(name, v, rtz=False):
    """The byte Triton's sm_90 conversion gives for the exact value v: nearest (ties to the even code) or
    toward zero, saturating at the largest finite value; None for NaN (any NaN byte will do)."""
    t = ref_table(name)
    style = FMT[name][3]
    if math.isnan(v):
        return None
    neg = math.copysign(1, v) < 0
    if math.isinf(v) and rtz and style == "ieee":
        return 0xFC if neg else 0x7C
    pos = [b for b in range(128) if math.isfinite(t[b])]
    mx = max(t[b] for b in pos)
    a = abs(v)
    if rtz:
        b = max((b for b in pos if t[b] <= a), key=lambda b: t[b])
    else:
        a = min(a, mx)
        b = min(pos, key=lambda b: (abs(t[b] - a), b & 1))
    if neg and not (style == "fnuz" and t[b] == 0):
        b |= 0x80
    return b


def edge_values(name):
    """Max finite, beyond it, halfway cases (ties to even), subnormals, zeros, infinities, NaN, random."""
    t = ref_table(name)
    fin = np.unique(np.abs(t[np.isfinite(t)]))
    mids = (fin[1:] + fin[:-1]) / 2
    vals = list(fin) + list(mids) + list(mids * (1 + 2 ** -9)) + list(mids * (1 - 2 ** -9))
    vals += [fin[-1] * 1.01, fin[-1] * 1.2, fin[-1] * 4, 1e30, math.inf, fin[1] / 2, fin[1] / 3, fin[1] * 0.51, 0.0]
    rng = np.random.default_rng(0)
    vals += list(rng.standard_normal(200) * fin[-1] / 8)
    vals = vals + [-v for v in vals] + [math.nan]
    return np.array(vals)


@kl.jit
def convert(X, Z, N: tl.constexpr, R: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(X + o)
    tl.store(Z + o, x.to(Z.dtype.element_ty, fp_downcast_rounding=R))


def _pad(n):
    return 1 << (n - 1).bit_length()


TORCH_INT = {8: torch.int8, 16: torch.int16, 32: torch.int32}
SRC = {"float32": (torch.float32, tl.float32), "float16": (torch.float16, tl.float16),
       "bfloat16": (torch.bfloat16, tl.bfloat16)}


def run_downcast(name, src, vals, rounding=None, device="cpu"):
    tdt, _ = SRC[src]
    x = torch.tensor(vals, dtype=torch.float64).to(tdt)
    n = _pad(len(x))
    x = torch.cat([x, torch.zeros(n - len(x), dtype=tdt)]).to(device)
    z = torch.full((n,), 0x55, dtype=torch.int8, device=device)  # poison
    convert[(1,)](x, kl.reinterpret(z, getattr(tl, name)), N=n, R=rounding)
    return x.cpu().double().numpy()[:len(vals)], z.cpu().view(torch.uint8).numpy()[:len(vals)]


def check_bytes(name, exact, got, rtz=False):
    t = ref_table(name)
    for v, b in zip(exact, got):
        want = ref_encode(name, float(v), rtz)
        if want is None:
            assert math.isnan(t[b]), (name, v, hex(b))
        else:
            assert b == want, (name, v, hex(b), hex(want), t[b], t[want])


@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", STANDARD + ["float8e4b8", "float8e5b16"])
def test_downcast_rtne_saturates(name, src):
    exact, got = run_downcast(name, src, edge_values(name))
    check_bytes(name, exact, got)


def test_downcast_rtz_f32_to_e5():
    exact, got = run_downcast("float8e5", "float32", edge_values("float8e5"), rounding="rtz")
    check_bytes("float8e5", exact, got, rtz=True)


def ref_e4b15_from_f16(h):
    """Triton's NVIDIA f16 -> fp8e4b15: |x| clamped to 1.75 (NaN/inf too), 7 dropped bits rounded half up."""
    bits = int(np.float16(h).view(np.uint16))
    mag = bits & 0x7FFF
    mag = 0x3F00 if mag > 0x3F00 else mag
    return ((mag + 0x40) >> 7) | ((bits >> 8) & 0x80)


@pytest.mark.parametrize("src", ["float16", "float32"])
def test_e4b15_downcast(src):
    vals = list(edge_values("float8e4b15")) + [2.0, 1.8, 1.76, 100.0, 1e6, 1e-7, 3e-5]
    exact, got = run_downcast("float8e4b15", src, vals)
    for v, b in zip(exact, got):
        h = np.float16(v)
        if src == "float32":  # f32 -> f16 toward zero first
            f = float(np.float32(v))
            if math.isfinite(f) and abs(f) > 65504:
                h = np.float16(math.copysign(65504, f))
            elif math.isfinite(f):
                h = np.float16(f)
                if abs(float(h)) > abs(f):
                    h = np.nextafter(h, np.float16(0))
        assert b == ref_e4b15_from_f16(h), (v, hex(b))


@pytest.mark.parametrize("dst", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", list(FMT))
def test_upcast_every_byte(name, dst):
    if name == "float8e4b15" and dst == "bfloat16":
        pytest.skip("Triton has no e4b15 <-> bf16 conversion (tested below as an error)")
    x = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.int8)
    tdt, _ = SRC[dst]
    z = torch.full((256,), 12345.0, dtype=tdt)
    convert[(1,)](kl.reinterpret(x, getattr(tl, name)), z, N=256, R=None)
    want, got = ref_table(name), z.double().numpy()
    assert np.array_equal(np.isnan(want), np.isnan(got))
    ok = ~np.isnan(want)
    assert np.array_equal(want[ok], got[ok])
    assert np.array_equal(np.signbit(want[ok]), np.signbit(got[ok]))  # -0 stays -0


@pytest.mark.parametrize("tdt, name", [(torch.float8_e4m3fn, "float8e4nv"), (torch.float8_e5m2, "float8e5")])
def test_torch_fp8_arguments_copy_bytes(tdt, name):
    """torch fp8 tensors are kernel arguments of Triton's types; a load/store copy keeps every byte."""
    @kl.jit
    def copy(X, Z, N: tl.constexpr, T: tl.constexpr):
        o = tl.arange(0, N)
        tl.static_assert(X.dtype.element_ty == T)
        tl.store(Z + o, tl.load(X + o))

    raw = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    keep = ~torch.isnan(raw.view(tdt).float())  # NaN bytes come back as the canonical NaN
    x = raw.view(tdt)
    z = torch.full((256,), 0x33, dtype=torch.uint8).view(tdt)
    copy[(1,)](x, z, N=256, T=getattr(tl, name))
    assert torch.equal(z.view(torch.uint8)[keep], raw[keep])
    assert torch.isnan(z.float()[~keep]).all()


def test_matches_torch_in_range():
    x = torch.randn(1024, dtype=torch.float16)
    for tdt in (torch.float8_e4m3fn, torch.float8_e5m2):
        z = torch.empty(1024, dtype=tdt)
        convert[(1,)](x, z, N=1024, R=None)
        assert torch.equal(z.view(torch.uint8), x.to(tdt).view(torch.uint8))


def test_abs_and_where_and_constants():
    @kl.jit
    def k(X, Z, W, N: tl.constexpr):
        o = tl.arange(0, N)
        x = tl.load(X + o)
        tl.store(Z + o, tl.abs(x))
        c = tl.full((N,), 3.3, tl.float8e4nv)  # rounds as a cast: 3.25
        tl.store(W + o, tl.where(o % 2 == 0, x, c))

    raw = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    x = raw.view(torch.float8_e4m3fn)
    z = torch.empty(256, dtype=torch.float8_e4m3fn)
    w = torch.empty(256, dtype=torch.float8_e4m3fn)
    k[(1,)](x, z, w, N=256)
    nan = torch.isnan(x.float())
    assert torch.equal(z.float()[~nan], x.float().abs()[~nan]) and torch.isnan(z.float()[nan]).all()
    assert (w.float()[1::2] == 3.25).all()
    assert torch.equal(w.view(torch.uint8)[0::2][~nan[0::2]], raw[0::2][~nan[0::2]])


def _fp8_matrix(shape, tdt, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 4).to(tdt)


@kl.jit
def matmul(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(A + rm[:, None] * K + rk[None, :])
    b = tl.load(B + rk[:, None] * N + rn[None, :])
    tl.store(C + rm[:, None] * N + rn[None, :], tl.dot(a, b))


@pytest.mark.parametrize("ta, tb", [(torch.float8_e4m3fn, torch.float8_e4m3fn), (torch.float8_e5m2, torch.float8_e5m2),
                                    (torch.float8_e4m3fn, torch.float8_e5m2)])
def test_dot(ta, tb, device="cpu"):
    M, N, K = 32, 32, 64
    a, b = _fp8_matrix((M, K), ta, 1), _fp8_matrix((K, N), tb, 2)
    c = torch.full((M, N), math.nan, device=device)
    matmul[(1,)](a.to(device), b.to(device), c, M=M, N=N, K=K)
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.cpu().double(), ref, rtol=1e-5, atol=1e-4)


def test_dot_e4b15_upcasts():
    M, N, K = 16, 16, 32
    a = kl.reinterpret((torch.randint(0, 256, (M, K)) & 0xF7).to(torch.uint8).view(torch.int8), tl.float8e4b15)
    b = kl.reinterpret((torch.randint(0, 256, (K, N)) & 0xF7).to(torch.uint8).view(torch.int8), tl.float8e4b15)
    c = torch.empty(M, N)
    matmul[(1,)](a, b, c, M=M, N=N, K=K)
    t = ref_table("float8e4b15")
    ref = t[a.base.view(torch.uint8).numpy()] @ t[b.base.view(torch.uint8).numpy()]
    np.testing.assert_allclose(c.numpy(), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("body, match", [
    ("y = x + x", "fp8"),
    ("y = x * 2", "fp8"),
    ("y = x.to(tl.int32)", "fp8 values convert only"),
    ("y = x.to(tl.float8e5)", "fp8 -> fp8"),
    ("y = x.to(tl.float32).to(tl.float16).to(tl.float8e4nv, fp_downcast_rounding='rtz')", "rtz"),
    ("y = x.to(tl.float32).to(tl.float64).to(tl.float8e4nv)", "float64"),
    ("y = x.to(tl.float32).to(tl.bfloat16).to(tl.float8e4b15)", "float8e4b15"),
])
def test_unsupported_is_an_error(body, match):
    src = f"""
@kl.jit
def bad(X, Z, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(X + o)
    {body}
    tl.store(Z + o, y.to(tl.float32))
"""
    ns = {"kl": kl, "tl": tl}
    exec(compile(src, "<fp8-bad>", "exec"), ns)
    x = torch.zeros(16, dtype=torch.float8_e4m3fn)
    with pytest.raises(KernelLabError, match=match):
        ns["bad"][(1,)](x, torch.empty(16), N=16)


# --------------------------------------------------------------------------- GPU code, compiled only


needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")


def _int_view(name, n):
    return kl.reinterpret(torch.empty(n, dtype=torch.int8), getattr(tl, name))


@needs_ptxas
@pytest.mark.parametrize("src, dst, rounding, want", [
    ("float32", "float8e4nv", None, "cvt.rn.satfinite.e4m3x2.f32"),
    ("float16", "float8e5", None, "cvt.rn.satfinite.e5m2x2.f32"),
    ("bfloat16", "float8e4nv", None, "cvt.rn.satfinite.e4m3x2.f32"),
    ("float32", "float8e5", "rtz", "cvt.rz.f16.f32"),
    ("float32", "float8e4b15", None, "cvt.rz.f16.f32"),
    ("float16", "float8e4b15", None, "st.global"),
    ("float8e4nv", "float32", None, "cvt.rn.f16x2.e4m3x2"),
    ("float8e5", "bfloat16", None, "cvt.rn.f16x2.e5m2x2"),
    ("float8e4b15", "float16", None, "st.global"),
])
def test_ptx_conversions_assemble(src, dst, rounding, want):
    def arg(name):
        if name in SRC:
            return torch.empty(256, dtype=SRC[name][0])
        return _int_view(name, 256)

    ck = convert.warmup(arg(src), arg(dst), N=256, R=rounding, grid=(1,))
    ck.build_gpu()  # ptxas assembles it for sm_90a
    assert want in ck.asm["ptx"]


@needs_ptxas
def test_ptx_dot_assembles():
    a = torch.empty(64, 64, dtype=torch.float8_e4m3fn)
    b = torch.empty(64, 64, dtype=torch.float8_e5m2)
    ck = matmul.warmup(a, b, torch.empty(64, 64), M=64, N=64, K=64, grid=(1,))
    ck.build_gpu()
    assert "upcast_fp8_dot" in [p.name for p in ck.trace.passes]
    assert "cvt.rn.f16x2.e4m3x2" in ck.asm["ptx"] and "cvt.rn.f16x2.e5m2x2" in ck.asm["ptx"]


@pytest.mark.parametrize("name", ["float8e4b8", "float8e5b16"])
def test_gpu_refuses_amd_formats(name):
    ck = convert.warmup(_int_view(name, 256), torch.empty(256), N=256, R=None, grid=(1,))
    with pytest.raises(KernelLabError, match="not supported in this architecture"):
        ck.build_gpu()


# --------------------------------------------------------------------------- on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", STANDARD)
def test_gpu_downcast(name, src):
    exact, got = run_downcast(name, src, edge_values(name), device="cuda")
    check_bytes(name, exact, got)


@pytest.mark.gpu
def test_gpu_downcast_rtz_and_e4b15():
    exact, got = run_downcast("float8e5", "float32", edge_values("float8e5"), rounding="rtz", device="cuda")
    check_bytes("float8e5", exact, got, rtz=True)
    vals = edge_values("float8e4b15")
    _, cpu = run_downcast("float8e4b15", "float16", vals)
    _, gpu = run_downcast("float8e4b15", "float16", vals, device="cuda")
    assert np.array_equal(cpu, gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("dst", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", ["float8e4nv", "float8e5", "float8e4b15"])
def test_gpu_upcast_every_byte(name, dst):
    if name == "float8e4b15" and dst == "bfloat16":
        pytest.skip("no e4b15 <-> bf16 conversion in Triton")
    x = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.int8).cuda()
    z = torch.full((256,), 12345.0, dtype=SRC[dst][0], device="cuda")
    convert[(1,)](kl.reinterpret(x, getattr(tl, name)), z, N=256, R=None)
    want, got = ref_table(name), z.cpu().double().numpy()
    assert np.array_equal(np.isnan(want), np.isnan(got))
    assert np.array_equal(want[~np.isnan(want)], got[~np.isnan(want)])


@pytest.mark.gpu
@pytest.mark.parametrize("ta, tb", [(torch.float8_e4m3fn, torch.float8_e4m3fn), (torch.float8_e5m2, torch.float8_e5m2),
                                    (torch.float8_e4m3fn, torch.float8_e5m2)])
def test_gpu_dot(ta, tb):
    test_dot(ta, tb, device="cuda")


# --------------------------------------------------------------------------- sm_80: downcasts by bits


def _host_downcast(name):
    """The GPU lowering's sm_80 f32 -> fp8 conversion (bit arithmetic, no PTX asm), JIT-compiled for this CPU
    with llvmlite: the very instructions the GPU gets, run here."""
    import ctypes

    import llvmlite.binding as llvm
    import llvmlite.ir as ir

    from kernellab.compiler.codegen.lowering_core import KernelLowering
    from kernellab.compiler.types import DType

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    m = ir.Module("fp8_downcast")
    fn = ir.Function(m, ir.FunctionType(ir.IntType(8), [ir.FloatType()]), "cvt")
    lw = KernelLowering.__new__(KernelLowering)  # only its builder and arch are used by fp8_convert
    lw.arch, lw.b = 80, ir.IRBuilder(fn.append_basic_block())
    ir_name = {"float8e5": "f8e5", "float8e4nv": "f8e4nv"}[name]
    lw.b.ret(lw.fp8_convert(DType("f32", "float", 32), DType(ir_name, "float", 8), fn.args[0], "rtne"))
    tm = llvm.Target.from_default_triple().create_target_machine()
    ee = llvm.create_mcjit_compiler(llvm.parse_assembly(str(m)), tm)
    ee.finalize_object()
    f = ctypes.CFUNCTYPE(ctypes.c_uint8, ctypes.c_float)(ee.get_function_address("cvt"))
    f._engine = ee  # keep the code alive
    return f


@pytest.mark.parametrize("name", STANDARD)
def test_sm80_downcast_by_bits_edges(name):
    """Ties to even, subnormals, saturation (infinities too) and NaN, as cvt.rn.satfinite rounds them."""
    f = _host_downcast(name)
    vals = edge_values(name).astype(np.float32)
    check_bytes(name, vals.astype(np.float64), [f(float(v)) for v in vals])


@pytest.mark.parametrize("name", STANDARD)
def test_sm80_downcast_by_bits_random_patterns(name):
    """Random f32 bit patterns over the whole range (the format's neighbourhood dense), against the
    interpreter's encoder: the same bytes, NaN for NaN."""
    from kernellab.compiler import fp8

    f = _host_downcast(name)
    rng = np.random.default_rng(1)
    near = (rng.standard_normal(4000) * 2.0 ** rng.integers(-20, 18, 4000)).astype(np.float32)
    bits = rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    vals = np.concatenate([near, bits])
    got = np.array([f(float(v)) for v in vals], np.uint8)
    ir_name = {"float8e5": "f8e5", "float8e4nv": "f8e4nv"}[name]
    want_v = np.asarray(fp8.convert_to(ir_name, "f32", vals), np.float32)  # float32 carriers
    got_v = fp8.decode(ir_name, got)
    nan = np.isnan(vals)
    assert np.array_equal(np.isnan(got_v), nan)
    np.testing.assert_array_equal(got_v[~nan], want_v[~nan])


@needs_ptxas
@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16"])
def test_ptx_sm80_downcast_without_sm89_cvt(src, tmp_path, monkeypatch):
    """sm_80 has no fp8 cvt: f32/f16/bf16 -> e5m2 assembles for sm_80 with bit arithmetic (no e5m2x2)."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = convert.warmup(torch.empty(256, dtype=SRC[src][0]), _int_view("float8e5", 256), N=256, R=None,
                        grid=(1,))
    ck.build_gpu(Target(80))
    assert "e5m2x2" not in ck.asm["ptx"] and "cvt.rn.satfinite" not in ck.asm["ptx"]
