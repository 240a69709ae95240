"""Compare two compiles of a kernel (the what-if): what each compile is, as plain data, and how they differ
(pure functions, like kernellab.viz.data).

`profile(compiled)` reads one CompiledKernel's CompileTrace (and, as `data.code_summary` does, its PTX and
the ptxas report) right after it was built: a target change rebuilds the same CompiledKernel, so a profile
is taken before the other side is built. `differences(a, b)` pairs the two profiles: values by where they
come from (source line, op, how many such ops came before on that line), not by SSA name, which a changed
tile size renumbers; shared-memory buffers and global accesses likewise; passes by name and occurrence.
"""
from __future__ import annotations

import re

from ..compiler import layout_model as LM
from . import data as D

# PTX instruction classes the compare view counts: (label, regex on the PTX text)
PTX_MIX = (
    ("ld.global (all)", r"\bld\.global\b"),
    ("ld.global.v2", r"\bld\.global(?:\.\w+)*\.v2\b"),
    ("ld.global.v4", r"\bld\.global(?:\.\w+)*\.v4\b"),
    ("st.global (all)", r"\bst\.global\b"),
    ("st.global.v4", r"\bst\.global(?:\.\w+)*\.v4\b"),
    ("cp.async", r"\bcp\.async\.c[ag]\b"),
    ("cp.async.bulk (TMA)", r"\bcp\.async\.bulk\b"),
    ("ld.shared", r"\bld\.shared\b"),
    ("st.shared", r"\bst\.shared\b"),
    ("ldmatrix", r"\bldmatrix\b"),
    ("wgmma.mma_async", r"\bwgmma\.mma_async\b"),
    ("mma.sync", r"\bmma\.sync\b"),
    ("bar.sync / barrier", r"^\s*(?:@!?%\w+\s+)?(?:bar|barrier)\.(?:sync|cta)"),
    ("mbarrier", r"\bmbarrier\.\w+"),
    ("shfl.sync", r"\bshfl\.sync\b"),
    ("fma", r"\bfma\.rn\b"),
    ("ex2.approx", r"\bex2\.approx\b"),
)


def ptx_mix(ptx: str | None) -> dict:
    """{label: count} of the PTX_MIX instruction classes, plus "instructions" (lines ending in `;` that are
    not directives or declarations)."""
    if not ptx:
        return {}
    out = {"instructions": sum(1 for line in ptx.splitlines()
                               if line.rstrip().endswith(";") and not line.lstrip().startswith((".", "//")))}
    for label, rx in PTX_MIX:
        out[label] = len(re.findall(rx, ptx, re.M))
    return out


def _keyed(items, line_of, kind_of):
    """[(key, item)] with key = (source line, kind, k-th such item on that line)."""
    seen: dict = {}
    out = []
    for it in items:
        base = (line_of(it), kind_of(it))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.append((base + (k,), it))
    return out


def _registers(layout, shape) -> int | None:
    try:
        return len(LM.as_layout(layout).registers(tuple(shape)))
    except Exception:
        return None


def _latest_passes(trace) -> list:
    """The tile passes and the GPU passes of the latest GPU build (a CompiledKernel built for a second target
    keeps the first build's records before it)."""
    passes = list(trace.passes)
    tile = [p for p in passes if p.stage == "tile"]
    end = max((i for i, p in enumerate(passes) if p.stage == "gpu"), default=None)
    if end is None:
        return tile
    start = end
    while start > 0 and passes[start - 1].stage == "gpu":
        start -= 1
    return tile + passes[start:end + 1]


def profile(compiled, label: str = "A", options: dict | None = None, cost: dict | None = None,
            seconds: float | None = None, timing_note: str = "") -> dict:
    """What one compile is, as data: its options and target; per value its layout and registers per thread;
    per global access its vector width and coalescing; the shared-memory plan and barriers; registers, spills,
    occupancy; PTX size and instruction mix; per pass whether it changed the IR and what it found; the FLOP
    and byte estimate (`cost`, from kernellab.viz.cost) and the measured time (`seconds`, or why not)."""
    trace = compiled.trace
    opts = dict(options or {})
    out = {"label": label, "kernel": getattr(compiled, "name", trace.kernel),
           "options": opts, "target": getattr(compiled, "_built_for", None),
           "num_warps": getattr(compiled, "num_warps", None) or compiled.options.get("num_warps", 4),
           "num_stages": compiled.options.get("num_stages", 3),
           "notes": [n for n in trace.notes if "disk cache" not in n], "cost": cost, "seconds": seconds,
           "timing_note": timing_note}
    built = trace.snapshot("gpu") is not None
    out["built"] = built
    out["passes"] = [{"name": p.name, "stage": p.stage, "changed": bool(p.changed),
                      "stats": {k: v for k, v in (p.stats or {}).items()}, "lines": len(p.ir.splitlines())}
                     for p in _latest_passes(trace)]
    out["tile_ir"] = trace.stage("tile").ir
    if not built:
        out.update(values=[], accesses=[], smem={"buffers": [], "total": 0, "barriers": 0}, code={}, ptx={},
                   gpu_ir="", ptx_lines=0)
        return out
    out["gpu_ir"] = "\n".join(t for t, _ in D.ir_lines_with_locs(trace.stage("gpu")))
    nw = D.num_warps_of(trace)
    out["num_warps"] = nw
    values = []
    for v in D.tensor_values(trace):
        values.append({"name": v["name"], "line": v["line"], "op": v["op"], "shape": tuple(v["shape"]),
                       "elem": v["elem"], "layout": v["layout"], "alias": v["alias"],
                       "registers": _registers(v["layout"], v["shape"])})
    out["values"] = values
    out["accesses"] = [{"op": a["op"], "name": a["name"], "line": a["line"], "vec": a["vec"],
                        "shape": a["shape"], "bytes_per_access": a["coalescing"]["bytes_per_access"],
                        "efficiency": a["coalescing"]["efficiency"], "coalesced": a["coalescing"]["coalesced"]}
                       for a in D.accesses(trace)]
    m = D.smem_map(trace, num_warps=nw)
    snap = trace.snapshot("gpu")
    out["smem"] = {"total": m["total"], "barriers": len(m["barriers"]),
                   "mbarriers": sum(len(b.mbarriers) for b in snap.shared_plan),
                   "buffers": [{"op": b["op"], "line": b.get("line"), "size": b["size"], "offset": b["offset"],
                                "stages": b.get("stages", 0), "stage_bytes": b.get("stage_bytes", 0),
                                "reason": b.get("reason", ""), "swizzle": b.get("swizzle", "")}
                               for b in m["buffers"]]}
    asm = getattr(compiled, "asm", {}) or {}
    ptx = asm.get("ptx")
    s = D.code_summary(compiled, with_sass=False)
    out["code"] = {"regs": s["regs"], "spills": s["spills"] or 0, "shared": s["shared"], "local": s["local"] or 0,
                   "occupancy": s["occupancy"]}
    out["ptx"] = ptx_mix(ptx)
    out["ptx_lines"] = len(ptx.splitlines()) if ptx else 0
    loops = re.findall(r"pipelined_stages = (\d+)", out["gpu_ir"])
    out["pipelined_stages"] = max((int(x) for x in loops), default=0)
    out["conversions"] = sum(1 for v in values if v["op"] == "ttg.convert_layout")
    return out


# --------------------------------------------------------------------------- the differences

def _fmt_bytes(n) -> str:
    if n is None:
        return "—"
    n = int(n)
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


def _fmt_time(s) -> str:
    return "—" if s is None else f"{s * 1e6:.1f} µs"


def _occ(p) -> str:
    o = (p.get("code") or {}).get("occupancy")
    if not o:
        return "—"
    return f'{o["warps_per_sm"]} warps/SM ({o["occupancy"]:.0%}; by {", ".join(o["limiter"])})'


def summary_rows(a: dict, b: dict) -> list[dict]:
    """The side-by-side table: {section, metric, a, b, changed, delta} per row (a/b as display text; delta a
    signed text for numbers that changed)."""
    rows = []

    def row(section, metric, va, vb, fmt=str, number=True):
        ta = fmt(va) if va is not None else "—"
        tb = fmt(vb) if vb is not None else "—"
        delta = ""
        if number and isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va != vb:
            d = vb - va
            rel = f", ×{vb / va:.2f}" if va else ""
            delta = ("+" if d > 0 else "−") + fmt(abs(d)) + rel
        rows.append({"section": section, "metric": metric, "a": ta, "b": tb, "changed": ta != tb, "delta": delta})

    keys = list(dict.fromkeys(list(a["options"]) + list(b["options"])))
    for k in [k for k in keys if k not in ("num_warps", "num_stages", "target")]:
        row("options", k, a["options"].get(k), b["options"].get(k), number=False)
    row("options", "target", a.get("target"), b.get("target"), number=False)
    row("options", "num_warps", a["num_warps"], b["num_warps"])
    row("options", "num_stages", a["num_stages"], b["num_stages"])
    ca, cb = a.get("code") or {}, b.get("code") or {}
    row("resources", "registers / thread", ca.get("regs"), cb.get("regs"))
    row("resources", "spills (bytes)", ca.get("spills"), cb.get("spills"))
    row("resources", "shared memory / block", ca.get("shared"), cb.get("shared"), _fmt_bytes)
    row("resources", "occupancy", _occ(a), _occ(b), number=False)
    oa, ob = ca.get("occupancy") or {}, cb.get("occupancy") or {}
    row("resources", "blocks / SM", oa.get("blocks_per_sm"), ob.get("blocks_per_sm"))
    sa, sb = a["smem"], b["smem"]
    row("shared memory", "buffers", len(sa["buffers"]), len(sb["buffers"]))
    row("shared memory", "bytes planned", sa["total"], sb["total"], _fmt_bytes)
    row("shared memory", "pipelined stages", a.get("pipelined_stages"), b.get("pipelined_stages"))
    row("shared memory", "barriers between shared ops", sa["barriers"], sb["barriers"])
    row("shared memory", "mbarriers", sa.get("mbarriers"), sb.get("mbarriers"))
    row("layouts", "distinct layouts", len({v["layout"] for v in a["values"]}),
        len({v["layout"] for v in b["values"]}))
    row("layouts", "layout conversions", a.get("conversions"), b.get("conversions"))
    row("code", "PTX lines", a.get("ptx_lines"), b.get("ptx_lines"))
    pa, pb = a.get("ptx") or {}, b.get("ptx") or {}
    for label in ["instructions"] + [lbl for lbl, _ in PTX_MIX]:
        va, vb = pa.get(label), pb.get(label)
        if va or vb:
            row("PTX instruction mix", label, va, vb)
    ka, kb = a.get("cost") or {}, b.get("cost") or {}
    if ka or kb:
        from .cost import fmt_count

        row("work (estimated from the IR)", "FLOPs", ka.get("flops"), kb.get("flops"), lambda x: fmt_count(x))
        row("work (estimated from the IR)", "bytes (DRAM, re-reads in L2)", ka.get("bytes"), kb.get("bytes"),
            lambda x: fmt_count(x, "B"))
        row("work (estimated from the IR)", "bytes requested by the programs", ka.get("requested_bytes"),
            kb.get("requested_bytes"), lambda x: fmt_count(x, "B"))
        row("work (estimated from the IR)", "arithmetic intensity (FLOP/B)", ka.get("intensity"),
            kb.get("intensity"), lambda x: f"{x:.3g}")
    if a.get("seconds") is not None or b.get("seconds") is not None:
        row("time", "measured (median)", a.get("seconds"), b.get("seconds"), _fmt_time)
    return rows


def layout_changes(a: dict, b: dict) -> dict:
    """Values paired by (source line, op, occurrence): {changed: [{line, op, name_a, name_b, shape_a, shape_b,
    layout_a, layout_b, registers_a, registers_b}], same (count), only_a, only_b (counts)}."""
    ka = dict(_keyed(a["values"], lambda v: v["line"], lambda v: v["op"]))
    kb = dict(_keyed(b["values"], lambda v: v["line"], lambda v: v["op"]))
    changed, same = [], 0
    for key in [k for k in ka if k in kb]:
        va, vb = ka[key], kb[key]
        if va["layout"] == vb["layout"] and va["shape"] == vb["shape"]:
            same += 1
            continue
        changed.append({"line": va["line"], "op": va["op"], "name_a": va["name"], "name_b": vb["name"],
                        "shape_a": va["shape"], "shape_b": vb["shape"], "layout_a": va["layout"],
                        "layout_b": vb["layout"], "registers_a": va["registers"], "registers_b": vb["registers"]})
    return {"changed": changed, "same": same, "only_a": len([k for k in ka if k not in kb]),
            "only_b": len([k for k in kb if k not in ka])}


def layout_groups(changes: list) -> list[dict]:
    """The layout changes grouped by (layout A, layout B): {layout_a, layout_b, values: [(name, op, line,
    shape_a, shape_b)], registers_a, registers_b (the largest per thread in the group), reshaped (how many
    values changed shape)}, the groups with the most registers per thread first: one row per kind of
    change instead of one per value."""
    groups: dict = {}
    for c in changes:
        g = groups.setdefault((c["layout_a"], c["layout_b"]), {"layout_a": c["layout_a"], "layout_b": c["layout_b"],
                                                               "values": [], "registers_a": 0, "registers_b": 0,
                                                               "reshaped": 0})
        g["values"].append((c["name_b"], c["op"], c["line"], c["shape_a"], c["shape_b"]))
        g["registers_a"] = max(g["registers_a"], c["registers_a"] or 0)
        g["registers_b"] = max(g["registers_b"], c["registers_b"] or 0)
        g["reshaped"] += c["shape_a"] != c["shape_b"]
    return sorted(groups.values(), key=lambda g: (-max(g["registers_a"], g["registers_b"]), -len(g["values"])))


def access_changes(a: dict, b: dict) -> list[dict]:
    """Global loads and stores paired by (line, op, occurrence) whose vector width, shape or coalescing
    changed: {line, op, a: {...}, b: {...}} (a side is None where that compile has no such access)."""
    ka = dict(_keyed(a["accesses"], lambda x: x["line"], lambda x: x["op"]))
    kb = dict(_keyed(b["accesses"], lambda x: x["line"], lambda x: x["op"]))
    out = []
    for key in list(dict.fromkeys(list(ka) + list(kb))):
        xa, xb = ka.get(key), kb.get(key)
        fields = ("vec", "shape", "bytes_per_access", "efficiency")
        if xa and xb and all(xa[f] == xb[f] for f in fields):
            continue
        out.append({"line": key[0], "op": key[1], "a": xa, "b": xb})
    return out


def buffer_changes(a: dict, b: dict) -> list[dict]:
    """Shared-memory buffers paired by (line, op, occurrence) whose size or stages changed (or that exist on
    one side only)."""
    ka = dict(_keyed(a["smem"]["buffers"], lambda x: x["line"], lambda x: x["op"]))
    kb = dict(_keyed(b["smem"]["buffers"], lambda x: x["line"], lambda x: x["op"]))
    out = []
    for key in list(dict.fromkeys(list(ka) + list(kb))):
        xa, xb = ka.get(key), kb.get(key)
        if xa and xb and (xa["size"], xa["stages"]) == (xb["size"], xb["stages"]):
            continue
        out.append({"line": key[0], "op": key[1], "a": xa, "b": xb})
    return out


def pass_changes(a: dict, b: dict) -> list[dict]:
    """Passes (paired by name and occurrence) that changed the IR on one side only, or found other things
    (their stats differ): {name, stage, changed_a, changed_b, stats_a, stats_b}."""
    ka = dict(_keyed(a["passes"], lambda p: p["name"], lambda p: p["stage"]))
    kb = dict(_keyed(b["passes"], lambda p: p["name"], lambda p: p["stage"]))
    out = []
    for key in list(dict.fromkeys(list(ka) + list(kb))):
        pa, pb = ka.get(key), kb.get(key)
        if pa and pb and pa["changed"] == pb["changed"] and pa["stats"] == pb["stats"]:
            continue
        out.append({"name": key[0], "stage": key[1], "changed_a": pa and pa["changed"],
                    "changed_b": pb and pb["changed"], "stats_a": pa and pa["stats"], "stats_b": pb and pb["stats"]})
    return out


def _short_layout(text: str | None) -> str:
    return "—" if text is None else text


def headlines(a: dict, b: dict, rows: list, lay: dict, acc: list, bufs: list, passes: list) -> list[str]:
    """The differences a reader should see first, one sentence each, most consequential first."""
    out = []
    by = {(r["section"], r["metric"]): r for r in rows}

    def changed(section, metric):
        r = by.get((section, metric))
        return r if r and r["changed"] else None

    t = changed("time", "measured (median)")
    if t:
        out.append(f"time {t['a']} → {t['b']} ({t['delta']})")
    for metric in ("registers / thread", "spills (bytes)", "shared memory / block", "occupancy"):
        r = changed("resources", metric)
        if r:
            out.append(f"{metric}: {r['a']} → {r['b']}" + (f" ({r['delta']})" if r["delta"] else ""))
    r = changed("shared memory", "pipelined stages")
    if r:
        out.append(f"pipelined stages: {r['a']} → {r['b']}")
    if bufs:
        parts: dict = {}  # the same change of the buffers of one line (a helper inlined twice) said once
        for c in bufs:
            sa = f"{_fmt_bytes(c['a']['size'])}" + (f" ({c['a']['stages']} stages)" if c["a"] and c["a"]["stages"]
                                                     else "") if c["a"] else "none"
            sb = f"{_fmt_bytes(c['b']['size'])}" + (f" ({c['b']['stages']} stages)" if c["b"] and c["b"]["stages"]
                                                     else "") if c["b"] else "none"
            key = f"{c['op']} at line {c['line']}: {sa} → {sb}"
            parts[key] = parts.get(key, 0) + 1
        said = [f"{n} × {k}" if n > 1 else k for k, n in parts.items()]
        out.append("shared-memory buffers: " + "; ".join(said[:4]) + (f" (+{len(said) - 4} more)" if len(said) > 4
                                                                      else ""))
    r = changed("shared memory", "barriers between shared ops")
    if r:
        out.append(f"barriers between shared-memory ops: {r['a']} → {r['b']}")
    if lay["changed"]:
        groups = layout_groups(lay["changed"])
        g = groups[0]
        out.append(f"{len(lay['changed'])} value(s) changed layout or shape ({len(groups)} kinds of change); the "
                   f"biggest: {len(g['values'])} value(s) {g['layout_a']} → {g['layout_b']}, up to "
                   f"{g['registers_a']} → {g['registers_b']} registers per thread")
    vec = [c for c in acc if c["a"] and c["b"] and c["a"]["vec"] != c["b"]["vec"]]
    if vec:
        out.append("vector width of global accesses: " + "; ".join(
            f"{c['op']} at line {c['line']}: {c['a']['vec']} → {c['b']['vec']} elements" for c in vec[:4]))
    mix = [r for r in rows if r["section"] == "PTX instruction mix" and r["changed"] and r["metric"] != "instructions"]
    if mix:
        out.append("PTX: " + ", ".join(f"{r['metric']} {r['a']} → {r['b']}" for r in mix[:6]))
    r = changed("code", "PTX lines")
    if r:
        out.append(f"PTX lines: {r['a']} → {r['b']} ({r['delta']})")
    if passes:
        out.append("passes that did something different: " + ", ".join(dict.fromkeys(p["name"] for p in passes)))
    r = changed("work (estimated from the IR)", "arithmetic intensity (FLOP/B)")
    if r:
        out.append(f"arithmetic intensity (estimated): {r['a']} → {r['b']} FLOP/B")
    return out


def differences(a: dict, b: dict) -> dict:
    """Everything that differs between two profiles: {rows (the side-by-side table), layouts, accesses,
    buffers, passes, headlines (sentences), same (True when nothing differs but the labels), ir_same}."""
    rows = summary_rows(a, b)
    lay = layout_changes(a, b)
    acc = access_changes(a, b)
    bufs = buffer_changes(a, b)
    passes = pass_changes(a, b)
    heads = headlines(a, b, rows, lay, acc, bufs, passes)
    ir_same = a.get("gpu_ir") == b.get("gpu_ir") and a.get("tile_ir") == b.get("tile_ir")
    same = not any(r["changed"] for r in rows) and not lay["changed"] and not acc and not bufs and not passes \
        and ir_same
    if not heads and not same:
        heads.append("the IR differs (see the GPU IR diff), with the same resources")
    return {"rows": rows, "layouts": lay, "accesses": acc, "buffers": bufs, "passes": passes, "headlines": heads,
            "same": same, "ir_same": ir_same}
