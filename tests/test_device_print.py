"""tl.device_print / print / tl.static_print in Triton's format.

The expected lines are written here from Triton's documented GPU format (its test_subprocess.py tables):
`pid (x, y, z) idx (i, j)<prefix>[(operand n) ]<value>`, the index padded to the digits of its dimension,
the prefix tidied to end in ": " (and start with " " when longer than 2 characters), integers in decimal,
floats as "%f", hex as "0x" + one digit per nibble. The interpreter prints each element once in row-major
order (a scalar once); a GPU prints each element once (replicated copies are skipped) and a scalar from
every thread, so GPU checks compare line multisets.
"""
import collections
import math
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl

ROOT = Path(__file__).resolve().parents[1]
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
gpu = pytest.mark.gpu
N = 128


@kl.jit
def k_device_print(X, BLOCK: tl.constexpr):
    x = tl.load(X + tl.arange(0, BLOCK))
    tl.device_print("x: ", x)


@kl.jit
def k_print(X, BLOCK: tl.constexpr):
    x = tl.load(X + tl.arange(0, BLOCK))
    print("x:", x)  # Python's print is device_print; Triton adds the space


@kl.jit
def k_hex(X, BLOCK: tl.constexpr):
    tl.device_print("x", tl.load(X + tl.arange(0, BLOCK)), hex=True)


@kl.jit
def k_scalar(S):
    print("x:", tl.load(S))


@kl.jit
def k_large(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tl.device_print("x ", tl.full([BLOCK_M, BLOCK_N], 1, tl.int32) + tl.program_id(1))


@kl.jit
def k_multiple(X, BLOCK: tl.constexpr):
    x = tl.load(X + tl.arange(0, BLOCK))
    print("", x, tl.full((BLOCK,), 1, tl.int32))


@kl.jit
def k_static(X, BLOCK: tl.constexpr, TAG: tl.constexpr):
    x = tl.load(X + tl.arange(0, BLOCK))
    tl.static_print("", x)
    tl.static_print(TAG, BLOCK, X)


@kl.jit
def k_no_operand():
    print("", tl.program_id(0))
    print("no arg")


@kl.jit
def k_pointer(X, BLOCK: tl.constexpr):
    tl.device_print("ptr ", X + tl.arange(0, BLOCK))


@kl.jit
def k_2d(X, BX: tl.constexpr, BY: tl.constexpr):
    x = tl.load(X + tl.arange(0, BX)[:, None] * BY + tl.arange(0, BY)[None, :])
    tl.device_print("", x)


@kl.jit
def k_percent(X):
    tl.device_print("100% ", tl.load(X))


@kl.jit
def k_floats(X, BLOCK: tl.constexpr, HEX: tl.constexpr):
    """Beyond Triton (which cannot print them): bf16 and fp8 print their values, hex floats their bits."""
    x = tl.load(X + tl.arange(0, BLOCK))
    tl.device_print("v", x.to(tl.bfloat16), x.to(tl.float8e5), x > 0, hex=HEX)


# ----------------------------------------------------------------------------------- expected lines


def idx(i, dim):
    w = math.ceil(math.log10(dim))
    return f"{i:{w}}" if w else str(i)


def elem_lines(values, prefix, fmt, pid=(0, 0, 0), operand=None):
    """One line per element (row-major) of `values`: `prefix` already tidied."""
    a = np.asarray(values)
    op = "" if operand is None else f"(operand {operand}) "
    head = "pid (%d, %d, %d)" % pid
    if a.ndim == 0:
        return [f"{head} idx (){prefix}{op}{fmt(a[()])}"]
    return [f"{head} idx ({', '.join(idx(i, d) for i, d in zip(ix, a.shape))}){prefix}{op}{fmt(a[ix])}"
            for ix in np.ndindex(*a.shape)]


def dec(v):
    return f"{v:f}" if isinstance(v, (float, np.floating)) else str(int(v))


def hexw(bits):
    return lambda v: f"0x{int(v) & (2**max(bits, 32) - 1 if bits <= 32 else 2**64 - 1):0{bits // 4}x}"


INT_DTYPES = {"int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32,
              "int64": torch.int64, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def sample(dtype, seed=0):
    """N values of `dtype` with the type's extremes, random values and small integers; never all zeros."""
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        edge = torch.tensor([1.5, -2.25, 1024.0, -0.125, 3.0, 65504.0 if dtype == torch.float16 else 1e6])
        x = torch.cat([edge, torch.randn(N - edge.numel(), generator=g) * 100])
        return x.to(dtype)
    info = torch.iinfo(dtype)
    edge = torch.tensor([info.min, info.max, info.min + 1, info.max - 1, 1, 7])
    x = torch.randint(max(info.min, -2**31), min(info.max, 2**31 - 1) + 1, (N - edge.numel(),), generator=g,
                      dtype=torch.int64)
    return torch.cat([edge, x]).to(dtype)


class Launch:
    """A kernel, its grid and arguments (tensors on the CPU); `launch(device)` runs it there, `build()`
    compiles it for the GPU."""

    def __init__(self, kernel, grid, *args, **kwargs):
        self.kernel, self.grid, self.args, self.kwargs = kernel, grid, args, kwargs

    def __call__(self, device):
        self.kernel[self.grid](*[a.to(device) for a in self.args], **self.kwargs)

    def build(self):
        ck = self.kernel.warmup(*self.args, grid=self.grid, **self.kwargs)
        ck.build_gpu()
        return ck


def expected(case, device_scalar_copies=1):
    """(expected lines, Launch) for a named case."""
    if case.startswith("device_print_") or case.startswith("print_"):
        name = case.split("_", 2)[-1] if case.startswith("device_print_") else case.split("_", 1)[1]
        x = sample(INT_DTYPES[name])
        lines = elem_lines(x.numpy() if x.dtype != torch.float16 else x.double().numpy(), " x: ", dec)
        kern = k_device_print if case.startswith("device_print_") else k_print
        return lines, Launch(kern, (1,), x, BLOCK=N)
    if case.startswith("hex_"):
        name = case[4:]
        x = sample(INT_DTYPES[name])
        bits = torch.iinfo(x.dtype).bits
        return elem_lines(x.numpy(), " x: ", hexw(bits)), Launch(k_hex, (1,), x, BLOCK=N)
    if case.startswith("scalar_"):
        x = sample(INT_DTYPES[case[7:]])[3:4].reshape(())
        v = x.double().item() if x.dtype.is_floating_point else x.item()
        return elem_lines(np.asarray(v), " x: ", dec) * device_scalar_copies, \
            Launch(k_scalar, (1,), x)
    if case == "large":
        lines = [ln for p in range(2) for ln in elem_lines(np.full((64, N), 1 + p), " x: ", dec, pid=(0, p, 0))]
        return lines, Launch(k_large, (1, 2), BLOCK_M=64, BLOCK_N=N)
    if case == "multiple":
        x = sample(torch.int32, 3)
        lines = elem_lines(x.numpy(), ": ", dec, operand=0) + elem_lines(np.ones(N, np.int32), ": ", dec, operand=1)
        return lines, Launch(k_multiple, (1,), x, BLOCK=N)
    if case == "no_operand":
        lines = [ln for p in range(3) for ln in [f"pid ({p}, 0, 0) idx (): {p}"] * device_scalar_copies
                 + [f"pid ({p}, 0, 0) no arg"] * device_scalar_copies]
        return lines, Launch(k_no_operand, (3,))
    if case == "2d":
        x = sample(torch.int32, 4).reshape(4, 32)
        return elem_lines(x.numpy(), ": ", dec), Launch(k_2d, (1,), x, BX=4, BY=32)
    if case == "percent":
        x = torch.tensor([5], dtype=torch.int32)
        return ["pid (0, 0, 0) idx () 100%: 5"] * device_scalar_copies, Launch(k_percent, (1,), x)
    if case in ("floats", "floats_hex"):
        h = case == "floats_hex"
        x = torch.tensor([1.5, -2.0, 0.375, 6.0, -0.0, 448.0, 3.0, -1.0])
        b16 = x.to(torch.bfloat16)
        f8 = x.to(torch.float8_e5m2)
        if h:
            lines = (elem_lines(b16.view(torch.int16).numpy().astype(np.int64) & 0xFFFF, " v: ", hexw(16), operand=0)
                     + elem_lines(f8.view(torch.uint8).numpy(), " v: ", hexw(8), operand=1)
                     + elem_lines((x > 0).numpy(), " v: ", lambda v: f"0x{int(v)}", operand=2))
        else:
            lines = (elem_lines(b16.double().numpy(), " v: ", dec, operand=0)
                     + elem_lines(f8.double().numpy(), " v: ", dec, operand=1)
                     + elem_lines((x > 0).numpy().astype(np.int64), " v: ", dec, operand=2))
        return lines, Launch(k_floats, (1,), x, BLOCK=8, HEX=h)
    raise KeyError(case)


CASES = ([f"device_print_{d}" for d in INT_DTYPES] + [f"scalar_{d}" for d in INT_DTYPES]
         + ["print_int32", "hex_int8", "hex_int16", "hex_int32", "hex_int64", "hex_uint8", "large", "multiple",
            "no_operand", "2d", "floats", "floats_hex", "percent"])


@pytest.mark.parametrize("case", CASES)
def test_print_format_interpreter(case, capsys):
    lines, launch = expected(case)
    launch("cpu")
    got = capsys.readouterr().out.splitlines()
    got = [ln for ln in got if ln.startswith("pid")]
    assert got == lines, "\n".join(f"{g!r} != {w!r}" for g, w in zip(got, lines) if g != w)[:2000] or \
        f"{len(got)} lines, expected {len(lines)}"


def test_examples_read_like_triton():
    """A few lines spelled out, as Triton's own tests expect them."""
    lines, _ = expected("device_print_int32")
    assert lines[0] == f"pid (0, 0, 0) idx (  0) x: {torch.iinfo(torch.int32).min}"
    lines, _ = expected("hex_int16")
    assert lines[0] == "pid (0, 0, 0) idx (  0) x: 0xffff8000"  # Triton widens a narrow signed int first
    assert lines[1] == "pid (0, 0, 0) idx (  1) x: 0x7fff"
    lines, _ = expected("large")
    assert lines[0] == "pid (0, 0, 0) idx ( 0,   0) x: 1"


def test_pointers_print_as_addresses(capsys):
    x = torch.arange(N, dtype=torch.int32)
    k_pointer[(1,)](x, BLOCK=N)
    got = capsys.readouterr().out.splitlines()
    assert len(got) == N and all(re.fullmatch(r"pid \(0, 0, 0\) idx \(\s*\d+\) ptr: 0x[0-9a-f]+", g) for g in got)
    addrs = [int(g.rsplit(" ", 1)[1], 16) for g in got]
    assert [a - addrs[0] for a in addrs] == [4 * i for i in range(N)]


def test_static_print_shows_types_as_triton(capsys):
    x = torch.arange(N, dtype=torch.int32)
    k_static[(1,)](x, BLOCK=N, TAG="tag")
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [" int32[constexpr[128]]", "tag 128 pointer<int32>[]"]


def test_print_prefix_must_be_a_string():
    @kl.jit
    def bad(X):
        tl.device_print(tl.load(X))

    with pytest.raises(kl.CompilationError, match="is not string"):
        bad[(1,)](torch.zeros(1))

    @kl.jit
    def bad2(X):
        tl.device_print("é", tl.load(X))

    with pytest.raises(kl.CompilationError, match="not an ascii string"):
        bad2[(1,)](torch.zeros(1))


# ----------------------------------------------------------------------------------- GPU


GPU_CASES = ["device_print_int8", "device_print_uint8", "device_print_int64", "device_print_float16",
             "device_print_float64", "scalar_int32", "scalar_float32", "print_int32", "hex_int16", "hex_int64",
             "large", "multiple", "no_operand", "2d", "floats", "floats_hex", "percent"]


@needs_ptxas
@pytest.mark.parametrize("case", ["device_print_int8", "device_print_float16", "hex_int64", "multiple",
                                  "no_operand", "2d", "floats_hex", "percent"])
def test_print_assembles(case):
    """The GPU build's printf formats are Triton's (checked on the LLVM IR strings), and ptxas takes them."""
    ck = expected(case)[1].build()
    fmts = re.findall(r'c"(pid [^"]*)\\0a\\00"', ck.asm["llir"])
    assert fmts and "cubin" in ck.asm
    assert all(f.startswith("pid (%u, %u, %u)") for f in fmts)
    if case == "multiple":
        assert {f.split(")", 2)[2] for f in fmts} == {": (operand 0) %i", ": (operand 1) %i"}
    if case == "hex_int64":
        assert fmts == ["pid (%u, %u, %u) idx (%3u) x: 0x%016llx"]
    if case == "2d":
        assert fmts == ["pid (%u, %u, %u) idx (%1u, %2u): %i"]
    if case == "percent":  # a '%' in the prefix prints as itself
        assert fmts == ["pid (%u, %u, %u) idx () 100%%: %i"]


@gpu
@pytest.mark.parametrize("case", GPU_CASES)
def test_print_format_gpu(case):
    code = f"""
        import torch
        from tests.test_device_print import expected
        _, launch = expected({case!r})
        launch("cuda")
        torch.cuda.synchronize()
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    copies = 128 if case.startswith("scalar_") or case in ("no_operand", "percent") else 1  # default num_warps=4: 128 threads
    lines, _ = expected(case, copies)
    got = collections.Counter(ln for ln in proc.stdout.splitlines() if ln.startswith("pid"))
    want = collections.Counter(lines)
    assert got == want, f"missing {list((want - got).items())[:5]}, extra {list((got - want).items())[:5]}"
