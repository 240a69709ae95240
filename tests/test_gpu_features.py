"""Every language feature on the GPU through kernellab's own backend, one small kernel each.

Each GPU test builds its inputs once on the CPU (fresh random values from a seeded torch.Generator,
never all-zero buffers; outputs poisoned with NaN or a sentinel so unwritten elements show), clones them to
CUDA, runs the kernel on both (compiled code on the GPU, the interpreter on the CPU) and compares

  (a) the GPU's result with an independent torch / NumPy / Python reference, computed in float64
      (or in exact integers) wherever that means something, and
  (b) the GPU's result with the interpreter's: bitwise for integers and for results that IEEE
      arithmetic fixes exactly, within a tight tolerance for everything else.

The GPU tests carry the `gpu` mark and skip without CUDA. `test_kernel_compiles_for_sm90` needs no
GPU: it compiles the kernels (in the specializations the GPU tests use) through the whole GPU
pipeline, tile IR -> GPU IR -> LLVM IR -> PTX -> ptxas for sm_90a, so a backend failure shows up
on any machine that has ptxas.

A kernel that crashes on the GPU leaves the process's CUDA context unusable; the GPU tests that would
run after it in the same process then fail at once, naming the test that crashed (run them on their own).
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda"  # where the compiled side of `run_both` runs
ROOT = Path(__file__).resolve().parents[1]


def gpu(fn):
    """Marks a test that needs a CUDA GPU (skipped without one)."""
    return pytest.mark.gpu(pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")(fn))


# ============================================================================================ dtypes

DT = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
      "uint32": torch.uint32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
      "float64": torch.float64, "bool": torch.bool}
TL = {name: getattr(tl, "int1" if name == "bool" else name) for name in DT}
ALL_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint32", "float16", "bfloat16", "float32", "float64"]
INT_DTYPES = [d for d in ALL_DTYPES if "int" in d]
FLOAT_DTYPES = [d for d in ALL_DTYPES if "float" in d]
# relative rounding error of one operation, per float dtype (a little over one ulp)
EPS = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-6, torch.float64: 1e-13}
SENTINEL = {torch.int8: -77, torch.int16: -7777, torch.int32: -777777, torch.int64: -77777777777,
            torch.uint8: 0xA5, torch.uint32: 0xDEADBEEF}


def bits_of(dtype: torch.dtype) -> int:
    return torch.iinfo(dtype).bits if not dtype.is_floating_point else torch.finfo(dtype).bits


def is_signed(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_signed


# ============================================================================================ inputs


def poison(shape, dtype: torch.dtype, value=None) -> torch.Tensor:
    """An output buffer whose every element shows if the kernel leaves it unwritten: NaN for floats,
    a sentinel for integers, the byte 0x5A (neither 0 nor 1) for bool."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype == torch.bool:
        return torch.full(shape, 0x5A, dtype=torch.uint8).view(torch.bool)
    if value is None:
        value = float("nan") if dtype.is_floating_point else SENTINEL[dtype]
    return torch.full(shape, value, dtype=dtype)


def ints(gen, shape, dtype: torch.dtype, lo=None, hi=None) -> torch.Tensor:
    """Random integers of `dtype` in [lo, hi] (default: the dtype's whole range)."""
    return _ints64(gen, shape, dtype, lo, hi).to(dtype)


def _ints64(gen, shape, dtype: torch.dtype, lo=None, hi=None) -> torch.Tensor:
    """`ints` as int64 values (torch has few operations on uint32 tensors: compute in int64, convert last)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    info = torch.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    if hi - lo >= 2**63 - 1:  # the whole int64 range: two 32-bit halves
        top = torch.randint(-2**31, 2**31, shape, generator=gen, dtype=torch.int64)
        low = torch.randint(0, 2**32, shape, generator=gen, dtype=torch.int64)
        return (top << 32) | low
    return torch.randint(lo, hi + 1, shape, generator=gen, dtype=torch.int64)


def mixed_ints(gen, shape, dtype: torch.dtype) -> torch.Tensor:
    """Half whole-range integers, half small ones (so small quotients and remainders show up too)."""
    big = _ints64(gen, shape, dtype)
    small = _ints64(gen, shape, dtype, max(torch.iinfo(dtype).min, -100), 100)
    return torch.where(torch.rand(big.shape, generator=gen) < 0.5, big, small).to(dtype)


def randn(gen, *shape, dtype=torch.float32, scale=1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def uniform(gen, lo, hi, *shape, dtype=torch.float32) -> torch.Tensor:
    return (lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=torch.float64)).to(dtype)


def log_uniform(gen, lo, hi, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.exp(uniform(gen, math.log(lo), math.log(hi), *shape, dtype=torch.float64)).to(dtype)


def signs(gen, *shape) -> torch.Tensor:
    return torch.where(torch.rand(*shape, generator=gen) < 0.5, -1.0, 1.0).double()


def random_bits(gen, n, dtype: torch.dtype) -> torch.Tensor:
    """n random bit patterns read as `dtype` (every class of float value: normals, subnormals, inf, NaN)."""
    raw = torch.randint(0, 256, (n * (bits_of(dtype) // 8),), generator=gen, dtype=torch.int64).to(torch.uint8)
    return raw.view(dtype)


# ============================================================================================ running


def _clone_to(t, device):
    """`t` on `device` with the same sizes, strides and storage offset. The whole storage is copied, so
    a strided view travels with the elements between and around its own (and a later check can see
    that the kernel left them alone). Anything that is not a tensor passes through."""
    if not isinstance(t, torch.Tensor):
        return t
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = torch.empty(0, dtype=t.dtype, device=t.device)
    flat.set_(t.untyped_storage(), 0, (n,))
    return flat.to(device, copy=True).as_strided(t.shape, t.stride(), t.storage_offset())


def whole_storage(t: torch.Tensor) -> torch.Tensor:
    """All of `t`'s storage as a flat tensor of its dtype."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (n,))


def outside_view(t: torch.Tensor) -> torch.Tensor:
    """The elements of `t`'s storage that `t` itself does not cover."""
    flat = whole_storage(t)
    covered = torch.zeros(flat.numel(), dtype=torch.bool)
    covered.as_strided(t.shape, t.stride(), t.storage_offset()).fill_(True)
    return flat[~covered]


class Both(NamedTuple):
    gpu: list   # the outputs of the CUDA run, copied back to the CPU (same strides and storage)
    cpu: list   # the outputs of the interpreter run
    args: list  # every argument as it was before either run (CPU copies)


def _sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


_LOST_CONTEXT: list = []  # the test whose kernel crashed the GPU: every later CUDA call in this process fails


def _is_gpu_crash(e: BaseException) -> bool:
    from kernellab.errors import KernelCrashError

    return isinstance(e, KernelCrashError) or type(e).__name__ == "AcceleratorError" or "CUDA error" in str(e)


def run_both(kernel, grid, make_args, out_indices, seed=0, **consts) -> Both:
    """Build the arguments once on the CPU with `make_args(gen)`, clone them to CUDA, run `kernel[grid]`
    on both copies (GPU, then interpreter) and return the outputs at `out_indices` from each, plus a
    pristine copy of the inputs for the reference."""
    if _LOST_CONTEXT:
        pytest.fail(f"not run: {_LOST_CONTEXT[0]} crashed on the GPU earlier in this process, which leaves the CUDA "
                    "context unusable; run this test on its own", pytrace=False)
    gen = torch.Generator().manual_seed(seed)
    cpu_args = list(make_args(gen))
    pristine = [_clone_to(a, "cpu") for a in cpu_args]
    try:
        dev_args = [_clone_to(a, DEVICE) for a in cpu_args]
        kernel[grid](*dev_args, **consts)
        _sync()
    except Exception as e:
        if DEVICE == "cuda" and _is_gpu_crash(e):
            _LOST_CONTEXT.append(os.environ.get("PYTEST_CURRENT_TEST", kernel.__name__).split(" ")[0])
        raise
    kernel[grid](*cpu_args, **consts)
    return Both([_clone_to(dev_args[i], "cpu") for i in out_indices], [cpu_args[i] for i in out_indices], pristine)


class Spec(NamedTuple):
    """One kernel launch: what `run_both` takes (and what the sm_90 compile test compiles)."""

    kernel: object
    grid: tuple
    make_args: Callable
    outs: tuple
    consts: dict


def run_spec(spec: Spec, seed=0) -> Both:
    return run_both(spec.kernel, spec.grid, spec.make_args, spec.outs, seed=seed, **spec.consts)


# ============================================================================================ checking


def _as_int64(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.bool:
        return t.contiguous().view(torch.uint8).to(torch.int64)
    return t.to(torch.int64)


def _first_bad(bad: torch.Tensor):
    return tuple(int(i) for i in bad.nonzero()[0])


def agree(g: torch.Tensor, c: torch.Tensor, tol=0.0, what=""):
    """The GPU's output `g` against the interpreter's `c`: bitwise (any NaN matching any NaN) when
    tol == 0, else within a relative and absolute `tol`."""
    assert g.shape == c.shape and g.dtype == c.dtype, (g.shape, g.dtype, c.shape, c.dtype)
    g, c = g.contiguous(), c.contiguous()
    if g.is_floating_point():
        if tol:
            torch.testing.assert_close(g.double(), c.double(), rtol=tol, atol=tol, equal_nan=True,
                                       msg=lambda m: f"GPU vs interpreter {what}: {m}")
            return
        gn, cn = torch.isnan(g), torch.isnan(c)
        ib = {2: torch.int16, 4: torch.int32, 8: torch.int64}[g.element_size()]
        bad = (gn != cn) | ((g.view(ib) != c.view(ib)) & ~gn)
    else:
        bad = _as_int64(g) != _as_int64(c)
    if bad.any():
        i = _first_bad(bad)
        raise AssertionError(f"GPU vs interpreter {what}: {int(bad.sum())} of {bad.numel()} elements differ, "
                             f"first at {i}: GPU {g[i].item()!r} vs interpreter {c[i].item()!r}")


def agree_all(both: Both, tol=0.0):
    for k, (g, c) in enumerate(zip(both.gpu, both.cpu)):
        agree(g, c, tol, what=f"(output {k})")


def check(out: torch.Tensor, ref: torch.Tensor, atol=0.0, rtol=None, what=""):
    """`out` against the reference `ref`: exact when the tolerances are 0; NaN matches NaN (a poisoned,
    unwritten element only passes where the reference itself is NaN)."""
    out, ref = out.cpu(), ref.cpu()
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    if ref.is_floating_point() or out.is_floating_point():
        rtol = atol if rtol is None else rtol
        torch.testing.assert_close(out.double(), ref.double(), atol=atol, rtol=rtol, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")
        return
    o, r = _as_int64(out), _as_int64(ref)
    bad = o != r
    if bad.any():
        i = _first_bad(bad)
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} elements differ from the reference, "
                             f"first at {i}: got {o[i].item()}, expected {r[i].item()}")


def wrap(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    if signed and v >> (bits - 1):
        v -= 1 << bits
    return v


def wrap_tensor(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Exact integers (int64, or Python ints) reduced modulo 2^bits into `dtype`."""
    vals = [wrap(int(v), bits_of(dtype), dtype.is_signed) for v in t.reshape(-1).tolist()]
    return torch.tensor(vals, dtype=torch.int64).to(dtype).reshape(t.shape)


def cdiv(a, b):
    return (a + b - 1) // b


@kl.jit
def _store1(ptr, val):
    """Store a 1-D tile contiguously."""
    tl.store(ptr + tl.arange(0, val.shape[0]), val)


@kl.jit
def _store2(ptr, val):
    """Store a 2-D tile contiguously (row-major)."""
    A = val.shape[0]
    B = val.shape[1]
    tl.store(ptr + tl.arange(0, A)[:, None] * B + tl.arange(0, B)[None, :], val)


@kl.jit
def _store3(ptr, val):
    """Store a 3-D tile contiguously (row-major)."""
    A = val.shape[0]
    B = val.shape[1]
    C = val.shape[2]
    i = tl.arange(0, A)[:, None, None]
    j = tl.arange(0, B)[None, :, None]
    k = tl.arange(0, C)[None, None, :]
    tl.store(ptr + i * (B * C) + j * C + k, val)


@kl.jit
def _load2(ptr, A: tl.constexpr, B: tl.constexpr):
    """Load a contiguous (A, B) tile."""
    return tl.load(ptr + tl.arange(0, A)[:, None] * B + tl.arange(0, B)[None, :])


# ============================================================================================ arithmetic

CMP_OPS = ["<", "<=", ">", ">=", "==", "!="]
INT_OPS = ["+", "-", "*", "/", "//", "%", "&", "|", "^", "<<", ">>"] + CMP_OPS + ["neg", "inv", "not", "scalar"]
FLOAT_OPS = ["+", "-", "*", "/", "%"] + CMP_OPS + ["neg", "not", "scalar"]
N_ARITH, B_ARITH = 1000, 256


@kl.jit
def binop_kernel(X, Y, Z, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m)
    y = tl.load(Y + offs, mask=m)
    if OP == "+":
        z = x + y
    elif OP == "-":
        z = x - y
    elif OP == "*":
        z = x * y
    elif OP == "/":
        z = x / y
    elif OP == "//":
        z = x // y
    elif OP == "%":
        z = x % y
    elif OP == "&":
        z = x & y
    elif OP == "|":
        z = x | y
    elif OP == "^":
        z = x ^ y
    elif OP == "<<":
        z = x << y
    elif OP == ">>":
        z = x >> y
    elif OP == "<":
        z = x < y
    elif OP == "<=":
        z = x <= y
    elif OP == ">":
        z = x > y
    elif OP == ">=":
        z = x >= y
    elif OP == "==":
        z = x == y
    elif OP == "!=":
        z = x != y
    elif OP == "neg":
        z = -x
    elif OP == "inv":
        z = ~x
    elif OP == "not":
        z = not x
    else:  # "scalar": Python literals are weak, the tensor's dtype wins
        z = x * 3 + 1
    tl.store(Z + offs, z, mask=m)


def compute_dtype(op, dx: torch.dtype, dy: torch.dtype, promoted: torch.dtype) -> torch.dtype:
    """The dtype `x op y` is computed in (Triton's rules), given the promoted dtype of x and y."""
    if op in ("neg", "inv", "not", "scalar"):
        return dx
    if op == "/":
        return torch.float64 if promoted == torch.float64 else torch.float32
    if op == "%" and promoted in (torch.float16, torch.bfloat16):
        return torch.float32
    return promoted


def result_dtype(op, ct: torch.dtype) -> torch.dtype:
    return torch.bool if op in CMP_OPS or op == "not" else ct


def binop_inputs(gen, op, dx, dy, ct, n=N_ARITH):
    """x, y for `x op y`: the operation is defined everywhere (no zero divisors, no INT_MIN // -1)."""
    int_div = op == "/" and not dx.is_floating_point and not dy.is_floating_point
    if ct.is_floating_point and not int_div:
        if not dx.is_floating_point or not dy.is_floating_point:  # ints mixed with floats: exact in either
            x = ints(gen, n, dx, 0 if not is_signed(dx) else -50, 50) if not dx.is_floating_point \
                else randn(gen, n, dtype=dx, scale=8)
            y = ints(gen, n, dy, 0 if not is_signed(dy) else -50, 50) if not dy.is_floating_point \
                else randn(gen, n, dtype=dy, scale=8)
        else:
            x, y = randn(gen, n, dtype=dx, scale=8), randn(gen, n, dtype=dy, scale=8)
        if op in ("/", "%"):
            y = (signs(gen, n) * uniform(gen, 0.5, 4.0, n, dtype=torch.float64)).to(dy) if dy.is_floating_point \
                else torch.where(y == 0, torch.ones_like(y), y)
    elif op in ("<<", ">>"):
        x = ints(gen, n, dx)
        y = ints(gen, n, dy, 0, min(2 * bits_of(ct) - 1, torch.iinfo(dy).max))  # amounts >= bitwidth too
    elif op in ("//", "%", "/"):
        x, y = mixed_ints(gen, n, dx), mixed_ints(gen, n, dy).to(torch.int64)  # fix y up in int64
        y = torch.where(y == 0, torch.ones_like(y), y)
        if not ct.is_floating_point and ct.is_signed:  # INT_MIN // -1 overflows
            xmin = wrap_tensor(x.to(torch.int64), ct).to(torch.int64) == torch.iinfo(ct).min
            y = torch.where(xmin & (wrap_tensor(y, ct).to(torch.int64) == -1), torch.ones_like(y), y)
        y = y.to(dy)
    else:
        x, y = ints(gen, n, dx), ints(gen, n, dy)
    if op in CMP_OPS:  # equal pairs, and NaNs for floats
        y = y.clone()
        y[::4] = x[::4].to(dy)
        if ct.is_floating_point:
            if dx.is_floating_point:
                x[5] = float("nan")
            if dy.is_floating_point:
                y[9] = float("nan")
                y[13] = float("nan")
                x[13] = float("nan") if dx.is_floating_point else x[13]
    return x, y


def binop_spec(op, dx: str, dy: str, promoted: str, n=N_ARITH) -> Spec:
    tx, ty = DT[dx], DT[dy]
    ct = compute_dtype(op, tx, ty, DT[promoted])
    rd = result_dtype(op, ct)

    def make_args(gen):
        x, y = binop_inputs(gen, op, tx, ty, ct, n)
        return [x, y, poison(n, rd), n]

    return Spec(binop_kernel, (cdiv(n, B_ARITH),), make_args, (2,), dict(OP=op, BLOCK=B_ARITH))


def ref_binop(op, x: torch.Tensor, y: torch.Tensor, ct: torch.dtype) -> torch.Tensor:
    """`x op y` computed independently: float64 for float computations, exact Python integers reduced
    modulo 2^bits (C semantics: truncating division, remainder with the dividend's sign) for integers."""
    if ct.is_floating_point:
        a, b = x.to(ct).double(), y.to(ct).double()
        table = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
                 "%": lambda: torch.fmod(a, b), "<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b,
                 ">=": lambda: a >= b, "==": lambda: a == b, "!=": lambda: a != b, "neg": lambda: -a,
                 "not": lambda: a == 0, "scalar": lambda: a * 3 + 1}
        return table[op]()
    bits, signed = bits_of(ct), ct.is_signed
    xs = [wrap(v, bits, signed) for v in x.to(torch.int64).tolist()]
    ys = [wrap(v, bits, signed) for v in y.to(torch.int64).tolist()]
    out = []
    for a, b in zip(xs, ys):
        if op in CMP_OPS:
            out.append({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op])
            continue
        if op == "not":
            out.append(a == 0)
            continue
        if op in ("//", "%"):
            q = abs(a) // abs(b)
            q = -q if (a < 0) != (b < 0) else q
            r = q if op == "//" else a - b * q
        elif op in ("<<", ">>"):
            s = b & ((1 << bits) - 1)  # the amount, read as unsigned
            if op == "<<":
                r = 0 if s >= bits else a << s
            elif signed:
                r = a >> min(s, bits - 1)  # arithmetic shift: sign fill
            else:
                r = 0 if s >= bits else a >> s
        else:
            r = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "&": lambda: a & b, "|": lambda: a | b,
                 "^": lambda: a ^ b, "neg": lambda: -a, "inv": lambda: ~a, "scalar": lambda: a * 3 + 1}[op]()
        out.append(wrap(r, bits, signed))
    if op in CMP_OPS or op == "not":
        return torch.tensor(out, dtype=torch.bool)
    return torch.tensor(out, dtype=torch.int64)


def _check_binop(op, dx, dy, promoted, seed=0):
    tx, ty = DT[dx], DT[dy]
    ct = compute_dtype(op, tx, ty, DT[promoted])
    both = run_spec(binop_spec(op, dx, dy, promoted), seed=seed)
    x, y = both.args[0], both.args[1]
    ref = ref_binop(op, x, y, ct)
    out = both.gpu[0]
    what = f"{dx} {op} {dy} (computed in {ct})"
    if ct.is_floating_point and op not in CMP_OPS and op != "not":
        tol = EPS[ct] if op not in ("/", "%") else max(EPS[ct], 1e-6)
        atol = tol * (100 if op in ("scalar", "%") else 1)
        check(out, ref, atol=atol, rtol=tol, what=what)
        # + - * and negation are correctly rounded on both sides; / (div.full.f32), % and x * 3 + 1
        # (which the GPU may contract into an fma) only agree to rounding
        agree(out, both.cpu[0], 0 if op in ("+", "-", "*", "neg") else tol, what)
    else:
        check(out, ref, what=what)
        agree(out, both.cpu[0], what=what)


@gpu
@pytest.mark.parametrize("op", INT_OPS)
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_int_arithmetic(dtype, op):
    _check_binop(op, dtype, dtype, dtype)


@gpu
@pytest.mark.parametrize("op", FLOAT_OPS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_float_arithmetic(dtype, op):
    _check_binop(op, dtype, dtype, dtype)


# (x dtype, y dtype, the promoted dtype by Triton's documented rules)
PROMOTIONS = [("int8", "int32", "int32"), ("uint8", "int8", "uint8"), ("int32", "uint32", "uint32"),
              ("int16", "int64", "int64"), ("uint32", "int64", "int64"), ("int32", "float16", "float16"),
              ("float16", "bfloat16", "float16"), ("bfloat16", "int32", "float32"), ("int64", "float32", "float32"),
              ("float32", "float64", "float64"), ("uint8", "float16", "float16"), ("int8", "bfloat16", "float32")]


@gpu
@pytest.mark.parametrize("op", ["+", "-", "*", "<", "=="])
@pytest.mark.parametrize("dx,dy,promoted", PROMOTIONS, ids=[f"{a}-{b}" for a, b, _ in PROMOTIONS])
def test_mixed_dtype_promotion(dx, dy, promoted, op):
    _check_binop(op, dx, dy, promoted)


# ============================================================================================ casts


@kl.jit
def cast_kernel(X, Z, n, DST: tl.constexpr, BITCAST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m)
    tl.store(Z + offs, x.to(DST, bitcast=BITCAST), mask=m)


def _trunc_to(dst):
    return lambda x: torch.from_numpy(np.trunc(x.double().numpy())).to(torch.int64).to(dst)


def _saturate_to(dst):
    """Truncate toward zero, saturate at the dtype's range, NaN -> 0 (PTX cvt.rzi; the interpreter's rule)."""
    info = torch.iinfo(dst)

    def ref(x):
        t = np.trunc(x.double().numpy())
        t = np.where(np.isnan(t), 0.0, np.clip(t, info.min, info.max))
        return torch.tensor([int(v) for v in t.tolist()], dtype=torch.int64).to(dst)
    return ref


def _wrap_to(dst):
    return lambda x: wrap_tensor(x.to(torch.int64), dst)


def _torch_to(dst):
    return lambda x: x.to(dst)


def _numpy_to(dst):
    return lambda x: torch.from_numpy(x.numpy().astype(np.dtype(str(dst).split(".")[1])))


def _view_as(dst):
    return lambda x: x.view(dst)


def _with_specials(values, specials):
    v = values.clone()
    v[:len(specials)] = torch.tensor(specials, dtype=torch.float64).to(v.dtype)
    return v


F32_SPECIALS = [float("nan"), float("inf"), -float("inf"), 1e10, -1e10, 3e9, -3e9, 2.5, -2.5, 0.99, -0.99, -0.0]

# name: (src, dst, bitcast, make input (gen, n), reference)
CASTS = {
    "f32->i32": ("float32", "int32", False, lambda g, n: _with_specials(uniform(g, -2e9, 2e9, n), [2.5, -2.5, 0.99, -0.99, 2147483520.0, -2147483648.0]), _trunc_to(torch.int32)),
    "f32->i8": ("float32", "int8", False, lambda g, n: uniform(g, -128.99, 127.99, n), _trunc_to(torch.int8)),
    "f32->u8": ("float32", "uint8", False, lambda g, n: uniform(g, 0, 255.99, n), _trunc_to(torch.uint8)),
    "f32->u32": ("float32", "uint32", False, lambda g, n: uniform(g, 0, 4e9, n), _trunc_to(torch.uint32)),
    "f64->i64": ("float64", "int64", False, lambda g, n: uniform(g, -9e18, 9e18, n, dtype=torch.float64), _trunc_to(torch.int64)),
    "f16->i16": ("float16", "int16", False, lambda g, n: uniform(g, -30000, 30000, n, dtype=torch.float16), _trunc_to(torch.int16)),
    "bf16->i32": ("bfloat16", "int32", False, lambda g, n: uniform(g, -1e9, 1e9, n, dtype=torch.bfloat16), _trunc_to(torch.int32)),
    "f32->i32-saturating": ("float32", "int32", False, lambda g, n: _with_specials(uniform(g, -1e10, 1e10, n), F32_SPECIALS), _saturate_to(torch.int32)),
    # to 8 bits NVPTX converts with cvt.rzi.s16 (saturating at int16) and keeps the low byte, as Triton's code does
    "f32->i8-via-i16": ("float32", "int8", False, lambda g, n: _with_specials(uniform(g, -1000, 1000, n), F32_SPECIALS), lambda x: _saturate_to(torch.int16)(x).to(torch.int8)),
    # one cvt.rzi from f32 to 16 and 32 bits (its own saturation and NaN -> 0; lowering_core): unsigned and f16
    # sources with the specials too
    "f32->u32-saturating": ("float32", "uint32", False, lambda g, n: _with_specials(uniform(g, -1e10, 1e10, n), F32_SPECIALS), _saturate_to(torch.uint32)),
    "f32->i16-saturating": ("float32", "int16", False, lambda g, n: _with_specials(uniform(g, -1e5, 1e5, n), F32_SPECIALS), _saturate_to(torch.int16)),
    "f32->u8-via-u16": ("float32", "uint8", False, lambda g, n: _with_specials(uniform(g, -1000, 70000, n), F32_SPECIALS), lambda x: (_saturate_to(torch.int32)(x).to(torch.int64).clamp(0, 65535) & 255).to(torch.uint8)),
    "f16->i8-via-i16": ("float16", "int8", False, lambda g, n: _with_specials(uniform(g, -1000, 1000, n, dtype=torch.float16), [float("nan"), float("inf"), -float("inf"), 65504.0, -65504.0, 2.5, -2.5, -0.0]), lambda x: _saturate_to(torch.int16)(x.float()).to(torch.int8)),
    "i32->i8": ("int32", "int8", False, lambda g, n: ints(g, n, torch.int32), _wrap_to(torch.int8)),
    "i64->i16": ("int64", "int16", False, lambda g, n: ints(g, n, torch.int64), _wrap_to(torch.int16)),
    "i32->u8": ("int32", "uint8", False, lambda g, n: ints(g, n, torch.int32), _wrap_to(torch.uint8)),
    "u32->i32": ("uint32", "int32", False, lambda g, n: ints(g, n, torch.uint32), _wrap_to(torch.int32)),
    "i16->u32": ("int16", "uint32", False, lambda g, n: ints(g, n, torch.int16), _wrap_to(torch.uint32)),
    "i8->i64": ("int8", "int64", False, lambda g, n: ints(g, n, torch.int8), _wrap_to(torch.int64)),
    "u8->i32": ("uint8", "int32", False, lambda g, n: ints(g, n, torch.uint8), _wrap_to(torch.int32)),
    "u32->i64": ("uint32", "int64", False, lambda g, n: ints(g, n, torch.uint32), _wrap_to(torch.int64)),
    "i64->u32": ("int64", "uint32", False, lambda g, n: ints(g, n, torch.int64), _wrap_to(torch.uint32)),
    "u8->i8": ("uint8", "int8", False, lambda g, n: ints(g, n, torch.uint8), _wrap_to(torch.int8)),
    "i32->f32": ("int32", "float32", False, lambda g, n: ints(g, n, torch.int32), _torch_to(torch.float32)),
    "i64->f64": ("int64", "float64", False, lambda g, n: ints(g, n, torch.int64), _torch_to(torch.float64)),
    "i64->f32": ("int64", "float32", False, lambda g, n: ints(g, n, torch.int64), _torch_to(torch.float32)),
    "u32->f32": ("uint32", "float32", False, lambda g, n: ints(g, n, torch.uint32), lambda x: x.to(torch.int64).to(torch.float32)),
    "i32->f16": ("int32", "float16", False, lambda g, n: ints(g, n, torch.int32, -65504, 65504), _torch_to(torch.float16)),
    "i16->bf16": ("int16", "bfloat16", False, lambda g, n: ints(g, n, torch.int16), _torch_to(torch.bfloat16)),
    "u8->bf16": ("uint8", "bfloat16", False, lambda g, n: ints(g, n, torch.uint8), _torch_to(torch.bfloat16)),
    "f32->f16": ("float32", "float16", False, lambda g, n: _with_specials(log_uniform(g, 1e-9, 1e5, n) * signs(g, n).float(), [float("nan"), float("inf"), -0.0, 65520.0, 65519.0, 2.0**-25, 3 * 2.0**-26]), _torch_to(torch.float16)),
    "f32->bf16": ("float32", "bfloat16", False, lambda g, n: random_bits(g, n, torch.float32), _torch_to(torch.bfloat16)),
    "f64->f32": ("float64", "float32", False, lambda g, n: log_uniform(g, 1e-50, 1e50, n, dtype=torch.float64) * signs(g, n), _torch_to(torch.float32)),
    "f64->f16": ("float64", "float16", False, lambda g, n: log_uniform(g, 1e-9, 1e5, n, dtype=torch.float64) * signs(g, n), _numpy_to(torch.float16)),
    "f16->f32": ("float16", "float32", False, lambda g, n: random_bits(g, n, torch.float16), _torch_to(torch.float32)),
    "bf16->f32": ("bfloat16", "float32", False, lambda g, n: random_bits(g, n, torch.bfloat16), _torch_to(torch.float32)),
    "f16->f64": ("float16", "float64", False, lambda g, n: random_bits(g, n, torch.float16), _torch_to(torch.float64)),
    "f32->f64": ("float32", "float64", False, lambda g, n: random_bits(g, n, torch.float32), _torch_to(torch.float64)),
    "bf16->f16": ("bfloat16", "float16", False, lambda g, n: randn(g, n, dtype=torch.bfloat16, scale=100), _torch_to(torch.float16)),
    "f16->bf16": ("float16", "bfloat16", False, lambda g, n: randn(g, n, dtype=torch.float16, scale=100), _torch_to(torch.bfloat16)),
    "f32->i32-bitcast": ("float32", "int32", True, lambda g, n: random_bits(g, n, torch.float32), _view_as(torch.int32)),
    "i32->f32-bitcast": ("int32", "float32", True, lambda g, n: ints(g, n, torch.int32), _view_as(torch.float32)),
    "f16->i16-bitcast": ("float16", "int16", True, lambda g, n: random_bits(g, n, torch.float16), _view_as(torch.int16)),
    "bf16->i16-bitcast": ("bfloat16", "int16", True, lambda g, n: random_bits(g, n, torch.bfloat16), _view_as(torch.int16)),
    "i16->bf16-bitcast": ("int16", "bfloat16", True, lambda g, n: ints(g, n, torch.int16), _view_as(torch.bfloat16)),
    "f64->i64-bitcast": ("float64", "int64", True, lambda g, n: random_bits(g, n, torch.float64), _view_as(torch.int64)),
    "i64->f64-bitcast": ("int64", "float64", True, lambda g, n: ints(g, n, torch.int64), _view_as(torch.float64)),
    "u32->i32-bitcast": ("uint32", "int32", True, lambda g, n: ints(g, n, torch.uint32), _wrap_to(torch.int32)),
    "f32->i1": ("float32", "bool", False, lambda g, n: _with_specials(torch.where(torch.rand(n, generator=g) < 0.3, 0.0, randn(g, n).double()).float(), [float("nan"), -0.0, 0.0]), lambda x: x != 0),
    "i32->i1": ("int32", "bool", False, lambda g, n: torch.where(torch.rand(n, generator=g) < 0.3, 0, ints(g, n, torch.int32)), lambda x: x != 0),
    "i1->f32": ("bool", "float32", False, lambda g, n: torch.rand(n, generator=g) < 0.5, _torch_to(torch.float32)),
    "i1->i32": ("bool", "int32", False, lambda g, n: torch.rand(n, generator=g) < 0.5, _torch_to(torch.int32)),
}
N_CAST = 1000


def cast_spec(name) -> Spec:
    src, dst, bitcast, make_x, _ = CASTS[name]

    def make_args(gen):
        x = make_x(gen, N_CAST)
        assert x.dtype == DT[src], (name, x.dtype)
        return [x, poison(N_CAST, DT[dst]), N_CAST]

    return Spec(cast_kernel, (cdiv(N_CAST, 256),), make_args, (1,), dict(DST=TL[dst], BITCAST=bitcast, BLOCK=256))


@gpu
@pytest.mark.parametrize("name", list(CASTS))
def test_cast(name):
    """.to(dtype): float -> int truncation, int wrap-around, sign/zero extension, round-to-nearest-even
    narrowing (f16/bf16 included), bitcasts (every bit kept, NaN payloads too), casts to and from bool."""
    src, dst, bitcast, _, ref_fn = CASTS[name]
    both = run_spec(cast_spec(name))
    out, ref = both.gpu[0], ref_fn(both.args[0])
    if bitcast or (out.is_floating_point() and dst != "bool"):
        ref = ref.to(out.dtype)
        # compare bit patterns; after a bitcast every NaN payload must survive as well
        agree(out, ref, what=f"{name} against the reference")
        if bitcast:
            assert torch.equal(out.contiguous().view(torch.uint8), ref.contiguous().view(torch.uint8)), name
            assert torch.equal(both.cpu[0].contiguous().view(torch.uint8), out.contiguous().view(torch.uint8))
    else:
        check(out, ref, what=name)
    agree(out, both.cpu[0], what=name)


# ============================================================================================ math


@kl.jit
def math_kernel(X, Y, W, Z, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m)
    y = tl.load(Y + offs, mask=m)
    w = tl.load(W + offs, mask=m)
    if FN == "exp":
        z = tl.exp(x)
    elif FN == "exp2":
        z = tl.exp2(x)
    elif FN == "log":
        z = tl.log(x)
    elif FN == "log2":
        z = tl.log2(x)
    elif FN == "sqrt":
        z = tl.sqrt(x)
    elif FN == "rsqrt":
        z = tl.rsqrt(x)
    elif FN == "sin":
        z = tl.sin(x)
    elif FN == "cos":
        z = tl.cos(x)
    elif FN == "erf":
        z = tl.erf(x)
    elif FN == "floor":
        z = tl.floor(x)
    elif FN == "ceil":
        z = tl.ceil(x)
    elif FN == "abs":
        z = tl.abs(x)
    elif FN == "fma":
        z = tl.fma(x, y, w)
    elif FN == "sigmoid":
        z = tl.sigmoid(x)
    elif FN == "fdiv":
        z = tl.fdiv(x, y)
    elif FN == "fdiv_ieee":
        z = tl.fdiv(x, y, ieee_rounding=True)
    elif FN == "div_rn":
        z = tl.div_rn(x, y)
    elif FN == "sqrt_rn":
        z = tl.sqrt_rn(x)
    elif FN == "umulhi":
        z = tl.umulhi(x, y)
    elif FN == "method_exp":  # the tensor-method and tl.math spellings
        z = x.exp() + tl.math.log(y)
    else:
        z = x.sqrt()
    tl.store(Z + offs, z, mask=m)


def _math_inputs(fn, dtype):
    d = DT[dtype]
    def nonzero(g, n):
        return (signs(g, n) * uniform(g, 0.5, 4.0, n, dtype=torch.float64)).to(d)
    table = {
        "exp": lambda g, n: uniform(g, -10, 10, n, dtype=d), "exp2": lambda g, n: uniform(g, -20, 20, n, dtype=d),
        "log": lambda g, n: log_uniform(g, 1e-3, 1e4, n, dtype=d), "log2": lambda g, n: log_uniform(g, 1e-3, 1e4, n, dtype=d),
        "sqrt": lambda g, n: log_uniform(g, 1e-4, 1e6, n, dtype=d), "rsqrt": lambda g, n: log_uniform(g, 1e-4, 1e6, n, dtype=d),
        "sqrt_rn": lambda g, n: log_uniform(g, 1e-4, 1e6, n, dtype=d),
        "sin": lambda g, n: uniform(g, -10, 10, n, dtype=d), "cos": lambda g, n: uniform(g, -10, 10, n, dtype=d),
        "erf": lambda g, n: uniform(g, -3, 3, n, dtype=d),
        "floor": lambda g, n: _with_specials(uniform(g, -100, 100, n, dtype=d), [-0.5, 0.5, -1.0, 2.0]),
        "ceil": lambda g, n: _with_specials(uniform(g, -100, 100, n, dtype=d), [-0.5, 0.5, -1.0, 2.0]),
        "abs": lambda g, n: randn(g, n, dtype=d, scale=10), "fma": lambda g, n: randn(g, n, dtype=d, scale=3),
        "sigmoid": lambda g, n: uniform(g, -20, 20, n, dtype=d), "fdiv": lambda g, n: randn(g, n, dtype=d, scale=5),
        "div_rn": lambda g, n: randn(g, n, dtype=d, scale=5), "umulhi": lambda g, n: ints(g, n, d),
        "method_exp": lambda g, n: uniform(g, -5, 5, n, dtype=d), "method_sqrt": lambda g, n: log_uniform(g, 1e-3, 1e3, n, dtype=d),
    }
    y_table = {"fdiv": nonzero, "div_rn": nonzero, "umulhi": lambda g, n: ints(g, n, d),
               "method_exp": lambda g, n: log_uniform(g, 0.1, 10, n, dtype=d)}
    return table[fn], y_table.get(fn, lambda g, n: randn(g, n, dtype=d, scale=3))


def _erf(t):
    return torch.special.erf(t)


# fn: (float64 reference, (rtol, atol) for float32, exact: correctly rounded on both sides)
MATH = {
    "exp": (lambda x, y, w: torch.exp(x), (1e-5, 0), False),
    "exp2": (lambda x, y, w: torch.exp2(x), (1e-5, 0), False),
    "log": (lambda x, y, w: torch.log(x), (1e-6, 1e-6), False),
    "log2": (lambda x, y, w: torch.log2(x), (1e-6, 1e-6), False),
    "sqrt": (lambda x, y, w: torch.sqrt(x), (1e-6, 0), False),
    "rsqrt": (lambda x, y, w: torch.rsqrt(x), (1e-6, 0), False),
    "sin": (lambda x, y, w: torch.sin(x), (1e-5, 2e-6), False),
    "cos": (lambda x, y, w: torch.cos(x), (1e-5, 2e-6), False),
    "erf": (lambda x, y, w: _erf(x), (1e-6, 1e-6), False),
    "floor": (lambda x, y, w: torch.floor(x), (0, 0), True),
    "ceil": (lambda x, y, w: torch.ceil(x), (0, 0), True),
    "abs": (lambda x, y, w: torch.abs(x), (0, 0), True),
    "fma": (lambda x, y, w: x * y + w, (1e-6, 1e-6), False),
    "sigmoid": (lambda x, y, w: torch.sigmoid(x), (1e-6, 1e-7), False),
    "fdiv": (lambda x, y, w: x / y, (1e-6, 0), False),
    "div_rn": (lambda x, y, w: x / y, (0, 0), True),
    "sqrt_rn": (lambda x, y, w: torch.sqrt(x), (0, 0), True),
    "method_exp": (lambda x, y, w: torch.exp(x) + torch.log(y), (1e-5, 1e-6), False),
    "method_sqrt": (lambda x, y, w: torch.sqrt(x), (1e-6, 0), False),
}
N_MATH = 1000


def math_spec(fn, dtype="float32") -> Spec:
    d = DT[dtype]
    make_x, make_y = _math_inputs(fn, dtype)

    def make_args(gen):
        x, y = make_x(gen, N_MATH), make_y(gen, N_MATH)
        w = randn(gen, N_MATH, dtype=d, scale=3) if d.is_floating_point else ints(gen, N_MATH, d)
        return [x, y, w, poison(N_MATH, d), N_MATH]

    return Spec(math_kernel, (cdiv(N_MATH, 256),), make_args, (3,), dict(FN=fn, BLOCK=256))


@gpu
@pytest.mark.parametrize("fn", list(MATH))
def test_math_float32(fn):
    ref_fn, (rtol, atol), exact = MATH[fn]
    both = run_spec(math_spec(fn))
    x, y, w = (a.double() for a in both.args[:3])
    ref = ref_fn(x, y, w)
    if exact:  # correctly rounded (or exact) operations: the float64 result rounded once to float32
        agree(both.gpu[0], ref.float(), what=f"{fn} against the reference")
        agree(both.gpu[0], both.cpu[0], what=fn)
    else:
        check(both.gpu[0], ref, atol=atol, rtol=rtol, what=fn)
        agree(both.gpu[0], both.cpu[0], tol=max(rtol, atol, 1e-6), what=fn)


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("fn", ["exp", "log", "sqrt", "sin", "erf", "fma", "floor", "abs", "sigmoid"])
def test_math_other_float_dtypes(fn, dtype):
    """Math on float16 / bfloat16 (computed in float32, rounded once) and float64 (libdevice)."""
    ref_fn = MATH[fn][0]
    both = run_spec(math_spec(fn, dtype))
    x, y, w = (a.double() for a in both.args[:3])
    d = DT[dtype]
    ref = ref_fn(x, y, w)
    if fn in ("floor", "abs"):
        agree(both.gpu[0], ref.to(d), what=f"{fn} {dtype} against the reference")
    else:
        tol = {torch.float64: 1e-12}.get(d, EPS[d])
        check(both.gpu[0], ref, atol=tol, rtol=tol, what=f"{fn} {dtype}")
    agree(both.gpu[0], both.cpu[0], tol=0 if fn in ("floor", "abs") else EPS[d], what=f"{fn} {dtype}")


@gpu
def test_umulhi_uint32():
    both = run_spec(math_spec("umulhi", "uint32"))
    x, y = both.args[0].to(torch.int64).tolist(), both.args[1].to(torch.int64).tolist()
    ref = torch.tensor([(a * b) >> 32 for a, b in zip(x, y)], dtype=torch.int64)
    check(both.gpu[0], ref, what="umulhi")
    agree(both.gpu[0], both.cpu[0], what="umulhi")


@gpu
def test_abs_int32_wraps_at_int_min():
    def make_args(gen):
        x = ints(gen, N_MATH, torch.int32)
        x[0] = -2**31
        return [x, x.clone(), x.clone(), poison(N_MATH, torch.int32), N_MATH]

    both = run_both(math_kernel, (cdiv(N_MATH, 256),), make_args, (3,), FN="abs", BLOCK=256)
    check(both.gpu[0], wrap_tensor(both.args[0].to(torch.int64).abs(), torch.int32), what="abs int32")
    agree(both.gpu[0], both.cpu[0])


@kl.jit
def softmax_kernel(X, Y0, Y1, Y2, M: tl.constexpr, N: tl.constexpr):
    x = _load2(X, M, N)
    _store2(Y0, tl.softmax(x, dim=0))
    _store2(Y1, x.softmax(1))
    _store1(Y2, tl.softmax(tl.load(X + tl.arange(0, N))))  # 1-D: the first row


def softmax_spec(M, N, num_warps=4) -> Spec:
    return Spec(softmax_kernel, (1,), lambda g: [randn(g, M, N, scale=3), poison((M, N), torch.float32),
                                                 poison((M, N), torch.float32), poison(N, torch.float32)],
                (1, 2, 3), dict(M=M, N=N, num_warps=num_warps))


@gpu
@pytest.mark.parametrize("M,N,num_warps", [(8, 64, 4), (2, 16, 4), (32, 128, 8)])
def test_softmax(M, N, num_warps):
    both = run_spec(softmax_spec(M, N, num_warps))
    x = both.args[0].double()
    for out, ref in zip(both.gpu, [torch.softmax(x, 0), torch.softmax(x, 1), torch.softmax(x[0], 0)]):
        check(out, ref, atol=1e-6, rtol=1e-5, what="softmax")
    agree_all(both, tol=1e-6)


@kl.jit
def minmax_kernel(X, Y, MN, MX, CL, WH, n, lo, hi, PROP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m)
    y = tl.load(Y + offs, mask=m)
    tl.store(MN + offs, tl.minimum(x, y, propagate_nan=PROP), mask=m)
    tl.store(MX + offs, tl.maximum(x, y, propagate_nan=PROP), mask=m)
    tl.store(CL + offs, tl.clamp(x, lo, hi, propagate_nan=PROP), mask=m)
    tl.store(WH + offs, tl.where(x > y, x, y - x), mask=m)


def minmax_spec(dtype, prop) -> Spec:
    d = DT[dtype]
    n = 1000

    def make_args(gen):
        if d.is_floating_point:
            x, y = randn(gen, n, dtype=d, scale=10), randn(gen, n, dtype=d, scale=10)
            x[1::7] = float("nan")
            y[2::5] = float("nan")
            y[::11] = x[::11]
            lo, hi = -2.5, 3.5
        else:
            x, y = ints(gen, n, d), ints(gen, n, d)
            y[::11] = x[::11]
            lo, hi = (-2**30, 2**30) if d.is_signed else (2**30, 3 * 2**30)
        return [x, y] + [poison(n, d) for _ in range(4)] + [n, lo, hi]

    return Spec(minmax_kernel, (cdiv(n, 256),), make_args, (2, 3, 4, 5), dict(PROP=prop, BLOCK=256))


@gpu
@pytest.mark.parametrize("dtype,prop", [("float32", tl.PropagateNan.NONE), ("float32", tl.PropagateNan.ALL),
                                        ("float16", tl.PropagateNan.NONE), ("bfloat16", tl.PropagateNan.ALL),
                                        ("float64", tl.PropagateNan.NONE), ("int32", tl.PropagateNan.NONE),
                                        ("uint32", tl.PropagateNan.NONE), ("int8", tl.PropagateNan.NONE)])
def test_minimum_maximum_clamp_where(dtype, prop):
    """minimum/maximum: without propagate_nan a NaN loses to a number (fmin/fmax); with
    PropagateNan.ALL it wins. clamp is max-then-min with the same rule; where selects elementwise."""
    both = run_spec(minmax_spec(dtype, prop))
    x, y, *_, lo, hi = both.args
    d = DT[dtype]
    if d.is_floating_point:
        xd, yd = x.double(), y.double()
        fmin, fmax = (torch.minimum, torch.maximum) if prop else (torch.fmin, torch.fmax)
        lo_t, hi_t = torch.tensor(lo, dtype=torch.float64), torch.tensor(hi, dtype=torch.float64)
        refs = [fmin(xd, yd), fmax(xd, yd), fmin(fmax(xd, lo_t), hi_t), torch.where(xd > yd, xd, (y - x).double())]
    else:
        xd, yd = x.to(torch.int64), y.to(torch.int64)
        refs = [torch.minimum(xd, yd), torch.maximum(xd, yd), xd.clamp(lo, hi),
                torch.where(xd > yd, xd, wrap_tensor(yd - xd, d).to(torch.int64))]
    for k, (out, ref) in enumerate(zip(both.gpu, refs)):
        check(out, ref, what=f"{dtype} output {k}")
    agree_all(both)


# ============================================================================================ loads and stores


@kl.jit
def masked_load_kernel(X, Y, Z, W, n, OTHER: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m, other=OTHER)
    tl.store(Y + offs, x)                              # every lane: the masked-off ones hold `other`
    tl.store(Z + offs, x, mask=m & (offs % 3 != 0))   # an irregular store mask: every third element stays poisoned
    tl.store(W + offs, tl.load(X + offs, mask=m), mask=m)  # no `other`; masked store of the tail


# (n, BLOCK): one element per thread; and n a multiple of 16 with 2 and 8 contiguous elements per thread,
# so the mask is uniform over each thread's elements and the accesses are vectorized
MASKED_SIZES = [(1000, 128), (2000, 256), (4000, 1024)]


def masked_spec(dtype, n=1000, block=128) -> Spec:
    d = DT[dtype]
    other = -7.5 if d.is_floating_point else (-7 if d.is_signed else 201)
    grid = cdiv(n, block)

    def make_args(gen):
        x = randn(gen, n, dtype=d, scale=10) if d.is_floating_point else ints(gen, n, d)
        return [x, poison(grid * block, d), poison(n, d), poison(n, d), n]

    return Spec(masked_load_kernel, (grid,), make_args, (1, 2, 3), dict(OTHER=other, BLOCK=block))


@gpu
@pytest.mark.parametrize("n,block", MASKED_SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int8", "int16", "int64", "uint8"])
def test_masked_load_other_and_masked_store(dtype, n, block):
    spec = masked_spec(dtype, n, block)
    both = run_spec(spec)
    x, other = both.args[0], spec.consts["OTHER"]
    y_ref = torch.cat([x, torch.full((both.gpu[0].numel() - x.numel(),), other, dtype=x.dtype)])
    z_ref = poison(x.numel(), x.dtype)
    keep = torch.arange(x.numel()) % 3 != 0
    z_ref[keep] = x[keep]
    check(both.gpu[0], y_ref, what="load with other")
    check(both.gpu[1], z_ref, what="masked store")
    check(both.gpu[2], x, what="masked load and store of the tail")
    agree_all(both)


@kl.jit
def scalar_mem_kernel(X, Y, Z, n):
    pid = tl.program_id(0)
    v = tl.load(X + pid)
    w = tl.load(X + pid + 1, mask=pid + 1 < n, other=-100.0)
    tl.store(Y + pid, v * 2.0 + w)
    tl.store(Z + pid, pid * 3 + 1)
    if pid == 0:
        tl.store(Z + n, n)  # a scalar store under a runtime branch


def scalar_mem_spec(n=77) -> Spec:
    return Spec(scalar_mem_kernel, (n,), lambda g: [randn(g, n), poison(n, torch.float32), poison(n + 1, torch.int32), n],
                (1, 2), {})


@gpu
def test_scalar_pointer_loads_and_stores():
    n = 77
    both = run_spec(scalar_mem_spec(n))
    x = both.args[0].double()
    nxt = torch.cat([x[1:], torch.tensor([-100.0], dtype=torch.float64)])
    check(both.gpu[0], x * 2 + nxt, atol=1e-6, what="scalar loads")
    check(both.gpu[1], torch.cat([torch.arange(n) * 3 + 1, torch.tensor([n])]), what="scalar stores")
    agree_all(both)


@kl.jit
def strided_kernel(X, sxm, sxn, Y, sym, syn, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    m = (rm[:, None] < M) & (rn[None, :] < N)  # a (BM, 1) mask and a (1, BN) mask broadcast together
    x = tl.load(X + rm[:, None] * sxm + rn[None, :] * sxn, mask=m, other=0.0)
    tl.store(Y + rm[:, None] * sym + rn[None, :] * syn, x * 2.0 + 1.0, mask=m)


def strided_spec(layout, M=37, N=53, BM=16, BN=32) -> Spec:
    def make_args(gen):
        if layout == "sliced":  # a view with a storage offset and a column stride of 3
            x = randn(gen, M + 3, 3 * N)[3:, 1::3]
        else:  # a transposed view: column-major
            x = randn(gen, N, M).t()
        y = poison((2 * M + 1, 2 * N + 3), torch.float32)[1::2, 1:-2:2]
        assert x.shape == (M, N) and y.shape == (M, N) and not x.is_contiguous() and not y.is_contiguous()
        return [x, x.stride(0), x.stride(1), y, y.stride(0), y.stride(1), M, N]

    return Spec(strided_kernel, (cdiv(M, BM), cdiv(N, BN)), make_args, (3,), dict(BM=BM, BN=BN))


@gpu
@pytest.mark.parametrize("layout", ["sliced", "transposed"])
def test_strided_views(layout):
    """Non-contiguous tensors in and out: only the view's elements are read and written; the rest of the
    output's storage stays poisoned."""
    both = run_spec(strided_spec(layout))
    check(both.gpu[0], both.args[0] * 2 + 1, what="strided")  # float32: x * 2 is exact, + 1 rounds once
    assert torch.isnan(outside_view(both.gpu[0])).all(), "the kernel wrote outside the output view"
    agree(both.gpu[0], both.cpu[0])
    agree(whole_storage(both.gpu[0]), whole_storage(both.cpu[0]))


@kl.jit
def bool_kernel(A, B, X, C, D, E, F, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(A + offs, mask=m, other=False)
    b = tl.load(B + offs, mask=m, other=True)
    x = tl.load(X + offs, mask=m)
    tl.store(C + offs, (a ^ b) | (a & ~b), mask=m)  # an int1 result stored to a torch.bool tensor
    tl.store(D + offs, tl.where(a, x, -x), mask=m)
    tl.store(E + offs, x, mask=m & b)               # a loaded bool as a store mask
    tl.store(F + offs, (x > 0) != a, mask=m)


def bool_spec(n=1000, block=128) -> Spec:
    def make_args(gen):
        a, b = torch.rand(n, generator=gen) < 0.5, torch.rand(n, generator=gen) < 0.5
        return [a, b, randn(gen, n), poison(n, torch.bool), poison(n, torch.float32), poison(n, torch.float32),
                poison(n, torch.bool), n]

    return Spec(bool_kernel, (cdiv(n, block),), make_args, (3, 4, 5, 6), dict(BLOCK=block))


@gpu
@pytest.mark.parametrize("n,block", MASKED_SIZES)
def test_bool_tensors(n, block):
    both = run_spec(bool_spec(n, block))
    a, b, x = both.args[:3]
    e_ref = torch.where(b, x, torch.full_like(x, float("nan")))
    refs = [(a ^ b) | (a & ~b), torch.where(a, x, -x), e_ref, (x > 0) != a]
    for k, (out, ref) in enumerate(zip(both.gpu, refs)):
        check(out, ref, what=f"bool output {k}")
    agree_all(both)


@kl.jit
def int64_offsets_kernel(X, IDX, Y, Z, big, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    idx = tl.load(IDX + offs, mask=m, other=0)  # int64 offsets
    p = X + big                                  # an int64 offset far past the end (never dereferenced) ...
    p = p - big                                  # ... and back
    v = tl.load(p + idx, mask=m)                 # gather
    tl.store(Y + offs.to(tl.int64) * 2, v, mask=m)
    tl.store(Z + idx, offs, mask=m)              # scatter


def int64_offsets_spec(n=1000) -> Spec:
    def make_args(gen):
        return [randn(gen, n), torch.randperm(n, generator=gen), poison(2 * n, torch.float32),
                poison(n, torch.int32), 2**33 + 12345, n]

    return Spec(int64_offsets_kernel, (cdiv(n, 256),), make_args, (2, 3), dict(BLOCK=256))


@gpu
def test_int64_pointer_offsets_gather_scatter():
    both = run_spec(int64_offsets_spec())
    x, idx = both.args[0], both.args[1]
    y_ref = poison(2 * x.numel(), torch.float32)
    y_ref[::2] = x[idx]
    z_ref = torch.empty(x.numel(), dtype=torch.int64)
    z_ref[idx] = torch.arange(x.numel())
    check(both.gpu[0], y_ref, what="gather")
    check(both.gpu[1], z_ref, what="scatter")
    agree_all(both)


@kl.jit
def block_ptr_kernel(X, Y, Z, M, N, sxm, sxn, szm, szn, YN: tl.constexpr, YM: tl.constexpr, BM: tl.constexpr,
                     BN: tl.constexpr, PAD: tl.constexpr, ORDER: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    xb = tl.make_block_ptr(X, shape=(M, N), strides=(sxm, sxn), offsets=(pm * BM, 0), block_shape=(BM, BN),
                           order=ORDER)
    xb = tl.advance(xb, (0, pn * BN))
    t = tl.load(xb, boundary_check=(0, 1), padding_option=PAD)
    # every element of every tile, the padding included, into Y (a whole number of tiles)
    yb = tl.make_block_ptr(Y, shape=(YM, YN), strides=(YN, 1), offsets=(pm * BM, pn * BN), block_shape=(BM, BN),
                           order=(1, 0))
    tl.store(yb, t)
    # a clipped store into Z (an (M, N) view inside a larger, poisoned storage)
    zb = tl.make_block_ptr(Z, shape=(M, N), strides=(szm, szn), offsets=(pm * BM, pn * BN), block_shape=(BM, BN),
                           order=(1, 0))
    tl.store(zb, t * 2.0 + 1.0, boundary_check=(0, 1))


def block_ptr_spec(pad, order, M=45, N=70, BM=16, BN=32) -> Spec:
    gm, gn = cdiv(M, BM), cdiv(N, BN)

    def make_args(gen):
        x = randn(gen, M, N + 5)[:, 2:N + 2] if order == (1, 0) else randn(gen, N, M).t()
        y = poison((gm * BM, gn * BN), torch.float32, value=12345.0)
        z = poison((M + 3, N + 7), torch.float32)[1:M + 1, 2:N + 2]
        return [x, y, z, M, N, x.stride(0), x.stride(1), z.stride(0), z.stride(1)]

    return Spec(block_ptr_kernel, (gm, gn), make_args, (1, 2),
                dict(YN=gn * BN, YM=gm * BM, BM=BM, BN=BN, PAD=pad, ORDER=order))


@gpu
@pytest.mark.parametrize("order", [(1, 0), (0, 1)])
@pytest.mark.parametrize("pad", ["zero", "nan"])
def test_block_pointers(pad, order):
    spec = block_ptr_spec(pad, order)
    both = run_spec(spec)
    x = both.args[0]
    y_ref = torch.full(both.gpu[0].shape, 0.0 if pad == "zero" else float("nan"), dtype=torch.float64)
    y_ref[:x.shape[0], :x.shape[1]] = x.double()
    check(both.gpu[0], y_ref, what="block-pointer load with padding")
    check(both.gpu[1], x * 2 + 1, what="block-pointer store")
    assert torch.isnan(outside_view(both.gpu[1])).all(), "a boundary-checked store wrote outside the tensor"
    agree_all(both)
    agree(whole_storage(both.gpu[1]), whole_storage(both.cpu[1]))


@kl.jit
def block_ptr_rowsum_kernel(X, S, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
    pm = tl.program_id(0)
    b = tl.make_block_ptr(X, (M, N), (sxm, sxn), (pm * BM, 0), (BM, BN), (1, 0))
    acc = tl.zeros((BM,), dtype=tl.float32)
    for _ in range(0, N, BN):
        acc += tl.sum(tl.load(b, boundary_check=(0, 1), padding_option="zero"), axis=1)
        b = tl.advance(b, (0, BN))
    sb = tl.make_block_ptr(S, (M,), (1,), (pm * BM,), (BM,), (0,))
    tl.store(sb, acc, boundary_check=(0,))


def block_ptr_rowsum_spec(M=50, N=300, BM=16, BN=64) -> Spec:
    def make_args(gen):
        x = randn(gen, M, N)
        return [x, poison(M, torch.float32), M, N, x.stride(0), x.stride(1)]

    return Spec(block_ptr_rowsum_kernel, (cdiv(M, BM),), make_args, (1,), dict(BM=BM, BN=BN))


@gpu
def test_block_pointer_advance_in_a_loop():
    both = run_spec(block_ptr_rowsum_spec())
    check(both.gpu[0], both.args[0].double().sum(1), atol=1e-4, rtol=1e-5, what="row sums")
    agree_all(both, tol=1e-5)


# ============================================================================================ shapes


@kl.jit
def shapes_kernel(X, V, O_BC, O_OUTER, O_RESHAPE, O_VIEW, O_TRANS, O_PERM, O_JOIN, O_SPLIT, O_CAT, O_RAVEL,
                  M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(X + rm[:, None] * N + rn[None, :])  # (M, N)
    v = tl.load(V + rn)                              # (N,)
    col = tl.load(X + rm * N)                        # (M,): x[:, 0]
    _store2(O_BC, tl.broadcast_to(tl.expand_dims(v, 0), (M, N)) - x)
    _store2(O_OUTER, col[:, None] - v[None, :])
    _store2(O_RESHAPE, tl.reshape(x, (N, M)))
    _store2(O_VIEW, x.view(2 * M, N // 2))
    _store2(O_TRANS, tl.trans(x))
    _store3(O_PERM, tl.permute(tl.reshape(x, (M, N // 4, 4)), (2, 0, 1)))
    _store3(O_JOIN, tl.join(x, -x))
    a, b = tl.split(tl.reshape(x, (M, N // 2, 2)))
    _store2(O_SPLIT, a)
    _store2(O_SPLIT + M * (N // 2), b)
    _store2(O_CAT, tl.cat(x, x.T.T - col[:, None]))
    _store1(O_RAVEL, tl.ravel(tl.trans(x)))


def shapes_spec(M, N, dtype, num_warps) -> Spec:
    d = DT[dtype]
    shapes = [(M, N), (M, N), (N, M), (2 * M, N // 2), (N, M), (4, M, N // 4), (M, N, 2), (2, M, N // 2),
              (2 * M, N), (M * N,)]

    def make_args(gen):
        x = randn(gen, M, N, scale=10).to(d) if d.is_floating_point else ints(gen, (M, N), d, -1000, 1000)
        v = randn(gen, N, scale=10).to(d) if d.is_floating_point else ints(gen, N, d, -1000, 1000)
        return [x, v] + [poison(s, d) for s in shapes]

    return Spec(shapes_kernel, (1,), make_args, tuple(range(2, 12)), dict(M=M, N=N, num_warps=num_warps))


@gpu
@pytest.mark.parametrize("dtype", ["float32", "int16"])
@pytest.mark.parametrize("M,N,num_warps", [(8, 16, 4), (2, 8, 4), (4, 64, 2), (32, 32, 8)])
def test_shape_ops(M, N, num_warps, dtype):
    """expand_dims, broadcast_to, x[:, None], reshape, view, trans (and .T), permute, join, split, cat, ravel."""
    both = run_spec(shapes_spec(M, N, dtype, num_warps))
    x, v = both.args[0], both.args[1]
    col = x[:, 0]
    refs = [v[None, :].expand(M, N) - x, col[:, None] - v[None, :], x.reshape(N, M), x.reshape(2 * M, N // 2), x.t(),
            x.reshape(M, N // 4, 4).permute(2, 0, 1), torch.stack([x, -x], -1),
            torch.stack([x.reshape(M, N // 2, 2)[..., 0], x.reshape(M, N // 2, 2)[..., 1]]),
            torch.cat([x, x - col[:, None]]), x.t().reshape(-1)]
    names = ["broadcast_to", "x[:, None]", "reshape", "view", "trans", "permute", "join", "split", "cat", "ravel"]
    for out, ref, name in zip(both.gpu, refs, names):
        check(out, ref.contiguous(), what=name)
    agree_all(both)


# ============================================================================================ reductions


@kl.jit
def reduce2d_kernel(X, S0, S1, SA, MX0, MX1, MN0, MN1, MXA, MNA, KD, XR, M: tl.constexpr, N: tl.constexpr,
                    IS_INT: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(X + rm[:, None] * N + rn[None, :])
    tl.store(S0 + rn, tl.sum(x, axis=0))
    tl.store(S1 + rm, tl.sum(x, axis=1))
    tl.store(SA, tl.sum(x))
    tl.store(MX0 + rn, tl.max(x, axis=0))
    tl.store(MX1 + rm, tl.max(x, axis=1))
    tl.store(MN0 + rn, tl.min(x, 0))
    tl.store(MN1 + rm, x.min(1))
    tl.store(MXA, tl.max(x))
    tl.store(MNA, tl.min(x, axis=None))
    _store2(KD, tl.max(x, axis=0, keep_dims=True) - x + tl.sum(x, axis=1, keep_dims=True))
    if IS_INT:
        tl.store(XR + rm, tl.xor_sum(x, axis=1))


# (M, N, num_warps): tiny tiles (fewer elements than threads: replicated), odd aspect ratios, large tiles
REDUCE_SHAPES = [(2, 8, 4), (1, 16, 4), (16, 1, 4), (16, 16, 4), (8, 128, 2), (128, 16, 4), (64, 256, 8), (32, 32, 1)]


def reduce2d_spec(M, N, num_warps, dtype) -> Spec:
    d = DT[dtype]
    is_int = not d.is_floating_point
    outs = [(N,), (M,), (), (N,), (M,), (N,), (M,), (), (), (M, N), (M,)]

    def make_args(gen):
        x = ints(gen, (M, N), d) if is_int else randn(gen, M, N, dtype=d)
        return [x] + [poison(s, d) for s in outs]

    return Spec(reduce2d_kernel, (1,), make_args, tuple(range(1, 12 if is_int else 11)),
                dict(M=M, N=N, IS_INT=is_int, num_warps=num_warps))


@gpu
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("M,N,num_warps", REDUCE_SHAPES)
def test_reductions_2d(M, N, num_warps, dtype):
    """sum / max / min over axis 0, 1 and None, keep_dims, xor_sum; int32 sums wrap around exactly."""
    both = run_spec(reduce2d_spec(M, N, num_warps, dtype))
    x = both.args[0]
    if dtype == "int32":
        xi = x.to(torch.int64)
        w = lambda t: wrap_tensor(t, torch.int32)
        xor1 = torch.tensor([np.bitwise_xor.reduce(r) for r in x.numpy()], dtype=torch.int64)
        refs = [w(xi.sum(0)), w(xi.sum(1)), w(xi.sum()), xi.amax(0), xi.amax(1), xi.amin(0), xi.amin(1), xi.max(),
                xi.min(), w(xi.amax(0, keepdim=True) - xi + xi.sum(1, keepdim=True)), xor1]
        for k, (out, ref) in enumerate(zip(both.gpu, refs)):
            check(out, ref, what=f"int32 reduction {k}")
        agree_all(both)
    else:
        xd = x.double()
        tol = 1e-5 * max(1.0, math.sqrt(M * N))
        refs = [xd.sum(0), xd.sum(1), xd.sum(), xd.amax(0), xd.amax(1), xd.amin(0), xd.amin(1), xd.max(), xd.min(),
                xd.amax(0, keepdim=True) - xd + xd.sum(1, keepdim=True)]
        for k, (out, ref) in enumerate(zip(both.gpu, refs)):
            exact = k in (3, 4, 5, 6, 7, 8)  # max and min are exact
            check(out, ref, atol=0 if exact else tol, rtol=0 if exact else 1e-5, what=f"float reduction {k}")
            agree(out, both.cpu[k], tol=0 if exact else tol, what=f"float reduction {k}")


@kl.jit
def reduce1d_kernel(X, V, I, N: tl.constexpr, IS_INT: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    tl.store(V + 0, tl.sum(x, axis=0))
    tl.store(V + 1, tl.max(x, axis=0))
    tl.store(V + 2, tl.min(x))
    s = tl.sum(x, axis=0, keep_dims=True)  # shape (1,)
    tl.store(V + 3 + tl.arange(0, 1), s)
    if IS_INT:
        tl.store(V + 4, tl.xor_sum(x, axis=0))
    tl.store(I + 0, tl.argmax(x, axis=0))
    tl.store(I + 1, tl.argmin(x, axis=0))


def reduce1d_spec(N, num_warps, dtype) -> Spec:
    d = DT[dtype]
    is_int = not d.is_floating_point
    acc = torch.int32 if is_int else torch.float32

    def make_args(gen):
        x = ints(gen, N, d) if is_int else randn(gen, N, dtype=d)
        return [x, poison(5, acc), poison(2, torch.int32)]

    return Spec(reduce1d_kernel, (1,), make_args, (1, 2), dict(N=N, IS_INT=is_int, num_warps=num_warps))


@gpu
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
@pytest.mark.parametrize("N,num_warps", [(16, 4), (32, 1), (2, 4), (128, 2), (1024, 8), (4096, 4), (4096, 16),
                                         (8192, 32), (64, 16), (512, 16)])
def test_reductions_1d(N, num_warps, dtype):
    """1-D tiles, from 2 elements on 128 threads (each element held by many threads) to 8192; 8 warps and more
    combine their partials by a butterfly over lanes, fewer by one load each."""
    both = run_spec(reduce1d_spec(N, num_warps, dtype))
    x = both.args[0]
    xn = x.numpy()
    if dtype == "float32":
        s = x.double().sum()
        ref = torch.tensor([s, x.max(), x.min(), s, float("nan")], dtype=torch.float64)
        check(both.gpu[0], ref, atol=1e-5 * math.sqrt(N), rtol=1e-5, what="1-D float reductions")
        agree(both.gpu[0], both.cpu[0], tol=1e-5 * math.sqrt(N))
    else:
        s = wrap(int(x.to(torch.int64).sum()), 32, True)  # int8 sums accumulate in int32
        ref = torch.tensor([s, int(x.max()), int(x.min()), s, int(np.bitwise_xor.reduce(xn))], dtype=torch.int64)
        check(both.gpu[0], ref, what="1-D int reductions")
        agree(both.gpu[0], both.cpu[0])
    check(both.gpu[1], torch.tensor([np.argmax(xn), np.argmin(xn)]), what="argmax/argmin")
    agree(both.gpu[1], both.cpu[1])


@kl.jit
def arg_kernel(X, AMX0, AMX1, AMN0, AMN1, VMX1, IMX1, M: tl.constexpr, N: tl.constexpr):
    x = _load2(X, M, N)
    tl.store(AMX0 + tl.arange(0, N), tl.argmax(x, axis=0))
    tl.store(AMX1 + tl.arange(0, M), tl.argmax(x, axis=1))
    tl.store(AMN0 + tl.arange(0, N), tl.argmin(x, 0))
    tl.store(AMN1 + tl.arange(0, M), x.argmin(1))
    v, i = tl.max(x, axis=1, return_indices=True)
    tl.store(VMX1 + tl.arange(0, M), v)
    tl.store(IMX1 + tl.arange(0, M), i)


def arg_spec(M, N, num_warps, dtype) -> Spec:
    d = DT[dtype]

    def make_args(gen):
        x = ints(gen, (M, N), torch.int32, 0, 5).to(d)  # a handful of values: ties everywhere
        if d.is_floating_point and M >= 8 and N >= 8:
            x[1, 3] = float("nan")  # at most one NaN per row and column: a NaN wins, like torch / NumPy
            x[5, 7] = float("nan")
        return [x, poison(N, torch.int32), poison(M, torch.int32), poison(N, torch.int32), poison(M, torch.int32),
                poison(M, d), poison(M, torch.int32)]

    return Spec(arg_kernel, (1,), make_args, (1, 2, 3, 4, 5, 6), dict(M=M, N=N, num_warps=num_warps))


@gpu
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("M,N,num_warps", [(16, 16, 4), (2, 8, 4), (64, 128, 8), (8, 256, 2)])
def test_argmax_argmin_tie_break_lowest_index(M, N, num_warps, dtype):
    both = run_spec(arg_spec(M, N, num_warps, dtype))
    xn = both.args[0].numpy()
    refs = [np.argmax(xn, 0), np.argmax(xn, 1), np.argmin(xn, 0), np.argmin(xn, 1), np.max(xn, 1), np.argmax(xn, 1)]
    for k, (out, ref) in enumerate(zip(both.gpu, refs)):
        check(out, torch.from_numpy(np.asarray(ref)), what=f"arg reduction {k}")
    agree_all(both)


@kl.jit
def _mul_combine(a, b):
    return a * b


@kl.jit
def _sum_and_max_combine(a0, a1, b0, b1):
    return a0 + b0, tl.maximum(a1, b1)


@kl.jit
def custom_reduce_kernel(X, Y, P, S, MX, M: tl.constexpr, N: tl.constexpr):
    x = _load2(X, M, N)
    y = _load2(Y, M, N)
    tl.store(P + tl.arange(0, M), tl.reduce(x, 1, _mul_combine))
    s, mx = tl.reduce((x, y), axis=1, combine_fn=_sum_and_max_combine)
    tl.store(S + tl.arange(0, M), s)
    tl.store(MX + tl.arange(0, M), mx)


def custom_reduce_spec(M, N, num_warps) -> Spec:
    def make_args(gen):
        return [ints(gen, (M, N), torch.int32) | 1, ints(gen, (M, N), torch.int32), poison(M, torch.int32),
                poison(M, torch.int32), poison(M, torch.int32)]

    return Spec(custom_reduce_kernel, (1,), make_args, (2, 3, 4), dict(M=M, N=N, num_warps=num_warps))


@gpu
@pytest.mark.parametrize("M,N,num_warps", [(4, 16, 4), (32, 64, 4), (2, 256, 8)])
def test_reduce_with_jit_combine_fn(M, N, num_warps):
    """tl.reduce with @jit combine functions: a wrapping product, and a two-operand (sum, max) reduction."""
    both = run_spec(custom_reduce_spec(M, N, num_warps))
    x, y = both.args[0], both.args[1]
    prod = (x.numpy().astype(np.uint64).prod(axis=1) & 0xFFFFFFFF).astype(np.int64)
    check(both.gpu[0], wrap_tensor(torch.from_numpy(prod), torch.int32), what="product")
    check(both.gpu[1], wrap_tensor(x.to(torch.int64).sum(1), torch.int32), what="sum")
    check(both.gpu[2], y.amax(1), what="max")
    agree_all(both)


# ============================================================================================ scans


@kl.jit
def scan_kernel(X, CS, CSR, CP, CPR, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr):
    x = _load2(X, M, N)
    _store2(CS, tl.cumsum(x, axis=AXIS))
    _store2(CSR, tl.cumsum(x, axis=AXIS, reverse=True))
    _store2(CP, tl.cumprod(x, AXIS))
    _store2(CPR, x.cumprod(AXIS, reverse=True))


@kl.jit
def scan1d_kernel(X, CS, CSR, CP, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    _store1(CS, tl.cumsum(x, 0))
    _store1(CSR, tl.cumsum(x, 0, reverse=True))
    _store1(CP, tl.cumprod(x, 0))


def _scan_values(gen, shape, d):
    if d.is_floating_point:  # products of values near 1 stay finite
        return uniform(gen, 0.9, 1.1, *shape) * signs(gen, *shape).float()
    return ints(gen, shape, d) | 1  # odd: wrapping products stay nonzero


def scan_spec(M, N, axis, num_warps, dtype) -> Spec:
    d = DT[dtype]
    return Spec(scan_kernel, (1,), lambda g: [_scan_values(g, (M, N), d)] + [poison((M, N), d) for _ in range(4)],
                (1, 2, 3, 4), dict(M=M, N=N, AXIS=axis, num_warps=num_warps))


def scan1d_spec(N, num_warps, dtype) -> Spec:
    d = DT[dtype]
    return Spec(scan1d_kernel, (1,), lambda g: [_scan_values(g, (N,), d)] + [poison(N, d) for _ in range(3)],
                (1, 2, 3), dict(N=N, num_warps=num_warps))


def _ref_cumprod(x: torch.Tensor, axis: int, reverse=False) -> torch.Tensor:
    if reverse:
        return _ref_cumprod(x.flip(axis), axis).flip(axis)
    if x.is_floating_point():
        return torch.cumprod(x.double(), axis)
    p = np.cumprod(x.numpy().astype(np.uint64), axis=axis) & np.uint64(0xFFFFFFFF)  # exact modulo 2^64
    return wrap_tensor(torch.from_numpy(p.astype(np.int64)), torch.int32)


def _ref_cumsum(x: torch.Tensor, axis: int, reverse=False) -> torch.Tensor:
    if reverse:
        return _ref_cumsum(x.flip(axis), axis).flip(axis)
    if x.is_floating_point():
        return torch.cumsum(x.double(), axis)
    return wrap_tensor(torch.cumsum(x.to(torch.int64), axis), torch.int32)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("M,N,axis,num_warps", [(8, 64, 1, 4), (8, 64, 0, 4), (2, 8, 1, 4), (64, 256, 1, 8),
                                               (128, 16, 0, 4), (16, 16, 0, 1), (256, 16, 0, 8), (64, 32, 0, 2)])
@pytest.mark.parametrize("lean", ["0", "1"])  # KERNELLAB_SCAN_LEAN: the lowering both ways
def test_cumsum_cumprod_2d(M, N, axis, num_warps, dtype, lean, monkeypatch):
    monkeypatch.setenv("KERNELLAB_SCAN_LEAN", lean)
    both = run_spec(scan_spec(M, N, axis, num_warps, dtype))
    x = both.args[0]
    refs = [_ref_cumsum(x, axis), _ref_cumsum(x, axis, True), _ref_cumprod(x, axis), _ref_cumprod(x, axis, True)]
    length = N if axis == 1 else M
    atol, rtol = (1e-6 * length, 2e-7 * length + 1e-6) if dtype == "float32" else (0, 0)
    for k, (out, ref) in enumerate(zip(both.gpu, refs)):
        check(out, ref, atol=atol, rtol=rtol, what=f"scan {k}")
        agree(out, both.cpu[k], tol=max(atol, rtol), what=f"scan {k}")


@gpu
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("N,num_warps", [(16, 4), (2, 1), (1024, 4), (4096, 8), (256, 8), (128, 4)])
@pytest.mark.parametrize("lean", ["0", "1"])  # KERNELLAB_SCAN_LEAN: the lowering both ways
def test_cumsum_cumprod_1d(N, num_warps, dtype, lean, monkeypatch):
    monkeypatch.setenv("KERNELLAB_SCAN_LEAN", lean)
    both = run_spec(scan1d_spec(N, num_warps, dtype))
    x = both.args[0]
    refs = [_ref_cumsum(x, 0), _ref_cumsum(x, 0, True), _ref_cumprod(x, 0)]
    atol, rtol = (1e-6 * N, 2e-7 * N + 1e-6) if dtype == "float32" else (0, 0)
    for k, (out, ref) in enumerate(zip(both.gpu, refs)):
        check(out, ref, atol=atol, rtol=rtol, what=f"scan {k}")
        agree(out, both.cpu[k], tol=max(atol, rtol), what=f"scan {k}")


@kl.jit
def _affine_combine(a1, b1, a2, b2):
    """Composition of h -> a1*h + b1 then h -> a2*h + b2: associative, not commutative."""
    return a1 * a2, b1 * a2 + b2


@kl.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@kl.jit
def custom_scan_kernel(A, B, HA, HB, RMAX, N: tl.constexpr):
    a = tl.load(A + tl.arange(0, N))
    b = tl.load(B + tl.arange(0, N))
    ha, hb = tl.associative_scan((a, b), 0, _affine_combine)
    _store1(HA, ha)
    _store1(HB, hb)  # h_t = a_t * h_{t-1} + b_t, h_{-1} = 0, modulo 2^32
    _store1(RMAX, tl.associative_scan(b, 0, _max_combine, reverse=True))


def custom_scan_spec(N, num_warps) -> Spec:
    return Spec(custom_scan_kernel, (1,), lambda g: [ints(g, N, torch.int32), ints(g, N, torch.int32)]
                + [poison(N, torch.int32) for _ in range(3)], (2, 3, 4), dict(N=N, num_warps=num_warps))


@gpu
@pytest.mark.parametrize("N,num_warps", [(16, 4), (256, 2), (1024, 8), (128, 4), (64, 2)])
@pytest.mark.parametrize("lean", ["0", "1"])  # KERNELLAB_SCAN_LEAN: the lowering both ways
def test_associative_scan_custom_combine(N, num_warps, lean, monkeypatch):
    monkeypatch.setenv("KERNELLAB_SCAN_LEAN", lean)
    both = run_spec(custom_scan_spec(N, num_warps))
    a, b = both.args[0].tolist(), both.args[1].tolist()
    pa, h, ha, hb = 1, 0, [], []
    for at, bt in zip(a, b):
        pa, h = wrap(pa * at, 32, True), wrap(h * at + bt, 32, True)
        ha.append(pa)
        hb.append(h)
    check(both.gpu[0], torch.tensor(ha), what="product component")
    check(both.gpu[1], torch.tensor(hb), what="linear recurrence")
    check(both.gpu[2], torch.from_numpy(np.maximum.accumulate(np.array(b)[::-1])[::-1].copy()), what="reverse max")
    agree_all(both)


# ============================================================================================ dot


@kl.jit
def dot_kernel(A, B, C, D, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, USE_ACC: tl.constexpr,
               PREC: tl.constexpr):
    a = _load2(A, M, K)
    b = _load2(B, K, N)
    if USE_ACC:
        d = tl.dot(a, b, acc=_load2(C, M, N), input_precision=PREC)
    else:
        d = tl.dot(a, b, input_precision=PREC)
    _store2(D, d)


DOT_TYPES = {"float16": (torch.float16, None), "bfloat16": (torch.bfloat16, None), "float32-ieee": (torch.float32, "ieee"),
             "float32-tf32": (torch.float32, None), "int8": (torch.int8, None)}
DOT_SHAPES = [(16, 16, 16, 4), (32, 32, 16, 4), (64, 64, 32, 4), (16, 64, 32, 2), (64, 32, 16, 1), (64, 64, 32, 8)]


def dot_spec(kind, M, N, K, num_warps, use_acc) -> Spec:
    d, prec = DOT_TYPES[kind]
    if kind == "int8":
        K = max(K, 32)  # 8-bit dots need K >= 32, as in Triton
    acc = torch.int32 if d == torch.int8 else torch.float32

    def make_args(gen):
        if d == torch.int8:
            a, b = ints(gen, (M, K), d), ints(gen, (K, N), d)
            c = ints(gen, (M, N), acc, -2**20, 2**20)
        else:
            a, b, c = randn(gen, M, K, dtype=d), randn(gen, K, N, dtype=d), randn(gen, M, N)
        return [a, b, c, poison((M, N), acc)]

    return Spec(dot_kernel, (1,), make_args, (3,), dict(M=M, N=N, K=K, USE_ACC=use_acc, PREC=prec, num_warps=num_warps))


@gpu
@pytest.mark.parametrize("use_acc", [False, True])
@pytest.mark.parametrize("M,N,K,num_warps", DOT_SHAPES)
@pytest.mark.parametrize("kind", list(DOT_TYPES))
def test_dot(kind, M, N, K, num_warps, use_acc):
    both = run_spec(dot_spec(kind, M, N, K, num_warps, use_acc))
    a, b, c = both.args[:3]
    if kind == "int8":
        ref = a.to(torch.int64) @ b.to(torch.int64) + (c.to(torch.int64) if use_acc else 0)
        check(both.gpu[0], ref, what="int8 dot (int32 accumulation)")
        agree_all(both)
        return
    ref = a.double() @ b.double() + (c.double() if use_acc else 0)
    # tf32 (the default for float32) rounds the inputs to 10-bit mantissas; the interpreter does not
    tol = 2e-2 if kind == "float32-tf32" else 1e-4
    check(both.gpu[0], ref, atol=tol, rtol=tol, what=f"{kind} dot")
    agree_all(both, tol=tol)


# ============================================================================================ atomics


@kl.jit
def atomic_kernel(P, IDX, V, MASK, OLD, n, KIND: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inb = offs < n
    m = inb & (tl.load(MASK + offs, mask=inb, other=0) != 0)
    idx = tl.load(IDX + offs, mask=inb, other=0)
    v = tl.load(V + offs, mask=inb)
    if KIND == "add":
        old = tl.atomic_add(P + idx, v, mask=m)
    elif KIND == "max":
        old = tl.atomic_max(P + idx, v, mask=m)
    elif KIND == "min":
        old = tl.atomic_min(P + idx, v, mask=m)
    elif KIND == "xchg":
        old = tl.atomic_xchg(P + idx, v, mask=m)
    elif KIND == "and":
        old = tl.atomic_and(P + idx, v, mask=m)
    elif KIND == "or":
        old = tl.atomic_or(P + idx, v, mask=m)
    else:
        old = tl.atomic_xor(P + idx, v, mask=m)
    tl.store(OLD + offs, old, mask=m)


ATOMICS = [("add", "int32"), ("add", "float32"), ("add", "int64"), ("max", "int32"), ("max", "float32"),
           ("max", "uint32"), ("min", "int32"), ("min", "float32"), ("min", "uint32"), ("xchg", "int32"),
           ("xchg", "float32"), ("and", "int32"), ("or", "int32"), ("xor", "int32"), ("xor", "int64")]
N_ATOMIC, SLOTS = 2000, 8


def atomic_spec(kind, dtype, contended) -> Spec:
    d = DT[dtype]
    n = N_ATOMIC
    slots = SLOTS if contended else n

    def make_args(gen):
        if d.is_floating_point:  # negative and positive values (float max/min on the sign-magnitude bits)
            p0, v = randn(gen, slots, scale=100), randn(gen, n, scale=100)
        elif kind == "add":
            p0, v = ints(gen, slots, d, -10**6, 10**6), ints(gen, n, d, 1, 1000)  # positive: olds increase
        else:
            p0, v = ints(gen, slots, d), ints(gen, n, d)
        idx = ints(gen, n, torch.int32, 0, slots - 1) if contended else torch.randperm(n, generator=gen).to(torch.int32)
        mask = (torch.rand(n, generator=gen) < 0.8).to(torch.int32)
        return [p0, idx, v, mask, poison(n, d), n]

    return Spec(atomic_kernel, (cdiv(n, 256),), make_args, (0, 4), dict(KIND=kind, BLOCK=256))


_UFUNC = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or,
          "xor": np.bitwise_xor}


@gpu
@pytest.mark.parametrize("contended", [False, True], ids=["distinct", "contended"])
@pytest.mark.parametrize("kind,dtype", ATOMICS, ids=[f"{k}-{d}" for k, d in ATOMICS])
def test_atomic_rmw(kind, dtype, contended):
    """Vector atomics with masks. Distinct addresses: the returned old values are the initial ones and
    the result is exact. Contended (2000 lanes on 8 addresses): the final values are order-independent
    (exact, except float add); for integer add the old values must chain into one serial order."""
    if kind == "xchg" and contended:
        pytest.skip("the final value of contended exchanges depends on their order")
    both = run_spec(atomic_spec(kind, dtype, contended))
    p0, idx, v, mask = both.args[:4]
    sel = mask.numpy() != 0
    idx_s, v_s = idx.numpy()[sel], v.numpy()[sel]
    p_final, old = both.gpu
    d = DT[dtype]
    ref = p0.clone()
    if kind == "xchg":
        ref[torch.from_numpy(idx_s).long()] = torch.from_numpy(v_s)
    else:
        wide = np.float64 if d.is_floating_point else (np.uint64 if not d.is_signed else np.int64)
        acc = p0.numpy().astype(wide)
        ufunc = _UFUNC[kind]
        if kind == "add" and not d.is_floating_point:
            acc = acc.astype(object)
            for i, val in zip(idx_s.tolist(), v_s.tolist()):
                acc[i] = acc[i] + val
            ref = wrap_tensor(torch.tensor(acc.tolist(), dtype=torch.int64), d)
        else:
            ufunc.at(acc, idx_s, v_s.astype(wide))
            ref = torch.from_numpy(acc.astype(np.float64 if d.is_floating_point else np.int64))
    float_add = d.is_floating_point and kind == "add"
    if float_add and contended:  # float32 sums in some order: |error| <= adds * 2^-24 * sum of magnitudes
        mags = np.abs(p0.numpy()).astype(np.float64)
        np.add.at(mags, idx_s, np.abs(v_s).astype(np.float64))
        bound = float((np.bincount(idx_s, minlength=SLOTS) + 1).max() * 2.0**-24 * mags.max())
        check(p_final, ref, atol=bound, rtol=0, what=f"atomic_{kind} result")
        agree(p_final, both.cpu[0], tol=2 * bound, what=f"atomic_{kind} result")
    else:
        check(p_final, ref, rtol=EPS[d] if float_add else 0, what=f"atomic_{kind} result")
        agree(p_final, both.cpu[0], what=f"atomic_{kind} result")
    unselected = torch.from_numpy(~sel)
    assert (_as_int64(old[unselected]) == _as_int64(poison(1, d))).all() if not d.is_floating_point \
        else torch.isnan(old[unselected]).all(), "a masked-off lane stored an old value"
    if not contended:
        check(old[torch.from_numpy(sel)], p0[idx.long()][torch.from_numpy(sel)], what=f"atomic_{kind} old values")
        agree(old, both.cpu[1], what=f"atomic_{kind} old values")
    elif kind in ("max", "min"):
        # every old value is one that was in memory: the initial value or a value some lane wrote there
        olds = old[torch.from_numpy(sel)]
        for slot in range(SLOTS):
            at = torch.from_numpy(idx_s == slot)
            seen = set(_as_int64(olds[at]).tolist()) if not d.is_floating_point else set(olds[at].tolist())
            allowed = set((_as_int64(p0[slot:slot + 1]).tolist() if not d.is_floating_point else [p0[slot].item()])
                          + (v_s[idx_s == slot].astype(np.int64).tolist() if not d.is_floating_point
                             else v_s[idx_s == slot].tolist()))
            assert seen <= allowed, f"slot {slot}: old values {sorted(seen - allowed)[:5]} were never in memory"
    elif kind == "add" and not d.is_floating_point:
        # per address, sorting the lanes by the old value they saw gives one serial order of the adds
        olds = old.to(torch.int64).numpy()[sel]
        for slot in range(SLOTS):
            lanes = np.nonzero(idx_s == slot)[0]
            order = lanes[np.argsort(olds[lanes], kind="stable")]
            expect = int(p0[slot])
            for lane in order:
                assert olds[lane] == expect, f"slot {slot}: an old value {olds[lane]} breaks the serial order"
                expect += int(v_s[lane])


@kl.jit
def scalar_atomic_kernel(CNT, OLD, OLD_MAX, F):
    pid = tl.program_id(0)
    old = tl.atomic_add(CNT, 1)  # a scalar atomic: once per program, not once per thread
    tl.store(OLD + pid, old)
    tl.store(OLD_MAX + pid, tl.atomic_max(CNT + 1, pid))
    tl.atomic_add(CNT + 2, pid, mask=pid % 2 == 0)
    tl.atomic_add(F, 0.5)
    tl.atomic_xor(CNT + 3, 1 << (pid % 31))


def scalar_atomic_spec(G=300) -> Spec:
    def make_args(gen):
        cnt = ints(gen, 4, torch.int32, -1000, 1000)
        cnt[1] = -5
        return [cnt, poison(G, torch.int32), poison(G, torch.int32), ints(gen, 1, torch.int32, -40, 40).float() / 4]

    return Spec(scalar_atomic_kernel, (G,), make_args, (0, 1, 2, 3), {})


@gpu
def test_scalar_atomics_and_returned_old_values():
    G = 300
    both = run_spec(scalar_atomic_spec(G))
    cnt0, _, _, f0 = both.args
    cnt, olds, old_max, f = both.gpu
    xor = int(cnt0[3])
    for p in range(G):
        xor ^= 1 << (p % 31)
    ref = torch.tensor([int(cnt0[0]) + G, G - 1, int(cnt0[2]) + sum(range(0, G, 2)), wrap(xor, 32, True)])
    check(cnt, ref, what="scalar atomic results")
    check(f, f0.double() + 0.5 * G, what="scalar float atomic add")  # multiples of 0.5: exact in any order
    # every program saw a different old value: together exactly cnt0 .. cnt0 + G - 1
    check(olds.sort().values, int(cnt0[0]) + torch.arange(G), what="old values of a scalar atomic_add")
    # atomic_max(pid): one program (the first) saw the initial -5, and none saw its own pid
    assert int((old_max == -5).sum()) == 1 and ((old_max >= -5) & (old_max < G)).all()
    assert (old_max != torch.arange(G, dtype=torch.int32)).all()
    agree(cnt, both.cpu[0])
    agree(olds.sort().values, both.cpu[1].sort().values)
    agree(f, both.cpu[3])


@kl.jit
def cas_kernel(P, CMP, VAL, OLD, Q, QOLD, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    old = tl.atomic_cas(P + offs, tl.load(CMP + offs), tl.load(VAL + offs))  # each lane its own slot: no spinning
    tl.store(OLD + offs, old)
    tl.store(QOLD + pid, tl.atomic_cas(Q + pid, pid, pid * 10 + 1))  # a scalar CAS per program


def cas_spec(dtype, G=8, block=128) -> Spec:
    d = DT[dtype]
    n = G * block

    def make_args(gen):
        p0 = randn(gen, n, scale=100) if d.is_floating_point else ints(gen, n, d)
        hit = torch.rand(n, generator=gen) < 0.5
        cmp = torch.where(hit, p0, p0 + 1)
        val = randn(gen, n, scale=100) if d.is_floating_point else ints(gen, n, d)
        q0 = torch.where(torch.rand(G, generator=gen) < 0.5, torch.arange(G), torch.arange(G) + 1000).to(torch.int32)
        return [p0, cmp, val, poison(n, d), q0, poison(G, torch.int32)]

    return Spec(cas_kernel, (G,), make_args, (0, 3, 4, 5), dict(BLOCK=block))


@gpu
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
def test_atomic_cas(dtype):
    both = run_spec(cas_spec(dtype))
    p0, cmp, val, _, q0, _ = both.args
    check(both.gpu[0], torch.where(p0 == cmp, val, p0), what="CAS results")
    check(both.gpu[1], p0, what="CAS old values")
    pids = torch.arange(q0.numel(), dtype=torch.int32)
    check(both.gpu[2], torch.where(q0 == pids, pids * 10 + 1, q0), what="scalar CAS results")
    check(both.gpu[3], q0, what="scalar CAS old values")
    agree_all(both)


# ============================================================================================ control flow


@kl.jit
def branch_kernel(X, OUT, a, b, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    s = tl.load(X + pid)  # one scalar per program decides the branch
    v = tl.arange(0, BLOCK).to(tl.float32)
    if s > a:
        r = v * s
    elif s > b:
        r = v + s
    else:
        r = v - s
    if pid % 3 == 0:  # no else: r flows through unchanged
        r = -r
    tl.store(OUT + pid * BLOCK + tl.arange(0, BLOCK), r)


def branch_spec(G=60, block=64) -> Spec:
    return Spec(branch_kernel, (G,), lambda g: [randn(g, G), poison((G, block), torch.float32), 0.5, -0.5], (1,),
                dict(BLOCK=block))


@gpu
def test_runtime_if_elif_else():
    both = run_spec(branch_spec())
    x, out = both.args[0].double(), both.gpu[0]
    v = torch.arange(out.shape[1], dtype=torch.float64)
    rows = []
    for p, s in enumerate(x.tolist()):
        r = v * s if s > 0.5 else (v + s if s > -0.5 else v - s)
        rows.append(-r if p % 3 == 0 else r)
    check(out, torch.stack(rows), atol=1e-6, rtol=1e-6, what="if/elif/else")
    agree_all(both)


@kl.jit
def loop_kernel(X, OUT, CNT, lo, hi, step, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    count = 0
    for i in range(lo, hi, step):  # runtime bounds and step; acc and count are loop-carried
        acc = acc * 0.5 + tl.load(X + i * BLOCK + offs)
        count += 1
    tl.store(OUT + offs, acc)
    tl.store(CNT, count)


LOOP_BOUNDS = [(0, 7, 1), (3, 20, 4), (5, 5, 1), (9, 2, 1), (1, 16, 16), (0, 31, 2)]


def loop_spec(lo, hi, step, block=128) -> Spec:
    return Spec(loop_kernel, (1,), lambda g: [randn(g, 32 * block), poison(block, torch.float32),
                                              poison(1, torch.int32), lo, hi, step], (1, 2), dict(BLOCK=block))


@gpu
@pytest.mark.parametrize("lo,hi,step", LOOP_BOUNDS)
def test_for_loop_runtime_bounds(lo, hi, step):
    both = run_spec(loop_spec(lo, hi, step))
    x = both.args[0].reshape(32, -1)
    acc = torch.zeros(x.shape[1], dtype=torch.float32)
    for i in range(lo, hi, step):
        acc = acc * 0.5 + x[i]  # x * 0.5 is exact, so this is the kernel's float32 arithmetic exactly
    check(both.gpu[0], acc, what="loop-carried tensor")
    check(both.gpu[1], torch.tensor([len(range(lo, hi, step))]), what="trip count")
    agree_all(both)


@kl.jit
def while_kernel(X, STEPS, T, HALVINGS, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    v = tl.load(X + pid)
    n = 0
    while v != 1:  # Collatz on a scalar
        if v % 2 == 0:
            v = v // 2
        else:
            v = 3 * v + 1
        n += 1
    tl.store(STEPS + pid, n)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    t = tl.load(X + offs)
    k = 0
    while tl.max(t, axis=0) > 1:  # a tensor carried through a loop whose condition is a reduction
        t = tl.where(t > 1, t // 2, t)
        k += 1
    tl.store(T + offs, t)
    tl.store(HALVINGS + pid, k)


def while_spec(G=16, block=32) -> Spec:
    return Spec(while_kernel, (G,), lambda g: [ints(g, G * block, torch.int32, 1, 100000), poison(G, torch.int32),
                                               poison(G * block, torch.int32), poison(G, torch.int32)],
                (1, 2, 3), dict(BLOCK=block))


def _collatz(v):
    n = 0
    while v != 1:
        v = 3 * v + 1 if v % 2 else v // 2
        n += 1
    return n


@gpu
def test_while_loops():
    both = run_spec(while_spec())
    x = both.args[0]
    G = both.gpu[0].numel()
    check(both.gpu[0], torch.tensor([_collatz(v) for v in x[:G].tolist()]), what="Collatz steps")
    check(both.gpu[1], torch.ones_like(x), what="halved to 1")
    check(both.gpu[2], torch.tensor([int(r.max()).bit_length() - 1 for r in x.reshape(G, -1)]), what="halvings")
    agree_all(both)


@kl.jit
def static_range_kernel(X, H, SH, DEG: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    acc = tl.zeros_like(x)
    for i in tl.static_range(DEG + 1):  # unrolled: i is a constexpr in every copy
        acc = acc * x + (i + 1)
    tl.store(H + offs, acc)
    s = tl.zeros_like(x)
    for j in tl.static_range(0, 8, 3):
        if j % 2 == 0:  # decided at compile time
            s += x << j
        else:
            s -= x
    tl.store(SH + offs, s)


def static_range_spec(deg=5, block=256) -> Spec:
    return Spec(static_range_kernel, (1,), lambda g: [ints(g, block, torch.int32, -7, 7), poison(block, torch.int32),
                                                      poison(block, torch.int32)], (1, 2), dict(DEG=deg, BLOCK=block))


@gpu
def test_static_range():
    deg = 5
    both = run_spec(static_range_spec(deg))
    x = both.args[0].to(torch.int64)
    horner = sum((i + 1) * x ** (deg - i) for i in range(deg + 1))
    check(both.gpu[0], wrap_tensor(horner, torch.int32), what="Horner")
    check(both.gpu[1], x + (x << 6) - x, what="static_range with a step")  # j = 0, 3, 6
    agree_all(both)


@kl.jit
def early_return_kernel(X, FLAG, Y, DONE, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid * BLOCK >= n:  # the programs past the end return at once
        return
    if tl.load(FLAG + pid) != 0:  # a data-dependent return after a store
        tl.store(DONE + pid, -1)
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(Y + offs, x + 1.0, mask=offs < n)
    tl.store(DONE + pid, 1)


@kl.jit
def early_return_explicit_kernel(X, FLAG, Y, DONE, n, BLOCK: tl.constexpr):
    """The same, with an explicit `return` at the end of the function."""
    pid = tl.program_id(0)
    if pid * BLOCK >= n:
        return
    if tl.load(FLAG + pid) != 0:
        tl.store(DONE + pid, -1)
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(Y + offs, x + 1.0, mask=offs < n)
    tl.store(DONE + pid, 1)
    return


@kl.jit
def _double_or_increment(x, flag):
    if flag:
        return x * 2.0  # an early return inside a @jit helper
    return x + 1.0


@kl.jit
def early_return_helper_kernel(X, FLAG, Y, DONE, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(Y + offs, _double_or_increment(x, pid % 2 == 0), mask=offs < n)
    tl.store(DONE + pid, pid)


EARLY_RETURN_KERNELS = {"in-kernel": early_return_kernel, "in-kernel-explicit-final-return": early_return_explicit_kernel,
                        "in-helper": early_return_helper_kernel}


def early_return_spec(form, n=1000, block=128, G=12) -> Spec:
    G = G if form != "in-helper" else cdiv(n, block)
    return Spec(EARLY_RETURN_KERNELS[form], (G,),
                lambda g: [randn(g, n), (torch.rand(G, generator=g) < 0.4).to(torch.int32), poison(n, torch.float32),
                           poison(G, torch.int32), n], (2, 3), dict(BLOCK=block))


@gpu
@pytest.mark.parametrize("form", list(EARLY_RETURN_KERNELS))
def test_early_return(form):
    n, block, G = 1000, 128, 12
    both = run_spec(early_return_spec(form, n, block, G))
    x, flag = both.args[0].double(), both.args[1]
    y_ref = torch.full((n,), float("nan"), dtype=torch.float64)
    done = poison(both.gpu[1].numel(), torch.int32).to(torch.int64)
    for p in range(cdiv(n, block)):
        rows = slice(p * block, (p + 1) * block)
        if form == "in-helper":
            y_ref[rows] = x[rows] * 2 if p % 2 == 0 else x[rows] + 1
            done[p] = p
        elif flag[p]:
            done[p] = -1
        else:
            y_ref[rows] = x[rows] + 1
            done[p] = 1
    check(both.gpu[0], y_ref, atol=1e-6, rtol=1e-6, what="stores of the programs that did not return")
    check(both.gpu[1], done, what="which programs returned where")
    agree_all(both)


@kl.jit
def _square(x):
    return x * x


@kl.jit
def _moments(x):
    return tl.sum(x, axis=0), tl.sum(_square(x), axis=0), tl.max(x, axis=0)


@kl.jit
def _normalize(x, eps):
    s, q, mx = _moments(x)  # a nested call returning a tuple
    n = x.shape[0]
    mean = s / n
    var = q / n - mean * mean
    return (x - mean) / tl.sqrt(var + eps), mx


@kl.jit
def _divmod(a, b):
    return a // b, a % b


@kl.jit
def nested_call_kernel(X, Y, MX, I, Q, R, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    y, mx = _normalize(tl.load(X + offs), eps)
    tl.store(Y + offs, y)
    tl.store(MX + pid, mx)
    q, r = _divmod(tl.load(I + offs), 7)
    tl.store(Q + offs, q)
    tl.store(R + offs, r)


def nested_call_spec(G=4, block=256) -> Spec:
    n = G * block
    return Spec(nested_call_kernel, (G,), lambda g: [randn(g, n, scale=3), poison(n, torch.float32),
                                                     poison(G, torch.float32), ints(g, n, torch.int32),
                                                     poison(n, torch.int32), poison(n, torch.int32), 1e-5],
                (1, 2, 4, 5), dict(BLOCK=block))


@gpu
def test_nested_jit_calls_with_tuple_returns():
    G, block = 4, 256
    both = run_spec(nested_call_spec(G, block))
    x, iv = both.args[0].double().reshape(G, block), both.args[3].tolist()
    mean, var = x.mean(1, keepdim=True), x.var(1, unbiased=False, keepdim=True)
    check(both.gpu[0], ((x - mean) / torch.sqrt(var + 1e-5)).reshape(-1), atol=1e-4, rtol=1e-4, what="normalize")
    check(both.gpu[1], x.amax(1), what="max")
    qs = [abs(a) // 7 * (1 if a >= 0 else -1) for a in iv]
    check(both.gpu[2], torch.tensor(qs), what="//")
    check(both.gpu[3], torch.tensor([a - 7 * q for a, q in zip(iv, qs)]), what="%")
    agree(both.gpu[0], both.cpu[0], tol=1e-5)
    for g, c in zip(both.gpu[1:], both.cpu[1:]):
        agree(g, c)


# ============================================================================================ random numbers


@kl.jit
def random_kernel(R, RN, RI, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(R + offs, tl.rand(seed, offs), mask=m)
    tl.store(RN + offs, tl.randn(seed, offs), mask=m)
    tl.store(RI + offs, tl.randint(seed, offs).to(tl.int32, bitcast=True), mask=m)


N_RANDOM = 65536 + 100


def random_spec(seed) -> Spec:
    n = N_RANDOM
    return Spec(random_kernel, (cdiv(n, 1024),), lambda g: [poison(n, torch.float32), poison(n, torch.float32),
                                                           poison(n, torch.int32), seed, n], (0, 1, 2),
                dict(BLOCK=1024))


def philox_reference(seed: int, counter: np.ndarray, rounds=10):
    """Philox-4x32 (Salmon et al., SC'11) in NumPy: key = the seed's two 32-bit halves, counter =
    (counter, 0, 0, 0). Returns the four output words."""
    mask = np.uint64(0xFFFFFFFF)
    c0 = counter.astype(np.uint64) & mask
    c1 = np.zeros_like(c0)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
    for _ in range(rounds):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & mask
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & mask, (k1 + np.uint64(0xBB67AE85)) & mask
    return c0, c1, c2, c3


def uniform_reference(words):
    """Triton's uint_to_uniform_float of 32-bit words in NumPy float32: read signed, x < 0 -> -x - 1, * 2^-31."""
    x = words.astype(np.uint32).view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return (x.astype(np.float32) * np.float32(4.6566127342e-10)).astype(np.float64)


def test_philox_reference_known_answer():
    """The reference itself, against Random123's published known-answer vectors for Philox4x32-10."""
    words = philox_reference(0, np.array([0]))
    assert [int(w[0]) for w in words] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


@gpu
@pytest.mark.parametrize("seed", [12345, 2**40 + 7])
def test_random_numbers(seed):
    """randint/rand: bitwise equal to a NumPy Philox and between the GPU and the interpreter; rand in
    [0, 1); randn close to a float64 Box-Muller of the same words, mean ~0 and std ~1 over 64K samples."""
    both = run_spec(random_spec(seed))
    r, rn, ri = both.gpu
    offs = np.arange(N_RANDOM, dtype=np.int64)
    w0, w1, _, _ = philox_reference(seed, offs)
    check(ri, torch.from_numpy(w0.astype(np.uint32).view(np.int32).astype(np.int64)), what="randint")
    u0, u1 = uniform_reference(w0), uniform_reference(w1)
    check(r, torch.from_numpy(u0), what="rand")
    assert (r >= 0).all() and (r <= 1).all()  # Triton's conversion may round the top values to 1.0
    normal = np.sqrt(-2.0 * np.log(np.maximum(u0, 1e-7))) * np.cos(2 * np.pi * u1)
    check(rn, torch.from_numpy(normal), atol=1e-4, rtol=1e-5, what="randn")
    assert abs(rn.double().mean().item()) < 0.02 and abs(rn.double().std().item() - 1) < 0.02
    agree(r, both.cpu[0], what="rand")
    agree(ri, both.cpu[2], what="randint")
    agree(rn, both.cpu[1], tol=1e-5, what="randn")  # log / cos / sin: libdevice vs NumPy, within an ulp or two


# ============================================================================================ debugging ops


@kl.jit
def print_kernel(X, N: tl.constexpr):
    pid = tl.program_id(0)
    x = tl.load(X + pid * N + tl.arange(0, N))
    tl.device_print("val=", x)
    tl.device_print("prog=", pid)


@kl.jit
def assert_kernel(X, N: tl.constexpr):
    x = tl.load(X + tl.program_id(0) * N + tl.arange(0, N))
    tl.device_assert(x >= 0, "x must be non-negative")


def _run_python(code: str, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@gpu
def test_device_print():
    values = [1000 + 7 * i for i in range(16)]
    proc = _run_python(f"""
        import torch
        from tests.test_gpu_features import print_kernel
        x = torch.tensor({values}, dtype=torch.int32, device="cuda")
        print_kernel[(2,)](x, N=8)
        torch.cuda.synchronize()
        print("DONE", flush=True)
    """)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "DONE" in proc.stdout
    # Triton's format: `pid (x, y, z) idx (i) val=: value`, each element once; a scalar from every thread
    printed = sorted(re.findall(r"^pid \((\d+), 0, 0\) idx \(\s*(\d+)\) val=: (-?\d+)$", out, re.M))
    assert printed == sorted((str(p), str(i), str(values[p * 8 + i])) for p in range(2) for i in range(8)), out[-3000:]
    progs = re.findall(r"^pid \((\d+), 0, 0\) idx \(\) prog=: (\d+)$", out, re.M)
    assert sorted(set(progs)) == [("0", "0"), ("1", "1")] and len(progs) == 2 * 128, out[-3000:]


@gpu
def test_device_assert_failure_kills_the_process():
    proc = _run_python("""
        import torch
        from tests.test_gpu_features import assert_kernel
        x = torch.arange(64, dtype=torch.int32, device="cuda")
        assert_kernel[(4,)](x, N=16)
        torch.cuda.synchronize()
        print("PASSING-LAUNCH-OK", flush=True)
        x[37] = -5
        assert_kernel[(4,)](x, N=16)
        torch.cuda.synchronize()
        print("UNREACHABLE", flush=True)
    """)
    out = proc.stdout + proc.stderr
    assert "PASSING-LAUNCH-OK" in proc.stdout, out  # a holding assertion does nothing
    assert proc.returncode != 0 and "UNREACHABLE" not in proc.stdout, out
    assert "x must be non-negative" in out or "assert" in out.lower(), out


# ============================================================================================ num_warps


@kl.jit
def warps_kernel(X, A, B, Y, S, T, C, D, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    x = _load2(X, M, N)
    _store2(Y, x * 2.0 - tl.max(x, axis=1)[:, None])
    tl.store(S + tl.arange(0, M), tl.sum(x, axis=1))
    _store2(T, tl.trans(x))
    _store2(C, tl.cumsum(x, axis=1))
    _store2(D, tl.dot(_load2(A, M, K), _load2(B, K, N)))


def warps_spec(num_warps, M=32, N=64, K=32) -> Spec:
    def make_args(gen):
        return [randn(gen, M, N), randn(gen, M, K, dtype=torch.float16), randn(gen, K, N, dtype=torch.float16),
                poison((M, N), torch.float32), poison(M, torch.float32), poison((N, M), torch.float32),
                poison((M, N), torch.float32), poison((M, N), torch.float32)]

    return Spec(warps_kernel, (1,), make_args, (3, 4, 5, 6, 7), dict(M=M, N=N, K=K, num_warps=num_warps))


@gpu
@pytest.mark.parametrize("num_warps", [1, 2, 4, 8])
def test_num_warps(num_warps):
    """One kernel (elementwise, reductions, transpose, scan, dot) at 1, 2, 4 and 8 warps."""
    both = run_spec(warps_spec(num_warps))
    x, a, b = (t.double() for t in both.args[:3])
    x32 = both.args[0]
    refs = [x32 * 2 - x32.amax(1, keepdim=True), x.sum(1), x.t(), x.cumsum(1), a @ b]  # the first in float32: exact
    for k, (out, ref, tol) in enumerate(zip(both.gpu, refs, [0, 1e-5, 0, 1e-5, 1e-4])):
        check(out, ref.contiguous(), atol=tol, rtol=tol, what=f"output {k} at {num_warps} warps")
        agree(out, both.cpu[k], tol=tol, what=f"output {k} at {num_warps} warps")


# ============================================================================================ compiles for sm_90


def _compile_cases():
    """(id, spec) for a representative set of every kernel above, in the specializations the GPU tests use."""
    cases = []
    for d in ALL_DTYPES:
        for op in (INT_OPS if "int" in d else FLOAT_OPS):
            if op in ("+", "/", "//", "%", "<<", ">>", "<", "neg", "inv", "not", "scalar") or d in ("int8", "bfloat16"):
                cases.append((f"binop-{d}-{op}", binop_spec(op, d, d, d)))
    for dx, dy, p in PROMOTIONS:
        cases.append((f"binop-{dx}-{dy}", binop_spec("+", dx, dy, p)))
    cases += [(f"cast-{name}", cast_spec(name)) for name in CASTS]
    cases += [(f"math-{fn}", math_spec(fn)) for fn in MATH]
    cases += [(f"math-{fn}-{d}", math_spec(fn, d)) for fn in ("exp", "log", "sqrt", "sin", "erf", "fma", "sigmoid")
              for d in ("float16", "bfloat16", "float64")]
    cases += [("math-umulhi", math_spec("umulhi", "uint32")), ("softmax", softmax_spec(8, 64)),
              ("softmax-tiny", softmax_spec(2, 16))]
    cases += [(f"minmax-{d}-{p}", minmax_spec(d, p)) for d, p in [("float32", 0), ("float32", 0xFFFF), ("float16", 0),
                                                                 ("bfloat16", 0xFFFF), ("int32", 0), ("uint32", 0)]]
    cases += [(f"masked-{d}-{n}-{b}", masked_spec(d, n, b)) for d in ("float32", "bfloat16", "int8", "uint8", "int16",
                                                                      "int64") for n, b in MASKED_SIZES]
    cases += [("scalar-mem", scalar_mem_spec()), ("strided", strided_spec("sliced")),
              ("strided-transposed", strided_spec("transposed"))]
    cases += [(f"bool-{n}-{b}", bool_spec(n, b)) for n, b in MASKED_SIZES]
    cases += [("int64-offsets", int64_offsets_spec()), ("block-ptr-zero", block_ptr_spec("zero", (1, 0))),
              ("block-ptr-nan-colmajor", block_ptr_spec("nan", (0, 1))), ("block-ptr-loop", block_ptr_rowsum_spec())]
    cases += [(f"shapes-{M}x{N}-w{w}-{d}", shapes_spec(M, N, d, w)) for M, N, w in [(8, 16, 4), (2, 8, 4), (32, 32, 8)]
              for d in ("float32", "int16")]
    cases += [(f"reduce2d-{M}x{N}-w{w}-{d}", reduce2d_spec(M, N, w, d)) for M, N, w in REDUCE_SHAPES
              for d in ("float32", "int32")]
    cases += [(f"reduce1d-{N}-w{w}-{d}", reduce1d_spec(N, w, d)) for N, w in [(16, 4), (2, 4), (1024, 8)]
              for d in ("float32", "int8")]
    cases += [(f"argmax-{M}x{N}-{d}", arg_spec(M, N, w, d)) for M, N, w in [(16, 16, 4), (2, 8, 4), (64, 128, 8)]
              for d in ("float32", "int32")]
    cases += [("custom-reduce", custom_reduce_spec(32, 64, 4)), ("custom-reduce-tiny", custom_reduce_spec(4, 16, 4))]
    cases += [(f"scan-{M}x{N}-ax{a}-w{w}-{d}", scan_spec(M, N, a, w, d))
              for M, N, a, w in [(8, 64, 1, 4), (8, 64, 0, 4), (2, 8, 1, 4), (64, 256, 1, 8)] for d in ("float32", "int32")]
    cases += [(f"scan1d-{N}-{d}", scan1d_spec(N, w, d)) for N, w in [(16, 4), (4096, 8)] for d in ("float32", "int32")]
    cases += [("custom-scan", custom_scan_spec(256, 2)), ("custom-scan-tiny", custom_scan_spec(16, 4))]
    cases += [(f"dot-{kind}-{M}x{N}x{K}-w{w}-acc{int(acc)}", dot_spec(kind, M, N, K, w, acc)) for kind in DOT_TYPES
              for M, N, K, w in DOT_SHAPES[:3] + DOT_SHAPES[-1:] for acc in (False, True)]
    cases += [(f"atomic-{k}-{d}", atomic_spec(k, d, False)) for k, d in ATOMICS]
    cases += [("scalar-atomics", scalar_atomic_spec())] + [(f"cas-{d}", cas_spec(d)) for d in ("int32", "int64", "float32")]
    cases += [("if-elif-else", branch_spec()), ("for-loop", loop_spec(3, 20, 4)), ("while", while_spec()),
              ("static-range", static_range_spec()),
              ("early-return", early_return_spec("in-kernel")),
              ("early-return-explicit", early_return_spec("in-kernel-explicit-final-return")),
              ("early-return-helper", early_return_spec("in-helper")),
              ("nested-calls", nested_call_spec()), ("random", random_spec(12345)),
              ("random-int64-seed", random_spec(2**40 + 7))]
    cases += [(f"num-warps-{w}", warps_spec(w)) for w in (1, 2, 4, 8)]
    x16 = lambda g: [torch.arange(16, dtype=torch.int32)]
    cases += [("device-print", Spec(print_kernel, (2,), x16, (), dict(N=8))),
              ("device-assert", Spec(assert_kernel, (2,), x16, (), dict(N=8)))]
    return cases


COMPILE_CASES = _compile_cases()


@pytest.mark.parametrize("spec", [c[1] for c in COMPILE_CASES], ids=[c[0] for c in COMPILE_CASES])
def test_kernel_compiles_for_sm90(spec):
    """No GPU needed: the kernel, specialized for CPU copies of the test's arguments, goes through the GPU
    passes, LLVM, and ptxas for sm_90a."""
    if shutil.which("ptxas") is None:
        pytest.skip("ptxas is not on PATH")
    from kernellab.compiler.backend import compile_to_cubin
    from kernellab.compiler.codegen.target import Target
    from kernellab.compiler.gpu.options import GpuOptions
    from kernellab.compiler.parser import parse_module

    args = spec.make_args(torch.Generator().manual_seed(0))
    ck = spec.kernel.warmup(*args, grid=spec.grid, **spec.consts)
    out = compile_to_cubin(parse_module(ck.asm["tile"]), ck.trace,
                           GpuOptions(num_warps=spec.consts.get("num_warps", 4)), Target(90))
    assert out["cubin"] and ".entry" in out["ptx"]
