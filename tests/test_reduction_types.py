"""Reductions and scans promote like Triton 3.6 (python/triton/language/standard.py there):

- tl.max / tl.min without indices: bf16 -> f32, then any type under 32 bits -> f32 (floats) or i32 (ints,
  signed, unsigned and bool alike);
- tl.max / tl.min with indices, tl.argmax / tl.argmin: only bf16 is widened (to f32);
- tl.sum: `dtype=` if given, else integers under 32 bits -> i32 / u32 by sign (bool counts as unsigned);
  bf16 and f16 stay as they are;
- tl.cumsum: bf16 -> f32, then the same rule as tl.sum; tl.cumprod: bf16 -> f32 only;
- tl.xor_sum: integers only, no promotion.

The expected table below is written out by hand from that source, checked on the IR (result type of the
tt.reduce / tt.scan), then on values against NumPy on the interpreter, then (no GPU needed) through the
GPU pipeline to a cubin for sm_90a, and on a GPU against the interpreter.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl

HAS_CUDA = torch.cuda.is_available()

TORCH = {"i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
         "u8": torch.uint8, "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
         "f64": torch.float64}

# op -> input dtype -> the dtype Triton 3.6 reduces / scans in
EXPECTED = {
    "max": {"i1": "i32", "i8": "i32", "i16": "i32", "u8": "i32", "i32": "i32", "i64": "i64", "f16": "f32",
            "bf16": "f32", "f32": "f32", "f64": "f64"},
    "argmax_value": {"i1": "i1", "i8": "i8", "i16": "i16", "u8": "u8", "i32": "i32", "f16": "f16", "bf16": "f32",
                     "f32": "f32"},
    "sum": {"i1": "u32", "i8": "i32", "i16": "i32", "u8": "u32", "i32": "i32", "i64": "i64", "f16": "f16",
            "bf16": "bf16", "f32": "f32", "f64": "f64"},
    "cumsum": {"i1": "u32", "i8": "i32", "i16": "i32", "u8": "u32", "i32": "i32", "i64": "i64", "f16": "f16",
               "bf16": "f32", "f32": "f32"},
    "cumprod": {"i8": "i8", "i16": "i16", "u8": "u8", "i32": "i32", "f16": "f16", "bf16": "f32", "f32": "f32"},
    "xor_sum": {"i8": "i8", "u8": "u8", "i16": "i16", "i32": "i32", "i64": "i64"},
}
EXPECTED["min"] = EXPECTED["max"]
EXPECTED["argmin_value"] = EXPECTED["argmax_value"]


@kl.jit
def reduce_kernel(x_ptr, out_ptr, N: tl.constexpr, OP: tl.constexpr, DTYPE: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    if OP == "max":
        tl.store(out_ptr, tl.max(x, 0))
    elif OP == "min":
        tl.store(out_ptr, tl.min(x, 0))
    elif OP == "argmax_value":
        v, i = tl.max(x, 0, return_indices=True)
        tl.store(out_ptr, v)
    elif OP == "argmin_value":
        v, i = tl.min(x, 0, return_indices=True)
        tl.store(out_ptr, v)
    elif OP == "sum":
        tl.store(out_ptr, tl.sum(x, 0, dtype=DTYPE))
    elif OP == "xor_sum":
        tl.store(out_ptr, tl.xor_sum(x, 0))
    elif OP == "cumsum":
        tl.store(out_ptr + offs, tl.cumsum(x, 0, dtype=DTYPE))
    else:
        tl.store(out_ptr + offs, tl.cumprod(x, 0))


def _ir_type(ck, opname):
    """The scalar dtype name of the first `opname` op's first result in the kernel's frontend IR."""
    for op in _walk(ck.module):
        if op.name == opname:
            return op.results[0].type.scalar.ir
    raise AssertionError(f"no {opname} in\n{ck.asm['tile']}")


def _walk(module):
    def ops(block):
        for op in block.ops:
            yield op
            for r in op.regions:
                yield from ops(r)

    for fn in module.functions:
        yield from ops(fn.body)


def _inputs(dt: str, n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = TORCH[dt]
    if dt == "i1":
        return torch.rand(n, generator=g) < 0.5
    if t.is_floating_point:
        return (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(t)
    info = torch.iinfo(t)
    lo, hi = max(info.min, -2**20), min(info.max, 2**20)
    x = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64)
    x[0] = info.max  # an extreme, so a narrow accumulator would wrap
    return x.to(t)


CASES = [(op, dt) for op, table in EXPECTED.items() for dt in table]


def _out_for(op, acc, n):
    size = n if op in ("cumsum", "cumprod") else 1
    return torch.full((size,), 77, dtype=TORCH.get(acc, torch.uint32 if acc == "u32" else None))


@pytest.mark.parametrize("op,dt", CASES, ids=[f"{o}-{d}" for o, d in CASES])
def test_promoted_type_in_ir(op, dt):
    n = 16
    x = _inputs(dt, n)
    acc = EXPECTED[op][dt]
    ck = reduce_kernel.warmup(x, _out_for(op, acc, n), N=n, OP=op, DTYPE=None, grid=(1,))
    opname = "tt.scan" if op in ("cumsum", "cumprod") else "tt.reduce"
    if op.startswith("arg") and dt == "i1":
        acc = "i32"  # compared as i32, the value handed back as i1 (test_argmax_of_bool_keeps_bool_values)
    assert _ir_type(ck, opname) == acc, f"{op}({dt}) reduces in {_ir_type(ck, opname)}, Triton in {acc}"


@pytest.mark.parametrize("given,dt,acc", [("f32", "bf16", "f32"), ("f64", "f16", "f64"), ("i8", "i32", "i8"),
                                          ("i64", "i8", "i64"), ("bf16", "f32", "bf16")])
@pytest.mark.parametrize("op", ["sum", "cumsum"])
def test_dtype_argument(op, given, dt, acc):
    n = 16
    x = _inputs(dt, n)
    dtype = {"f32": tl.float32, "f64": tl.float64, "i8": tl.int8, "i64": tl.int64, "bf16": tl.bfloat16}[given]
    ck = reduce_kernel.warmup(x, _out_for(op, acc, n), N=n, OP=op, DTYPE=dtype, grid=(1,))
    assert _ir_type(ck, "tt.scan" if op == "cumsum" else "tt.reduce") == acc


def _np_reference(op, x: torch.Tensor, acc: str):
    """NumPy model: cast to the accumulator dtype, then reduce in exact (wrapping for ints) arithmetic."""
    xs = x.to(torch.float64).numpy() if x.dtype in (torch.bfloat16, torch.float16) else x.numpy()
    npacc = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "f32": np.float32, "f64": np.float64,
             "i8": np.int8, "i16": np.int16, "u8": np.uint8, "f16": np.float16}[acc]
    a = xs.astype(npacc)
    with np.errstate(over="ignore"):
        if op == "max":
            return np.array([a.max()])
        if op == "min":
            return np.array([a.min()])
        if op == "sum":
            return np.array([a.sum(dtype=npacc)]) if a.dtype.kind in "iu" else np.array([a.astype(np.float64).sum()])
        if op == "xor_sum":
            return np.array([np.bitwise_xor.reduce(a)])
        if op == "cumsum":
            return np.cumsum(a, dtype=npacc) if a.dtype.kind in "iu" else np.cumsum(a.astype(np.float64))
        return np.cumprod(a, dtype=npacc) if a.dtype.kind in "iu" else np.cumprod(a.astype(np.float64))


VALUE_CASES = [(op, dt) for op, dt in CASES if op in ("max", "min", "sum", "xor_sum", "cumsum")
               and dt not in ("f16", "bf16", "i1")] + [("cumsum", "bf16"), ("max", "f16"), ("max", "bf16")]


@pytest.mark.parametrize("op,dt", VALUE_CASES, ids=[f"{o}-{d}" for o, d in VALUE_CASES])
def test_values_match_numpy_model(op, dt):
    n = 64
    x = _inputs(dt, n, seed=3)
    acc = EXPECTED[op][dt]
    out = _out_for(op, acc, n)
    reduce_kernel[(1,)](x, out, N=n, OP=op, DTYPE=None)
    ref = _np_reference(op, x, acc)
    got = out.to(torch.float64).numpy() if out.dtype.is_floating_point else out.numpy()
    if np.asarray(ref).dtype.kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=1e-6 if acc != "f64" else 1e-13, atol=1e-5)
    else:
        np.testing.assert_array_equal(got.astype(np.int64), ref.astype(np.int64))


def test_max_of_int8_plus_100_is_227_like_triton():
    """The issue's case: an int8 max is an int32, so adding 100 cannot wrap."""
    @kl.jit
    def k(x_ptr, o_ptr, N: tl.constexpr):
        tl.store(o_ptr, tl.max(tl.load(x_ptr + tl.arange(0, N)), 0) + 100)

    x = torch.tensor([127, -5, 3, 0], dtype=torch.int8)
    o = torch.full((1,), -1, dtype=torch.int32)
    k[(1,)](x, o, N=4)
    assert o.item() == 227


def test_cumsum_of_bf16_accumulates_in_f32():
    """1 + 2^-9 + 2^-9 + ... : in bf16 every step rounds back to 1; Triton's f32 accumulator keeps them."""
    @kl.jit
    def k(x_ptr, o_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(o_ptr + offs, tl.cumsum(tl.load(x_ptr + offs), 0))

    x = torch.tensor([1.0] + [2.0 ** -9] * 7, dtype=torch.bfloat16)
    o = torch.full((8,), float("nan"), dtype=torch.float32)
    k[(1,)](x, o, N=8)
    ref = np.cumsum(x.to(torch.float64).numpy())
    np.testing.assert_array_equal(o.numpy().astype(np.float64), ref)


def test_max_of_f16_does_not_overflow_f16():
    @kl.jit
    def k(x_ptr, o_ptr, N: tl.constexpr):
        tl.store(o_ptr, tl.max(tl.load(x_ptr + tl.arange(0, N)), 0) * 2)

    x = torch.tensor([60000.0, 1.0, -3.0, 2.0], dtype=torch.float16)
    o = torch.zeros(1, dtype=torch.float32)
    k[(1,)](x, o, N=4)
    assert o.item() == 120000.0


def test_argmax_of_bool_keeps_bool_values():
    @kl.jit
    def k(x_ptr, v_ptr, i_ptr, N: tl.constexpr):
        v, i = tl.max(tl.load(x_ptr + tl.arange(0, N)), 0, return_indices=True)
        tl.store(v_ptr, v)
        tl.store(i_ptr, i)

    x = torch.tensor([False, False, True, True])
    v = torch.zeros(1, dtype=torch.bool)
    i = torch.full((1,), -1, dtype=torch.int32)
    k[(1,)](x, v, i, N=4)
    assert v.item() is True and i.item() == 2


def test_xor_sum_of_floats_is_refused():
    @kl.jit
    def k(x_ptr, o_ptr, N: tl.constexpr):
        tl.store(o_ptr, tl.xor_sum(tl.load(x_ptr + tl.arange(0, N)), 0))

    with pytest.raises(kl.CompilationError, match="integers"):
        k.warmup(torch.zeros(4), torch.zeros(1), N=4, grid=(1,))


GPU_CASES = [c for c in CASES if c[1] != "i64" or c[0] in ("sum", "xor_sum")]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("op,dt", GPU_CASES, ids=[f"{o}-{d}" for o, d in GPU_CASES])
def test_promoted_reductions_compile_for_sm90(op, dt):
    from kernellab.compiler.backend import compile_to_cubin
    from kernellab.compiler.codegen.target import Target
    from kernellab.compiler.gpu.options import GpuOptions
    from kernellab.compiler.parser import parse_module

    n = 128
    x = _inputs(dt, n)
    ck = reduce_kernel.warmup(x, _out_for(op, EXPECTED[op][dt], n), N=n, OP=op, DTYPE=None, grid=(1,))
    out = compile_to_cubin(parse_module(ck.asm["tile"]), ck.trace, GpuOptions(num_warps=4), Target(90))
    assert out["cubin"][:4] == b"\x7fELF" and ".entry" in out["ptx"]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("op,dt", GPU_CASES, ids=[f"{o}-{d}" for o, d in GPU_CASES])
def test_promoted_reductions_on_gpu_match_interpreter_and_numpy(op, dt):
    n = 128
    x = _inputs(dt, n, seed=5)
    acc = EXPECTED[op][dt]
    out_cpu, out_gpu = _out_for(op, acc, n), _out_for(op, acc, n).cuda()
    reduce_kernel[(1,)](x, out_cpu, N=n, OP=op, DTYPE=None)
    reduce_kernel[(1,)](x.cuda(), out_gpu, N=n, OP=op, DTYPE=None)
    torch.cuda.synchronize()
    g, c = out_gpu.cpu(), out_cpu
    if g.dtype.is_floating_point and acc in ("f16", "bf16"):
        # accumulating in 16 bits, the GPU's tree and the interpreter's order round differently: bound the
        # difference by what any order may lose (2 n u sum|x| for sums, 2 n u |p| for finite products)
        fi = torch.finfo(TORCH[acc])
        gd, cd = g.double(), c.double()
        if op == "cumprod":
            ok = torch.isfinite(gd) & torch.isfinite(cd) & (cd.abs() < fi.max / 4)
            bound = 2 * n * fi.eps * cd.abs()
            gd, cd, bound = gd[ok], cd[ok], bound[ok]
        else:
            mag = x.double().abs().cumsum(0) if op.startswith("cum") else x.double().abs().sum()
            bound = 2 * n * fi.eps * mag
        assert ((gd - cd).abs() <= bound + fi.tiny).all(), (gd, cd)
    elif g.dtype.is_floating_point:
        # the GPU's reduction tree may add in another order than the interpreter
        torch.testing.assert_close(g.double(), c.double(), rtol=2e-2 if dt in ("f16", "bf16") else 1e-5,
                                   atol=1e-2 if acc in ("f16", "bf16") else 1e-4)
    else:
        assert torch.equal(g.to(torch.int64), c.to(torch.int64))
    if op in ("max", "min", "xor_sum") or (op == "sum" and not g.dtype.is_floating_point):
        ref = _np_reference(op, x, acc)
        np.testing.assert_array_equal(g.to(torch.float64).numpy(), np.asarray(ref, dtype=np.float64))
