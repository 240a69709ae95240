"""Loop-carried values as webs, and carrying a web in the layout its readers want.

A quantity carried through loops and branches is several SSA values: an `scf.for`'s iter argument and its result, an
`scf.if`'s result, tied together by the `scf.yield`s and loop inits that feed one from another. Such a web has one
layout (the values' types must agree), chosen by assign_layouts where it was computed. Where every reader outside the
web converts it to one other layout, carrying the web in that layout instead moves the conversions to where values
enter it (the loop inits, the yields of freshly computed values). remove_layout_conversions does this only when each
of those can be recomputed in the new layout (index math, masks, splats): then the conversions are gone, not moved.

The case that needs it: a loop flatten_loops fused (a persistent variant's tile loop with its K loop) computes a
tile's masks and offsets in its prologue `scf.if` and carries them through the iterations; a side load (the W4A16
matmul's packed weights) reads its mask in another layout than the prologue built it in, a conversion of the whole
128x64 mask through shared memory between two barriers every iteration, for a value that changes once a tile.
A web read only inside branches (the same loop's epilogue, taken once a tile: sink_conversions moves those
conversions there) is carried in its readers' layout only where that holds no more registers a thread: the corpus
matmul's persistent variants carry their epilogue's row and column offsets one element a thread and read them in
slice layouts of 8 (replicated), and ran 0.92-1.00x on the H200 so; the W4A16 matmul's offsets and masks, carried
as 64x1 tiles of 8 a thread and read in layouts of 4, are carried there (183 -> 134 registers, 1.14-1.21x).
"""
from __future__ import annotations

from ..ir import Block, Op, Value
from ..ops import is_pure
from ..rewrite import insert_before, top_level
from ..types import TensorType

_PHI_OPS = ("scf.for", "scf.if")


def is_carried(v: Value) -> bool:
    """An `scf.for` iter argument or result, or an `scf.if` result."""
    owner = v.owner
    if isinstance(owner, Op):
        return owner.name in _PHI_OPS
    parent = owner.parent if isinstance(owner, Block) else None
    return parent is not None and parent.name == "scf.for" and v.index >= 1


def _fed(op: Op, i: int) -> Value | None:
    """The carried value that operand `i` of `op` becomes (a loop init, a yielded value), or None."""
    if op.name == "scf.for" and i >= 3:
        return op.regions[0].args[i - 2]
    if op.name == "scf.yield":
        parent = op.block.parent if op.block is not None else None
        if parent is not None and parent.name == "scf.for":
            return parent.regions[0].args[i + 1]
        if parent is not None and parent.name == "scf.if":
            return parent.results[i]
    return None


def _feeders(v: Value) -> tuple[list, list]:
    """The (op, operand index) slots whose values become `v`, and the carried values `v` is the same quantity as
    without a slot between (a loop's iter argument and its result)."""
    owner = v.owner
    if isinstance(owner, Block):  # an iter argument
        loop, k = owner.parent, v.index - 1
        return [(loop, 3 + k), (owner.terminator, k)], [loop.results[k]]
    if owner.name == "scf.for":
        body, k = owner.regions[0], v.index
        return [(owner, 3 + k), (body.terminator, k)], [body.args[k + 1]]
    return [(r.terminator, v.index) for r in owner.regions], []


def _in_branch(op: Op) -> bool:
    parent = op.block.parent if op.block is not None else None
    return parent is not None and parent.name == "scf.if"


def _read_in_branches(v: Value, block, depth: int = 0) -> bool:
    """Whether every read of `v` is inside an `scf.if` of `block`, directly or through pure ops of `block` (the
    epilogue's index math, computed beside the branch that stores): sink_conversions then moves the conversion and
    that math into the branch."""
    if depth > 16:
        return False
    for u in {id(u): u for u in v.uses}.values():
        owner = top_level(u, block)
        if owner is None:
            return False
        if owner is u:
            if u.regions or not is_pure(u) or not all(_read_in_branches(r, block, depth + 1) for r in u.results):
                return False
        elif owner.name != "scf.if":
            return False
    return True


class Web:
    """The carried values one quantity takes (`members`), the slots where other values enter it (`entries`: (op,
    operand index)) and the ops that read it otherwise (`readers`)."""

    def __init__(self, start: Value):
        self.members: dict[int, Value] = {}
        self.entries: list[tuple[Op, int]] = []
        self.readers: list[Op] = []
        self.ok = True
        seen = set()
        stack = [start]
        while stack:
            m = stack.pop()
            if id(m) in self.members:
                continue
            self.members[id(m)] = m
            slots, same = _feeders(m)
            stack += same
            for op, i in slots:
                if op is None or op.name != "scf.yield" and op.name != "scf.for":
                    self.ok = False
                    continue
                src = op.operands[i]
                if is_carried(src):
                    stack.append(src)
                elif (id(op), i) not in seen:  # an iter argument and its loop's result share the init slot
                    seen.add((id(op), i))
                    self.entries.append((op, i))
            for u in {id(u): u for u in m.uses}.values():
                for i, o in enumerate(u.operands):
                    if o is not m:
                        continue
                    fed = _fed(u, i)
                    if fed is not None:
                        stack.append(fed)
                    else:
                        self.readers.append(u)

    def target(self):
        """The layout every reader converts the web to, where they all agree on one other than the web's; else None."""
        first = next(iter(self.members.values()))
        if not self.ok or not self.readers or not isinstance(first.type, TensorType):
            return None
        if any(r.name != "ttg.convert_layout" for r in self.readers):
            return None
        want = {str(r.result.type.layout): r.result.type.layout for r in self.readers}
        if len(want) != 1:
            return None
        layout = next(iter(want.values()))
        cold = all(_in_branch(r) or _read_in_branches(r.result, r.block) for r in self.readers)
        if cold and len(layout.registers(first.type.shape)) > len(first.type.layout.registers(first.type.shape)):
            return None
        return None if str(layout) == str(first.type.layout) else layout

    def retype(self, layout) -> list[Op]:
        """Carry the web in `layout`: its readers' conversions go, a conversion is placed in every entry slot.
        Returns those conversions (for the caller to recompute away)."""
        for m in self.members.values():
            m.type = m.type.with_layout(layout)
        for r in self.readers:
            r.result.replace_all_uses_with(r.operands[0])
            r.erase()
        added = []
        for op, i in self.entries:
            src = op.operands[i]
            conv = Op("ttg.convert_layout", [src], [src.type.with_layout(layout)], loc=op.loc, result_hints=[src.hint])
            insert_before(op, conv)
            op.set_operand(i, conv.result)
            added.append(conv)
        return added
