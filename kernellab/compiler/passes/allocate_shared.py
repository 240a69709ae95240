"""Allocate shared memory by liveness.

Most buffers are scratch: written and read inside one op (a layout conversion, a cross-warp
reduction, dot operand staging). The multi-stage buffers of a pipelined loop (`ttg.local_alloc`)
live from their allocation to their last reader, the wait after the loop. When the plan is small, buffers get
separate addresses (so no op waits for another); otherwise buffers whose live ranges don't
overlap share addresses; the plan (offset, size, live range, reason) is recorded on the module for the trace
and the lab, and the total becomes the kernel's dynamic shared memory. A buffer's `line` is its op's source line;
`file` names that line's file when it is not the kernel's own (an @jit helper inlined from another module).
"""
from __future__ import annotations

from ..gpu.scratch import buffer_align, mem_bytes, scratch_bytes
from ..ir import Module
from ..ops import is_loop

NAME = "allocate_shared"
DESCRIPTION = "place shared-memory buffers by liveness; record offsets, sizes and live ranges"
ALIGN = 16
DISJOINT_LIMIT = 32 * 1024


def _last_use(op, index_of, end_of) -> int:
    """Program point of the last op reading a buffer, through the stage views made of it. A read inside
    a loop that does not contain the allocation keeps the buffer live to the end of that loop: the next
    iteration reads it again."""
    last, work = index_of[id(op)], list(op.results)
    outer = set()
    b = op.block
    while b is not None and b.parent is not None:
        outer.add(id(b.parent))
        b = b.parent.block
    while work:
        v = work.pop()
        for u in v.uses:
            last = max(last, index_of.get(id(u), last))
            b = u.block
            while b is not None and b.parent is not None and id(b.parent) not in outer:
                if is_loop(b.parent.name):
                    last = max(last, end_of[id(b.parent)])
                b = b.parent.block
            if u.name == "ttg.memdesc_index":
                work.extend(u.results)
    return last


_MBARRIER_PURPOSE = {None: "TMA copies complete on them",
                     "full": "every thread's cp.async copies into the stage complete on them",
                     "empty": "each warp arrives once its wgmmas have read the stage, before it is refilled"}


def _purpose(op) -> str:
    read_by = op.attrs.get("read_by")
    if op.attrs.get("operand") == "side":
        return "a row vector read next to the dots"
    return f"read by a {read_by}" if read_by else f"dot operand {op.attrs.get('operand', '?')}"


def _stage_buffer(op, index: int, index_of, end_of) -> dict:
    t = op.result.type
    stages = t.shape[0]
    size = stages * t.tile_bytes
    live = [index, _last_use(op, index_of, end_of)]
    if op.name == "ttg.mbarrier_alloc":
        return {"op": op.name, "line": op.loc.line if op.loc else None, "size": size, "live": live,
                "stages": stages, "stage_bytes": t.tile_bytes,
                "reason": f"{stages} mbarriers, one per pipeline stage: " + _MBARRIER_PURPOSE[op.attrs.get("purpose")],
                "_op": op}
    layout = "row-major" if t.order[0] == len(t.shape) - 2 else "column-major"
    fill = {"tma": "TMA", "registers": "st.shared"}.get(op.attrs.get("fill"), "cp.async")
    return {"op": op.name, "line": op.loc.line if op.loc else None, "size": size,
            "live": live, "stages": stages, "stage_bytes": t.tile_bytes,
            "swizzle": (f"{t.swizzle}-byte (16-byte chunks XOR row mod 8)" if t.swizzle
                        else f"none: rows padded by {t.pad * mem_bytes(t)} bytes"),
            "filled_by": fill,
            "reason": f"{_purpose(op)}: {stages} stage{'s' if stages != 1 else ''} of a "
                      f"{'x'.join(map(str, t.shape[1:]))} {t.scalar} tile ({layout}) filled by {fill}",
            "_op": op}


def _stage_mbarriers(alloc) -> list:
    """Shared-memory offsets of the mbarriers the TMA copies into a stage buffer complete on (placed)."""
    bars = []
    for view in alloc.result.uses:
        for copy in view.results[0].uses if view.name == "ttg.memdesc_index" else []:
            if copy.name == "ttg.tma_copy":
                owner = copy.operands[3].defining_op.operands[0].defining_op
                if owner not in bars:
                    bars.append(owner)
    t = [b.result.type for b in bars]
    return [b.attrs["smem_offset"] + i * bt.tile_bytes for b, bt in zip(bars, t) for i in range(bt.shape[0])]


def run(module: Module, options=None) -> dict:
    fn = module.kernel
    buffers = []
    ops = list(fn.walk())
    index_of = {id(op): i for i, op in enumerate(ops)}
    end_of = {id(op): index_of[id(op)] + sum(1 for _ in op.walk()) - 1 for op in ops if op.regions}
    for index, op in enumerate(ops):
        if op.name in ("ttg.local_alloc", "ttg.mbarrier_alloc"):
            buffers.append(_stage_buffer(op, index, index_of, end_of))
        else:
            size, why = scratch_bytes(op)
            if not size:
                continue
            size = (size + ALIGN - 1) // ALIGN * ALIGN
            buffers.append({"op": op.name, "line": op.loc.line if op.loc else None, "size": size,
                            "live": [index, index], "reason": why, "_op": op})
        if buffer_align(op) > ALIGN:
            buffers[-1]["align"] = buffer_align(op)
    for b in buffers:  # the file of the buffer's line when it is not the kernel's (an inlined helper's module)
        loc = b["_op"].loc
        b["file"] = loc.file if loc is not None and loc.file and loc.file != fn.source_file else None
    # Small plans keep every buffer apart, so consecutive ops never wait for each other (fewer
    # barriers); larger ones reuse addresses by liveness: a buffer goes at the lowest offset not
    # used by any buffer live at the same time.
    disjoint = sum(b["size"] for b in buffers) <= DISJOINT_LIMIT
    placed = []
    for b in buffers:
        offset, align = 0, b.get("align", ALIGN)
        for other in sorted(placed, key=lambda o: o["offset"]):
            overlap = disjoint or not (other["live"][1] < b["live"][0] or b["live"][1] < other["live"][0])
            if overlap and offset + b["size"] > other["offset"] and offset < other["offset"] + other["size"]:
                offset = -(-(other["offset"] + other["size"]) // align) * align
        b["offset"] = offset
        b["_op"].attrs["smem_offset"] = offset
        b["_op"].attrs["smem_bytes"] = b["size"]
        placed.append(b)
    for b in placed:
        if b["op"] == "ttg.mbarrier_alloc":
            b["mbarriers"] = [b["offset"] + i * b["stage_bytes"] for i in range(b["stages"])]
        elif b.get("filled_by") == "TMA":
            b["mbarriers"] = _stage_mbarriers(b["_op"])
    total = max((b["offset"] + b["size"] for b in placed), default=0)
    module.shared_plan = [{k: v for k, v in b.items() if k != "_op"} for b in placed]
    module.shared_bytes = total
    return {"buffers": len(placed), "bytes": total}
