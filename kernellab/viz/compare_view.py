"""Compare two compiles of one kernel side by side (the what-if): `kernellab.viz.compare(...)`.

    import kernellab.viz as kv
    kv.compare(matmul_kernel, a, b, c, M, N, K, ..., grid=lambda meta: (cdiv(M, meta["BLOCK_M"]) * ...,),
               a=dict(BLOCK_M=64, num_warps=4), b=dict(BLOCK_M=128, num_warps=8))
    kv.compare(compiled_1, compiled_2)            # two CompiledKernels compiled already

A side's options are the kernel's keyword arguments (constexprs, `num_warps`, `num_stages`, ...) plus
`target` ("sm_80", "sm_90a" or a Target), `source` (the kernel's text after an edit), `kernel` (another
@jit function), `grid` and `label`. Options given outside `a` and `b` apply to both. Each side is compiled,
its GPU stages built (no GPU needed), and profiled at once (kernellab.viz.whatif); the differences are
data (`CompareView.data`) and static HTML (saved notebooks keep it). With CUDA tensors as arguments both
sides are launched and timed (kl.testing.do_bench); otherwise the view says that time was not measured.
"""
from __future__ import annotations

import html as _html
import itertools
import linecache
import re

from . import html as H
from . import whatif as W
from .cost import estimate, fmt_count, runtime_args

_SOURCES = itertools.count(1)
SIDE_KEYS = ("target", "source", "kernel", "grid", "label")

CSS = """
.kl-cmp .kl-cmp-sides{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:8px;margin:.3em 0}
.kl-cmp .kl-cmp-side{border:1px solid rgba(127,127,127,.35);border-radius:4px;padding:4px 8px;min-width:0}
.kl-cmp .kl-cmp-side b.kl-tag{display:inline-block;min-width:1.4em;text-align:center;border-radius:3px;
 padding:0 4px;margin-right:4px;color:#fff}
.kl-cmp .kl-callout{border-left:4px solid rgba(255,170,0,.9);background:rgba(255,190,0,.10);padding:4px 10px;
 margin:.4em 0}
.kl-cmp .kl-callout ul{margin:.2em 0;padding-left:1.2em}
.kl-cmp .kl-callout li{margin:.1em 0;overflow-wrap:anywhere}
.kl-cmp table.kl-t{max-width:100%}
.kl-cmp table.kl-sum{min-width:min(100%,720px)}
.kl-cmp table.kl-t td{overflow-wrap:anywhere}
.kl-cmp table.kl-t th,.kl-cmp table.kl-t td.kl-r{white-space:nowrap}
.kl-cmp table.kl-t th.kl-r{text-align:right}
.kl-cmp td.kl-lay{min-width:20ch;font-family:var(--jp-code-font-family,ui-monospace,Menlo,monospace);font-size:11.5px}
.kl-cmp tr.kl-sec th{padding-top:.6em;border-bottom:1px solid rgba(127,127,127,.5);font-size:12px;opacity:.85}
.kl-cmp tr.kl-same td{opacity:.55}
.kl-cmp tr.kl-diff td{background:rgba(255,190,0,.12)}
.kl-cmp .kl-two{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:10px}
.kl-cmp .kl-two>div{min-width:0}
"""

SIDE_COLORS = ("#4e79a7", "#f28e2b")


# --------------------------------------------------------------------------- compiling the two sides

def _target(t):
    """A Target from a Target or its name ("sm_90a", "sm_80", "90")."""
    if t is None:
        return None
    from ..runtime.targets import Target

    if isinstance(t, Target):
        return t
    m = re.fullmatch(r"\s*(?:sm_?)?(\d{2,3})(a?)\s*", str(t), re.IGNORECASE)
    if not m:
        from ..errors import KernelLabError

        raise KernelLabError(f"compare: bad target {t!r}: write sm_90a (H100/H200), sm_90, sm_80, ...")
    return Target(int(m.group(1)), arch_specific=bool(m.group(2)))


def _default_target():
    from ..runtime.targets import native_target

    return native_target()


def kernel_from_source(kernel, text: str):
    """A @jit function compiled from `text` (the kernel's source after an edit), in the original kernel's
    globals, under a file name registered in linecache (so errors show its lines)."""
    import kernellab

    fn = getattr(kernel, "fn", kernel)
    fn = getattr(fn, "fn", fn)
    filename = f"<kernellab-compare-{next(_SOURCES)}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    ns = dict(getattr(fn, "__globals__", {}))
    exec(compile(text, filename, "exec"), ns)
    name = getattr(kernel, "__name__", None)
    obj = ns.get(name)
    if obj is None:  # the edit renamed it: the last function the text defines
        import ast

        defs = [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
        obj = ns[defs[-1]]
    return obj if hasattr(obj, "warmup") else kernellab.jit(obj)


def _jit(kernel):
    """The @jit function under an autotuner or heuristics wrapper."""
    while not hasattr(kernel, "warmup") and hasattr(kernel, "fn"):
        kernel = kernel.fn
    return kernel


def _grid_for(grid, kernel, args, kw):
    if grid is None:
        return None
    if callable(grid):
        meta = dict(zip(getattr(kernel, "arg_names", []), args))
        meta.update(kw)
        meta.setdefault("num_warps", 4)
        meta.setdefault("num_stages", 3)
        grid = grid(meta)
    grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    return tuple(int(g) for g in grid)


def _on_gpu(args, kw) -> bool:
    """Timed only where the launch itself goes to the GPU (the launch's own rule, descriptors included)."""
    from ..runtime.jit import launches_on_gpu

    return launches_on_gpu((*args, *kw.values()))


def _time(kernel, grid, args, kw):
    from ..testing import do_bench

    call = kernel[grid]
    return do_bench(lambda: call(*args, **kw)) / 1e3


NOT_MEASURED = ("not measured: no GPU here (the arguments are CPU tensors; the interpreter's time says nothing "
                "about a GPU). Give CUDA tensors on a GPU machine to time both sides.")


def _side(kernel, args, common, side, label, target, grid, time_it):
    side = dict(side or {})
    fn = kernel
    if side.get("kernel") is not None:
        fn = side["kernel"]
    if side.get("source") is not None:
        fn = kernel_from_source(kernel, side["source"])
    fn = _jit(fn)
    kw = {**common, **{k: v for k, v in side.items() if k not in SIDE_KEYS}}
    tgt = _target(side.get("target", target)) or _default_target()
    compiled = fn.warmup(*args, **kw)
    compiled.build_gpu(tgt)
    g = _grid_for(side.get("grid", grid), fn, args, kw)
    cost = estimate(compiled, runtime_args(compiled, args, kw), g) if (args or kw) else None
    seconds, note = None, NOT_MEASURED
    if time_it and g is not None:
        seconds, note = _time(fn, g, args, kw), "measured with kl.testing.do_bench (median)"
    elif time_it:
        note = "not measured: give grid= to time the launches"
    opts = {k: v for k, v in side.items() if k not in ("label", "grid", "kernel")}
    if "source" in opts:
        opts["source"] = "edited text"
    if side.get("kernel") is not None:
        opts["kernel"] = getattr(side["kernel"], "__name__", "?")
    return compiled, W.profile(compiled, side.get("label", label), opts, cost, seconds, note)


def compare(kernel, *args, a=None, b=None, grid=None, target=None, labels=("A", "B"), **common) -> "CompareView":
    """Compile `kernel` for `args` twice, with the options `a` and with `b` (dicts, see the module), and show
    the two compiles side by side with their differences called out. `kernel` may instead be a
    CompiledKernel and the first of `args` another one: then those two are compared (their GPU stages built
    for `target` if not built yet; any further `args` with `grid` give the FLOP and byte estimate)."""
    from ..runtime.jit import CompiledKernel

    if isinstance(kernel, CompiledKernel):
        if not args or not isinstance(args[0], CompiledKernel):
            raise TypeError("compare(compiled_a, compiled_b): give two CompiledKernels, or a @jit kernel with "
                            "its arguments and a=dict(...), b=dict(...)")
        ca, cb = kernel, args[0]
        rest = args[1:]
        profiles = []
        for ck, label in zip((ca, cb), labels):
            if "ptx" not in ck.asm:
                ck.build_gpu(_target(target) or _default_target())
            g = _grid_for(grid, ck, rest, common) if grid is not None else None
            cost = estimate(ck, runtime_args(ck, rest, common), g) if (rest or common) else None
            opts = dict(ck.options)
            profiles.append(W.profile(ck, label, opts, cost, None, "not measured: compare(compiled, compiled) "
                                      "does not launch; pass the kernel and its arguments to time both"))
        return CompareView(profiles[0], profiles[1], (ca, cb))
    if a is None and b is None:
        raise TypeError("compare(kernel, *args, a=dict(...), b=dict(...)): give the two option sets")
    time_it = _on_gpu(args, common)
    ca, pa = _side(kernel, args, common, a, labels[0], target, grid, time_it)
    cb, pb = _side(kernel, args, common, b, labels[1], target, grid, time_it)
    return CompareView(pa, pb, (ca, cb))


class CompareView:
    """Two compiles side by side: `data` (kernellab.viz.whatif.differences), `profiles`, `compiled`; shown as
    static HTML in a notebook and as the list of differences in a terminal."""

    def __init__(self, a: dict, b: dict, compiled=(None, None)):
        self.profiles = (a, b)
        self.compiled = compiled
        self.data = W.differences(a, b)

    @property
    def same(self) -> bool:
        return self.data["same"]

    def __repr__(self):
        a, b = self.profiles
        head = f"compare {a['kernel']}: {a['label']} {_opts_text(a)} vs {b['label']} {_opts_text(b)}"
        if self.same:
            return head + "\nno differences"
        return head + "\n" + "\n".join("- " + h for h in self.data["headlines"])

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": repr(self), "text/html": compare_html(self)}


# --------------------------------------------------------------------------- HTML

def _esc(s) -> str:
    return _html.escape(str(s), quote=True)


def _opts_text(p: dict) -> str:
    items = [f"{k}={v}" for k, v in p["options"].items()]
    return "(" + ", ".join(items) + ")" if items else "(defaults)"


def _tag(label: str, k: int) -> str:
    return f'<b class="kl-tag" style="background:{SIDE_COLORS[k]}">{_esc(label)}</b>'


def _side_card(p: dict, k: int) -> str:
    code = p.get("code") or {}
    bits = [f"target {_esc(p.get('target') or '—')}", f"num_warps {p['num_warps']}",
            f"num_stages {p['num_stages']}"]
    if code.get("regs") is not None:
        bits.append(f"{code['regs']} regs")
    bits.append(f"{W._fmt_bytes(p['smem']['total'])} shared")
    t = W._fmt_time(p["seconds"]) if p.get("seconds") is not None else \
        '<span class="kl-dim" style="white-space:nowrap">time not measured</span>'
    notes = "".join(f'<div class="kl-dim">{_esc(n)}</div>' for n in p.get("notes") or [])
    return (f'<div class="kl-cmp-side">{_tag(p["label"], k)}<b>{_esc(p["kernel"])}</b> '
            f'<code>{_esc(_opts_text(p))}</code><div>{" · ".join(bits)} · {t}</div>{notes}</div>')


def _table(rows) -> str:
    """The metrics that differ, grouped by section; the unchanged ones folded underneath."""
    def table(rs):
        out = ['<table class="kl-t kl-sum"><tr><th>metric</th><th class="kl-r">A</th><th class="kl-r">B</th>'
               '<th class="kl-r">B − A</th></tr>']
        section = None
        for r in rs:
            if r["section"] != section:
                section = r["section"]
                out.append(f'<tr class="kl-sec"><th colspan="4">{_esc(section)}</th></tr>')
            cls = "kl-diff" if r["changed"] else "kl-same"
            out.append(f'<tr class="{cls}"><td>{_esc(r["metric"])}</td><td class="kl-r">{_esc(r["a"])}</td>'
                       f'<td class="kl-r">{_esc(r["b"])}</td><td class="kl-r">{_esc(r["delta"])}</td></tr>')
        return "".join(out) + "</table>"

    changed = [r for r in rows if r["changed"]]
    same = [r for r in rows if not r["changed"]]
    out = table(changed) if changed else ""
    if same:
        out += (f'<details><summary>{len(same)} metric(s) the same on both sides</summary>{table(same)}'
                "</details>")
    return out


def _layout_table(lay: dict) -> str:
    if not lay["changed"]:
        return (f'<p class="kl-dim">every value paired by source line and op has the same layout '
                f'({lay["same"]} values)</p>')
    groups = W.layout_groups(lay["changed"])
    out = ['<table class="kl-t"><tr><th>layout A</th><th>layout B</th><th class="kl-r">regs A → B</th>'
           '<th>values (op, line)</th></tr>']
    for g in groups[:24]:
        vals = g["values"]
        shown = ", ".join(f"{n} ({op.split('.')[-1]}, {line})" for n, op, line, _, _ in vals[:6])
        more = f" and {len(vals) - 6} more" if len(vals) > 6 else ""
        same = ' <span class="kl-dim">(same layout, tile reshaped)</span>' if g["layout_a"] == g["layout_b"] else ""
        out.append(f'<tr><td class="kl-lay">{_esc(g["layout_a"])}</td><td class="kl-lay">{_esc(g["layout_b"])}{same}'
                   f'</td><td class="kl-r">{g["registers_a"]} → {g["registers_b"]}</td>'
                   f'<td><b>{len(vals)}</b>: {_esc(shown)}{_esc(more)}</td></tr>')
    tail = f'<p class="kl-dim">… {len(groups) - 24} more kinds of change</p>' if len(groups) > 24 else ""
    counts = (f'<p class="kl-dim">{len(lay["changed"])} value(s) changed layout or shape, {lay["same"]} the same; '
              f'{lay["only_a"]} only in A, {lay["only_b"]} only in B (values paired by source line, op and order). '
              'One row per kind of change; regs = the most elements of one such value a thread holds.</p>')
    return counts + "".join(out) + "</table>" + tail


def _access_table(acc: list) -> str:
    if not acc:
        return '<p class="kl-dim">the global loads and stores have the same vector widths and coalescing</p>'

    def cell(x):
        if not x:
            return "—"
        return (f'{x["vec"]} × ({x["bytes_per_access"]} B), {"×".join(map(str, x["shape"]))}, '
                f'{x["efficiency"]:.0%} efficient')

    out = ['<table class="kl-t"><tr><th>line</th><th>op</th><th>A: vector, tile, coalescing</th>'
           '<th>B</th></tr>']
    for c in acc:
        out.append(f'<tr><td class="kl-r">{_esc(c["line"])}</td><td>{_esc(c["op"])}</td><td>{_esc(cell(c["a"]))}</td>'
                   f'<td>{_esc(cell(c["b"]))}</td></tr>')
    return "".join(out) + "</table>"


def _lanes(buffers) -> list[int]:
    """A lane per buffer so that buffers sharing bytes (at different times) are drawn one under the other."""
    lanes, ends = [], []
    for buf in buffers:
        lo, hi = buf["offset"], buf["offset"] + buf["size"]
        k = next((i for i, used in enumerate(ends) if all(hi <= a or lo >= b for a, b in used)), None)
        if k is None:
            k = len(ends)
            ends.append([])
        ends[k].append((lo, hi))
        lanes.append(k)
    return lanes


def smem_bars_svg(a: dict, b: dict, limit: int = 228 * 1024) -> str:
    """Both sides' shared-memory plans on one byte scale (up to the sm_90 limit): one box per buffer,
    numbered as in the tables, a pipelined buffer split into its stages; buffers that reuse bytes (their
    live ranges do not overlap) are drawn in a lane below."""
    W_, left, right, lane_h = 960, 40, 16, 18  # as the shared-memory view's chart: shrinks where narrower
    span = max(limit, a["smem"]["total"], b["smem"]["total"], 1)
    plot = W_ - left - right

    def x(v):
        return left + plot * v / span

    body, y = [], 6
    for k, p in enumerate((a, b)):
        bufs = p["smem"]["buffers"]
        lanes = _lanes(bufs)
        n = max(lanes, default=0) + 1
        h = n * lane_h
        body.append(f'<text x="{left - 6}" y="{y + h / 2 + 4}" text-anchor="end" fill="{SIDE_COLORS[k]}" '
                    f'font-weight="700">{_esc(p["label"])}</text>')
        body.append(f'<rect x="{left}" y="{y}" width="{plot}" height="{h}" fill="none" stroke="currentColor" '
                    'stroke-opacity=".3"/>')
        for i, (buf, lane) in enumerate(zip(bufs, lanes)):
            x0, x1 = x(buf["offset"]), x(buf["offset"] + buf["size"])
            yb = y + lane * lane_h + 1
            tip = f'{i}: {buf["op"]} (line {buf["line"]}): {buf["size"]} B at {buf["offset"]}; {buf["reason"]}'
            body.append(f'<g><title>{_esc(tip)}</title><rect x="{x0:.1f}" y="{yb}" width="{max(x1 - x0, 1):.1f}" '
                        f'height="{lane_h - 2}" fill="{H.PALETTE[i % len(H.PALETTE)]}" fill-opacity=".6" '
                        'stroke="currentColor" stroke-width=".6"/>')
            for s in range(1, buf.get("stages") or 0):
                xs = x(buf["offset"] + s * buf["stage_bytes"])
                body.append(f'<line x1="{xs:.1f}" y1="{yb}" x2="{xs:.1f}" y2="{yb + lane_h - 2}" '
                            'stroke="currentColor" stroke-dasharray="2,2" stroke-opacity=".7"/>')
            if x1 - x0 >= 14:
                body.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{yb + lane_h / 2 + 3}" text-anchor="middle" '
                            f'fill="currentColor">{i}</text>')
            body.append("</g>")
        total = p["smem"]["total"]
        tx, anchor = x(total) + 6, "start"
        if tx > W_ - 70:
            tx, anchor = x(total) - 6, "end"
        body.append(f'<text x="{tx:.1f}" y="{y + lane_h / 2 + 4}" text-anchor="{anchor}" fill="currentColor" '
                    f'font-weight="600">{_esc(W._fmt_bytes(total))}</text>')
        y += h + 10
    ticks = sorted({0, 64 * 1024, 128 * 1024, limit} | ({span} if span > limit else set()))
    for v in ticks:
        anchor = "end" if v == ticks[-1] else "start" if v == 0 else "middle"
        label = W._fmt_bytes(v) + (" = sm_90 limit" if v == limit else "")
        body.append(f'<line x1="{x(v):.1f}" y1="{y - 6}" x2="{x(v):.1f}" y2="{y}" stroke="currentColor" '
                    f'stroke-opacity=".6"/><text x="{x(v):.1f}" y="{y + 12}" text-anchor="{anchor}" '
                    f'fill="currentColor" fill-opacity=".75">{_esc(label)}</text>')
    H_ = y + 18
    return (f'<svg viewBox="0 0 {W_} {H_}" width="{W_}" height="{H_}" style="max-width:100%;height:auto" '
            'font-size="11" role="img">' + "".join(body) + "</svg>")


def _buffers_html(p: dict, k: int) -> str:
    rows = [f'<div>{_tag(p["label"], k)} {W._fmt_bytes(p["smem"]["total"])} in {len(p["smem"]["buffers"])} '
            f'buffer(s), {p["smem"]["barriers"]} barrier(s) between shared-memory ops'
            + (f', {p["smem"]["mbarriers"]} mbarrier(s)' if p["smem"].get("mbarriers") else "") + "</div>"]
    if p["smem"]["buffers"]:
        rows.append('<table class="kl-t"><tr><th>#</th><th>line</th><th>size</th><th>stages</th><th>why</th></tr>')
        for i, buf in enumerate(p["smem"]["buffers"]):
            st = f'{buf["stages"]} × {W._fmt_bytes(buf["stage_bytes"])}' if buf.get("stages") else "—"
            rows.append(f'<tr><td class="kl-r">{i}</td><td class="kl-r">{_esc(buf["line"])}</td>'
                        f'<td class="kl-r">{W._fmt_bytes(buf["size"])}</td><td class="kl-r">{_esc(st)}</td>'
                        f'<td>{_esc(buf["reason"])}</td></tr>')
        rows.append("</table>")
    return "<div>" + "".join(rows) + "</div>"


def _passes_table(passes: list) -> str:
    if not passes:
        return '<p class="kl-dim">every pass did the same on both sides</p>'

    def stats(s, changed):
        if s is None:
            return "—"
        text = ", ".join(f"{k}={v}" for k, v in s.items() if v not in (None, 0, "", False, [], ()))
        return ("changed" if changed else "unchanged") + (f": {text}" if text else "")

    out = ['<table class="kl-t"><tr><th>pass</th><th>A</th><th>B</th></tr>']
    for p in passes:
        out.append(f'<tr><td><b>{_esc(p["name"])}</b> <span class="kl-dim">({_esc(p["stage"])})</span></td>'
                   f'<td>{_esc(stats(p["stats_a"], p["changed_a"]))}</td>'
                   f'<td>{_esc(stats(p["stats_b"], p["changed_b"]))}</td></tr>')
    return "".join(out) + "</table>"


def _cost_html(a: dict, b: dict) -> str:
    parts = []
    for k, p in enumerate((a, b)):
        c = p.get("cost")
        if not c:
            parts.append(f'<div>{_tag(p["label"], k)} <span class="kl-dim">no arguments given: no FLOP or byte '
                         'estimate</span></div>')
            continue
        inten = f'{c["intensity"]:.3g} FLOP/B' if c.get("intensity") else "—"
        notes = "; ".join(c.get("notes") or [])
        parts.append(f'<div>{_tag(p["label"], k)} {fmt_count(c["flops"])}FLOP '
                     f'({fmt_count(c["dot_flops"])}FLOP in dots), {fmt_count(c["bytes"], "B")} moved '
                     f'({fmt_count(c["requested_bytes"], "B")} requested) → <b>{inten}</b> '
                     f'<span class="kl-dim">estimated{": " + _esc(notes) if notes else ""}</span></div>')
    model = (a.get("cost") or b.get("cost") or {}).get("model")
    if model:
        parts.append(f'<p class="kl-dim">Estimated from the tile IR, not measured: {_esc(model)}.</p>')
    return "".join(parts)


def compare_html(view: CompareView) -> str:
    """The compare view as static HTML: the two option sets, what changed (called out), the side-by-side
    table, then layouts, global accesses, shared memory, passes, work estimate and the GPU IR diff."""
    a, b = view.profiles
    d = view.data
    parts = [f'<h4>{_esc(a["kernel"])}: {_esc(a["label"])} vs {_esc(b["label"])}</h4>',
             '<div class="kl-cmp-sides">' + _side_card(a, 0) + _side_card(b, 1) + "</div>"]
    if d["same"]:
        parts.append('<div class="kl-callout"><b>no differences</b>: the two compiles have the same IR, '
                     'layouts, shared memory, registers and PTX</div>')
    else:
        parts.append('<div class="kl-callout"><b>what changed</b><ul>'
                     + "".join(f"<li>{_esc(h)}</li>" for h in d["headlines"]) + "</ul></div>")
    timing = {p["timing_note"] for p in (a, b) if p.get("seconds") is None and p.get("timing_note")}
    for t in timing:
        parts.append(f'<p class="kl-dim">time: {_esc(t)}</p>')
    parts.append(_table(d["rows"]))
    n_lay = len(d["layouts"]["changed"])
    parts.append(f'<details{" open" if n_lay else ""}><summary><b>layouts</b> '
                 f'({n_lay} value(s) changed)</summary>{_layout_table(d["layouts"])}</details>')
    parts.append(f'<details{" open" if d["accesses"] else ""}><summary><b>global loads and stores</b> '
                 f'({len(d["accesses"])} changed)</summary>{_access_table(d["accesses"])}</details>')
    parts.append(f'<details open><summary><b>shared memory</b> ({len(d["buffers"])} buffer(s) changed)</summary>'
                 + smem_bars_svg(a, b) + '<div class="kl-two">' + _buffers_html(a, 0) + _buffers_html(b, 1)
                 + "</div></details>")
    parts.append(f'<details{" open" if d["passes"] else ""}><summary><b>passes</b> ({len(d["passes"])} did '
                 f'something different)</summary>{_passes_table(d["passes"])}</details>')
    parts.append(f'<details open><summary><b>work and arithmetic intensity</b></summary>{_cost_html(a, b)}'
                 "</details>")
    if not d["ir_same"] and a.get("gpu_ir") and b.get("gpu_ir"):
        parts.append('<details><summary><b>GPU IR, A → B</b> (changed lines with 2 lines of context)</summary>'
                     + H.diff_block(a["gpu_ir"], b["gpu_ir"], context=2) + "</details>")
    return H.page(f'<style>{CSS}</style><div class="kl-cmp">' + "".join(parts) + "</div>")
