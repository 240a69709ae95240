"""On sm_90, store a block pointer's tile (what a tensor descriptor's `store` is) by TMA, asynchronously.

Without this, every thread converts its registers to the coalesced layout through shared memory (st.shared,
bar.sync, ld.shared) and writes them with st.global, masked per element. With it, as in Triton:

    before the kernel-level op holding the store (a persistent kernel's tile loop): a one-stage swizzled
                   buffer per store (live from there to the return) and its tensor map
    each store:    tma_store_wait(pending)   # wait_group.read: this buffer's previous TMA store has read it
                   barrier
                   local_store(value)        # st.shared in the value's own layout (no conversion) + fence.proxy.async
                   barrier
                   tma_store(tensor map, block ptr, buffer)   # one thread: cp.async.bulk.tensor + commit_group
    each return:   tma_store_wait(0)

The store is not waited for where it is issued: a persistent kernel's next tile loads and multiplies while the
TMA unit writes this tile out, and the wait comes before the buffer is written again. TMA drops the elements
outside the tensor's shape, which is a descriptor store's boundary check. With n stores in one block (the
subtiled epilogue's two halves), each has its own buffer and waits with `pending = n - 1`: the groups issued
since its own previous store. Stores in different blocks wait for all (pending 0).

A store qualifies when a host-made tensor map can describe the tensor (block_ptr.tma_operands: base, shape and
strides are kernel arguments or constants, 16-byte aligned, every dim checked; a `[1, M, N]` tile of a rank-3
descriptor, the reshape of an `[M, N]` one, as Liger's mlp stores, is stored from that 2-D tile through a tensor map
of rank 3 with a box of 1 along the leading dim), the kernel only stores to that tensor (nothing of it is read back
while a TMA store may still be writing), its tile can be swizzled and has at most 256 rows, the tensor's contiguous
extent is proven a whole number of 16-byte chunks (a TMA store writes whole chunks, past a ragged extent into a
strided view's padding), and the buffers fit in shared memory next to the kernel's stage buffers. Why a store keeps
st.global is recorded in the stats (`no_tma_store`). A tensor descriptor over values the kernel computes (a grouped
GEMM's per-group C) has its map made by the kernel at each store (`ttg.make_tensormap`, after the wait that frees
the map's slot too).
"""
from __future__ import annotations

from ..gpu import block_ptr
from ..gpu.axis_info import AxisAnalysis
from ..gpu.layouts import Blocked
from ..gpu.scratch import scratch_bytes
from ..gpu.smem_layout import swizzled
from ..ir import Module, Op
from ..ops import is_loop
from ..rewrite import insert_before, top_level
from ..types import TensorType
from .dot_stages import Builder
from .fill_stages_with_tma import _tensormap
from .fill_stages_with_tma import made_tensormap as _made_tensormap

NAME = "tma_store"
DESCRIPTION = "store block-pointer tiles by TMA from shared memory (sm_90), waited for only before reuse"
SMEM_BUDGET = 227 * 1024  # sm_90's shared memory per block (opt-in)
TMA_ELEMS = ("f16", "bf16", "f32", "i32", "i8", "f8e4nv", "f8e5")  # what runtime/tensormap.py encodes


def _only_stored(base) -> bool:
    """Whether the kernel argument `base` only reaches block pointers that are stored to: the kernel never reads
    what its TMA stores write (they are asynchronous and in the async proxy, so a later ld.global of the same
    addresses, even after bar.sync, could see old data). Other arguments are taken not to alias it, as Triton's
    descriptor stores do."""
    work = list(base.uses)
    while work:
        u = work.pop()
        if u.name in ("tt.make_block_ptr", "tt.advance", "tt.hint"):  # (a hint: the same pointer, see semantic)
            work.extend(u.result.uses)
        elif u.name == "scf.yield" or u.name == "scf.for":
            return False  # a block pointer carried by a loop: followed no further
        elif u.name != "tt.store":
            return False
    return True


_CASTS = ("arith.truncf", "arith.extf", "arith.bitcast", "tt.fp_to_fp", "arith.sitofp", "arith.uitofp",
          "arith.fptosi", "arith.fptoui", "arith.trunci", "arith.extsi", "arith.extui")


def _unsqueezed(v):
    """The 2-D tile `v` (a `[1, M, N]` tile stored through a descriptor with a `[1, M, N]` block, as Liger's mlp
    stores) reshapes, as (value, [ops it then replaces]), or (None, why not). Looks through layout conversions
    and one elementwise cast (`x.to(dtype)` after the reshape): the cast is rebuilt on the 2-D tile, in its
    layout."""
    chain = []
    d = v.defining_op
    while d is not None and d.name == "ttg.convert_layout" and len(d.result.uses) == 1:
        chain.append(d)
        d = d.operands[0].defining_op
    cast = None
    if d is not None and d.name in _CASTS and len(d.operands) == 1 and len(d.result.uses) == 1:
        cast = d
        chain.append(d)
        d = d.operands[0].defining_op
    unit = d is not None and (d.name == "tt.reshape" or (d.name == "tt.expand_dims" and d.attrs.get("axis") == 0))
    if not unit or len(d.result.uses) != 1:  # (the canonicalizer makes the reshape an expand_dims)
        return None, "a [1, M, N] tile that is not tl.reshape of a 2-D one"
    x = d.operands[0]
    if not isinstance(x.type, TensorType) or tuple(x.type.shape) != tuple(v.type.shape[-2:]):
        return None, "a [1, M, N] tile that is not tl.reshape of an [M, N] one"
    chain.append(d)
    if cast is None:
        return x, chain
    new = Op(cast.name, [x], [TensorType(tuple(x.type.shape), cast.result.type.scalar, x.type.layout)],
             dict(cast.attrs), (), cast.loc, [cast.result.hint])
    return new, chain


def _qualifies(op: Op, fn, axis):
    """(buffer type, tensor-map operands, the value to store) or (None, why not, None). A tile of rank 3+ whose
    leading dims are 1 qualifies through the 2-D tile it reshapes (`_unsqueezed`): the value is then a tuple
    (2-D value or an unplaced cast op making it, the ops it replaces)."""
    bp, v = op.operands[0], op.operands[1]
    t = v.type
    squeezed = None
    if isinstance(t, TensorType) and len(t.shape) > 2 and all(d == 1 for d in t.shape[:-2]):
        x, chain = _unsqueezed(v)
        if x is None:
            return None, chain, None
        squeezed = (x, chain)
        t = TensorType(tuple(t.shape[-2:]), t.elem, None)
    if not isinstance(t, TensorType) or len(t.shape) != 2:
        return None, "not a 2-D tile (nor [1, M, N])", None
    if t.scalar.ir != bp.type.elem.ir:
        return None, "the value's type differs from the tensor's", None
    if t.scalar.ir not in TMA_ELEMS:
        return None, f"no TMA tensor map for {t.scalar} here (runtime/tensormap.py)", None
    found = block_ptr.origin(bp)
    if isinstance(found, str):
        return None, found, None
    order = block_ptr.tile_order(found[0], 2)
    buf_t = swizzled((1,) + tuple(t.shape), t.scalar, order)
    if buf_t is None:
        return None, "the tile's contiguous extent cannot be swizzled", None
    if t.shape[order[1]] > 256:
        return None, "the tile is over 256 rows (a TMA box dim holds at most 256)", None
    if squeezed is None and _across(v, order[0]):
        return None, ("the tile's registers run across the tensor's contiguous dim (a transposing store): "
                      "staging it would write 2-byte pieces to one bank; converted and stored by st.global, "
                      "as Triton stores a block pointer"), None
    args = (bp, t.scalar.bits // 8, op.attrs.get("boundary_check"), fn.args, axis)
    operands, why = block_ptr.tma_operands(*args)
    if operands is None and ("computed in the kernel" in why or "per-program offset" in why):
        made, _ = block_ptr.tma_operands(*args, device=True)  # a descriptor the kernel makes: so is its map
        if made is not None:
            operands = _Made(made)
    if operands is None:
        return None, why, None
    if (_extent_div(found[0], axis) * (t.scalar.bits // 8)) % 16:
        # A TMA store writes whole 16-byte chunks: past a contiguous extent that is not a whole number of them it
        # writes the padding of a strided view up to the next chunk. On an H200, into C[:, :257] of a padded buffer,
        # Triton 3.6's descriptor store did so (3 fp32 per row; kernellab's st.global none: benchmarks/NOTES.md,
        # thirteenth session, run 1). So the extent must be proven a whole number of chunks (the runtime
        # specializes an argument divisible by 16), also for maps the kernel makes from extents it computes or
        # loads (a grouped GEMM's); otherwise st.global, which masks each element.
        return None, ("the tensor's contiguous extent is not known to be a multiple of 16 bytes (a TMA store may "
                      "write past it, up to the next 16-byte chunk)"), None
    if not _only_stored(operands[0]):
        return None, "the kernel also reads the tensor (a TMA store is not ordered before the kernel's own reads)", None
    if squeezed is not None:
        return buf_t, operands, squeezed
    d = v.defining_op
    if d is not None and d.name == "ttg.convert_layout" and len(v.uses) == 1:
        v = d.operands[0]  # local_store writes any layout: the conversion for st.global goes
    return buf_t, operands, v


def _extent_div(mk: Op, axis) -> int:
    """What the contiguous extent of `mk`'s tensor is known to be a multiple of (elements): the best of the value
    and of what it widens or hints (`tl.multiple_of(N, 8)` on a size loaded in the kernel)."""
    _, shape, _, _ = block_ptr.parts(mk)
    v, best = shape[mk.attrs["order"][0]], 1
    while v is not None:
        best = max(best, axis[v].div[0])
        d = v.defining_op
        v = d.operands[0] if d is not None and d.name in ("arith.extsi", "arith.extui", "tt.hint") else None
    return best


def _across(v, contiguous: int) -> bool:
    """Whether the registers of the stored tile (before its conversion to the store's layout, which the TMA path
    drops) are blocked along another dim than the tensor's contiguous one, several to a thread: each would go to
    the swizzled buffer as its own st.shared, lanes 8 rows apart on one bank."""
    d = v.defining_op
    if d is not None and d.name == "ttg.convert_layout" and len(v.uses) == 1:
        v = d.operands[0]
    lay = getattr(v.type, "layout", None)
    if not isinstance(lay, Blocked):
        return False
    fast = lay.order[0]
    return fast != contiguous and lay.spt[fast] > 1


class _Made(list):
    """Tensor-map operands the kernel computes: the map is a `ttg.make_tensormap` made at each store, after the
    wait for the previous store through the same map slot."""


def _live_alloc_bytes(fn, found) -> int:
    """Bytes of the shared buffers made so far that may still be live where the first store buffer is made:
    a pipelined loop's stages whose last reader (the drain after the loop) comes before every store's kernel-level
    op are dead there, and allocate_shared (by liveness) gives their addresses to the store buffers (Liger's
    mlp epilogue stores three 128x128 fp32 tiles after a loop whose stages take 192 KiB)."""
    body = fn.body
    first = min(body.ops.index(top_level(op, body)) for op, *_ in found)
    total = 0
    for o in fn.walk():
        if o.name not in ("ttg.local_alloc", "ttg.mbarrier_alloc"):
            continue
        last, work = body.ops.index(top_level(o, body)), list(o.results)
        while work:
            for u in work.pop().uses:
                last = max(last, body.ops.index(top_level(u, body)))
                if u.name == "ttg.memdesc_index":
                    work.extend(u.results)
        if last >= first:
            total += o.result.type.shape[0] * o.result.type.tile_bytes
    return total


def _exclusive_sites(found, body) -> dict:
    """{id(store): the store whose buffer and tensor map it reuses} for the stores of a nest flatten_loops
    versioned (`if K loop runs: fused loop else: the nest without it`): the same stores, in the same order, in the
    two branches of one `scf.if` of the kernel's body, which never both run, so the i-th store of each branch can
    share the i-th buffer (one tile buffer fewer in shared memory) and the waits count as in one branch."""
    sites: dict = {}
    for op, b, operands, _ in found:
        sites.setdefault(id(op.block), []).append((op, str(b), [id(v) if v.defining_op is None else
                                                               ("c", v.defining_op.attrs.get("value"))
                                                               for v in operands]))
    if len(sites) != 2:
        return {}
    first, second = sites.values()
    tops = {id(top_level(op, body)) for op, *_ in first + second}
    top = top_level(first[0][0], body)
    if len(tops) != 1 or top.name != "scf.if" or len(first) != len(second):
        return {}
    if _region_of(first[0][0], top) is _region_of(second[0][0], top):
        return {}
    if any((b1, o1) != (b2, o2) for (_, b1, o1), (_, b2, o2) in zip(first, second)):
        return {}
    return {id(s2): s1 for (s1, *_), (s2, *_) in zip(first, second)}


def _region_of(op: Op, top: Op):
    while op.block.parent is not top:
        op = op.block.parent
    return op.block


def _in_loop(op: Op) -> bool:
    while op.block is not None and op.block.parent is not None:
        op = op.block.parent
        if is_loop(op.name):
            return True
    return False


def run(module: Module, options=None) -> dict:
    stats = {"tma_store": 0}
    fn = module.kernel
    if getattr(options, "arch", 90) < 90 or not getattr(options, "tma", True):
        return stats
    stores = [op for op in fn.walk() if op.name == "tt.store" and op.operands[0].type.is_block_ptr()]
    if not stores:
        return stats
    axis = AxisAnalysis(fn)
    found = []
    for op in stores:
        buf_t, operands, value = _qualifies(op, fn, axis)
        if buf_t is None:
            stats.setdefault("no_tma_store", []).append(f"line {op.loc.line if op.loc else '?'}: {operands}")
        else:
            found.append((op, buf_t, operands, value))
    if not found:
        return stats
    going = {id(op.operands[1].defining_op) for op, _, _, v in found if v is not op.operands[1]}
    going |= {id(c) for _, _, _, v in found if isinstance(v, tuple) for c in v[1]}
    allocs = _live_alloc_bytes(fn, found)
    scratch = max((scratch_bytes(o)[0] for o in fn.walk() if id(o) not in going), default=0)
    share = _exclusive_sites(found, fn.body)  # id(store) -> the store whose buffer it reuses
    need = sum(b.tile_bytes for op, b, _, _ in found if id(op) not in share)
    if allocs + scratch + need > SMEM_BUDGET:
        stats["no_tma_store"] = [f"the tile buffers ({need} bytes) do not fit next to the stages ({allocs} bytes) "
                                 f"and scratch ({scratch} bytes)"]
        return stats
    blocks = {id(op.block) for op, *_ in found}
    pending = len(found) // len(blocks) - 1 if len(blocks) == 1 or share else 0
    views, owned = [], {}
    for k, (op, buf_t, operands, value) in enumerate(found):
        if id(op) in share:
            view, tmap = owned[id(share[id(op)])]
        else:
            # just before the kernel-level op holding the store (a persistent kernel's tile loop): live from there
            # to the return (its last TMA store is waited for there); earlier buffers can share its addresses
            at_entry = Builder(top_level(op, fn.body), op.loc)
            buf = at_entry.op("ttg.local_alloc", [], [buf_t], {"stages": 1, "fill": "registers",
                                                               "read_by": "TMA store"}, [f"store{k}_tile"]).result
            view = at_entry.op("ttg.memdesc_index", [buf, at_entry.const(0)], [buf_t.tile()]).result
            tmap = None if isinstance(operands, _Made) else _tensormap(at_entry, operands, buf_t,
                                                                        f"store{k}_tensormap", op.loc)
            views.append(view)
            owned[id(op)] = (view, tmap)
        at = Builder(op, op.loc)
        chain = []
        if isinstance(value, tuple):  # a [1, M, N] tile: its 2-D value (a cast rebuilt on it, placed here)
            value, chain = value
            if isinstance(value, Op):
                insert_before(op, value)
                value = value.result
        if _in_loop(op):  # written again each iteration (once, elsewhere: insert_barriers orders the write)
            at.op("ttg.tma_store_wait", [view], [], {"pending": pending})
            at.op("ttg.barrier", [], [], {"reason": "the buffer's previous TMA store has read it"})
        if isinstance(operands, _Made):
            tmap = _made_tensormap(at, operands, buf_t, f"store{k}_tensormap", op.loc)
            stats["device_tensormaps"] = stats.get("device_tensormaps", 0) + 1
        at.op("ttg.local_store", [value, view], [])
        at.op("ttg.barrier", [], [], {"reason": "the tile is in shared memory (fenced for the async proxy)"})
        at.op("ttg.tma_store", [tmap, op.operands[0], view], [])
        old = op.operands[1].defining_op
        op.erase()
        if old is not None and id(old) in going and not old.result.uses and old not in chain:
            old.erase()
        for c in chain:  # the conversions, cast and reshape that made the [1, M, N] tile, dead now
            if not c.result.uses:
                c.erase()
        stats["tma_store"] += 1
    made = [fn.body.ops.index(v.defining_op) for v in views]
    for ret in [o for o in fn.walk() if o.name == "tt.return"]:
        at = fn.body.ops.index(top_level(ret, fn.body))
        live = [v for v, i in zip(views, made) if i < at]  # an early return before the buffers: nothing to wait for
        if live:
            Builder(ret, ret.loc).op("ttg.tma_store_wait", live, [], {"pending": 0})
    return stats
