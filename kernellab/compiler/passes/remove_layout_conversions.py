"""Remove layout conversions that cost shared-memory round trips.

A conversion of a value computed only from scalars by cheap ops (ranges, splats, constants,
broadcasts, index arithmetic, pointer offsets) is removed by recomputing that chain directly in the
wanted layout. Conversions to the layout the value already has, and chains of conversions, go too.

Where the chain reaches a value that cannot be recomputed (a load, a reduction, a loop-carried value) through
an `expand_dims` — a row vector broadcast over a tile, like attention's log-sum-exp `lse[:, None]` — that
narrower value is converted instead, right where it is defined, and the broadcast rebuilt in the wanted
layout: one conversion of BLOCK_M values (hoisted out of a loop when the value is loop-invariant) instead of
one of the BLOCK_M x BLOCK_N tile every iteration. A small load (fewer elements than the program has threads,
read only there) is issued in the wanted layout instead of being converted at all, as Triton does.

KERNELLAB_NARROW_CONVERSIONS=1 (default off until timed on a GPU; part of the compile caches' keys through
runtime/codegen_env.py): where neither works, a chain of index math and arithmetic that widens narrower values (bf16
loaded, `x.to(tl.float32) * scale`) is rebuilt in the wanted layout from conversions of those narrower values, where
they are fewer bytes in all than the value converted: heldout_texts4's bias-dropout-residual backward converted
its f32 `dy * scale` (16 KB at 32x128) into the u8 mask's layout where converting the bf16 `dy` (8 KB) and
widening after does the same; Triton's remove-layout-conversions ends with the bf16 conversion there.

A conversion of a loop-carried value (an iter argument, an `scf.if` result) that none of the above removes goes with
the whole web the value belongs to (gpu/carried_layout.py) when every reader of the web converts it to the same layout
and every value entering the web can be recomputed in that layout: the web is carried in that layout and the entries
recomputed. A persistent W4A16 matmul's fused loop converted its packed-weight mask (128x64, computed once a tile)
every iteration: H200, forced persistent, 1.14-1.21x (64x64x128 / 4 warps: 0.94 -> 1.10x Triton); the corpus
matmul's persistent variants and the 130 idioms and 63 heldout_texts4 kernels build as before. On by default;
KERNELLAB_CARRY_IN_USE_LAYOUT=0 turns it off (a CODEGEN_ENV knob).

The chain may pass through a `tt.reshape` where the reshape's source has a layout in which the reshape keeps
every thread's elements (gpu/reshape_layout.py): `arange(N).reshape(...)` addressing a tile is then recomputed in
the load's layout, rather than converting a tile of 8-byte pointers through shared memory.
"""
from __future__ import annotations

from ..gpu.axis_info import AxisAnalysis, access_vec
from ..gpu.carried_layout import Web, is_carried
from ..gpu.layouts import Bits, Blocked, Slice
from ..gpu.reshape_layout import register_map, reshape_layout
from ..gpu.scratch import _numel
from ..ir import Module, Op
from ..ops import is_elementwise, is_pure
from ..rewrite import insert_before, top_level
from ..switches import switch
from ..types import TensorType

NAME = "remove_layout_conversions"
DESCRIPTION = "drop layout conversions by recomputing cheap index math in the wanted layout"

_REMAT = {"tt.make_range", "tt.splat", "arith.constant", "tt.broadcast", "tt.expand_dims", "tt.addptr", "tt.hint",
          "tt.reshape"}
_REMAT_PREFIX = ("arith.",)
_MAX_CHAIN = 48
CARRY_KNOB = "KERNELLAB_CARRY_IN_USE_LAYOUT"
_LONG_CHAIN = 160


def long_chains_enabled() -> bool:
    """KERNELLAB_LONG_REMAT (on by default, `0` turns it off; session 16, H100: the selective scan's last step, the
    rope_interleaved and argminmax texts it also changes unchanged; a CODEGEN_ENV knob): a
    conversion is rebuilt from chains of up to _LONG_CHAIN values instead of _MAX_CHAIN, so a small load's math on the
    way to the conversion (at most one element a thread) is recomputed in the wanted layout with the load issued again
    there, as Triton rematerializes it: the selective scan's `dt` (a strided column, softplus'd, then broadcast over
    the [BLOCK_L, N] tile) was converted through shared memory every iteration. With it, too, a small load issued again
    in a layout is issued once for all the conversions that want it there (the scan's `x`, read by the tile's input
    and by the skip term, was loaded twice)."""
    return switch("KERNELLAB_LONG_REMAT", True)


def _reshape_source_layout(op: Op, layout):
    """The layout in which `op` (a `tt.reshape`) gives its result `layout` without moving data, or None."""
    src, res = op.operands[0], op.result
    if not isinstance(src.type, TensorType) or not src.type.shape:
        return None
    lay = reshape_layout(layout, res.type.shape, src.type.shape)
    if lay is None or register_map(lay, src.type.shape, layout, res.type.shape) is None:
        return None
    return lay


def _bit_layout(layout) -> bool:
    """A `Bits` layout (or a slice of one): it places every index bit, so it describes no size-1 dimension that a
    broadcast widens; chains through broadcasts and expand_dims are not rebuilt in one."""
    while isinstance(layout, Slice):
        layout = layout.parent
    return isinstance(layout, Bits)


def _cheap(op: Op) -> bool:
    return (op is not None and not op.regions and is_pure(op)
            and (op.name in _REMAT or op.name.startswith(_REMAT_PREFIX)))


def reload_vec(op, layout, axis) -> int:
    """The vector width of a load issued again in `layout`: a run of a thread's registers along the layout's
    fastest dimension (a row vector's slice of a blocked layout holds the parent's run: rotary's cos/sin
    rows, 8 elements a thread), as far as the load's addresses and mask allow (`axis`: the facts; None: 1)."""
    if axis is None:
        return 1
    shape = op.result.type.shape
    lay, dim = layout, None
    if isinstance(lay, Slice) and isinstance(lay.parent, Blocked):
        d = next((d for d in lay.parent.order if d != lay.dim), None)
        if d is None:
            return 1
        run, dim = lay.parent.spt[d], d if d < lay.dim else d - 1
    elif isinstance(lay, Blocked):
        dim = lay.order[0]
        run = lay.spt[dim]
    else:
        return 1
    if lay.reg_order()[0] != dim:
        return 1
    run = min(run, shape[dim])
    return max(1, min(run & -run, access_vec(op, axis, dim)))


class Remat:
    """Rebuild a value in another layout. `narrow` (elements): values at most this large that cannot be recomputed
    are converted where they are defined (leaves); `threads`: loads smaller than this are re-issued instead."""

    def __init__(self, narrow: int = 0, threads: int = 0, axis: AxisAnalysis | None = None, narrow_bits: int = 0,
                 shared_reloads: dict | None = None):
        self.memo: dict = {}
        # KERNELLAB_LONG_REMAT: (load, layout) -> the load issued again there, for every conversion of one pass run
        # (it sits right before the original load, so it serves any later point the original reached)
        self.shared_reloads = shared_reloads
        self.budget = 0
        self.long = long_chains_enabled()
        self.max_chain = _LONG_CHAIN if self.long else _MAX_CHAIN
        self.narrow, self.threads = narrow, threads
        self.narrow_bits = narrow_bits  # KERNELLAB_NARROW_CONVERSIONS: values of narrower elements are leaves too
        self.leaves: dict = {}  # id -> value: the leaves `can` accepted
        self.axis = axis  # the reloads' vector widths (None: one element an instruction)
        self.reloaded: list = []  # the loads issued again: erased once nothing reads them
        self.clones: list = []  # the loads issued in their place (vector widths settled at the end of the pass)

    def _leaf(self, v) -> bool:
        if _numel(v.type.shape) <= self.narrow:
            self.leaves[id(v)] = v
            return True
        if self.narrow_bits and _bits(v) < self.narrow_bits:
            self.leaves[id(v)] = v
            return True
        return False

    def _reload(self, op) -> bool:
        """A small load: issued again in the wanted layout, where it was (each thread reads at most one element
        either way; users wanting the old layout keep the original)."""
        return (op is not None and op.name == "tt.load" and _numel(op.result.type.shape) < self.threads
                and not op.attrs.get("volatile") and not op.operands[0].type.is_block_ptr())

    def _cheap(self, op) -> bool:
        """Index math anywhere; any pure elementwise op on a tile of at most one element per thread (a thread
        computes the same number of elements in either layout)."""
        if _cheap(op):
            return True
        return (op is not None and not op.regions and is_pure(op) and is_elementwise(op.name) and
                len(op.results) == 1 and isinstance(op.result.type, TensorType) and
                _numel(op.result.type.shape) <= self.threads)

    def can(self, v, layout) -> bool:
        """Whether `v` can be recomputed in `layout` without any conversion (or, with `narrow`, with
        conversions of narrow values only)."""
        if not isinstance(v.type, TensorType):
            return True
        if v.type.layout == layout:
            return True
        op = v.defining_op
        self.budget += 1
        if self.budget > self.max_chain:
            return False
        if self._reload(op):
            return all(self.can(o, layout) for o in op.operands)
        if op is None or not self._cheap(op) or len(op.results) != 1 or op.name == "ttg.convert_layout":
            return self._leaf(v)
        if op.name in ("tt.expand_dims", "tt.broadcast") and _bit_layout(layout):
            return False
        if op.name == "tt.expand_dims":
            return self.can(op.operands[0], Slice(op.attrs["axis"], layout))
        if op.name == "tt.reshape":
            lay = _reshape_source_layout(op, layout)
            return self.can(op.operands[0], lay) if lay is not None else self._leaf(v)
        return all(self.can(o, layout) for o in op.operands)

    def build(self, v, layout, before: Op):
        if not isinstance(v.type, TensorType) or v.type.layout == layout:
            return v
        key = (id(v), str(layout))
        if key in self.memo:
            return self.memo[key]
        op = v.defining_op
        if self._reload(op):
            done = self.shared_reloads.get(key) if self.shared_reloads is not None else None
            if done is not None and done.defining_op.block is not None:
                self.memo[key] = done
                return done
            # the load and its addresses again, where the load was, in the wanted layout
            # (never from what the chain built for a later point: the conversion's, which the load comes before)
            outer, self.memo = self.memo, {k: m for k, m in self.memo.items() if _before(m, op)}
            operands = [self.build(o, layout, op) for o in op.operands]
            self.memo = {**outer, **self.memo}
            attrs = dict(op.attrs, vec=reload_vec(op, layout, self.axis))
            clone = Op(op.name, operands, [v.type.with_layout(layout)], attrs, loc=op.loc, result_hints=[v.hint])
            insert_before(op, clone)
            self.reloaded.append(op)
            self.clones.append(clone)
            self.memo[key] = clone.result
            if self.shared_reloads is not None:
                self.shared_reloads[key] = clone.result
            return clone.result
        if op is None or not self._cheap(op) or len(op.results) != 1 or op.name == "ttg.convert_layout":
            return self._convert_leaf(v, layout, key, before)
        if op.name in ("tt.expand_dims", "tt.broadcast") and _bit_layout(layout):
            return self._convert_leaf(v, layout, key, before)
        if op.name == "tt.expand_dims":
            operands = [self.build(op.operands[0], Slice(op.attrs["axis"], layout), before)]
        elif op.name == "tt.reshape":
            lay = _reshape_source_layout(op, layout)
            if lay is None:
                return self._convert_leaf(v, layout, key, before)
            operands = [self.build(op.operands[0], lay, before)]
        else:
            operands = [self.build(o, layout, before) for o in op.operands]
        clone = Op(op.name, operands, [v.type.with_layout(layout)], dict(op.attrs), loc=op.loc,
                   result_hints=[v.hint])
        before.block.insert(before.block.ops.index(before), clone)
        self.memo[key] = clone.result
        return clone.result

    def _convert_leaf(self, v, layout, key, before=None):
        """Convert a value that cannot be recomputed right after its definition (of a conversion: its source).
        A narrower-element leaf (KERNELLAB_NARROW_CONVERSIONS) is converted where the conversion it replaces was,
        when that is in the same block: the loads written between them stay ahead of the conversion's barrier."""
        op = v.defining_op
        src = op.operands[0] if op is not None and op.name == "ttg.convert_layout" else v
        conv = Op("ttg.convert_layout", [src], [v.type.with_layout(layout)], loc=op.loc if op else None,
                  result_hints=[v.hint])
        late = self.narrow_bits and _numel(v.type.shape) > self.narrow and before is not None
        if op is None:  # a block argument: first thing in its block
            v.owner.insert(0, conv)
        elif late and before.block is op.block:
            insert_before(before, conv)
        else:
            block = op.block
            block.insert(block.ops.index(op) + 1, conv)
        self.memo[key] = conv.result
        return conv.result


def _before(v, op: Op) -> bool:
    """Whether value `v` is available at `op`: a block argument of a block holding `op`, or defined by an op ahead
    of `op` (or of the op holding it) in its block."""
    d = v.defining_op
    if d is None:
        return top_level(op, v.owner) is not None
    top = top_level(op, d.block)
    return top is not None and d.block.ops.index(d) < d.block.ops.index(top)


def _bits(v) -> int:
    return getattr(v.type.scalar, "bits", 64)


def narrow_conversions_enabled() -> bool:
    return switch("KERNELLAB_NARROW_CONVERSIONS", False)


def _narrower(src, want, threads: int, axis):
    """KERNELLAB_NARROW_CONVERSIONS: a Remat that rebuilds `src` in `want` from conversions of narrower-element
    values, where those are fewer bytes than `src`; else None."""
    bits = _bits(src)
    r = Remat(threads=threads, axis=axis, narrow_bits=bits)
    if not r.can(src, want) or not r.leaves:
        return None
    leaf_bits = sum(_numel(v.type.shape) * _bits(v) for v in r.leaves.values())
    return r if leaf_bits < _numel(src.type.shape) * bits else None


def _remat_for(src, want, threads: int, axis, shared: dict | None = None):
    """The Remat that removes a conversion of `src` to `want` and whether it converts narrower values on the way (a
    row or column vector before its broadcast, as `recomputable` says; narrower elements with
    KERNELLAB_NARROW_CONVERSIONS), or (None, False)."""
    r = Remat(threads=threads, axis=axis, shared_reloads=shared)
    if r.can(src, want):
        return r, False
    r = Remat(narrow=_numel(src.type.shape) // 2, threads=threads, axis=axis, shared_reloads=shared)
    if r.can(src, want):
        return r, True
    r = _narrower(src, want, threads, axis) if narrow_conversions_enabled() else None
    return r, r is not None


def carry_enabled() -> bool:
    return switch(CARRY_KNOB, True)


def _carry(src, threads: int, axis, retyped: set) -> bool:
    """Carry the loop-carried web of `src` in the layout all its readers convert it to, where every value entering
    it can be recomputed in that layout (gpu/carried_layout.py). The conversions placed at its entries go in the
    next round."""
    if not is_carried(src) or id(src) in retyped:
        return False
    web = Web(src)
    layout = web.target()
    if layout is None:
        return False
    for op, i in web.entries:
        if _remat_for(op.operands[i], layout, threads, axis)[0] is None:
            return False
    retyped.update(web.members)
    web.retype(layout)
    return True


def recomputable(v, layout, threads: int) -> bool:
    """Whether this pass removes a conversion of `v` to `layout`: by recomputing its chain in that layout, or
    with conversions of narrow (broadcast) values only."""
    return Remat(threads=threads).can(v, layout) or \
        Remat(narrow=_numel(v.type.shape) // 2, threads=threads).can(v, layout)


def _sweep(module: Module) -> None:
    for op in reversed(list(module.kernel.walk())):
        if op.block is not None and op.results and all(not r.uses for r in op.results) and is_pure(op) \
                and not op.regions:
            op.erase()


def _settle_reload_vecs(module: Module, clones: list) -> None:
    """A load re-issued during the pass got its vector width from the facts at the start of that round, which know
    nothing of the index math the round itself rebuilt (a W4A16 matmul's per-column scales, loaded in the packed
    weights' layout: 16 scalar 2-byte loads a thread where a run of 8 is contiguous and aligned). With the final
    IR's facts each surviving re-issued load takes the width its layout and addresses allow.
    KERNELLAB_RELOAD_VEC=1 (default off until timed on a GPU; part of the compile caches' keys through
    runtime/codegen_env.py)."""
    if not switch("KERNELLAB_RELOAD_VEC", False):
        return
    live = [c for c in clones if c.block is not None]
    if not live:
        return
    axis = AxisAnalysis(module.kernel, through_conversions=True)
    for c in live:
        c.attrs["vec"] = max(c.attrs.get("vec", 1), reload_vec(c, c.result.type.layout, axis))


def run(module: Module, options=None) -> dict:
    threads = 32 * getattr(options, "num_warps", 4)
    removed = rematerialized = narrowed = carried = 0
    retyped: set = set()  # the members of the webs carried in another layout (each web once)
    reloaded = []  # loads issued again in another layout: the originals go once nothing reads them
    clones = []  # and the loads that replace them
    shared = {} if long_chains_enabled() else None  # one reload per (load, layout) for all conversions
    changed = True
    while changed:
        changed = False
        axis = AxisAnalysis(module.kernel, through_conversions=True)
        for op in list(module.kernel.walk()):
            if op.name != "ttg.convert_layout" or op.block is None:
                continue
            src, want = op.operands[0], op.result.type.layout
            if src.type.layout == want:
                op.result.replace_all_uses_with(src)
                op.erase()
                removed += 1
                changed = True
                continue
            producer = src.defining_op
            if producer is not None and producer.name == "ttg.convert_layout":
                op.set_operand(0, producer.operands[0])
                changed = True
                continue
            r, narrow = _remat_for(src, want, threads, axis, shared)
            if r is None:
                if carry_enabled() and _carry(src, threads, axis, retyped):
                    carried += 1
                    changed = True
                continue
            narrowed += narrow
            new = r.build(src, want, op)
            op.result.replace_all_uses_with(new)
            op.erase()
            reloaded += r.reloaded
            clones += r.clones
            rematerialized += 1
            changed = True
        # drop what the rematerialization left unused
        _sweep(module)
        dead = [ld for ld in reloaded if ld.block is not None and not ld.result.uses]
        for ld in dead:
            ld.erase()
        if dead:
            _sweep(module)
    _settle_reload_vecs(module, clones)
    left = sum(1 for op in module.kernel.walk() if op.name == "ttg.convert_layout")
    stats = {"removed": removed, "rematerialized": rematerialized, "narrowed": narrowed, "remaining": left}
    if carried:
        stats["carried"] = carried
    return stats
