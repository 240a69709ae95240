"""What each lab view draws, derived from a CompiledKernel's trace and IR text (pure functions).

Everything here reads text and plain data: pass records, IR text with `loc(LINE:COL)` suffixes,
`#Lk = #blocked<...>` layout aliases, the shared-memory plan, the ptxas report. The layout math
comes from `kernellab.compiler.gpu.layouts` (the same object the code generator uses), so a grid
drawn here is the mapping the kernel really runs with.

Models (simple, stated so a reader can judge them):
- coalescing: addresses of a tile are taken to be dense, contiguous along the layout's fastest
  dimension (`order[0]`, which assign_layouts aligns with the pointers' contiguous axis) and then
  along the next ones; a warp's access instruction touches 32-byte sectors; efficiency = useful
  bytes / bytes in the touched sectors; coalesced means no wasted sector bytes.
- bank conflicts: 32 banks of 4 bytes; all lanes of a warp execute one register's store (or load)
  together; the elements go to shared memory at their row-major linear index (what the code
  generator does for conversions and dot staging); an access needs as many wavefronts as the
  largest number of distinct 4-byte words any bank is asked for (same word = broadcast, free).
- occupancy: per SM 65536 registers (allocated per warp in units of 256), 228 KiB shared memory
  (plus 1 KiB reserved per block), at most 64 warps and 32 blocks.
"""
from __future__ import annotations

import difflib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..compiler.gpu.layouts import WARP_SIZE, Layout, parse_layout, sliced_infos
from ..compiler.gpu.scratch import contiguous_run, conversion_pitch

SMEM_LIMIT_SM90 = 228 * 1024
REGS_PER_SM = 65536
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
REG_ALLOC_UNIT = 256  # registers, per warp
SMEM_RESERVED_PER_BLOCK = 1024
BANKS = 32
BANK_BYTES = 4
SECTOR_BYTES = 32

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
        j = 0
        for k in range(len(dels)):  # pair in order: each removed line with the most similar of the next few added
            x, best, at = dels[k][1], 0.6, None
            for m in range(j, min(j + 8, len(adds))):
                sm = difflib.SequenceMatcher(None, x, adds[m][1], autojunk=False)
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


_LOC = re.compile(r'\s*\bloc\((?:"(?:[^"\\]|\\.)*":)?(\d+)(?::(\d+))?\)')


def _last_loc(line: str):
    m = None
    for m in _LOC.finditer(line):
        pass
    return m


def _line_locs(lines: list[str]) -> list:
    """Per line: its source line, from its own `loc(...)`; a region op's header line (which prints
    without a loc) takes the loc printed on its closing `} loc(...)` line."""
    locs: list = []
    stack: list = []
    for i, line in enumerate(lines):
        m = _last_loc(line)
        loc = int(m.group(1)) if m else None
        s = line.strip()
        if s.startswith("}") and not s.endswith("{"):
            if stack:
                h = stack.pop()
                if loc is not None and locs[h] is None:
                    locs[h] = loc
        elif s.endswith("{") and not s.startswith("}"):
            stack.append(i)
        locs.append(loc)
    return locs


def strip_loc(line: str) -> str:
    m = _last_loc(line)
    return (line[:m.start()] + line[m.end():]).rstrip() if m else line.rstrip()


def ir_lines_with_locs(ir: str) -> list[tuple[str, int | None]]:
    """(line text without its `loc(...)`, source line number or None) for every line of `ir`."""
    lines = ir.splitlines()
    return [(strip_loc(line), loc) for line, loc in zip(lines, _line_locs(lines))]


def op_source_map(ir: str) -> tuple[dict, dict]:
    """({ir_line_index: source_line}, {source_line: [ir_line_index, ...]}) for lines with a location."""
    fwd = {i: loc for i, loc in enumerate(_line_locs(ir.splitlines())) if loc is not None}
    rev: dict = {}
    for i, loc in fwd.items():
        rev.setdefault(loc, []).append(i)
    return fwd, rev


def kernel_source_range(ir: str) -> tuple[int, int] | None:
    """(first, last) source lines of the kernel: its `def` line to the last line an op came from."""
    locs = [loc for loc in _line_locs(ir.splitlines()) if loc is not None]
    if not locs:
        return None
    m = re.search(r'tt\.func @\S+\(.*\) loc\("(?:[^"\\]|\\.)*":(\d+)\)', ir)
    first = int(m.group(1)) if m else min(locs)
    return min(first, min(locs)), max(locs)


# --------------------------------------------------------------------------- IR text parsing

_ALIAS = re.compile(r"^(#L\d+) = (#.*)$")
_RESULTS = re.compile(r"^\s*(%[\w.]+(?:, %[\w.]+)*) = ([a-z_][\w]*(?:\.[\w]+)+)(.*)$")
_OPNAME = re.compile(r"^\s*(?:(%[\w.]+(?:, %[\w.]+)*) = )?([a-z_][\w]*(?:\.[\w]+)+)\b(.*)$")
_TENSOR = re.compile(r"^tensor<(.*)>$")
_MEMDESC = re.compile(r"^!memdesc<((?:\d+x)+)(\w+),.*>$")
_VALUE = re.compile(r"%[\w.]+")
ELEM_BYTES = {"i1": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "f16": 2, "bf16": 2, "i32": 4, "u32": 4, "f32": 4,
              "i64": 8, "u64": 8, "f64": 8}


def _split_top(s: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside brackets and quotes."""
    out, depth, cur, quote = [], 0, [], False
    for ch in s:
        if ch == '"':
            quote = not quote
        elif not quote:
            if ch in "<([{":
                depth += 1
            elif ch in ">)]}":
                depth -= 1
            elif ch == sep and depth == 0:
                out.append("".join(cur).strip())
                cur = []
                continue
        cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _last_colon(s: str) -> int:
    """Index of the last ` : ` (operands/attributes : types) outside brackets and quotes, or -1."""
    depth, quote, found = 0, False, -1
    for i, ch in enumerate(s):
        if ch == '"':
            quote = not quote
        elif not quote:
            if ch in "<([{":
                depth += 1
            elif ch in ">)]}":
                depth -= 1
            elif ch == ":" and depth == 0 and s[i - 1:i + 2] == " : ":
                found = i
    return found


def elem_bytes(elem: str) -> int:
    """Bytes of one element in memory (pointers 8, i1 stored as a byte)."""
    return 8 if elem.startswith("!ptr") else ELEM_BYTES.get(elem, 4)


def parse_type(text: str, aliases: dict) -> dict:
    """{type, shape, elem, alias, layout} of a type's text; shape is () and layout None for scalars."""
    text = text.strip()
    md = _MEMDESC.match(text)
    if md:  # a tile in shared memory: no thread owns its elements, so no layout to draw
        dims = md.group(1).rstrip("x").split("x")
        return {"type": text, "shape": tuple(int(d) for d in dims), "elem": md.group(2), "alias": None,
                "layout": None, "shared": True}
    m = _TENSOR.match(text)
    if not m:
        return {"type": text, "shape": (), "elem": text, "alias": None, "layout": None}
    parts = _split_top(m.group(1))
    body, lay = parts[0], (parts[1] if len(parts) > 1 else None)
    dims = re.match(r"^((?:\d+x)*)(.+)$", body)
    shape = tuple(int(d) for d in dims.group(1).split("x") if d)
    alias = lay if lay and lay.startswith("#L") else None
    layout = aliases.get(lay, lay) if lay else None
    return {"type": text, "shape": shape, "elem": dims.group(2), "alias": alias, "layout": layout}


def layout_aliases(ir: str) -> dict:
    """{"#L0": "#blocked<...>", ...} from the alias lines at the top of GPU IR."""
    out = {}
    for line in ir.splitlines():
        m = _ALIAS.match(line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def _op_fields(line: str):
    """(result names, op name, operand names, result type texts) of an op line, or None."""
    s = strip_loc(line)
    if s.strip().startswith(("}", "^bb", "#", "tt.func")):
        return None
    m = _OPNAME.match(s)
    if not m:
        return None
    results = [r.strip() for r in m.group(1).split(",")] if m.group(1) else []
    rest = m.group(3)
    if rest.rstrip().endswith("{"):
        rest = rest.rstrip()[:-1]
    colon = _last_colon(rest)
    head, types = (rest[:colon], _split_top(rest[colon + 2:])) if colon >= 0 and results else (rest, [])
    # operands end where the attribute dictionary starts
    depth, cut = 0, len(head)
    for i, ch in enumerate(head):
        if ch == "{" and depth == 0:
            cut = i
            break
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
    operands = _VALUE.findall(head[:cut])
    return results, m.group(2), operands, types


def value_types(ir: str) -> dict:
    """{"%name": parsed type} for every value defined in the IR: parameters, block arguments, results."""
    aliases = layout_aliases(ir)
    out = {}
    for line in ir.splitlines():
        s = line.strip()
        if s.startswith("tt.func"):
            inside = s[s.index("(") + 1:]
            for p in _split_top(inside[:_matching_paren(inside)]):
                name, _, t = p.partition(":")
                t = re.sub(r"\s*\{.*\}\s*$", "", t.strip())
                out[name.strip()] = parse_type(t, aliases)
        elif s.startswith("^bb("):
            for p in _split_top(s[4:s.rindex(")")]):
                name, _, t = p.partition(":")
                out[name.strip()] = parse_type(t, aliases)
        else:
            f = _op_fields(line)
            if f:
                for r, t in zip(f[0], f[3]):
                    out[r] = parse_type(t, aliases)
    return out


def _matching_paren(s: str) -> int:
    depth = 1
    for i, ch in enumerate(s):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return i
    return len(s)


def tensor_values(gpu_ir: str) -> list[dict]:
    """Every value of GPU IR with a layout: {name, type, shape, elem, layout, alias, op, line, ir_line, vec}.
    `layout` is the full layout text, `line` the source line, `ir_line` the index of the defining line;
    block arguments have op "block argument of <op>"; load results carry `vec`."""
    aliases = layout_aliases(gpu_ir)
    lines = gpu_ir.splitlines()
    locs = _line_locs(lines)
    out, stack = [], []
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("^bb("):
            parent = stack[-1] if stack else "region"
            for p in _split_top(s[4:s.rindex(")")]):
                name, _, t = p.partition(":")
                info = parse_type(t, aliases)
                if info["layout"]:
                    out.append({"name": name.strip(), **info, "op": f"block argument of {parent}", "line": locs[i],
                                "ir_line": i, "vec": None})
            continue
        f = _op_fields(line)
        if f and s.endswith("{"):
            stack.append(f[1])
        elif s.startswith("}") and not s.endswith("{") and stack:
            stack.pop()
        if not f:
            continue
        results, op, _, types = f
        vec = _vec(line)
        for r, t in zip(results, types):
            info = parse_type(t, aliases)
            if info["layout"]:
                out.append({"name": r, **info, "op": op, "line": locs[i], "ir_line": i,
                            "vec": vec if op == "tt.load" else None})
    return out


def dot_roles(gpu_ir: str) -> dict:
    """{value name: its part in a tt.dot} — "A operand of the dot at line L" (B, accumulator likewise) and
    "result of the dot at line L": which values of a matmul or attention the #mma layouts belong to."""
    lines = gpu_ir.splitlines()
    locs = _line_locs(lines)
    out = {}
    for i, line in enumerate(lines):
        f = _op_fields(line)
        if not f or f[1] != "tt.dot":
            continue
        results, _, operands, _ = f
        where = f"the dot at line {locs[i]}" if locs[i] else "a dot"
        for name, role in zip(operands, ("A operand", "B operand", "accumulator")):
            out.setdefault(name, f"{role} of {where}")
        for r in results:
            out[r] = f"result of {where}"
    return out


def _vec(line: str):
    m = re.search(r"\bvec = (\d+)", line)
    return int(m.group(1)) if m else None


def accesses(gpu_ir: str, num_warps: int | None = None) -> list[dict]:
    """Every tt.load / tt.store of tensors: {op, name, ir_line, line, vec, type, shape, elem, layout,
    elem_bytes, coalescing}. For a store, `name` and the layout are those of the stored value."""
    types = value_types(gpu_ir)
    lines = gpu_ir.splitlines()
    locs = _line_locs(lines)
    nw = num_warps or guess_num_warps(gpu_ir)
    out = []
    for i, line in enumerate(lines):
        f = _op_fields(line)
        if not f or f[1] not in ("tt.load", "tt.store"):
            continue
        results, op, operands, _ = f
        name = results[0] if op == "tt.load" else (operands[1] if len(operands) > 1 else None)
        info = types.get(name)
        if not info or not info["layout"]:
            continue
        vec = _vec(line) or 1
        eb = elem_bytes(info["elem"])
        out.append({"op": op, "name": name, "ir_line": i, "line": locs[i], "vec": vec, **info, "elem_bytes": eb,
                    "coalescing": coalescing(info["layout"], info["shape"], nw, vec, eb)})
    return out


def guess_num_warps(ir: str, default: int = 4) -> int:
    """Warps per program from the first blocked layout in the IR (product of warpsPerCTA)."""
    for text in layout_aliases(ir).values():
        try:
            return _as_layout(text).num_warps
        except ValueError:
            continue
    return default


def _as_layout(layout) -> Layout:
    return layout if isinstance(layout, Layout) else parse_layout(layout)


# --------------------------------------------------------------------------- layouts


def _thread_part(info, lane: int, warp: int) -> int:
    return (((warp // info.warp_div) % info.warps) * info.warp_stride
            + ((lane // info.lane_div) % info.lanes) * info.lane_stride)


def layout_grid(layout, shape, num_warps: int, vec: int | None = None, elem_bytes: int = 4) -> dict:
    """Which warp, lane and register hold each element of `shape` under `layout`.

    Returns {layout, shape, num_warps, registers (per thread), elements: {index: (warp, lane, register)}
    of the representative copy, copies: {index: [(warp, lane, register, representative), ...]} of every
    holder, replication (max holders per element), holders (list of (index, warp, lane, register,
    representative) for every thread register), fast_dim, access (coalescing info when `vec` is given)}.
    Indices are tuples, also for 1-D shapes."""
    lay = _as_layout(layout)
    shape = tuple(shape)
    infos = lay.dims_info(shape)
    extra = sliced_infos(lay, shape)
    regs = lay.registers(shape)
    elements, copies, holders = {}, {}, []
    for t in range(num_warps * WARP_SIZE):
        lane, warp = t % WARP_SIZE, t // WARP_SIZE
        parts = [_thread_part(info, lane, warp) for info in infos]
        first_copy = all(_thread_part(info, lane, warp) == 0 for info in extra)
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


def _dense_strides(lay: Layout, shape) -> list[int]:
    strides, acc = [0] * len(shape), 1
    for d in lay.reg_order():
        strides[d] = acc
        acc *= shape[d]
    return strides


def coalescing(layout, shape, num_warps: int, vec: int = 1, elem_bytes: int = 4) -> dict:
    """How one warp's global accesses look under the dense-tile model (see the module docstring).

    Returns {vec, elem_bytes, bytes_per_access, fast_dim, lanes_along_fast, instructions (per thread),
    sectors (per warp instruction, average), ideal_sectors, efficiency, consecutive_lanes, coalesced}."""
    lay = _as_layout(layout)
    shape = tuple(shape)
    infos = lay.dims_info(shape)
    regs = lay.registers(shape)
    fast = lay.reg_order()[0]
    vec = max(1, vec)
    if len(regs) % vec or any(regs[g + k][fast] != regs[g][fast] + k for g in range(0, len(regs), vec)
                              for k in range(vec)):
        vec = 1  # the registers are not grouped in runs of `vec` along the fast dim
    strides = _dense_strides(lay, shape)
    nbytes = vec * elem_bytes

    def addr(lane, warp, r):
        offs = regs[r]
        idx = [(_thread_part(info, lane, warp) + o) % info.size for info, o in zip(infos, offs)]
        return sum(i * s for i, s in zip(idx, strides)) * elem_bytes

    total_sectors, total_ideal, useful, fetched, n = 0, 0, 0, 0, 0
    for warp in range(num_warps):
        for g in range(0, len(regs), vec):
            starts = [addr(lane, warp, g) for lane in range(WARP_SIZE)]
            sectors = set()
            cells = set()
            for a in starts:
                sectors.update(range(a // SECTOR_BYTES, (a + nbytes - 1) // SECTOR_BYTES + 1))
                cells.update(range(a, a + nbytes, elem_bytes))
            total_sectors += len(sectors)
            total_ideal += -(-len(cells) * elem_bytes // SECTOR_BYTES)
            useful += len(cells) * elem_bytes
            fetched += len(sectors) * SECTOR_BYTES
            n += 1
    finfo = infos[fast]
    lanes_fast = finfo.lanes if finfo.lane_div == 1 else 1
    starts0 = [addr(lane, 0, 0) for lane in range(WARP_SIZE)]
    pairs = [(a, b) for l, (a, b) in enumerate(zip(starts0, starts0[1:])) if (l + 1) % max(lanes_fast, 1)]
    consecutive = lanes_fast > 1 and all(b - a == nbytes for a, b in pairs)
    eff = useful / fetched if fetched else 1.0
    return {"vec": vec, "elem_bytes": elem_bytes, "bytes_per_access": nbytes, "fast_dim": fast,
            "lanes_along_fast": lanes_fast, "instructions": len(regs) // vec,
            "sectors": total_sectors / max(n, 1), "ideal_sectors": total_ideal / max(n, 1),
            "efficiency": eff, "consecutive_lanes": consecutive, "coalesced": eff >= 0.999}


def bank_conflicts(layout, shape, num_warps: int, elem_bytes: int = 4, base: int = 0, pitch: int | None = None,
                   vec: int = 1) -> dict:
    """Shared-memory bank conflicts when every thread accesses its registers at their row-major linear
    index (rows `pitch` elements apart, default the row length; times `elem_bytes`, plus `base` bytes), `vec`
    consecutive registers per access. Returns {ways (worst), avg_ways, instructions}: ways = wavefronts one
    phase of a warp's access takes (1 = conflict-free); accesses wider than 4 bytes run in phases of
    128 bytes (16 lanes for 8-byte accesses, 8 for 16-byte ones)."""
    lay = _as_layout(layout)
    shape = tuple(shape)
    infos = lay.dims_info(shape)
    regs = lay.registers(shape)
    rowmajor, acc = [0] * len(shape), 1
    for d in reversed(range(len(shape))):
        rowmajor[d] = acc
        acc *= (pitch or shape[d]) if d == len(shape) - 1 else shape[d]
    width = elem_bytes * vec
    per_phase = WARP_SIZE if width <= BANK_BYTES else max(1, WARP_SIZE * BANK_BYTES // width)
    worst, total, n = 1, 0, 0
    for warp in range(num_warps):
        parts = [[_thread_part(info, lane, warp) for info in infos] for lane in range(WARP_SIZE)]
        for offs in regs[::vec]:
            ways = 1
            for first in range(0, WARP_SIZE, per_phase):
                banks: dict = {}
                for lane in range(first, first + per_phase):
                    lin = sum(((p + o) % info.size) * s for p, o, info, s in zip(parts[lane], offs, infos, rowmajor))
                    a = base + lin * elem_bytes
                    for word in range(a // BANK_BYTES, (a + width - 1) // BANK_BYTES + 1):
                        banks.setdefault(word % BANKS, set()).add(word)
                ways = max(ways, max(len(w) for w in banks.values()))
            worst = max(worst, ways)
            total += ways
            n += 1
    return {"ways": worst, "avg_ways": total / max(n, 1), "instructions": len(regs[::vec])}


# --------------------------------------------------------------------------- shared memory


def _is_op_line(line: str) -> bool:
    return _op_fields(line) is not None


def _program_points(lines: list[str]) -> list[int]:
    """Indices of op lines, in the order allocate_shared numbers program points (pre-order walk)."""
    return [i for i, line in enumerate(lines) if _is_op_line(line)]


def smem_map(trace, limit: int = SMEM_LIMIT_SM90, num_warps: int | None = None) -> dict:
    """The shared-memory plan with what the lab needs to draw it.

    Returns {available, buffers: [{op, line, size, offset, end, live, reason, ir_line, ir_text, bank}],
    total, limit, fits, fraction, barriers: [{point, ir_line, line, reason}], points (program points),
    num_warps, note}. Program points are allocate_shared's op numbering (pre-order walk of the kernel);
    a barrier's point is that of the op it precedes. `bank` is a bank-conflict estimate or None."""
    try:
        alloc_ir = trace.ir_after("allocate_shared")
    except KeyError:
        return {"available": False, "buffers": [], "total": 0, "limit": limit, "fits": True, "fraction": 0.0,
                "barriers": [], "points": 0, "num_warps": num_warps,
                "note": "no GPU stages in this trace: call compiled.build_gpu() (works without a GPU)"}
    try:
        gpu_ir = trace.ir_after("insert_barriers")
    except KeyError:
        gpu_ir = alloc_ir
    nw = num_warps or guess_num_warps(gpu_ir)
    types = value_types(gpu_ir)
    glines = gpu_ir.splitlines()
    glocs = _line_locs(glines)
    # final IR op lines, barriers removed, line up with allocate_shared's program points
    non_barrier, barriers = [], []
    for i in _program_points(glines):
        f = _op_fields(glines[i])
        if f[1] == "ttg.barrier":
            m = re.search(r'reason = "((?:[^"\\]|\\.)*)"', glines[i])
            barriers.append({"point": len(non_barrier), "ir_line": i, "line": glocs[i],
                             "reason": m.group(1) if m else ""})
        else:
            if f[1] == "ttg.async_wait":  # a program point of its own, and a bar.sync
                m = re.search(r"pending = (\d+)", glines[i])
                barriers.append({"point": len(non_barrier), "ir_line": i, "line": glocs[i],
                                 "reason": f"cp.async.wait_group {m.group(1) if m else '?'}, then bar.sync: "
                                           "the stage read next has landed and every warp is past the last read"})
            non_barrier.append(i)
    points = len(_program_points(alloc_ir.splitlines()))
    buffers = []
    for b in getattr(trace, "shared_plan", None) or []:
        b = dict(b)
        p = b.get("live", [0, 0])[0]
        ir_line = non_barrier[p] if p < len(non_barrier) else None
        b["end"] = b["offset"] + b["size"]
        b["ir_line"] = ir_line
        b["ir_text"] = strip_loc(glines[ir_line]).strip() if ir_line is not None else ""
        b["bank"] = _buffer_banks(glines[ir_line], types, nw) if ir_line is not None else None
        buffers.append(b)
    total = max((b["end"] for b in buffers), default=0)
    return {"available": True, "buffers": buffers, "total": total, "limit": limit, "fits": total <= limit,
            "fraction": total / limit if limit else 0.0, "barriers": barriers, "points": points,
            "num_warps": nw, "note": ""}


def _buffer_banks(line: str, types: dict, num_warps: int):
    """Bank-conflict estimate of the op owning a buffer: writes in the operands' layouts, reads in the
    result's; None (with the reason) for ops whose shared-memory traffic is not modeled."""
    f = _op_fields(line)
    if not f:
        return None
    results, op, operands, _ = f

    def est(name, base=0, shape=None):
        t = types.get(name)
        if not t or not t["layout"]:
            return None
        return bank_conflicts(t["layout"], shape or t["shape"], num_warps, elem_bytes(t["elem"]), base)

    phases = {}
    if op == "ttg.local_alloc" and results and types.get(results[0]):
        return stage_buffer_banks(types[results[0]]["type"])
    if op == "ttg.convert_layout" and operands and types.get(operands[0]) and types[operands[0]]["layout"]:
        # padded rows and vector accesses, as codegen lowers it
        t = types[operands[0]]
        shape, eb = tuple(t["shape"]), elem_bytes(t["elem"])
        pitch = conversion_pitch(shape, eb)
        for side, name in (("write", operands[0]), ("read", results[0] if results else None)):
            lay = types.get(name, {}).get("layout") if name else None
            if lay:
                vec = contiguous_run(_as_layout(lay), shape, eb, pitch)
                phases[f"{side} {name} ({vec * eb} B)"] = bank_conflicts(lay, shape, num_warps, eb, 0, pitch, vec)
    elif op in ("ttg.convert_layout", "tt.reshape", "tt.cat", "tt.join", "tt.split"):
        for k, v in enumerate(operands[:2] if op in ("tt.cat", "tt.join") else operands[:1]):
            phases[f"write {v}"] = est(v)
        for r in results:
            phases[f"read {r}"] = est(r)
    elif op == "tt.dot" and len(operands) >= 2:
        a = types.get(operands[0])
        a_bytes = 0
        if a and a["shape"]:
            a_bytes = -(-(a["shape"][0] * a["shape"][1] * elem_bytes(a["elem"])) // 16) * 16
        phases[f"write {operands[0]} (A)"] = est(operands[0])
        phases[f"write {operands[1]} (B)"] = est(operands[1], base=a_bytes)
    else:
        return {"ways": None, "phases": {}, "note": f"{op}: per-warp partials, not modeled"}
    phases = {k: v for k, v in phases.items() if v}
    if not phases:
        return {"ways": None, "phases": {}, "note": "operand layouts not found"}
    return {"ways": max(v["ways"] for v in phases.values()), "phases": phases,
            "note": "32 banks x 4 B; registers stored at their row-major index (conversions: padded rows, "
                    "vector accesses)"}


def stage_buffer_banks(type_text: str) -> dict:
    """Bank conflicts of a pipelined stage buffer (`!memdesc`), from its encoding: the tensor cores (ldmatrix
    for a padded tile, wgmma for a swizzled one) read 8 rows x 16 bytes at a time, one 16-byte chunk per row;
    cp.async writes 16 bytes per thread, 8 threads per shared-memory wavefront, consecutive threads along a
    row. Each access is conflict-free when its 8 chunks fall in 8 different groups of 4 banks."""
    from ..compiler.gpu.smem_layout import element_byte
    from ..compiler.types import parse_type as parse_ir_type

    t = parse_ir_type(type_text)
    rows, cols = t.shape[-2:]
    e = t.scalar.bits // 8
    fast, slow = (rows, cols) if t.order[0] == 0 else (cols, rows)
    per_chunk = max(1, 16 // e)

    def at(s_idx, f_idx):  # byte of (slow, fast) index
        return element_byte(t, f_idx, s_idx) if t.order[0] == 0 else element_byte(t, s_idx, f_idx)

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


def swizzle_grid(type_text: str, rows: int = 8) -> dict:
    """Where the 16-byte chunks of the first `rows` rows of a stage buffer land: {chunks, rows: [[bank group
    of logical chunk c of row r]]} for the shared-memory view's picture."""
    from ..compiler.gpu.smem_layout import element_byte
    from ..compiler.types import parse_type as parse_ir_type

    t = parse_ir_type(type_text)
    r_ext, c_ext = t.shape[-2:]
    e = t.scalar.bits // 8
    fast, slow = (r_ext, c_ext) if t.order[0] == 0 else (c_ext, r_ext)
    per_chunk = max(1, 16 // e)
    chunks = min(8, max(1, fast // per_chunk))
    grid = []
    for s_idx in range(min(rows, slow)):
        row = []
        for c in range(chunks):
            f_idx = c * per_chunk
            b = element_byte(t, f_idx, s_idx) if t.order[0] == 0 else element_byte(t, s_idx, f_idx)
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


def dataflow_dot(tile_ir: str, max_label: int = 48) -> str:
    """DOT text of the IR's dataflow graph: one node per op (and per function parameter and block
    argument), an edge per SSA use, each region of a structured op as a cluster."""
    lines = tile_ir.splitlines()
    locs = _line_locs(lines)
    types = value_types(tile_ir)
    body, edges, defs = [], [], {}
    depth = [0]
    cluster = [0]

    def short(t):
        if not t:
            return ""
        if t["shape"]:
            return "x".join(map(str, t["shape"])) + "x" + t["elem"]
        return t["elem"]

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

    stack = []  # per open region op: its name
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("tt.func"):
            inside = s[s.index("(") + 1:]
            for p in _split_top(inside[:_matching_paren(inside)]):
                name = p.partition(":")[0].strip()
                nid = f"p{len(defs)}"
                defs[name] = nid
                emit(f"{nid} [label={_dot_str(name + ': ' + short(types.get(name)))}, shape=invhouse, "
                     f"style=\"filled\", fillcolor=\"#9c755f55\"];")
            continue
        if s.startswith("^bb("):
            for p in _split_top(s[4:s.rindex(")")]):
                name = p.partition(":")[0].strip()
                nid = f"b{i}_{len(defs)}"
                defs[name] = nid
                emit(f"{nid} [label={_dot_str(name + ': ' + short(types.get(name)))}, shape=ellipse];")
            continue
        if s.startswith("}"):
            if s.endswith("{"):  # "} {": the next region of the same op
                close_cluster()
                open_cluster(f"{stack[-1] if stack else 'region'} (region 2)")
            elif stack:
                stack.pop()
                close_cluster()
            continue
        f = _op_fields(line)
        if not f:
            continue
        results, op, operands, _ = f
        nid = f"n{i}"
        res = ", ".join(results)
        label = (f"{res} = {op}" if res else op)
        if len(label) > max_label:
            label = label[:max_label - 1] + "…"
        t = short(types.get(results[0])) if results else ""
        loc = f"  (line {locs[i]})" if locs[i] else ""
        color = _DIALECT_COLORS.get(op.split(".")[0], "#bab0ac88")
        emit(f"{nid} [label={_dot_str(label + (chr(10) + t if t else '') + loc)}, shape=box, "
             f"style=\"filled,rounded\", fillcolor=\"{color}\"];")
        for v in dict.fromkeys(operands):
            if v in defs:
                edges.append(f"  {defs[v]} -> {nid};")
        for r in results:
            defs[r] = nid
        if s.endswith("{"):
            stack.append(op)
            open_cluster(op)
    head = ["digraph dataflow {", "  rankdir=TB; bgcolor=\"transparent\";",
            "  node [fontname=\"monospace\", fontsize=10];", "  edge [arrowsize=0.6];"]
    return "\n".join(head + body + edges + ["}"]) + "\n"
