"""Dead-code elimination.

Removes ops whose results are all unused and that have no side effects (`ops.is_pure`, which for
`scf.for` / `scf.if` also requires every op nested in them to be pure), innermost and last first,
until nothing changes. Beyond whole ops it removes:
- unused results of `scf.if` (and the yield slots feeding them),
- loop-carried values of `scf.for` whose result is unused and whose block argument only feeds
  pure ops (and slots of pure `scf.if` results) that in turn only compute the value yielded back into the
  same slot.
`scf.while` is never removed (it might not terminate) and side-effecting ops (stores, atomics,
prints, asserts, barriers, loads) always stay, used or not.
"""
from __future__ import annotations

from ..ir import Block, Module, Op
from ..ops import info, is_pure
from ..rewrite import drop_for_iter_args, drop_if_results, walk_ops_postorder

NAME = "dce"
DESCRIPTION = "remove unused side-effect-free ops, dead scf.if results and dead loop-carried values"


def _removable(op: Op) -> bool:
    if info(op.name).terminator or op.name == "scf.while" or any(r.uses for r in op.results):
        return False
    return is_pure(op) and all(is_pure(i) or info(i.name).terminator
                               for r in op.regions for x in r.ops for i in x.walk())


def _dead_iter_arg(for_op: Op, i: int):
    """(the body ops to erase, {id(scf.if): (the if, result slots to drop)}) with loop-carried value `i`, or None
    when it is live. The cycle may pass through results of a pure `scf.if` of the body (a fused loop's tile
    prologue yields the carried value, or a new one where a tile starts): those slots go too."""
    if for_op.results[i].uses:
        return None
    body: Block = for_op.regions[0]
    y = body.terminator
    if y is None or y.name != "scf.yield" or len(y.operands) <= i:
        return None
    # Walk backwards from the yielded value through pure ops of the body block.
    slice_ops: dict[int, Op] = {}
    ifs: dict[int, tuple] = {}  # id(if) -> (if, {slots})
    work = [y.operands[i]]
    while work:
        v = work.pop()
        d = v.defining_op
        if d is None or d.block is not body:
            continue
        if d.name == "scf.if" and is_pure(d):
            slots = ifs.setdefault(id(d), (d, set()))[1]
            if v.index not in slots:
                slots.add(v.index)
                work.extend(r.terminator.operands[v.index] for r in d.regions)
            continue
        if id(d) in slice_ops:
            continue
        if d.regions or not is_pure(d):
            return None
        slice_ops[id(d)] = d
        work.extend(d.operands)

    def only_feeds_slot(value) -> bool:
        for u in value.uses:
            if u is y:
                continue
            parent = u.block.parent if u.block is not None else None
            if u.name == "scf.yield" and parent is not None and id(parent) in ifs:
                slots = ifs[id(parent)][1]
                if all(j in slots for j, x in enumerate(u.operands) if x is value):
                    continue
                return False
            if id(u) not in slice_ops:
                return False
        # Every use by the yield must be slot i.
        return all(v is not value or j == i for j, v in enumerate(y.operands))

    arg = body.args[i + 1]
    if not only_feeds_slot(arg):
        return None
    for d in slice_ops.values():
        if not all(only_feeds_slot(r) for r in d.results):
            return None
    for d, slots in ifs.values():
        if not all(only_feeds_slot(d.results[k]) for k in slots):
            return None
    return [d for d in body.ops if id(d) in slice_ops], ifs


def _prune_for(op: Op, stats: dict) -> Op:
    n = len(op.results)
    for i in reversed(range(n)):
        found = _dead_iter_arg(op, i)
        if found is None:
            continue
        dead, ifs = found
        y = op.regions[0].terminator
        # Cut the cycle: yield the block argument back, erase the slice, then drop the slot.
        y.set_operand(i, op.regions[0].args[i + 1])
        for d in reversed(dead):
            d.erase()
        for d, slots in ifs.values():
            drop_if_results(d, slots)
            stats["if_results_removed"] += len(slots)
        stats["removed"] += len(dead)
        op = drop_for_iter_args(op, [i])
        stats["iter_args_removed"] += 1
    return op


def _prune_if(op: Op, stats: dict) -> Op:
    dead = [i for i, r in enumerate(op.results) if not r.uses]
    if dead:
        stats["if_results_removed"] += len(dead)
        return drop_if_results(op, dead)
    return op


def _sweep(block: Block, stats: dict) -> bool:
    changed = False
    for op in walk_ops_postorder(block):
        if op.block is None:
            continue
        if _removable(op):
            op.erase()
            stats["removed"] += 1
            changed = True
            continue
        if op.name == "scf.for" and op.results:
            before = stats["iter_args_removed"]
            _prune_for(op, stats)
            changed |= stats["iter_args_removed"] != before
        elif op.name == "scf.if" and op.results:
            before = stats["if_results_removed"]
            _prune_if(op, stats)
            changed |= stats["if_results_removed"] != before
    return changed


def sweep_block(block: Block) -> dict:
    """DCE of the ops nested in one block (a region another pass just built), until nothing changes."""
    stats = {"removed": 0, "iter_args_removed": 0, "if_results_removed": 0}
    while _sweep(block, stats):
        pass
    return stats


def run(module: Module) -> dict:
    stats = {"removed": 0, "iter_args_removed": 0, "if_results_removed": 0}
    for fn in module.functions:
        while _sweep(fn.body, stats):
            pass
    return stats
