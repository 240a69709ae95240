"""Unroll `tl.range(..., loop_unroll_factor=k)` loops by k.

Triton's hint asks for k copies of the body per iteration of the loop (its TTIR shows them); kernellab did not
act on it. For a loop with a constant positive step s,

    for i in range(lb, ub, s) carrying X:  body(i, X) -> X'

becomes a main loop over whole groups of k iterations and a loop over the rest:

    m = lb + (max(ub - lb, 0) // (s * k)) * (s * k)
    for i in range(lb, m, s * k) carrying X:  X = body(i, X); X = body(i + s, X); ...; body(i + (k-1) s, X)
    for i in range(m, ub, s) carrying X:      body(i, X)

When the bounds are constants the remainder loop is left out where no iteration is left for it (and the main
loop where no whole group fits). The main loop keeps the loop's other attributes (num_stages); the remainder
loop keeps none: it runs fewer than k times. A loop whose step is not a positive constant keeps its shape (the
stats say how many).
"""
from __future__ import annotations

from ..ir import Block, Module, Op
from ..rewrite import insert_before, int_const, replace_uses

NAME = "unroll_loops"
DESCRIPTION = "unroll loops with loop_unroll_factor=k: k copies of the body per iteration, the rest in a second loop"

ATTR = "loop_unroll_factor"


def _copy_body(loop: Op, into, iv, carried: list) -> list:
    """Clone `loop`'s body into block `into` with the induction variable `iv` and the iter args `carried`; the
    values its yield gives."""
    body = loop.regions[0]
    mapping = {id(body.args[0]): iv}
    for a, v in zip(body.args[1:], carried):
        mapping[id(a)] = v
    for op in body.ops[:-1]:
        into.append(op.clone(mapping))
    return [mapping.get(id(v), v) for v in body.terminator.operands]


class _Before:
    """Scalar ops created right before the loop."""

    def __init__(self, loop: Op):
        self.loop = loop

    def op(self, name, operands, t, attrs=None):
        return insert_before(self.loop, Op(name, operands, [t], attrs or {}, (), self.loop.loc)).result

    def const(self, value, t):
        return self.op("arith.constant", [], t, {"value": value})


def _unroll(loop: Op, k: int) -> bool:
    lb, ub, st = loop.operands[:3]
    step = int_const(st)
    if step is None or step <= 0:
        return False
    t, loc = lb.type, loop.loc
    b = _Before(loop)
    inits = list(loop.operands[3:])
    clo, cub = int_const(lb), int_const(ub)
    trips = None if clo is None or cub is None else max(0, -(-(cub - clo) // step))
    group = step * k
    if trips is not None:
        main_ub = b.const(clo + (trips // k) * group, t)
    else:
        span = b.op("arith.maxsi", [b.op("arith.subi", [ub, lb], t), b.const(0, t)], t)
        whole = b.op("arith.muli", [b.op("arith.divsi", [span, b.const(group, t)], t), b.const(group, t)], t)
        main_ub = b.op("arith.addi", [lb, whole], t)
    body = loop.regions[0]
    attrs = {key: v for key, v in loop.attrs.items() if key != ATTR}
    results = inits
    if trips is None or trips >= k:
        new = Block([a.type for a in body.args], [a.hint for a in body.args])
        carried = list(new.args[1:])
        for j in range(k):
            iv = new.args[0]
            if j:
                off = b.const(j * step, t)
                iv = new.append(Op("arith.addi", [iv, off], [t], {}, (), loc, [body.args[0].hint])).result
            carried = _copy_body(loop, new, iv, carried)
        new.append(Op("scf.yield", carried, [], {}, (), body.terminator.loc))
        types, hints = [r.type for r in loop.results], [r.hint for r in loop.results]
        main = insert_before(loop, Op("scf.for", [lb, main_ub, b.const(group, t)] + inits, types, attrs, [new], loc,
                                      hints))
        results = list(main.results)
    if trips is None or trips % k:
        loop.regions = []
        rest = insert_before(loop, Op("scf.for", [main_ub, ub, st] + results, [r.type for r in loop.results], {},
                                      [body], loc, [r.hint for r in loop.results]))
        results = list(rest.results)
    for old, v in zip(loop.results, results):
        replace_uses(old, v)
    loop.erase()
    return True


def run(module: Module, options=None) -> dict:
    stats = {"unrolled": 0, "kept": 0}
    loops = [op for op in module.kernel.walk() if op.name == "scf.for" and (op.attrs.get(ATTR) or 1) > 1]
    for loop in reversed(loops):  # inner loops first: an outer copy then holds the unrolled inner loop
        if _unroll(loop, int(loop.attrs[ATTR])):
            stats["unrolled"] += 1
        else:
            loop.attrs.pop(ATTR)
            stats["kept"] += 1
    return stats
