"""Software-pipeline the global loads of loops that feed `tl.dot`: issue iteration i+1's loads
before iteration i's dot, so memory latency overlaps the math. Applies to loops written with
`tl.range(..., num_stages=2 or more)`.

For each load at the top level of such a loop body whose address depends only on the induction
variable, the loop-carried values and loop invariants (through pure ops), the pass:
- clones the address computation and the load before the loop for the first iteration (prologue),
- clones it right before the dot for the next iteration, from the values the body will yield,
- carries the loaded tile in a new loop-carried value that replaces the original load.
Prefetching loads are masked off when the iteration they serve does not run, so they never touch
memory the original program would not have.
"""
from __future__ import annotations

from ..ir import Module, Op
from ..ops import is_pure
from ..rewrite import extend_for_iter_args, insert_before, int_const, pure_slice
from ..types import TensorType, int1

NAME = "pipeline_loads"
DESCRIPTION = "prefetch the next iteration's loads in loops that feed tl.dot (register double-buffering)"


def _guarded(mask_op_anchor: Op, mask, cond, shape, loc):
    """mask & cond (cond an i1 scalar), as new ops before `mask_op_anchor`."""
    if shape:
        cond = Op("tt.splat", [cond], [TensorType(shape, int1)], {}, (), loc)
        insert_before(mask_op_anchor, cond)
        cond = cond.result
    if mask is None:
        return cond
    both = Op("arith.andi", [mask, cond], [mask.type], {}, (), loc)
    insert_before(mask_op_anchor, both)
    return both.result


def _emit_load(anchor: Op, load: Op, slice_ops, mapping, cond):
    """Clone `slice_ops` + `load` before `anchor` under `mapping`, masking the load with `cond`."""
    for op in slice_ops:
        insert_before(anchor, op.clone(mapping))
    ptr = mapping.get(id(load.operands[0]), load.operands[0])
    mask = mapping.get(id(load.operands[1]), load.operands[1]) if len(load.operands) > 1 else None
    other = mapping.get(id(load.operands[2]), load.operands[2]) if len(load.operands) > 2 else None
    mask = _guarded(anchor, mask, cond, tuple(ptr.type.shape), load.loc)
    operands = [ptr, mask] + ([other] if other is not None else [])
    new = Op("tt.load", operands, [load.result.type], dict(load.attrs), (), load.loc, [load.result.hint])
    insert_before(anchor, new)
    return new.result


def _value_before(v, anchor: Op, body):
    """`v` if it is available at `anchor`, else a copy of its (pure) computation inserted before it."""
    order = {id(op): i for i, op in enumerate(body.ops)}
    op = v.defining_op
    if op is None or op.block is not body or order[id(op)] < order[id(anchor)]:
        return v
    mapping: dict = {}
    for dep in pure_slice(op, body) + [op]:
        if order.get(id(dep), -1) >= order[id(anchor)] and id(dep) not in mapping:
            insert_before(anchor, dep.clone(mapping))
    return mapping.get(id(v), v)


def _yields_recomputable(for_op: Op, plans, anchor) -> bool:
    body = for_op.regions[0]
    order = {id(op): i for i, op in enumerate(body.ops)}
    for a, y in zip(body.args[1:], body.terminator.operands):
        op = y.defining_op
        if op is None or op.block is not body or order[id(op)] < order[id(anchor)]:
            continue
        used = any(a in op2.operands for ld, sl in plans for op2 in sl + [ld])
        if used and (op.regions or not is_pure(op) or pure_slice(op, body) is None):
            return False
    return True


def _pipeline(for_op: Op, max_regs: int | None = None) -> int:
    """Prefetch the loop's loads; `max_regs` (the GPU pass prefetch_fma_dot_loads): without the per-loop opt-in,
    when the prefetched tiles take at most that many registers a thread."""
    body = for_op.regions[0]
    step = int_const(for_op.operands[2])
    # Opt-in per loop (`tl.range(..., num_stages=2)`): holding the next tiles costs registers, and on
    # the H200 a second resident program hid latency as well for large matmuls (see benchmarks/NOTES.md).
    if step is None or step <= 0 or (max_regs is None and for_op.attrs.get("num_stages", 1) < 2):
        return 0
    dots = [op for op in body.ops if op.name == "tt.dot"]
    if not dots:
        return 0
    if any(d.operands[0].type.scalar.ir in ("f16", "bf16") for d in dots):
        return 0  # tensor-core operands are multi-buffered in shared memory by pipeline_dot_operands
    loads = [op for op in body.ops if op.name == "tt.load" and not op.operands[0].type.is_block_ptr()]
    plans = [(ld, pure_slice(ld, body)) for ld in loads]
    plans = [(ld, s) for ld, s in plans if s is not None]
    if not plans or not _yields_recomputable(for_op, plans, next(op for op in body.ops if op.name == "tt.dot")):
        return 0
    if max_regs is not None and sum(_numel(ld.result.type) * _words(ld.result.type) for ld, _ in plans) > max_regs:
        return 0
    lb, ub = for_op.operands[0], for_op.operands[1]
    iv, iter_args = body.args[0], body.args[1:]
    yield_op = body.terminator
    loc = for_op.loc
    # prologue: the first iteration's loads, masked off when the loop does not run at all
    runs = Op("arith.cmpi", [lb, ub], [int1], {"predicate": "slt"}, (), loc)
    insert_before(for_op, runs)
    first = []
    for ld, sl in plans:
        mapping = {id(iv): lb}
        mapping.update({id(a): init for a, init in zip(iter_args, for_op.operands[3:])})
        first.append(_emit_load(for_op, ld, sl, mapping, runs.result))
    # in the body, right before the dot: the next iteration's loads, from the values this iteration
    # will yield (their pure computation is repeated here), so they are in flight during the math
    anchor = next(op for op in body.ops if op.name == "tt.dot")
    nxt = Op("arith.addi", [iv, for_op.operands[2]], [iv.type], {}, (), loc)
    insert_before(anchor, nxt)
    more = Op("arith.cmpi", [nxt.result, ub], [int1], {"predicate": "slt"}, (), loc)
    insert_before(anchor, more)
    next_args = {}
    for a, y in zip(iter_args, yield_op.operands):
        if any(a in [o for o in op.operands] for ld, sl in plans for op in sl + [ld]):
            next_args[id(a)] = _value_before(y, anchor, body)
    prefetched = []
    for ld, sl in plans:
        mapping = {id(iv): nxt.result}
        mapping.update(next_args)
        prefetched.append(_emit_load(anchor, ld, sl, mapping, more.result))
    # carry the tiles: new block arguments replace the original loads
    for (ld, _), val in zip(plans, prefetched):
        arg = body.add_arg(ld.result.type, ld.result.hint)
        ld.result.replace_all_uses_with(arg)
        yield_op.operands.append(val)
        val.uses.append(yield_op)
        ld.erase()
    extend_for_iter_args(for_op, first)
    return len(plans)


def _numel(t) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n


def _words(t) -> float:
    """32-bit registers an element takes (elements narrower than a word pack)."""
    return max(1, getattr(t.scalar, "bits", 32)) / 32


def run(module: Module, options=None) -> dict:
    count = 0
    for op in list(module.kernel.walk()):
        if op.name == "scf.for" and op.block is not None:
            count += _pipeline(op)
    return {"prefetched_loads": count}

