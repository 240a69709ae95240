"""Property-based tests of the typing rules, run on the CPU interpreter against NumPy / torch.

Covers: Triton's type promotion for `+ * / %` (tensor-tensor and tensor-Python-scalar), NumPy
broadcasting, C-style integer `//` and `%`, and `.to(dtype)` / `.to(dtype, bitcast=True)` casts.

The promotion reference below is written from Triton's documented rules ("Triton Semantics",
docs/python-api/triton-semantics.rst), independently of kernellab's `computation_type`:

* kinds: {bool} < {integral (signed and unsigned alike)} < {floating point};
* tensor-tensor: the higher kind wins (a bfloat16 mixed with an integer gives float32); within a
  kind the wider dtype wins; same width: float16 beats bfloat16, unsigned beats signed (the C
  "usual arithmetic conversions");
* `/` and `%` have no float16/bfloat16 form: any float operand makes them float32 (float64 stays
  float64); `/` of two integers is float32; `/` and `%` of mixed-signedness integers is an error;
* a Python scalar of a kind lower or equal to the tensor's does not take part (`uint8 + 3` is
  uint8); a scalar of a higher kind becomes the smallest dtype it fits (int32, float32) first.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.parser import parse_module

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------------------------------- dtypes

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint32", "float16", "bfloat16", "float32", "float64"]
INT_DTYPES = [d for d in DTYPES if "int" in d]
TORCH = {d: getattr(torch, d) for d in DTYPES}
TORCH.update(int1=torch.bool)
NUMPY = {d: np.dtype(d) for d in DTYPES if d != "bfloat16"}
KIND = {"int": 1, "uint": 1, "float": 2}  # bool would be 0; signed and unsigned are one kind


def kind_of(d):
    return "float" if d.startswith(("float", "bfloat")) else "uint" if d.startswith("uint") else "int"


def bits_of(d):
    return int("".join(c for c in d if c.isdigit()))


def is_float(d):
    return kind_of(d) == "float"


def tl_dtype(d):
    return getattr(tl, d)


def ref_result_dtype(op, a, b):
    """Triton's result dtype of `a op b`; a, b are dtype names or 'pyint' / 'pyfloat' (Python scalars).

    Raises TypeError where Triton refuses the operation."""
    div = op in ("/", "%")
    a_scalar, b_scalar = a.startswith("py"), b.startswith("py")
    assert not (a_scalar and b_scalar)
    if a_scalar or b_scalar:
        s, t = (a, b) if a_scalar else (b, a)
        s_kind = KIND["int"] if s == "pyint" else KIND["float"]
        if s_kind <= KIND[kind_of(t)]:
            res = "float32" if div and t in ("float16", "bfloat16") else t
            return "float32" if op == "/" and not is_float(res) else res
        lowest = "int32" if s == "pyint" else "float32"  # the scalars used here fit these
        a, b = (lowest, t) if a_scalar else (t, lowest)
    if is_float(a) or is_float(b):
        if div:
            return "float64" if "float64" in (a, b) else "float32"
        if not (is_float(a) and is_float(b)):
            f = a if is_float(a) else b
            return "float32" if f == "bfloat16" else f
        if bits_of(a) != bits_of(b):
            return a if bits_of(a) > bits_of(b) else b
        return a if a == b else "float16"
    sa, sb = kind_of(a), kind_of(b)
    if div and sa != sb:
        raise TypeError(f"{op} of {a} and {b}: different signedness")
    if sa == sb:
        res = a if bits_of(a) >= bits_of(b) else b
    else:
        u, s = (a, b) if sa == "uint" else (b, a)
        res = u if bits_of(u) >= bits_of(s) else s
    return "float32" if op == "/" else res


def test_reference_table_spot_checks():
    """The reference agrees with the examples Triton's documentation and the brief give."""
    cases = {("+", "int32", "float16"): "float16", ("+", "int32", "bfloat16"): "float32",
             ("+", "float32", "float16"): "float32", ("+", "float16", "bfloat16"): "float16",
             ("+", "int32", "uint32"): "uint32", ("+", "uint8", "pyint"): "uint8",
             ("+", "int16", "pyfloat"): "float32", ("+", "int8", "uint8"): "uint8",
             ("*", "float16", "float16"): "float16", ("/", "float16", "float16"): "float32",
             ("/", "int32", "int32"): "float32", ("/", "int64", "int64"): "float32",
             ("%", "bfloat16", "bfloat16"): "float32", ("%", "float64", "int8"): "float64",
             ("+", "int64", "uint32"): "int64", ("%", "uint8", "pyint"): "uint8",
             ("/", "float16", "pyint"): "float32", ("*", "pyfloat", "bfloat16"): "bfloat16"}
    for (op, a, b), want in cases.items():
        assert ref_result_dtype(op, a, b) == want, (op, a, b)
    with pytest.raises(TypeError):
        ref_result_dtype("%", "int32", "uint32")


# ------------------------------------------------------------------------------------------- helpers

def to_np(t: torch.Tensor) -> np.ndarray:
    """A torch tensor as NumPy (bfloat16 widened exactly to float32)."""
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def poisoned(n, d) -> torch.Tensor:
    """An output buffer whose every element shows if the kernel leaves it unwritten."""
    if is_float(d):
        return torch.full((n,) if isinstance(n, int) else n, float("nan"), dtype=TORCH[d])
    info = np.iinfo(NUMPY[d])
    return torch.from_numpy(np.full(n, info.max // 3 + 7, dtype=NUMPY[d]))


def random_values(rng, n, d, small=False) -> torch.Tensor:
    """n fresh random values of dtype d: the full range for integers unless `small`."""
    if is_float(d):
        v = rng.uniform(-100, 100, n) * rng.choice([1.0, 0.01, 1e-3], n)
        t = torch.from_numpy(v)
        return t.to(TORCH[d])
    info = np.iinfo(NUMPY[d])
    lo, hi = (max(info.min, -1000), min(info.max, 1000)) if small else (info.min, info.max)
    v = rng.integers(lo, hi, n, dtype=NUMPY[d], endpoint=True)
    return torch.from_numpy(v)


def ref_cast(x: np.ndarray, d):
    """NumPy values converted to dtype d as a C cast would (ints wrap, floats round to nearest even);
    bfloat16 results come back as float32 holding bfloat16 values."""
    if d == "bfloat16":
        return torch.from_numpy(np.asarray(x, dtype=np.float64)).to(torch.bfloat16).float().numpy()
    with np.errstate(all="ignore"):
        return np.asarray(x).astype(NUMPY[d])


def c_divmod(a: int, b: int):
    """C integer division (truncating toward zero) and remainder (sign of the dividend)."""
    q = abs(a) // abs(b)
    if (a < 0) != (b < 0):
        q = -q
    return q, a - b * q


def wrap(v: int, d) -> int:
    bits = bits_of(d)
    v &= (1 << bits) - 1
    if kind_of(d) == "int" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def ref_binary(op, a: np.ndarray, b: np.ndarray, res):
    """`a op b` computed in dtype `res` (operands already converted to it)."""
    if is_float(res):
        if res == "bfloat16":
            ta, tb = (torch.from_numpy(np.asarray(v, np.float32)).to(torch.bfloat16) for v in (a, b))
            return {"+": ta + tb, "*": ta * tb}[op].float().numpy()
        with np.errstate(all="ignore"):
            return {"+": np.add, "*": np.multiply, "/": np.divide, "%": np.fmod}[op](a, b)
    a, b = np.broadcast_arrays(a, b)
    out = []
    for x, y in zip(a.tolist(), b.tolist()):
        if op == "+":
            r = x + y
        elif op == "*":
            r = x * y
        elif op == "%":
            r = c_divmod(x, y)[1]
        else:
            r = c_divmod(x, y)[0]
        out.append(wrap(r, res))
    return np.array(out, dtype=NUMPY[res])


def assert_same(out: torch.Tensor, ref: np.ndarray, what=""):
    """Exact equality, NaN equal to NaN (and -0.0 equal to 0.0)."""
    np.testing.assert_array_equal(to_np(out), np.asarray(ref), err_msg=what)


ARITH_OPS = {
    "+": ("arith.addi", "arith.addf"), "*": ("arith.muli", "arith.mulf"), "/": ("arith.divf",),
    "%": ("arith.remsi", "arith.remui", "arith.remf"), "//": ("arith.divsi", "arith.divui"),
}


def ir_result_dtypes(ck, op):
    """Result dtypes of the ops implementing `op` in the kernel's IR as typed by the frontend."""
    module = parse_module(ck.trace.ir_after("frontend"))
    names = ARITH_OPS[op]
    found = {o.results[0].type.scalar.name for o in module.kernel.walk() if o.name in names}
    # the final IR (after optimization) must agree wherever the op survived
    final = {o.results[0].type.scalar.name for o in ck.module.kernel.walk() if o.name in names}
    assert final <= found, (found, final, ck.asm["tile"])
    return found


# ------------------------------------------------------------------------------------------- kernels

@kl.jit
def binary_kernel(X, Y, Z, S: tl.constexpr, OP: tl.constexpr, MODE: tl.constexpr, N: tl.constexpr):
    """MODE 0: z = x OP y; 1: z = x OP S; 2: z = S OP x (S a Python scalar)."""
    o = tl.arange(0, N)
    x = tl.load(X + o)
    if MODE == 0:
        a = x
        b = tl.load(Y + o)
    elif MODE == 1:  # S stays a weak Python scalar: annotated constexpr (a plain `b = S` is a typed scalar)
        a = x
        b: tl.constexpr = S
    else:
        a: tl.constexpr = S
        b = x
    if OP == "+":
        z = a + b
    elif OP == "*":
        z = a * b
    elif OP == "/":
        z = a / b
    elif OP == "//":
        z = a // b
    else:
        z = a % b
    tl.store(Z + o, z)


@kl.jit
def divmod_kernel(X, Y, Q, R, d, S: tl.constexpr, MODE: tl.constexpr, N: tl.constexpr):
    """MODE 0: tensor//tensor; 1: tensor//constexpr; 2: constexpr//tensor; 3: tensor//runtime int."""
    o = tl.arange(0, N)
    x = tl.load(X + o)
    if MODE == 0:
        y = tl.load(Y + o)
        tl.store(Q + o, x // y)
        tl.store(R + o, x % y)
    elif MODE == 1:
        tl.store(Q + o, x // S)
        tl.store(R + o, x % S)
    elif MODE == 2:
        tl.store(Q + o, S // x)
        tl.store(R + o, S % x)
    else:
        tl.store(Q + o, x // d)
        tl.store(R + o, x % d)


@kl.jit
def cast_kernel(X, Z, DST: tl.constexpr, BITCAST: tl.constexpr, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(Z + o, tl.load(X + o).to(DST, bitcast=BITCAST))


@kl.jit
def broadcast_kernel(X, Y, Z, XM: tl.constexpr, XN: tl.constexpr, XMODE: tl.constexpr,
                     YM: tl.constexpr, YN: tl.constexpr, YMODE: tl.constexpr,
                     ZM: tl.constexpr, ZN: tl.constexpr, ZRANK: tl.constexpr):
    """MODE 0: a rank-1 (N,) load; 1: a rank-2 (M, N) load; 2: a rank-1 (M,) load then [:, None];
    3: a rank-1 (N,) load then [None, :]."""
    if XMODE == 0:
        x = tl.load(X + tl.arange(0, XN))
    elif XMODE == 1:
        x = tl.load(X + tl.arange(0, XM)[:, None] * XN + tl.arange(0, XN)[None, :])
    elif XMODE == 2:
        x = tl.load(X + tl.arange(0, XM))[:, None]
    else:
        x = tl.load(X + tl.arange(0, XN))[None, :]
    if YMODE == 0:
        y = tl.load(Y + tl.arange(0, YN))
    elif YMODE == 1:
        y = tl.load(Y + tl.arange(0, YM)[:, None] * YN + tl.arange(0, YN)[None, :])
    elif YMODE == 2:
        y = tl.load(Y + tl.arange(0, YM))[:, None]
    else:
        y = tl.load(Y + tl.arange(0, YN))[None, :]
    z = x * 1000.0 + y
    if ZRANK == 1:
        tl.store(Z + tl.arange(0, ZN), z)
    else:
        tl.store(Z + tl.arange(0, ZM)[:, None] * ZN + tl.arange(0, ZN)[None, :], z)


# ------------------------------------------------------------------------------------------- 1. promotion

def _prepare_divisors(op, x: torch.Tensor, dx, y: torch.Tensor, dy, res):
    """Make `x op y` well defined: no zero divisors, no INT_MIN / -1 in the computation type."""
    if op not in ("/", "%", "//"):
        return y
    yn = to_np(y).copy()
    yn[yn == 0] = 1
    if not is_float(res) and kind_of(res) == "int":
        xr, yr = ref_cast(to_np(x), res), ref_cast(yn, res)
        yn[(xr == np.iinfo(NUMPY[res]).min) & (yr == -1)] = 1
    return torch.from_numpy(yn).to(TORCH[dy])


@pytest.mark.parametrize("op", ["+", "*", "/", "%"])
@pytest.mark.parametrize("da", DTYPES)
def test_promotion_table_tensor_tensor(op, da):
    """Every dtype pair: the IR result dtype is Triton's, or the kernel is refused where Triton refuses."""
    n = 16
    for db in DTYPES:
        try:
            want = ref_result_dtype(op, da, db)
        except TypeError:
            with pytest.raises(kl.CompilationError, match="signedness"):
                binary_kernel.warmup(poisoned(n, da), poisoned(n, db), poisoned(n, "float32"),
                                     S=0, OP=op, MODE=0, N=n)
            continue
        ck = binary_kernel.warmup(poisoned(n, da), poisoned(n, db), poisoned(n, want), S=0, OP=op, MODE=0, N=n)
        assert ir_result_dtypes(ck, op) == {tl_dtype(want).name}, (op, da, db, want)


@pytest.mark.parametrize("side", [1, 2])
@pytest.mark.parametrize("op", ["+", "*", "/", "%"])
@pytest.mark.parametrize("scalar", [3, 2.5], ids=["pyint", "pyfloat"])
def test_promotion_table_tensor_scalar(scalar, op, side):
    n = 16
    sname = "pyint" if isinstance(scalar, int) else "pyfloat"
    for d in DTYPES:
        want = ref_result_dtype(op, d, sname) if side == 1 else ref_result_dtype(op, sname, d)
        ck = binary_kernel.warmup(poisoned(n, d), poisoned(n, d), poisoned(n, want), S=scalar, OP=op,
                                  MODE=side, N=n)
        assert ir_result_dtypes(ck, op) == {tl_dtype(want).name}, (op, d, scalar, side, want)


@SETTINGS
@given(op=st.sampled_from(["+", "*", "/", "%"]), da=st.sampled_from(DTYPES), db=st.sampled_from(DTYPES),
       n=st.sampled_from([16, 32, 64, 128]), seed=st.integers(0, 2**32 - 1))
def test_promotion_values_tensor_tensor(op, da, db, n, seed):
    """Values stored by `x op y` equal NumPy / torch computing in the reference result dtype."""
    try:
        res = ref_result_dtype(op, da, db)
    except TypeError:
        return  # the refusal is checked by the table test
    rng = np.random.default_rng(seed)
    mixed = is_float(da) != is_float(db)
    x, y = random_values(rng, n, da, small=mixed), random_values(rng, n, db, small=mixed)
    y = _prepare_divisors(op, x, da, y, db, res)
    z = poisoned(n, res)
    ck = binary_kernel[(1,)](x, y, z, S=0, OP=op, MODE=0, N=n)
    assert ir_result_dtypes(ck, op) == {tl_dtype(res).name}
    ref = ref_binary(op, ref_cast(to_np(x), res), ref_cast(to_np(y), res), res)
    assert_same(z, ref, f"{da} {op} {db} -> {res}")


@SETTINGS
@given(op=st.sampled_from(["+", "*", "/", "%"]), d=st.sampled_from(DTYPES), side=st.sampled_from([1, 2]),
       int_scalar=st.integers(-50, 50), float_scalar=st.floats(-100, 100, width=32),
       use_float=st.booleans(), n=st.sampled_from([16, 32, 64, 128]), seed=st.integers(0, 2**32 - 1))
def test_promotion_values_tensor_scalar(op, d, side, int_scalar, float_scalar, use_float, n, seed):
    """`x op s` and `s op x` with a Python int or float: result dtype and values."""
    s = float_scalar if use_float else int_scalar
    if kind_of(d) == "uint" and not use_float:
        s = abs(s)  # Triton refuses negative scalars with unsigned tensors (tested separately)
    if op in ("/", "%") and side == 1 and s == 0:
        s = 7 if not use_float else 7.0
    sname = "pyfloat" if use_float else "pyint"
    res = ref_result_dtype(op, d, sname) if side == 1 else ref_result_dtype(op, sname, d)
    rng = np.random.default_rng(seed)
    x = random_values(rng, n, d, small=use_float or is_float(d))
    if op in ("/", "%") and side == 2:
        x = _prepare_divisors(op, torch.full((n,), s), "float64", x, d, res)
    z = poisoned(n, res)
    ck = binary_kernel[(1,)](x, x, z, S=s, OP=op, MODE=side, N=n)
    assert ir_result_dtypes(ck, op) == {tl_dtype(res).name}, (op, d, s, side)
    xs, ss = ref_cast(to_np(x), res), ref_cast(np.array(s), res)
    ref = ref_binary(op, xs, ss, res) if side == 1 else ref_binary(op, ss, xs, res)
    assert_same(z, ref, f"{d} {op} {s!r} (side {side}) -> {res}")


@pytest.mark.parametrize("d", ["uint8", "uint32"])
def test_unsigned_tensor_negative_scalar_is_refused(d):
    """Triton refuses `unsigned tensor op negative scalar` rather than wrapping the scalar."""
    with pytest.raises(kl.CompilationError, match="unsigned"):
        binary_kernel.warmup(poisoned(16, d), poisoned(16, d), poisoned(16, d), S=-1, OP="+", MODE=1, N=16)


@pytest.mark.parametrize("d,s", [("int8", 300), ("uint8", 256), ("int16", -40000), ("int32", 2**31)])
def test_out_of_range_scalar_is_refused(d, s):
    """A Python int that does not fit the computation type is an error, not a silent wrap."""
    with pytest.raises(kl.CompilationError, match="out of range"):
        binary_kernel.warmup(poisoned(16, d), poisoned(16, d), poisoned(16, d), S=s, OP="+", MODE=1, N=16)


# ------------------------------------------------------------------------------------------- 2. broadcasting

POW2 = st.sampled_from([1, 2, 4, 8])


@st.composite
def operand_shapes(draw):
    """(shape, mode) for one operand of broadcast_kernel."""
    rank = draw(st.sampled_from([1, 2]))
    if rank == 1:
        return (draw(POW2),), 0
    m, n = draw(POW2), draw(POW2)
    mode = 1
    if n == 1 and draw(st.booleans()):
        mode = 2  # (m,) then [:, None]
    elif m == 1 and draw(st.booleans()):
        mode = 3  # (n,) then [None, :]
    return (m, n), mode


def _np_broadcast(a, b):
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        return None


@SETTINGS
@given(xs=operand_shapes(), ys=operand_shapes(), seed=st.integers(0, 2**32 - 1))
def test_broadcasting_matches_numpy(xs, ys, seed):
    (xshape, xmode), (yshape, ymode) = xs, ys
    rng = np.random.default_rng(seed)
    xn = rng.standard_normal(xshape).astype(np.float32)
    yn = rng.standard_normal(yshape).astype(np.float32)
    x, y = torch.from_numpy(xn.ravel().copy()), torch.from_numpy(yn.ravel().copy())

    def pad(shape):
        return (1,) + shape if len(shape) == 1 else shape

    kw = dict(XM=pad(xshape)[0], XN=pad(xshape)[1], XMODE=xmode, YM=pad(yshape)[0], YN=pad(yshape)[1], YMODE=ymode)
    out_shape = _np_broadcast(xshape, yshape)
    if out_shape is None:
        with pytest.raises(kl.CompilationError):
            broadcast_kernel.warmup(x, y, poisoned(1, "float32"), ZM=1, ZN=1, ZRANK=1, **kw)
        return
    z = poisoned(int(np.prod(out_shape)), "float32")
    broadcast_kernel[(1,)](x, y, z, ZM=pad(out_shape)[0], ZN=pad(out_shape)[1], ZRANK=len(out_shape), **kw)
    ref = xn * np.float32(1000.0) + yn
    assert ref.shape == out_shape
    assert_same(z.reshape(out_shape), ref, f"{xshape} (mode {xmode}) + {yshape} (mode {ymode})")


@pytest.mark.parametrize("xshape,yshape", [((4,), (8,)), ((2, 4), (4, 2)), ((4, 8), (4,)), ((8, 2), (1, 4))])
def test_incompatible_shapes_are_refused(xshape, yshape):
    def mk(shape):
        return (1,) + shape if len(shape) == 1 else shape, (0 if len(shape) == 1 else 1)

    (xm, xn), xmode = mk(xshape)
    (ym, yn), ymode = mk(yshape)
    buf = poisoned(64, "float32")
    with pytest.raises(kl.CompilationError, match="broadcast"):
        broadcast_kernel.warmup(buf, buf, buf, XM=xm, XN=xn, XMODE=xmode, YM=ym, YN=yn, YMODE=ymode,
                                ZM=1, ZN=1, ZRANK=1)


# ------------------------------------------------------------------------------------------- 3. // and %

def _c_ref(xs, ys, d):
    xs, ys = np.broadcast_arrays(np.asarray(xs), np.asarray(ys))
    pairs = [c_divmod(int(a), int(b)) for a, b in zip(xs.tolist(), ys.tolist())]
    q = np.array([wrap(p[0], d) for p in pairs], dtype=NUMPY[d])
    r = np.array([wrap(p[1], d) for p in pairs], dtype=NUMPY[d])
    return q, r


def _int_values(rng, n, d):
    """Both signs, a mix of magnitudes (so small quotients and remainders both show)."""
    info = np.iinfo(NUMPY[d])
    big = rng.integers(info.min, info.max, n, dtype=NUMPY[d], endpoint=True)
    small = rng.integers(max(info.min, -100), 100, n, dtype=NUMPY[d], endpoint=True)
    return np.where(rng.random(n) < 0.5, big, small).astype(NUMPY[d])


@SETTINGS
@given(dx=st.sampled_from(["int32", "int64"]), dy=st.sampled_from(["int32", "int64"]),
       n=st.sampled_from([16, 32, 64, 128]), seed=st.integers(0, 2**32 - 1))
def test_int_divmod_tensor_tensor(dx, dy, n, seed):
    rng = np.random.default_rng(seed)
    res = ref_result_dtype("+", dx, dy)
    xn, yn = _int_values(rng, n, dx), _int_values(rng, n, dy)
    yn[yn == 0] = 1
    yn[(xn.astype(NUMPY[res]) == np.iinfo(NUMPY[res]).min) & (yn == -1)] = 1
    q, r = poisoned(n, res), poisoned(n, res)
    ck = divmod_kernel[(1,)](torch.from_numpy(xn), torch.from_numpy(yn), q, r, 0, S=0, MODE=0, N=n)
    assert ir_result_dtypes(ck, "//") == {tl_dtype(res).name}
    assert ir_result_dtypes(ck, "%") == {tl_dtype(res).name}
    qr, rr = _c_ref(xn, yn, res)
    assert_same(q, qr, f"{dx} // {dy}")
    assert_same(r, rr, f"{dx} % {dy}")


@SETTINGS
@given(d=st.sampled_from(["int32", "int64"]), s=st.integers(-1000, 1000).filter(lambda v: v != 0),
       mode=st.sampled_from([1, 2, 3]), n=st.sampled_from([16, 32, 64, 128]), seed=st.integers(0, 2**32 - 1))
def test_int_divmod_tensor_python_int(d, s, mode, n, seed):
    """tensor // int, int // tensor (constexpr ints: weak, they keep the tensor's dtype) and
    tensor // runtime int argument (an int32 scalar)."""
    rng = np.random.default_rng(seed)
    xn = _int_values(rng, n, d)
    if mode == 2:
        xn[xn == 0] = 3
    elif s == -1:
        xn[xn == np.iinfo(NUMPY[d]).min] += 1
    q, r = poisoned(n, d), poisoned(n, d)
    x = torch.from_numpy(xn)
    ck = divmod_kernel[(1,)](x, x, q, r, s, S=s, MODE=mode, N=n)
    assert ir_result_dtypes(ck, "//") == {tl_dtype(d).name}
    qr, rr = _c_ref(s, xn, d) if mode == 2 else _c_ref(xn, s, d)
    assert_same(q, qr, f"{d} mode {mode} with {s}")
    assert_same(r, rr, f"{d} mode {mode} with {s}")


def test_int_divmod_c_semantics_examples():
    """The classic cases, spelled out: truncation toward zero, remainder with the dividend's sign."""
    xn = np.array([7, -7, 7, -7, 0, 1, -1, 2**31 - 1, -2**31, -2**31, 5, -5, 6, -6, 100, -100], np.int32)
    yn = np.array([2, 2, -2, -2, 3, 5, 5, -1, 1, 2, 5, 5, -4, 4, 7, -7], np.int32)
    q, r = poisoned(16, "int32"), poisoned(16, "int32")
    divmod_kernel[(1,)](torch.from_numpy(xn), torch.from_numpy(yn), q, r, 0, S=0, MODE=0, N=16)
    assert q.tolist() == [3, -3, -3, 3, 0, 0, 0, -(2**31 - 1), -2**31, -2**30, 1, -1, -1, -1, 14, 14]
    assert r.tolist() == [1, -1, 1, -1, 0, 1, -1, 0, 0, 0, 0, 0, 2, -2, 2, -2]


def test_float_floordiv_is_refused():
    buf = poisoned(16, "float32")
    with pytest.raises(kl.CompilationError, match="//"):
        binary_kernel.warmup(buf, buf, buf, S=0, OP="//", MODE=0, N=16)


# ------------------------------------------------------------------------------------------- 4. casts

def _run_cast(x: torch.Tensor, dst, bitcast=False):
    z = poisoned(x.shape[0], dst) if dst != "int1" else torch.zeros(x.shape[0], dtype=torch.bool)
    cast_kernel[(1,)](x, z, DST=tl_dtype(dst), BITCAST=bitcast, N=x.shape[0])
    return z


def _assert_bits_equal(out: torch.Tensor, ref: torch.Tensor, what):
    """Equal bit patterns, except that any NaN matches any NaN."""
    assert out.dtype == ref.dtype
    ib = {2: torch.int16, 4: torch.int32, 8: torch.int64}[out.element_size()]
    nan_o, nan_r = torch.isnan(out), torch.isnan(ref)
    assert torch.equal(nan_o, nan_r), f"{what}: NaN positions differ"
    bad = (out.view(ib) != ref.view(ib)) & ~nan_r
    assert not bad.any(), (f"{what}: {out[bad][:8].tolist()} != {ref[bad][:8].tolist()} "
                           f"at {bad.nonzero()[:8].ravel().tolist()}")


@SETTINGS
@given(n=st.sampled_from([16, 32, 64, 128]), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([1.0, 100.0, 1e6, 2.0**30]))
def test_cast_float32_to_int32_truncates(n, seed, scale):
    rng = np.random.default_rng(seed)
    v = (rng.uniform(-1, 1, n) * scale).astype(np.float32)
    v = np.clip(v, -2.0**31, np.float32(2147483520.0)).astype(np.float32)  # in range of int32
    v[:4] = [2.5, -2.5, 0.99, -0.99]
    out = _run_cast(torch.from_numpy(v), "int32")
    assert_same(out, np.trunc(v.astype(np.float64)).astype(np.int32), "f32 -> i32")


@SETTINGS
@given(src=st.sampled_from(["float32", "float64", "float16", "bfloat16"]), dst=st.sampled_from(["int8", "int16",
       "int32", "int64", "uint8", "uint32"]), n=st.sampled_from([16, 64]), seed=st.integers(0, 2**32 - 1))
def test_cast_float_to_int_in_range(src, dst, n, seed):
    """Truncation toward zero for every float -> int pair, on values that fit the destination."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(NUMPY[dst])
    lo, hi = max(info.min, -30000), min(info.max, 30000)
    v = rng.uniform(lo, hi + 0.999, n)
    x = torch.from_numpy(v).to(TORCH[src])
    xv = to_np(x).astype(np.float64)
    xv = np.clip(xv, lo, hi)  # rounding to the source dtype may have left the range
    x = torch.from_numpy(xv).to(TORCH[src])
    xv = to_np(x).astype(np.float64)
    ok = (np.trunc(xv) >= info.min) & (np.trunc(xv) <= info.max)
    x = torch.from_numpy(np.where(ok, xv, 0.0)).to(TORCH[src])
    out = _run_cast(x, dst)
    assert_same(out, np.trunc(to_np(x).astype(np.float64)).astype(NUMPY[dst]), f"{src} -> {dst}")


@SETTINGS
@given(src=st.sampled_from(["int32", "int64", "int16"]), dst=st.sampled_from(["int8", "uint8", "int16", "uint32"]),
       n=st.sampled_from([16, 32, 64, 128]), seed=st.integers(0, 2**32 - 1))
def test_cast_int_to_int_wraps(src, dst, n, seed):
    rng = np.random.default_rng(seed)
    xn = _int_values(rng, n, src)
    out = _run_cast(torch.from_numpy(xn), dst)
    ref = np.array([wrap(int(v), dst) for v in xn.tolist()], dtype=NUMPY[dst])
    assert_same(out, ref, f"{src} -> {dst}")


@SETTINGS
@given(src=st.sampled_from(["uint8", "int32", "int64", "uint32", "int8"]),
       dst=st.sampled_from(["float16", "bfloat16", "float32", "float64"]),
       n=st.sampled_from([16, 32, 64, 128]), seed=st.integers(0, 2**32 - 1))
def test_cast_int_to_float_rounds_to_nearest_even(src, dst, n, seed):
    rng = np.random.default_rng(seed)
    xn = _int_values(rng, n, src)
    if src == "int64":
        # a tie only after rounding to float64 first: float32 must round up, float64-then-float32 rounds to even
        xn[0] = 2**62 + 2**38 + 1
        xn[1] = -(2**62 + 2**38 + 1)
    if src == "int32":
        xn[0] = 2**24 + 1  # a tie in float32: rounds to even (2**24)
        xn[1] = 2**24 + 3  # a tie in float32: rounds to even (2**24 + 4)
    out = _run_cast(torch.from_numpy(xn), dst)
    # torch converts 64-bit integers to float directly (one rounding); via float64 for narrower ones is exact
    if dst in ("float16", "bfloat16"):
        ref = torch.from_numpy(xn).to(torch.float32 if bits_of(src) <= 16 else torch.float64).to(TORCH[dst])
        if src == "int64":  # float64 -> f16/bf16 could double-round: go exactly through Python's Fraction
            ref = torch.tensor([_round_int_to(int(v), dst) for v in xn.tolist()], dtype=torch.float32).to(TORCH[dst])
    else:
        ref = torch.from_numpy(xn).to(TORCH[dst])
    _assert_bits_equal(out, ref, f"{src} -> {dst}")


def _round_int_to(v: int, d) -> float:
    """The integer v rounded to nearest-even in d (float16 / bfloat16), as a float32-representable value."""
    mant = {"float16": 11, "bfloat16": 8}[d]
    max_exp = {"float16": 15, "bfloat16": 127}[d]
    if v == 0:
        return 0.0
    sign, a = (-1 if v < 0 else 1), abs(v)
    e = a.bit_length() - mant
    if e > 0:
        q, rem = divmod(a, 1 << e)
        half = 1 << (e - 1)
        if rem > half or (rem == half and q & 1):
            q += 1
        a = q << e
    if a.bit_length() - 1 > max_exp:
        return sign * float("inf")
    return sign * float(a)


@SETTINGS
@given(dst=st.sampled_from(["float16", "bfloat16"]), n=st.sampled_from([16, 32, 64, 128]),
       seed=st.integers(0, 2**32 - 1), ties=st.booleans())
def test_cast_float32_to_half_rounds_to_nearest_even(dst, n, seed, ties):
    """Random float32 bit patterns (normals, subnormals, inf, NaN, overflow) against torch's .to()."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    if dst == "float16":
        # keep most values near float16's range so rounding (not just overflow) is exercised
        exp = rng.integers(127 - 26, 127 + 17, n).astype(np.uint32)
        bits = (bits & np.uint32(0x807FFFFF)) | (exp << np.uint32(23))
        if ties:  # exact ties for normal float16 values: 13 dropped bits = 1 followed by zeros
            bits = (bits & ~np.uint32(0x1FFF)) | np.uint32(0x1000)
    elif ties:  # exact ties for bfloat16: 16 dropped bits = 0x8000
        bits = (bits & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
    bits[:4] = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x80000000], dtype=np.uint32)  # inf, -inf, nan, -0
    x = torch.from_numpy(bits.view(np.float32).copy())
    out = _run_cast(x, dst)
    _assert_bits_equal(out, x.to(TORCH[dst]), f"f32 -> {dst}")


def _random_bits(rng, n, d) -> torch.Tensor:
    """n random bit patterns reinterpreted as dtype d (every class of float value shows up)."""
    raw = rng.integers(0, 256, n * (bits_of(d) // 8), dtype=np.uint16).astype(np.uint8)
    return torch.from_numpy(raw).view(TORCH[d])


@SETTINGS
@given(pair=st.sampled_from([("float16", "float32"), ("bfloat16", "float32"), ("float16", "float64"),
                             ("bfloat16", "float64"), ("float32", "float64")]),
       n=st.sampled_from([16, 64]), seed=st.integers(0, 2**32 - 1))
def test_cast_float_widening_is_exact(pair, n, seed):
    src, dst = pair
    x = _random_bits(np.random.default_rng(seed), n, src)
    _assert_bits_equal(_run_cast(x, dst), x.to(TORCH[dst]), f"{src} -> {dst}")


@SETTINGS
@given(n=st.sampled_from([16, 32, 64, 128]), seed=st.integers(0, 2**32 - 1))
def test_cast_float64_to_float32_rounds_to_nearest_even(n, seed):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**64, n, dtype=np.uint64)
    exp = rng.integers(1023 - 160, 1023 + 140, n).astype(np.uint64)
    bits = (bits & np.uint64(0x800FFFFFFFFFFFFF)) | (exp << np.uint64(52))
    x = torch.from_numpy(bits.view(np.float64).copy())
    out = _run_cast(x, "float32")
    _assert_bits_equal(out, x.to(torch.float32), "f64 -> f32")


@SETTINGS
@given(pair=st.sampled_from([("float32", "int32"), ("int32", "float32"), ("float32", "uint32"),
                             ("float16", "int16"), ("int16", "float16"), ("bfloat16", "int16"),
                             ("int16", "bfloat16"), ("float64", "int64"), ("int64", "float64")]),
       n=st.sampled_from([16, 32, 64, 128]), seed=st.integers(0, 2**32 - 1))
def test_bitcast_matches_numpy_view(pair, n, seed):
    """`.to(dst, bitcast=True)` keeps every bit (NaN payloads included), like NumPy's `.view`."""
    src, dst = pair
    x = _random_bits(np.random.default_rng(seed), n, src)
    out = _run_cast(x, dst, bitcast=True)
    assert out.dtype == TORCH[dst]
    assert torch.equal(out.view(torch.uint8), x.view(torch.uint8)), f"{src} -> {dst} bitcast changed bits"


# signaling NaNs with payloads (quiet bit clear): an arithmetic op may quiet them, a bitcast may not
SIGNALING_NANS = {"float16": (0x7C01, 0xFD55), "bfloat16": (0x7F98, 0xFF81), "float32": (0x7F800001, 0xFFA00000)}


@pytest.mark.parametrize("src,dst", [("float16", "int16"), ("bfloat16", "int16"), ("float32", "int32"),
                                     ("int16", "float16"), ("int16", "bfloat16"), ("int32", "float32")])
def test_bitcast_keeps_signaling_nan_bits(src, dst):
    fl = src if is_float(src) else dst
    ib = {16: np.uint16, 32: np.uint32}[bits_of(fl)]
    pats = np.array(list(SIGNALING_NANS[fl]) * 8, dtype=ib)
    x = torch.from_numpy(pats.view(NUMPY["int16" if bits_of(fl) == 16 else "int32"]).copy())
    if is_float(src):
        x = x.view(TORCH[src])
    out = _run_cast(x, dst, bitcast=True)
    assert out.view(torch.uint8).tolist() == x.view(torch.uint8).tolist(), f"{src} -> {dst} bitcast changed bits"


@pytest.mark.parametrize("src,dst", [("float32", "int16"), ("int64", "float32"), ("float16", "int32")])
def test_bitcast_of_different_widths_is_refused(src, dst):
    with pytest.raises(kl.CompilationError, match="bitcast"):
        cast_kernel.warmup(poisoned(16, src), poisoned(16, dst), DST=tl_dtype(dst), BITCAST=True, N=16)
