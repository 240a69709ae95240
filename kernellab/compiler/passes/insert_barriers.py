"""Insert `bar.sync` only where shared memory needs ordering between ops.

Each shared-memory op is: write its buffer, bar.sync, read it (the op orders its own
read-after-write). After it, reads of its buffer may still be in flight in slower warps. A later op
that writes an overlapping address range (write-after-read) needs a barrier first; one writing
elsewhere does not. Walking the structured IR we track the address ranges with pending reads;
loops are walked until that set is stable, so the first op of a body is checked against the last
op of the previous iteration.

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


def _range(op: Op):
    if op.name in ("ttg.local_alloc", "ttg.mbarrier_alloc"):  # pipelined buffers order themselves (waits)
        return None
    n = op.attrs.get("smem_bytes", 0)
    return (op.attrs.get("smem_offset", 0), n) if n else None


def _stage_range(v):
    """The address range of the one-stage buffer (`stage_invariant_dot_operands`) a memdesc view is of, or None.
    Such a buffer is filled by plain stores and its last reader may be followed by ops reusing its addresses,
    so its writes and reads are tracked like scratch; multi-stage buffers are ordered by their own waits."""
    op = v.defining_op
    if op is not None and op.name == "ttg.memdesc_index":
        op = op.operands[0].defining_op
    if op is None or op.name != "ttg.local_alloc" or op.attrs.get("stages") != 1 or "smem_bytes" not in op.attrs:
        return None
    return op.attrs["smem_offset"], op.attrs["smem_bytes"]


def _stage_reads(op: Op) -> frozenset:
    if op.name in ("ttg.local_store", "ttg.memdesc_index"):  # a write, a view
        return frozenset()
    return frozenset(r for r in map(_stage_range, op.operands) if r is not None)


def _overlaps(r, pending) -> bool:
    return any(r[0] < o + n and o < r[0] + r[1] for o, n in pending)


def _walk(block: Block, pending: frozenset, st: _State, dry: bool) -> frozenset:
    for op in list(block.ops):
        r = _range(op)
        reads = _stage_reads(op)
        if op.name in ("ttg.barrier", "tt.debug_barrier", "ttg.async_wait"):
            pending = frozenset()
        elif op.name == "ttg.local_store":  # a write with no barrier of its own (one ttg.barrier follows)
            w = _stage_range(op.operands[1])
            if w is not None and _overlaps(w, pending):
                if not dry:
                    b = Op("ttg.barrier", [], [], {"reason": "write-after-read on shared memory"}, loc=op.loc)
                    block.insert(block.ops.index(op), b)
                    st.inserted += 1
                pending = frozenset()
        elif r is not None:
            if _overlaps(r, pending) and not dry:
                b = Op("ttg.barrier", [], [], {"reason": "write-after-read on shared memory"}, loc=op.loc)
                block.insert(block.ops.index(op), b)
                st.inserted += 1
            pending = frozenset([r])  # the op's own barrier retired every earlier read
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
        pending = pending | reads  # a dot reading a one-stage buffer: its reads may still be in flight after it
    return pending


def run(module: Module, options=None) -> dict:
    st = _State()
    _walk(module.kernel.body, frozenset(), st, dry=False)
    return {"barriers": st.inserted}
