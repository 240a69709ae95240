"""The catalogue of tile-IR ops: what each one means and the traits passes rely on.

`pure` ops have no side effects and depend only on their operands, so CSE may merge them, DCE may
drop them when unused and LICM may hoist them. Everything else (memory, atomics, printing,
control flow holding such ops) is left where the user wrote it. Terminators are not pure: they
must never be moved or dropped.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpInfo:
    name: str
    summary: str
    pure: bool = True
    commutative: bool = False
    terminator: bool = False


OPS: dict[str, OpInfo] = {}


def _def(name, summary, **traits):
    OPS[name] = OpInfo(name, summary, **traits)


# Creation and shape.
_def("arith.constant", "a scalar, or a tensor filled with one value {value}")
_def("tt.get_program_id", "this program's index along grid {axis}")
_def("tt.get_num_programs", "the grid's size along {axis}")
_def("tt.make_range", "the i32 tensor [start, start+1, ..., end-1]")
_def("tt.splat", "a tensor filled with a scalar")
_def("tt.broadcast", "stretch size-1 dimensions to the result shape")
_def("tt.expand_dims", "insert a size-1 dimension at {axis}")
_def("tt.reshape", "the same elements in row-major order, another shape")
_def("tt.trans", "permute dimensions by {order}")
_def("tt.join", "stack two equal tensors along a new last dimension of size 2")
_def("tt.split", "the two halves of a last dimension of size 2")
_def("tt.cat", "concatenate two tensors along dimension 0")
_def("tt.hint", "the operand unchanged, with {multiple_of} / {max_contiguous} promises for codegen")

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
    _def("arith." + _n, _s, commutative=_c)
_def("arith.cmpi", "integer comparison {predicate}: eq ne slt sle sgt sge ult ule ugt uge")
_def("arith.cmpf", "float comparison {predicate}: oeq one olt ole ogt oge une ...")
_def("arith.select", "elementwise choice: cond ? a : b")
for _n in ["extsi", "extui", "trunci", "sitofp", "uitofp", "fptosi", "fptoui", "extf", "truncf", "bitcast"]:
    _def("arith." + _n, "type conversion: " + _n)
_def("tt.int_to_ptr", "reinterpret an i64 as a pointer")
_def("tt.ptr_to_int", "a pointer's address as i64")
for _n in ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "floor", "ceil", "absf",
           "absi", "fma"]:
    _def("math." + _n, "elementwise " + _n)
_def("tt.umulhi", "the high half of the full integer product")
_def("tt.precise_divf", "float divide rounded to nearest (IEEE)")
_def("tt.precise_sqrt", "square root rounded to nearest (IEEE)")

# Memory.
_def("tt.addptr", "pointer + offset (in elements)")
_def("tt.load", "read memory: (ptr [, mask [, other]]) or a block pointer with {boundary_check}", pure=False)
_def("tt.store", "write memory: (ptr, value [, mask])", pure=False)
_def("tt.make_block_ptr", "a block pointer: (base, shape.., strides.., offsets..) {block_shape, order}")
_def("tt.advance", "a block pointer moved by offsets")
_def("tt.atomic_rmw", "atomic read-modify-write {kind}: returns the old value", pure=False)
_def("tt.atomic_cas", "atomic compare-and-swap: returns the old value", pure=False)

# Compute.
_def("tt.dot", "matrix product a @ b + acc (fp32 or int32 accumulation)")
_def("tt.reduce", "reduce along {axis} with the combine region")
_def("tt.scan", "inclusive scan along {axis} with the combine region")
_def("tt.reduce.return", "yield the combined value of a reduce or scan region", terminator=True, pure=False)

# Debugging and synchronization.
_def("tt.print", "print values from each program {prefix}", pure=False)
_def("tt.assert", "abort with {message} where the condition is false", pure=False)
_def("tt.debug_barrier", "synchronize all threads of the program", pure=False)

# GPU IR (after layouts are assigned).
_def("ttg.convert_layout", "the same tensor in another distributed layout (through shared memory)")
_def("ttg.barrier", "bar.sync: every thread of the program waits here (orders shared-memory accesses)",
     pure=False)
_def("ttg.local_alloc", "a multi-stage shared-memory buffer for the tiles a loop's dot reads", pure=False)
_def("ttg.memdesc_index", "stage (slot) of a multi-stage shared-memory buffer: a view, no code")
_def("ttg.async_copy", "start copying a tile from global into shared memory (cp.async): "
     "(ptrs, view, pred [, mask]); masked-off elements become zero", pure=False)
_def("ttg.async_commit", "close the group of copies started since the last commit (cp.async.commit_group)",
     pure=False)
_def("ttg.async_wait", "wait until at most {pending} copy groups are in flight, then bar.sync", pure=False)
_def("ttg.block_ptr_addresses", "the addresses and in-bounds mask of a block pointer's tile, in the results' layout "
     "(what a cp.async of a block-pointer tile copies from) {boundary_check}")
_def("ttg.tensormap", "the TMA tensor map (a kernel parameter the launcher makes) of a 2-D tensor: "
     "(base, extent of the contiguous dim, extent of the other, its stride) {box, swizzle}")
_def("ttg.mbarrier_alloc", "one mbarrier per pipeline stage in shared memory, initialized by one thread to expect "
     "{count} arrivals per phase (1 when absent)", pure=False)
_def("ttg.mbarrier_expect", "one thread arrives on the stage's mbarrier, announcing {bytes} of TMA copies (pred)",
     pure=False)
_def("ttg.tma_copy", "one thread starts TMA copies of a block pointer's tile into a stage, completing on the "
     "mbarrier: (tensormap, block ptr, view, mbarrier, pred)", pure=False)
_def("ttg.mbarrier_wait", "every thread waits until the stage's mbarrier completes the phase with this parity "
     "({fence_proxy}: then orders the generic-proxy writes it saw before its async-proxy reads)",
     pure=False)
_def("ttg.async_arrive", "every thread: the mbarrier counts one arrival once all the thread's earlier cp.async copies "
     "have landed (cp.async.mbarrier.arrive.noinc)", pure=False)
_def("ttg.mbarrier_arrive", "one arrival per warp (lane 0) on the mbarrier where pred holds", pure=False)
_def("ttg.warpgroup_turn", "two warpgroups alternate on named barriers 1 and 2: {kind} start (before the loop), "
     "wait (for this warpgroup's turn), pass (the turn to the other), finish (after the loop)", pure=False)
_def("ttg.mbarrier_inval", "invalidate the mbarriers so their shared memory can be reused", pure=False)
_def("ttg.dot_wait", "the accumulator of a warpgroup MMA once at most {pending} wgmma groups are in flight",
     pure=False)

# Control flow.
_def("scf.for", "loop from lb to ub by step, carrying iter args", pure=False)
_def("scf.if", "run the then- or else-region, yielding results", pure=False)
_def("scf.while", "repeat: the before-region decides (scf.condition), the after-region loops", pure=False)
_def("scf.yield", "end a region, passing values out", terminator=True, pure=False)
_def("scf.condition", "end a while's before-region: continue flag and values", terminator=True, pure=False)
_def("tt.call", "call another @jit function {callee}", pure=False)
_def("tt.return", "return from the function", terminator=True, pure=False)


def info(name: str) -> OpInfo:
    return OPS.get(name) or OpInfo(name, "unknown op", pure=False)


def is_pure(op) -> bool:
    """An op is pure when its own kind is and no op nested in its regions has side effects."""
    if op.name in ("scf.for", "scf.while", "scf.if"):
        return all(is_pure(inner) or info(inner.name).terminator for r in op.regions for inner in r.ops)
    return info(op.name).pure
