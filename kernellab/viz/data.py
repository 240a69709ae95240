"""What each lab view draws, derived from a CompiledKernel's CompileTrace (pure functions).

Everything here reads the trace's records (kernellab.compiler.trace), never the IR text: per pass its text
and where each line's source location is (`PassRecord.positions`); the Snapshots of the final tile and GPU
IR (ops and values with names, types, layouts, source lines and defining passes; global accesses with
their vector width and coalescing; the shared-memory plan; the barriers). The layout math comes from
`kernellab.compiler.layout_model` (the code the code generator uses), so a grid drawn here is the mapping
the kernel really runs with.

Functions that read IR take a `source`: a CompiledKernel, its CompileTrace (the last record of the stage
asked for), a PassRecord or a Snapshot.

Models (simple, stated so a reader can judge them):
- coalescing (layout_model.coalescing): addresses of a tile are taken to be dense, contiguous along the
  layout's fastest dimension (`order[0]`, which assign_layouts aligns with the pointers' contiguous axis)
  and then along the next ones; a warp's access instruction touches 32-byte sectors; efficiency = useful
  bytes / bytes in the touched sectors; coalesced means no wasted sector bytes.
- bank conflicts: 32 banks of 4 bytes; all lanes of a warp execute one register's store (or load)
  together; the elements go to shared memory at their row-major linear index (what the code
  generator does for conversions and dot staging); an access needs as many wavefronts as the
  largest number of distinct 4-byte words any bank is asked for (same word = broadcast, free).
- occupancy: per SM 65536 registers (allocated per warp in units of 256), 228 KiB shared memory
  (plus 1 KiB reserved per block), at most 64 warps and 32 blocks.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..compiler import layout_model as LM
from ..compiler.trace import PassRecord, SharedTile, Snapshot

WARP_SIZE = LM.WARP_SIZE
SMEM_LIMIT_SM90 = 228 * 1024
REGS_PER_SM = 65536
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
REG_ALLOC_UNIT = 256  # registers, per warp
SMEM_RESERVED_PER_BLOCK = 1024
SECTOR_BYTES = LM.SECTOR_BYTES

# --------------------------------------------------------------------------- passes


def pass_rows(trace) -> list[dict]:
    """One row per pass: index, name, description, changed, ms, stats and a one-line stats summary."""
    rows = []
    for i, p in enumerate(trace.passes):
        stats = dict(p.stats or {})
        rows.append({"index": i, "name": p.name, "description": p.description, "changed": bool(p.changed),
                     "ms": p.seconds * 1e3, "stats": stats,
                     "summary": ", ".join(f"{k}={v}" for k, v in stats.items() if v not in (None, 0, "", False)),
                     "lines": len(p.ir.splitlines())})
    return rows


def ir_diff(before: str, after: str) -> list[tuple[str, str]]:
    """Line diff of two IR texts: (tag, line) with tag in {"same", "add", "del"}; deletions come first."""
    a, b = before.splitlines(), after.splitlines()
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            out += [("same", line) for line in a[i1:i2]]
            continue
        out += [("del", line) for line in a[i1:i2]]
        out += [("add", line) for line in b[j1:j2]]
    return out


_WORD = re.compile(r"\s+|[\w.%#$@]+|[^\w\s]")
_NUMBERED = re.compile(r"%\d+\b")  # a value named by its number only (`%12`, not `%acc_1`)


def word_ranges(before: str, after: str) -> tuple[list, list]:
    """Character ranges of the words that differ between two versions of one line: (removed from
    `before`, added in `after`). Words are runs of identifier characters (with `%#@$.`), spaces and single
    punctuation marks, so `tensor<4xf32>` -> `tensor<4xf32, #L0>` adds exactly `, #L0`."""
    a = [(m.start(), m.end()) for m in _WORD.finditer(before)]
    b = [(m.start(), m.end()) for m in _WORD.finditer(after)]
    ta, tb = [before[i:j] for i, j in a], [after[i:j] for i, j in b]
    dels, adds = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes():
        if tag in ("delete", "replace") and i2 > i1:
            dels.append((a[i1][0], a[i2 - 1][1]))
        if tag in ("insert", "replace") and j2 > j1:
            adds.append((b[j1][0], b[j2 - 1][1]))
    return dels, adds


def ir_diff_words(before: str, after: str) -> list[tuple[str, str, list | None]]:
    """`ir_diff` with word-level marks: (tag, line, ranges). A removed line and the added line that replaces
    it (paired in order within a changed block, when more than 60% of their characters agree) carry the
    character ranges of the words that changed; other added or removed lines carry None (the whole line)."""
    a, b = before.splitlines(), after.splitlines()
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            out += [("same", line, None) for line in a[i1:i2]]
            continue
        dels = [("del", line, None) for line in a[i1:i2]]
        adds = [("add", line, None) for line in b[j1:j2]]
        # lines are compared with their numbered values' names masked: a pass that inserts ops renumbers the
        # values after them, and `%31 = tt.broadcast %29` must pair with `%33 = tt.broadcast %31`, not with the
        # next line's `%34 = tt.broadcast %32` whose digits happen to agree more (the marked words still show the
        # new numbers)
        keys = [_NUMBERED.sub("%", line) for _, line, _ in adds]
        j = 0
        for k in range(len(dels)):  # pair in order: each removed line with the most similar of the next few added
            x, best, at = dels[k][1], 0.6, None
            key = _NUMBERED.sub("%", x)
            for m in range(j, min(j + 8, len(adds))):
                sm = difflib.SequenceMatcher(None, key, keys[m], autojunk=False)
                if sm.real_quick_ratio() > best and sm.quick_ratio() > best and sm.ratio() > best:
                    best, at = sm.ratio(), m
            if at is not None:
                y = adds[at][1]
                rd, ra = word_ranges(x, y)
                dels[k], adds[at] = ("del", x, rd), ("add", y, ra)
                j = at + 1
        out += dels + adds
    return out


def first_informative_pass(trace) -> int:
    """The pass the stepper opens on: the first one after the frontend that changed the IR (the frontend's
    output is the starting point, an unchanged pass has nothing to show); the last pass if none changed."""
    passes = list(getattr(trace, "passes", trace))
    return next((i for i, p in enumerate(passes) if i > 0 and p.changed), max(len(passes) - 1, 0))


# --------------------------------------------------------------------------- reading the trace


def _trace(obj):
    return getattr(obj, "trace", obj)


def record_of(source, stage: str = "gpu") -> PassRecord:
    """The PassRecord a `source` stands for: itself, or the last record of `stage` of a trace (or of a
    CompiledKernel's trace)."""
    if isinstance(source, PassRecord):
        return source
    if isinstance(source, str):
        raise TypeError("the lab reads the CompileTrace, not IR text: pass compiled.trace (or one of its records)")
    return _trace(source).stage(stage)


def snapshot_of(source, stage: str = "gpu") -> Snapshot:
    """The Snapshot of a `source` (see `record_of`); ValueError when that record keeps none."""
    if isinstance(source, Snapshot):
        return source
    rec = record_of(source, stage)
    if rec.snapshot is None:
        raise ValueError(f"the trace's {rec.name} record keeps no IR snapshot (only the last tile and GPU passes do)")
    return rec.snapshot


def _positions(rec: PassRecord, n: int):
    """(source line, loc span) per line of a record's IR; None and None where the printer recorded none. A line
    from another file (an @jit helper imported from another module, inlined) has no line of the kernel's file:
    None here (`line_origins` names its file and line)."""
    pos = rec.positions
    if pos is None or len(pos.source) != n:
        return [None] * n, [None] * n
    files = getattr(pos, "files", ())
    if not files:
        return pos.source, pos.loc
    return [None if f else s for s, f in zip(pos.source, files)], pos.loc


def line_origins(source) -> list:
    """Per line of a pass's IR: (file or None for the kernel's own, source line) or None where it has none."""
    rec = record_of(source)
    pos = rec.positions
    n = len(rec.ir.splitlines())
    if pos is None or len(pos.source) != n:
        return [None] * n
    files = getattr(pos, "files", ()) or (None,) * n
    return [None if s is None else (f, s) for s, f in zip(pos.source, files)]


def ir_lines_with_locs(source) -> list[tuple[str, int | None]]:
    """(line text without its `loc(...)`, source line number or None) for every line of a pass's IR."""
    rec = record_of(source)
    lines = rec.ir.splitlines()
    locs, spans = _positions(rec, len(lines))
    return [((line[:s[0]] + line[s[1]:]).rstrip() if s else line.rstrip(), loc)
            for line, loc, s in zip(lines, locs, spans)]


def op_source_map(source) -> tuple[dict, dict]:
    """({ir_line_index: source_line}, {source_line: [ir_line_index, ...]}) for a pass's lines with a location."""
    rec = record_of(source)
    locs, _ = _positions(rec, len(rec.ir.splitlines()))
    fwd = {i: loc for i, loc in enumerate(locs) if loc is not None}
    rev: dict = {}
    for i, loc in fwd.items():
        rev.setdefault(loc, []).append(i)
    return fwd, rev


def kernel_source_range(source) -> tuple[int, int] | None:
    """(first, last) source lines of the kernel: its `def` line to the last line an op came from."""
    rec = record_of(source)
    locs = [loc for loc in _positions(rec, len(rec.ir.splitlines()))[0] if loc is not None]
    return (min(locs), max(locs)) if locs else None


def file_lines(compiled) -> list[str]:
    """The lines of the kernel's file or notebook cell (linecache: the %%kernel magic registers its cells), so the
    @jit helpers inlined into the kernel have their text too; the kernel's own `source_lines` (its function alone,
    blank lines before it) when the file cannot be read."""
    import linecache

    own = list(getattr(compiled, "source_lines", []) or [])
    trace = getattr(compiled, "trace", None)
    try:
        snap = trace.snapshot("tile") if trace is not None and trace.passes else None
        path = snap.functions[0].source_file if snap is not None and snap.functions else None
    except Exception:
        path = None
    lines = [x.rstrip("\n") for x in linecache.getlines(path)] if path else []
    if not lines or (own and len(lines) < len(own)):
        return [x.rstrip("\n") for x in own]
    return lines


def source_text(compiled, line: int | None, file: str | None = None) -> str:
    """The text of source line `line`: of `file` when given (an @jit helper inlined from another module, as the
    trace's records name it), else of the kernel's file or notebook cell (read through linecache, where the
    %%kernel magic registers cells), so a line of a helper in the kernel's file is found too; the kernel's own
    `source_lines` (its function only) when the file cannot be read. "" when there is no such line."""
    import linecache

    if not line or line < 1:
        return ""
    if file:
        return linecache.getline(file, line).rstrip("\n")
    trace = getattr(compiled, "trace", None)
    snap = trace.snapshot("tile") if trace is not None and trace.passes else None
    path = snap.functions[0].source_file if snap is not None and snap.functions else None
    text = linecache.getline(path, line).rstrip("\n") if path else ""
    own = list(getattr(compiled, "source_lines", []) or [])
    if not text and line <= len(own):
        text = own[line - 1].rstrip("\n")
    return text


def where(line, file=None) -> str:
    """"line 12", or "helper.py line 12" for a line of another file than the kernel's."""
    return f"{os.path.basename(file)} line {line}" if file else f"line {line}"


def _type_dict(v) -> dict:
    return {"type": v.type, "shape": tuple(v.shape), "elem": v.elem, "alias": v.alias, "layout": v.layout,
            "elem_bytes": v.elem_bytes, "shared": v.shared}


def value_types(source, stage: str = "gpu") -> dict:
    """{"%name": {type, shape, elem, alias, layout, elem_bytes, shared}} for every value of a stage's IR:
    parameters, block arguments, results."""
    return {v.name: _type_dict(v) for v in snapshot_of(source, stage).values}


def tensor_values(source) -> list[dict]:
    """Every value of the GPU IR with a layout: {name, type, shape, elem, elem_bytes, layout, alias, op, line,
    ir_line, vec, defined_by}. `layout` is the full layout text, `line` the source line, `ir_line` the index of
    the defining line, `defined_by` the pass that made it; block arguments have op "block argument of <op>";
    load results carry `vec`."""
    snap = snapshot_of(source)
    out = []
    for v in snap.values:
        if v.layout is None:
            continue
        vec = snap.ops[v.op_index].attr("vec") if v.op == "tt.load" else None
        out.append({"name": v.name, **_type_dict(v), "op": v.op, "line": v.line, "ir_line": v.ir_line, "vec": vec,
                    "defined_by": v.defined_by})
    return out


def dot_roles(source) -> dict:
    """{value name: its part in a tt.dot} — "A operand of the dot at line L" (B, accumulator likewise) and
    "result of the dot at line L": which values of a matmul or attention the #mma layouts belong to."""
    out = {}
    for op in snapshot_of(source).ops:
        if op.name != "tt.dot":
            continue
        where = f"the dot at line {op.line}" if op.line else "a dot"
        for name, role in zip(op.operands, ("A operand", "B operand", "accumulator")):
            out.setdefault(name, f"{role} of {where}")
        for r in op.results:
            out[r] = f"result of {where}"
    return out


def accesses(source, num_warps: int | None = None) -> list[dict]:
    """Every tt.load / tt.store of tensors: {op, name, ir_line, line, vec, type, shape, elem, layout, alias,
    elem_bytes, coalescing}. For a store, `name` and the layout are those of the stored value. The coalescing
    is the trace's, or worked out again for `num_warps` when that differs from the compile's."""
    snap = snapshot_of(source)
    nw = num_warps or snap.num_warps or 4
    out = []
    for a in snap.accesses:
        v = snap.value_by_name[a.value]
        c = a.coalescing if (a.coalescing is not None and nw == snap.num_warps) else \
            LM.coalescing(v.layout, v.shape, nw, a.vec, a.elem_bytes)
        out.append({"op": a.op, "name": a.value, "ir_line": a.ir_line, "line": a.line, "vec": a.vec,
                    "type": v.type, "shape": tuple(v.shape), "elem": v.elem, "alias": v.alias, "layout": v.layout,
                    "elem_bytes": a.elem_bytes, "coalescing": dataclasses.asdict(c), "defined_by": v.defined_by})
    return out


def num_warps_of(source) -> int:
    """Warps per program the GPU stage was compiled for."""
    return snapshot_of(source).num_warps or 4


# --------------------------------------------------------------------------- layouts


def layout_grid(layout, shape, num_warps: int, vec: int | None = None, elem_bytes: int = 4) -> dict:
    """Which warp, lane and register hold each element of `shape` under `layout` (a Layout or its text).

    Returns {layout, shape, num_warps, registers (per thread), elements: {index: (warp, lane, register)}
    of the representative copy, copies: {index: [(warp, lane, register, representative), ...]} of every
    holder, replication (max holders per element), holders (list of (index, warp, lane, register,
    representative) for every thread register), fast_dim, access (coalescing info when `vec` is given)}.
    Indices are tuples, also for 1-D shapes."""
    lay = LM.as_layout(layout)
    shape = tuple(shape)
    infos = lay.dims_info(shape)
    extra = LM.sliced_infos(lay, shape)
    regs = lay.registers(shape)
    elements, copies, holders = {}, {}, []
    for t in range(num_warps * WARP_SIZE):
        lane, warp = t % WARP_SIZE, t // WARP_SIZE
        parts = [LM.thread_part(info, lane, warp) for info in infos]
        first_copy = all(LM.thread_part(info, lane, warp) == 0 for info in extra)
        for r, offs in enumerate(regs):
            raw = [p + o for p, o in zip(parts, offs)]
            idx = tuple(x % info.size for x, info in zip(raw, infos))
            rep = first_copy and all(x < info.size for x, info in zip(raw, infos))
            holders.append((idx, warp, lane, r, rep))
            copies.setdefault(idx, []).append((warp, lane, r, rep))
            if rep:
                elements.setdefault(idx, (warp, lane, r))
    out = {"layout": str(lay), "shape": shape, "num_warps": num_warps, "registers": len(regs),
           "elements": elements, "copies": copies, "holders": holders,
           "replication": max((len(c) for c in copies.values()), default=0),
           "fast_dim": lay.reg_order()[0] if shape else None, "access": None}
    if vec:
        out["access"] = coalescing(lay, shape, num_warps, vec, elem_bytes)
    return out


def coalescing(layout, shape, num_warps: int, vec: int = 1, elem_bytes: int = 4) -> dict:
    """`layout_model.coalescing` as a dict: {vec, elem_bytes, bytes_per_access, fast_dim, lanes_along_fast,
    instructions (per thread), sectors (per warp instruction, average), ideal_sectors, efficiency,
    consecutive_lanes, coalesced}."""
    return dataclasses.asdict(LM.coalescing(layout, shape, num_warps, vec, elem_bytes))

def bank_conflicts(layout, shape, num_warps: int, elem_bytes: int = 4, base: int = 0, pitch: int | None = None,
                   vec: int = 1) -> dict:
    """Shared-memory bank conflicts when every thread accesses its registers at their row-major linear
    index (rows `pitch` elements apart, default the row length; times `elem_bytes`, plus `base` bytes), `vec`
    consecutive registers per access. Returns {ways (worst), avg_ways, instructions}: ways = wavefronts one
    phase of a warp's access takes (1 = conflict-free); accesses wider than 4 bytes run in phases of
    128 bytes (16 lanes for 8-byte accesses, 8 for 16-byte ones)."""
    lay = LM.as_layout(layout)
    shape = tuple(shape)
    worst, total, n = 1, 0, 0
    for warp in range(num_warps):
        for fronts in LM.access_wavefronts(lay, shape, elem_bytes, pitch, vec, warp, base):
            worst = max(worst, max(fronts))
            total += max(fronts)
            n += 1
    return {"ways": worst, "avg_ways": total / max(n, 1), "instructions": len(lay.registers(shape)[::vec])}



# --------------------------------------------------------------------------- shared memory

_OPTIONAL = ("stages", "stage_bytes", "swizzle", "filled_by", "align", "mbarriers")


def smem_map(trace, limit: int = SMEM_LIMIT_SM90, num_warps: int | None = None) -> dict:
    """The shared-memory plan with what the lab needs to draw it.

    Returns {available, buffers: [{op, line, size, offset, end, live, reason, ir_line, ir_text, bank,
    encoding}], total, limit, fits, fraction, barriers: [{point, ir_line, line, reason}], points (program
    points), num_warps, note}. Program points are allocate_shared's op numbering (pre-order walk of the
    kernel); a barrier's point is that of the op it precedes (its own, for an op the plan numbered). `bank`
    is a bank-conflict estimate or None; `encoding` the SharedTile of a pipelined stage buffer."""
    tr = _trace(trace)
    snap = tr.snapshot("gpu")
    if snap is None:
        return {"available": False, "buffers": [], "total": 0, "limit": limit, "fits": True, "fraction": 0.0,
                "barriers": [], "points": 0, "num_warps": num_warps,
                "note": "no GPU stages in this trace: call compiled.build_gpu() (works without a GPU)"}
    nw = num_warps or snap.num_warps or 4
    lines = ir_lines_with_locs(tr.stage("gpu"))
    barriers = [{"point": b.point, "ir_line": b.ir_line, "line": b.line, "file": getattr(b, "file", None),
                 "reason": b.reason} for b in snap.barriers]
    buffers = []
    for plan in snap.shared_plan:
        b = {k: v for k, v in dataclasses.asdict(plan).items() if k not in _OPTIONAL or v}
        b["end"] = plan.offset + plan.size
        op = snap.ops[plan.op_index] if plan.op_index is not None else None
        b["ir_line"] = op.ir_line if op else None
        b["ir_text"] = lines[op.ir_line][0].strip() if op else ""
        b["bank"] = _buffer_banks(op, snap, nw) if op else None
        shared = snap.value_by_name[op.results[0]].shared if op and op.results else None
        b["encoding"] = dataclasses.asdict(shared) if shared else None
        buffers.append(b)
    total = max((b["end"] for b in buffers), default=0)
    return {"available": True, "buffers": buffers, "total": total, "limit": limit, "fits": total <= limit,
            "fraction": total / limit if limit else 0.0, "barriers": barriers, "points": snap.program_points,
            "num_warps": nw, "note": ""}


def _buffer_banks(op, snap: Snapshot, num_warps: int):
    """Bank-conflict estimate of the op owning a buffer: writes in the operands' layouts, reads in the
    result's; None (with the reason) for ops whose shared-memory traffic is not modeled."""
    results, name, operands = op.results, op.name, op.operands
    values = snap.value_by_name

    def layout_of(v):
        return values[v].layout if v in values else None

    def est(v, base=0):
        if not layout_of(v):
            return None
        t = values[v]
        return bank_conflicts(t.layout, t.shape, num_warps, t.elem_bytes, base)

    phases = {}
    if name == "ttg.local_alloc" and results and results[0] in values and values[results[0]].shared:
        return stage_buffer_banks(values[results[0]].shared)
    if name == "ttg.convert_layout" and operands and layout_of(operands[0]):
        # padded rows and vector accesses, as codegen lowers it
        t = values[operands[0]]
        shape, eb = tuple(t.shape), t.elem_bytes
        lays = [LM.as_layout(layout_of(v)) if v and layout_of(v) else None
                for v in (operands[0], results[0] if results else None)]
        pitch = LM.conversion_pitch(shape, eb, lays)
        mplan = LM.matrix_conversion_plan(lays[0], lays[1], shape, eb, num_warps, pitch) \
            if None not in lays and len(shape) == 2 else None
        for side, v in (("write", operands[0]), ("read", results[0] if results else None)) if mplan else ():
            st = LM.matrix_side_banks(mplan, side, num_warps)
            phases[f"{side} {v} ({st.pop('form')})"] = st
        for side, v in (("write", operands[0]), ("read", results[0] if results else None)) if not mplan else ():
            lay = layout_of(v) if v else None
            if lay:
                vec = LM.contiguous_run(LM.as_layout(lay), shape, eb, pitch)
                phases[f"{side} {v} ({vec * eb} B)"] = bank_conflicts(lay, shape, num_warps, eb, 0, pitch, vec)
    elif name in ("ttg.convert_layout", "tt.reshape", "tt.cat", "tt.join", "tt.split"):
        for v in operands[:2] if name in ("tt.cat", "tt.join") else operands[:1]:
            phases[f"write {v}"] = est(v)
        for r in results:
            phases[f"read {r}"] = est(r)
    elif name == "tt.dot" and len(operands) >= 2:
        a = values.get(operands[0])
        a_bytes = 0
        if a and len(a.shape) >= 2:
            a_bytes = -(-(a.shape[0] * a.shape[1] * a.elem_bytes) // 16) * 16
        phases[f"write {operands[0]} (A)"] = est(operands[0])
        phases[f"write {operands[1]} (B)"] = est(operands[1], base=a_bytes)
    else:
        return {"ways": None, "phases": {}, "note": f"{name}: per-warp partials, not modeled"}
    phases = {k: v for k, v in phases.items() if v}
    if not phases:
        return {"ways": None, "phases": {}, "note": "operand layouts not found"}
    return {"ways": max(v["ways"] for v in phases.values()), "phases": phases,
            "note": "32 banks x 4 B; registers stored at their row-major index (conversions: padded rows, "
                    "vector accesses)"}


def _tile(tile) -> SharedTile:
    return tile if isinstance(tile, SharedTile) else SharedTile(**tile)


def stage_buffer_banks(tile) -> dict:
    """Bank conflicts of a pipelined stage buffer (a SharedTile, or its dict), from its encoding: the tensor
    cores (ldmatrix for a padded tile, wgmma for a swizzled one) read 8 rows x 16 bytes at a time, one 16-byte
    chunk per row; cp.async writes 16 bytes per thread, 8 threads per shared-memory wavefront, consecutive
    threads along a row. Each access is conflict-free when its 8 chunks fall in 8 different groups of 4 banks."""
    t = _tile(tile)
    rows, cols = t.shape[-2:]
    e = t.elem_bytes
    fast, slow = (rows, cols) if t.order[0] == 0 else (cols, rows)
    per_chunk = max(1, 16 // e)

    def at(s_idx, f_idx):  # byte of (slow, fast) index
        return LM.shared_byte(t, f_idx, s_idx) if t.order[0] == 0 else LM.shared_byte(t, s_idx, f_idx)

    def ways(addresses):
        groups = {}
        for a in addresses:
            groups[(a // 16) % 8] = groups.get((a // 16) % 8, 0) + 1
        return max(groups.values())

    chunks = max(1, fast // per_chunk)
    reads = max(ways([at(s, c * per_chunk) for s in range(r0, r0 + 8)])
                for r0 in range(0, max(1, slow - 7), 8) for c in range(chunks))
    writes = max(ways([at((i + w) // chunks, ((i + w) % chunks) * per_chunk) for i in range(8)])
                 for w in range(0, min(slow * chunks, 256) - 7, 8))
    reader = "wgmma" if t.swizzle else "ldmatrix"
    return {"ways": max(reads, writes),
            "phases": {f"{reader} reads (8 rows x 16 B)": {"ways": reads},
                       "cp.async writes (16 B per thread)": {"ways": writes}},
            "note": "16-byte accesses: 8 per wavefront, conflict-free in 8 distinct 16-byte bank groups"}


def swizzle_grid(tile, rows: int = 8) -> dict:
    """Where the 16-byte chunks of the first `rows` rows of a stage buffer (a SharedTile, or its dict) land:
    {chunks, rows: [[bank group of logical chunk c of row r]]} for the shared-memory view's picture."""
    t = _tile(tile)
    r_ext, c_ext = t.shape[-2:]
    e = t.elem_bytes
    fast, slow = (r_ext, c_ext) if t.order[0] == 0 else (c_ext, r_ext)
    per_chunk = max(1, 16 // e)
    chunks = min(8, max(1, fast // per_chunk))
    grid = []
    for s_idx in range(min(rows, slow)):
        row = []
        for c in range(chunks):
            f_idx = c * per_chunk
            b = LM.shared_byte(t, f_idx, s_idx) if t.order[0] == 0 else LM.shared_byte(t, s_idx, f_idx)
            row.append((b // 16) % 8)
        grid.append(row)
    return {"chunks": chunks, "rows": grid, "swizzle": t.swizzle, "pad": t.pad * e}


# --------------------------------------------------------------------------- code


def occupancy(regs: int | None, shared: int, num_warps: int) -> dict:
    """Resident warps per SM (sm_90 limits) and which resource limits them."""
    limits = {"warps": MAX_WARPS_PER_SM // max(num_warps, 1), "blocks": MAX_BLOCKS_PER_SM}
    if regs:
        per_warp = -(-regs * WARP_SIZE // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        limits["registers"] = REGS_PER_SM // (per_warp * num_warps)
    limits["shared"] = SMEM_LIMIT_SM90 // ((shared or 0) + SMEM_RESERVED_PER_BLOCK)
    blocks = min(limits.values())
    warps = blocks * num_warps
    return {"blocks_per_sm": blocks, "warps_per_sm": warps, "occupancy": warps / MAX_WARPS_PER_SM,
            "limiter": [k for k, v in limits.items() if v == blocks], "limits": limits}


def _tool_dirs() -> list[Path]:
    import site
    import sys

    dirs = [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    dirs.append(Path("/usr/local/cuda/bin"))
    sps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    try:
        sps += site.getsitepackages()
    except AttributeError:
        pass
    for sp in dict.fromkeys(sps):
        for rel in (("nvidia", "cu13", "bin"), ("nvidia", "cuda_nvcc", "bin"), ("nvidia", "cuda_cuobjdump", "bin"),
                    ("nvidia", "cuda_nvdisasm", "bin"), ("triton", "backends", "nvidia", "bin")):
            dirs.append(Path(sp).joinpath(*rel))
    return dirs


def _find_tool(name: str, env: str) -> str | None:
    """$env, then PATH, then the CUDA and pip-wheel directories ptxas is looked for in."""
    given = os.environ.get(env)
    if given:
        return given if Path(given).is_file() else None
    found = shutil.which(name)
    if found:
        return found
    for d in _tool_dirs():
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    return None


def find_cuobjdump() -> str | None:
    """$KERNELLAB_CUOBJDUMP, then PATH, then the CUDA and wheel directories ptxas is looked for in."""
    return _find_tool("cuobjdump", "KERNELLAB_CUOBJDUMP")


def find_nvdisasm() -> str | None:
    """$KERNELLAB_NVDISASM, then PATH, then the CUDA and wheel directories (the `nvidia-cuda-nvdisasm` wheel of
    the lab extra puts it in site-packages/nvidia/cu13/bin)."""
    return _find_tool("nvdisasm", "KERNELLAB_NVDISASM")


def find_sass_tool() -> tuple[str, str] | None:
    """("nvdisasm" | "cuobjdump", path) of the disassembler the SASS view uses, or None. nvdisasm first: it is
    the disassembler itself (cuobjdump -sass runs it, so cuobjdump alone is not enough); a cuobjdump asked for
    through $KERNELLAB_CUOBJDUMP wins."""
    if os.environ.get("KERNELLAB_CUOBJDUMP") and not os.environ.get("KERNELLAB_NVDISASM"):
        found = find_cuobjdump()
        return ("cuobjdump", found) if found else None
    found = find_nvdisasm()
    if found:
        return "nvdisasm", found
    found = find_cuobjdump()
    return ("cuobjdump", found) if found else None


NO_SASS_TOOL = ("no SASS: NVIDIA's disassembler nvdisasm was not found. `pip install nvidia-cuda-nvdisasm` (5 MB, "
                "no dependencies; in kernellab's lab extra on Linux x86-64), or install the CUDA toolkit, or set "
                "KERNELLAB_NVDISASM (or KERNELLAB_CUOBJDUMP) to the program")

_SASS_DIRECTIVES = re.compile(r"^\s*(\.(section|sectionflags|align|global|type|size|other|elftype)\b"
                              r"|\.text\.\S*:\s*$|//-{5})")


def _tidy_nvdisasm(text: str) -> str:
    """nvdisasm -c's listing in cuobjdump's shape: ELF directives dropped, each function's label replaced by a
    "Function : name" header; the branch-target labels (.L_x_N:) stay."""
    funcs = set(re.findall(r"^\s*\.global\s+(\S+)", text, re.M))
    out = []
    for line in text.splitlines():
        if _SASS_DIRECTIVES.match(line):
            continue
        label = re.match(r"^(\S+):\s*$", line)
        if label and label.group(1) in funcs:
            out.append(f"\t\tFunction : {label.group(1)}")
            continue
        out.append(line)
    return "\n".join(out)


_SASS_CACHE: dict = {}


def sass(cubin: bytes | None) -> tuple[str | None, str]:
    """(SASS text without the encoding comments, "") or (None, why not)."""
    if not cubin:
        return None, "no cubin: call compiled.build_gpu() first"
    key = hashlib.sha256(cubin).hexdigest()
    if key in _SASS_CACHE:
        return _SASS_CACHE[key]
    found = find_sass_tool()
    if found is None:
        return None, NO_SASS_TOOL
    kind, tool = found
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kernel.cubin"
        path.write_bytes(cubin)
        cmd = [tool, "-c", str(path)] if kind == "nvdisasm" else [tool, "-sass", str(path)]
        env = dict(os.environ)
        nvdisasm = find_nvdisasm() if kind == "cuobjdump" else None
        if nvdisasm:  # cuobjdump runs nvdisasm: point it at the one we found (a wheel's is not on PATH)
            env["PATH"] = str(Path(nvdisasm).parent) + os.pathsep + env.get("PATH", "")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"{kind} failed: {e}"
    if r.returncode != 0:
        why = r.stderr.strip() or r.stdout.strip()
        if kind == "cuobjdump" and "nvdisasm" in why:
            return None, NO_SASS_TOOL + f" (cuobjdump needs it: {why})"
        return None, f"{kind} failed: {why}"
    out = _tidy_nvdisasm(r.stdout) if kind == "nvdisasm" else r.stdout
    text = "\n".join(ln for ln in (re.sub(r"\s*/\* 0x[0-9a-f]{16} \*/\s*$", "", x) for x in out.splitlines())
                     if ln.strip())
    _SASS_CACHE[key] = (text, "")
    return text, ""


def code_summary(compiled, with_sass: bool = True) -> dict:
    """Registers, spills, shared/local memory, PTX size, occupancy estimate and SASS of a built kernel."""
    rep = dict(getattr(compiled, "report", None) or {})
    asm = getattr(compiled, "asm", {}) or {}
    regs = getattr(compiled, "n_regs", None) or rep.get("n_regs")
    num_warps = getattr(compiled, "num_warps", None) or 4
    shared = getattr(compiled, "shared", 0) or 0
    ptx = asm.get("ptx")
    out = {"kernel": getattr(compiled, "name", ""), "built": "cubin" in asm, "regs": regs,
           "spills": getattr(compiled, "n_spills", None) or rep.get("n_spills", 0),
           "spill_stores": rep.get("spill_stores"), "spill_loads": rep.get("spill_loads"), "shared": shared,
           "local": rep.get("local", 0), "num_warps": num_warps,
           "ptx_lines": len(ptx.splitlines()) if ptx else 0, "llir_lines": len(asm.get("llir", "").splitlines()),
           "compiler": rep.get("compiler"), "log": rep.get("log", ""),
           "occupancy": occupancy(regs, shared, num_warps)}
    if with_sass:
        out["sass"], out["sass_reason"] = sass(asm.get("cubin"))
    else:
        out["sass"], out["sass_reason"] = None, "not requested"
    return out



# --------------------------------------------------------------------------- dataflow graph

_DIALECT_COLORS = {"tt": "#4e79a788", "arith": "#59a14f88", "math": "#b07aa188", "scf": "#f28e2b88",
                   "ttg": "#e1575988"}


def _dot_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dataflow_dot(source, max_label: int = 48) -> str:
    """DOT text of the tile IR's dataflow graph (`source`: a trace, or the tile record or Snapshot): one node
    per op (and per function parameter and block argument), an edge per SSA use, each region of a
    structured op as a cluster. Node `n<i>` is the op printed on line i of the tile IR."""
    snap = snapshot_of(source, "tile")
    types = {v.name: v for v in snap.values}
    events = [(f.ir_line, "func", f) for f in snap.functions]
    args_at: dict = {}
    for v in snap.values:
        if v.kind == "arg":
            args_at.setdefault(v.ir_line, []).append(v)
    events += [(line, "args", vs) for line, vs in args_at.items()]
    for op in snap.ops:
        events.append((op.ir_line, "op", op))
        events += [(at, "next", (op, k)) for k, at in enumerate(op.region_lines[1:], 1)]
        if op.region_lines:
            events.append((op.end_line, "end", op))
    events.sort(key=lambda e: e[0])
    body, edges, defs = [], [], {}
    depth = [0]
    cluster = [0]

    def short(t):
        if not t:
            return ""
        if t.shape:
            return "x".join(map(str, t.shape)) + "x" + t.elem
        return t.elem

    def emit(s):
        body.append("  " * (depth[0] + 1) + s)

    def open_cluster(label):
        cluster[0] += 1
        emit(f"subgraph cluster_{cluster[0]} {{")
        depth[0] += 1
        emit(f"label={_dot_str(label)}; style=\"rounded,dashed\"; fontname=\"monospace\"; fontsize=10;")

    def close_cluster():
        depth[0] -= 1
        emit("}")

    for i, kind, what in events:
        if kind == "func":
            for name in what.params:
                nid = f"p{len(defs)}"
                defs[name] = nid
                emit(f"{nid} [label={_dot_str(name + ': ' + short(types.get(name)))}, shape=invhouse, "
                     f"style=\"filled\", fillcolor=\"#9c755f55\"];")
        elif kind == "args":
            for v in what:
                nid = f"b{i}_{len(defs)}"
                defs[v.name] = nid
                emit(f"{nid} [label={_dot_str(v.name + ': ' + short(v))}, shape=ellipse];")
        elif kind == "next":  # the next region of the same op
            op, k = what
            close_cluster()
            open_cluster(f"{op.name} (region {k + 1})")
        elif kind == "end":
            close_cluster()
        else:
            op = what
            nid = f"n{i}"
            res = ", ".join(op.results)
            label = (f"{res} = {op.name}" if res else op.name)
            if len(label) > max_label:
                label = label[:max_label - 1] + "…"
            t = short(types.get(op.results[0])) if op.results else ""
            loc = f"  (line {op.line})" if op.line else ""
            color = _DIALECT_COLORS.get(op.name.split(".")[0], "#bab0ac88")
            emit(f"{nid} [label={_dot_str(label + (chr(10) + t if t else '') + loc)}, shape=box, "
                 f"style=\"filled,rounded\", fillcolor=\"{color}\"];")
            for v in dict.fromkeys(op.operands):
                if v in defs:
                    edges.append(f"  {defs[v]} -> {nid};")
            for r in op.results:
                defs[r] = nid
            if op.region_lines:
                open_cluster(op.name)
    head = ["digraph dataflow {", "  rankdir=TB; bgcolor=\"transparent\";",
            "  node [fontname=\"monospace\", fontsize=10];", "  edge [arrowsize=0.6];"]
    return "\n".join(head + body + edges + ["}"]) + "\n"
