"""The graph view on the real matmul and causal attention in JupyterLab in headless Chromium, at 1280 and 1600
px: no box's text runs out of its box, a click on a box shows its source line and the op in the side panel,
the zoom buttons resize the drawing. Screenshots: artifacts/screenshots/graph_*.png."""
from __future__ import annotations

import pytest

from tests.browser.lab_page import LIVE, run_notebook
from tests.browser.test_lab_browser import ROOT, SHOTS, lab  # noqa: F401  (the JupyterLab fixture)

pytestmark = pytest.mark.slow

NOTEBOOK = "graph_view.ipynb"
CELLS = [
    f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
    "from kernellab.viz.graph_view import GraphView\nfrom tests.viz import real_kernels as R",
    "GraphView(R.matmul())",
    "g = GraphView(R.attention()); g",
]

OVERFLOW = """root => {
    // text of a box that reaches past the box's outline
    const out = [];
    for (const g of root.querySelectorAll('g.node')) {
        const shape = g.querySelector('path, polygon');
        if (!shape) continue;
        const b = shape.getBoundingClientRect();
        for (const t of g.querySelectorAll('text')) {
            const r = t.getBoundingClientRect();
            if (r.left < b.left - 0.5 || r.right > b.right + 0.5 || r.top < b.top - 0.5 || r.bottom > b.bottom + 0.5)
                out.push(t.textContent);
        }
    }
    return out;
}"""


@pytest.fixture(scope="module")
def graph_page(lab):  # noqa: F811
    ready = f"document.querySelectorAll('.kl-graph{LIVE} svg g.node').length > 0"
    with run_notebook(lab, NOTEBOOK, CELLS, ready, 'graph') as pg:
        yield pg


def _at(page, width):
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(600)


FOCUS = r"""v => {
    // how much of the main loop's header box and of its dot box the viewport shows (0..1 each)
    const vp = v.querySelector('.kl-gvp').getBoundingClientRect();
    const loop = v.querySelector('[id="' + v.dataset.focus + '"]');
    const seen = el => { const r = el.getBoundingClientRect();
        const w = Math.max(0, Math.min(r.right, vp.right) - Math.max(r.left, vp.left));
        const h = Math.max(0, Math.min(r.bottom, vp.bottom) - Math.max(r.top, vp.top));
        return w * h / (r.width * r.height); };
    // graphviz draws a cluster's outline, not its nodes, in the cluster's group: the header is o<op> of c<op>
    const header = v.querySelector('[id="' + v.dataset.focus.replace(/_c(\d+)$/, '_o$1') + '"]');
    const lr = loop.getBoundingClientRect();
    const dot = [...v.querySelectorAll('.kl-gvp g.node.kl-dot')].find(g => { const r = g.getBoundingClientRect();
        return r.left >= lr.left && r.right <= lr.right && r.top >= lr.top && r.bottom <= lr.bottom; });
    const mini = v.querySelector('.kl-gmini');
    return {header: seen(header), dot: seen(dot), zoom: v.querySelector('.kl-gvp svg').getBoundingClientRect().width
            / v.dataset.w, mini: mini ? getComputedStyle(mini).display : null};
}"""


def test_attention_opens_on_its_main_loop_with_an_overview(graph_page):  # first: before any click scrolls
    """At 1600 px (as opened) the view shows the first KV loop's header and its dot at a readable zoom, the
    overview in the corner; "loop" brings it back at 1280 px after panning away."""
    page = graph_page
    view = page.locator(f".kl-graph{LIVE}").nth(1)
    view.scroll_into_view_if_needed()
    got = view.evaluate(FOCUS)
    assert got["header"] > 0.99 and got["dot"] > 0.99 and got["zoom"] >= 0.69 and got["mini"] == "block", got
    view.screenshot(path=str(SHOTS / "graph_attention_open_1600.png"))
    _at(page, 1280)
    view.evaluate("v => { const p = v.querySelector('.kl-gvp'); p.scrollLeft = 0; p.scrollTop = 0; }")
    view.locator("button[data-kz='loop']").click()
    got = view.evaluate(FOCUS)
    assert got["header"] > 0.99 and got["dot"] > 0.99 and got["zoom"] >= 0.69, got
    view.screenshot(path=str(SHOTS / "graph_attention_loop_1280.png"))
    # a click on the overview moves the view there; "overview" hides it
    before = view.evaluate("v => v.querySelector('.kl-gvp').scrollLeft")
    box = view.locator(".kl-gmini").bounding_box()
    page.mouse.click(box["x"] + 5, box["y"] + box["height"] / 2)
    assert view.evaluate("v => v.querySelector('.kl-gvp').scrollLeft") < before
    view.locator("button[data-kz='map']").click()
    assert view.evaluate(FOCUS)["mini"] == "none"
    view.locator("button[data-kz='map']").click()


@pytest.mark.parametrize("width", [1280, 1600])
@pytest.mark.parametrize("which", [0, 1], ids=["matmul", "attention"])
def test_boxes_hold_their_text_and_a_click_shows_the_source_line(graph_page, width, which):
    page = graph_page
    _at(page, width)
    view = page.locator(f".kl-graph{LIVE}").nth(which)
    view.scroll_into_view_if_needed()
    assert view.evaluate(OVERFLOW) == []
    # the drawing opens legible: 13 px text drawn at 70 % or more
    scale = view.evaluate("v => v.querySelector('.kl-gvp svg').getBoundingClientRect().width / v.dataset.w")
    assert 0.69 <= scale <= 1.01, scale
    # click the dot box: its source line and the op's full text show in the side panel
    dot = view.locator("g.node.kl-dot").first
    dot.scroll_into_view_if_needed()
    dot.click()
    side = view.locator(".kl-gside")
    text = side.inner_text()
    assert "source line" in text and "tl.dot" in text and "tt.dot" in text, text
    # an address box: the folded ops' IR
    addr = view.locator("g.node.kl-address").first
    addr.scroll_into_view_if_needed()
    addr.click()
    text = side.inner_text()
    assert "folded ops" in text and "tt.addptr" in text, text
    view.screenshot(path=str(SHOTS / f"graph_{['matmul', 'attention'][which]}_{width}.png"))


def test_zoom_buttons_and_unfold(graph_page):
    page = graph_page
    _at(page, 1600)
    view = page.locator(f".kl-graph{LIVE}").nth(1)
    view.scroll_into_view_if_needed()
    width = lambda: view.evaluate("v => v.querySelector('.kl-gvp svg').getBoundingClientRect().width")  # noqa: E731
    w0 = width()
    view.locator("button[data-kz='in']").click()
    assert width() > w0 * 1.2
    view.locator("button[data-kz='fit']").click()
    vp = view.locator(".kl-gvp").bounding_box()
    assert width() <= vp["width"] + 1
    view.screenshot(path=str(SHOTS / "graph_attention_fit_1600.png"))
    # the fold toggle redraws every op
    cell = page.locator(".jp-CodeCell").nth(2)
    n_folded = cell.locator("g.node").count()
    cell.locator("button", has_text="fold address arithmetic").click()
    page.wait_for_function("() => document.querySelectorAll('.jp-CodeCell')[2].innerText.includes('unfolded')",
                           timeout=30_000)
    assert cell.locator("g.node").count() > n_folded
    assert cell.locator(f".kl-graph{LIVE}").evaluate(OVERFLOW) == []
