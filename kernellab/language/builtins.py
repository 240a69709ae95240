"""The `tl.*` functions. Each is a thin layer over the compiler's `Semantic` (`_sem`)."""
from __future__ import annotations

import builtins as _py

from ..compiler.semantic import as_dtype
from ..errors import StaticAssertFailed
from .core import PropagateNan, bfloat16, builtin, float32, int1, int32, tensor, uint32, unwrap
from .core import tuple as tl_tuple

# --------------------------------------------------------------------------- programs and creation


@builtin
def program_id(axis, _sem=None):
    return _sem.program_id(axis)


@builtin
def num_programs(axis, _sem=None):
    return _sem.program_id(axis, num=True)


@builtin
def arange(start, end, _sem=None):
    return _sem.arange(start, end)


@builtin
def full(shape, value, dtype, _sem=None):
    return _sem.full(shape, value, dtype, "tl.full")


@builtin
def zeros(shape, dtype, _sem=None):
    return _sem.full(shape, 0, dtype, "tl.zeros")


@builtin
def zeros_like(input, _sem=None):
    input = _sem.to_tensor(input)
    return _sem.full(input.shape, 0, input.dtype) if input.shape else _sem.const(0, input.dtype)


@builtin
def full_like(input, value, _sem=None):
    input = _sem.to_tensor(input)
    return _sem.full(input.shape, value, input.dtype) if input.shape else _sem.const(value, input.dtype)


def cdiv(x, div, _sem=None):
    """Ceiling division; works on Python ints (host side) and on tensors (in kernels)."""
    x, div = unwrap(x), unwrap(div)
    return (x + div - 1) // div


cdiv.__kl_builtin__ = False  # plain Python: the frontend traces it like a @jit helper


# --------------------------------------------------------------------------- memory


@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False, _sem=None):
    return _sem.load(pointer, mask, other, boundary_check, unwrap(padding_option), unwrap(cache_modifier),
                     unwrap(eviction_policy), unwrap(volatile))


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy="", _sem=None):
    return _sem.store(pointer, value, mask, boundary_check, unwrap(cache_modifier), unwrap(eviction_policy))


@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order, _sem=None):
    return _sem.make_block_ptr(base, shape, strides, offsets, block_shape, order)


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, padding_option="zero", _sem=None):
    return _sem.make_tensor_descriptor(base, shape, strides, block_shape, padding_option)


@builtin
def load_tensor_descriptor(desc, offsets, _sem=None):
    return _sem.descriptor_load(desc, offsets)


@builtin
def store_tensor_descriptor(desc, offsets, value, _sem=None):
    return _sem.descriptor_store(desc, offsets, value)


@builtin
def advance(base, offsets, _sem=None):
    return _sem.advance(base, offsets)


def _atomic(kind):
    def f(pointer, val, mask=None, sem=None, scope=None, _sem=None):
        return _sem.atomic(kind, pointer, val, mask, sem, scope)

    f.__name__ = f"atomic_{kind}"
    return builtin(f)


atomic_add = _atomic("add")
atomic_max = _atomic("max")
atomic_min = _atomic("min")
atomic_xchg = _atomic("xchg")
atomic_and = _atomic("and")
atomic_or = _atomic("or")
atomic_xor = _atomic("xor")


@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None, _sem=None):
    return _sem.atomic_cas(pointer, cmp, val, sem, scope)


# --------------------------------------------------------------------------- elementwise


@builtin
def where(condition, x, y, _sem=None):
    cond = unwrap(condition)
    if isinstance(cond, tensor) and cond.dtype != int1:
        # as Triton (which plans to make it an error): a non-boolean condition is compared with zero
        import warnings

        warnings.warn(f"tl.where with a non-boolean condition is deprecated; got {cond.dtype.name} (compare it, "
                      "e.g. `c != 0`)", UserWarning, stacklevel=2)
    return _sem.where(condition, x, y)


@builtin
def minimum(x, y, propagate_nan=PropagateNan.NONE, _sem=None):
    return _sem.minmax("min", x, y, unwrap(propagate_nan))


@builtin
def maximum(x, y, propagate_nan=PropagateNan.NONE, _sem=None):
    return _sem.minmax("max", x, y, unwrap(propagate_nan))


@builtin
def clamp(x, min, max, propagate_nan=PropagateNan.NONE, _sem=None):
    nan = unwrap(propagate_nan)
    return _sem.minmax("min", _sem.minmax("max", x, min, nan, "tl.clamp"), max, nan, "tl.clamp")


def _math(name):
    def f(x, _sem=None):
        return _sem.math(name, x)

    f.__name__ = name
    return builtin(f)


abs = _math("abs")
exp = _math("exp")
exp2 = _math("exp2")
log = _math("log")
log2 = _math("log2")
sqrt = _math("sqrt")
sqrt_rn = _math("sqrt_rn")
rsqrt = _math("rsqrt")
sin = _math("sin")
cos = _math("cos")
erf = _math("erf")
floor = _math("floor")
ceil = _math("ceil")


@builtin
def add(x, y, sanitize_overflow=True, _sem=None):
    """`x + y` as a function (Triton's; `sanitize_overflow` only matters to Triton's debug mode)."""
    return _sem.binary("+", x, y)


@builtin
def sub(x, y, sanitize_overflow=True, _sem=None):
    return _sem.binary("-", x, y)


@builtin
def mul(x, y, sanitize_overflow=True, _sem=None):
    return _sem.binary("*", x, y)


@builtin
def map_elementwise(scalar_fn, *args, pack=1, _sem=None):
    """Apply the @jit function `scalar_fn` to each element (or each `pack` elements) of the broadcast `args`:
    per-element control flow where tl.where would compute both sides. One tensor, or a tuple for several
    results."""
    combine = _user_combine(_sem, scalar_fn, "tl.map_elementwise")
    outs = _sem.map_elementwise([unwrap(a) for a in args], lambda xs: combine(xs, []), unwrap(pack))
    return outs[0] if len(outs) == 1 else tl_tuple(outs)


@builtin
def inline_asm_elementwise(asm, constraints, args, dtype, is_pure, pack, _sem=None):
    """Inline assembly (PTX) over tensors, `pack` elements per instance, like Triton. GPU only: the CPU
    interpreter cannot run it (Triton's interpreter cannot either)."""
    dtype = unwrap(dtype)
    many = isinstance(dtype, (list, tuple))
    outs = _sem.inline_asm(unwrap(asm), unwrap(constraints), [unwrap(a) for a in unwrap(args)],
                           [unwrap(d) for d in dtype] if many else [dtype], unwrap(is_pure), unwrap(pack))
    return tl_tuple(outs) if many else outs[0]


@builtin
def to_tensor(x, _sem=None):
    """A Python number as a scalar of its literal type (int32, fp32, ...); a tensor unchanged."""
    return _sem.to_tensor(x)


@builtin
def fma(x, y, z, _sem=None):
    return _sem.math("fma", x, y, z)


@builtin
def sigmoid(x, _sem=None):
    x = _sem.numeric(x, "tl.sigmoid")
    return 1.0 / (1.0 + exp(-x, _sem=_sem))


@builtin
def umulhi(x, y, _sem=None):
    x, y = _sem.numeric(x, "tl.umulhi"), _sem.numeric(y, "tl.umulhi")
    if not (x.dtype.is_int() and y.dtype.is_int()):
        raise TypeError(f"tl.umulhi needs integers, got {x.dtype} and {y.dtype}")
    ct = x.dtype if x.dtype.bits >= y.dtype.bits else y.dtype
    x, y = _sem.broadcast_pair(_sem.cast(x, ct), _sem.cast(y, ct))
    return _sem.emit("tt.umulhi", [x, y], x.type)


@builtin
def fdiv(x, y, ieee_rounding=False, _sem=None):
    if unwrap(ieee_rounding):
        return div_rn(x, y, _sem=_sem)
    return _sem.binary("/", x, y)


@builtin
def div_rn(x, y, _sem=None):
    q = _sem.binary("/", x, y)  # types and broadcasting as for `/`
    op = q.handle.owner
    op.name = "tt.precise_divf"
    return q


@builtin
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False, _sem=None):
    return _sem.cast(input, unwrap(dtype), bitcast=unwrap(bitcast), rounding=unwrap(fp_downcast_rounding))


# --------------------------------------------------------------------------- shapes


@builtin
def trans(input, *dims, _sem=None):
    dims = [unwrap(d) for d in dims]
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = list(dims[0])
    if not dims:  # as in Triton: swap the last two axes (a batched 2-D transpose)
        rank = len(_sem.to_tensor(input).shape)
        if rank < 2:
            raise ValueError("tl.trans needs a tensor of rank >= 2 (it swaps the last two axes)")
        dims = list(range(rank - 2)) + [rank - 1, rank - 2]
    return _sem.permute(input, dims)


@builtin
def permute(input, *dims, _sem=None):
    dims = [unwrap(d) for d in dims]
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = list(dims[0])
    return _sem.permute(input, dims)


@builtin
def reshape(input, *shape, can_reorder=False, _sem=None):
    shape = [unwrap(s) for s in shape]
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = list(shape[0])
    return _sem.reshape(input, shape, unwrap(can_reorder))


@builtin
def view(input, *shape, _sem=None):
    return reshape(input, *shape, _sem=_sem)


@builtin
def ravel(x, can_reorder=False, _sem=None):
    x = _sem.to_tensor(x)
    return _sem.reshape(x, (x.numel,))


@builtin
def item(input, _sem=None):
    """The one element of a 1-element tensor as a scalar (Triton's unsplat)."""
    return _sem.item(input)


@builtin
def expand_dims(input, axis, _sem=None):
    return _sem.expand_dims(input, axis)


@builtin
def broadcast_to(input, *shape, _sem=None):
    shape = [unwrap(s) for s in shape]
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = list(shape[0])
    return _sem.broadcast_to(input, shape)


@builtin
def broadcast(input, other, _sem=None):
    return _sem.broadcast_pair(_sem.to_tensor(input), _sem.to_tensor(other))


@builtin
def join(a, b, _sem=None):
    return _sem.join(a, b)


@builtin
def split(a, _sem=None):
    return _sem.split(a)


@builtin
def cat(input, other, can_reorder=False, dim=0, _sem=None):
    if unwrap(dim) != 0:
        raise ValueError("tl.cat concatenates along dimension 0 only")
    return _sem.cat(input, other)


@builtin
def gather(src, index, axis, _sem=None):
    """src's elements along `axis` picked by `index` (like torch.gather); the result has index's shape."""
    return _sem.gather(src, index, axis)


@builtin
def histogram(input, num_bins, mask=None, _sem=None):
    """i32 counts of the values 0 .. num_bins-1 in a 1-D integer tensor (bins of width 1 from 0)."""
    return _sem.histogram(input, num_bins, mask)


# --------------------------------------------------------------------------- dot


@builtin
def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=float32, _sem=None):
    prec = unwrap(input_precision)
    if prec is None and unwrap(allow_tf32) is not None:
        prec = "tf32" if unwrap(allow_tf32) else "ieee"
    limit = unwrap(max_num_imprecise_acc)
    if limit is not None and isinstance(input, tensor) and isinstance(other, tensor) and input.shape \
            and input.dtype.is_fp8() and other.dtype.is_fp8() and limit > input.shape[-1]:
        # an fp8 dot accumulates at most this many products in reduced precision: more than K is a mistake
        from ..errors import SemanticError

        raise SemanticError(f"max_num_imprecise_acc ({limit}) must be <= K ({input.shape[-1]})")
    return _sem.dot(input, other, acc, prec, unwrap(out_dtype), limit)


# --------------------------------------------------------------------------- reductions and scans


def _combine_op(sem, kind, a, b):
    if kind == "sum":
        return a + b
    if kind == "prod":
        return a * b
    if kind == "max":
        return sem.minmax("max", a, b)
    if kind == "min":
        return sem.minmax("min", a, b)
    if kind == "xor":
        return a ^ b
    raise AssertionError(kind)


def _pick_sum_dtype(dt, dtype=None):
    """Triton's accumulator for sums and cumsums: the `dtype=` asked for, else int32 / uint32 (same sign;
    int1 counts as unsigned, like Triton) for integers under 32 bits, else the input's own dtype."""
    if dtype is not None:
        return dtype
    if dt.is_int() and dt.bits < 32:
        return int32 if dt.kind == "int" else uint32
    return dt


def _promote_bf16(sem, x):
    """Triton computes max/min/cumsum/cumprod of bfloat16 in float32 (no bf16 compare or max in hardware)."""
    return sem.cast(x, float32) if x.dtype == bfloat16 else x


def _promote_minmax(sem, x):
    """Triton's tl.max / tl.min (without indices) of types under 32 bits: floats in float32, integers
    (signed, unsigned or bool) in int32. The result keeps that wider type."""
    x = _promote_bf16(sem, x)
    if x.dtype.bits < 32:
        x = sem.cast(x, float32 if x.dtype.is_floating() else int32)
    return x


_REDUCE_NAMES = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min", "xor": "tl.xor_sum"}
_SCAN_NAMES = {"sum": "tl.cumsum", "prod": "tl.cumprod"}


def _simple_reduce(kind, input, axis, keep_dims, sem, dtype=None, scan=False, reverse=False):
    """sum / max / min / xor_sum / cumsum / cumprod with Triton 3.6's promotions (see standard.py there):
    sum: `_pick_sum_dtype`, bf16 kept; cumsum: bf16 -> f32, then `_pick_sum_dtype`; cumprod: bf16 -> f32;
    max / min: `_promote_minmax`; xor_sum: integers only, no promotion."""
    what = (_SCAN_NAMES if scan else _REDUCE_NAMES)[kind]  # for messages
    input = sem.numeric(input, what)
    dtype = unwrap(dtype)
    if dtype is not None:
        dtype = as_dtype(dtype, f"{what}'s dtype")
    if kind == "sum":
        if scan:
            input = _promote_bf16(sem, input)
        input = sem.cast(input, _pick_sum_dtype(input.dtype, dtype))
    elif kind == "prod":
        input = _promote_bf16(sem, input)
    elif kind in ("max", "min"):
        input = _promote_minmax(sem, input)
    elif kind == "xor" and not input.dtype.is_int():
        raise TypeError(f"tl.xor_sum needs integers, got {input.dtype}")
    return sem.reduction([input], axis, lambda a, b: _combine_op(sem, kind, a[0], b[0]), unwrap(keep_dims),
                         scan=scan, reverse=unwrap(reverse))


@builtin
def sum(input, axis=None, keep_dims=False, dtype=None, _sem=None):
    return _simple_reduce("sum", input, axis, keep_dims, _sem, dtype)


@builtin
def xor_sum(input, axis=None, keep_dims=False, _sem=None):
    return _simple_reduce("xor", input, axis, keep_dims, _sem)


def _arg_combine(sem, which, tie_break_left):
    def combine(a, b):
        av, ai = a
        bv, bi = b
        if av.dtype.is_floating():
            # a NaN wins, like torch.argmax: (a > b) | (isnan(a) & !isnan(b)), written as the unordered compare
            # !(a <= b) (a > b or either NaN) and an ordered b, two compares where the first form took three
            better = ~(av <= bv if which == "max" else av >= bv) & (bv == bv)
        else:
            better = av > bv if which == "max" else av < bv
        tie = av == bv
        take_a = better | (tie & (ai < bi)) if unwrap(tie_break_left) else better | (tie & (ai > bi))
        return [sem.where(take_a, av, bv), sem.where(take_a, ai, bi)]

    return combine


def _minmax_reduce(which, input, axis, return_indices, tie_break_left, keep_dims, sem):
    input = sem.numeric(input, f"tl.{which}")
    if not unwrap(return_indices):
        return _simple_reduce(which, input, axis, keep_dims, sem)
    return _arg_reduce(which, input, axis, tie_break_left, keep_dims, sem)


def _arg_reduce(which, input, axis, tie_break_left, keep_dims, sem):
    """(values, indices); like Triton only bf16 values are widened (to f32), others keep their dtype."""
    input = _promote_bf16(sem, sem.numeric(input, f"tl.arg{which}"))
    was_bool = input.dtype == int1
    if was_bool:  # compared as int32, handed back as int1
        input = sem.cast(input, int32)
    axis = unwrap(axis)
    if axis is None:
        input = sem.reshape(input, (input.numel,))
        axis = 0
    rank = len(input.shape)
    if rank == 0 or not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for a tensor of rank {rank}")
    ax = axis % rank
    idx = sem.arange(0, input.shape[ax])
    for _ in _py.range(ax):
        idx = sem.expand_dims(idx, 0)
    for _ in _py.range(rank - ax - 1):
        idx = sem.expand_dims(idx, len(idx.shape))
    idx = sem.broadcast_to(idx, input.shape)
    v, i = sem.reduction([input, idx], ax, _arg_combine(sem, which, tie_break_left), unwrap(keep_dims))
    return (sem.cast(v, int1) if was_bool else v), i


@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False, _sem=None):
    return _minmax_reduce("max", input, axis, return_indices, return_indices_tie_break_left, keep_dims, _sem)


@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False, _sem=None):
    return _minmax_reduce("min", input, axis, return_indices, return_indices_tie_break_left, keep_dims, _sem)


@builtin
def argmax(input, axis, tie_break_left=True, keep_dims=False, _sem=None):
    return _arg_reduce("max", input, axis, tie_break_left, keep_dims, _sem)[1]


@builtin
def argmin(input, axis, tie_break_left=True, keep_dims=False, _sem=None):
    return _arg_reduce("min", input, axis, tie_break_left, keep_dims, _sem)[1]


def _user_combine(sem, combine_fn, what):
    """The region builder for a user combine_fn, which is compiled like any device function, so it
    must be a @jit function; anything else is refused here with the fix."""
    if not hasattr(combine_fn, "_kl_source"):
        name = getattr(combine_fn, "__name__", None)
        if name == "<lambda>":
            got = "a lambda"
        elif callable(combine_fn) and name:
            got = f"the plain Python function '{name}'"
        else:
            got = f"{type(combine_fn).__name__} {combine_fn!r}"
        raise TypeError(f"{what}'s combine_fn must be a @kernellab.jit function, got {got}; "
                        "decorate it with @kl.jit")

    def combine(a, b):
        out = sem.call_jit(combine_fn, list(a) + list(b), {})
        return list(out) if isinstance(out, (list, tuple)) else [out]

    return combine


@builtin
def reduce(input, axis, combine_fn, keep_dims=False, _sem=None):
    inputs = list(input) if isinstance(input, (list, tuple)) else [input]
    out = _sem.reduction(inputs, axis, _user_combine(_sem, combine_fn, "tl.reduce"), unwrap(keep_dims))
    return _like_input(input, out)


def _like_input(input, out):
    """Triton's reduce/scan answer a tuple of inputs with a tuple (a 1-tuple too), a tensor with a tensor."""
    if isinstance(input, (list, tuple)):
        return tl_tuple(out) if isinstance(out, (list, tuple)) else tl_tuple([out])
    return out


@builtin
def associative_scan(input, axis, combine_fn, reverse=False, _sem=None):
    inputs = list(input) if isinstance(input, (list, tuple)) else [input]
    out = _sem.reduction(inputs, axis, _user_combine(_sem, combine_fn, "tl.associative_scan"), scan=True,
                         reverse=unwrap(reverse))
    return _like_input(input, out)


@builtin
def cumsum(input, axis=0, reverse=False, dtype=None, _sem=None):
    return _simple_reduce("sum", input, axis, False, _sem, dtype, scan=True, reverse=reverse)


@builtin
def cumprod(input, axis=0, reverse=False, _sem=None):
    return _simple_reduce("prod", input, axis, False, _sem, scan=True, reverse=reverse)


@builtin
def softmax(x, dim=None, keep_dims=False, ieee_rounding=False, _sem=None):
    d = 0 if unwrap(dim) is None else unwrap(dim)
    z = x - max(x, d, keep_dims=True, _sem=_sem)
    num = exp(z, _sem=_sem)
    den = sum(num, d, keep_dims=True, _sem=_sem)
    return fdiv(num, den, ieee_rounding, _sem=_sem)


# --------------------------------------------------------------------------- compile-time and debugging


@builtin
def condition(cond, disable_licm=False, _sem=None):
    """`while tl.condition(i < n, disable_licm=True):` is Triton's way to put loop hints on a while loop; the
    loop runs on `cond` as written. `disable_licm` keeps loop-invariant code inside the loop (the `scf.while`
    gets the attribute: kernellab's licm pass leaves it alone and LLVM gets `llvm.licm.disable`)."""
    if unwrap(disable_licm) and _sem is not None:
        _sem.loop_hints["disable_licm"] = True
    return cond


@builtin
def static_assert(cond, msg="", _sem=None):
    cond = unwrap(cond)
    if isinstance(cond, tensor):
        raise TypeError("static_assert needs a compile-time condition; use tl.device_assert for runtime values")
    if not cond:
        raise StaticAssertFailed(f"static_assert failed: {unwrap(msg)}" if unwrap(msg) else "static_assert failed")


@builtin
def static_print(*values, sep=" ", end="\n", file=None, flush=False, _sem=None):
    """Print while compiling, as Python prints (a tensor shows as Triton shows it: `int32[constexpr[128]]`)."""
    from ..compiler.print_format import static_text

    print(*[static_text(v) for v in values], sep=sep, end=end, flush=flush)


def _print_operand(x, hex_, _sem):
    """A print operand in a form both backends print as Triton would: fp8 (which Triton cannot print) as its
    float32 value, bf16 as float32 (the same value), and with hex=True a float as its bits."""
    from ..compiler.fp8 import is_fp8
    from ..compiler.types import DTYPES

    el = x.type.scalar
    if el.is_ptr() or not el.is_floating():
        return x
    if hex_:
        return _sem.cast(x, DTYPES[f"u{el.bits}"], bitcast=True)
    return _sem.cast(x, float32) if is_fp8(el) or el == bfloat16 else x


@builtin
def device_print(prefix, *args, hex=False, _sem=None):
    """Print values at run time, one line per element: `pid (x, y, z) idx (i, ...) prefix: value` (Triton's
    format; see compiler/print_format.py). Python's `print(...)` in a kernel is this function."""
    import string

    from ..compiler.print_format import triton_prefix

    prefix = unwrap(prefix)
    if not isinstance(prefix, str):
        raise TypeError(f"{prefix!r} is not string: the first argument of tl.device_print / print is a prefix "
                        "string, e.g. tl.device_print(\"x\", x)")
    if any(ch not in string.printable for ch in prefix):
        raise ValueError(f"{prefix!r} is not an ascii string: a print's prefix must be printable ASCII")
    hex_ = bool(unwrap(hex))
    vals = [_print_operand(_sem.to_tensor(a), hex_, _sem) for a in args]
    _sem.emit("tt.print", vals, None, {"prefix": triton_prefix(prefix, len(vals)), "hex": hex_})


@builtin
def device_assert(cond, msg="", mask=None, _sem=None):
    cond = _sem.cast(_sem.to_tensor(cond), int1)
    if unwrap(mask) is not None:
        cond = _sem.logical("or", cond, _sem.unary("not", _sem.to_tensor(unwrap(mask))))
    _sem.emit("tt.assert", [cond], None, {"message": str(unwrap(msg))})


def _hint(kind):
    def f(input, values, _sem=None):
        values = unwrap(values)
        values = [unwrap(v) for v in values] if isinstance(values, (list, tuple)) else [values]
        x = _sem.to_tensor(input)
        return _sem.emit("tt.hint", [x], x.type, {kind: values})

    f.__name__ = kind
    return builtin(f)


multiple_of = _hint("multiple_of")
max_contiguous = _hint("max_contiguous")
max_constancy = _hint("max_constancy")


@builtin
def debug_barrier(_sem=None):
    _sem.emit("tt.debug_barrier", [], None)


@builtin
def assume(cond, _sem=None):
    return None


def constexpr_function(fn):  # compatibility: helpers evaluated at compile time
    fn.__kl_constexpr_fn__ = True
    return fn


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "builtin", "constexpr",
                                                                      "tensor", "unwrap", "float32", "int1",
                                                                      "int32", "uint32", "PropagateNan")]
