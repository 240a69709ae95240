"""Differential fuzzing (issue 18): random elementwise, reduction and scan programs over f32 / f16 / bf16 / i32 /
i8, with masks and NaN / inf among the inputs and as the masked-off `other`, run on the interpreter and
compared with an independent NumPy model of Triton's semantics written here:

- arithmetic stays in the operands' dtype; a Python literal takes the tensor's dtype; ints wrap;
- `//` and `%` truncate toward zero (C), here with positive divisors only (a zero divisor is an error now);
- tl.maximum / tl.minimum ignore a NaN operand (IEEE maxNum, like the GPU's max.f32);
- bf16 results are f32 results rounded to nearest-even bf16 (exact for + - * /: f32 holds twice bf16's bits);
- reductions and scans promote like Triton 3.6 (see test_reduction_types.py): max/min under 32 bits in f32 /
  i32, sum of small ints in i32, cumsum of bf16 in f32; masked-off lanes hold `other` and take part.

Programs are generated as kernel source text, so each example is a new kernel. Example counts stay modest so CI
stays fast; `KERNELLAB_FUZZ_EXAMPLES=2000` runs a deep campaign.
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EXAMPLES = int(os.environ.get("KERNELLAB_FUZZ_EXAMPLES", "120"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

DTYPES = ["f32", "f16", "bf16", "i32", "i8"]
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32, "i8": torch.int8}
NP = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "i32": np.int32, "i8": np.int8}
BLOCK = 32

# --------------------------------------------------------------------------- the NumPy model


def bf16_round(a: np.ndarray) -> np.ndarray:
    """float32 -> nearest-even bfloat16, kept in float32 (NaN stays NaN, overflow becomes inf)."""
    a = np.asarray(a, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = (rounded & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(a), np.float32(np.nan), out)


def fix(a, dt):
    """A NumPy result as Triton's dtype `dt` holds it."""
    if dt == "bf16":
        return bf16_round(np.asarray(a, dtype=np.float32))
    return np.asarray(a).astype(NP[dt])


def trunc_div(a, b):
    q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
    return np.where((a < 0) != (b < 0), -q, q)


def model_binary(op, a, b, dt):
    with np.errstate(all="ignore"):
        if op == "+":
            r = a + b
        elif op == "-":
            r = a - b
        elif op == "*":
            r = a * b
        elif op == "/":
            r = a / b
        elif op == "max":
            r = np.fmax(a, b)
        elif op == "min":
            r = np.fmin(a, b)
        elif op == "//":
            r = trunc_div(a, b)
        elif op == "%":
            r = a.astype(np.int64) - trunc_div(a, b) * b.astype(np.int64)
        elif op == "&":
            r = a & b
        elif op == "|":
            r = a | b
        elif op == "^":
            r = a ^ b
        elif op == ">>":
            r = a >> b
        elif op == "<<":
            r = (a.astype(np.int64) << b.astype(np.int64))
        else:
            raise AssertionError(op)
    return fix(r, dt) if dt != "bf16" else bf16_round(r.astype(np.float32))


# --------------------------------------------------------------------------- programs

FLOAT_BIN = ["+", "-", "*", "/", "max", "min"]
INT_BIN = ["+", "-", "*", "//", "%", "&", "|", "^", ">>", "<<", "max", "min"]
UNARY = ["neg", "abs", "where"]


@st.composite
def programs(draw, dtype=None):
    dt = dtype or draw(st.sampled_from(DTYPES))
    is_float = dt in ("f32", "f16", "bf16")
    steps = []
    n_vals = 2  # v0 = a, v1 = b
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["bin", "bin", "const", "unary"]))
        i, j = draw(st.integers(0, n_vals - 1)), draw(st.integers(0, n_vals - 1))
        if kind == "bin":
            steps.append(("bin", draw(st.sampled_from(FLOAT_BIN if is_float else INT_BIN)), i, j))
        elif kind == "const":
            if is_float:
                c = draw(st.sampled_from([0.5, -2.0, 3.0, 1e-3, 1e30, -0.0]))
            else:
                c = draw(st.integers(-100, 100))
            steps.append(("const", draw(st.sampled_from(["+", "*", "max"])), i, c))
        else:
            steps.append(("unary", draw(st.sampled_from(UNARY)), i, j))
        n_vals += 1
    n = draw(st.integers(0, BLOCK))
    if is_float:
        other = draw(st.sampled_from([0.0, float("nan"), float("inf"), -float("inf"), 7.5]))
    else:
        other = draw(st.integers(-128, 127))
    seed = draw(st.integers(0, 2**31 - 1))
    special = draw(st.booleans())  # NaN / inf / -0 / subnormals among the inputs (else only `other` may be one)
    return dt, steps, n, other, (seed, special)


def _operand(op, name_b):
    """Integer divisors and shift amounts kept in range: (b & 7) + 1 / b & 7."""
    if op in ("//", "%"):
        return f"((({name_b}) & 7) + 1)"
    if op in (">>", "<<"):
        return f"(({name_b}) & 7)"
    return name_b


def kernel_source(dt, steps, other, tail="tl.store(o_ptr + offs, v, mask=m)", name="fuzz"):
    lines = ["import kernellab as kl", "import kernellab.language as tl", "", "@kl.jit",
             f"def {name}(a_ptr, b_ptr, o_ptr, n, BLOCK: tl.constexpr):",
             "    offs = tl.arange(0, BLOCK)", "    m = offs < n",
             f"    v0 = tl.load(a_ptr + offs, mask=m, other={other!r})".replace("nan", "float('nan')")
             .replace("inf", "float('inf')"),
             f"    v1 = tl.load(b_ptr + offs, mask=m, other={other!r})".replace("nan", "float('nan')")
             .replace("inf", "float('inf')")]
    k = 2
    for kind, op, i, j in steps:
        if kind == "bin":
            rhs = _operand(op, f"v{j}")
            expr = f"tl.maximum(v{i}, {rhs})" if op == "max" else f"tl.minimum(v{i}, {rhs})" if op == "min" \
                else f"v{i} {op} {rhs}"
        elif kind == "const":
            expr = f"tl.maximum(v{i}, {j!r})" if op == "max" else f"v{i} {op} {j!r}"
        elif op == "neg":
            expr = f"-v{i}"
        elif op == "abs":
            expr = f"tl.abs(v{i})"
        else:
            expr = f"tl.where(v{i} > v{j}, v{i}, v{j})"
        lines.append(f"    v{k} = {expr}")
        k += 1
    lines.append(f"    v = v{k - 1}")
    lines.append("    " + tail)
    return "\n".join(lines) + "\n"


def result_dtype(x, y, div=False):
    """Triton's computation type for two tensors of the program's dtypes (semantic.computation_type_impl):
    f32 wins; f16 or bf16 with itself stays, except that / computes in f32 (PTX has no f16 divide)."""
    if "f32" in (x, y):
        return "f32"
    if x == y:
        return "f32" if div and x in ("f16", "bf16") else x
    return "f32"


def model_program(dt, steps, a, b):
    """The program's value in NumPy, with its Triton dtype (a division moves f16 / bf16 to f32)."""
    vals = [(a, dt), (b, dt)]
    for kind, op, i, j in steps:
        x, xd = vals[i]
        with np.errstate(all="ignore"):
            if kind == "bin":
                y, yd = vals[j]
                if op in ("//", "%"):
                    y = (y & 7) + 1
                elif op in (">>", "<<"):
                    y = y & 7
                rd = result_dtype(xd, yd, div=op == "/")
                r = model_binary(op, fix(x, rd), fix(y, rd), rd)
            elif kind == "const":  # a Python literal takes the tensor's dtype
                rd = xd
                r = model_binary(op, x, fix(np.full_like(x, j), rd), rd)
            elif op == "neg":
                rd = xd
                r = fix(-x.astype(np.int64) if xd in ("i32", "i8") else -x, rd)
            elif op == "abs":
                rd = xd
                r = fix(np.abs(x.astype(np.int64)) if xd in ("i32", "i8") else np.abs(x), rd)
            else:
                y, yd = vals[j]
                rd = result_dtype(xd, yd)
                xr, yr = fix(x, rd), fix(y, rd)
                r = np.where(xr > yr, xr, yr)
        vals.append((fix(r, rd), rd))
    return vals[-1]


# --------------------------------------------------------------------------- inputs and comparison


def make_inputs(dt, seed_special):
    seed, special_values = seed_special
    g = np.random.default_rng(seed)
    if dt in ("i32", "i8"):
        lo, hi = (-2**31, 2**31 - 1) if dt == "i32" else (-128, 127)
        a = g.integers(lo, hi, BLOCK, endpoint=True)
        b = g.integers(lo, hi, BLOCK, endpoint=True)
        a[:3] = [lo, hi, 0]
        small = g.integers(-9, 10, BLOCK)
        b = np.where(g.random(BLOCK) < 0.5, small, b)
        return a.astype(NP[dt]), b.astype(NP[dt])
    scale = {"f32": 1e3, "f16": 30.0, "bf16": 1e3}[dt]
    a = (g.standard_normal(BLOCK) * scale).astype(np.float32)
    b = (g.standard_normal(BLOCK) * scale).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40], dtype=np.float32)
    for arr in (a, b) if special_values else ():
        idx = g.choice(BLOCK, 4, replace=False)
        arr[idx] = g.choice(special, 4)
    if dt == "f16":
        return a.astype(np.float16), b.astype(np.float16)
    if dt == "bf16":
        return bf16_round(a), bf16_round(b)
    return a, b


def to_torch(arr, dt):
    return torch.from_numpy(np.ascontiguousarray(arr)).to(TORCH[dt])


def from_torch(t, dt):
    return t.to(torch.float32).numpy() if dt == "bf16" else t.numpy()


def same(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype.kind == "f" or want.dtype.kind == "f":
        g, w = got.astype(np.float64), want.astype(np.float64)
        ok = (g == w) | (np.isnan(g) & np.isnan(w))
    else:
        ok = got.astype(np.int64) == want.astype(np.int64)
    bad = np.flatnonzero(~ok)
    assert not bad.size, f"{what}: {bad.size} lanes differ, first at {bad[0]}: got {got.flat[bad[0]]}, " \
                         f"model {want.flat[bad[0]]}"


def run_kernel(src, name, args, grid=(1,), **options):
    ns: dict = {}
    exec(compile(src, f"<fuzz-{abs(hash(src))}>", "exec"), ns)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ns[name][grid](*args, BLOCK=BLOCK, **options)


# --------------------------------------------------------------------------- the tests


@SETTINGS
@given(programs())
def test_elementwise_programs_match_the_numpy_model(prog):
    dt, steps, n, other, seed = prog
    a, b = make_inputs(dt, seed)
    src = kernel_source(dt, steps, other)
    poison = -77 if dt in ("i32", "i8") else float("nan")
    out = torch.full((BLOCK,), poison, dtype=TORCH[dt])
    run_kernel(src, "fuzz", [to_torch(a, dt), to_torch(b, dt), out, n])
    m = np.arange(BLOCK) < n
    o = fix(np.array(other), dt)
    a_m = np.where(m, a, fix(np.full(BLOCK, o), dt))
    b_m = np.where(m, b, fix(np.full(BLOCK, o), dt))
    value, _ = model_program(dt, steps, fix(a_m, dt), fix(b_m, dt))
    want = fix(value, dt)  # tl.store converts to the pointer's dtype (round to nearest even)
    got = from_torch(out, dt)
    same(got[m], want[m], f"{dt} program\n{src}")
    if dt in ("i32", "i8"):
        assert (got[~m] == -77).all(), "a masked-off lane was written"
    else:
        assert np.isnan(got[~m]).all(), "a masked-off lane was written"


def _exact_on_the_gpu(prog) -> bool:
    """Float division is `div.full` on the GPU (Triton's choice: within 2 ulp, not correctly rounded); every
    other op of these programs is exact IEEE once fusion into fma is off, so the GPU must match bit for bit."""
    dt, steps = prog[0], prog[1]
    return dt in ("i32", "i8") or not any(s[0] == "bin" and s[1] == "/" for s in steps)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@settings(max_examples=int(os.environ.get("KERNELLAB_GPU_FUZZ_EXAMPLES", "300")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(programs().filter(_exact_on_the_gpu))
def test_elementwise_programs_gpu_equals_interpreter(prog):
    """The same random program on the GPU (fp fusion off) and on the interpreter: every lane equal, bit for bit
    (NaN with NaN), masked-off lanes untouched on both."""
    dt, steps, n, other, seed = prog
    a, b = make_inputs(dt, seed)
    src = kernel_source(dt, steps, other)
    poison = -77 if dt in ("i32", "i8") else float("nan")
    outs = {}
    for device in ("cpu", "cuda"):
        out = torch.full((BLOCK,), poison, dtype=TORCH[dt], device=device)
        run_kernel(src, "fuzz", [to_torch(a, dt).to(device), to_torch(b, dt).to(device), out, n],
                   **({"enable_fp_fusion": False} if device == "cuda" else {}))
        outs[device] = from_torch(out.cpu(), dt)
    same(outs["cuda"], outs["cpu"], f"{dt} program, GPU vs interpreter\n{src}")


ACC = {  # Triton 3.6's accumulator dtype per (op, input dtype)
    "max": {"f32": "f32", "f16": "f32", "bf16": "f32", "i32": "i32", "i8": "i32"},
    "sum": {"f32": "f32", "f16": "f16", "bf16": "bf16", "i32": "i32", "i8": "i32"},
    "cumsum": {"f32": "f32", "f16": "f16", "bf16": "f32", "i32": "i32", "i8": "i32"},
}
ACC["min"] = ACC["max"]


@st.composite
def reductions(draw):
    prog = draw(programs())
    op = draw(st.sampled_from(["max", "min", "sum", "cumsum"]))
    return prog, op


def _model_reduce(op, x, dt):
    acc = ACC[op][dt]
    xs = fix(x, acc)
    with np.errstate(all="ignore"):
        if op == "max":
            r = np.fmax.reduce(xs)
            return np.array([r]), acc
        if op == "min":
            return np.array([np.fmin.reduce(xs)]), acc
        if op == "sum":
            if acc in ("i32",):
                return np.array([xs.astype(np.int64).sum()]).astype(np.int32), acc
            return np.array([xs.astype(np.float64).sum()]), acc
        if acc == "i32":
            return np.cumsum(xs.astype(np.int64)).astype(np.int32), acc
        return np.cumsum(xs.astype(np.float64)), acc


def _close(got, want, xs, acc, what):
    """Float sums may add in any order: allowed error n * eps(acc) * sum|x| (plus the exact NaN/inf pattern)."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    eps = {"f32": 2.0**-23, "f16": 2.0**-10, "bf16": 2.0**-7, "f64": 2.0**-52}[acc]
    finite = np.isfinite(xs)
    if not finite.all():  # a NaN or inf among the summed values: the result is NaN or that inf
        assert (both_nan | (g == w) | (np.isnan(w) & np.isnan(g))).all(), f"{what}: got {g}, model {w}"
        return
    bound = BLOCK * eps * np.abs(xs.astype(np.float64)).sum() + 1e-30
    limit = {"f32": 3.4e38, "f16": 65504.0, "bf16": 3.39e38}[acc]
    if np.abs(w).max(initial=0) > limit * 0.5:
        return  # near overflow the rounding order decides between a large value and inf
    assert (both_nan | (np.abs(g - w) <= bound)).all(), f"{what}: got {g}, model {w}, bound {bound}"


@SETTINGS
@given(reductions())
def test_reduction_and_scan_programs_match_the_numpy_model(case):
    (dt, steps, n, other, seed), op = case
    a, b = make_inputs(dt, seed)
    if op == "cumsum":
        tail = "tl.store(o_ptr + offs, tl.cumsum(v, 0), mask=m)"
    else:
        tail = f"tl.store(o_ptr, tl.{op}(v, 0))"
    src = kernel_source(dt, steps, other, tail=tail)
    is_int = dt in ("i32", "i8")
    # f32 / i32 hold every accumulator value exactly, so the store adds no rounding of its own
    out = torch.full((BLOCK if op == "cumsum" else 1,), -77 if is_int else float("nan"),
                     dtype=torch.int32 if is_int else torch.float32)
    run_kernel(src, "fuzz", [to_torch(a, dt), to_torch(b, dt), out, n])
    m = np.arange(BLOCK) < n
    o = fix(np.full(BLOCK, other), dt)
    v, vdt = model_program(dt, steps, np.where(m, a, o).astype(a.dtype), np.where(m, b, o).astype(b.dtype))
    want, acc = _model_reduce(op, v, vdt)
    got = out.numpy()
    what = f"{op} of {vdt} (accumulating in {acc})\n{src}"
    if op == "cumsum":
        got, want = got[m], want[m]
        xs = fix(v, acc)[m]
        if acc.startswith("i"):
            same(got, want, what)
        else:
            for i in range(len(got)):
                _close(got[i:i + 1], want[i:i + 1], xs[:i + 1], acc, what)
        return
    if op in ("max", "min") or acc.startswith("i"):
        same(got, want.astype(got.dtype) if acc.startswith("i") else want, what)
    else:
        _close(got, want, fix(v, acc), acc, what)


def test_model_bf16_rounding_is_nearest_even():
    x = np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, np.inf, -0.0], dtype=np.float32)
    want = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    assert np.array_equal(bf16_round(x), want, equal_nan=True)
