"""Insert `bar.sync` only where shared memory needs ordering between ops.

Each shared-memory op is: write its buffer, bar.sync, read it (the op orders its own
read-after-write). After it, reads of its buffer may still be in flight in slower warps. A later op
that writes an overlapping address range (write-after-read) needs a barrier first; one writing
elsewhere does not. Walking the structured IR we track the address ranges with pending reads;
loops are walked until that set is stable, so the first op of a body is checked against the last
op of the previous iteration.
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


def _overlaps(r, pending) -> bool:
    return any(r[0] < o + n and o < r[0] + r[1] for o, n in pending)


def _walk(block: Block, pending: frozenset, st: _State, dry: bool) -> frozenset:
    for op in list(block.ops):
        r = _range(op)
        if op.name in ("ttg.barrier", "tt.debug_barrier", "ttg.async_wait"):
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
    return pending


def run(module: Module, options=None) -> dict:
    st = _State()
    _walk(module.kernel.body, frozenset(), st, dry=False)
    return {"barriers": st.inserted}
