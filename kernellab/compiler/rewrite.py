"""Small, generic IR-rewriting helpers shared by the tile-level passes.

Every helper keeps `Value.uses` exact (one entry per operand slot), so passes built on them can rely
on `not value.uses` meaning "dead".
"""
from __future__ import annotations

import math

from .ir import Block, Function, Op, Value, defer_insert_before
from .ops import info, is_pure
from .types import DType

# ---------------------------------------------------------------------------------------------
# Walking and structure queries


def walk_blocks(fn: Function):
    """Every block of `fn`, outer blocks before the blocks nested in their ops (pre-order)."""

    def rec(block: Block):
        yield block
        for op in list(block.ops):
            for r in op.regions:
                yield from rec(r)

    yield from rec(fn.body)


def walk_ops_postorder(block: Block):
    """Every op nested in `block`, innermost first, each block's ops in reverse order."""
    for op in reversed(list(block.ops)):
        for r in reversed(op.regions):
            yield from walk_ops_postorder(r)
        yield op


def defining_block(v: Value) -> Block | None:
    """The block that holds `v`'s definition (its block for a block argument)."""
    if isinstance(v.owner, Block):
        return v.owner
    if isinstance(v.owner, Op):
        return v.owner.block
    return None


def is_inside(block: Block | None, op: Op) -> bool:
    """Whether `block` is one of `op`'s regions or nested anywhere inside them."""
    while block is not None:
        if block.parent is op:
            return True
        parent = block.parent
        block = parent.block if parent is not None else None
    return False


def is_defined_inside(v: Value, op: Op) -> bool:
    """Whether `v` is defined by an op (or is a block argument) nested inside `op`'s regions."""
    return is_inside(defining_block(v), op)


def is_attached(op: Op) -> bool:
    """Whether `op` still hangs off a function body (it or an ancestor has not been erased)."""
    while op is not None:
        block = op.block
        if block is None:
            return False
        if block.parent is None:
            return True
        op = block.parent
    return True


# ---------------------------------------------------------------------------------------------
# Mutation


def insert_before(anchor: Op, op: Op) -> Op:
    """Insert a detached `op` right before `anchor` in `anchor`'s block."""
    if defer_insert_before(anchor, op):  # inside a batched_erase: placed at its sweep
        return op
    block = anchor.block
    block.insert(block.ops.index(anchor), op)
    return op


def top_level(op: Op, block) -> Op | None:
    """The op of `block` that is `op` or holds it in a region; None when `op` is not inside `block`."""
    while op is not None and op.block is not block:
        op = op.block.parent if op.block is not None else None
    return op


def branch_of_uses(op: Op):
    """The region of one `scf.if` of `op`'s block that holds every use of `op`'s result (where a pure op can move to
    run only when that branch is taken), or None."""
    regions = set()
    owner = None
    for u in op.result.uses:
        owner = top_level(u, op.block)
        if owner is None or owner is u or owner.name != "scf.if":
            return None
        regions.update(id(r) for r in owner.regions if top_level(u, r) is not None)
        if len(regions) > 1:
            return None
    return next(r for r in owner.regions if id(r) in regions) if owner is not None else None


def move_before(op: Op, anchor: Op) -> Op:
    """Move `op` (with its regions and uses untouched) right before `anchor`."""
    op.block.ops.remove(op)
    return insert_before(anchor, op)


def replace_uses(old: Value, new: Value):
    """`old.replace_all_uses_with(new)`, harmless when both are the same value."""
    if old is not new:
        old.replace_all_uses_with(new)


def replace_op(op: Op, values) -> None:
    """Make every use of `op`'s results use `values` instead, then erase `op`."""
    values = list(values)
    assert len(values) == len(op.results), f"{op.name}: {len(op.results)} results, {len(values)} values"
    for r, v in zip(op.results, values):
        replace_uses(r, v)
    op.erase()


def remove_operand(op: Op, index: int) -> Value:
    """Drop operand slot `index` from `op`, keeping use lists exact; returns the dropped value."""
    v = op.operands.pop(index)
    v.uses.remove(op)
    return v


def remove_block_arg(block: Block, index: int):
    """Drop an unused block argument and renumber the ones after it."""
    arg = block.args[index]
    assert not arg.uses, "removing a block argument that is still used"
    del block.args[index]
    for i, a in enumerate(block.args):
        a.index = i


def detach_regions(op: Op) -> list[Block]:
    """Take `op`'s regions away from it (so erasing `op` keeps their ops alive)."""
    regions, op.regions = op.regions, []
    for r in regions:
        r.parent = None
    return regions


def rebuild_op(op: Op, operands, keep_results) -> Op:
    """Replace `op` by a copy with `operands`, only the results listed in `keep_results` (whose uses
    move to the copy) and `op`'s regions moved over. Results not kept must be dead."""
    keep_results = list(keep_results)
    for i, r in enumerate(op.results):
        assert i in keep_results or not r.uses, f"{op.name}: dropping a used result"
    regions = detach_regions(op)
    new = Op(op.name, list(operands), [op.results[i].type for i in keep_results], dict(op.attrs), regions,
             op.loc, [op.results[i].hint for i in keep_results])
    insert_before(op, new)
    for j, i in enumerate(keep_results):
        replace_uses(op.results[i], new.results[j])
    op.erase()
    return new


def inline_block_before(block: Block, anchor: Op, arg_values) -> list[Value]:
    """Move `block`'s ops (all but its terminator) right before `anchor`, with the block arguments
    replaced by `arg_values`. The terminator is erased; returns the values it passed out."""
    arg_values = list(arg_values)
    assert len(arg_values) == len(block.args)
    for a, v in zip(block.args, arg_values):
        replace_uses(a, v)
    term = block.terminator
    if term is not None and not info(term.name).terminator:
        term = None
    for op in block.ops[:-1] if term is not None else list(block.ops):
        move_before(op, anchor)
    if term is None:
        return []
    outs = list(term.operands)
    term.erase()
    return outs


# ---------------------------------------------------------------------------------------------
# Constants

# (significand bits incl. the implicit one, minimum normal exponent, maximum exponent)
FLOAT_FORMATS = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127), "f64": (53, -1022, 1023)}
_INF = float("inf")


def _max_finite(p: int, emax: int) -> float:
    return math.ldexp((1 << p) - 1, emax - p + 1)


def round_float(x: float, t: DType) -> float:
    """The value of float type `t` nearest to the double `x` (ties to even), overflowing to infinity."""
    if t.ir.startswith("f8"):  # the 8-bit formats saturate instead (see fp8.py)
        from . import fp8

        return float(fp8.round_to(t.ir, x))
    if t.ir == "f64" or x != x or x in (_INF, -_INF) or x == 0:
        return x
    p, emin, emax = FLOAT_FORMATS[t.ir]
    _, e = math.frexp(x)  # |x| = m * 2**e with 0.5 <= m < 1
    if e > emax + 1:  # far beyond the largest finite value (and ldexp below would overflow)
        return math.copysign(_INF, x)
    q = max(e - p, emin - p + 1)  # exponent of one unit in the last place
    y = math.ldexp(round(math.ldexp(x, -q)), q)  # exact scaling; round() is half-to-even
    if abs(y) > _max_finite(p, emax):
        return math.copysign(_INF, x)
    return math.copysign(y, x) if y == 0 else y


def int_to_float(n: int, t: DType) -> float:
    """The value of float type `t` nearest to the integer `n` (ties to even), overflowing to infinity."""
    if n == 0:
        return 0.0
    p, _, emax = FLOAT_FORMATS[t.ir]
    m = abs(n)
    shift = m.bit_length() - p
    if shift > 0:
        q, r = divmod(m, 1 << shift)
        half = 1 << (shift - 1)
        if r > half or (r == half and q & 1):
            q += 1
        m = q << shift
    if m > _max_finite(p, emax):
        return math.copysign(_INF, n)
    return math.copysign(float(m), n)


def const_attr(v: Value):
    """The `value` attribute of `v`'s defining `arith.constant`, or None."""
    op = v.defining_op
    if op is not None and op.name == "arith.constant" and "value" in op.attrs:
        return op.attrs["value"]
    return None


def is_constant(v: Value) -> bool:
    op = v.defining_op
    return op is not None and op.name == "arith.constant" and "value" in op.attrs


def wrap_int(x: int, dtype: DType) -> int:
    """`x` wrapped to `dtype`'s bit width, in the type's own range (signed, unsigned, 0/1)."""
    bits = dtype.bits
    x &= (1 << bits) - 1
    if dtype.kind == "int" and x >= 1 << (bits - 1):
        x -= 1 << bits
    return x


def int_const(v: Value) -> int | None:
    """`v`'s value if it is an integer (or i1) constant, normalized to its type's range."""
    a = const_attr(v)
    t = v.type.scalar
    if a is None or not isinstance(t, DType) or not t.is_int():
        return None
    if isinstance(a, float):
        if a != a or a in (float("inf"), float("-inf")) or a != int(a):
            return None
        a = int(a)
    return wrap_int(int(a), t)


def float_const(v: Value) -> float | None:
    """`v`'s value if it is a floating-point constant, rounded to its type."""
    a = const_attr(v)
    t = v.type.scalar
    if a is None or not isinstance(t, DType) or not t.is_floating() or isinstance(a, bool):
        return None
    return round_float(float(a), t)


def attr_for(value, dtype: DType):
    """The `value` attribute for a constant of element type `dtype`: bool, int or float."""
    if dtype.kind == "bool":
        return bool(value)
    if dtype.is_int():
        return int(value)
    return float(value)


def make_constant(anchor: Op, type, value, hint=None) -> Value:
    """A new `arith.constant` of `type` (scalar or filled tensor) inserted right before `anchor`."""
    op = Op("arith.constant", (), [type], {"value": attr_for(value, type.scalar)}, (), anchor.loc, [hint])
    insert_before(anchor, op)
    return op.result


# ---------------------------------------------------------------------------------------------
# Structured control flow


def drop_for_iter_args(for_op: Op, indices) -> Op:
    """Remove the loop-carried values at `indices` (0-based, among the iter args) from an `scf.for`.
    Their results must be dead and their block arguments used only by the `scf.yield` slot that
    passes them on. Returns the rebuilt loop."""
    indices = sorted(set(indices))
    body = for_op.regions[0]
    y = body.terminator
    for i in reversed(indices):
        remove_operand(y, i)
        remove_block_arg(body, i + 1)
    keep = [i for i in range(len(for_op.results)) if i not in indices]
    operands = for_op.operands[:3] + [for_op.operands[3 + i] for i in keep]
    return rebuild_op(for_op, operands, keep)


def extend_for_iter_args(for_op: Op, inits) -> Op:
    """Rebuild an `scf.for` with extra loop-carried values starting at `inits`; the caller has already
    added their block arguments and yielded values to the body. Returns the rebuilt loop, whose first
    results replace the old loop's."""
    inits = list(inits)
    regions = detach_regions(for_op)
    new = Op("scf.for", list(for_op.operands) + inits, [r.type for r in for_op.results] + [v.type for v in inits],
             dict(for_op.attrs), regions, for_op.loc, [r.hint for r in for_op.results] + [None] * len(inits))
    insert_before(for_op, new)
    for old, res in zip(for_op.results, new.results):
        replace_uses(old, res)
    for_op.erase()
    return new


def drop_if_results(if_op: Op, indices) -> Op:
    """Remove the (dead) results at `indices` from an `scf.if` and the yield slots feeding them."""
    indices = sorted(set(indices))
    for region in if_op.regions:
        y = region.terminator
        if y is not None and y.name == "scf.yield" and y.operands:
            for i in reversed(indices):
                remove_operand(y, i)
    keep = [i for i in range(len(if_op.results)) if i not in indices]
    return rebuild_op(if_op, list(if_op.operands), keep)


def pure_slice(op: Op, body: Block, ifs: bool = False) -> list | None:
    """The pure ops of `body` (top level) that `op`'s operands depend on, in body order; None when they
    need something that cannot be recomputed (a load, a region op...). `ifs`: a pure `scf.if` may be among
    them (a fused loop's prologue, see passes/flatten_loops.py), and so may what its regions read from `body`."""
    needed, stack = set(), list(op.operands) + (captured(op) if ifs and op.regions else [])
    while stack:
        v = stack.pop()
        d = v.defining_op
        if d is None or d.block is not body or id(d) in needed:
            continue
        if not is_pure(d) or (d.regions and not (ifs and d.name == "scf.if")):
            return None
        needed.add(id(d))
        stack.extend(d.operands)
        if d.regions:
            stack.extend(captured(d))
    return [d for d in body.ops if id(d) in needed]


def captured(op: Op) -> list:
    """The values the ops nested in `op`'s regions read from outside them."""
    out = []
    for r in op.regions:
        for inner in r.ops:
            for sub in inner.walk():
                out += [v for v in sub.operands if not is_defined_inside(v, op)]
    return out


def zero_reset(acc):
    """(the condition, the select) when `acc` is `select(c, 0, x)` with a scalar condition `c` (splat or not), as
    flatten_loops resets an accumulator where a tile starts; else None."""
    sel = acc.defining_op
    if sel is None or sel.name != "arith.select":
        return None
    c, zero = sel.operands[0], sel.operands[1].defining_op
    if zero is None or zero.name != "arith.constant" or zero.attrs.get("value") not in (0, 0.0):
        return None
    d = c.defining_op
    if c.type.shape:
        if d is None or d.name != "tt.splat":
            return None
        c = d.operands[0]
    return c, sel
