"""The bad-kernel catalogue (issue 18): every kind of mistake a user can make in a kernel or a launch ends in a
kernellab exception of the right class that names the kernel and, for mistakes in the source, points at the
right line, whether the kernel comes from a file, from `exec`, or from a `%%kernel` notebook cell.

Each case is a kernel's source (its offending line ends in `# E`) plus the Python that launches it. The
kernel is named after the case. For a CompilationError the test checks `err.kernel`, `err.line` (the marked
line, in the file / exec string / cell as the user numbers it) and that the reason names the problem; for a
LaunchError, that the message names the kernel and the problem. test_errors.py and test_launch_errors.py
check the message format (caret, quoting) in depth; this file checks breadth.
"""
from __future__ import annotations

import importlib.util
import textwrap
import warnings
from typing import NamedTuple

import pytest
import torch

import kernellab as kl

PRELUDE = """import math
import numpy as np
import torch
import kernellab as kl
import kernellab.language as tl
GLOBAL_T = torch.arange(100000)


def plain_helper(x):
    return x.not_a_method()


@kl.jit
def add_one(x):
    return x + 1


def first(a, b):
    return a
"""

CE, LE = kl.CompilationError, kl.LaunchError


class Case(NamedTuple):
    id: str
    exc: type
    words: tuple  # lower-case words the reason / message must contain
    src: str  # the kernel (named k_<id>), the offending line marked `# E` (CompilationError) or none
    launch: str  # Python run after defining: K is the kernel; x, xi, y are tensors


X = "K[(1,)](x, BLOCK=16)"
XI = "K[(1,)](xi, BLOCK=16)"


def c(id, exc, words, body, launch=X, params="x_ptr, BLOCK: tl.constexpr", at_def=False):
    """A case; `at_def`: the error points at the def line (a parameter or the signature is at fault)."""
    head = f"def k_{id}({params}):" + ("  # E" if at_def else "")
    src = f"@kl.jit\n{head}\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"
    return Case(id, exc, tuple(words.split("|")) if words else (), src, launch)


CASES = [
    # ---------------------------------------------------------------- unsupported Python
    c("with", CE, "with", """
        with open("f") as f:  # E
            pass
    """),
    c("try", CE, "try", """
        try:  # E
            pass
        except Exception:
            pass
    """),
    c("lambda", CE, "lambda", """
        f = lambda v: v  # E
    """),
    c("listcomp", CE, "list comprehension", """
        xs = [i for i in range(3)]  # E
    """),
    c("global_stmt", CE, "global", """
        global GLOBAL_T  # E
    """),
    c("yield", CE, "yield", """
        yield 1  # E
    """),
    c("classdef", CE, "classdef", """
        class A:  # E
            pass
    """),
    c("delete", CE, "delete", """
        v = 1
        del v  # E
    """),
    c("star_params", CE, "*rest", "tl.store(x_ptr, 1.0)", params="x_ptr, *rest", at_def=True,
      launch="K[(1,)](x)"),
    c("return_value", CE, "cannot return", """
        v = tl.load(x_ptr)
        return v  # E
    """),
    c("async_def", CE, "async def", "tl.store(x_ptr, 1.0)", at_def=True),
    # ---------------------------------------------------------------- names
    c("undefined_name", CE, "no_such_variable", """
        v = no_such_variable + 1  # E
    """),
    c("undefined_tl_attr", CE, "no_such_builtin", """
        v = tl.no_such_builtin(1)  # E
    """),
    c("branch_only_var", CE, "v", """
        if tl.program_id(0) > 0:
            v = 1.0
        tl.store(x_ptr, v)  # E
    """),
    c("module_tensor", CE, "torch tensor|kernel argument", """
        tl.store(x_ptr + tl.arange(0, BLOCK), GLOBAL_T)  # E
    """),
    c("torch_function", CE, "torch function|tl.", """
        v = tl.load(x_ptr + tl.arange(0, BLOCK))
        tl.store(x_ptr + tl.arange(0, BLOCK), torch.exp(v))  # E
    """),
    c("numpy_function", CE, "numpy function", """
        v = tl.load(x_ptr + tl.arange(0, BLOCK))
        tl.store(x_ptr + tl.arange(0, BLOCK), np.exp(v))  # E
    """),
    c("math_function", CE, "math function", """
        v = tl.load(x_ptr + tl.arange(0, BLOCK))
        tl.store(x_ptr + tl.arange(0, BLOCK), math.exp(v))  # E
    """),
    c("plain_python_function", CE, "plain_helper|@kl.jit", """
        v = tl.load(x_ptr + tl.arange(0, BLOCK))
        tl.store(x_ptr + tl.arange(0, BLOCK), plain_helper(v))  # E
    """),
    c("none_value", CE, "none", """
        v = None
        tl.store(x_ptr, v + 1.0)  # E
    """),
    c("string_value", CE, "str", """
        tl.store(x_ptr, "abc")  # E
    """),
    # ---------------------------------------------------------------- ranges and shapes
    c("arange_runtime", CE, "constexpr", """
        offs = tl.arange(0, n)  # E
        tl.store(x_ptr + offs, 1.0)
    """, launch="K[(1,)](x, 16)", params="x_ptr, n"),
    c("arange_float", CE, "float|int", """
        offs = tl.arange(0, BLOCK)  # E
    """, launch="K[(1,)](x, BLOCK=16.0)"),
    c("arange_bool", CE, "bool|not a size", """
        offs = tl.arange(0, BLOCK)  # E
    """, launch="K[(1,)](x, BLOCK=True)"),
    c("arange_not_pow2", CE, "power of 2", """
        offs = tl.arange(0, BLOCK)  # E
    """, launch="K[(1,)](x, BLOCK=24)"),
    c("arange_empty", CE, "power of 2", """
        offs = tl.arange(8, 4)  # E
    """),
    c("arange_too_big", CE, "2^20", """
        offs = tl.arange(0, BLOCK)  # E
    """, launch="K[(1,)](x, BLOCK=2**24)"),
    c("full_bool_shape", CE, "bool", """
        v = tl.full((BLOCK,), 1.0, tl.float32)  # E
    """, launch="K[(1,)](x, BLOCK=True)"),
    c("full_not_pow2", CE, "power", """
        v = tl.zeros((12,), tl.float32)  # E
    """),
    c("full_out_of_range", CE, "does not fit", """
        v = tl.full((BLOCK,), 2**40 + 7, tl.int32)  # E
    """),
    c("full_runtime_shape", CE, "shape", """
        v = tl.zeros((n,), tl.float32)  # E
    """, launch="K[(1,)](x, 16)", params="x_ptr, n"),
    c("broadcast_mismatch", CE, "16|32", """
        v = tl.arange(0, 16) + tl.arange(0, 32)  # E
    """),
    c("broadcast_too_big", CE, "2^20", """
        offs = tl.arange(0, BLOCK)
        v = offs[:, None] + offs[None, :]  # E
    """, launch="K[(1,)](x, BLOCK=4096)"),
    c("reshape_numel", CE, "reshape", """
        v = tl.reshape(tl.arange(0, 16), (4, 8))  # E
    """),
    c("expand_dims_axis", CE, "axis", """
        v = tl.expand_dims(tl.arange(0, 16), 3)  # E
    """),
    c("where_shapes", CE, "16|32", """
        v = tl.where(tl.arange(0, 16) > 3, tl.arange(0, 32), 0)  # E
    """),
    c("program_id_axis", CE, "0, 1, or 2", """
        p = tl.program_id(3)  # E
    """),
    # ---------------------------------------------------------------- memory
    c("store_non_pointer", CE, "pointer", """
        tl.store(1.0, 2.0)  # E
    """),
    c("load_non_pointer", CE, "pointer", """
        v = tl.load(1.0)  # E
    """),
    c("load_mask_shape", CE, "mask", """
        offs = tl.arange(0, 16)
        v = tl.load(x_ptr + offs, mask=tl.arange(0, 32) < 5)  # E
    """),
    c("store_mask_shape", CE, "mask", """
        offs = tl.arange(0, 16)
        tl.store(x_ptr + offs, 1.0, mask=tl.arange(0, 32) < 5)  # E
    """),
    c("store_2d_mask_1d_pointer", CE, "mask|broadcast the pointer", """
        offs = tl.arange(0, 16)
        tl.store(x_ptr + offs, 1.0, mask=offs[:, None] < offs[None, :])  # E
    """),
    c("store_2d_value_1d_pointer", CE, "value|broadcast the pointer", """
        offs = tl.arange(0, 16)
        tl.store(x_ptr + offs, offs[:, None] + offs[None, :])  # E
    """),
    c("store_tensor_scalar_pointer", CE, "scalar pointer", """
        tl.store(x_ptr, tl.arange(0, 16))  # E
    """),
    c("int_mask_load", CE, "boolean", """
        offs = tl.arange(0, 16)
        v = tl.load(x_ptr + offs, mask=offs)  # E
    """),
    c("float_mask_store", CE, "boolean", """
        offs = tl.arange(0, 16)
        tl.store(x_ptr + offs, 1.0, mask=offs * 1.0)  # E
    """),
    c("other_without_mask", CE, "other|mask", """
        v = tl.load(x_ptr + tl.arange(0, 16), other=0.0)  # E
    """),
    c("scalar_pointer_tensor_mask", CE, "scalar", """
        v = tl.load(x_ptr, mask=tl.arange(0, 16) < 3)  # E
    """),
    c("pointer_times_two", CE, "pointer", """
        p = x_ptr * 2  # E
    """),
    c("pointer_plus_float", CE, "pointer|integers", """
        p = x_ptr + 1.5  # E
    """),
    c("atomic_non_pointer", CE, "pointer", """
        tl.atomic_add(1.0, 2.0)  # E
    """),
    c("block_ptr_with_mask", CE, "boundary_check", """
        p = tl.make_block_ptr(x_ptr, (16,), (1,), (0,), (16,), (0,))
        v = tl.load(p, mask=tl.arange(0, 16) < 3)  # E
    """),
    c("block_ptr_ranks", CE, "make_block_ptr", """
        p = tl.make_block_ptr(x_ptr, (16, 16), (1,), (0,), (16,), (0,))  # E
    """),
    c("advance_count", CE, "offsets", """
        p = tl.make_block_ptr(x_ptr, (16,), (1,), (0,), (16,), (0,))
        p = tl.advance(p, (1, 2))  # E
    """),
    c("boundary_check_dim", CE, "boundary_check", """
        p = tl.make_block_ptr(x_ptr, (16,), (1,), (0,), (16,), (0,))
        v = tl.load(p, boundary_check=(3,))  # E
    """),
    c("padding_option", CE, "padding_option", """
        p = tl.make_block_ptr(x_ptr, (16,), (1,), (0,), (16,), (0,))
        v = tl.load(p, boundary_check=(0,), padding_option="ones")  # E
    """),
    # ---------------------------------------------------------------- arithmetic and types
    c("int_floordiv_zero", CE, "division|0", """
        v = tl.arange(0, 16) // 0  # E
    """),
    c("int_mod_zero", CE, "remainder|0", """
        v = tl.arange(0, 16) % 0  # E
    """),
    c("float_floordiv", CE, "//", """
        v = tl.load(x_ptr + tl.arange(0, 16)) // 2.0  # E
    """),
    c("float_bitand", CE, "integer", """
        v = tl.load(x_ptr + tl.arange(0, 16)) & 1  # E
    """),
    c("float_shift", CE, "integer", """
        v = tl.load(x_ptr + tl.arange(0, 16)) << 1  # E
    """),
    c("scalar_out_of_range", CE, "out of range", """
        v = tl.load(x_ptr + tl.arange(0, 16)).to(tl.int8) + 1000  # E
    """),
    c("negative_with_unsigned", CE, "negative", """
        v = tl.load(x_ptr + tl.arange(0, 16)).to(tl.uint32) + -1  # E
    """),
    c("int_of_tensor", CE, "int()", """
        v = int(tl.load(x_ptr))  # E
    """),
    c("float_of_tensor", CE, "float()", """
        v = float(tl.load(x_ptr))  # E
    """),
    c("bad_dtype_string", CE, "dtype", """
        v = tl.load(x_ptr).to("float99")  # E
    """),
    c("pow_runtime", CE, "compile-time", """
        v = tl.load(x_ptr) ** tl.load(x_ptr)  # E
    """),
    # ---------------------------------------------------------------- dot, reductions, scans
    c("dot_inner_mismatch", CE, "dot", """
        a = tl.zeros((16, 32), tl.float16)
        b = tl.zeros((16, 16), tl.float16)
        d = tl.dot(a, b)  # E
    """),
    c("dot_1d", CE, "dot", """
        a = tl.zeros((16,), tl.float16)
        d = tl.dot(a, a)  # E
    """),
    c("dot_precision", CE, "input_precision", """
        a = tl.zeros((16, 16), tl.float32)
        d = tl.dot(a, a, input_precision="fast")  # E
    """),
    c("reduce_axis_range", CE, "axis", """
        s = tl.sum(tl.arange(0, 16), axis=2)  # E
    """),
    c("reduce_axis_runtime", CE, "axis", """
        s = tl.sum(tl.arange(0, 16), axis=tl.program_id(0))  # E
    """),
    c("reduce_scalar", CE, "scalar", """
        s = tl.sum(tl.load(x_ptr), axis=0)  # E
    """),
    c("xor_sum_float", CE, "integers", """
        s = tl.xor_sum(tl.load(x_ptr + tl.arange(0, 16)), 0)  # E
    """),
    c("sum_pointer", CE, "pointer|load", """
        s = tl.sum(x_ptr + tl.arange(0, 16), 0)  # E
    """),
    c("cumsum_axis", CE, "axis", """
        s = tl.cumsum(tl.arange(0, 16), axis=1)  # E
    """),
    c("reduce_plain_fn", CE, "combine_fn|@kl.jit", """
        s = tl.reduce(tl.arange(0, 16), 0, first)  # E
    """),
    c("scan_plain_fn", CE, "combine_fn", """
        s = tl.associative_scan(tl.arange(0, 16), 0, first)  # E
    """),
    # ---------------------------------------------------------------- calls and compile-time checks
    c("nested_argcount", CE, "add_one", """
        v = add_one(1, 2)  # E
    """),
    c("nested_bad_kwarg", CE, "add_one", """
        v = add_one(1, y=2)  # E
    """),
    c("recursive_call", CE, "recursive", """
        k_recursive_call(x_ptr, BLOCK)  # E
    """),
    c("static_range_call", CE, "for", """
        r = tl.static_range(4)  # E
    """),
    c("static_assert_false", CE, "static_assert", """
        tl.static_assert(BLOCK == 32)  # E
    """),
    c("static_assert_runtime", CE, "compile-time", """
        tl.static_assert(tl.load(x_ptr) > 0)  # E
    """),
    c("not_callable", CE, "callable", """
        v = 3(1)  # E
    """),
    c("call_a_dtype_attr", CE, "to", """
        v = tl.float32.to(tl.int32)  # E
    """),
    # ---------------------------------------------------------------- launches: arguments
    c("missing_constexpr", CE, "missing constexpr|block", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x)", at_def=True),
    c("misspelled_constexpr", CE, "blok|did you mean", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x, BLOK=16)",
      at_def=True),
    c("too_many_args", CE, "argument", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x, x, x, BLOCK=16)", at_def=True),
    c("sparse_tensor", LE, "sparse|to_dense", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x.to_sparse(), BLOCK=16)"),
    c("complex_tensor", LE, "complex64|x_ptr", "tl.store(x_ptr, 1.0)",
      launch="K[(1,)](torch.zeros(4, dtype=torch.complex64), BLOCK=16)"),
    c("list_argument", LE, "unsupported type|list", "tl.store(x_ptr, 1.0)", launch="K[(1,)]([1, 2], BLOCK=16)"),
    c("huge_int_argument", LE, "n", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x, 2**70)", params="x_ptr, n"),
    c("meta_tensor", LE, "meta", "tl.store(x_ptr, 1.0)", launch="K[(1,)](torch.empty(4, device='meta'), BLOCK=16)"),
    # ---------------------------------------------------------------- launches: grid and options
    c("grid_none", LE, "grid", "tl.store(x_ptr, 1.0)", launch="K[None](x, BLOCK=16)"),
    c("grid_x_too_big", LE, "2147483647", "tl.store(x_ptr, 1.0)", launch="K[(2**31,)](x, BLOCK=16)"),
    c("grid_y_too_big", LE, "65535", "tl.store(x_ptr, 1.0)", launch="K[(1, 70000)](x, BLOCK=16)"),
    c("grid_z_too_big", LE, "65535", "tl.store(x_ptr, 1.0)", launch="K[(1, 1, 65536)](x, BLOCK=16)"),
    c("grid_float", LE, "int|cdiv", "tl.store(x_ptr, 1.0)", launch="K[(2.5,)](x, BLOCK=16)"),
    c("grid_negative", LE, "negative", "tl.store(x_ptr, 1.0)", launch="K[(-1,)](x, BLOCK=16)"),
    c("grid_four_dims", LE, "1 to 3", "tl.store(x_ptr, 1.0)", launch="K[(1, 1, 1, 1)](x, BLOCK=16)"),
    c("grid_lambda_none", LE, "grid", "tl.store(x_ptr, 1.0)", launch="K[lambda meta: None](x, BLOCK=16)"),
    c("grid_string", LE, "grid", "tl.store(x_ptr, 1.0)", launch="K['abc'](x, BLOCK=16)"),
    c("num_warps_zero", LE, "num_warps", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x, BLOCK=16, num_warps=0)"),
    c("num_warps_three", LE, "power of 2", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x, BLOCK=16, num_warps=3)"),
    c("num_warps_64", LE, "num_warps", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x, BLOCK=16, num_warps=64)"),
    c("num_warps_float", LE, "num_warps", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x, BLOCK=16, num_warps=4.0)"),
    c("num_stages_zero", LE, "num_stages", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x, BLOCK=16, num_stages=0)"),
    c("num_ctas_zero", LE, "num_ctas", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x, BLOCK=16, num_ctas=0)"),
    c("maxnreg_huge", LE, "maxnreg", "tl.store(x_ptr, 1.0)", launch="K[(1,)](x, BLOCK=16, maxnreg=1000)"),
    c("warmup_num_warps", LE, "num_warps", "tl.store(x_ptr, 1.0)", launch="K.warmup(x, BLOCK=16, num_warps=48)"),
]
CASE_IDS = [k.id for k in CASES]


def _kernel_source(case: Case) -> str:
    if case.id == "async_def":
        return case.src.replace("def k_", "async def k_")
    return case.src


def _module_text(case: Case) -> str:
    return PRELUDE + "\n\n" + _kernel_source(case)


def _marked_line(text: str) -> int | None:
    hits = [i + 1 for i, ln in enumerate(text.splitlines()) if ln.rstrip().endswith("# E")]
    assert len(hits) <= 1
    return hits[0] if hits else None


def _launch_ns(ns: dict) -> dict:
    g = torch.Generator().manual_seed(0)
    ns.update(x=torch.randn(64, generator=g), xi=torch.randint(-50, 50, (64,), generator=g, dtype=torch.int32))
    return ns


def _raised(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the test inspects what came out
            return e
    return None


def _check(case: Case, err, line: int | None, filename: str | None):
    assert err is not None, f"{case.id}: no error"
    assert isinstance(err, case.exc), f"{case.id}: {type(err).__name__}: {err}"
    name = f"k_{case.id}"
    text = str(err)
    if isinstance(err, kl.CompilationError):
        assert err.kernel == name, f"{case.id}: kernel {err.kernel!r}: {err}"
        if line is not None:
            assert err.line == line, f"{case.id}: line {err.line}, expected {line}: {err}"
        if filename is not None:
            assert err.filename == filename, (err.filename, filename)
        reason = err.reason.lower()
    else:
        assert name in text, f"{case.id}: the message does not name the kernel: {text}"
        reason = text.lower()
    for w in case.words:
        assert w.lower() in reason, f"{case.id}: {w!r} not in {reason!r}"
    assert "traceback" not in reason


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_from_a_file(case, tmp_path):
    text = _module_text(case)
    path = tmp_path / f"bad_{case.id}.py"
    path.write_text(text)

    def run():
        spec = importlib.util.spec_from_file_location(f"bad_{case.id}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        ns = _launch_ns({"K": getattr(mod, f"k_{case.id}"), "torch": torch})
        exec(case.launch, ns)

    _check(case, _raised(run), _marked_line(text), str(path))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_from_exec(case):
    text = _module_text(case)

    def run():
        ns: dict = {}
        exec(text, ns)
        exec(case.launch, _launch_ns({**ns, "K": ns[f"k_{case.id}"]}))

    _check(case, _raised(run), _marked_line(text), None)


def test_the_catalogue_is_large_and_its_cases_distinct():
    assert len(CASES) >= 80
    assert len(set(CASE_IDS)) == len(CASES)
    compile_cases = [k for k in CASES if k.exc is CE and "# E" in k.src]
    assert len(compile_cases) >= 60


# ------------------------------------------------------------------ through the %%kernel magic


@pytest.fixture(scope="module")
def ip():
    pytest.importorskip("IPython")
    import builtins

    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or builtins.get_ipython()  # None when another module started the global shell
    # start_ipython() hands the shell out once; let a later module's fixture get the same singleton back
    if hasattr(start_ipython, "already_called"):
        del start_ipython.already_called
    shell.run_line_magic("load_ext", "kernellab")
    return shell


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_from_a_kernel_cell(case, ip):
    """The kernel is defined by a `%%kernel` cell (line 1 is the magic's line, as the notebook numbers the
    cell) and launched from the next cell; the launch raises the same error, pointing into the cell."""
    from IPython.utils.capture import capture_output

    ns = ip.user_ns
    exec(PRELUDE, ns)
    _launch_ns(ns)
    cell = "%%kernel\n" + _kernel_source(case)
    with capture_output() as cap:
        defined = ip.run_cell(cell)
    shown = "\n".join(o.data.get("text/plain", "") for o in cap.outputs) + cap.stdout
    assert defined.error_in_exec is None and defined.error_before_exec is None, shown
    ns["K"] = ns[f"k_{case.id}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with capture_output():
            result = ip.run_cell(case.launch)
    err = result.error_in_exec
    marked = _marked_line(case.src)
    _check(case, err, None if marked is None else marked + 1, None)
    if isinstance(err, kl.CompilationError):
        assert err.filename.startswith("<kernel-cell-"), err.filename
