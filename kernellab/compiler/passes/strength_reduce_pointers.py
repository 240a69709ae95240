"""Strength reduction: a pointer tile rebuilt from the loop counter becomes loop-carried.

Users write the same K loop two ways: pointers advanced each step (`a_ptrs += BK * sak`) or rebuilt from
the counter (`offs_k = k * BK + tl.arange(0, BK)`; `a_ptr + offs_m[:, None] * sam + offs_k[None, :]`).
The second form recomputes a tile of offsets every iteration; on the H200 the same matmul ran 2-14% slower
that way (128x128x64, 4 warps: 569 vs 649 TFLOP/s), with the extra integer work on the path between the
tensor-core wait and the next copies. Here, in an `scf.for`, the pointer of a load or store

    P(k) = P0 + splat(c * k + d)       (P0 a loop-invariant tile; c, d loop-invariant scalars)

is recognised by distributing over `+`, `-`, `*` by a uniform invariant (a splat or a constant),
`expand_dims`, `broadcast` and `addptr`, and carried by the loop in one of these forms:
- for a load of 16-bit (or 8-bit) elements that feeds a `tt.dot` of at least 64 rows (directly or transposed) and
  that the pipeliner copies by cp.async, a 64-bit scalar offset `o` (from `sext(c * lb + d)`, by
  `sext(c) * sext(step)`) with the pointer rebuilt as `P0 + splat(o)`; the user's own carried pointer tile
  (`ptrs += step`) becomes its first tile plus such an offset too. ptxas makes
  each copy's address one 64-bit add (IADD3 + IADD3.X) of a uniform register into a fresh register pair, as in
  Triton's loop. The two earlier forms cost more next to the HGMMAs: a carried pointer tile
  (`KERNELLAB_DOT_POINTER_FORM=tile`, kept to measure) is split by ptxas into 32-bit halves that it copies back
  into a pair before every cp.async (2 IMAD.MOV per copy: 128x128x64/4 warps 142 loop instructions against
  118 now and Triton's 123; 128x256x64/8 warps 111 against 96 and 105), and a 32-bit offset becomes one
  IMAD.WIDE per pointer on the FMA pipe (dispatch stalls, a rebuilt-from-k matmul at 0.88x Triton);
- for a small-M dot's operand (under 64 rows: mma.sync; see `_offset_wins`), or a tile the pipeliner cannot copy
  by cp.async, the pointer tile itself, starting at `P0 + splat(c * lb + d)` and advanced by `splat(c * step)`
  (a user's carried tile stays as written);
- elsewhere (attention backward's row vectors `lse` and `delta`, next to its dots, too), a 32-bit scalar offset
  `o` (from `c * lb + d`, by `c * step`), the pointer rebuilt as `P0 + splat(o)`: one uniform add per
  iteration and no 64-bit pointer tile held across the loop (Liger's kl_div forward 0.81 -> 0.93x Triton,
  group_norm 0.87 -> 0.99x).

A 32-bit (tf32) dot operand keeps the user's form (see `_rewrite`). Integer arithmetic wraps, so distributing
is exact up to where the user's own 32-bit offset overflowed, which was already a wrong address. Only pointers
with at least two tile ops depending on the counter are rewritten. Runs after licm, so "invariant" is "defined
outside the loop"; ends with a DCE sweep, so the replaced pointer tiles and their arithmetic are gone from its
own output (the lab draws and diffs the IR after every pass).
"""
from __future__ import annotations

import os
from typing import Callable

from ..gpu.axis_info import AxisAnalysis
from ..ir import Module, Op, Value
from ..ops import is_elementwise
from ..rewrite import const_attr, extend_for_iter_args, insert_before, is_defined_inside
from ..switches import switch
from ..types import PointerType, TensorType, int64
from . import dce

# the carried form of a dot operand's pointer: "offset64" (default) or "tile", to measure one against the other
DOT_FORM_ENV = "KERNELLAB_DOT_POINTER_FORM"
# the fewest rows of a dot whose operands get the offset form (sm_90's wgmma takes 64 rows a warpgroup)
OFFSET_MIN_M = 64


OFFSET_TILE_ENV = "KERNELLAB_OFFSET_TILE"


def _offset_tile() -> bool:
    """KERNELLAB_OFFSET_TILE=1 (default off until timed on a GPU; part of the compile caches' keys through
    runtime/codegen_env.py): in the scalar-offset form (a pointer that feeds no dot), hold the loop-invariant part
    as an integer offset tile from a scalar base (`base + (O0 + splat(o))` rebuilt each iteration) instead of a
    64-bit pointer tile (`P0 + splat(o)`): half the registers across the loop, one more add and a 64-bit widening
    per element per iteration. Unsloth's `_rms_sum_dw_partials` (a 64x64 fp32 tile summed over rows,
    `num_stages=3`, 4 warps): P0 held 32 pointers a thread, 64 registers: 148 registers against Triton's 94."""
    return switch(OFFSET_TILE_ENV, False)


def _dot_form() -> str:
    return "tile" if os.environ.get(DOT_FORM_ENV, "").lower() == "tile" else "offset64"

NAME = "strength_reduce_pointers"
DESCRIPTION = "a pointer tile rebuilt from the loop counter is carried as a scalar offset (64-bit for a dot operand)"

_INV = "invariant"
_SHAPE_OPS = ("tt.expand_dims", "tt.broadcast")


def _is_int(t) -> bool:
    return not isinstance(t, (PointerType, TensorType)) and t.is_int()


def _is_int_tile(v: Value) -> bool:
    return isinstance(v.type, TensorType) and not isinstance(v.type.scalar, PointerType) and v.type.scalar.is_int()


class _Unsupported(Exception):
    """The expression is not of the form P0 + splat(c * k + d) with matching integer widths."""


class _Loop:
    """The analysis and the rewrite of the pointers of one `scf.for`."""

    def __init__(self, loop: Op):
        self.loop = loop
        self.iv = loop.regions[0].args[0]
        self.plans: dict = {}

    # ---------------------------------------------------------------- which tiles depend on k, and how
    def plan(self, v: Value):
        """_INV, ("splat", scalar), ("splat_ptr", scalar addptr), (op,) / (op, uniform operand index) for a
        distributable op, or None."""
        key = id(v)
        if key not in self.plans:
            self.plans[key] = self._plan(v)
        return self.plans[key]

    def _plan(self, v: Value):
        if not is_defined_inside(v, self.loop):
            return _INV
        op = v.defining_op
        if op is None or not isinstance(v.type, TensorType):
            return None
        if op.name == "tt.splat":
            s = op.operands[0]
            if _is_int(s.type):
                return ("splat", s)
            # a scalar pointer moved by a per-iteration offset (`Y + k * n`), then splatted
            d = s.defining_op
            if d is not None and d.name == "tt.addptr" and not is_defined_inside(d.operands[0], self.loop):
                return ("splat_ptr", d)
            return None
        subs = [self.plan(x) for x in op.operands]
        if any(p is None for p in subs) or all(p is _INV for p in subs):
            return None
        if op.name in ("arith.addi", "arith.subi") and _is_int_tile(v):
            return (op,)
        if op.name == "arith.muli" and _is_int_tile(v):
            for i in (0, 1):
                if subs[i] is _INV and self._uniform(op.operands[i]):
                    return (op, i)
            return None
        if op.name in _SHAPE_OPS or op.name == "tt.addptr":
            return (op,)
        return None

    @staticmethod
    def _uniform(v: Value) -> bool:
        op = v.defining_op
        return op is not None and (op.name == "tt.splat" or (op.name == "arith.constant" and const_attr(v) is not None))

    def depth(self, plan) -> int:
        """How many tile ops of the original expression depend on the loop."""
        if plan is _INV or plan is None or plan[0] == "splat":
            return 0
        if plan[0] == "splat_ptr":
            return 1
        return 1 + sum(self.depth(self.plan(x)) for x in plan[0].operands)

    # ---------------------------------------------------------------- building, before the loop
    def split(self, v: Value):
        """(P0 or None, (c, d) or None) with v == P0 + splat(c * k + d); everything built before the loop."""
        p = self.plan(v)
        if p is _INV:
            return v, None
        if p[0] == "splat":
            return None, self.affine(p[1])
        if p[0] == "splat_ptr":
            base, off = p[1].operands
            return self.emit("tt.splat", [base], v.type), self.affine(off)
        op = p[0]
        if op.name in _SHAPE_OPS:
            inv, aff = self.split(op.operands[0])
            return (None if inv is None else self.emit(op.name, [inv], op.result.type, dict(op.attrs))), aff
        if op.name == "tt.addptr":
            (pi, pa), (oi, oa) = self.split(op.operands[0]), self.split(op.operands[1])
            if pi is None:
                raise _Unsupported
            inv = pi if oi is None else self.emit("tt.addptr", [pi, oi], op.result.type)
            return inv, self._add("arith.addi", pa, oa)
        if op.name == "arith.muli":
            u = op.operands[p[1]]
            inv, aff = self.split(op.operands[1 - p[1]])
            inv = None if inv is None else self.emit("arith.muli", [inv, u], op.result.type)
            if aff is not None:
                s = self._scalar_of(u)
                aff = tuple(self.emit("arith.muli", [x, s], x.type) for x in aff)
            return inv, aff
        (ai, aa), (bi, ba) = self.split(op.operands[0]), self.split(op.operands[1])
        if op.name == "arith.subi" and ai is None and bi is not None:
            ai = self._const(op.result.type, 0)
        if op.name == "arith.subi" and aa is None and ba is not None:
            aa = tuple(self._const(x.type, 0) for x in ba)
        return self._add_tiles(op.name, ai, bi), self._add(op.name, aa, ba)

    def affine(self, s: Value):
        """(c, d) with the scalar s == c * k + d, c and d loop-invariant scalars built before the loop."""
        if s is self.iv:
            return self._const(s.type, 1), self._const(s.type, 0)
        if not is_defined_inside(s, self.loop):
            return self._const(s.type, 0), s
        op = s.defining_op
        if op is None or not _is_int(s.type):
            raise _Unsupported
        if op.name in ("arith.addi", "arith.subi"):
            return self._add(op.name, self.affine(op.operands[0]), self.affine(op.operands[1]))
        if op.name == "arith.muli":
            for i in (0, 1):
                if not is_defined_inside(op.operands[i], self.loop):
                    u = op.operands[i]
                    return tuple(self.emit("arith.muli", [x, u], x.type) for x in self.affine(op.operands[1 - i]))
        raise _Unsupported

    def _add(self, name, a, b):
        if a is None or b is None:
            return a if b is None else b
        if a[0].type != b[0].type:
            raise _Unsupported
        return tuple(self.emit(name, [x, y], x.type) for x, y in zip(a, b))

    def _add_tiles(self, name, a, b):
        if a is None or b is None:
            return a if b is None else b
        return self.emit(name, [a, b], a.type)

    def _scalar_of(self, u: Value) -> Value:
        op = u.defining_op
        if op.name == "tt.splat":
            return op.operands[0]
        return self._const(u.type.scalar, const_attr(u))

    def _const(self, type, value) -> Value:
        return self.emit("arith.constant", [], type, {"value": value})

    def wide(self, x: Value) -> Value:
        """`x` (an integer scalar of at most 64 bits) as i64: a constant as a new constant, else extended by its
        signedness."""
        if x.type == int64:
            return x
        k = const_attr(x)
        if isinstance(k, int) and not isinstance(k, bool):
            return self._const(int64, k)
        return self.emit("arith.extsi" if x.type.kind == "int" else "arith.extui", [x], int64)

    def emit(self, name, operands, type, attrs=None, anchor=None) -> Value:
        op = Op(name, operands, [type], attrs or {}, (), self.loop.loc)
        insert_before(anchor or self.loop, op)
        return op.result


def _copied_async(ld: Op, axis: AxisAnalysis) -> bool:
    """Whether the pipeliner can copy `ld`'s tile by cp.async (runs of at least 4 bytes: contiguous, aligned
    and under one mask value). Only such copies pay for a carried 64-bit pointer tile (ptxas copies its halves
    into a pair before each cp.async); a tile loaded element by element keeps the carried pointers, whose
    one 64-bit add per pointer is as cheap as base + offset there (the corpus's ragged 32x32 matmul: 122 loop
    instructions against 143)."""
    ptr = ld.operands[0]
    info = axis[ptr]
    fast = max(range(len(info.contig)), key=lambda d: (info.contig[d], d))
    ebytes = max(1, ptr.type.scalar.elem.bits // 8)
    vec = min(info.contig[fast], 16 // ebytes, max(1, info.div[fast] // ebytes))
    if len(ld.operands) > 1 and isinstance(ld.operands[1].type, TensorType):
        vec = min(vec, axis[ld.operands[1]].const[fast])
    return vec * ebytes >= 4


def _rewrite(root: Op, loop: Op, state: _Loop, axis: Callable[[], AxisAnalysis]) -> Op | None:
    """Carry `root`'s pointer (or its offset) in `loop`; returns the rebuilt loop, or None when the pointer is
    left alone."""
    ptr = root.operands[0]
    if not isinstance(ptr.type, TensorType) or not isinstance(ptr.type.scalar, PointerType):
        return None
    plan = state.plan(ptr)
    if plan is None or plan is _INV or isinstance(plan[0], str) or plan[0].name != "tt.addptr" or state.depth(plan) < 2:
        return None
    try:
        inv, aff = state.split(ptr)
    except _Unsupported:
        return None  # ops built before the loop for a failed split are dead: DCE removes them
    if inv is None or aff is None:
        return None
    c, d = aff
    lb, step = loop.operands[0], loop.operands[2]
    if lb.type != c.type:
        return None
    offsets_type = TensorType(ptr.type.shape, c.type)
    start = state.emit("arith.addi", [state.emit("arith.muli", [c, lb], c.type), d], c.type)
    body = loop.regions[0]
    yield_op = body.terminator
    hint = ptr.hint or (f"{root.results[0].hint}_ptrs" if root.results and root.results[0].hint else None)
    feeds_dot = _feeds_dot(root)
    if feeds_dot and root.result.type.scalar.bits == 32:
        # a tf32 operand: wgmma reads it K-major, so a tile contiguous along N is copied 4 bytes at a time and
        # a carried tile is one 64-bit pointer per element (Liger's neighborhood attention, 64x64 fp32, 4 warps:
        # 164 registers against 128 with the user's rebuild from the counter, whose per-run bases LLVM keeps)
        return None
    if feeds_dot and (c.type == int64 or c.type.bits < 64) and _offset_wins(root, axis):
        init = state.wide(start)
        delta = state.emit("arith.muli", [state.wide(c), state.wide(step)], int64)
        carried = body.add_arg(int64, f"{hint}_offset" if hint else None)
        splat = state.emit("tt.splat", [carried], TensorType(ptr.type.shape, int64), anchor=root)
        root.set_operand(0, state.emit("tt.addptr", [inv, splat], ptr.type, anchor=root))
        advanced = state.emit("arith.addi", [carried, delta], int64, anchor=yield_op)
    elif feeds_dot:  # the pointer tile itself
        init = state.emit("tt.addptr", [inv, state.emit("tt.splat", [start], offsets_type)], ptr.type)
        delta = state.emit("tt.splat", [state.emit("arith.muli", [c, step], c.type)], offsets_type)
        carried = body.add_arg(ptr.type, hint)
        root.set_operand(0, carried)
        advanced = state.emit("tt.addptr", [carried, delta], ptr.type, anchor=yield_op)
    else:  # a scalar offset, the pointer rebuilt from it where it is used
        init = start
        delta = state.emit("arith.muli", [c, step], c.type)
        carried = body.add_arg(c.type, f"{hint}_offset" if hint else None)
        split = _base_and_offsets(inv, c.type, state) if _offset_tile() else None
        splat = state.emit("tt.splat", [carried], offsets_type, anchor=root)
        if split is not None:  # KERNELLAB_OFFSET_TILE: scalar base + (invariant offset tile + splat(o))
            base, offs = split
            total = state.emit("arith.addi", [offs, splat], offsets_type, anchor=root)
            base_tile = state.emit("tt.splat", [base], ptr.type, anchor=root)
            root.set_operand(0, state.emit("tt.addptr", [base_tile, total], ptr.type, anchor=root))
        else:
            root.set_operand(0, state.emit("tt.addptr", [inv, splat], ptr.type, anchor=root))
        advanced = state.emit("arith.addi", [carried, delta], c.type, anchor=yield_op)
    yield_op.operands.append(advanced)
    advanced.uses.append(yield_op)
    return extend_for_iter_args(loop, [init])


def _base_and_offsets(v: Value, itype, state: _Loop):
    """(scalar base pointer, offset tile of `itype` in v's shape) with v == splat(base) + offsets, the offset
    tile built before the loop from v's own chain of addptr / expand_dims / broadcast over a splatted scalar
    pointer; None when v is not such a chain (or holds offsets of another type, or none)."""
    op = v.defining_op
    if op is None:
        return None
    if op.name == "tt.splat":
        s = op.operands[0]
        return (s, None) if isinstance(s.type, PointerType) else None
    if op.name == "tt.addptr":
        inner = _base_and_offsets(op.operands[0], itype, state)
        off = op.operands[1]
        if inner is None or not isinstance(off.type, TensorType) or off.type.scalar != itype:
            return None
        base, offs = inner
        return base, off if offs is None else state.emit("arith.addi", [offs, off], off.type)
    if op.name in _SHAPE_OPS:
        inner = _base_and_offsets(op.operands[0], itype, state)
        if inner is None or inner[1] is None:
            return None
        base, offs = inner
        return base, state.emit(op.name, [offs], TensorType(v.type.shape, itype), dict(op.attrs))
    return None


def _dots_fed(root: Op) -> list:
    """The dots `root`'s tile reaches as an operand through elementwise ops and transposes (not through a
    broadcast); empty when `root` is not a load. Such a pointer stays a carried tile (or a 64-bit offset); a vector
    read next to the dots and broadcast over their tiles (a row statistic) gets the scalar offset, which later
    passes can re-derive in any layout."""
    if root.name != "tt.load":
        return []
    work, seen, dots = [root.result], set(), []
    while work:
        v = work.pop()
        for u in v.uses:
            if u.name == "tt.dot":
                if all(d is not u for d in dots):
                    dots.append(u)
            elif id(u) not in seen and (u.name == "tt.trans" or is_elementwise(u.name)):
                seen.add(id(u))
                work.extend(u.results)
    return dots


def _feeds_dot(root: Op) -> bool:
    return bool(_dots_fed(root))


def _offset_wins(ld: Op, axis: Callable[[], AxisAnalysis]) -> bool:
    """Whether `ld`, a load feeding dots, gets the 64-bit offset form (else the pointer tile): the form is asked
    for, every dot it feeds has at least OFFSET_MIN_M rows and the pipeliner copies the tile by cp.async. Decided
    on the tile IR alone (it is shared by num_warps / num_stages), by ptxas on sm_90a, 4 warps (registers /
    spilled bytes / loop SASS, tile form -> offset form):
    - 64 rows and more, the loop shorter at the same spills: 128x128x64 142 -> 118 (Triton 123), 128x256x64/8w
      111 -> 96 (Triton 105), 64x128x64 98 -> 93, user-carried 64x256x64 149 -> 138; sm_80's mma.sync at
      128x128x64 too, 270 -> 245 (64x128x32's small tiles: 61 -> 64, about even);
    - a small-M dot (BLOCK_M <= 32, mma.sync) loses: 16x32x256 60/0/157 -> 72/8/158 (Triton 64 registers),
      16x32x128/6 stages 89 -> 95, 16x32x64/8w 56 -> 65, sm_80 32x64x128 76/0/150 -> 72/8/166: its few copies
      a thread gain nothing and the base tile held beside the ldmatrix addresses costs registers."""
    if _dot_form() != "offset64":
        return False
    dots = _dots_fed(ld)
    return bool(dots) and all(d.result.type.shape[-2] >= OFFSET_MIN_M for d in dots) and _copied_async(ld, axis())


def _offset_carried_pointer(loop: Op, i: int, state: _Loop, axis: Callable[[], AxisAnalysis]) -> Op | None:
    """The user's own carried dot-operand pointer (`a_ptrs += BK * sak`): the loop's i-th carried value, a
    16-bit pointer tile advanced by a uniform invariant step and read only by loads feeding a dot, becomes its
    initial tile plus a 64-bit scalar offset (the dot-operand form above; DCE then drops the old tile). Returns
    the rebuilt loop, or None when the value is left alone."""
    body = loop.regions[0]
    arg, init, yield_op = body.args[1 + i], loop.operands[3 + i], body.terminator
    t = arg.type
    if (not isinstance(t, TensorType) or not isinstance(t.scalar, PointerType) or loop.results[i].uses
            or init.type != t):
        return None
    adv = yield_op.operands[i].defining_op
    if adv is None or adv.name != "tt.addptr" or adv.operands[0] is not arg or adv.block is not body:
        return None
    delta = adv.operands[1]
    if is_defined_inside(delta, loop) or (const_attr(delta) is None and (
            delta.defining_op is None or delta.defining_op.name != "tt.splat")):
        return None
    loads = [u for u in arg.uses if u is not adv]
    if len(adv.results[0].uses) != 1 or not loads or any(
            u.name != "tt.load" or u.operands[0] is not arg or any(x is arg for x in u.operands[1:])
            or u.block is not body or u.result.type.scalar.bits == 32 or not _offset_wins(u, axis) for u in loads):
        return None
    step = state._scalar_of(delta)
    if not _is_int(step.type) or (step.type != int64 and step.type.bits >= 64):
        return None
    step = state.wide(step)
    offset = body.add_arg(int64, f"{arg.hint}_offset" if arg.hint else None)
    for u in loads:
        splat = state.emit("tt.splat", [offset], TensorType(t.shape, int64), anchor=u)
        u.set_operand(0, state.emit("tt.addptr", [init, splat], t, anchor=u))
    advanced = state.emit("arith.addi", [offset, step], int64, anchor=yield_op)
    yield_op.operands.append(advanced)
    advanced.uses.append(yield_op)
    return extend_for_iter_args(loop, [state._const(int64, 0)])


def _roots(loop: Op) -> list:
    """Loads and stores of this loop (not of loops nested in it)."""
    out = []

    def visit(block):
        for op in block.ops:
            if op.name in ("tt.load", "tt.store"):
                out.append(op)
            if op.name != "scf.for" and op.name != "scf.while":
                for r in op.regions:
                    visit(r)
    visit(loop.regions[0])
    return out


def _visit(block, stats: dict, axis: Callable[[], AxisAnalysis]):
    for op in list(block.ops):
        for r in op.regions:
            _visit(r, stats, axis)
        if op.name != "scf.for":
            continue
        loop = op
        for root in _roots(loop):
            new = _rewrite(root, loop, _Loop(loop), axis)
            if new is not None:
                loop = new
                stats["carried"] += 1
        if _dot_form() == "offset64":
            for i in range(len(loop.operands) - 3):
                new = _offset_carried_pointer(loop, i, _Loop(loop), axis)
                if new is not None:
                    loop = new
                    stats["offset"] += 1


def run(module: Module) -> dict:
    stats = {"carried": 0, "offset": 0}
    for fn in module.functions:
        found: list = []

        def axis(fn=fn, found=found) -> AxisAnalysis:
            """The axis analysis of the function as it came, made on first need (only a dot operand's load asks):
            every load's pointer and mask are in it, and rewrites keep those values."""
            if not found:
                found.append(AxisAnalysis(fn))
            return found[0]

        before = stats["carried"] + stats["offset"]
        _visit(fn.body, stats, axis)
        if stats["carried"] + stats["offset"] != before:
            # what the rewrite left dead goes now, not at the pipeline's next DCE: the user's carried pointer
            # tile and its advance, a rebuilt pointer's per-iteration arithmetic, the pieces of a failed split
            # (the IR after this pass is what the lab draws and diffs)
            dce.sweep_block(fn.body)
    return stats
