"""Structured control flow -> basic blocks, with one phi per register of every carried value."""
from __future__ import annotations

import re

from llvmlite import ir

from .lowering_core import KernelLowering, handles


def _flat(lw, values):
    """Flatten carried values to LLVM scalars: tensors are register lists, block pointers tuples."""
    out, counts = [], []
    for v in values:
        if isinstance(v, tuple) and v and v[0] == "blockptr":
            _, base, shape, strides, offs = v
            out.extend([base] + list(shape) + list(strides) + list(offs))
            counts.append(("bp", len(shape)))
        elif isinstance(v, list):
            out.extend(v)
            counts.append(len(v))
        else:
            out.append(v)
            counts.append(None)
    return out, counts


def _unflat(flat, counts):
    out, i = [], 0
    for c in counts:
        if c is None:
            out.append(flat[i])
            i += 1
        elif isinstance(c, tuple):
            n = c[1]
            base, rest = flat[i], flat[i + 1:i + 1 + 3 * n]
            out.append(("blockptr", base, rest[:n], rest[n:2 * n], rest[2 * n:]))
            i += 1 + 3 * n
        else:
            out.append(flat[i:i + c])
            i += c
    return out


def _loop_hints(lw: KernelLowering, op, latch) -> None:
    """`llvm.loop` metadata on a loop's back edge: `llvm.licm.disable` for `disable_licm` loops. A loop ID must be
    a distinct node whose first operand is itself, which llvmlite cannot build: the node is made with a unique
    placeholder string that `self_reference_loop_ids` turns into the self-reference in the module's text."""
    if not op.attrs.get("disable_licm"):
        return
    lw.loop_ids = getattr(lw, "loop_ids", 0) + 1
    hint = lw.mod.add_metadata([ir.MetaDataString(lw.mod, "llvm.licm.disable")])
    latch.set_metadata("llvm.loop", lw.mod.add_metadata([ir.MetaDataString(lw.mod, f"{LOOP_ID}{lw.loop_ids}"),
                                                         hint]))


LOOP_ID = "kl.loop.id."


def self_reference_loop_ids(text: str) -> str:
    """`!N = !{!"kl.loop.id.K", ...}` -> `!N = distinct !{!N, ...}` (see `_loop_hints`)."""
    return re.sub(r'^(!\d+) = !\{\s*!"' + re.escape(LOOP_ID) + r'\d+"', r"\1 = distinct !{\1", text, flags=re.M)


@handles("scf.for")
def _for(lw: KernelLowering, op):
    b = lw.b
    lb, ub, step = (lw.get(v) for v in op.operands[:3])
    inits, counts = _flat(lw, [lw.get(v) for v in op.operands[3:]])
    pre = b.block
    header = lw.fn.append_basic_block("for.header")
    body = lw.fn.append_basic_block("for.body")
    exit_ = lw.fn.append_basic_block("for.exit")
    b.branch(header)
    b.position_at_end(header)
    iv = b.phi(lb.type, name="iv")
    iv.add_incoming(lb, pre)
    phis = []
    for x in inits:
        p = b.phi(x.type)
        p.add_incoming(x, pre)
        phis.append(p)
    step_op = op.operands[2].defining_op
    negative = step_op is not None and step_op.name == "arith.constant" and step_op.attrs["value"] < 0
    cond = b.icmp_signed(">" if negative else "<", iv, ub)
    b.cbranch(cond, body, exit_)
    b.position_at_end(body)
    region = op.regions[0]
    lw.put(region.args[0], iv)
    for a, v in zip(region.args[1:], _unflat(phis, counts)):
        lw.put(a, v)
    lw.block_without_terminator(region)
    yields, _ = _flat(lw, [lw.get(v) for v in region.ops[-1].operands])
    nxt = b.add(iv, step)
    end = b.block
    iv.add_incoming(nxt, end)
    for p, y in zip(phis, yields):
        p.add_incoming(y, end)
    _loop_hints(lw, op, b.branch(header))
    b.position_at_end(exit_)
    for r, v in zip(op.results, _unflat(phis, counts)):
        lw.put(r, v)


@handles("scf.if")
def _if(lw: KernelLowering, op):
    b = lw.b
    cond = lw.get(op.operands[0])
    then_bb = lw.fn.append_basic_block("if.then")
    else_bb = lw.fn.append_basic_block("if.else")
    merge = lw.fn.append_basic_block("if.end")
    b.cbranch(cond, then_bb, else_bb)
    ends = []
    for region, bb in zip(op.regions, (then_bb, else_bb)):
        b.position_at_end(bb)
        lw.block_without_terminator(region)
        vals, counts = _flat(lw, [lw.get(v) for v in region.ops[-1].operands]) if region.ops else ([], [])
        ends.append((b.block, vals, counts))
        b.branch(merge)
    b.position_at_end(merge)
    if op.results:
        (tb, tv, counts), (eb, ev, _) = ends
        phis = []
        for x, y in zip(tv, ev):
            p = b.phi(x.type)
            p.add_incoming(x, tb)
            p.add_incoming(y, eb)
            phis.append(p)
        for r, v in zip(op.results, _unflat(phis, counts)):
            lw.put(r, v)


@handles("scf.while")
def _while(lw: KernelLowering, op):
    b = lw.b
    inits, counts = _flat(lw, [lw.get(v) for v in op.operands])
    pre = b.block
    before_bb = lw.fn.append_basic_block("while.cond")
    after_bb = lw.fn.append_basic_block("while.body")
    exit_ = lw.fn.append_basic_block("while.exit")
    b.branch(before_bb)
    b.position_at_end(before_bb)
    phis = []
    for x in inits:
        p = b.phi(x.type)
        p.add_incoming(x, pre)
        phis.append(p)
    before, after = op.regions
    for a, v in zip(before.args, _unflat(phis, counts)):
        lw.put(a, v)
    lw.block_without_terminator(before)
    cond_op = before.ops[-1]
    cond = lw.get(cond_op.operands[0])
    fwd = [lw.get(v) for v in cond_op.operands[1:]]
    b.cbranch(cond, after_bb, exit_)
    b.position_at_end(after_bb)
    for a, v in zip(after.args, fwd):
        lw.put(a, v)
    lw.block_without_terminator(after)
    ys, _ = _flat(lw, [lw.get(v) for v in after.ops[-1].operands])
    end = b.block
    for p, y in zip(phis, ys):
        p.add_incoming(y, end)
    _loop_hints(lw, op, b.branch(before_bb))
    b.position_at_end(exit_)
    for r, v in zip(op.results, fwd):
        lw.put(r, v)


@handles("tt.return", "scf.yield", "scf.condition", "tt.reduce.return")
def _terminator(lw: KernelLowering, op):
    pass
