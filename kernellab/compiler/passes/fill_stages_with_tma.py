"""On sm_90, fill the stages of block-pointer tiles by TMA instead of cp.async, in loops `pipeline_dot_operands`
pipelined.

TMA (the tensor memory accelerator) copies a whole tile from a tensor map: one thread issues it, no thread
computes an address, and the copy completes by counting its bytes on an mbarrier. A tile qualifies when its
stages are swizzled for wgmma (TMA writes the same swizzle) and the host can describe the tensor from the
kernel's arguments: base, shape and strides are kernel arguments (or constants), 16-byte aligned, every dim
boundary-checked (TMA zero-fills everything outside the shape). A block of rank 3+ whose leading dims are 1 (a host
descriptor's `[1, M, K]` block, loaded as its `[M, K]` tile) gets a tensor map of its rank with a box of 1 there.
Its copies become:

    before:    tensor maps (kernel parameters), one mbarrier per stage
    issue:     mbarrier_expect(stage's bytes) + tma_copy(tiles -> stage)          # one thread
    body i:    mbarrier_wait(stage i % S, phase) [+ bar.sync unless a wgmma overlaps]
    after:     mbarrier_inval

replacing the cp.async copies, their commit group (when nothing else is in it) and their wait. The phase parity
is carried by the loop and flips each time the read stage wraps. Why a block-pointer tile keeps cp.async is
recorded in the stats (`no_tma`).

A tensor descriptor whose base, extents or strides the kernel computes (a grouped GEMM's per-group pointers
loaded from a table) cannot be encoded by the host: its map is a `ttg.make_tensormap` the kernel fills itself
(codegen/lower_tma.py), placed before the loop's first prologue copy, so a tile loop around the pipelined loop
makes it again per tile (`device_tensormaps` in the stats). Host maps stay the choice wherever they work: they
cost the kernel nothing.
"""
from __future__ import annotations

from ..gpu import block_ptr
from ..gpu.axis_info import AxisAnalysis
from ..gpu.scratch import _numel
from ..ir import Module, Op
from ..ops import is_loop
from .dot_stages import I32, I64, Builder, PipelinedLoop, mbarrier_ring, next_op, pipelined_loops

NAME = "fill_stages_with_tma"
DESCRIPTION = "fill block-pointer stages by TMA (sm_90): tensor maps, one mbarrier per stage, the phase carried"


class _Tma:
    """Whether TMA can fill a stage buffer, from the options and the kernel's axis analysis (made on first use)."""

    def __init__(self, module: Module, options):
        self.fn = module.kernel
        self.arch = getattr(options, "arch", 90)
        self.enabled = getattr(options, "tma", True)
        self._axis = None

    @property
    def axis(self) -> AxisAnalysis:
        if self._axis is None:
            self._axis = AxisAnalysis(self.fn)
        return self._axis

    def operands(self, buf_t, addresses: Op):
        """(tensor-map operands, "") when TMA can fill the stages of `buf_t`, which `addresses` (the
        ttg.block_ptr_addresses of a copy) feeds today, else (None, why not)."""
        if self.arch < 90:
            return None, f"sm_{self.arch} has no TMA"
        if not self.enabled:
            return None, "TMA disabled (enable_tma=False)"
        if not buf_t.swizzle:
            return None, "the dot reads padded rows (mma.sync); TMA fills swizzled wgmma stages only"
        if buf_t.shape[1:][buf_t.order[1]] > 256:
            return None, "the tile is over 256 rows (a TMA box dim holds at most 256)"
        found = block_ptr.origin(addresses.operands[0])
        if not isinstance(found, str) and block_ptr.tile_order(found[0], 2)[0] != buf_t.order[0]:
            return None, ("the stage is contiguous along the tile's other dim (a K-major tf32 operand): TMA copies "
                          "the tile as it lies in memory")
        args = (addresses.operands[0], buf_t.elem.bits // 8, addresses.attrs.get("boundary_check"), self.fn.args,
                self.axis)
        operands, why = block_ptr.tma_operands(*args)
        if operands is None and ("computed in the kernel" in why or "per-program offset" in why):
            made, _ = block_ptr.tma_operands(*args, device=True)
            if made is not None:
                return made, "device"
        return operands, why


def _tensormap(bld: Builder, operands, buf_t, hint: str, loc):
    """The `ttg.tensormap` a TMA copy into `buf_t` reads: the kernel arguments (or constants) that describe the
    whole tensor; the box is one swizzle atom wide (all of the tile's rows)."""
    host = [bld.const(v.defining_op.attrs["value"], I64) if v.defining_op is not None and
            v.defining_op.name == "arith.constant" else v for v in operands]
    box = [buf_t.swizzle // (buf_t.elem.bits // 8), buf_t.shape[1:][buf_t.order[1]]]
    box += [1] * ((len(operands) - 4) // 2)  # a [1, M, K] descriptor block: 1 along each leading dim
    return bld.op("ttg.tensormap", host, [I64], {"box": box, "swizzle": buf_t.swizzle}, [hint], loc=loc).result


def _ancestor_blocks(block):
    out = []
    while block is not None:
        out.append(block)
        parent = block.parent
        block = parent.block if parent is not None else None
    return out


def _device_tensormap(loop: PipelinedLoop, operands, buf_t, hint: str, loc):
    """A `ttg.make_tensormap` (the kernel fills a tensor map in global scratch, codegen/lower_tma.py) placed just
    before the loop's first prologue copy, so a tile loop around it makes the map again for each tile; None when
    an operand is not defined there (it changes inside the pipelined loop)."""
    block = loop.for_op.block
    firsts = []
    for fill in loop.prologue_fills:
        for _, _, addresses, _ in fill.copies:
            if addresses is not None and addresses.block is block:
                firsts.append(block.ops.index(addresses))
    anchor = block.ops[min(firsts)] if firsts else loop.for_op
    at = block.ops.index(anchor)
    outer = _ancestor_blocks(block)
    for v in operands:
        d = v.defining_op
        if d is None:
            if not any(v.owner is b for b in outer):
                return None
        elif d.block is block:
            if block.ops.index(d) >= at:
                return None
        elif not any(d.block is b for b in outer[1:]):
            return None
    return made_tensormap(Builder(_hoisted(anchor, operands), loc), operands, buf_t, hint, loc)


def _hoisted(anchor: Op, operands) -> Op:
    """`anchor`, or the outermost loop around it that defines none of `operands`: a grouped GEMM makes a group's
    maps once, not once per tile (the previous tile's copies have all completed: its loop waited for them)."""
    while anchor.block is not None and anchor.block.parent is not None and is_loop(anchor.block.parent.name):
        loop = anchor.block.parent
        inside = {id(v) for op in loop.walk() for v in op.results}
        inside |= {id(a) for op in loop.walk() for r in op.regions for a in r.args}
        if any(id(v) in inside for v in operands):
            break
        anchor = loop
    return anchor


def made_tensormap(bld: Builder, operands, buf_t, hint: str, loc):
    """A `ttg.make_tensormap` over `operands` for stages of `buf_t` (the box as `_tensormap`'s)."""
    box = [buf_t.swizzle // (buf_t.elem.bits // 8), buf_t.shape[1:][buf_t.order[1]]]
    box += [1] * ((len(operands) - 4) // 2)
    return bld.op("ttg.make_tensormap", list(operands), [I64],
                  {"box": box, "swizzle": buf_t.swizzle, "dtype": buf_t.elem.ir}, [hint], loc=loc).result


def _fill_by_tma(loop: PipelinedLoop, stats: dict, tma: _Tma) -> None:
    loc = loop.loc
    descs = {}  # id(buffer) -> its tensor map
    for buf, _, addresses, copy in loop.body_fill.copies:
        if addresses is None:
            continue  # a tensor of pointers: only block pointers name a tile TMA can fetch
        dot, index = loop.reads[id(buf)]
        operands, why = tma.operands(buf.type, addresses)
        if operands is None:
            stats.setdefault("no_tma", []).append(f"line {dot.loc.line if dot.loc else '?'} operand "
                                                  f"{'ab'[index]}: {why}")
            continue
        alloc = buf.defining_op
        hint = f"{'ab'[index]}_tensormap"
        if why == "device":
            desc = _device_tensormap(loop, operands, buf.type, hint, copy.loc)
            if desc is None:
                stats.setdefault("no_tma", []).append(f"line {dot.loc.line if dot.loc else '?'} operand "
                                                      f"{'ab'[index]}: the tile's base or shape changes in the loop")
                continue
            descs[id(buf)] = desc
            stats["device_tensormaps"] = stats.get("device_tensormaps", 0) + 1
        else:
            descs[id(buf)] = _tensormap(Builder(alloc, loc), operands, buf.type, hint, copy.loc)
        alloc.attrs["fill"] = "tma"
    if not descs:
        return
    stats["tma"] += len(descs)
    bars = mbarrier_ring(Builder(next_op(loop.allocs[-1]), loc), loop.stages, "stage_bars")
    nbytes = sum(_numel(b.type.shape[1:]) * b.type.elem.bits // 8 for b in loop.bufs if id(b) in descs)
    for fill in loop.prologue_fills + [loop.body_fill]:
        bar = None
        for buf, view, addresses, copy in fill.copies:
            if id(buf) not in descs:
                continue
            if bar is None:  # every TMA copy of the stage completes on its mbarrier, announced once
                at = Builder(view, loc)
                bar = at.op("ttg.memdesc_index", [bars, fill.slot], [bars.type.tile()]).result
                at.op("ttg.mbarrier_expect", [bar, fill.pred], [], {"bytes": nbytes})
            Builder(copy, loc).op("ttg.tma_copy", [descs[id(buf)], addresses.operands[0], view.result, bar, fill.pred],
                                  [], loc=copy.loc)
            copy.erase()
            addresses.erase()
        if all(id(buf) in descs for buf, *_ in fill.copies):
            fill.commit.erase()  # no cp.async left in the group
    # the body waits for its stage's mbarrier (and for the cp.async copies still there)
    body = loop.body
    phase = body.add_arg(I32, "phase")
    top = Builder(loop.top_wait, loc)
    bar = top.op("ttg.memdesc_index", [bars, loop.read_slot], [bars.type.tile()]).result
    top.op("ttg.mbarrier_wait", [bar, phase], [])
    cp_bufs = [b for b in loop.bufs if id(b) not in descs]
    if cp_bufs:
        top.op("ttg.async_wait", cp_bufs, [], dict(loop.top_wait.attrs))
    elif not any(d.attrs.get("wgmma_async") for d in loop.dots):
        top.op("ttg.barrier", [], [], {"reason": "every warp has finished reading the stage refilled next"})
    loop.top_wait.erase()
    # the phase the read stage completes next flips each time the read stage wraps
    sel, at_end, one = loop.rotation(loop.read_slot)
    end = Builder(next_op(sel), loc)
    flipped = end.op("arith.xori", [phase, one], [I32]).result
    phase_next = end.op("arith.select", [at_end, flipped, phase], [I32]).result
    loop.carry([Builder(loop.for_op, loc).const(0)], [phase_next])
    Builder(next_op(loop.drain()), loc).op("ttg.mbarrier_inval", [bars], [])


def run(module: Module, options=None) -> dict:
    stats = {"tma": 0}
    tma = _Tma(module, options)
    for loop in pipelined_loops(module):
        _fill_by_tma(loop, stats, tma)
    return stats
