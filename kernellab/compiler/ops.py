"""The catalogue of tile-IR ops: what each one means and the traits passes rely on.

Every op is declared once here, with its traits as data:
- `pure`: no side effects, depends only on its operands (CSE may merge it, DCE drop it, LICM hoist it);
- `elementwise`: computes each element from the same element of its operands (layouts pass through);
- `same_types`: operands and result share one type; `commutative`; `terminator` (ends a region);
- `memory`: "read" / "write" / "read+write" for ops that touch global memory; `regions`: how many;
- for elementwise ops, `evaluator`: the one NumPy definition of what it computes (see `op_eval`),
  which the constant folder and the interpreter both call; `folds`: whether the folder may use it
  (exact in every dtype: transcendental functions are not folded, the GPU approximates them);
- for math functions, `libdevice`: the `__nv_*` function the GPU backend calls, and `tl_name`: the
  name under which `tl.math` and `tl.extra.cuda.libdevice` expose it.
Terminators are not pure: they must never be moved or dropped. `docs/tile-ir.md`'s op table is
generated from this file (`op_table_markdown`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import op_eval


@dataclass(frozen=True)
class OpInfo:
    name: str
    summary: str
    pure: bool = True
    commutative: bool = False
    terminator: bool = False
    elementwise: bool = False
    same_types: bool = False
    memory: str = ""
    regions: int = 0
    keeps_layout: bool = False  # result in its operands' layout (elementwise ops, splat, broadcast)
    combine_region: bool = False  # its region combines elements (reduce/scan): CSE keeps it self-contained
    traps: bool = False  # may trap at run time (integer division by zero): never executed speculatively
    moves_only: bool = False  # one operand whose elements it only rearranges or repeats (a filled constant stays one)
    folds: bool = False
    evaluator: object = None  # (operand dtypes, result dtype, attrs) -> fn(*values)
    refuses: object = None  # (operand dtypes, result dtype, attrs, *values) -> True where folding must not happen
    libdevice: tuple | None = None  # (f32 name, f64 name) of the __nv_* function
    tl_name: str | None = None
    arity: int = 0
    result: str = ""  # result type rule of a math function: "" (the operands' type) or "i32"


OPS: dict[str, OpInfo] = {}


def _def(name, summary, **traits):
    if "evaluator" not in traits and name in op_eval.EVALUATORS:
        traits["evaluator"] = op_eval.EVALUATORS[name]
        traits.setdefault("elementwise", True)
    if name in op_eval.REFUSALS:
        traits["refuses"] = op_eval.REFUSALS[name]
    if traits.get("elementwise"):
        traits["keeps_layout"] = True
    if name in ("arith.divsi", "arith.divui", "arith.remsi", "arith.remui"):
        traits["traps"] = True
    OPS[name] = OpInfo(name, summary, **traits)


# Creation and shape.
_def("arith.constant", "a scalar, or a tensor filled with one value {value}")
_def("ub.poison", "a scalar with undefined contents (what a function returns on a path without `return`)")
_def("tt.get_program_id", "this program's index along grid {axis}")
_def("tt.get_num_programs", "the grid's size along {axis}")
_def("tt.make_range", "the i32 tensor [start, start+1, ..., end-1]")
_def("tt.splat", "a tensor filled with a scalar", moves_only=True, keeps_layout=True)
_def("tt.broadcast", "stretch size-1 dimensions to the result shape", moves_only=True, keeps_layout=True)
_def("tt.expand_dims", "insert a size-1 dimension at {axis}", moves_only=True)
_def("tt.reshape", "the same elements in row-major order, another shape (registers renamed where the result's "
     "layout keeps each thread's elements; through shared memory otherwise)", moves_only=True)
_def("tt.trans", "permute dimensions by {order}", moves_only=True)
_def("tt.join", "stack two equal tensors along a new last dimension of size 2")
_def("tt.split", "the two halves of a last dimension of size 2")
_def("tt.cat", "concatenate two tensors along dimension 0")
_def("tt.gather", "out[i] = src[i with its {axis} coordinate replaced by index[i]]: (src, index); the result has "
     "the index's shape; an index outside the axis wraps modulo its (power-of-2) size")
_def("tt.histogram", "counts of each value 0 .. {num_bins}-1 among a 1-D integer tensor's elements as i32: "
     "(input [, mask]); masked-off and out-of-range values are not counted")
_def("tt.hint", "the operand unchanged, with {multiple_of} / {max_contiguous} promises for codegen",
     elementwise=True)

# Integer and float arithmetic (operands and result share one type).
for _n, _s, _c in [
    ("addi", "integer add (wraps)", True), ("subi", "integer subtract (wraps)", False),
    ("muli", "integer multiply (wraps)", True), ("divsi", "signed division rounding toward zero", False),
    ("divui", "unsigned division", False), ("remsi", "signed remainder, sign of the dividend", False),
    ("remui", "unsigned remainder", False), ("andi", "bitwise and", True), ("ori", "bitwise or", True),
    ("xori", "bitwise xor", True), ("shli", "shift left", False), ("shrsi", "arithmetic shift right", False),
    ("shrui", "logical shift right", False), ("maxsi", "signed max", True), ("maxui", "unsigned max", True),
    ("minsi", "signed min", True), ("minui", "unsigned min", True),
    ("addf", "float add", True), ("subf", "float subtract", False), ("mulf", "float multiply", True),
    ("divf", "float divide", False), ("remf", "float remainder (fmod), sign of the dividend", False),
    ("negf", "float negate", False), ("maxnumf", "float max ignoring NaN", True),
    ("minnumf", "float min ignoring NaN", True), ("maximumf", "float max propagating NaN", True),
    ("minimumf", "float min propagating NaN", True),
]:
    _def("arith." + _n, _s, commutative=_c, same_types=True, folds=True)
_def("arith.cmpi", "integer comparison {predicate}: eq ne slt sle sgt sge ult ule ugt uge", folds=True)
_def("arith.cmpf", "float comparison {predicate}: oeq one olt ole ogt oge une ...", folds=True)
_def("arith.select", "elementwise choice: cond ? a : b", folds=True)
for _n, _s in [("extsi", "sign-extend"), ("extui", "zero-extend"), ("trunci", "keep the low bits"),
               ("sitofp", "signed int to float, rounded to nearest"),
               ("uitofp", "unsigned int to float, rounded to nearest"),
               ("fptosi", "float to signed int toward zero, saturating (NaN: 0; 8-bit: saturate to 16 bits, "
                          "keep the low byte)"),
               ("fptoui", "float to unsigned int toward zero, saturating (NaN: 0; 8-bit as fptosi)"),
               ("extf", "widen a float (exact)"), ("truncf", "narrow a float, rounded to nearest once"),
               ("bitcast", "the same bits as another type of equal width")]:
    _def("arith." + _n, "type conversion: " + _s, folds=True)
_def("tt.fp_to_fp", "type conversion to or from an 8-bit float {rounding}: fp8 -> f16/bf16/f32 exactly; to fp8 "
     "rounded to nearest even (rtne) or toward zero (rtz), saturating to the largest finite value, NaN kept "
     "(f8e4b15: Triton's own rounding, see compiler/fp8.py); also f32 -> f16/bf16 toward zero (rtz: cvt.rz, "
     "finite overflow to the largest finite value)")
_def("tt.int_to_ptr", "reinterpret an i64 as a pointer", elementwise=True)
_def("tt.ptr_to_int", "a pointer's address as i64", elementwise=True)
_def("tt.umulhi", "the high half of the unsigned double-width product (libdevice __nv_umulhi)", same_types=True,
     commutative=True, folds=True)
_def("tt.precise_divf", "float divide rounded to nearest (IEEE)", same_types=True, folds=True)
_def("tt.precise_sqrt", "square root rounded to nearest (IEEE)", same_types=True, folds=True,
     evaluator=op_eval.native(np.sqrt), elementwise=True)


def _math(name, fn, exact=False, libdevice=None, tl=None, arity=1, result="", summary=None):
    """A `math.<name>` op: evaluated by `fn` (exact ops: in the operands' own type, else in float64),
    lowered to libdevice's `__nv_<libdevice>f` / `__nv_<libdevice>`."""
    if isinstance(libdevice, str):
        libdevice = (f"__nv_{libdevice}f", f"__nv_{libdevice}")
    if result == "i32":
        ev = op_eval.predicate(fn)
    else:
        ev = op_eval.native(fn) if exact else op_eval.in_float64(fn)
    _def("math." + name, summary or f"elementwise {name}", evaluator=ev, elementwise=True,
         same_types=result == "", folds=exact, libdevice=libdevice, tl_name=tl, arity=arity, result=result)


# The math functions tl.* had first: their GPU lowering is special-cased in codegen/lower.py.
_math("exp", np.exp, libdevice="exp", summary="e**x (GPU: ex2.approx on f32)")
_math("exp2", np.exp2, libdevice="exp2", summary="2**x (GPU: ex2.approx on f32)")
_math("log", np.log, libdevice="log")
_math("log2", np.log2, libdevice="log2")
_math("sqrt", np.sqrt, libdevice="sqrt")
_math("rsqrt", op_eval.rsqrt, libdevice="rsqrt")
_math("sin", np.sin, libdevice="sin")
_math("cos", np.cos, libdevice="cos")
_math("erf", op_eval.erf, libdevice="erf")
_math("floor", np.floor, exact=True, summary="round down to an integer")
_math("ceil", np.ceil, exact=True, summary="round up to an integer")
_math("absf", np.abs, exact=True, summary="float absolute value")
_def("math.absi", "integer absolute value (wraps: |INT_MIN| = INT_MIN)", same_types=True, folds=True)
_def("math.fma", "a * b + c rounded once", same_types=True)

# Math functions lowered through libdevice only: one line each (name, evaluation, libdevice base name).
for _n, _f in [("tanh", np.tanh), ("sinh", np.sinh), ("cosh", np.cosh), ("tan", np.tan), ("asin", np.arcsin),
               ("acos", np.arccos), ("atan", np.arctan), ("asinh", np.arcsinh), ("acosh", np.arccosh),
               ("atanh", np.arctanh), ("log10", np.log10), ("log1p", np.log1p), ("expm1", np.expm1),
               ("exp10", op_eval.exp10), ("cbrt", np.cbrt), ("erfc", op_eval.erfc), ("erfinv", op_eval.erfinv),
               ("lgamma", op_eval.lgamma), ("tgamma", op_eval.tgamma), ("j0", op_eval.bessel_j0),
               ("j1", op_eval.bessel_j1), ("y0", op_eval.bessel_y0), ("y1", op_eval.bessel_y1),
               ("cyl_bessel_i0", op_eval.bessel_i0), ("cyl_bessel_i1", op_eval.bessel_i1)]:
    _math(_n, _f, libdevice=_n, tl=_n)
for _n, _f in [("atan2", np.arctan2), ("pow", np.power), ("hypot", np.hypot), ("nextafter", np.nextafter)]:
    _math(_n, _f, libdevice=_n, tl=_n, arity=2)
_math("fast_dividef", np.divide, libdevice=("__nv_fdiv_rn", "__nv_ddiv_rn"), tl="fast_dividef", arity=2,
      summary="a / b (Triton's name for a fast approximate divide; kernellab divides exactly)")
_math("trunc", np.trunc, exact=True, libdevice="trunc", tl="trunc", summary="round toward zero to an integer")
_math("round", op_eval.round_half_away, exact=True, libdevice="round", tl="round",
      summary="round to the nearest integer, halfway cases away from zero")
_math("rint", np.rint, exact=True, libdevice="rint", tl="rint", summary="round to the nearest integer, ties to even")
_math("nearbyint", np.rint, exact=True, libdevice="nearbyint", tl="nearbyint",
      summary="round to the nearest integer, ties to even")
_math("copysign", np.copysign, exact=True, libdevice="copysign", tl="copysign", arity=2,
      summary="the magnitude of a with the sign of b")
_math("fmod", np.fmod, exact=True, libdevice="fmod", tl="fmod", arity=2,
      summary="C fmod: a - trunc(a / b) * b, computed exactly")
_math("isnan", np.isnan, exact=True, libdevice=("__nv_isnanf", "__nv_isnand"), tl="isnan", result="i32",
      summary="1 where NaN, else 0 (i32)")
_math("isinf", np.isinf, exact=True, libdevice=("__nv_isinff", "__nv_isinfd"), tl="isinf", result="i32",
      summary="1 where +-inf, else 0 (i32)")
_math("isfinite", np.isfinite, exact=True, libdevice=("__nv_finitef", "__nv_isfinited"), tl="isfinited",
      result="i32", summary="1 where neither NaN nor +-inf, else 0 (i32)")
_math("signbit", np.signbit, exact=True, libdevice=("__nv_signbitf", "__nv_signbitd"), tl="signbit", result="i32",
      summary="1 where the sign bit is set (also -0.0 and -NaN), else 0 (i32)")

# CUDA's fast intrinsics (`__nv_fast_*f`, float32 only; doubles take the precise function) and more of libdevice's
# float functions under Triton's names: evaluated as the exact function (the fast ones differ from it on the GPU by
# their documented error bounds).
for _n, _f, _base in [("fast_expf", np.exp, "exp"), ("fast_logf", np.log, "log"), ("fast_log2f", np.log2, "log2"),
                      ("fast_log10f", np.log10, "log10"), ("fast_exp10f", op_eval.exp10, "exp10"),
                      ("fast_sinf", np.sin, "sin"), ("fast_cosf", np.cos, "cos"), ("fast_tanf", np.tan, "tan")]:
    _math(_n, _f, libdevice=(f"__nv_{_n}", f"__nv_{_base}"), tl=_n)
_math("fast_powf", op_eval.fast_pow, libdevice=("__nv_fast_powf", None), tl="fast_powf", arity=2,
      summary="exp2(b * log2(a)) (CUDA's __powf: NaN for a < 0; float32 only)")
for _n, _f in [("sinpi", op_eval.sinpi), ("cospi", op_eval.cospi),
               ("erfcinv", op_eval.erfcinv), ("erfcx", op_eval.erfcx), ("normcdf", op_eval.ndtr),
               ("normcdfinv", op_eval.ndtri), ("rcbrt", lambda x: 1.0 / np.cbrt(x)), ("logb", op_eval.logb)]:
    _math(_n, _f, libdevice=_n, tl=_n)
_math("saturatef", op_eval.saturate, exact=True, libdevice=("__nv_saturatef", None), tl="saturatef",
      summary="clamp to [0, 1], NaN to 0 (float32 only)")
_math("remainder", op_eval.ieee_remainder, libdevice="remainder", tl="remainder", arity=2,
      summary="IEEE remainder: a - n * b, n = a / b rounded to nearest even")
_math("fdim", op_eval.fdim, libdevice="fdim", tl="fdim", arity=2, summary="a - b where a > b, else +0")
_math("rhypot", lambda x, y: 1.0 / np.hypot(x, y), libdevice="rhypot", tl="rhypot", arity=2,
      summary="1 / sqrt(a**2 + b**2)")
# Arithmetic rounded to nearest even, spelled as libdevice functions (one rounding of the exact result).
for _n, _f in [("add_rn", np.add), ("sub_rn", np.subtract), ("mul_rn", np.multiply)]:
    _math(_n, _f, libdevice=(f"__nv_f{_n}", f"__nv_d{_n}"), tl=_n, arity=2,
          summary=f"a {'+-*'[['add_rn', 'sub_rn', 'mul_rn'].index(_n)]} b rounded to nearest even")
_math("rcp_rn", lambda x: 1.0 / x, libdevice=("__nv_frcp_rn", "__nv_drcp_rn"), tl="rcp_rn",
      summary="1 / x rounded to nearest even")

# Memory.
_def("tt.addptr", "pointer + offset (in elements)", elementwise=True)
_def("tt.load", "read memory: (ptr [, mask [, other]]) or a block pointer with {boundary_check}", pure=False,
     memory="read")
_def("tt.store", "write memory: (ptr, value [, mask])", pure=False, memory="write")
_def("tt.make_block_ptr", "a block pointer: (base, shape.., strides.., offsets..) {block_shape, order}")
_def("tt.advance", "a block pointer moved by offsets")
_def("tt.atomic_rmw", "atomic read-modify-write {kind}: returns the old value", pure=False, memory="read+write")
_def("tt.atomic_cas", "atomic compare-and-swap: returns the old value", pure=False, memory="read+write")

# Compute.
_def("tt.dot", "matrix product a @ b + acc (fp32 or int32 accumulation)")
_def("tt.reduce", "reduce along {axis} with the combine region", regions=1, combine_region=True)
_def("tt.scan", "inclusive scan along {axis} with the combine region", regions=1, combine_region=True)
_def("tt.map_elementwise", "a scalar function (the region) applied to each element, or each {pack} elements, of "
     "its operands", regions=1, combine_region=True, pure=False)
_def("tt.reduce.return", "yield the value(s) of a reduce, scan or map_elementwise region", terminator=True,
     pure=False)

_def("tt.inline_asm", "inline assembly run on each element, or each `pack` elements, of its operands "
     "{asm, constraints, pure, pack}; one result per output dtype (GPU only)", pure=False)

# Debugging and synchronization.
_def("tt.print", "print values from each program {prefix}", pure=False)
_def("tt.assert", "abort with {message} where the condition is false", pure=False)
_def("tt.debug_barrier", "synchronize all threads of the program", pure=False)
_def("tt.grid_dependency", "programmatic dependent launch (sm_90): {kind} = wait (griddepcontrol.wait: the grid "
     "this one depends on has finished and its writes are visible) or launch_dependents (the next grid may start)",
     pure=False)

# GPU IR (after layouts are assigned).
_def("ttg.convert_layout", "the same tensor in another distributed layout (through shared memory, unless every "
     "thread already holds its elements)")
_def("ttg.barrier", "bar.sync: every thread of the program waits here (orders shared-memory accesses)",
     pure=False)
_def("ttg.local_alloc", "a multi-stage shared-memory buffer for the tiles a loop's dot reads", pure=False)
_def("ttg.memdesc_index", "stage (slot) of a multi-stage shared-memory buffer, or its transpose (the same bytes, "
     "shape and order swapped, for a dot that reads the tile transposed): a view, no code")
_def("ttg.async_copy", "start copying a tile from global into shared memory (cp.async): "
     "(ptrs, view, pred [, mask]); masked-off elements become zero", pure=False, memory="read")
_def("ttg.local_store", "write a register tile into a stage of a shared-memory buffer (st.shared; where wgmma "
     "reads the buffer, then fence.proxy.async): (value, view); fp32 rounded to tf32 where {tf32}", pure=False)
_def("ttg.local_load", "read a tile from a stage of a shared-memory buffer into registers (ld.shared), in the "
     "result's layout: a row vector a pipelined loop's copies brought with the dots' tiles", pure=False)
_def("ttg.async_commit", "close the group of copies started since the last commit (cp.async.commit_group)",
     pure=False)
_def("ttg.async_wait", "wait until at most {pending} copy groups are in flight, then bar.sync", pure=False)
_def("ttg.block_ptr_addresses", "the addresses and in-bounds mask of a block pointer's tile, in the results' layout "
     "(what a cp.async of a block-pointer tile copies from) {boundary_check}")
_def("ttg.tensormap", "the TMA tensor map (a kernel parameter the launcher makes) of a 2-D tensor: "
     "(base, extent of the contiguous dim, extent of the other, its stride[, extent and stride of each leading "
     "dim of a [1, .., M, K] block, innermost first]) {box, swizzle}")
_def("ttg.make_tensormap", "a TMA tensor map the kernel makes (its base or shape is computed in the kernel): staged "
     "in shared memory by tensormap.replace, copied to this program's slot of the launch's global scratch and "
     "fenced for the tensor-map proxy; operands as ttg.tensormap {box, swizzle, dtype}", pure=False)
_def("ttg.mbarrier_alloc", "one mbarrier per pipeline stage in shared memory, initialized by one thread to expect "
     "{count} arrivals per phase (1 when absent)", pure=False)
_def("ttg.mbarrier_expect", "one thread arrives on the stage's mbarrier, announcing {bytes} of TMA copies (pred)",
     pure=False)
_def("ttg.tma_copy", "one thread starts TMA copies of a block pointer's tile into a stage, completing on the "
     "mbarrier: (tensormap, block ptr, view, mbarrier, pred)", pure=False, memory="read")
_def("ttg.tma_store", "one thread starts TMA stores of a stage's tile to a block pointer's place and commits them as "
     "one bulk group (cp.async.bulk.tensor, commit_group); nothing waits here: (tensormap, block ptr, view)",
     pure=False, memory="write")
_def("ttg.tma_store_wait", "wait until at most {pending} TMA store groups may still read their buffers "
     "(cp.async.bulk.wait_group.read): (the buffers' views)", pure=False)
_def("ttg.mbarrier_wait", "every thread waits until the stage's mbarrier completes the phase with this parity "
     "(where the optional pred holds; {warpgroup}: only that consumer warpgroup's threads, the turns tell the other; "
     "{fence_proxy}: then orders the generic-proxy writes it saw before its async-proxy reads)", pure=False)
_def("ttg.async_arrive", "every thread: the mbarrier counts one arrival once all the thread's earlier cp.async copies "
     "have landed (cp.async.mbarrier.arrive.noinc)", pure=False)
_def("ttg.mbarrier_arrive", "one arrival per warp (lane 0) on the mbarrier where pred holds", pure=False)
_def("ttg.warpgroup_turn", "two warpgroups alternate on named barriers 1 and 2: {kind} start (before the loop), "
     "wait (for this warpgroup's turn, once its optional operands are computed), pass (the turn to the other), finish "
     "(after the loop)", pure=False)
_def("ttg.mbarrier_inval", "invalidate the mbarriers so their shared memory can be reused", pure=False)
_def("ttg.warp_specialize", "{producer_warps} warps launched beyond num_warps run the region (the TMA copies of a "
     "loop) and exit; the num_warps consumer warps skip it and run the rest of the kernel", pure=False, regions=1)
_def("ttg.dot_wait", "the accumulator of a warpgroup MMA once at most {pending} wgmma groups are in flight; "
     "further operands are computed before the wait (ptxas would otherwise hoist it above them)", pure=False)

# Control flow.
_def("scf.for", "loop from lb to ub by step, carrying iter args", pure=False, regions=1)
_def("scf.if", "run the then- or else-region, yielding results", pure=False, regions=2)
_def("scf.while", "repeat: the before-region decides (scf.condition), the after-region loops", pure=False,
     regions=2)
_def("scf.yield", "end a region, passing values out", terminator=True, pure=False)
_def("scf.condition", "end a while's before-region: continue flag and values", terminator=True, pure=False)
_def("tt.call", "call another @jit function {callee}", pure=False)
_def("tt.return", "return from the function", terminator=True, pure=False)


def info(name: str) -> OpInfo:
    return OPS.get(name) or OpInfo(name, "unknown op", pure=False)


_STRUCTURED = ("scf.for", "scf.while", "scf.if")


def is_pure(op) -> bool:
    """An op is pure when its own kind is and no op nested in its regions has side effects."""
    if op.name in _STRUCTURED:
        return all(is_pure(inner) or info(inner.name).terminator for r in op.regions for inner in r.ops)
    return info(op.name).pure


def is_elementwise(name: str) -> bool:
    return info(name).elementwise


def keeps_layout(name: str) -> bool:
    return info(name).keeps_layout


def accesses_memory(name: str) -> bool:
    return bool(info(name).memory)


def is_loop(name: str) -> bool:
    return name in ("scf.for", "scf.while")


def is_structured(name: str) -> bool:
    """scf.for / scf.while / scf.if: control flow whose regions end in a terminator."""
    return name in _STRUCTURED


def evaluator(name: str, operand_types, result_type, attrs=None):
    """`fn(*values)` computing op `name` on NumPy values (see `op_eval`), its float results rounded
    once to `result_type` (bf16: carried in float32). None when the op has no evaluator."""
    make = info(name).evaluator
    if make is None:
        return None
    fn = make(list(operand_types), result_type, attrs or {})
    if not getattr(result_type, "is_floating", lambda: False)():
        return fn
    if result_type.ir == "bf16":
        if name == "arith.bitcast":
            return fn
        return lambda *xs: op_eval.round_bf16(fn(*xs))
    dt = result_type.np

    def rounded(*xs):
        r = fn(*xs)
        if r.dtype != dt:
            r = np.asarray(r).astype(dt)
            return r[()] if r.ndim == 0 else r
        return r
    return rounded


def refuses(name: str, operand_types, result_type, attrs, values) -> bool:
    """Whether the folder must leave this op alone for these constant operands (undefined or trapping
    at run time: integer division by zero, INT_MIN / -1, float -> int of NaN, inf or out of range)."""
    r = info(name).refuses
    return bool(r is not None and r(list(operand_types), result_type, attrs or {}, *values))


def math_functions() -> list[OpInfo]:
    """The math ops the language exposes by name (tl.math.<tl_name>, tl.extra.cuda.libdevice.<tl_name>)."""
    return [i for i in OPS.values() if i.tl_name]


def op_table_markdown() -> str:
    """The op table of docs/tile-ir.md, generated from the catalogue (a test keeps the doc in sync)."""
    rows = ["| op | traits | meaning |", "|---|---|---|"]
    for i in OPS.values():
        traits = [t for t, on in [("pure", i.pure), ("elementwise", i.elementwise), ("same types", i.same_types),
                                  ("commutative", i.commutative), ("folds", i.folds),
                                  ("terminator", i.terminator)] if on]
        if i.moves_only:
            traits.append("moves only")
        if i.memory:
            traits.append("memory: " + i.memory)
        if i.regions:
            traits.append(f"{i.regions} region" + ("s" if i.regions > 1 else ""))
        if i.libdevice:
            traits.append("libdevice " + "/".join(n for n in i.libdevice if n))
        summary = i.summary.replace("|", "\\|")
        rows.append(f"| `{i.name}` | {', '.join(traits)} | {summary} |")
    return "\n".join(rows) + "\n"
