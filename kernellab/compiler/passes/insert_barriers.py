"""Insert `bar.sync` only where shared memory needs ordering between ops.

Each shared-memory op is: write its buffer, bar.sync, read it (the op orders its own
read-after-write). After it, reads of its buffer may still be in flight in slower warps. A later op
that writes an overlapping address range (write-after-read) needs a barrier first; one writing
elsewhere does not. Walking the structured IR we track the address ranges with pending reads;
loops are walked until that set is stable, so the first op of a body is checked against the last
op of the previous iteration.

A multi-stage buffer (`ttg.local_alloc`, `ttg.mbarrier_alloc`) is written from its allocation on
(cp.async or TMA copies, mbarrier init), without a bar.sync of its own, and the allocator may give it
the address of a scratch buffer that an op just before it still reads (a row vector converted once,
hoisted above a pipelined loop): a barrier goes before the allocation then. The pipeline orders the
buffer's own writes and reads (waits, the barrier before a refill), but the reads of its tiles by dots
stay pending for whatever reuses its address after its last reader.

A one-stage buffer (`stage_invariant_dot_operands`) is written by `ttg.local_store`, which has no barrier of its
own (one `ttg.barrier` follows the stores of all a dot's tiles): a store overlapping pending reads gets one first.
The dots that read such a buffer leave its range pending, as a scratch op's read would.
"""
from __future__ import annotations

from ..ir import Block, Module, Op
from ..ops import is_loop

NAME = "insert_barriers"
DESCRIPTION = "add bar.sync only where a shared-memory write could overtake an earlier read"


class _State:
    def __init__(self):
        self.inserted = 0


_ALLOCS = ("ttg.local_alloc", "ttg.mbarrier_alloc")
_WRITES = ("ttg.async_copy", "ttg.tma_copy", "ttg.local_store")  # fill a stage or a one-stage buffer


def _range(op: Op):
    if op.name in _ALLOCS:  # pipelined buffers: see _alloc_range and _stage_reads
        return None
    n = op.attrs.get("smem_bytes", 0)
    return (op.attrs.get("smem_offset", 0), n) if n else None


def _alloc_range(op: Op):
    n = op.attrs.get("smem_bytes", 0)
    return (op.attrs.get("smem_offset", 0), n) if op.name in _ALLOCS and n else None


def _buffer_range(v):
    """The address range of the buffer a memdesc value (or a view of it) is, or None."""
    d = v.defining_op
    while d is not None and d.name == "ttg.memdesc_index":
        d = d.operands[0].defining_op
    return _alloc_range(d) if d is not None and d.name == "ttg.local_alloc" else None


def _stage_reads(op: Op) -> frozenset:
    """The buffers a dot (or any other reader) reads through stage views: they stay pending after it."""
    if op.name in _ALLOCS or op.name in _WRITES or op.name == "ttg.memdesc_index":
        return frozenset()
    return frozenset(r for r in map(_buffer_range, op.operands) if r is not None)


def _overlaps(r, pending) -> bool:
    return any(r[0] < o + n and o < r[0] + r[1] for o, n in pending)


def _walk(block: Block, pending: frozenset, st: _State, dry: bool) -> frozenset:
    for op in list(block.ops):
        r = _range(op)
        a = _alloc_range(op)
        if op.name in ("ttg.barrier", "tt.debug_barrier", "ttg.async_wait"):
            pending = frozenset()
        elif op.name == "ttg.local_store":  # a write with no barrier of its own (one ttg.barrier follows)
            w = _buffer_range(op.operands[1])
            if w is not None and _overlaps(w, pending):
                if not dry:
                    b = Op("ttg.barrier", [], [], {"reason": "write-after-read on shared memory"}, loc=op.loc)
                    block.insert(block.ops.index(op), b)
                    st.inserted += 1
                pending = frozenset()
        elif a is not None:
            if _overlaps(a, pending):  # its first copies would overwrite what a slower warp still reads
                if not dry:
                    b = Op("ttg.barrier", [], [], {"reason": "write-after-read on shared memory: a buffer "
                                                   "reuses a scratch address"}, loc=op.loc)
                    block.insert(block.ops.index(op), b)
                    st.inserted += 1
                pending = frozenset()
        elif r is not None:
            if _overlaps(r, pending) and not dry:
                b = Op("ttg.barrier", [], [], {"reason": "write-after-read on shared memory"}, loc=op.loc)
                block.insert(block.ops.index(op), b)
                st.inserted += 1
            pending = frozenset([r]) | _stage_reads(op)  # its own barrier retired every earlier read
        elif is_loop(op.name):
            entry = pending
            for _ in range(3):  # the back edge: end-of-body state flows into the next iteration
                state = entry
                for reg in op.regions:
                    state = _walk(reg, state, st, dry=True)
                if state <= entry:
                    break
                entry = entry | state
            state = exits = entry
            for reg in op.regions:
                state = _walk(reg, state, st, dry)
                exits = exits | state  # scf.while leaves from the end of its first ("before") region
            pending = exits
        elif op.name == "scf.if":
            outs = [_walk(reg, pending, st, dry) for reg in op.regions]
            pending = frozenset().union(*outs)
        else:
            pending = pending | _stage_reads(op)
    return pending


def run(module: Module, options=None) -> dict:
    st = _State()
    _walk(module.kernel.body, frozenset(), st, dry=False)
    return {"barriers": st.inserted}
