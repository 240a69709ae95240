"""User errors give a `kernellab.CompilationError` that quotes the kernel's own line.

Every offending line in this file ends with a `# E:<tag>` marker; `line_of(tag)` finds its line
number in this file's text, so the tests check the exact file line the error points at, the quoted
source line, the caret under it, and a one-line reason that names the problem.
"""
import pathlib

import numpy as np
import pytest

import kernellab as kl
import kernellab.language as tl

THIS_FILE = pathlib.Path(__file__).resolve()
LINES = THIS_FILE.read_text().splitlines()


def line_of(tag: str, lines=LINES) -> int:
    hits = [i + 1 for i, text in enumerate(lines) if text.rstrip().endswith(f"# E:{tag}")]
    assert len(hits) == 1, f"marker E:{tag} found {len(hits)} times"
    return hits[0]


def check(err: kl.CompilationError, tag: str, *words: str, kernel: str | None = None, lines=LINES,
          filename: str | None = None):
    """The error points at the marked line, quotes it with a caret, and its reason names the problem."""
    assert isinstance(err, kl.CompilationError)
    line = line_of(tag, lines)
    want_file = str(THIS_FILE) if filename is None else filename
    assert err.line == line, f"error at line {err.line}, expected {line}: {err}"
    if filename is None:
        assert pathlib.Path(err.filename).resolve() == THIS_FILE
    else:
        assert err.filename == want_file
    if kernel is not None:
        assert err.kernel == kernel
    text = str(err)
    src = lines[line - 1]
    code = src.split("# E:")[0].strip()
    assert code in text, text
    assert err.source_line is not None and code in err.source_line
    # Header, then the source line, then the caret line under it.
    out = text.splitlines()
    assert out[0].startswith(f"in kernel '{err.kernel}' at {err.filename}:{line}: "), text
    assert out[0].endswith(err.reason)
    assert code in out[1]
    assert out[2].strip() == "^"
    caret = out[2].index("^")
    assert 0 <= caret - 4 < len(err.source_line.rstrip())
    assert not err.source_line[caret - 4].isspace(), f"caret points at blank space:\n{text}"
    # One-line reason naming the problem.
    assert "\n" not in err.reason and err.reason.strip()
    for w in words:
        assert w.lower() in err.reason.lower(), f"{w!r} not in reason: {err.reason!r}"
    # Not chained to an internal traceback: the kernellab message is the last thing a user sees (a cause,
    # kept for code that reads it as Triton's tests do, is the bare reason with no frames).
    assert err.__cause__ is None or err.__cause__.__traceback__ is None
    assert err.__suppress_context__ or err.__context__ is None
    return text


def x32():
    return np.zeros(64, dtype=np.float32)


# --------------------------------------------------------------------------- 1. unsupported constructs


@kl.jit
def k_with(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    with open("f") as f:  # E:with
        f.read()
    tl.store(x_ptr + offs, 0.0)


@kl.jit
def k_try(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    try:  # E:try
        tl.store(x_ptr + offs, 0.0)
    except ValueError:
        pass


@kl.jit
def k_lambda(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    f = lambda v: v + 1  # noqa: E731  # E:lambda
    tl.store(x_ptr + offs, f(offs))


@kl.jit
def k_listcomp(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    vals = [offs + i for i in range(4)]  # E:listcomp
    tl.store(x_ptr + offs, vals[0])


@kl.jit
def k_break(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(n):
        acc += 1.0
        if i > 3:
            break  # E:break
    tl.store(x_ptr + offs, acc)


@kl.jit
def k_continue_while(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    i = 0
    while i < n:
        i += 1
        continue  # E:continue
    tl.store(x_ptr + offs, i)


@kl.jit
def k_del(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    del offs  # E:del
    tl.store(x_ptr, 0.0)


@pytest.mark.parametrize("kernel, tag, words", [
    (k_with, "with", ["unsupported", "with"]),
    (k_try, "try", ["unsupported", "try"]),
    (k_lambda, "lambda", ["lambda", "not supported"]),
    (k_listcomp, "listcomp", ["list comprehension", "not supported"]),
    (k_break, "break", ["break", "not supported"]),
    (k_continue_while, "continue", ["continue", "not supported"]),
    (k_del, "del", ["unsupported"]),
], ids=["with", "try", "lambda", "listcomp", "break", "continue", "del"])
def test_unsupported_construct(kernel, tag, words):
    with pytest.raises(kl.CompilationError) as ei:
        kernel.warmup(x32(), 8, BLOCK=32) if "n" in kernel.arg_names else kernel.warmup(x32(), BLOCK=32)
    check(ei.value, tag, *words, kernel=kernel.__name__)


@kl.jit
def k_static_break(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for i in tl.static_range(4):
        if i == 2:
            break  # E:static_break
    tl.store(x_ptr + offs, 0.0)


@kl.jit
def k_return_in_loop(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for i in range(n):
        tl.store(x_ptr + offs, 0.0)
        return  # E:return_in_loop


@kl.jit
def k_matmul_op(x_ptr, BLOCK: tl.constexpr):
    a = tl.zeros((BLOCK, BLOCK), tl.float32)
    c = a @ a  # E:matmul_op
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.sum(c, axis=0))


@pytest.mark.parametrize("kernel, tag, words", [
    (k_static_break, "static_break", ["break", "not supported"]),
    (k_return_in_loop, "return_in_loop", ["return", "loop"]),
    (k_matmul_op, "matmul_op", ["@", "tl.dot"]),
], ids=["static_range-break", "return-in-loop", "matmul-operator"])
def test_unsupported_construct_points_at_it(kernel, tag, words):
    with pytest.raises(kl.CompilationError) as ei:
        kernel.warmup(x32(), 8, BLOCK=32) if "n" in kernel.arg_names else kernel.warmup(x32(), BLOCK=32)
    check(ei.value, tag, *words, kernel=kernel.__name__)


def test_kernel_defined_inside_a_function():
    @kl.jit
    def local_kernel(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        with open("f"):  # E:local_with
            pass
        tl.store(x_ptr + offs, 0.0)

    with pytest.raises(kl.CompilationError) as ei:
        local_kernel.warmup(x32(), BLOCK=32)
    check(ei.value, "local_with", "unsupported", "with", kernel="local_kernel")


# --------------------------------------------------------------------------- 2. undefined name


@kl.jit
def k_undefined(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offz)  # noqa: F821  # E:undefined


def test_undefined_name():
    with pytest.raises(kl.CompilationError) as ei:
        k_undefined.warmup(x32(), BLOCK=32)
    check(ei.value, "undefined", "offz", "not defined", kernel="k_undefined")


@kl.jit
def k_undefined_attr(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.not_a_function(offs))  # E:undefined_attr


def test_undefined_attribute_of_tl():
    with pytest.raises(kl.CompilationError) as ei:
        k_undefined_attr.warmup(x32(), BLOCK=32)
    check(ei.value, "undefined_attr", "not_a_function")


@kl.jit
def k_not_tuple(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    flag = not (0, 0)  # E:not_tuple
    tl.store(x_ptr + offs, flag)


@kl.jit
def k_neg_tuple(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    t = -(offs, offs)  # E:neg_tuple
    tl.store(x_ptr + offs, t[0])


@pytest.mark.parametrize("kernel, tag", [(k_not_tuple, "not_tuple"), (k_neg_tuple, "neg_tuple")])
def test_unary_operator_on_tuple(kernel, tag):
    # Triton's rule: unary operators are not defined on tuples (`not (0, 0)` is an error, not a constant False)
    with pytest.raises(kl.CompilationError) as ei:
        kernel.warmup(x32(), BLOCK=32)
    check(ei.value, tag, "tuple")


# --------------------------------------------------------------------------- 3. broadcasting


@kl.jit
def k_broadcast(x_ptr, BLOCK: tl.constexpr):
    a = tl.arange(0, BLOCK)
    b = tl.arange(0, 2 * BLOCK)
    c = a + b  # E:broadcast
    tl.store(x_ptr + a, c)


def test_broadcast_shape_mismatch():
    with pytest.raises(kl.CompilationError) as ei:
        k_broadcast.warmup(x32(), BLOCK=32)
    check(ei.value, "broadcast", "broadcast", "[32]", "[64]")


# --------------------------------------------------------------------------- 4. tl.arange


@kl.jit
def k_arange_npot(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)  # E:arange_npot
    tl.store(x_ptr + offs, 0.0)


@kl.jit
def k_arange_runtime(x_ptr, n):
    offs = tl.arange(0, n)  # E:arange_runtime
    tl.store(x_ptr + offs, 0.0)


def test_arange_not_power_of_2():
    with pytest.raises(kl.CompilationError) as ei:
        k_arange_npot.warmup(x32(), BLOCK=48)
    check(ei.value, "arange_npot", "power of 2", "48")


def test_arange_runtime_bound():
    with pytest.raises(kl.CompilationError) as ei:
        k_arange_runtime.warmup(x32(), 37)
    check(ei.value, "arange_runtime", "constexpr")


# --------------------------------------------------------------------------- 5. store to non-pointer


@kl.jit
def k_store_int(x_ptr, n, BLOCK: tl.constexpr):
    x = tl.load(x_ptr)
    tl.store(n, x)  # E:store_int


def test_store_to_non_pointer():
    with pytest.raises(kl.CompilationError) as ei:
        k_store_int.warmup(x32(), 7, BLOCK=32)
    check(ei.value, "store_int", "tl.store", "pointer", "i32")


@kl.jit
def k_load_int(x_ptr, n):
    x = tl.load(n)  # E:load_int
    tl.store(x_ptr, x)


def test_load_from_non_pointer():
    with pytest.raises(kl.CompilationError) as ei:
        k_load_int.warmup(x32(), 7)
    check(ei.value, "load_int", "tl.load", "pointer")


# --------------------------------------------------------------------------- 6. mask shape


@kl.jit
def k_load_mask(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = tl.arange(0, 2 * BLOCK) < n
    x = tl.load(x_ptr + offs, mask=m)  # E:load_mask
    tl.store(x_ptr + offs, x)


@kl.jit
def k_store_mask(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = tl.arange(0, 2 * BLOCK) < n
    tl.store(x_ptr + offs, 1.0, mask=m)  # E:store_mask


@kl.jit
def k_store_value_shape(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.zeros((2 * BLOCK,), tl.float32)
    tl.store(x_ptr + offs, v, mask=offs < n)  # E:store_value_shape


def test_load_mask_shape_mismatch():
    with pytest.raises(kl.CompilationError) as ei:
        k_load_mask.warmup(x32(), 8, BLOCK=32)
    check(ei.value, "load_mask", "mask", "[64]", "[32]")


def test_store_mask_shape_mismatch():
    with pytest.raises(kl.CompilationError) as ei:
        k_store_mask.warmup(x32(), 8, BLOCK=32)
    check(ei.value, "store_mask", "mask", "[64]", "[32]")


def test_store_value_shape_mismatch_blames_the_value():
    with pytest.raises(kl.CompilationError) as ei:
        k_store_value_shape.warmup(x32(), 8, BLOCK=32)
    text = check(ei.value, "store_value_shape", "value", "[64]", "[32]")
    assert "mask shape" not in ei.value.reason, text


# --------------------------------------------------------------------------- 7. other without mask


@kl.jit
def k_other(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, other=0.0)  # E:other
    tl.store(x_ptr + offs, x)


def test_other_without_mask():
    with pytest.raises(kl.CompilationError) as ei:
        k_other.warmup(x32(), BLOCK=32)
    check(ei.value, "other", "other", "mask")


# --------------------------------------------------------------------------- 8. missing constexpr


@kl.jit
def k_needs_block(x_ptr, n, BLOCK: tl.constexpr):  # E:missing_constexpr
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)


def test_missing_constexpr_at_warmup():
    with pytest.raises(kl.CompilationError) as ei:
        k_needs_block.warmup(x32(), 8)
    check(ei.value, "missing_constexpr", "BLOCK", "constexpr", "missing", kernel="k_needs_block")


def test_missing_constexpr_at_launch():
    with pytest.raises(kl.CompilationError) as ei:
        k_needs_block[(1,)](x32(), 8)
    check(ei.value, "missing_constexpr", "BLOCK", "constexpr", "missing", kernel="k_needs_block")


@kl.jit
def k_multiline_def(
    x_ptr,
    n,
    BLOCK: tl.constexpr,  # E:multiline_constexpr
    NUM: tl.constexpr = 2,
):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0 + NUM, mask=offs < n)


def test_missing_constexpr_points_at_the_parameter():
    with pytest.raises(kl.CompilationError) as ei:
        k_multiline_def.warmup(x32(), 8)
    check(ei.value, "multiline_constexpr", "BLOCK", "constexpr", "missing")
    assert "argument(s) BLOCK for" in ei.value.reason  # NUM has a default: not missing


# --------------------------------------------------------------------------- 9. wrong number of arguments


@kl.jit
def k_two_args(x_ptr, n):  # E:two_args
    tl.store(x_ptr, n)


def test_too_many_arguments_at_launch():
    with pytest.raises(kl.CompilationError) as ei:
        k_two_args[(1,)](x32(), 8, 9)
    check(ei.value, "two_args", "argument", kernel="k_two_args")


def test_too_few_arguments_at_launch():
    with pytest.raises(kl.CompilationError) as ei:
        k_two_args[(1,)](x32())
    check(ei.value, "two_args", "argument", "n", kernel="k_two_args")


def test_unknown_keyword_argument_at_warmup():
    with pytest.raises(kl.CompilationError) as ei:
        k_two_args.warmup(x32(), 8, BLOKC=32)
    check(ei.value, "two_args", "BLOKC")


@kl.jit
def add_one(x):
    return x + 1


@kl.jit
def k_calls_add_one(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = add_one(x, x)  # E:nested_argcount
    tl.store(x_ptr + offs, y)


def test_wrong_argument_count_in_nested_jit_call():
    with pytest.raises(kl.CompilationError) as ei:
        k_calls_add_one.warmup(x32(), BLOCK=32)
    check(ei.value, "nested_argcount", "add_one", "argument", kernel="k_calls_add_one")


# --------------------------------------------------------------------------- 10. one-branch variable


@kl.jit
def k_one_branch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if n > 4:  # E:one_branch_if
        y = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, y * 2)  # E:one_branch_use


def test_variable_defined_on_one_branch():
    with pytest.raises(kl.CompilationError) as ei:
        k_one_branch.warmup(x32(), 8, BLOCK=32)
    check(ei.value, "one_branch_use", "'y'", "one branch")
    assert f"line {line_of('one_branch_if')}" in ei.value.reason


@kl.jit
def k_one_branch_else(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if n > 4:
        pass
    else:
        z = 1.0
    tl.store(x_ptr + offs, z)  # E:one_branch_else_use


def test_variable_defined_on_else_branch_only():
    with pytest.raises(kl.CompilationError) as ei:
        k_one_branch_else.warmup(x32(), 8, BLOCK=32)
    check(ei.value, "one_branch_else_use", "'z'", "one branch")


# --------------------------------------------------------------------------- 11. tl.dot


@kl.jit
def k_dot(x_ptr, BLOCK: tl.constexpr):
    a = tl.zeros((BLOCK, 32), tl.float32)
    b = tl.zeros((16, BLOCK), tl.float32)
    c = tl.dot(a, b)  # E:dot
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.sum(c, axis=0))


def test_dot_inner_dimension_mismatch():
    with pytest.raises(kl.CompilationError) as ei:
        k_dot.warmup(x32(), BLOCK=16)
    check(ei.value, "dot", "tl.dot", "inner", "32", "16")


# --------------------------------------------------------------------------- 12. reduction axis


@kl.jit
def k_axis(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    s = tl.sum(x, axis=2)  # E:axis
    tl.store(x_ptr, s)


def test_reduction_axis_out_of_range():
    with pytest.raises(kl.CompilationError) as ei:
        k_axis.warmup(x32(), BLOCK=32)
    check(ei.value, "axis", "axis 2", "out of range", "rank 1")


@kl.jit
def k_runtime_axis(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    s = tl.sum(tl.load(x_ptr + offs), axis=n)  # E:runtime_axis
    tl.store(x_ptr, s)


def test_reduction_axis_not_constexpr():
    with pytest.raises(kl.CompilationError) as ei:
        k_runtime_axis.warmup(x32(), 0, BLOCK=32)
    check(ei.value, "runtime_axis", "axis", "constexpr")


# --------------------------------------------------------------------------- 13. `**` and parameter kinds


@kl.jit
def k_pow_runtime(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    y = x ** 2  # E:pow_runtime
    tl.store(x_ptr + tl.arange(0, BLOCK), y)


@kl.jit
def k_pow_augmented(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    x **= BLOCK  # E:pow_aug
    tl.store(x_ptr + tl.arange(0, BLOCK), x)


@kl.jit
def k_pow_zero(x_ptr, BLOCK: tl.constexpr):
    z = (BLOCK - BLOCK) ** -1  # E:pow_zero
    tl.store(x_ptr, z)


@pytest.mark.parametrize("kernel, tag, words", [
    (k_pow_runtime, "pow_runtime", ["**", "constexpr", "x * x"]),
    (k_pow_augmented, "pow_aug", ["**", "constexpr"]),
    (k_pow_zero, "pow_zero", ["0 ** -1"]),
], ids=["runtime-operand", "augmented", "zero-to-negative"])
def test_power_needs_compile_time_operands(kernel, tag, words):
    """`**` folds only constexprs and literals; a runtime operand (or an invalid power) is a clear error."""
    with pytest.raises(kl.CompilationError) as ei:
        kernel.warmup(x32(), BLOCK=32)
    check(ei.value, tag, *words, kernel=kernel.__name__)


@kl.jit
def helper_varargs(x, *rest):  # E:varargs
    return x


@kl.jit
def k_calls_helper_varargs(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, helper_varargs(tl.load(x_ptr + offs)))


def test_star_args_parameter_is_refused():
    with pytest.raises(kl.CompilationError) as ei:
        k_calls_helper_varargs.warmup(x32(), BLOCK=32)
    check(ei.value, "varargs", "*rest", "not supported")


@kl.jit
def k_kwonly_needs_constexpr(x_ptr, *, BLOCK: tl.constexpr):  # E:kwonly_missing
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


def test_missing_keyword_only_constexpr():
    with pytest.raises(kl.CompilationError) as ei:
        k_kwonly_needs_constexpr.warmup(x32())
    check(ei.value, "kwonly_missing", "BLOCK", "missing")


# --------------------------------------------------------------------------- 14. builtins given the wrong kind of value


def _plain_add(a, b):
    return a + b


_lambda_add = lambda a, b: a + b  # noqa: E731


@kl.jit
def k_zeros_str(x_ptr, BLOCK: tl.constexpr):
    z = tl.zeros((BLOCK,), 'int32')  # E:zeros_str
    tl.store(x_ptr + tl.arange(0, BLOCK), z)


@kl.jit
def k_to_str(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(x_ptr + tl.arange(0, BLOCK), x.to('float16'))  # E:to_str


@kl.jit
def k_abs_ptr(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    y = tl.abs(x_ptr + offs)  # E:abs_ptr
    tl.store(x_ptr + offs, y)


@kl.jit
def k_sum_ptr(x_ptr, BLOCK: tl.constexpr):
    s = tl.sum(x_ptr + tl.arange(0, BLOCK), axis=0)  # E:sum_ptr
    tl.store(x_ptr, s)


@kl.jit
def k_reduce_plain(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    s = tl.reduce(x, 0, _plain_add)  # E:reduce_plain
    tl.store(x_ptr, s)


@kl.jit
def k_scan_lambda(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    s = tl.associative_scan(x, 0, _lambda_add)  # E:scan_lambda
    tl.store(x_ptr + tl.arange(0, BLOCK), s)


@pytest.mark.parametrize("kernel, tag, words", [
    (k_zeros_str, "zeros_str", ["tl.zeros", "dtype", "'int32'", "tl.int32"]),
    (k_to_str, "to_str", ["dtype", "'float16'", "tl.float16"]),
    (k_abs_ptr, "abs_ptr", ["tl.abs", "pointer", "tl.load"]),
    (k_sum_ptr, "sum_ptr", ["tl.sum", "pointer", "tl.load"]),
    (k_reduce_plain, "reduce_plain", ["tl.reduce", "combine_fn", "_plain_add", "@kl.jit"]),
    (k_scan_lambda, "scan_lambda", ["tl.associative_scan", "combine_fn", "lambda", "@kl.jit"]),
], ids=["zeros-dtype-string", "to-dtype-string", "abs-of-pointer", "sum-of-pointer", "reduce-plain-function",
        "scan-lambda"])
def test_builtin_given_wrong_kind_of_value(kernel, tag, words):
    """Not a Python AttributeError ("'str' object has no attribute 'is_floating'") but what is wrong and what
    to write instead."""
    with pytest.raises(kl.CompilationError) as ei:
        kernel.warmup(x32(), BLOCK=32)
    check(ei.value, tag, *words, kernel=kernel.__name__)
    assert "object has no attribute" not in ei.value.reason


# --------------------------------------------------------------------------- nested @jit functions


@kl.jit
def bad_helper(x):
    y = x + tl.arange(0, 64)  # E:helper
    return y


@kl.jit
def k_calls_bad_helper(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = bad_helper(x)
    tl.store(x_ptr + offs, y)


def test_error_in_nested_function_points_at_its_line():
    with pytest.raises(kl.CompilationError) as ei:
        k_calls_bad_helper.warmup(x32(), BLOCK=32)
    check(ei.value, "helper", "broadcast")


@kl.jit
def undefined_in_helper(x):
    return x + missing_name  # noqa: F821  # E:helper_undefined


@kl.jit
def k_calls_undefined_helper(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, undefined_in_helper(tl.load(x_ptr + offs)))


def test_undefined_name_in_nested_function():
    with pytest.raises(kl.CompilationError) as ei:
        k_calls_undefined_helper.warmup(x32(), BLOCK=32)
    check(ei.value, "helper_undefined", "missing_name", "not defined")


# --------------------------------------------------------------------------- exec() kernels

EXEC_SRC = '''\
import kernellab as kl
import kernellab.language as tl


@kl.jit
def k_exec(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x + 1.0, mask=offs < n)


@kl.jit
def k_exec_bad(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = x + tl.arange(0, 2 * BLOCK)  # E:exec_bad
    tl.store(x_ptr + offs, y, mask=offs < n)
'''
EXEC_LINES = EXEC_SRC.splitlines()


def test_exec_compiled_with_filename():
    ns = {}
    exec(compile(EXEC_SRC, "<cell-3>", "exec"), ns)
    ck = ns["k_exec"].warmup(x32(), 8, BLOCK=32)
    assert ck is not None
    with pytest.raises(kl.CompilationError) as ei:
        ns["k_exec_bad"].warmup(x32(), 8, BLOCK=32)
    check(ei.value, "exec_bad", "broadcast", kernel="k_exec_bad", lines=EXEC_LINES, filename="<cell-3>")


def test_plain_exec():
    ns = {}
    exec(EXEC_SRC, ns)
    ns["k_exec"].warmup(x32(), 8, BLOCK=32)
    with pytest.raises(kl.CompilationError) as ei:
        ns["k_exec_bad"].warmup(x32(), 8, BLOCK=32)
    check(ei.value, "exec_bad", "broadcast", kernel="k_exec_bad", lines=EXEC_LINES, filename="<string>")


# --------------------------------------------------------------------------- formatting and chaining


def test_message_format_and_no_chaining():
    with pytest.raises(kl.CompilationError) as ei:
        k_broadcast.warmup(x32(), BLOCK=32)
    err = ei.value
    line = line_of("broadcast")
    lines = str(err).splitlines()
    assert lines[0].startswith(f"in kernel 'k_broadcast' at {err.filename}:{line}: ")
    assert lines[1] == "    " + err.source_line.rstrip()
    assert err.source_line.strip() == LINES[line - 1].strip()
    assert lines[2] == "    " + " " * err.col + "^"
    assert err.__cause__ is None or err.__cause__.__traceback__ is None
    assert err.__suppress_context__ or err.__context__ is None
    # The caret sits under the statement's first character.
    assert LINES[line - 1].strip().startswith("c = a + b")
