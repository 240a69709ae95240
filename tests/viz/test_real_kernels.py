"""The lab's views on the kernels people come to understand — a 128x128x64 matmul and causal flash
attention, compiled for sm_90a without a GPU — not only on a vector add: the pass stepper, the layout
view at real tile sizes, the shared-memory view and the roofline. HTML / data assertions; the browser
test (tests/browser) checks what is on screen."""
from __future__ import annotations

import html
import json
import re

import pytest

from kernellab.viz import data as D
from kernellab.viz import html as H
from tests.viz import real_kernels as R
from tests.viz.test_html import cell_labels as H_cell_labels

W = pytest.importorskip("ipywidgets")
import kernellab.viz as kv  # noqa: E402

KERNELS = ["matmul", "attention"]


def text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def marked(markup: str, cls: str) -> list[str]:
    """Texts of the word marks `cls` in rendered HTML (marks wrap token spans, one level deep)."""
    return [text(m) for m in re.findall(rf'<span class="{cls}">((?:<span class="\w+">[^<]*</span>|[^<])*)</span>',
                                        markup)]


# ----------------------------------------------------------------------------------------- pass stepper
def test_word_ranges_of_an_appended_layout():
    before = "%x = tt.load %p : tensor<128x64xf16> loc(3:8)"
    after = "%x = tt.load %p : tensor<128x64xf16, #L3> loc(3:8)"
    dels, adds = D.word_ranges(before, after)
    assert dels == [] and [after[i:j] for i, j in adds] == [", #L3"]
    html_ = H.highlight(after, adds)
    assert marked(html_, "kl-wadd") == [", #L3"] and text(html_) == after


@pytest.mark.parametrize("name", KERNELS)
def test_stepper_opens_on_the_first_pass_that_changed_after_the_frontend(name):
    ck = getattr(R, name)()
    v = kv.PassesView(ck)
    first = next(i for i, p in enumerate(ck.trace.passes) if i > 0 and p.changed)
    assert v.index == first == D.first_informative_pass(ck.trace)
    assert ck.trace.passes[v.index].name != "insert_barriers" and "unchanged" not in v.header.value
    assert v.prev_button.disabled is False
    # next / previous step through every pass and stop at the ends
    v.select_pass(0)
    assert v.prev_button.disabled and not v.next_button.disabled
    for k in range(1, len(ck.trace.passes)):
        v.next_button.click()
        assert v.index == k and ck.trace.passes[k].name in v.header.value
    assert v.next_button.disabled
    v.next_button.click()
    assert v.index == len(ck.trace.passes) - 1
    v.prev_button.click()
    assert v.index == len(ck.trace.passes) - 2


@pytest.mark.parametrize("name", KERNELS)
def test_assign_layouts_diff_marks_only_the_added_words(name):
    ck = getattr(R, name)()
    v = kv.PassesView(ck)
    i = [p.name for p in ck.trace.passes].index("assign_layouts")
    v.select_pass(i)
    v.diff_toggle.value = True
    pane = v.ir_pane.value
    adds = marked(pane, "kl-wadd")
    assert len(adds) >= 10
    # lines whose only change is the appended layout: just ", #Lk" is marked, on both the + and the - side
    layout_only = [w for w in adds if re.fullmatch(r", #L\d+", w)]
    assert len(layout_only) >= 5, adds[:20]
    words = D.ir_diff_words(ck.trace.passes[i - 1].ir, ck.trace.passes[i].ir)
    paired = [(t, line, r) for t, line, r in words if t == "add" and r]
    assert paired and all(sum(b - a for a, b in r) < len(line) / 2 for _, line, r in paired)
    # the plain IR view marks the same words inside its changed lines
    v.diff_toggle.value = False
    assert "kl-changed" in v.ir_pane.value and set(layout_only) <= set(marked(v.ir_pane.value, "kl-wadd"))


def test_static_passes_html_marks_words():
    ck = R.matmul()
    # the full export (every pass) marks the layouts assign_layouts appended; the saved fallback shows only the
    # pass the live view opens on, its changed words marked too
    assert re.search(r'<span class="kl-wadd">(?:<span class="\w+">)?, (?:</span>)?', H.passes_html(ck, full=True))
    assert 'class="kl-wadd"' in H.passes_html(ck) and "assign_layouts</b>" in H.passes_html(ck)


@pytest.mark.parametrize("name", KERNELS)
def test_code_view_sends_ptx_first_and_the_llvm_ir_when_its_tab_is_selected(name):
    """A default cell on a real kernel was megabytes of widget state and saved HTML (the LLVM IR tab and every
    pass's IR): only the visible PTX and the report go at first, the rest on demand."""
    from ipywidgets.embed import dependency_state

    ck = getattr(R, name)()
    v = kv.CodeView(ck)
    state = len(json.dumps(dependency_state([v])))
    assert state < 250_000, state  # the PTX listing: about 1.6x its text (a span per line and token was 5x)
    assert len(v.static_html()) < 100_000 and ".entry" in v.static_html() and "live notebook" in v.static_html()
    assert len(kv.PassesView(ck).static_html()) < 150_000
    llir = v.tabs.children[2]
    assert "loading" in llir.value and "define" not in llir.value
    v.tabs.selected_index = 2
    text = html.unescape(re.sub(r"<[^>]+>", "", llir.value))
    assert "define " in text and ck.asm["llir"].splitlines()[-1].strip() in text
    v.tabs.selected_index = 1
    assert "loading" not in v.tabs.children[1].value
    assert len(json.dumps(dependency_state([v]))) > state + 1_000_000  # what was held back


def test_passes_panes_scroll_once():
    """Each pane is the one scroll box: the code box inside it neither scrolls nor caps its height."""
    v = kv.PassesView(R.matmul())
    style = v.children[0].value
    assert ".kl-pane .kl-code{max-height:none;overflow:visible" in style
    assert v.ir_pane.layout.overflow == "auto" and v.source_pane.layout.overflow == "auto"
    assert "kl-pane" in v.ir_pane._dom_classes and "kl-pane" in v.source_pane._dom_classes


# ----------------------------------------------------------------------------------------- layouts at real sizes
def cell_labels(svg: str) -> list[tuple[int, int]]:
    """(lane, register) of every labelled cell of a layout grid: each row's lane and register labels."""
    return H_cell_labels(svg)


def test_a_4x128_tile_is_drawn_at_a_legible_size():
    lay = "#blocked<[1, 4], [1, 32], [4, 1], [1, 0]>"
    svg = H.layout_svg(lay, (4, 128), 4, vec=4)
    grid = re.search(r'<svg class="klg\d+ kl-grid" viewBox="0 0 (\d+) (\d+)"', svg)
    w, h = int(grid.group(1)), int(grid.group(2))
    assert w <= 1200 and h >= 4 * 22  # 32 columns of 30 px: fits a 1280 px notebook unscaled
    assert len(cell_labels(svg)) == 4 * 32
    assert "columns 0–31 of 128" in svg and 'class="kl-overview"' in svg
    # the window moves: columns 96..127 hold lanes 24..31
    right = H.layout_svg(lay, (4, 128), 4, origin=(0, 96))
    assert {t for t, _ in cell_labels(right)} == set(range(24, 32))


@pytest.mark.parametrize("name,role", [("matmul", "result of the dot"), ("attention", "A operand of the dot")])
def test_mma_values_of_a_dot_are_labelled_with_lane_and_register(name, role):
    ck = getattr(R, name)()
    v = kv.LayoutView(ck)
    k = next(k for k, e in enumerate(v.entries) if role in e[0])
    v.dropdown.value = k
    assert "#mma" in v.current["layout"]
    pane = v.pane.value
    labels = cell_labels(pane)
    assert len(labels) == 32 * 32  # a 32 x 32 window of the 128 x N tile, every cell labelled
    # the mma fragment: in row 0, lane t holds columns 2(t%4), 2(t%4)+1 of each 8 columns, registers r, r+1
    row0 = labels[:32]
    assert [t for t, _ in row0[:8]] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert row0[0][1] + 1 == row0[1][1]
    assert "lane t holds rows t/4 and" in text(pane) and "pattern repeats every 64 x" in text(pane)
    assert v.row0.layout.display is None and v.row0.max > 0  # the tile is taller than the window: a slider
    before = pane
    v.row0.value = 16  # rows 16..47: warp 1's rows
    assert v.pane.value != before and "rows 16–47" in text(v.pane.value)
    assert 'class="c w1"' in v.pane.value


# ----------------------------------------------------------------------------------------- shared memory
def svg_text_boxes(svg: str) -> list[tuple[str, tuple]]:
    """(text, approximate box) of every <text> of a chart: 6 px per character at 10 px, by its anchor."""
    out = []
    for attrs, t in re.findall(r"<text([^>]*)>(.*?)</text>", svg):
        x, y = float(re.search(r' x="([-\d.]+)"', attrs).group(1)), float(re.search(r' y="([-\d.]+)"', attrs).group(1))
        t, w = text(t), 6 * len(text(t))
        anchor = (re.search(r'text-anchor="(\w+)"', attrs) or [None, "start"])[1]
        x0 = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        out.append((t, (x0, y - 9, x0 + w, y)))
    return out


@pytest.mark.parametrize("name", ["matmul", "attention", "softmax", "layer_norm"])
def test_smem_headline_counts_the_ptx_barriers(name):
    ck = getattr(R, name)()
    n = len(re.findall(r"^\s*(?:@!?%\w+\s+)?(?:bar|barrier)\.", ck.asm["ptx"], re.M))
    assert n >= 2  # softmax and layer norm too: their reductions synchronize through shared memory
    head = re.search(r"<h4>(.*?)</h4>", H.smem_html(ck)).group(1)
    assert re.search(rf"\b{n} barrier\(s\) in the PTX", head), head
    assert head == re.search(r"<h4>(.*?)</h4>", kv.SharedMemoryView(ck).pane.value).group(1)


@pytest.mark.parametrize("name", ["matmul", "attention"])
def test_smem_chart_labels_do_not_collide(name):
    ck = getattr(R, name)()
    m = D.smem_map(ck.trace, num_warps=ck.num_warps)
    svg = H.smem_svg(m["buffers"], m["total"], m["limit"], m["barriers"], m["points"])
    labels = svg_text_boxes(svg)
    assert not any(t == "bar" or "barbar" in t for t, _ in labels) and len(labels) >= 5
    for i, (ta, a) in enumerate(labels):  # no two labels share pixels
        for tb, b in labels[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (ta, a, tb, b)
    legend = H.smem_legend(m["buffers"], m["barriers"])
    for k, b in enumerate(m["buffers"]):
        assert f"{k}: {b['op']}" in text(legend)


@pytest.mark.parametrize("name", ["matmul", "attention"])
def test_smem_buffers_and_barriers_sit_at_their_ops(name):
    """The pipelines insert barriers before the plan is made: each buffer's IR line is still the op that owns
    it (its offset and size printed on it), and each barrier's line is a barrier."""
    ck = getattr(R, name)()
    m = D.smem_map(ck.trace)
    lines = ck.asm["gpu"].splitlines()
    assert m["buffers"] and m["barriers"]
    for b in m["buffers"]:
        line = lines[b["ir_line"]]
        assert re.match(r"^\s*(?:%[\w.]+(?:, %[\w.]+)* = )?(\S+)", line).group(1) == b["op"]
        assert f"smem_offset = {b['offset']}" in line and f"smem_bytes = {b['size']}" in line
        assert b["ir_text"] == re.sub(r" loc\(\d+:\d+\)$", "", line).strip()
    stage_bufs = [b for b in m["buffers"] if b["op"] == "ttg.local_alloc"]
    assert stage_bufs and all(b["encoding"] and b["bank"]["ways"] for b in stage_bufs)
    for bar in m["barriers"]:
        assert re.search(r"\bttg\.(barrier|async_wait)\b", lines[bar["ir_line"]])
    points = [b["point"] for b in m["barriers"]]
    assert points == sorted(points) and max(points) < m["points"]


@pytest.mark.parametrize("name", ["matmul", "attention"])
def test_smem_view_starts_on_the_first_buffer_and_the_swizzle_follows(name):
    ck = getattr(R, name)()
    v = kv.SharedMemoryView(ck)
    assert v.buffer_select.value == 0
    bufs = v.map["buffers"]
    assert "buffer at line" not in v.pane.value  # the encodings live in the detail pane, for the picked buffer
    for k, b in enumerate(bufs):
        v.buffer_select.value = k
        d = text(v.detail.value)
        if H.stage_encoding_html(b):
            assert f"buffer at line {b.get('line')}" in d and d.count("buffer at line") == 1
            assert text(H.stage_encoding_html(b)) in d
        else:
            assert "no swizzle or padding recorded" in d


# ----------------------------------------------------------------------------------------- roofline
def _recorded():
    from kernellab.viz.roofline import recorded_results

    res = recorded_results()
    if not res:
        pytest.skip("no recorded results (benchmarks/results)")
    return res[0]


def test_roofline_legend_is_off_the_data_and_the_caption_has_no_local_path():
    pytest.importorskip("matplotlib")
    from kernellab.viz.roofline import PerformanceView, Placed

    rec = _recorded()
    view = PerformanceView(rec, placed=[Placed("matmul_kernel", 2 * 4096 ** 3, 3 * 4096 * 4096 * 2)])
    fig = view.figures()[0]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(canvas.get_renderer())
    axbox = ax.get_window_extent(canvas.get_renderer())
    assert legend.x0 >= axbox.x1, "the legend sits on the axes"
    assert legend.x1 <= fig.bbox.x1 and axbox.x0 > 0 and axbox.y1 < fig.bbox.y1, "cut at the figure's edge"
    labels = [t for t in fig.axes[0].texts + [fig.axes[0].title, fig.axes[0].xaxis.label, fig.axes[0].yaxis.label]]
    for t in labels:  # title, axis labels, annotations: inside the figure
        box = t.get_window_extent(canvas.get_renderer())
        assert box.x0 >= -1 and box.y0 >= -1 and box.y1 <= fig.bbox.y1 + 1, t.get_text()
    for p in view.points:
        x, y = ax.transData.transform((p.intensity, p.flops_per_s))
        assert not legend.contains(x, y)
    cap = view._caption()
    assert "recorded on" in cap and "benchmarks/results/" in cap
    assert not re.search(r"(^|[\s(])/(?:work|home|tmp|root|Users)/", cap), cap
    html_ = view._repr_mimebundle_()["text/html"]
    assert "/work/" not in html_.split("</div>")[-2] and str(rec["source"]) not in html_


def test_the_users_kernel_is_placed_by_its_intensity_on_the_recorded_roofline():
    pytest.importorskip("matplotlib")
    from kernellab.viz.roofline import PerformanceView, Placed

    rec = _recorded()
    k = Placed("matmul_kernel", 2 * 4096 ** 3, 3 * 4096 * 4096 * 2)
    view = PerformanceView(rec, placed=[k])
    ax = view.figures()[0].axes[0]
    assert "recorded on " + rec["gpu"] in ax.get_title()
    lines = [ln for ln in ax.get_lines() if "not timed" in ln.get_label()]
    assert len(lines) == 1 and lines[0].get_xdata()[0] == pytest.approx(k.intensity)
    assert k.bound(view.peaks) == pytest.approx(min(view.peaks["bytes_per_s"] * k.intensity,
                                                    view.peaks["flops_per_s"]))
    assert any("matmul_kernel" in t.get_text() for t in ax.texts)


def test_attention_smem_buffers_quote_their_own_source_lines():
    """Attention's K and V stage buffers come from `_attn_fwd_inner`, an @jit helper above the kernel in its file
    (inlined twice: the causal kernel's two key loops): the view quotes those lines (the loads), not the blank
    lines the kernel's own function text has there; the conversion quotes the store."""
    ck = R.attention()
    v = kv.SharedMemoryView(ck)
    for k, b in enumerate(v.map["buffers"]):
        v.buffer_select.value = k
        quoted = D.source_text(ck, b["line"], b.get("file")).strip()
        want = {"ttg.local_alloc": "tl.load(", "ttg.convert_layout": "tl.store("}[b["op"]]
        assert want in quoted, (k, b["line"], quoted)
        assert quoted in text(v.detail.value)


@pytest.mark.parametrize("name", ["matmul", "attention"])
def test_listing_is_small_and_keeps_the_text(name):
    """The Code view's listings hold the text exactly (numbers in their own column) in under twice its size."""
    ptx = getattr(R, name)().asm["ptx"]
    out = H.listing(ptx.splitlines())
    assert len(out) < 2 * len(ptx), (len(out), len(ptx))
    body = re.search(r'<div class="kl-lst">(.*)</div></div></div>$', out, re.S).group(1)
    assert html.unescape(re.sub(r"<[^>]+>", "", body)) == "\n".join(ptx.splitlines())
    nums = re.search(r'<div class="kl-lsn">([^<]*)</div>', out).group(1).split("\n")
    assert nums == [str(k) for k in range(1, len(ptx.splitlines()) + 1)]
    assert "<b>mma" in out or "<b>wgmma" in out  # opcodes coloured


def test_code_view_search_marks_and_counts_in_every_listing():
    ck = R.matmul()
    v = kv.CodeView(ck)
    v.search.value = "cp.async.wait"
    n_ptx = sum("cp.async.wait" in line for line in ck.asm["ptx"].splitlines())
    assert n_ptx and v.tabs.children[0].value.count("<mark>") == n_ptx
    assert f"PTX {n_ptx}" in text(v.found.value) and "LLVM IR" in text(v.found.value)
    assert "loading" in v.tabs.children[2].value  # a tab not opened yet stays unrendered
    v.tabs.selected_index = 2
    n_ll = sum(bool(re.search("cp.async.wait", line, re.I)) for line in ck.asm["llir"].splitlines())
    assert v.tabs.children[2].value.count("<mark>") >= n_ll > 0
    v.search.value = "("  # not a regex: searched as text
    assert "<mark>(</mark>" in v.tabs.children[0].value
    v.search.value = ""
    assert "<mark>" not in v.tabs.children[0].value and v.found.value == ""


def test_the_roofline_is_drawn_in_under_a_second():
    """The roofline of a --bench cell (recorded results and the user's kernel placed) once matplotlib is loaded:
    under a second of CPU time (about 0.3 s; CPU time, not wall time, so a machine busy with other work does not
    fail it)."""
    pytest.importorskip("matplotlib")
    import time

    from kernellab.viz.roofline import PerformanceView, Placed

    rec = _recorded()
    PerformanceView(rec)._repr_mimebundle_()  # matplotlib's first use: imports and fonts
    t0 = time.process_time()
    bundle = PerformanceView(rec, placed=[Placed("matmul_kernel", 2 * 4096 ** 3, 3 * 4096 * 4096 * 2)]) \
        ._repr_mimebundle_()
    took = time.process_time() - t0
    assert "image/png" in bundle and took < 1.0, took


def test_side_by_side_diff_pairs_the_changed_lines():
    """The pass stepper's side-by-side diff on assign_layouts of the real matmul: every line of the IR before the
    pass on the left and after it on the right, in order; a changed line beside its replacement, only the
    appended layout marked."""
    ck = R.matmul()
    v = kv.PassesView(ck)
    i = next(k for k, p in enumerate(ck.trace.passes) if p.name == "assign_layouts")
    v.select_pass(i)
    v.diff_toggle.value = True
    assert not v.side_toggle.disabled
    v.side_toggle.value = True
    out = v.ir_pane.value
    assert '<table class="kl-sbs">' in out
    rows = re.findall(r"<tr>(.*?)</tr>", out.split('<table class="kl-sbs">')[1])[1:]
    left = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in
            (re.findall(r'<td class="kl-n">\d*</td><td[^>]*>(.*?)</td>', r)[0] for r in rows)]
    right = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in
             (re.findall(r'<td class="kl-n">\d*</td><td[^>]*>(.*?)</td>', r)[1] for r in rows)]
    assert [x for x in left if x] == [x for x in ck.trace.passes[i - 1].ir.splitlines() if x]
    assert [x for x in right if x] == [x for x in ck.trace.passes[i].ir.splitlines() if x]
    paired = [r for r in rows if 'class="kl-del"' in r and 'class="kl-add"' in r and "kl-wadd" in r]
    assert len(paired) > 10
    for r in paired:  # the words the pass changed are marked, not the line
        cell_ = re.findall(r'<td class="kl-add">(.*)</td>', r)[0]
        marked = "".join(text(m) for m in re.findall(r'<span class="kl-wadd">((?:<span[^>]*>[^<]*</span>|[^<])*)</span>',
                                                     cell_))
        assert 0 < len(marked) < len(text(cell_)) / 2, (marked, text(cell_))
    assert any("#L" in text(r) for r in paired)
    v.diff_toggle.value = False
    assert v.side_toggle.disabled and '<table class="kl-sbs">' not in v.ir_pane.value


def test_layout_zoom_and_one_period():
    """The layout view zooms out to wider windows of unlabelled cells and to one period of the pattern: the
    attention store's #blocked<[1, 8], [4, 8], [4, 1], [1, 0]> tile repeats every 16 x 64 elements."""
    v = kv.LayoutView(R.attention())
    v.dropdown.value = next(k for k, e in enumerate(v.entries) if e[0].startswith("tt.store"))
    assert len(cell_labels(v.pane.value)) == 32 * 32
    v.zoom.value = "64"
    assert len(re.findall(r'<rect class="c w\d q\d+"', v.pane.value)) == 64 * 64 and not cell_labels(v.pane.value)
    # colours only: the lane is the shade, so the threads still show (the warp's colour alone drew bands)
    assert len(set(re.findall(r'<rect class="c w\d q(\d+)"', v.pane.value))) == 32 and "shade: lane" in v.pane.value
    v.zoom.value = "period"
    period = H.layout_period(v.current["layout"], v.current["shape"])
    assert period == (16, 64) and v.window() == period
    assert len(cell_labels(v.pane.value)) == 16 * 64 and "rows 0–15 of 128" in v.pane.value
    assert v.row0.step == 8 and v.col0.layout.display == "none"  # the period spans every column


# ----------------------------------------------------------------------------------------- seen in a browser
# What a look at the views in Chromium found (benchmarks/tools/lab_screenshots.py); the browser test checks the
# same on screen (tests/browser/test_real_kernel_views.py).
@pytest.mark.parametrize("name", KERNELS)
def test_layout_view_opens_on_the_dot_result_in_its_mma_layout(name):
    v = kv.LayoutView(getattr(R, name)())
    label, value, _ = v.entries[v.dropdown.value]
    assert "result of the dot" in label and value["layout"].startswith("#mma"), label
    assert "= #mma)" in label  # the menu says what the alias (#L5) stands for
    assert all("(#L" in e[0] and " = #" in e[0] for e in v.entries if e[1].get("alias")), v.entries[0][0]


def test_graph_boxes_do_not_take_a_class_the_lab_stylesheet_styles():
    """The graph's boxes were `class="kl-n ..."`: html.CSS's line-number class (opacity .45) greyed every box."""
    from kernellab.viz import graph as G
    from kernellab.viz.graph_model import build_graph

    dot = G.graph_dot(build_graph(R.matmul().trace.snapshot("tile")))
    classes = set(re.findall(r'class="([^"]+)"', dot))
    styled = set(re.findall(r"\.(kl-[\w-]+)", H.CSS))
    assert classes and all(not (set(c.split()) & styled) for c in classes), (classes, styled)


def test_linked_static_copy_styles_only_itself_and_blank_lines_are_not_coloured():
    """The static copy's stylesheet stays in the page under the live view: unscoped, its `::before` line numbers
    doubled every live line's number."""
    from kernellab.viz import linked as L

    rules = [r for r in L.STATIC_CSS.replace("\n", "").split("}") if r.strip()]
    assert rules and all(r.strip().startswith(".kl-lk.kl-lk-static") for r in rules), rules
    data = L.linked_data(R.attention())
    src = {x["n"]: x for x in data["source"] if x["n"] is not None}
    blank = [x for x in src.values() if not x["text"].strip()]
    assert blank and not any(x["used"] for x in blank)
    assert any(x["used"] for x in src.values() if "tl.dot" in x["text"])
    assert 'class="kl-lk kl-lk-static"' in L.linked_html(data)


def test_recorded_matmul_and_attention_rows_are_on_the_roofline():
    """Their files record FLOPs and no bytes: the newest file (attention) drew "no points" in every %%kernel cell's
    perf view on a machine without a GPU."""
    from kernellab.viz.magic import pick_recorded
    from kernellab.viz.roofline import estimate_bytes, points_from_rows, recorded_results

    assert estimate_bytes({"case": "float16 1024x512x256"}) == (1024 * 256 + 256 * 512) * 2 + 1024 * 512 * 2
    assert estimate_bytes({"case": "fp8e4m3 64x64x64"}) == 2 * 64 * 64 + 64 * 64 * 2
    row = {"case": "hd64 s1024 full", "batch": 4, "heads": 16, "seq": 1024, "head_dim": 64}
    assert estimate_bytes(row) == 4 * 4 * 16 * 1024 * 64 * 2 and estimate_bytes({**row, "mode": "bwd"}) == 2 * estimate_bytes(row)
    assert estimate_bytes({"case": "softmax fp32 M=1 N=2"}) is None
    results = recorded_results()
    if not results:
        pytest.skip("no recorded results in this checkout")
    for kernel, kind in ((R.matmul(), "matmul"), (R.attention(), "attention")):
        r = pick_recorded(results, type("K", (), {"__name__": kernel.name})(), kernel)
        assert r["file"].endswith(f"-{kind}.json") and points_from_rows(r["rows"]), r["file"]


def test_roofline_labels_never_cut_a_word_and_never_overlap():
    from kernellab.viz.roofline import Point, _annotations, recorded_peaks, roofline_figure

    pts = [Point(c, "kernellab", 1e12, 1e9, s) for c, s in (("hd64 s1024 full", 1e-2), ("hd128 s1024 full", 2e-2))]
    assert [t for t, _ in _annotations(pts)] == ["hd64 s1024 full (+1)"]
    pts = [Point(f"case{k} fp16", impl, 1e12 * (1 + k / 50), 1e10, 1e-2) for k in range(12)
           for impl in ("kernellab", "torch")]
    fig = roofline_figure(pts, recorded_peaks("NVIDIA H200"))
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    boxes = [t.get_window_extent(renderer) for t in fig.axes[0].texts]
    assert all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_only_an_mma_value_a_dot_reads_as_its_a_operand_says_so():
    """Attention's p·v A operand (%98 in #mma) feeds the wgmma A fragment as it is; its accumulator and the QK
    result do not (the layout info said "as a dot operand" for every #mma value)."""
    ck = R.attention()
    gpu = ck.trace.snapshot("gpu")
    roles = D.dot_roles(gpu)
    values = {v["name"]: v for v in D.tensor_values(gpu)}
    a_op = next(n for n, r in roles.items() if r.startswith("A operand") and "#mma" in values.get(n, {}).get("layout", ""))
    acc = next(n for n, r in roles.items() if r.startswith("accumulator") and "#mma" in values.get(n, {}).get("layout", ""))
    plain = next(n for n, v in values.items() if "#mma" in v["layout"] and n not in roles)
    info = {n: H.layout_info_html(values[n], 4, None, roles.get(n)) for n in (a_op, acc, plain)}
    assert "as a dot operand" in info[a_op] and roles[a_op] in info[a_op]
    assert "as a dot operand" not in info[acc] and "as the accumulator" in info[acc]
    assert "as a dot operand" not in info[plain] and "in a dot" not in info[plain]
    layout = kv.LayoutView(ck)
    layout.select(acc)
    assert "as a dot operand" not in layout.pane.value and "as the accumulator" in layout.pane.value
    layout.select(a_op)
    assert "as a dot operand" in layout.pane.value
