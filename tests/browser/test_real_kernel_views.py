"""The views on a real matmul and causal attention (compiled for sm_90a, no GPU needed) in JupyterLab in
headless Chromium, at 1280 and 1600 px: what is on screen. The pass stepper's panes are not clipped and
scroll once (no stacked scrollbars), its next button steps; the layout of attention's p·v A operand (#mma)
is drawn with legible, labelled cells; the shared-memory chart's labels do not overlap and its headline
counts the PTX's barriers; the roofline image loads; the graph's boxes are not greyed by the lab's stylesheet; the
linked view numbers each line once and colours only the source lines that made code; no page or console error.
Screenshots: artifacts/screenshots/real_*.png."""
from __future__ import annotations

import re

import pytest

from tests.browser.lab_page import CLIPPED, LIVE, run_notebook
from tests.browser.test_lab_browser import ROOT, SHOTS, lab  # noqa: F401  (the JupyterLab fixture)

pytestmark = pytest.mark.slow

NOTEBOOK = "real_kernel_views.ipynb"
CELLS = [
    f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
    "import kernellab.viz as kv\nfrom tests.viz import real_kernels as R\n"
    "from kernellab.viz.roofline import PerformanceView, Placed, recorded_results",
    "passes = kv.PassesView(R.matmul()); passes",
    "layout = kv.LayoutView(R.attention())\n"
    "layout.dropdown.value = next(k for k, e in enumerate(layout.entries) if 'A operand' in e[0]); layout",
    "smem = kv.SharedMemoryView(R.attention()); smem",
    "PerformanceView(recorded_results()[0], placed=[Placed('matmul_kernel', 2 * 4096**3, 3 * 4096 * 4096 * 2)])",
    "kv.GraphView(R.matmul())",
    "kv.LinkedView(R.attention())",
]


SCROLLERS = """pane => {
    // elements inside the pane that scroll themselves: a second scrollbar inside the pane's own
    const out = [];
    for (const el of pane.querySelectorAll('*')) {
        const cs = getComputedStyle(el);
        const y = /(auto|scroll)/.test(cs.overflowY) && el.scrollHeight > el.clientHeight + 1;
        const x = /(auto|scroll)/.test(cs.overflowX) && el.scrollWidth > el.clientWidth + 1;
        if (x || y) out.push(el.className || el.tagName);
    }
    return out;
}"""

OUTSIDE = """view => {
    // elements of the view that reach past the right edge of the cell's output area (clipped there)
    const area = view.closest('.jp-OutputArea-output').getBoundingClientRect();
    const out = [];
    for (const el of [view, ...view.querySelectorAll('*')]) {
        const r = el.getBoundingClientRect();
        const inside = el.parentElement && el.parentElement.closest('.kl-pane');  // scrolled by its pane
        if (r.width && r.right > area.right + 1 && !inside) out.push(
            `${el.tagName}.${String(el.className).slice(0, 60)} right=${Math.round(r.right)} area=${Math.round(area.right)}`);
    }
    return out.slice(0, 12);
}"""

OVERLAPS = """svg => {
    const boxes = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim()).map(t => {
        const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.top, r.right, r.bottom];
    });
    const out = [];
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i], b = boxes[j];
        if (a[1] < b[3] - 0.5 && b[1] < a[3] - 0.5 && a[2] < b[4] - 0.5 && b[2] < a[4] - 0.5) out.push([a[0], b[0]]);
    }
    return out;
}"""





@pytest.fixture(scope="module")
def notebook_page(lab):  # noqa: F811
    ready = "!!document.querySelector('.kl-passes .kl-pane .kl-code')"
    with run_notebook(lab, NOTEBOOK, CELLS, ready, 'real') as pg:
        yield pg


def _at(page, width):
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(600)
    return page.locator(".jp-NotebookPanel .jp-WindowedPanel-outer, .jp-NotebookPanel .jp-Notebook").first \
        .bounding_box()


@pytest.mark.parametrize("width", [1280, 1600])
def test_pass_stepper_panes_fit_and_step(notebook_page, width):
    page = notebook_page
    nb = _at(page, width)
    view = page.locator(".kl-passes").first
    view.scroll_into_view_if_needed()
    panes = view.locator(".kl-pane")
    assert panes.count() == 2
    ir, src = panes.nth(0).bounding_box(), panes.nth(1).bounding_box()
    right = min(nb["x"] + nb["width"], width)
    for box in (ir, src):
        assert box["x"] >= nb["x"] - 1 and box["x"] + box["width"] <= right + 1, (box, nb)  # not clipped
    assert ir["width"] >= 0.45 * (right - nb["x"]) - 80 and src["width"] >= 220, (ir, src)
    assert abs(ir["y"] - src["y"]) < 2  # side by side
    for k in range(2):
        assert panes.nth(k).evaluate(SCROLLERS) == [], "a scrollbar inside a pane"
    assert view.evaluate(OUTSIDE) == []
    header = view.locator(".widget-html").filter(has_text=" — ").first
    first = header.inner_text()
    # opens on the first pass after the frontend that changed something (which one depends on the kernel)
    assert " changed" in first and "unchanged" not in first and "frontend" not in first
    n, name = re.match(r"\s*(\d+)\. (\w+) —", first).groups()
    n = int(n)
    opened = f"{n}. {name} —"
    view.locator("button", has_text="diff vs previous").click()  # the opened pass changed: words are marked
    view.locator(".kl-wadd").first.wait_for(timeout=20_000)
    view.screenshot(path=str(SHOTS / f"real_passes_{width}.png"))
    view.locator("button", has_text="diff vs previous").click()  # back off
    view.locator("button.kl-next").click()
    page.wait_for_function(f"() => !document.querySelector('.kl-passes').innerText.includes({opened!r})",
                           timeout=20_000)
    assert f"{n + 1}. " in view.inner_text()
    view.locator("button.kl-prev").click()
    page.wait_for_function(f"() => document.querySelector('.kl-passes').innerText.includes({opened!r})",
                           timeout=20_000)


@pytest.mark.parametrize("width", [1280, 1600])
def test_mma_layout_cells_are_legible_and_labelled(notebook_page, width):
    page = notebook_page
    _at(page, width)
    grid = page.locator(f"svg.kl-grid{LIVE}").first
    grid.scroll_into_view_if_needed()
    cell = grid.locator("rect.c").first.bounding_box()
    assert cell["height"] >= 16 and cell["width"] >= 22, cell  # drawn near 30 x 22 px, not squashed
    box = grid.bounding_box()
    assert box["height"] >= 32 * 16, box
    labels = grid.evaluate("s => [...s.querySelectorAll('tspan')].map(t => t.textContent)")
    assert sum(bool(re.fullmatch(r"t\d+", t)) for t in labels) == 32 * 32
    assert sum(bool(re.fullmatch(r"r\d+", t)) for t in labels) == 32 * 32
    page.locator(".jp-CodeCell", has=page.locator(f"svg.kl-grid{LIVE}")).first.screenshot(
        path=str(SHOTS / f"real_layout_{width}.png"))


@pytest.mark.parametrize("width", [1280, 1600])
def test_smem_chart_and_headline(notebook_page, width):
    page = notebook_page
    _at(page, width)
    cell = page.locator(".jp-CodeCell", has_text="SharedMemoryView").first
    cell.scroll_into_view_if_needed()
    head = cell.locator(f"h4{LIVE}", has_text="shared memory:").first.inner_text()
    assert re.search(r"\b8 barrier\(s\) in the PTX", head), head  # attention's PTX: 8 bar.sync
    chart = cell.locator(f"svg{LIVE}").filter(has=page.locator("line[stroke-dasharray]")).first
    assert chart.bounding_box()["width"] > 300
    assert chart.evaluate(OVERLAPS) == []
    sel = cell.locator("select").first
    assert sel.evaluate("s => s.selectedIndex") == 1  # the first buffer, after "all buffers"
    assert "buffer at line" in cell.inner_text()  # its swizzle panel
    cell.screenshot(path=str(SHOTS / f"real_smem_{width}.png"))


def _drawn_view(page, view_class, drawn):
    """The first live view of `view_class` at 1280 px, scrolled into sight, once an element `drawn` is in it."""
    _at(page, 1280)
    view = page.locator(f"{view_class}{LIVE}").first
    view.scroll_into_view_if_needed()
    view.locator(drawn).first.wait_for(timeout=30_000)
    return view


def test_roofline_image(notebook_page):
    page = notebook_page
    _at(page, 1280)
    img = page.locator(".kl-perf img").first
    img.scroll_into_view_if_needed()
    assert img.evaluate("i => i.naturalWidth") > 100
    assert "/work/" not in page.locator(".kl-perf").first.inner_text()
    img.screenshot(path=str(SHOTS / "real_roofline_1280.png"))


def test_graph_boxes_are_drawn_at_full_strength(notebook_page):
    page = notebook_page
    view = _drawn_view(page, ".kl-graph", "g.node")
    faded = view.evaluate("""g => [...g.querySelectorAll('g.node')].filter(n => {
        for (let e = n; e && e !== g; e = e.parentElement) if (+getComputedStyle(e).opacity < 1) return true;
        return false; }).map(n => n.textContent.trim().slice(0, 30))""")
    assert faded == [], faded
    view.screenshot(path=str(SHOTS / "real_graph_1280.png"))


def test_linked_lines_are_numbered_once_and_blank_lines_uncoloured(notebook_page):
    page = notebook_page
    view = _drawn_view(page, ".kl-lk", ".kl-lk-l")
    doubled = view.evaluate("""v => [...v.querySelectorAll('.kl-lk-l')].slice(0, 200).filter(l =>
        !['none', 'normal', ''].includes(getComputedStyle(l, '::before').content)).length""")
    assert doubled == 0
    src = view.locator(".kl-lk-pane").first
    blank_coloured = src.evaluate("""p => [...p.querySelectorAll('.kl-lk-l')].filter(l =>
        l.textContent.replace(/^\\s*\\d+/, '').trim() === '' && l.hasAttribute('data-s')).length""")
    assert blank_coloured == 0
    view.screenshot(path=str(SHOTS / "real_linked_1280.png"))


@pytest.mark.parametrize("width", [1280, 1600])
def test_prose_is_not_cut_off(notebook_page, width):
    """The shared-memory view's notes ran under the pane's edge: a long IR line in its code box widened the pane's
    content past the pane (the box scrolled, the text beside it was cut)."""
    page = notebook_page
    _at(page, width)
    for name in ("SharedMemoryView", "LayoutView", "PassesView"):
        cell = page.locator(".jp-CodeCell", has_text=name).first
        cell.scroll_into_view_if_needed()
        view = cell.locator(f".jp-OutputArea-output:not(.kl-static-copy *) .widget-vbox{LIVE}").first
        assert view.evaluate(CLIPPED) == [], name


def test_no_page_or_console_errors(notebook_page):
    assert notebook_page.errors == [] and notebook_page.console_errors == [], \
        (notebook_page.errors, notebook_page.console_errors)
