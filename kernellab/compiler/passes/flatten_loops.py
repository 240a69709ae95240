"""Fuse a `tl.range(..., flatten=True)` loop with the loop nested in it into one loop over (outer, inner) pairs.

A persistent matmul walks its tiles in an outer loop and K in an inner one, with the tile's setup (the outer
prologue) before the inner loop and its store (the epilogue) after it. Pipelined as a nest, every tile fills
the stages from empty and drains them before its epilogue: at short K that is most of the tile's time. As one
loop, `pipeline_dot_operands` copies the next tile's first K-tiles while this tile's last MMAs and its
epilogue run. For

    for i in range(lb_o, ub_o, st_o) carrying O:
        prologue(i, O)                                   -> P
        R = for j in range(lb_i, ub_i, st_i) carrying I = init:
            body(i, j, I, P)
        epilogue(i, O, P, R)                             -> O'

with n_i = len(range(lb_i, ub_i, st_i)) the same for every i, this builds (Triton's FuseNestedLoops does the
same; the code is ours)

    for t in range(0, n_o * n_i) carrying T = -1, i = lb_o - st_o, O, I, P:
        T = 0 if T == n_i - 1 else T + 1                 # the inner iteration
        i, P, I[dynamic] = if T == 0 and t < n_o * n_i:  # a new outer iteration
                               i += st_o; prologue(i, O); (i, P, inits)
                           else: (i, P, I)
        I[invariant] = select(T == 0, init, I)           # an accumulator's tl.zeros: wgmma's scale-d (lower_wgmma)
        body(i, lb_i + T * st_i, I, P)                   -> I'
        O = if T == n_i - 1: epilogue(i, O, P, I') else O

The prologue's values and the inner iteration's state are loop-carried, its outputs computed only when a tile
starts; `t < n_o * n_i` is always true in the loop but false in the pipeliner's look-ahead copy past the last
iteration, so that copy never runs a prologue for a tile that does not exist (its divisions by a group size of
zero). The inner body runs unconditionally, which the pipeliner needs, so a nest whose inner loop may run zero
times is versioned: `if n_i > 0` takes the fused loop, else the original nest without the inner loop (its
results are its inits), where the prologue and the epilogue run once per outer iteration as before.

A nest qualifies when the outer body holds exactly one loop, an `scf.for` at its top level with no loop inside
it and a `tl.dot` in it (Triton's rule), both steps are constants, the inner bounds are defined outside the outer
loop (or computed in its body from such values by pure scalar ops, which move out), and the values the fused
loop must carry can start undefined (a block pointer the prologue makes starts as one with undefined offsets,
block_ptr.placeholder). Why a `flatten=True` loop stays a nest is recorded in
the stats. The fused loop's stage buffers stay live through the epilogue's (a TMA store's tile, a layout
conversion's scratch), so where they do not fit together the build keeps the nest (runtime/jit.py) rather than
drop a stage. KERNELLAB_FLATTEN=0 turns the pass off (to time before/after; part of the disk-cache key). The
CPU interpreter runs the tile IR, before this GPU pass.
"""
from __future__ import annotations

from ..ir import Block, Module, Op
from ..ops import info, is_loop, is_pure
from ..rewrite import int_const, is_defined_inside, move_before, top_level
from ..switches import switch
from ..types import DType, PointerType, TensorType, int1
from . import dce
from .dot_stages import Builder

NAME = "flatten_loops"
DESCRIPTION = "fuse a flatten=True loop with its inner loop so the pipeliner prefetches across outer iterations"


def enabled() -> bool:
    """KERNELLAB_FLATTEN=0 keeps `flatten=True` nests as they are (part of the disk-cache key)."""
    return switch("KERNELLAB_FLATTEN", True)


def _line(op: Op) -> str:
    return f"line {op.loc.line if op.loc else '?'}"


def _speculatable(op: Op) -> bool:
    if op.regions or not is_pure(op) or op.results == [] or info(op.name).terminator:
        return False
    if any(r.type.shape for r in op.results) or any(v.type.shape for v in op.operands):
        return False  # scalars only: a bound's computation
    if info(op.name).traps:
        d = int_const(op.operands[1])
        return d is not None and d not in (0, -1)
    return True


def _hoistable(values, outer: Op) -> list | None:
    """The ops of the outer body (in body order) that must move before the outer loop for `values` to be defined
    outside it; None when one of them depends on the outer loop's variables or cannot run speculatively."""
    body = outer.regions[0]
    need, work = set(), list(values)
    while work:
        v = work.pop()
        if not is_defined_inside(v, outer):
            continue
        d = v.defining_op
        if d is None or d.block is not body or not _speculatable(d):
            return None
        if id(d) not in need:
            need.add(id(d))
            work.extend(d.operands)
    return [op for op in body.ops if id(op) in need]


def _hoist_invariants(outer: Op) -> None:
    """Move the prologue's loop-invariant pure ops (a strength-reduced pointer step, splats of arguments) before
    the outer loop, so the fused loop does not carry them."""
    body = outer.regions[0]
    for op in list(body.ops):
        if op.name == "scf.for":
            break
        if (not op.regions and is_pure(op) and op.results and not info(op.name).terminator
                and not any(is_defined_inside(v, outer) for v in op.operands)):
            if info(op.name).traps and int_const(op.operands[1]) in (None, 0, -1):
                continue
            move_before(op, outer)


def _poisonable(t) -> bool:
    return isinstance(t.scalar, (DType, PointerType)) and not t.is_block_ptr() and not t.is_memdesc()


def _nest(outer: Op):
    """(inner loop, ops to hoist) when the nest qualifies, else why not."""
    body = outer.regions[0]
    inner = [op for op in body.ops if op.name == "scf.for"]
    loops = [op for top in body.ops for op in top.walk() if is_loop(op.name)]
    if not loops:
        return "the loop holds no loop (an inner loop of one iteration is unrolled)"
    if len(loops) != 1:
        return f"the loop holds {len(loops)} loops (a nest of two is fused)"
    if not inner:
        return "the inner loop is not at the loop body's top level"
    inner = inner[0]
    if not any(op.name == "tt.dot" for op in inner.walk()):
        return "the inner loop has no tl.dot (only a matmul's K loop gains)"
    for name, loop in (("outer", outer), ("inner", inner)):
        st = int_const(loop.operands[2])
        if st is None or st == 0:
            return f"the {name} loop's step is not a constant"
    if outer.regions[0].args[0].type != inner.regions[0].args[0].type:
        return "the loops' induction variables have different widths"
    hoist = _hoistable(inner.operands[:3], outer)
    if hoist is None:
        return "the inner loop's bounds depend on the outer loop"
    return inner, hoist


def _trips(b: Builder, lb, ub, step: int):
    """len(range(lb, ub, step)) for a constant step: max(0, ceil((ub - lb) / step))."""
    t = lb.type
    span = b.op("arith.subi", [ub, lb] if step > 0 else [lb, ub], [t]).result
    s = abs(step)
    if s != 1:
        span = b.op("arith.addi", [span, b.const(s - 1, t)], [t]).result
        span = b.op("arith.divsi", [span, b.const(s, t)], [t]).result
    return b.op("arith.maxsi", [span, b.const(0, t)], [t]).result


def _block_ptr_origin(v, outer: Op) -> Op | None:
    """The prologue's `tt.make_block_ptr` block pointer `v` comes from (through `tt.advance`) when its base,
    shape and strides are defined outside the outer loop: the fused loop can then carry it from a placeholder."""
    d = v.defining_op
    while d is not None and d.name == "tt.advance":
        d = d.operands[0].defining_op
    if d is None or d.name != "tt.make_block_ptr" or d.block is not outer.regions[0]:
        return None
    n = len(d.attrs["block_shape"])
    return None if any(is_defined_inside(x, outer) for x in d.operands[:1 + 2 * n]) else d


def _poison(b: Builder, t, v=None, outer=None):
    """An undefined value of type `t`; for a block pointer, one with `v`'s base, shape and strides and undefined
    offsets (block_ptr.placeholder)."""
    if t.is_block_ptr():
        mk = _block_ptr_origin(v, outer)
        n = len(mk.attrs["block_shape"])
        offs = [b.op("ub.poison", [], [o.type]).result for o in mk.operands[1 + 2 * n:]]
        return b.op("tt.make_block_ptr", list(mk.operands[:1 + 2 * n]) + offs, [t], dict(mk.attrs)).result
    p = b.op("ub.poison", [], [t.scalar]).result
    return b.op("tt.splat", [p], [t]).result if isinstance(t, TensorType) and t.shape else p


def _replace_in(old, new, where) -> None:
    """Point the uses of `old` by ops for which `where(op)` holds at `new`."""
    for u in list({id(o): o for o in old.uses}.values()):
        if where(u):
            for k, v in enumerate(u.operands):
                if v is old:
                    u.set_operand(k, new)


def _inside(op: Op, region_op: Op) -> bool:
    while op is not None:
        if op is region_op:
            return True
        op = op.block.parent if op.block is not None else None
    return False


def _flatten(outer: Op):
    found = _nest(outer)
    if isinstance(found, str):
        return found
    inner, hoist = found
    for op in hoist:  # the inner bounds' computation
        move_before(op, outer)
    _hoist_invariants(outer)
    body, ib = outer.regions[0], inner.regions[0]
    k = body.ops.index(inner)
    prologue, epilogue = body.ops[:k], body.ops[k + 1:-1]
    pro_ids = {id(op) for op in prologue}
    # the prologue's values used past it (in the inner body, the epilogue, the outer yield); the inner loop's own
    # operands are its bounds (hoisted) and its inits (carried in their own slots)
    outs = [r for op in prologue if id(op) in pro_ids for r in op.results
            if any(u is not inner and id(top_level(u, body)) not in pro_ids for u in r.uses)]
    inits = list(inner.operands[3:])
    dyn = [n for n, v in enumerate(inits) if is_defined_inside(v, outer)]
    for v in outs + [inits[n] for n in dyn]:
        if not _poisonable(v.type) and _block_ptr_origin(v, outer) is None:
            return f"a {v.type} value of the tile's prologue would be carried across tiles"
    loc = outer.loc
    lb_o, ub_o, st_o = outer.operands[:3]
    lb_i, ub_i, st_i = inner.operands[:3]
    step_o, step_i = int_const(st_o), int_const(st_i)
    ity = lb_o.type
    pre = Builder(outer, loc)
    n_i = _trips(pre, lb_i, ub_i, step_i)
    n_o = _trips(pre, lb_o, ub_o, step_o)
    known = int_const(ub_i) is not None and int_const(lb_i) is not None
    versioned = not (known and (int_const(ub_i) - int_const(lb_i)) * step_i > 0)
    home = outer
    if versioned:  # `if n_i > 0: fused loop  else: the nest without its inner loop`
        nonempty = pre.op("arith.cmpi", [n_i, pre.const(0, ity)], [int1], {"predicate": "sgt"}).result
        then_b, else_b = Block(), Block()
        vif = pre.op("scf.if", [nonempty], [r.type for r in outer.results], {}, [r.hint for r in outer.results])
        vif.regions = [then_b, else_b]
        then_b.parent = else_b.parent = vif
        plain = outer.clone({})
        plain.attrs.pop("flatten", None)
        else_b.append(plain)
        cin = next(op for op in plain.regions[0].ops if op.name == "scf.for")
        for r, v in zip(cin.results, cin.operands[3:]):
            r.replace_all_uses_with(v)
        cin.erase()
        else_b.append(Op("scf.yield", list(plain.results), [], {}, (), loc))
        home = then_b.append(Op("scf.yield", [], [], {}, (), loc))
    b = Builder(home, loc)
    total = b.op("arith.muli", [n_o, n_i], [ity], hints=["flat_iters"]).result
    last_t = b.op("arith.subi", [n_i, b.const(1, ity)], [ity]).result

    o_args, i_args = body.args[1:], ib.args[1:]
    fb = Block([ity, ity, ity] + [a.type for a in o_args] + [a.type for a in i_args] + [v.type for v in outs],
               ["flat", "inner_iter", outer.regions[0].args[0].hint or "outer_iv"]
               + [a.hint for a in o_args] + [a.hint for a in i_args] + [v.hint for v in outs])
    t, t_prev, i_prev = fb.args[:3]
    f_o = fb.args[3:3 + len(o_args)]
    f_i = fb.args[3 + len(o_args):3 + len(o_args) + len(i_args)]
    f_p = fb.args[3 + len(o_args) + len(i_args):]
    flat_inits = ([b.const(-1, ity), b.op("arith.subi", [lb_o, st_o], [ity]).result] + list(outer.operands[3:])
                  + [_poison(b, v.type, v, outer) if n in dyn else v for n, v in enumerate(inits)]
                  + [_poison(b, v.type, v, outer) for v in outs])
    attrs = {"flattened": True}
    stages = inner.attrs.get("num_stages", outer.attrs.get("num_stages"))
    if stages is not None:
        attrs["num_stages"] = stages
    flat = Op("scf.for", [b.const(0, ity), total, b.const(1, ity)] + flat_inits,
              [v.type for v in flat_inits], attrs, [fb], loc,
              [None, None] + [r.hint for r in outer.results] + [None] * (len(flat_inits) - 2 - len(o_args)))
    home.block.insert(home.block.ops.index(home), flat)
    fy = fb.append(Op("scf.yield", [], [], {}, (), loc))
    f = Builder(fy, loc)
    zero, one = f.const(0, ity), f.const(1, ity)
    wrap = f.op("arith.cmpi", [t_prev, last_t], [int1], {"predicate": "eq"}).result
    t_cur = f.op("arith.select", [wrap, zero, f.add(t_prev, one)], [ity], hints=["inner_iter"]).result
    first = f.op("arith.cmpi", [t_cur, zero], [int1], {"predicate": "eq"}, ["tile_start"]).result
    live = f.op("arith.cmpi", [t, total], [int1], {"predicate": "slt"}).result
    start = f.op("arith.andi", [first, live], [int1]).result
    pthen, pelse = Block(), Block()
    p_types = [ity] + [v.type for v in outs] + [inits[n].type for n in dyn]
    ob = body.args[0]
    pif = f.op("scf.if", [start], p_types, {}, [ob.hint] + [v.hint for v in outs] + [i_args[n].hint for n in dyn])
    pif.regions = [pthen, pelse]
    pthen.parent = pelse.parent = pif
    i_new = Op("arith.addi", [i_prev, st_o], [ity], {}, (), loc, [ob.hint])
    pthen.append(i_new)
    for op in prologue:
        if id(op) in pro_ids:
            op.block.ops.remove(op)
            pthen.append(op)
    pthen.append(Op("scf.yield", [i_new.result] + outs + [inits[n] for n in dyn], [], {}, (), loc))
    pelse.append(Op("scf.yield", [i_prev] + list(f_p) + [f_i[n] for n in dyn], [], {}, (), loc))
    i_cur = pif.results[0]
    # the outer variables: inside the prologue its new value, elsewhere the if's result
    _replace_in(ob, i_new.result, lambda u: _inside(u, pif))
    _replace_in(ob, i_cur, lambda u: True)
    for a, fa in zip(o_args, f_o):
        a.replace_all_uses_with(fa)
    for v, r in zip(outs, pif.results[1:1 + len(outs)]):
        _replace_in(v, r, lambda u: not _inside(u, pif))
    # the inner iteration: its variable, its carried values (reset where a tile starts)
    j = t_cur
    if step_i != 1:
        j = f.op("arith.muli", [j, st_i], [ity]).result
    if int_const(lb_i) != 0:
        j = f.add(j, lb_i)
    ib.args[0].replace_all_uses_with(j)
    dyn_vals = dict(zip(dyn, pif.results[1 + len(outs):]))
    for n, (a, fa) in enumerate(zip(i_args, f_i)):
        if n in dyn_vals:
            a.replace_all_uses_with(dyn_vals[n])
            continue
        cond = first
        if isinstance(a.type, TensorType) and a.type.shape:
            cond = f.op("tt.splat", [first], [TensorType(a.type.shape, int1)]).result
        a.replace_all_uses_with(f.op("arith.select", [cond, inits[n], fa], [a.type], hints=[a.hint]).result)
    iy = ib.terminator
    for op in list(ib.ops[:-1]):
        ib.ops.remove(op)
        op.block = None
        fb.insert(fb.ops.index(fy), op)
    i_next = list(iy.operands)
    for r, v in zip(inner.results, i_next):
        r.replace_all_uses_with(v)
    # the epilogue, where the last inner iteration of a tile ends
    ethen, eelse = Block(), Block()
    oy = body.terminator
    is_last = f.op("arith.cmpi", [t_cur, last_t], [int1], {"predicate": "eq"}, ["tile_end"]).result
    eif = f.op("scf.if", [is_last], [a.type for a in o_args], {}, [a.hint for a in o_args])
    eif.regions = [ethen, eelse]
    ethen.parent = eelse.parent = eif
    for op in epilogue:
        op.block.ops.remove(op)
        ethen.append(op)
    ethen.append(Op("scf.yield", list(oy.operands), [], {}, (), loc))
    eelse.append(Op("scf.yield", list(f_o), [], {}, (), loc))
    for v in [t_cur, i_cur] + list(eif.results) + i_next + list(pif.results[1:1 + len(outs)]):
        fy.operands.append(v)
        v.uses.append(fy)
    # the old nest is empty now
    results = flat.results[2:2 + len(o_args)]
    if versioned:
        for v in results:
            home.operands.append(v)
            v.uses.append(home)
        results = home.block.parent.results
    for r, fr in zip(outer.results, results):
        r.replace_all_uses_with(fr)
    iy.erase()
    inner.erase()
    oy.erase()
    outer.erase()
    return None


def run(module: Module, options=None) -> dict:
    stats = {"flattened": 0}
    loops = [op for op in module.kernel.walk() if op.name == "scf.for" and op.attrs.get("flatten")]
    if not loops:
        return stats
    why_not = []
    if not enabled():
        why_not = [f"{_line(op)}: KERNELLAB_FLATTEN=0" for op in loops]
    elif not getattr(options, "flatten", True):
        why_not = [f"{_line(op)}: fused, the stages and the epilogue's buffers were over the shared memory"
                   for op in loops]
    else:
        for op in loops:
            if op.block is None:
                continue
            why = _flatten(op)
            if why is None:
                stats["flattened"] += 1
            else:
                why_not.append(f"{_line(op)}: {why}")
    if why_not:
        stats["not_flattened"] = why_not
    if stats["flattened"]:
        dce.run(module)
    return stats
