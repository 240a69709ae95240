"""Give every tensor a distributed layout, choosing coalesced, vectorized global accesses.

Each load/store gets its own layout from the axis analysis (order = most contiguous dimension
first; as many consecutive elements per thread as 16-byte accesses allow). Other values inherit
their operands' layouts (a reshape's or expand_dims' result takes one in which every thread keeps its
elements, where one exists: gpu/reshape_layout.py); fresh values (ranges, splats, constants) take the
layout of the kernel's largest memory access of their rank. Where an operand's layout differs from what
its user needs, a `ttg.convert_layout` is inserted (the next pass removes the ones it can).
"""
from __future__ import annotations

import os

from ..gpu import block_ptr
from ..gpu.axis_info import AxisAnalysis, access_vec
from ..gpu.layouts import Blocked, Mma, Slice, default_blocked
from ..gpu.reshape_layout import (
    join_layout,
    join_map,
    permuted_layout,
    register_map,
    reshape_layout,
    split_layout,
    split_map,
)
from ..ir import Block, Module, Op
from ..ops import accesses_memory, is_elementwise, keeps_layout
from ..switches import switch
from ..types import TensorType
from .remove_layout_conversions import recomputable

NAME = "assign_layouts"
DESCRIPTION = "give every tensor a distributed layout; coalesced, vectorized loads and stores"



def _elem_bytes(t):
    return getattr(t, "itemsize", 8)


TIES_KNOB = "KERNELLAB_COALESCE_TIES"


def coalesce_ties() -> str:
    """KERNELLAB_COALESCE_TIES: which of a memory op's equally contiguous dimensions its layout makes the fastest.
    "size" (the default): the one with the most elements, the last of those of equal size; the others keep the
    "last" order. "last": the last one (Triton's order: a stable sort by contiguity of the dimensions taken last
    first). "first": the first one.

    It matters where no dimension is known contiguous (a gather; a stride the launch did not specialize to 1).
    attorch's conv2d (and its AvgPool layers: a depthwise conv2d) loads a [256 positions, 32 channels] tile whose
    positions are (batch, height, width) made of two divisions and two remainders and whose channels have a
    runtime stride. With "last" a warp's lanes spread over the channels, and each thread holds 128 positions at 2
    warps: 128 rows of divisions, masks and addresses a thread, in every pipeline stage (LLVM IR 17.8k lines,
    ptxas 16.6 s, 32.9 KB spilled); with the lanes over the positions 11.5k lines, 3.4 s, 13.0 KB (Triton's: 12.6
    KB; benchmarks/NOTES.md, issue 14). A reshaped range is no tie: the axis analysis follows its runs along the
    last dimension through tt.reshape (Triton's chained-reductions form, `reshape(arange, (4, 32, 32, 4, 2))`,
    keeps its contiguous last dim of 2 fastest). Changed nothing else among the idioms' 130 kernels and the
    held-out texts' 71 (`benchmarks/tools/knob_gpuir_ab.py --knob KERNELLAB_COALESCE_TIES=last`)."""
    v = os.environ.get(TIES_KNOB, "").strip().lower()
    return v if v in ("first", "last") else "size"


def _fastest_first(contig, shape, ties: str) -> list:
    """The dimensions of a memory op, fastest first: by contiguity, then as `ties` says (coalesce_ties)."""
    rank = len(shape)
    if ties == "first":
        return sorted(range(rank), key=lambda d: (-contig[d], d))
    if ties == "last":
        return sorted(range(rank), key=lambda d: (-contig[d], -d))
    by_last = sorted(range(rank), key=lambda d: (-contig[d], -d))
    fastest = min(range(rank), key=lambda d: (-contig[d], -shape[d], -d))  # "size": only the fastest dim moves
    return [fastest] + [d for d in by_last if d != fastest]


REDUCE_WARPS_KNOB = "KERNELLAB_REDUCE_WARPS"


def _reached(v, depth: int = 0):
    """The ops that use `v`, or an elementwise result of its shape computed from it."""
    for user in v.uses:
        yield user
        if depth < 8 and is_elementwise(user.name) and len(user.results) == 1 and \
                getattr(user.result.type, "shape", None) == v.type.shape:
            yield from _reached(user.result, depth + 1)


def _reduced_axes(v) -> set:
    """The axes along which `v`, or an elementwise result of its shape computed from it, is reduced."""
    return {u.attrs.get("axis") for u in _reached(v) if u.name == "tt.reduce"}


def _warps_off(op: Op) -> tuple:
    """KERNELLAB_REDUCE_WARPS=1 (default off): a load whose tile is reduced along one axis only keeps its warps off
    that axis where the other dims can take them, as Triton's layouts do (its warps fill the fastest dims first).
    Liger's fused-MoE token gather sums an [8, 512] tile over its rows: with warps over the rows the reduction went
    through shared memory (15 bar.sync) and ran at 0.46x Triton on the H200 (benchmarks/NOTES.md, thirteenth
    session); with them over the columns it stays in each thread. A codegen change untimed on a GPU: off."""
    if os.environ.get(REDUCE_WARPS_KNOB, "") != "1" or op.name != "tt.load" or not op.results:
        return ()
    v = op.results[0]
    if not isinstance(v.type, TensorType) or len(v.type.shape) < 2:
        return ()
    axes = _reduced_axes(v)
    return tuple(axes) if len(axes) == 1 and None not in axes else ()


FEW_MASKS_KNOB = "KERNELLAB_FEW_MASKS"
# more distinct mask predicates a thread than this, in a tile of at least FEW_MASKS_ELEMS elements a thread, and a
# placement of the warps with fewer is taken
FEW_MASKS_LIMIT = 4
FEW_MASKS_ELEMS = 64


def few_masks_enabled() -> bool:
    """KERNELLAB_FEW_MASKS=1 (default off until timed on a GPU; in the compile caches' keys through
    runtime/codegen_env.py): a masked access whose threads would each hold more than FEW_MASKS_LIMIT distinct mask
    predicates, with the warps over the slow dims (our default), puts the warps over the fast dims as Triton does
    where that leaves each thread fewer. heldout_texts5's ALiBi softmax loads and stores a [16, 1024] tile masked by
    `rows < Lq` (one value over the 16 rows: Lq is divisible by 16) and `cols < Lk`: with the 4 warps over the rows
    a thread holds 8 column chunks of 4, so 8 predicates live from the loads to the stores; ptxas (7 predicate
    registers) then issued the 32 LDG.128 about one at a time (1.5 in flight at each, against Triton's 8.3, whose
    warps over the columns leave 2 chunks a thread: 2 predicates), 0.53x Triton's GB/s on the H200. Only tiles of
    at least FEW_MASKS_ELEMS elements a thread (128 there, 197 registers): at 32 a thread (the idioms' sm_rows_2d and
    cumsum_tile, the ALiBi text at BM=4) the loads stayed in flight with 8 predicates, and the move only added
    shared-memory round trips (392 -> 488-720 SASS instructions, the same loads in flight)."""
    return switch(FEW_MASKS_KNOB, False)


def mask_predicates(layout, shape, const) -> int:
    """How many distinct mask values a thread of `layout` holds for a mask constant over aligned blocks of `const`
    elements along each dim (the axis analysis' constancy): the predicates ptxas keeps for its accesses."""
    return len({tuple(r[d] // max(1, const[d]) for d in range(len(shape))) for r in layout.registers(shape)})


def _mask_operand(op: Op):
    i = 1 if op.name == "tt.load" else 2 if op.name == "tt.store" else None
    return op.operands[i] if i is not None and len(op.operands) > i else None


def _fewer_masks(op: Op, axis: AxisAnalysis, layout: Blocked, shape, num_warps: int, order, spt: int) -> Blocked:
    """KERNELLAB_FEW_MASKS: `layout`, or the same access with Triton's placement of the warps where a thread then
    holds fewer distinct mask predicates than the FEW_MASKS_LIMIT it exceeds."""
    mask = _mask_operand(op)
    if mask is None or len(shape) < 2 or not isinstance(mask.type, TensorType):
        return layout
    numel = 1
    for s in shape:
        numel *= s
    if numel < FEW_MASKS_ELEMS * 32 * num_warps:  # few registers a thread: ptxas keeps the loads in flight anyway
        return layout
    const = axis[mask].const
    have = mask_predicates(layout, shape, const)
    if have <= FEW_MASKS_LIMIT:
        return layout
    alt = default_blocked(shape, num_warps, order=order, spt_fast=spt, warps_fast_first=True)
    return alt if mask_predicates(alt, shape, const) < have else layout


def coalesced_layout(op: Op, axis: AxisAnalysis, num_warps: int) -> tuple[Blocked, int]:
    """The layout a memory op wants, and its vector width in elements."""
    ptr = op.operands[0]
    shape = ptr.type.shape
    info = axis[ptr]
    order = _fastest_first(info.contig, shape, coalesce_ties())
    fast = order[0]
    elem = ptr.type.scalar.elem
    vec = access_vec(op, axis, fast)
    numel = 1
    for s in shape:
        numel *= s
    per_thread = max(1, numel // (32 * num_warps))
    spt = max(1, min(vec, per_thread))
    layout = default_blocked(shape, num_warps, order=order, spt_fast=spt, warps_off=_warps_off(op))
    if few_masks_enabled():
        layout = _fewer_masks(op, axis, layout, shape, num_warps, order, spt)
    # Atomics keep the coalesced layout (their operands then need no conversion through shared memory) but
    # run one element per instruction, except float adds, which sm_90 has as one vector instruction
    # (atom .v2/.v4 f32, .v2-.v8 f16/bf16; codegen falls back to scalars before sm_90), as in Triton.
    if op.name == "tt.atomic_cas" or (op.name == "tt.atomic_rmw" and
                                      not (op.attrs.get("kind") == "fadd" and elem.ir in ("f32", "f16", "bf16"))):
        return layout, 1
    return layout, min(vec, spt)


_INDEX_OPS = ("tt.make_range", "tt.splat", "arith.constant", "tt.broadcast", "tt.expand_dims", "ttg.convert_layout")


def _index_math(v, depth: int = 0) -> bool:
    """Whether a tensor is computed from scalars by ranges, splats, constants, broadcasts and arithmetic
    only (so it can be recomputed in any layout); scalars count as such."""
    if not isinstance(v.type, TensorType):
        return True
    op = v.defining_op
    if op is None or depth > 16 or op.regions or len(op.results) != 1:
        return False
    if op.name not in _INDEX_OPS and not (op.name.startswith("arith.") and op.name != "arith.truncf"):
        return False
    return all(_index_math(o, depth + 1) for o in op.operands)


def _broadcast_later(v) -> bool:
    """Whether `v`, or an elementwise result of its shape computed from it, is broadcast."""
    return any(u.name == "tt.broadcast" for u in _reached(v))


def equally_coalesced(have, want) -> bool:
    """Whether a warp's access in blocked layout `have` touches memory as in `want`: the same lanes along the same
    dimensions in the same order and the same run of elements per thread along the fastest one (they may differ in
    the registers' and warps' places only)."""
    return isinstance(have, Blocked) and isinstance(want, Blocked) and have.rank == want.rank and \
        have.order == want.order and have.tpw == want.tpw and have.spt[want.order[0]] == want.spt[want.order[0]]


def blocked_halves(lay, shape):
    """The halves of `split(x)` for x in blocked layout `lay` whose last dimension (of size 2) is all in each
    thread's registers: the same layout without that dimension. Works where the tile has fewer elements than
    the program has threads (copies; no bit layout describes it). None otherwise."""
    if not isinstance(lay, Blocked) or len(shape) < 2 or shape[-1] != 2 or lay.spt[-1] != 2 or \
            lay.tpw[-1] != 1 or lay.wpc[-1] != 1:
        return None
    last = len(shape) - 1
    return Blocked(lay.spt[:-1], lay.tpw[:-1], lay.wpc[:-1], tuple(d for d in lay.order if d != last))


def blocked_pairs(lay):
    """The layout of `join(a, b)` for a and b in blocked layout `lay`: a new last dimension of size 2, both
    elements in the thread that holds them, next to each other in its registers (the inverse of
    `blocked_halves`)."""
    if not isinstance(lay, Blocked):
        return None
    return Blocked(lay.spt + (2,), lay.tpw + (1,), lay.wpc + (1,), (lay.rank,) + lay.order)


def _numel(t):
    n = 1
    for s in t.shape:
        n *= s
    return n


SHAPE_DOMINANT_KNOB = "KERNELLAB_SHAPE_DOMINANT"


def shape_dominant_enabled() -> bool:
    """KERNELLAB_SHAPE_DOMINANT=1 (default off until timed on a GPU; part of the compile caches' keys through
    runtime/codegen_env.py): a value that takes the kernel's dominant layout of its rank (a fresh range, splat or
    constant; a gather) takes instead the layout of the largest memory access of its own shape where the rank's
    dominant one spans more than its shape (its threads would hold copies of the same elements). bitsandbytes'
    4-bit dequantization stores 512 f32 (4 a thread at 4 warps: the dominant layout) from 256 packed bytes (2 a
    thread): the gathers of the absmax and the code book, and their index math, took the 512-wide layout for 256
    values, so every thread computed and loaded each twice, and the code-book pointers went through shared memory
    to it (32 registers, 8 loads a thread; Triton's: 18, 4 loads, its 256-value tensors at 2 a thread)."""
    return switch(SHAPE_DOMINANT_KNOB, False)


def _replicates(lay, shape) -> bool:
    """Whether blocked layout `lay` spans more than `shape` along some dimension (threads then hold copies)."""
    return any(lay.spt[d] * lay.tpw[d] * lay.wpc[d] > shape[d] for d in range(len(shape)))


def store_run_enabled() -> bool:
    """On unless KERNELLAB_STORE_RUN=0 (part of the compile caches' keys through runtime/codegen_env.py): loads of
    full vectors take the longer run of a narrower-element store of their values. H200 (idioms.py --texts):
    heldout_texts4's rmsnorm backward 0.76-0.82x Triton's time without, 1.00 with; heldout_texts3's add + dropout
    + layer norm +3-4%; idioms' quantize within noise (benchmarks/NOTES.md)."""
    return switch("KERNELLAB_STORE_RUN", True)


def small_store_run_enabled() -> bool:
    """KERNELLAB_SMALL_STORE_RUN=1 (default off until timed on a GPU; in the compile caches' keys through
    runtime/codegen_env.py): a store of at most one element a thread that takes its value's layout (no conversion)
    moves each thread's run of contiguous registers as one vector, where the addresses and mask allow, instead of
    one element an instruction."""
    return switch("KERNELLAB_SMALL_STORE_RUN", False)


CARRY_MMA_KNOB = "KERNELLAB_CARRY_MMA"


def carry_mma_enabled() -> bool:
    """KERNELLAB_CARRY_MMA (on by default; =0 turns it off; in the compile caches' keys through
    runtime/codegen_env.py): a value carried by a loop whose body only hands it, as the initial value, to a nested
    loop that accumulates it with `tl.dot` (an implicit-GEMM convolution's `for kh: for kw: for c0: acc += dot`)
    is carried in the dot's accumulator layout, as Triton's remove-layout-conversions leaves it. Without it the
    outer loops carry the accumulator in a blocked layout and every inner loop converts it into the mma layout
    and back through shared memory: heldout_texts5's conv3x3 at 128x64, 4 warps, moved 2 x 32 KB through shared
    memory (and four barriers) around each of the 9 taps' 4-iteration K loops (sm_90a SASS: 48 STS, 54 LDS, 7
    BAR.SYNC -> 8, 14, 4, as Triton's; at 8 warps 68 -> 48 KB of shared memory). benchmarks/tools/knob_gpuir_ab.py
    over the idioms' bench texts and held-out texts 1-5 (Liger / attorch cases included): only that kernel and
    attorch's conv2d_forward_kernel (the same loop nest) change. H200 (session 16, runs 4-5): conv3x3 0.57 / 0.61 /
    0.49 -> 1.08 / 1.05 / 1.06x Triton over its three configs; attorch's Conv2d forward at 64x64x56x56 (3x3, 64
    channels) 0.534 -> 0.286 ms fp32 (Triton 0.303) and 0.587 -> 0.320 ms under fp16 autocast (Triton 0.515)."""
    return switch(CARRY_MMA_KNOB, True)


def nested_dot_accumulator(arg, depth: int = 0):
    """The mma layout of the `tl.dot` that a loop-carried `arg` reaches as the accumulator of a loop nested in its
    body (through any depth of nested loops' carried values), or None. Only a value that every use hands to a
    nested loop's initial value or to such a dot qualifies: one also read by other math keeps its layout rule."""
    if depth > 8 or not isinstance(arg.type, TensorType) or not arg.uses:
        return None
    found = None
    for user in arg.uses:
        if user.name == "tt.dot" and "mma" in user.attrs and user.operands[2] is arg and \
                all(o is not arg for o in user.operands[:2]):
            lay = Mma(tuple(user.attrs["mma"]))
        elif user.name == "scf.for":
            idx = [i for i, o in enumerate(user.operands) if o is arg]
            if not idx or min(idx) < 3:
                return None
            lay = None
            for i in idx:
                inner = nested_dot_accumulator(user.regions[0].args[1 + i - 3], depth + 1)
                if inner is None or (lay is not None and inner != lay):
                    return None
                lay = inner
        else:
            return None
        if found is not None and lay != found:
            return None
        found = lay
    return found


def register_run(layout, shape, dim: int, limit: int) -> int:
    """The widest power of two v <= limit such that `layout`'s registers, taken v at a time in register order, are v
    consecutive elements along `dim` starting at a multiple of v in every thread (each thread's part of the index
    along `dim` a multiple of v too): what one v-wide vector access of a thread may move. 1 where none is."""
    regs = layout.registers(shape)
    info = layout.dims_info(shape)[dim]
    v = 1 << (max(1, limit).bit_length() - 1)
    while v > 1:
        steps_ok = (info.lanes == 1 or info.lane_stride % v == 0) and (info.warps == 1 or info.warp_stride % v == 0)
        if steps_ok and len(regs) % v == 0 and all(
                regs[i][dim] % v == 0 and all(regs[i + j][d] == regs[i][d] + (j if d == dim else 0)
                                              for j in range(v) for d in range(len(shape)))
                for i in range(0, len(regs), v)):
            return v
        v //= 2
    return 1


def store_run_peers_enabled() -> bool:
    """KERNELLAB_STORE_RUN_PEERS=1 (default off until timed on a GPU; in the compile caches' keys through
    runtime/codegen_env.py): a load of full vectors whose values meet, through shape-keeping ops, those of a load
    KERNELLAB_STORE_RUN widened takes the same run, instead of converting through shared memory to meet it
    (heldout_texts5's KL divergence: the target load widened to the bf16 gradient store's 8, the input load left
    at 4 and converted inside the loop, two barriers an iteration; Triton loads both alike)."""
    return switch("KERNELLAB_STORE_RUN_PEERS", False)


def _reach(v, shape) -> set:
    """ids of the ops that tensor `v` reaches through ops that keep its shape (no memory accesses, no regions)."""
    work, seen = [v], set()
    while work and len(seen) < 256:
        u = work.pop()
        for user in u.uses:
            if id(user) in seen:
                continue
            seen.add(id(user))
            if user.regions or accesses_memory(user.name):
                continue
            work += [r for r in user.results if isinstance(r.type, TensorType) and r.type.shape == shape]
    return seen


def vector_dominant_enabled() -> bool:
    """On unless KERNELLAB_VECTOR_DOMINANT=0 (in the compile caches' keys through runtime/codegen_env.py; on by
    default untimed because it changes nothing else: GPU IR compared off / on by benchmarks/tools/knob_gpuir_ab.py
    over the idioms at their bench sizes and heldout_texts1-5, 403 kernels, only the upsample's 3 change): the
    kernel's usual layout of a rank (which fresh values and gathers take) is set by its
    first largest access that is not a gather (contiguous along some dim), where one is as large as the first
    gather. heldout_texts5's bilinear upsample gathers four neighbours (no contiguity: one element a thread) before
    it stores its 1024 outputs contiguously: the first gather set the layout, so the store went one element an
    instruction (8 STG.E a thread against Triton's 2 STG.E.128) and `offs // OW`, constant over each thread's runs
    of 4, was divided and converted for every element (40 I2F against 20); Triton's TTGIR gives the gathers the
    store's 4 a thread (one layout for the kernel), 0.74-0.77x Triton's GB/s on the H200. Only a gather gives way:
    taking the widest access instead moved heldout_texts5's int64 permutation gather (its index stored at 2 a
    thread, then its values at 4) into two layouts, its `% n` computed in both (480 -> 800 SASS instructions)."""
    return switch("KERNELLAB_VECTOR_DOMINANT", True)


def dominant_widened_enabled() -> bool:
    """On unless KERNELLAB_DOMINANT_WIDENED=0 (in the compile caches' keys through runtime/codegen_env.py): where
    the kernel's largest access of a rank (whose layout fresh values take: ranges, splats, constants, an expand_dims
    of a small load) is a load that `_widen_unaligned_loads` widens, that rank's usual layout is the widened one
    too. Without it the fresh values keep the unwidened layout (one element a thread along the row) while the loads
    around them take the wide one: heldout_texts3's causal conv1d, whose first tap is the largest (unaligned)
    access, built its bias-initialized accumulator in the narrow layout and converted every tap's product into it
    through shared memory (9 barriers, 144 registers against Triton's 0 and 85; H200: 0.50x Triton's time off,
    0.97-1.01x on; benchmarks/NOTES.md)."""
    return switch("KERNELLAB_DOMINANT_WIDENED", True)


def _stored_as(v, shape, order, run, anchors) -> bool:
    """Whether tensor `v` reaches, through ops that keep its shape, the value operand of a store whose access is
    laid out in `order` over `shape` with `run` elements a thread along the fastest dimension."""
    work, seen = [v], set()
    while work and len(seen) < 256:
        u = work.pop()
        for user in u.uses:
            if id(user) in seen:
                continue
            seen.add(id(user))
            if user.name == "tt.store":
                anchor = anchors.get(id(user))
                if len(user.operands) > 1 and user.operands[1] is u and anchor is not None and \
                        isinstance(anchor[0], Blocked) and anchor[0].order == order and \
                        anchor[0].spt[order[0]] == run and user.operands[0].type.shape == shape:
                    return True
                continue
            if user.regions or accesses_memory(user.name):
                continue
            work += [r for r in user.results if isinstance(r.type, TensorType) and r.type.shape == shape]
    return False


class LayoutAssigner:
    def __init__(self, module: Module, num_warps: int, loop_hints: dict | None = None):
        self.fn = module.kernel
        self.num_warps = num_warps
        self.loop_hints = loop_hints or {}  # (n-th scf.for, iter arg) -> the layout its body yields
        self.loops_seen = 0
        self.carry_mma = carry_mma_enabled()
        self.axis = AxisAnalysis(self.fn)
        self.anchors: dict[int, tuple] = {}
        self.dominant: dict[int, Blocked] = {}
        self.converts = 0
        self.in_pointer_layout = 0  # accesses that took their pointer tile's layout (not recomputable in theirs)
        best: dict[int, tuple] = {}
        not_gathers = vector_dominant_enabled()
        self.by_shape: dict[tuple, Blocked] = {}  # KERNELLAB_SHAPE_DOMINANT: the first access's layout per shape
        for op in self.fn.walk():
            if accesses_memory(op.name) and op.operands[0].type.is_block():
                layout, vec = coalesced_layout(op, self.axis, num_warps)
                self.anchors[id(op)] = (layout, vec)
                rank = len(op.operands[0].type.shape)
                size = _numel(op.operands[0].type)
                gather = max(self.axis[op.operands[0]].contig) == 1
                if rank not in best or size > best[rank][0] or \
                        (not_gathers and size == best[rank][0] and best[rank][2] and not gather):
                    best[rank] = (size, layout, gather)
                if isinstance(layout, Blocked) and max(self.axis[op.operands[0]].contig) > 1:
                    self.by_shape.setdefault(tuple(op.operands[0].type.shape), layout)
        for rank, (_, layout, _) in best.items():
            self.dominant[rank] = layout
        self.shape_dominant = shape_dominant_enabled()
        self.widened_loads = self._widen_unaligned_loads()
        self.loads_to_store_run = self._widen_to_store_runs() if store_run_enabled() else 0
        # A gather (no contiguity along any dim: W[channel_of(i)], table[idx]) gains nothing from a layout of
        # its own; in the kernel's dominant layout its result needs no conversion through shared memory
        for op in self.fn.walk():
            anchor = self.anchors.get(id(op))
            if anchor is not None and anchor[1] == 1 and max(self.axis[op.operands[0]].contig) == 1:
                self.anchors[id(op)] = (self.default(op.operands[0].type.shape), 1)

    def _widen_unaligned_loads(self) -> int:
        """A load contiguous along its fastest dimension but held under a 16-byte vector by its alignment or mask
        (a stencil's shifted taps `x[h, w + j - 1]`, a causal mask) takes the run per thread of the widest access of
        its shape and order (as Triton's coalescing does for loads): it still reads its narrower vectors, the lanes'
        runs share cache lines, and its values need no conversion through shared memory to meet that access's."""
        widest: dict[tuple, int] = {}
        for op in self.fn.walk():
            anchor = self.anchors.get(id(op))
            if anchor is not None and isinstance(anchor[0], Blocked):
                lay = anchor[0]
                key = (op.operands[0].type.shape, lay.order)
                widest[key] = max(widest.get(key, 1), lay.spt[lay.order[0]])
        n = 0
        for op in self.fn.walk():
            anchor = self.anchors.get(id(op))
            if op.name != "tt.load" or anchor is None or not isinstance(anchor[0], Blocked):
                continue
            lay, vec = anchor
            ptr = op.operands[0]
            shape, fast = ptr.type.shape, lay.order[0]
            contig = self.axis[ptr].contig[fast]
            full = max(1, min(contig, 16 // _elem_bytes(ptr.type.scalar.elem)))
            spt = widest.get((shape, lay.order), 1)
            # only loads held under a full 16-byte vector by their alignment or mask; one already moving 16 bytes
            # keeps its run (a store of narrower elements then takes the loaded values' layout)
            if vec < full and spt > lay.spt[fast] and contig >= spt:
                wide = default_blocked(shape, self.num_warps, order=lay.order, spt_fast=spt)
                self.anchors[id(op)] = (wide, vec)
                if dominant_widened_enabled():
                    for rank, dom in list(self.dominant.items()):
                        if dom == lay:  # fresh values (ranges, splats, constants) take the widened run too
                            self.dominant[rank] = wide
                n += 1
        return n

    def _widen_to_store_runs(self) -> int:
        """KERNELLAB_STORE_RUN=1: a load already moving full 16-byte vectors whose values are stored, in the same
        shape and order, as narrower elements (int8 quantization of f16 rows: 8 halves a load vector, 16 bytes a
        store vector) takes the store's longer run per thread, as Triton's coalescing does (the widest access of
        the ops around a load, at most the tile's elements per thread): each thread then reads two or more
        adjacent 16-byte vectors and writes one full 16-byte vector, where the load's own run left the store at 8
        bytes (two STG.64 for one STG.128 at 16 int8 a thread). Without the knob the store takes the loaded
        values' run (one_block quantize at 4 and 8 warps)."""
        stores: dict[tuple, int] = {}
        for op in self.fn.walk():
            anchor = self.anchors.get(id(op))
            if op.name != "tt.store" or anchor is None or not isinstance(anchor[0], Blocked):
                continue
            lay, vec = anchor
            run = lay.spt[lay.order[0]]
            if vec == run:  # the store writes its whole run as one vector
                key = (op.operands[0].type.shape, lay.order)
                stores[key] = max(stores.get(key, 1), run)
        n, widened = 0, []
        for op in self.fn.walk():
            anchor = self.anchors.get(id(op))
            if op.name != "tt.load" or anchor is None or not isinstance(anchor[0], Blocked):
                continue
            lay, vec = anchor
            ptr = op.operands[0]
            shape, fast = ptr.type.shape, lay.order[0]
            run = stores.get((shape, lay.order), 1)
            full = 16 // _elem_bytes(ptr.type.scalar.elem)
            # loads of full vectors only (narrower ones are _widen_unaligned_loads'), whose values reach the store
            if vec != full or lay.spt[fast] != vec or run <= vec or self.axis[ptr].contig[fast] < run or \
                    not _stored_as(op.result, shape, lay.order, run, self.anchors):
                continue
            wide = default_blocked(shape, self.num_warps, order=lay.order, spt_fast=run)
            self.anchors[id(op)] = (wide, vec)
            for rank, dom in list(self.dominant.items()):
                if dom == lay:  # fresh values (ranges, splats, constants) take the widened run too
                    self.dominant[rank] = wide
            widened.append((op, lay, wide))
            n += 1
        if widened and store_run_peers_enabled():
            n += self._widen_store_run_peers(widened)
        return n

    def _widen_store_run_peers(self, widened) -> int:
        """KERNELLAB_STORE_RUN_PEERS: loads of full vectors in a widened load's old layout whose values meet its
        values take its new layout too (store_run_peers_enabled)."""
        reach = [(lay, wide, _reach(op.result, op.result.type.shape)) for op, lay, wide in widened]
        done = {id(op) for op, _, _ in widened}
        n = 0
        for op in self.fn.walk():
            anchor = self.anchors.get(id(op))
            if op.name != "tt.load" or id(op) in done or anchor is None or not isinstance(anchor[0], Blocked):
                continue
            lay, vec = anchor
            ptr = op.operands[0]
            shape, fast = ptr.type.shape, lay.order[0]
            if vec != 16 // _elem_bytes(ptr.type.scalar.elem) or lay.spt[fast] != vec:
                continue
            mine = _reach(op.result, shape)
            for old, wide, theirs in reach:
                if old == lay and mine & theirs and self.axis[ptr].contig[fast] >= wide.spt[fast]:
                    self.anchors[id(op)] = (wide, vec)
                    n += 1
                    break
        return n

    def default(self, shape) -> Blocked:
        lay = self.dominant.get(len(shape))
        if self.shape_dominant and isinstance(lay, Blocked) and _replicates(lay, shape):
            lay = self.by_shape.get(tuple(shape), lay)  # a contiguous access of this very shape, if any
        return lay if lay is not None else default_blocked(shape, self.num_warps)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def layout_of(v):
        return v.type.layout if isinstance(v.type, TensorType) else None

    def set_layout(self, v, layout):
        if isinstance(v.type, TensorType):
            v.type = v.type.with_layout(layout)

    def want(self, op: Op, i: int, layout):
        """Make operand i of op have `layout`, inserting a convert before op if needed."""
        v = op.operands[i]
        if not isinstance(v.type, TensorType) or layout is None or v.type.layout == layout:
            return
        conv = Op("ttg.convert_layout", [v], [v.type.with_layout(layout)], loc=op.loc)
        block = op.block
        block.insert(block.ops.index(op), conv)
        op.set_operand(i, conv.result)
        self.converts += 1

    def first_layout(self, op: Op):
        for v in op.operands:
            lay = self.layout_of(v)
            if lay is not None:
                return lay
        return None

    def computed_layout(self, op: Op):
        ranks = {len(v.type.shape) for v in op.operands if isinstance(v.type, TensorType)}
        if len(ranks) != 1:
            return None
        cheap = [_index_math(v) for v in op.operands]
        if not cheap or not any(cheap):
            return None
        for v, c in zip(op.operands, cheap):
            if not c and self.layout_of(v) is not None:
                return self.layout_of(v)
        return None

    def unbroadcast_layout(self, op: Op):
        """Where an operand is a broadcast and another a computed full tile (fla's `gn[:, None] - gk`, gk loaded):
        the full tile's layout; the broadcast's narrow source is converted instead of the tile, and of the
        result back (two 2 KB round trips a loop iteration in fla's intra-chunk kernel)."""
        ts = [v for v in op.operands if isinstance(v.type, TensorType)]
        if len(ts) < 2 or len({len(v.type.shape) for v in ts}) != 1:
            return None
        if not any(v.defining_op is not None and v.defining_op.name == "tt.broadcast" for v in ts):
            return None
        for v in ts:
            d = v.defining_op
            if d is not None and d.name not in ("tt.broadcast", "ttg.convert_layout") and not _index_math(v) and \
                    self.layout_of(v) is not None:
                return self.layout_of(v)
        return None

    def preferred(self, v, depth=0):
        """The layout a value's users would like: the anchor of the memory op it flows into."""
        if depth > 12 or not isinstance(v.type, TensorType):
            return None
        for user in v.uses:
            if accesses_memory(user.name) and id(user) in self.anchors:
                return self.anchors[id(user)][0]
            if user.name == "tt.dot" and "mma" in user.attrs and user.operands[2] is v:
                return Mma(tuple(user.attrs["mma"]))
        for user in v.uses:
            name = user.name
            if name == "tt.expand_dims":
                p = self.preferred(user.result, depth + 1)
                if p is not None:
                    return Slice(user.attrs["axis"], p)
            elif keeps_layout(name) and user.results and \
                    isinstance(user.result.type, TensorType) and len(user.result.type.shape) == len(v.type.shape):
                p = self.preferred(user.result, depth + 1)
                if p is not None:
                    return p
        return None

    def free_layout(self, src, res, reshaped=True):
        """A layout for `res`, the elements of `src` in row-major order in another shape, in which every
        thread keeps the elements it holds (gpu/reshape_layout.py): the layout its users want or the kernel's
        usual one of that rank where either is such a layout, else (with `reshaped`) the source's layout
        reshaped; None where there is none."""
        lay = self.layout_of(src)
        if lay is None:
            return None
        shape = res.type.shape
        for cand in (self.preferred(res), self.default(shape)):
            if cand is not None and cand.rank == len(shape) and \
                    register_map(lay, src.type.shape, cand, shape) is not None:
                return cand
        return reshape_layout(lay, src.type.shape, shape) if reshaped else None

    def free_halves(self, op):
        """A layout for both results of `tt.split` in which each thread keeps its elements (the split dimension
        is a register bit of the source): the halves' users' layout or the usual one where either is such a
        layout, else the source's bits without the split one; None where there is none."""
        src = op.operands[0]
        lay, shape = self.layout_of(src), op.results[0].type.shape
        if lay is None:
            return None

        def free(cand):
            return cand is not None and cand.rank == len(shape) and all(
                split_map(lay, src.type.shape, cand, shape, k) is not None for k in range(2))

        # a blocked halves' layout before the bit one placing the same elements: broadcasts into the halves' math
        # (rotary's cos/sin rows) are rebuilt in a blocked layout, never in a bit one (flash_attn's interleaved
        # rotary: four 2 KB conversions, 6 barriers to Triton's 3)
        for cand in (self.preferred(op.results[0]), self.default(shape), blocked_halves(lay, src.type.shape),
                     split_layout(lay, src.type.shape)):
            if free(cand):
                return cand
        return None

    def paired_halves(self, op):
        """Where no layout splits x's registers: x converted into one whose size-2 last dimension each thread
        holds (the halves in the layout their users want, or the usual one), so the split itself renames
        registers and the next pass may rebuild x's chain in that layout instead (small loads re-issued, as
        Triton does) — one conversion at most, as the split through shared memory would cost. None where
        that layout does not exist."""
        shape = op.results[0].type.shape
        for half in (self.preferred(op.results[0]), self.default(shape)):
            if not isinstance(half, Blocked) or half.rank != len(shape):
                continue
            whole = blocked_pairs(half)
            src_shape = op.operands[0].type.shape
            if all(split_map(whole, src_shape, half, shape, k) is not None for k in range(2)):
                self.want(op, 0, whole)
                return half
        return None

    def free_join(self, op):
        """A layout for `tt.join(a, b)` in which each thread keeps its elements, b taken into a's layout: the
        users' layout or the usual one where either is such a layout, else a's bits with a new register bit."""
        a, res = op.operands[0], op.result
        lay, shape = self.layout_of(a), res.type.shape
        for cand in (self.preferred(res), self.default(shape), join_layout(lay, a.type.shape), blocked_pairs(lay)):
            if cand is not None and cand.rank == len(shape) and \
                    join_map(lay, a.type.shape, cand, shape) is not None:
                self.want(op, 1, lay)
                return cand
        return None

    def whole_lines(self, ptr, have, want) -> bool:
        """Whether an access through pointer tile `ptr` in its own layout `have` reads whole 128-byte lines a warp
        row along the fastest dimension of `want`: lanes over consecutive addresses there, as many bytes as a line.
        It then moves the same bytes in more, narrower instructions, where converting the tile of 8-byte
        pointers into `want` is a round trip through shared memory (a reshaped range whose runs the axis
        analysis sees, but whose layout codegen cannot make in `want`)."""
        if not isinstance(have, Blocked) or not isinstance(want, Blocked) or have.rank != want.rank:
            return False
        fast = want.order[0]
        if have.order[0] != fast:
            return False
        span = have.spt[fast] * have.tpw[fast]
        ebytes = getattr(ptr.type.scalar.elem, "itemsize", 8)
        return self.axis[ptr].contig[fast] >= span and span * ebytes >= 128

    # ------------------------------------------------------------------ walk
    def run(self):
        self.block(self.fn.body)

    def block(self, block: Block):
        for op in list(block.ops):
            self.op(op)

    def op(self, op: Op):
        name = op.name
        res_tensors = [r for r in op.results if isinstance(r.type, TensorType)]
        if accesses_memory(name) and id(op) in self.anchors:
            layout, vec = self.anchors[id(op)]
            ptr = op.operands[0]
            have = self.layout_of(ptr)
            if name in ("tt.load", "tt.store") and have != layout and \
                    (equally_coalesced(have, layout) or self.whole_lines(ptr, have, layout)) and \
                    not recomputable(ptr, layout, 32 * self.num_warps):
                # a pointer tile the next pass cannot recompute in the access's layout (a reshaped range whose
                # layout codegen cannot make) would go through shared memory at 8 bytes an element; where its
                # own layout coalesces as well, the access takes it (a load's values convert later if need be)
                vec = min(vec, have.spt[layout.order[0]])
                layout = have
                self.anchors[id(op)] = (layout, vec)
                self.in_pointer_layout += 1
            value = self.layout_of(op.operands[1]) if name == "tt.store" and len(op.operands) > 1 else None
            if value is not None and value != layout and _numel(ptr.type) <= 32 * self.num_warps and \
                    all(recomputable(v, value, 32 * self.num_warps) for i, v in enumerate(op.operands)
                        if i != 1 and isinstance(v.type, TensorType)):
                # a store of at most one element per thread writes as coalesced in any layout: it takes its
                # computed value's, and its addresses (and mask) are rebuilt there, not the value converted;
                # KERNELLAB_SMALL_STORE_RUN=1: each thread's contiguous registers go as one vector (a decode
                # step's [D] output held 8 a thread in a reduction's slice layout: 8 scalar stores -> one)
                vec = 1
                if small_store_run_enabled() and (isinstance(value, Blocked) or (
                        isinstance(value, Slice) and isinstance(value.parent, Blocked))):
                    shape = ptr.type.shape
                    fast = _fastest_first(self.axis[ptr].contig, shape, coalesce_ties())[0]
                    vec = register_run(value, shape, fast, access_vec(op, self.axis, fast))
                layout = value
                self.anchors[id(op)] = (layout, vec)
            op.attrs["vec"] = vec
            for i, v in enumerate(op.operands):
                if isinstance(v.type, TensorType):
                    self.want(op, i, layout)
            for r in res_tensors:
                self.set_layout(r, layout)
            return
        if name in ("tt.load", "tt.store") and op.operands[0].type.is_block_ptr():
            # coalesced like a pointer access: each thread moves runs of `vec` contiguous elements (up to
            # 16 bytes) where the block pointer's base, strides, offsets and checked extent allow it
            bt = op.operands[0].type
            found = block_ptr.origin(op.operands[0])  # through tt.advance and loop iter args
            order = None if isinstance(found, str) else found[0].attrs.get("order")
            vec, why = block_ptr.copy_vec(op, self.axis)
            op.attrs["vec"] = vec if why is None else 1
            layout = default_blocked(bt.block_shape, self.num_warps, order=order, spt_fast=op.attrs["vec"])
            if name == "tt.load":
                self.set_layout(op.result, layout)
            else:
                self.want(op, 1, layout)
            return
        if name == "scf.for":
            body = op.regions[0]
            nth = self.loops_seen
            self.loops_seen += 1
            for i, (arg, init) in enumerate(zip(body.args[1:], op.operands[3:])):
                pref = self.loop_hints.get((nth, i)) or self.preferred(arg)
                if pref is None and self.carry_mma:
                    pref = nested_dot_accumulator(arg)
                if pref is not None and pref.rank == len(arg.type.shape):
                    self.want(op, 3 + i, pref)
                self._carry(arg, op.operands[3 + i])
            self.block(body)
            self._yield_to(body.ops[-1], body.args[1:])
            for r, a in zip(op.results, body.args[1:]):
                self.set_layout(r, self.layout_of(a))
            return
        if name == "scf.if":
            self.block(op.regions[0])
            self.block(op.regions[1])
            then_y, else_y = op.regions[0].ops[-1], op.regions[1].ops[-1]
            for i, r in enumerate(op.results):
                lay = self.layout_of(then_y.operands[i])
                if lay is not None and r.type.scalar.is_ptr():
                    # pointers take the layout of the access they feed (a fused loop's tile prologue computes a
                    # K loop's pointers once per tile; converting them there beats converting at every access)
                    pref = self.preferred(r)
                    if pref is not None and pref.rank == lay.rank and pref != lay:
                        self.want(then_y, i, pref)
                        lay = pref
                if lay is not None:
                    self.want(else_y, i, lay)
                    self.set_layout(r, lay)
            return
        if name == "scf.while":
            before, after = op.regions
            for arg, init in zip(before.args, op.operands):
                self._carry(arg, init)
            self.block(before)
            cond = before.ops[-1]
            for i, (a, v) in enumerate(zip(after.args, cond.operands[1:])):
                self.set_layout(a, self.layout_of(v))
            for r, v in zip(op.results, cond.operands[1:]):
                self.set_layout(r, self.layout_of(v))
            self.block(after)
            self._yield_to(after.ops[-1], before.args)
            return
        if name in ("tt.reduce", "tt.scan"):
            lay = self.first_layout(op)
            for i in range(len(op.operands)):
                self.want(op, i, lay)
            for r in res_tensors:
                self.set_layout(r, lay if name == "tt.scan" else Slice(op.attrs["axis"], lay))
            return
        if name == "tt.expand_dims":
            src = op.operands[0]
            axis = op.attrs["axis"]
            lay = self.layout_of(src)
            # otherwise a computed tile keeps its registers where a layout allows; the source's layout with
            # nothing along the new dim only when the result is not broadcast later (converting the smaller
            # operand, here, then wins)
            free = None if isinstance(lay, Slice) and lay.dim == axis else \
                self.free_layout(src, op.result, reshaped=not _broadcast_later(op.result))
            if isinstance(lay, Slice) and lay.dim == axis:
                self.set_layout(op.result, lay.parent)
            elif free is not None:
                self.set_layout(op.result, free)
            else:
                target = self.default(op.result.type.shape)
                if isinstance(src.type, TensorType):
                    self.want(op, 0, Slice(axis, target))
                self.set_layout(op.result, target)
            return
        if name == "tt.trans":
            lay, shape = self.layout_of(op.operands[0]), op.operands[0].type.shape
            free = None if isinstance(lay, Blocked) else permuted_layout(lay, shape, op.attrs["order"])
            if free is not None:  # an MMA accumulator (or a bit layout) with its dimensions' bits permuted
                self.set_layout(op.result, free)
                return
            if not isinstance(lay, Blocked):
                lay = self.default(op.operands[0].type.shape)
                self.want(op, 0, lay)
            order = op.attrs["order"]
            inv = {o: i for i, o in enumerate(order)}
            self.set_layout(op.result, Blocked(tuple(lay.spt[o] for o in order), tuple(lay.tpw[o] for o in order),
                                               tuple(lay.wpc[o] for o in order), tuple(inv[o] for o in lay.order)))
            return
        if name == "tt.dot":
            if "mma" in op.attrs:
                acc_lay = Mma(tuple(op.attrs["mma"]))
            else:
                acc_lay = self.layout_of(op.operands[2]) or self.default(op.result.type.shape)
            self.want(op, 2, acc_lay)
            self.set_layout(op.result, acc_lay)
            return
        if name == "tt.gather":  # the result is read in the index's layout; the source goes through scratch as is
            self.set_layout(op.result, self.layout_of(op.operands[1]))
            return
        if name == "tt.histogram":  # the mask is read with the values
            if len(op.operands) > 1:
                self.want(op, 1, self.layout_of(op.operands[0]))
            pref = self.preferred(op.result)
            ok = pref is not None and pref.rank == 1
            self.set_layout(op.result, pref if ok else self.default(op.result.type.shape))
            return
        if name == "tt.reshape" and res_tensors and res_tensors[0].type.shape:
            # in a layout where each thread keeps the elements it holds, the reshape renames registers;
            # without one it goes through shared memory into the default layout
            src, r = op.operands[0], res_tensors[0]
            self.set_layout(r, self.free_layout(src, r) or default_blocked(r.type.shape, self.num_warps))
            return
        if name == "tt.split" and len(res_tensors) == 2:
            lay = self.free_halves(op) or self.paired_halves(op)
            if lay is not None:
                for r in res_tensors:
                    self.set_layout(r, lay)
                return
        if name == "tt.join" and res_tensors and self.layout_of(op.operands[0]) is not None:
            lay = self.free_join(op)
            if lay is not None:
                self.set_layout(op.result, lay)
                return
        if name in ("tt.reshape", "tt.join", "tt.split", "tt.cat"):
            for r in res_tensors:
                self.set_layout(r, default_blocked(r.type.shape, self.num_warps))
            return
        if name in ("tt.make_range", "arith.constant") or (name == "tt.splat"):
            for r in res_tensors:
                pref = self.preferred(r)
                self.set_layout(r, pref if pref is not None and pref.rank == len(r.type.shape)
                                else self.default(r.type.shape))
            return
        if name in ("tt.print", "tt.assert", "scf.yield", "tt.return", "tt.reduce.return", "scf.condition"):
            return
        # Elementwise and everything else that keeps its operands' layout: the layout of an operand that
        # was computed (a dot's scores) wins over one that is index math (a causal mask), which the next
        # pass recomputes in any layout for free.
        lay = self.computed_layout(op) or self.unbroadcast_layout(op) or self.first_layout(op)
        if lay is None:
            for r in res_tensors:
                self.set_layout(r, self.default(r.type.shape))
            return
        for i, v in enumerate(op.operands):
            if isinstance(v.type, TensorType) and len(v.type.shape) == lay.rank:
                self.want(op, i, lay)
        for r in res_tensors:
            self.set_layout(r, lay)

    def _carry(self, arg, init):
        lay = self.layout_of(init)
        if lay is not None:
            self.set_layout(arg, lay)

    def _yield_to(self, yield_op, args):
        for i, a in enumerate(args):
            lay = self.layout_of(a)
            if lay is not None:
                self.want(yield_op, i + (1 if yield_op.name == "scf.condition" else 0), lay)


def loop_layout_hints(module: Module) -> dict:
    """Loop-carried values whose body yields them in another layout than they entered with (attention's
    running sum starts as `tl.zeros` in a blocked layout but is updated from a row reduction of an mma
    tile): {(n-th scf.for, iter arg): the yielded layout}. Entering in that layout costs one conversion
    before the loop instead of one per iteration."""
    hints, nth = {}, 0
    for op in module.kernel.walk():
        if op.name != "scf.for":
            continue
        body = op.regions[0]
        for i, (arg, y, init) in enumerate(zip(body.args[1:], body.terminator.operands, op.operands[3:])):
            lay = _converted_into(arg, y, body)
            c = y.defining_op
            if lay is None and _undefined(init) and c is not None and c.name == "ttg.convert_layout" and \
                    c.block is body:
                lay = c.operands[0].type.layout  # a value that starts undefined (flatten_loops): as the body makes it
            if lay is None and carry_as_made_enabled():
                lay = _replaced_as_read(arg, y, body)
            if lay is not None:
                hints[(nth, i)] = lay
        nth += 1
    return hints


def carry_as_made_enabled() -> bool:
    """KERNELLAB_CARRY_AS_MADE (on by default, `0` turns it off; a codegen knob of CODEGEN_ENV; session 16, H100:
    selective scan with SCAN_LEAN and LONG_REMAT 0.80-0.86 -> 1.14-1.24x Triton, heldout_texts2 row_max_index 1.00-1.06x
    of off, the idioms' scans unchanged): a loop-carried
    tensor that each iteration replaces by a value made in another layout, and that the body reads only through
    conversions into that same layout, enters the loop in it (`_replaced_as_read`): the Mamba-style scan's state
    `h = tl.sum(where(last, hs, 0), axis=0)` is made in the tile's column slice and read as `h[None, :]` in it, yet
    was carried in the default 1-D layout, two shared-memory round trips (and their barriers) an iteration on the
    loop's serial chain (Triton carries it in the slice)."""
    return switch("KERNELLAB_CARRY_AS_MADE", True)


def _replaced_as_read(arg, y, body):
    """The layout `y`, the value yielded for `arg`, is converted from, when every use of `arg` converts it into that
    same layout (so carrying it there drops both conversions each iteration); else None."""
    if not isinstance(arg.type, TensorType) or not arg.uses:
        return None
    c = y.defining_op
    if c is None or c.name != "ttg.convert_layout" or c.block is not body:
        return None
    src = c.operands[0].type.layout
    if src is None or src == arg.type.layout:
        return None
    if all(u.name == "ttg.convert_layout" and u.result.type.layout == src for u in arg.uses):
        return src
    return None


def _undefined(v) -> bool:
    """`ub.poison` or a splat of it (a loop-carried value the fused loop sets before its first read)."""
    d = v.defining_op
    while d is not None and d.name in ("tt.splat", "ttg.convert_layout"):
        d = d.operands[0].defining_op
    return d is not None and d.name == "ub.poison"


def _converted_into(arg, y, body):
    """The layout the body converts *from* to update `arg` into `y` through elementwise ops, or None."""
    if not isinstance(arg.type, TensorType):
        return None
    votes, work, seen, reaches_arg = {}, [y], set(), False
    while work:
        v = work.pop()
        if v is arg:
            reaches_arg = True
            continue
        d = v.defining_op
        if d is None or d.block is not body or id(d) in seen:
            continue
        seen.add(id(d))
        if d.name == "ttg.convert_layout":
            src = d.operands[0].type.layout
            if src is not None and src != arg.type.layout:
                votes[str(src)] = (votes.get(str(src), (0, src))[0] + 1, src)
            s = d.operands[0].defining_op
            if s is not None and s.name == "tt.dot" and s.block is body:
                # a dot updating the carry as its accumulator (fla's chunk_h: `b_h *= decay; b_h = dot(k, v, b_h)`):
                # the carry is reached through the accumulator, as through an elementwise update
                work.append(s.operands[2])
            elif src == arg.type.layout:
                work.append(d.operands[0])  # a conversion into the dot's accumulator layout, from the carry's
            continue
        # values only: a loop-carried pointer keeps the layout its loads chose (following an addptr chain here
        # moved the tutorial matmul's pointers into the dot operands' layouts and spilled)
        # and only the operands of the value's own element type: a select's mask (Inductor's welford loop keeps
        # `select(rmask & xmask, new, old)`) is not the value, and its conversion is no vote for the carry's layout
        if is_elementwise(d.name) and len(d.results) == 1 and not d.result.type.scalar.is_ptr() and \
                getattr(d.result.type, "shape", None) == arg.type.shape:
            work.extend(o for o in d.operands if getattr(o.type, "scalar", None) == arg.type.scalar)
    if not reaches_arg or not votes:
        return None
    return max(votes.values(), key=lambda t: t[0])[1]


def run(module: Module, options) -> dict:
    before = module.clone()
    a = LayoutAssigner(module, options.num_warps)
    a.run()
    hints = loop_layout_hints(module)
    # with KERNELLAB_CARRY_AS_MADE a loop entered in a new layout can make its enclosing loop's carry one too (the
    # implicit-GEMM conv's accumulator through its kh / kw loops): a few rounds, until no new loop follows
    rounds = 3 if carry_as_made_enabled() else 1
    while hints and rounds:  # assign again from the original IR, the loops entered in the layouts their bodies produce
        rounds -= 1
        module.functions[:] = (before.clone() if rounds else before).functions
        a = LayoutAssigner(module, options.num_warps, hints)
        a.run()
        more = {k: v for k, v in loop_layout_hints(module).items() if k not in hints} if rounds else {}
        if not more:
            break
        hints.update(more)
    stats = {"anchors": len(a.anchors), "converts_inserted": a.converts}
    if hints:
        stats["loop_layouts_followed"] = len(hints)
    if a.in_pointer_layout:
        stats["accesses_in_pointer_layout"] = a.in_pointer_layout
    if a.widened_loads:
        stats["unaligned_loads_widened"] = a.widened_loads
    if a.loads_to_store_run:
        stats["loads_to_store_run"] = a.loads_to_store_run
    return stats
