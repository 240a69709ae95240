"""Live ipywidgets views of a CompiledKernel (no extra server, no port, no custom JavaScript).

Each view is an ipywidgets box; its `_repr_mimebundle_` also carries the static HTML of `html.py`,
so a saved notebook or nbconvert still shows the view without a running kernel.

    import kernellab.viz as kv
    kv.show(compiled)                       # Tab: passes, layout, smem, code, graph
    kv.PassesView(compiled)                 # one view
"""
from __future__ import annotations

import os

import ipywidgets as W

from . import data as D
from . import html as H
from .fallback import WithStaticCopy
from .graph_view import GraphView  # noqa: F401  (one of VIEWS)
from .linked import linked_view
from .stages import _no_gpu_note, ensure_gpu_stages

MONO = "var(--jp-code-font-family, ui-monospace, Menlo, monospace)"


class _View(WithStaticCopy, W.VBox):
    """A view: a VBox of widgets plus a static HTML fallback for saved notebooks (displayed as its own output
    before the view: see fallback.py)."""

    title = "view"
    needs_gpu = False  # the layout, shared-memory and code views read the GPU stages: built on first show

    def __init__(self, compiled, **kwargs):
        super().__init__(**kwargs)
        if self.needs_gpu:
            ensure_gpu_stages(compiled)
        self.compiled = compiled

    def static_html(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        data = dict(super()._repr_mimebundle_(**kwargs) or {})
        data["text/html"] = self.static_html()
        data.setdefault("text/plain", f"{type(self).__name__}({getattr(self.compiled, 'name', '')})")
        return data


def _html_pane(value="", height=None):
    # width auto, not 100%: a box stretches its children, and 100% plus the widget margins overflows by 4 px
    layout = W.Layout(width="auto", overflow="auto")
    if height:
        layout.max_height = height
    pane = W.HTML(value=value, layout=layout)
    pane.add_class("kl-hp")  # html.CSS: its content as wide as the pane, a long code line scrolls in its own box
    return pane


def _trunc(s: str, n: int = 110) -> str:
    return s if len(s) <= n else s[:n - 1] + "…"


# --------------------------------------------------------------------------- passes


def _origin_text(origin, pad: str = "   ") -> str:
    """`[line 12]` for a line of the kernel's file, `[helper.py line 12]` for an inlined helper's from another."""
    if not origin:
        return ""
    f, line = origin
    return f"{pad}[{os.path.basename(f)} line {line}]" if f else f"{pad}[line {line}]"


class PassesView(_View):
    """Passes list (changed / unchanged, ms, what the pass does) -> the IR after the selected pass, or its
    diff against the previous pass (changed words marked; one column or side by side); a search box highlights
    (or filters to) matching lines; picking an IR line with a `loc(L:C)` highlights source line L, and picking a
    source line highlights its IR lines."""

    title = "passes"

    def __init__(self, compiled, **kwargs):
        super().__init__(compiled, **kwargs)
        self.trace = compiled.trace
        self.rows = D.pass_rows(self.trace)
        self.source_lines = D.file_lines(compiled)  # with the inlined helpers' lines of the kernel's file
        rng = D.kernel_source_range(self.trace.passes[0]) if self.trace.passes else None
        self.src_range = rng or (1, len(self.source_lines))
        self.selected_src: int | None = None   # source line picked (-> IR lines highlighted)
        self.selected_ir: int | None = None    # IR line picked (-> source line highlighted)
        self._busy = False

        # each pass with its one-line description, as the static table has it (a select's options are plain text)
        opts = [(f"{'●' if r['changed'] else '○'} {r['index']:>2} {r['name']:<26} {r['ms']:7.2f} ms  "
                 f"{r['description']}", r["index"]) for r in self.rows]
        # start on the first pass after the frontend that changed something (not an "unchanged" one)
        start = D.first_informative_pass(self.trace) if self.rows else None
        self.pass_select = W.Dropdown(options=opts, value=start, layout=W.Layout(flex="1 1 auto", width="auto",
                                                                                    min_width="0"))
        self.prev_button = W.Button(description="previous", icon="arrow-left", tooltip="the pass before",
                                    layout=W.Layout(width="auto", flex="0 0 auto"))
        self.next_button = W.Button(description="next", icon="arrow-right", tooltip="the pass after",
                                    layout=W.Layout(width="auto", flex="0 0 auto"))
        self.prev_button.add_class("kl-prev")
        self.next_button.add_class("kl-next")
        self.prev_button.on_click(lambda _: self.step(-1))
        self.next_button.on_click(lambda _: self.step(1))
        self.diff_toggle = W.ToggleButton(value=False, description="diff vs previous", icon="exchange",
                                          tooltip="show the change this pass made",
                                          layout=W.Layout(width="auto", flex="0 0 auto"))
        self.side_toggle = W.ToggleButton(value=False, description="side by side", icon="columns",
                                          tooltip="the diff as two columns: before and after the pass",
                                          layout=W.Layout(width="auto", flex="0 0 auto"))
        self.side_toggle.add_class("kl-side")
        self.search = W.Text(value="", placeholder="search IR (regex or text)", continuous_update=True,
                             layout=W.Layout(width="220px", flex="0 1 auto"))
        self.only_matches = W.Checkbox(value=False, description="only matching lines", indent=False,
                                       layout=W.Layout(width="auto", flex="0 0 auto"))
        self.header = W.HTML(layout=W.Layout(width="auto"))
        # one scroll box per pane (the code box inside does not scroll: no stacked scrollbars)
        self.ir_pane = _html_pane(height="560px")
        self.source_pane = _html_pane(height="560px")
        self.ir_pane.add_class("kl-pane")
        self.source_pane.add_class("kl-pane")
        self.status = W.HTML()
        self.ir_select = W.Select(options=[], rows=8, layout=W.Layout(width="auto"))
        self.src_select = W.Select(options=[], rows=8, layout=W.Layout(width="auto"))
        self._fill_source_select()

        self.pass_select.observe(self._on_pass, names="value")
        self.diff_toggle.observe(lambda _: self.refresh(), names="value")
        self.side_toggle.observe(lambda _: self.refresh(), names="value")
        self.search.observe(lambda _: self.refresh(), names="value")
        self.only_matches.observe(lambda _: self.refresh(), names="value")
        self.ir_select.observe(self._on_ir_line, names="value")
        self.src_select.observe(self._on_src_line, names="value")

        def col(children, grow):
            return W.VBox(children, layout=W.Layout(flex=f"{grow} 1 0%", min_width="0"))

        stepper = W.HBox([self.prev_button, self.pass_select, self.next_button],
                         layout=W.Layout(width="auto", flex_flow="row nowrap", align_items="center"))
        controls = W.HBox([self.diff_toggle, self.side_toggle, self.search, self.only_matches],
                          layout=W.Layout(width="auto", flex_flow="row wrap", align_items="center"))
        self.ir_col, self.source_col = col([self.ir_pane], 3), col([self.source_pane], 2)
        panes = W.HBox([self.ir_col, self.source_col], layout=W.Layout(width="auto", align_items="flex-start"))
        pickers = W.HBox([col([W.HTML("<b>IR line</b> (pick one to see its source line)"), self.ir_select], 3),
                          col([W.HTML("<b>kernel source</b> (pick a line to see the IR it became)"),
                               self.src_select], 2)], layout=W.Layout(width="auto"))
        style = W.HTML(f"<style>{H.CSS} .kl-passes select{{font-family:{MONO};font-size:12px}}"
                       ".kl-passes .kl-pane .kl-code{max-height:none;overflow:visible;border:0;margin:0}"
                       ".kl-passes .kl-pane{border:1px solid rgba(127,127,127,.3);border-radius:3px}"
                       ".kl-passes .kl-pane>.widget-html-content{line-height:normal;height:auto;overflow:visible}"
                       "</style>")
        self.children = [style, stepper, controls, self.header, panes, pickers, self.status]
        self.add_class("kl-passes")
        self.refresh()

    # -- state
    @property
    def index(self) -> int:
        return self.pass_select.value if self.pass_select.value is not None else 0

    @property
    def ir(self) -> str:
        return self.trace.passes[self.index].ir if self.trace.passes else ""

    @property
    def record(self):
        return self.trace.passes[self.index]

    def select_pass(self, i: int):
        self.pass_select.value = i if i >= 0 else len(self.rows) + i

    def step(self, delta: int):
        """Previous (-1) / next (+1) pass; stays at the ends."""
        if self.rows:
            self.pass_select.value = min(max(self.index + delta, 0), len(self.rows) - 1)

    def select_ir_line(self, k: int):
        self.ir_select.value = k

    def select_source_line(self, line: int):
        self.src_select.value = line

    def _fill_source_select(self):
        first, last = self.src_range
        opts = [("—", None)]
        for n in range(first, last + 1):
            text = self.source_lines[n - 1] if 0 < n <= len(self.source_lines) else ""
            opts.append((f"{n:>4}  {_trunc(text.rstrip())}", n))
        self.src_select.options = opts

    def _matcher(self):
        q = self.search.value
        if not q:
            return None
        import re

        try:
            rx = re.compile(q, re.I)
            return lambda s: rx.search(s) is not None
        except re.error:
            ql = q.lower()
            return lambda s: ql in s.lower()

    # -- events
    def _on_pass(self, _):
        self.selected_ir = None
        self.refresh()

    def _on_ir_line(self, change):
        if self._busy:
            return
        self.selected_ir = change["new"]
        fwd, _ = D.op_source_map(self.record)
        loc = fwd.get(self.selected_ir) if self.selected_ir is not None else None
        self._busy = True
        try:
            self.selected_src = loc
            if loc is not None and any(v == loc for _, v in self.src_select.options):
                self.src_select.value = loc
        finally:
            self._busy = False
        self.refresh(keep_selects=True)

    def _on_src_line(self, change):
        if self._busy:
            return
        self.selected_src = change["new"]
        self.selected_ir = None
        self.refresh(keep_selects=True)

    # -- rendering
    def ir_lines_for_source(self, line: int | None) -> list[int]:
        if line is None:
            return []
        return D.op_source_map(self.record)[1].get(line, [])

    def refresh(self, keep_selects: bool = False):
        if not self.rows:
            self.ir_pane.value = H.page('<p class="kl-dim">empty trace</p>')
            return
        i = self.index
        p = self.trace.passes[i]
        r = self.rows[i]
        self.prev_button.disabled = i <= 0
        self.next_button.disabled = i >= len(self.rows) - 1
        lines = p.ir.splitlines()
        match = self._matcher()
        hits = [k for k, s in enumerate(lines) if match and match(s)]
        linked = self.ir_lines_for_source(self.selected_src)
        selected = set(linked) | ({self.selected_ir} if self.selected_ir is not None else set())
        found = r["summary"]
        badge = '<span class="kl-badge kl-yes">changed</span>' if p.changed else '<span class="kl-dim">unchanged</span>'
        self.header.value = H.page(
            f'<b>{i}. {H.esc(p.name)}</b> — {H.esc(p.description)} '
            f'<span class="kl-dim">({r["ms"]:.2f} ms{"; " + H.esc(found) if found else ""})</span> {badge}')
        self.side_toggle.disabled = not self.diff_toggle.value
        # a side-by-side diff is two columns of IR: it gets more of the width, the source pane less
        sbs = self.diff_toggle.value and self.side_toggle.value
        self.ir_col.layout.flex, self.source_col.layout.flex = ("3 1 0%", "1 1 0%") if sbs else ("3 1 0%", "2 1 0%")
        if self.diff_toggle.value and self.side_toggle.value:
            before = self.trace.passes[i - 1].ir if i > 0 else ""
            body = H.side_by_side(before, p.ir, context=None if not self.only_matches.value else 3)
        elif self.diff_toggle.value:
            before = self.trace.passes[i - 1].ir if i > 0 else ""
            body = H.diff_block(before, p.ir, context=None if not self.only_matches.value else 3, hits=match)
        elif match and self.only_matches.value:
            keep = [k for k in range(len(lines)) if k in set(hits) or k in selected]
            body = H.code_block([lines[k] for k in keep],
                                ["kl-hit" if k in hits else "kl-sel" for k in keep], numbers=[k + 1 for k in keep])
        else:
            prev = self.trace.passes[i - 1].ir if i > 0 else None
            body = H.ir_html(p.ir, H.changed_words(prev, p.ir) if p.changed else {}, hits, selected)
        self.ir_pane.value = H.page(body)
        src_sel = [self.selected_src] if self.selected_src is not None else []
        first, last = self.src_range
        self.source_pane.value = H.page("<b>kernel source</b>" + H.source_html(self.source_lines, first, last,
                                                                                 src_sel))
        if not keep_selects:
            self._busy = True
            try:
                locs = D.ir_lines_with_locs(p)
                origins = D.line_origins(p)
                shown = [k for k in range(len(lines)) if not (match and self.only_matches.value) or k in hits]
                self.ir_select.options = [(f"{k + 1:>4}  {_trunc(locs[k][0].strip(), 90)}"
                                           + _origin_text(origins[k]), k) for k in shown]
                self.ir_select.value = None
            finally:
                self._busy = False
        msg = []
        if match:
            msg.append(f"{len(hits)} line(s) match “{H.esc(self.search.value)}”")
        if self.selected_ir is not None:
            origin = D.line_origins(p)[self.selected_ir] if self.selected_ir < len(lines) else None
            msg.append(f"IR line {self.selected_ir + 1} → " + (f"{os.path.basename(origin[0])} line {origin[1]}"
                                                               if origin[0] else f"source line {origin[1]}")
                       if origin
                       else f"IR line {self.selected_ir + 1} has no source location")
        elif self.selected_src is not None:
            msg.append(f"source line {self.selected_src} → IR lines "
                       + (", ".join(str(k + 1) for k in linked) if linked else "none in this pass"))
        self.status.value = H.page('<span class="kl-dim">' + " · ".join(msg) + "</span>") if msg else ""

    def static_html(self) -> str:
        return H.passes_html(self.compiled)


# --------------------------------------------------------------------------- layouts


def _kind(v: dict) -> str:
    """'  (#L5 = #mma)': which kind of layout the type's alias stands for, in the value menu."""
    text, alias = v.get("layout") or "", v.get("alias")
    return f"  ({alias} = {text.split('<', 1)[0]})" if text.startswith("#") and alias and alias != text else ""


class LayoutView(_View):
    """Dropdown of the GPU IR's tensor values (and stores) -> the layout grid SVG and what it means."""

    title = "layout"
    needs_gpu = True

    def __init__(self, compiled, value: str | None = None, **kwargs):
        super().__init__(compiled, **kwargs)
        self.pane = _html_pane()
        note = _no_gpu_note(compiled)
        if note:
            self.values, self.dropdown = [], W.Dropdown(options=[], disabled=True)
            self.pane.value = H.page(f'<p class="kl-dim">{H.esc(note)}</p>')
            self.children = [self.dropdown, self.pane]
            return
        gpu = compiled.trace.snapshot("gpu")
        self.num_warps = getattr(compiled, "num_warps", None) or D.num_warps_of(gpu)
        self.values = D.tensor_values(gpu)
        self.accesses = D.accesses(gpu, self.num_warps)
        self.entries = []  # (label, value dict, access dict or None)
        roles = self.roles = D.dot_roles(gpu)
        for v in self.values:
            acc = next((a for a in self.accesses if a["op"] == "tt.load" and a["name"] == v["name"]), None)
            role = f"  — {roles[v['name']]}" if v["name"] in roles else ""
            self.entries.append((f"{v['name']} = {v['op']} : {v['type']}{_kind(v)}  (line {v['line']}){role}", v,
                                 acc))
        for a in self.accesses:
            if a["op"] == "tt.store":
                v = {k: a[k] for k in ("name", "type", "shape", "elem", "elem_bytes", "alias", "layout", "line",
                                       "ir_line", "defined_by")}
                v["op"] = "stored by tt.store"
                self.entries.append((f"tt.store of {a['name']} : {a['type']}{_kind(v)}  (line {a['line']})", v, a))
        start = 0
        dots = [k for k, v in enumerate(self.values) if roles.get(v["name"], "").startswith("result of")]
        if value is not None:
            v = H.pick_value(self.values, value)
            start = next(k for k, e in enumerate(self.entries) if e[1] is v)
        elif dots:  # a kernel with a tl.dot opens on its accumulator: the tensor-core layout is what people look for
            start = dots[0]
        elif any(e[2] for e in self.entries):
            start = next(k for k, e in enumerate(self.entries) if e[2])
        self.dropdown = W.Dropdown(options=[(e[0], k) for k, e in enumerate(self.entries)], value=start,
                                   description="value", layout=W.Layout(width="95%"))
        # which part of a tile bigger than the labelled window is drawn: first row / first column
        self.row0 = W.IntSlider(value=0, min=0, max=0, description="first row", continuous_update=False,
                                layout=W.Layout(width="360px"))
        self.col0 = W.IntSlider(value=0, min=0, max=0, description="first column", continuous_update=False,
                                layout=W.Layout(width="360px"))
        # zoom: the labelled 32 x 32 window, wider windows of smaller unlabelled cells, or one period of the
        # layout's pattern (what repeats across the tile)
        self.zoom = W.Dropdown(options=[("32 × 32, labelled", "32"), ("64 × 64, colours only", "64"),
                                        ("128 × 128, colours only", "128"), ("one period of the pattern", "period")],
                               value="32", description="zoom",
                               layout=W.Layout(width="300px"))
        self.zoom.add_class("kl-zoom")
        self.window_box = W.HBox([self.zoom, self.row0, self.col0], layout=W.Layout(flex_flow="row wrap"))
        self.zoom.observe(self._on_value, names="value")
        self.dropdown.observe(self._on_value, names="value")
        self.row0.observe(lambda _: self.refresh(), names="value")
        self.col0.observe(lambda _: self.refresh(), names="value")
        self.children = [self.dropdown, self.window_box, self.pane]
        self._on_value(None)

    def window(self) -> tuple:
        """(rows, columns) of the drawing the zoom asks for: a square window, or one period of the pattern (in the
        drawing's rows and columns: a 1-D tile is drawn in rows of 32)."""
        v = self.entries[self.dropdown.value][1]
        if self.zoom.value != "period":
            n = int(self.zoom.value)
            return n, n
        period = H.layout_period(v["layout"], v["shape"])
        if len(v["shape"]) == 1:
            return max(1, -(-period[0] // 32)), min(period[0], 32)
        return tuple(period)

    def _on_value(self, _):
        """A new value or zoom: the window goes back to the tile's corner; the sliders step by half a window."""
        v = self.entries[self.dropdown.value][1]
        rows, cols = H._drawing_shape(tuple(v["shape"])) if len(v["shape"]) in (1, 2) else (1, 1)
        win = self.window()
        wr, wc = min(win[0], rows), min(win[1], cols)
        with self.hold_trait_notifications():
            self.row0.max, self.row0.step = max(rows - wr, 0), max(wr // 2, 1)
            self.col0.max, self.col0.step = max(cols - wc, 0), max(wc // 2, 1)
            self.row0.value = self.col0.value = 0
        self.row0.layout.display = None if rows > wr else "none"
        self.col0.layout.display = None if cols > wc else "none"
        self.refresh()

    @property
    def current(self) -> dict | None:
        return self.entries[self.dropdown.value][1] if self.values else None

    def select(self, name: str):
        want = name if name.startswith("%") else "%" + name
        self.dropdown.value = next(k for k, e in enumerate(self.entries) if e[1]["name"] == want)

    def refresh(self):
        label, v, acc = self.entries[self.dropdown.value]
        svg = H.layout_svg(v["layout"], v["shape"], self.num_warps, vec=acc["vec"] if acc else None,
                           elem_bytes=v["elem_bytes"], title=label, origin=(self.row0.value, self.col0.value),
                           window=self.window())
        role = self.roles.get(v["name"]) if v["op"] != "stored by tt.store" else None
        self.pane.value = H.page(H.layout_info_html(v, self.num_warps, acc, role) + svg)

    def static_html(self) -> str:
        if not self.values:
            return H.page(f'<p class="kl-dim">{H.esc(_no_gpu_note(self.compiled) or "no tensor values")}</p>')
        return H.page(self.pane.value)


# --------------------------------------------------------------------------- shared memory


class SharedMemoryView(_View):
    """Memory map of the shared-memory plan (offsets x program points, barriers), the buffer table
    with bank-conflict estimates; picking a buffer highlights it and shows its IR and source line."""

    title = "shared memory"
    needs_gpu = True

    def __init__(self, compiled, limit: int = D.SMEM_LIMIT_SM90, **kwargs):
        super().__init__(compiled, **kwargs)
        self.limit = limit
        self.map = D.smem_map(compiled.trace, limit=limit, num_warps=getattr(compiled, "num_warps", None))
        self.pane = _html_pane()
        self.detail = _html_pane()
        opts = [("all buffers", None)] + [(f"{k}: {b['op']} @ {b['offset']} ({b['size']} B, "
                                           f"{D.where(b.get('line'), b.get('file'))})", k)
                                          for k, b in enumerate(self.map["buffers"])]
        # starts on the first buffer: its IR, source line and encoding are shown at once
        self.buffer_select = W.Dropdown(options=opts, value=0 if self.map["buffers"] else None,
                                        description="buffer", layout=W.Layout(width="60%"))
        self.buffer_select.observe(lambda _: self.refresh(), names="value")
        self.children = [self.buffer_select, self.pane, self.detail]
        self.refresh()

    def refresh(self):
        note = _no_gpu_note(self.compiled)
        if note:
            self.pane.value, self.detail.value = H.page(f'<p class="kl-dim">{H.esc(note)}</p>'), ""
            return
        self.pane.value = H.smem_html(self.compiled, self.limit, highlight=self.buffer_select.value, swizzles=False)
        k = self.buffer_select.value
        if k is None:
            self.detail.value = ""
            return
        b = self.map["buffers"][k]
        line = b.get("line")
        text = D.source_text(self.compiled, line, b.get("file")).strip()  # a helper's line: its own file's
        self.detail.value = H.page(
            f'<b>{H.esc(b["op"])}</b>: {H.esc(b.get("reason", ""))}<br>'
            f'IR: {H.code_block([b["ir_text"]], numbers=[(b["ir_line"] or 0) + 1])}'
            f'source {H.esc(D.where(line, b.get("file")))}: {H.code_block([text], numbers=[line], plain=True)}'
            + (H.stage_encoding_html(b) or '<p class="kl-dim">no swizzle or padding recorded for this buffer (not a '
               'tensor-core operand staging buffer)</p>'))

    def static_html(self) -> str:
        return H.smem_html(self.compiled, self.limit)


# --------------------------------------------------------------------------- code


class CodeView(_View):
    """Tabs: PTX, SASS, LLVM IR and the resource report (registers, spills, shared, occupancy), and a search box
    that marks its matches in the listing shown and counts them in each. Only the PTX and the report are sent at
    first; the SASS and the LLVM IR (megabytes of widget state on a real kernel) are rendered when their tab is
    first selected."""

    title = "code"
    needs_gpu = True
    LAZY_NOTE = "loading…"
    NAMES = ("PTX", "SASS", "LLVM IR")

    def __init__(self, compiled, **kwargs):
        super().__init__(compiled, **kwargs)
        note = _no_gpu_note(compiled)
        self._lazy: dict[int, tuple] = {}
        if note:
            self.summary = None
            self.tabs = W.Tab(children=[W.HTML(H.page(f'<p class="kl-dim">{H.esc(note)}</p>'))])
            self.tabs.titles = ("report",)
            self.children = [self.tabs]
            return
        self.summary = D.code_summary(compiled)
        asm = compiled.asm
        self.texts = [(asm.get("ptx"), "no PTX"), (self.summary["sass"], self.summary["sass_reason"]),
                      (asm.get("llir"), "no LLVM IR")]
        self.search = W.Text(value="", placeholder="search PTX, SASS, LLVM IR (regex or text)",
                             continuous_update=False, layout=W.Layout(width="320px"))
        self.search.add_class("kl-code-search")
        self.found = W.HTML()
        self.tabs = W.Tab(children=[_html_pane(self._pane_html(*self.texts[0])),
                                    _html_pane(H.page(f'<p class="kl-dim">{self.LAZY_NOTE}</p>')),
                                    _html_pane(H.page(f'<p class="kl-dim">{self.LAZY_NOTE}</p>')),
                                    _html_pane(H.page(H.report_html(self.summary)))])
        self.tabs.titles = self.NAMES + ("report",)
        self._lazy = {1: self.texts[1], 2: self.texts[2]}
        self.tabs.observe(lambda change: self.load_tab(change["new"]), names="selected_index")
        self.search.observe(lambda _: self.refresh_search(), names="value")
        self.children = [W.HBox([self.search, self.found], layout=W.Layout(align_items="center")), self.tabs]

    def _rx(self):
        import re

        q = self.search.value
        if not q:
            return None
        try:
            return re.compile(q, re.I)
        except re.error:
            return re.compile(re.escape(q), re.I)

    def _pane_html(self, text, why) -> str:
        if not text:
            return H.page(f'<p class="kl-dim">{H.esc(why)}</p>')
        return H.page(H.listing(text.splitlines(), rx=self._rx() if hasattr(self, "search") else None))

    def load_tab(self, i) -> None:
        """Render tab `i` if it is still waiting (once: its text is then dropped from the pending set)."""
        if i in self._lazy:
            text, why = self._lazy.pop(i)
            self.tabs.children[i].value = self._pane_html(text, why)

    def refresh_search(self) -> None:
        """The matches marked in every listing rendered so far, and counted (lines) in all three."""
        rx = self._rx()
        for i, (text, why) in enumerate(self.texts):
            if i not in self._lazy:
                self.tabs.children[i].value = self._pane_html(text, why)
        if rx is None:
            self.found.value = ""
            return
        counts = [sum(1 for line in (text or "").splitlines() if rx.search(line)) for text, _ in self.texts]
        self.found.value = H.page('<span class="kl-dim">matching lines: ' + " · ".join(
            f"{name} {n}" for name, n in zip(self.NAMES, counts)) + "</span>")

    def static_html(self) -> str:
        if self.summary is None:
            return H.page(f'<p class="kl-dim">{H.esc(_no_gpu_note(self.compiled))}</p>')
        return H.code_html(self.compiled, self.summary)


# --------------------------------------------------------------------------- graph


# GraphView (per-pass graph, folding, zoom, side panel) lives in graph_view.py


VIEWS = {"passes": PassesView, "layout": LayoutView, "smem": SharedMemoryView, "code": CodeView,
         "graph": GraphView, "linked": linked_view}


class LabTab(WithStaticCopy, W.Tab):
    """The lab's tab of views; its static fallback concatenates each view's HTML."""

    def static_html(self) -> str:
        return "".join(f"<h3>{H.esc(title)}</h3>" + child.static_html()
                       for title, child in zip(self.titles, self.children) if hasattr(child, "static_html"))

    def _repr_mimebundle_(self, **kwargs):
        data = dict(super()._repr_mimebundle_(**kwargs) or {})
        data["text/html"] = self.static_html()
        data["text/plain"] = f"kernellab views: {', '.join(self.titles)}"
        return data


def show(compiled, views=("passes", "linked", "layout", "smem", "code", "graph")) -> W.Tab:
    """A Tab with one live view per name in `views` (passes, layout, smem, code, graph). A kernel compiled for a
    CPU run gets its GPU stages built here (for this machine's GPU, else sm_90a; no GPU needed)."""
    unknown = [v for v in views if v not in VIEWS]
    if unknown:
        raise ValueError(f"unknown view(s) {unknown}; choose from {list(VIEWS)}")
    if any(VIEWS[v].needs_gpu for v in views):
        ensure_gpu_stages(compiled)  # first, so the passes view lists the GPU passes too
    children = [VIEWS[v](compiled) for v in views]
    tab = LabTab(children=children)
    tab.titles = tuple(c.title for c in children)
    return tab
