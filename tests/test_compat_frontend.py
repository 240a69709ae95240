"""What Triton's frontend tests (test_compile_errors, test_frontend, test_line_info, test_compile_only) expect of
`import triton` served by kernellab: where errors point and which type they have, the globals a kernel may read,
compile-time min/max, `triton._filecheck.run_parser`, the interpreter's def-line report, `triton.compile` for a
given GPU target and the fp8 formats that target refuses."""
import pickle
import shutil
import sys
import warnings

import numpy as np
import pytest
import torch

import kernellab
import kernellab.compat
import kernellab.language as tl

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")

PLAIN_GLOBAL = 7
CONST_GLOBAL = tl.constexpr(5)
DTYPE_GLOBAL = tl.float16




def _compile(triton, fn, signature=None, constexprs=None, **kw):
    return triton.compile(triton.compiler.ASTSource(fn=fn, signature=signature or {}, constexprs=constexprs or {}),
                          **kw)


# --------------------------------------------------------------------------- error positions, types, causes

def test_error_names_its_line_from_the_def(triton):
    @triton.jit
    def kernel():
        x = 1  # noqa: F841
        1.0 << 1

    with pytest.raises(triton.CompilationError) as e:
        _compile(triton, kernel)
    text = str(e.value)
    assert "at 3:4:" in text and e.value.def_line == 3 and e.value.col == 4  # the def is line 1, dedented
    assert text.splitlines()[0].startswith(f"in kernel 'kernel' at {e.value.filename}:{e.value.line}: ")
    assert e.value.__cause__ is None  # an operator, not a builtin call: no cause, as in Triton


def test_builtin_call_error_keeps_the_bare_reason_as_cause(triton):
    @triton.jit
    def kernel():
        tl.arange(2, 7)

    with pytest.raises(triton.CompilationError) as e:
        _compile(triton, kernel)
    assert "power of 2" in str(e.value.__cause__) and e.value.__cause__.__traceback__ is None


def test_static_assert_is_compile_time_assertion_failure(triton):
    from triton.compiler.errors import CompileTimeAssertionFailure

    @triton.jit
    def kernel(N: tl.constexpr):
        tl.static_assert(N % 16 == 0, "N must be a multiple of 16")

    _compile(triton, kernel, {"N": "constexpr"}, {"N": 32})
    with pytest.raises(CompileTimeAssertionFailure) as e:
        _compile(triton, kernel, {"N": "constexpr"}, {"N": 24})
    assert isinstance(e.value, kernellab.errors.StaticAssertionError)
    assert e.value.__cause__ is None and "N must be a multiple of 16" in str(e.value) and "at 2:4:" in str(e.value)


def test_compilation_error_pickles():
    err = kernellab.CompilationError("k", "bad thing", "f.py", 12, 4, "    x = y", 3)
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.def_line == 3 and back.reason == "bad thing"


def test_return_inside_a_loop_names_the_rule(triton):
    @triton.jit
    def kernel(n):
        i = 0
        while i < n:
            if i == 5:
                return
            i += 1

    with pytest.raises(triton.CompilationError, match="Cannot have `return` statements inside `while` or `for`"):
        _compile(triton, kernel, {"n": "i32"})


# --------------------------------------------------------------------------- globals a kernel may read

@kernellab.jit
def reads_plain_global(out_ptr):
    tl.store(out_ptr, PLAIN_GLOBAL)


@kernellab.jit
def twice(x):
    return x * 2


@kernellab.jit
def reads_allowed_globals(out_ptr):
    x = tl.full((8,), CONST_GLOBAL, DTYPE_GLOBAL)  # a constexpr, a dtype, a module (tl), a @jit function
    tl.store(out_ptr + tl.arange(0, 8), twice(x.to(tl.float32)))


def test_plain_global_is_refused_under_compat(triton):
    with pytest.raises(triton.CompilationError, match="Cannot access global variable PLAIN_GLOBAL") as e:
        _compile(triton, reads_plain_global, {"out_ptr": "*i32"})
    assert "tl.constexpr" in str(e.value)
    out = torch.full((8,), float("nan"), device=DEVICE)
    reads_allowed_globals[(1,)](out)
    assert (out == 10).all()


def test_plain_global_allowed_by_the_knob_and_without_compat(triton, monkeypatch):
    monkeypatch.setattr(triton.knobs.compilation, "allow_non_constexpr_globals", True)
    _compile(triton, reads_plain_global, {"out_ptr": "*i32"})
    monkeypatch.undo()
    kernellab.compat.uninstall()  # kernellab alone reads a plain global as a compile-time value
    try:
        reads_plain_global.cache.clear()
        out = torch.full((1,), -1, dtype=torch.int32, device=DEVICE)
        reads_plain_global[(1,)](out)
        assert out.item() == 7
    finally:
        kernellab.compat.install()


def test_closure_variable_is_refused_like_a_global(triton):
    block = 16

    @triton.jit
    def kernel(out_ptr):
        tl.store(out_ptr + tl.arange(0, block), 1.0)

    with pytest.raises(triton.CompilationError, match="Cannot access global variable block"):
        _compile(triton, kernel, {"out_ptr": "*fp32"})


# --------------------------------------------------------------------------- compile-time min / max

@kernellab.jit
def minmax_kernel(x_ptr, out_ptr, A: tl.constexpr, B: tl.constexpr):
    offs = tl.arange(0, 16)
    x = tl.load(x_ptr + offs)
    lo: tl.constexpr = min(A, B)
    hi: tl.constexpr = max(A, B, 0.25)
    tl.store(out_ptr + offs, min(x, hi) + lo)  # min of a tensor: tl.minimum


def _check_minmax(device):
    x = torch.linspace(-3, 3, 16, dtype=torch.float32, device=device)
    out = torch.full_like(x, float("nan"))
    minmax_kernel[(1,)](x, out, A=1.5, B=-2.0)
    want = np.minimum(x.cpu().double().numpy(), 1.5) - 2.0
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-6)
    for bad in (float("nan"), -0.0):
        with pytest.raises(kernellab.CompilationError, match="NaN or -0.0"):
            minmax_kernel[(1,)](x, out, A=1.0, B=bad)


def test_constexpr_min_max_refuse_nan_and_negative_zero():
    _check_minmax("cpu")


@pytest.mark.gpu
def test_constexpr_min_max_refuse_nan_and_negative_zero_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    _check_minmax("cuda")


# --------------------------------------------------------------------------- triton._filecheck, rewriter

def test_run_parser_compiles_for_arguments(triton):
    from triton._filecheck import filecheck_test, run_parser

    @triton.jit
    def kernel(x_ptr, N: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, N), 1.0)

    module = run_parser(kernel, args=(torch.empty(16), 16))
    assert "tt.store" in module.str_nodebug()

    @triton.jit
    def bad(N: tl.constexpr):
        tl.arange(0, N)

    with pytest.raises(triton.CompilationError):
        run_parser(bad, args=(12,))
    @triton.jit
    def no_args():
        tl.arange(0, 16)

    with pytest.raises(triton.TritonError, match="Triton's TTIR text"):
        filecheck_test(no_args)()  # TTIR spelling checks are not served: said plainly, not passed silently


def test_rewriter_reports_the_def_line(triton):
    @triton.autotune(configs=[triton.Config({"B": 16})], key=[])
    @triton.jit
    def kernel(x, B: tl.constexpr):  # the def line
        pass

    line = sys._getframe().f_lineno - 3
    assert kernel.fn.rewriter.def_file_lineno == line and kernel.fn.rewrite() is kernel.fn.fn
    assert kernel.fn.rewriter.filename == __file__


# --------------------------------------------------------------------------- triton.compile for a target

@needs_ptxas
def test_compile_for_a_given_target(triton):
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def add(a, b, c):
        idx = tl.arange(0, 32)
        tl.store(c + idx, tl.load(a + idx) + tl.load(b + idx))

    k = _compile(triton, add, {"a": "*fp32", "b": "*fp32", "c": "*fp32"}, target=GPUTarget("cuda", 100, 32))
    assert ".target sm_100a" in k.asm["ptx"] and k.asm["cubin"]
    k90 = _compile(triton, add, {"a": "*fp32", "b": "*fp32", "c": "*fp32"}, target=GPUTarget("cuda", 90, 32))
    assert ".target sm_90a" in k90.asm["ptx"]
    with pytest.raises(triton.TritonError, match="NVIDIA"):
        _compile(triton, add, {"a": "*fp32", "b": "*fp32", "c": "*fp32"}, target=GPUTarget("hip", "gfx942", 64))


@pytest.mark.parametrize("name", ["float8e5", "float8e4nv", "float8e4b15", "float8e4b8", "float8e5b16"])
def test_compile_for_a_gpu_refuses_its_unsupported_fp8(triton, monkeypatch, name):
    """Compiling for a GPU refuses the AMD fp8 formats even where the kernel drops the values (Triton's frontend
    does); e4b15 warns on Hopper; under TRITON_INTERPRET=1 every format compiles (the interpreter runs them)."""
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def kernel(dtype: tl.constexpr):
        a = tl.full((64, 64), 0.0, dtype)
        tl.dot(a, a)

    def compile_it():
        return _compile(triton, kernel, {"dtype": "constexpr"}, {"dtype": getattr(tl, name)},
                        target=GPUTarget("cuda", 90, 32))

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    compile_it()
    monkeypatch.delenv("TRITON_INTERPRET")
    if name in ("float8e4b8", "float8e5b16"):
        with pytest.raises(triton.CompilationError) as e:
            compile_it()
        assert "not supported in this architecture" in str(e.value.__cause__)
    elif name == "float8e4b15":
        with pytest.warns(UserWarning, match="the use of fp8e4b15 is deprecated on Hopper and later"):
            compile_it()
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile_it()


# --------------------------------------------------------------------------- aggregates, builtins, recursion

@tl.core._aggregate
class Scaled:
    value: tl.tensor
    factor: tl.tensor

    def __init__(self, value, factor):
        self.value = value
        self.factor = factor

    @kernellab.jit
    def __getitem__(self, i):  # a device method used by `s[i]`
        return self.value * self.factor + i


@tl.core.builtin
def pair_list(a, b, _semantic=None):  # Triton's spelling of the builtin convention
    assert _semantic is not None
    return [a, b]


@tl.core._aggregate
class Square:
    side: tl.constexpr
    area: tl.constexpr

    def __init__(self, side):
        self.side = tl.constexpr(side)
        self.area = tl.constexpr(self.side * self.side)  # constexpr arithmetic stays constexpr


@kernellab.jit
def halves_sum(x):
    """Sums a power-of-two tile by recursing on halves: each level is another specialization (its shape)."""
    if x.shape[0] == 1:
        return x
    else:
        a, b = x.reshape((x.shape[0] // 2, 2)).split()
        return halves_sum(a) + halves_sum(b)


@kernellab.jit
def aggregate_kernel(x_ptr, out_ptr, total_ptr):
    offs = tl.arange(0, 16)
    factor = 3  # an assigned number: a scalar tensor, as in Triton, so it fits a tensor field
    s = Scaled(tl.load(x_ptr + offs), factor)
    sq = Square(4)
    sizes = pair_list(sq.area, sq.side)
    tl.static_assert(sizes[0] == 16 and sizes[1] == 4)
    tl.store(out_ptr + offs, s[sizes[1]])
    tl.store(total_ptr + tl.arange(0, 1), halves_sum(tl.load(x_ptr + offs)))


def _check_aggregates(device):
    x = torch.linspace(-2, 5, 16, dtype=torch.float32, device=device)
    out = torch.full_like(x, float("nan"))
    total = torch.full((1,), float("nan"), device=device)
    aggregate_kernel[(1,)](x, out, total)
    xd = x.cpu().double().numpy()
    np.testing.assert_allclose(out.cpu().numpy(), xd * 3 + 4, rtol=1e-6)
    np.testing.assert_allclose(total.cpu().numpy(), [xd.sum()], rtol=1e-5)


def test_aggregates_builtins_and_shape_recursion():
    _check_aggregates("cpu")
    c = tl.constexpr(6)
    assert (c * c).value == 36 and (2 + c).value == 8 and (c // 4).value == 1 and (-c).value == -6


@pytest.mark.gpu
def test_aggregates_builtins_and_shape_recursion_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    _check_aggregates("cuda")


def test_recursion_with_the_same_specialization_is_refused():
    @kernellab.jit
    def forever(x):
        return forever(x)

    @kernellab.jit
    def kernel(x_ptr):
        tl.store(x_ptr, forever(tl.load(x_ptr)))

    with pytest.raises(kernellab.CompilationError, match="same argument types"):
        kernel.warmup(torch.empty(1), grid=(1,))


# --------------------------------------------------------------------------- warmup with dtypes, caches, nvdisasm

@kernellab.jit
def copy_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


def test_warmup_takes_dtypes_for_tensors():
    ck = copy_kernel.warmup(torch.float16, torch.float32, BLOCK=64, grid=(1,))
    assert "f16" in ck.signature and "f32" in ck.signature
    x = torch.linspace(-1, 1, 64, dtype=torch.float16)
    y = torch.full((64,), float("nan"))
    ck[(1,)](x, y)  # the same specialization runs real tensors
    np.testing.assert_array_equal(y.numpy(), x.float().numpy())


def test_autotuner_warmup_and_device_caches_clear(triton):
    @triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64}, num_warps=2)], key=[])
    @triton.jit
    def tuned(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))

    cks = tuned.warmup(torch.float32, torch.float32, grid=(1,))
    assert len(cks) == 2 and cks[1].options["num_warps"] == 2 and len(tuned.fn.cache) == 2
    tuned.fn.device_caches.clear()
    assert not tuned.fn.cache


def test_nvdisasm_knob_finds_the_disassembler_or_raises(triton, monkeypatch):
    from kernellab.viz.data import find_nvdisasm

    found = find_nvdisasm()
    if found is None:
        with pytest.raises(RuntimeError, match="nvdisasm"):
            triton.knobs.nvidia.nvdisasm.path
    else:
        assert triton.knobs.nvidia.nvdisasm.path == found
