"""The graph view on the real matmul and causal attention in JupyterLab in headless Chromium, at 1280 and 1600
px: no box's text runs out of its box, a click on a box shows its source line and the op in the side panel,
the zoom buttons resize the drawing. Screenshots: artifacts/screenshots/graph_*.png."""
from __future__ import annotations

import json

import pytest

from tests.browser.test_lab_browser import CHROMIUM_ARGS, ROOT, SHOTS, lab  # noqa: F401  (the JupyterLab fixture)
from tests.browser.test_real_kernel_views import _notebook

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
    from playwright.sync_api import sync_playwright

    (lab["root"] / NOTEBOOK).write_text(json.dumps(_notebook(CELLS)))
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=lab["chromium"], headless=True, args=CHROMIUM_ARGS)
        except Exception as e:
            pytest.skip(f"chromium does not start under Playwright: {e}")
        context = browser.new_context(viewport={"width": 1600, "height": 1000}, device_scale_factor=1)
        pg = context.new_page()
        pg.goto(f"{lab['base']}/lab/tree/{NOTEBOOK}?token={lab['token']}")
        pg.wait_for_selector(".jp-NotebookPanel .jp-CodeCell", timeout=60_000)
        pg.wait_for_function("""() => { const s = document.querySelector('.jp-Notebook-ExecutionIndicator');
            return !s || s.getAttribute('data-status') === 'idle'; }""", timeout=60_000)
        pg.wait_for_timeout(1500)
        dialog = pg.locator(".jp-Dialog")
        if dialog.count():
            pg.locator(".jp-Dialog .jp-mod-accept").first.click()
        pg.keyboard.press("Control+b")
        for _ in range(2):
            pg.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            pg.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            try:
                pg.wait_for_function("""() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
                                        .some(p => /\\[(\\d+|\\*)\\]/.test(p.textContent))""", timeout=30_000)
                break
            except Exception:
                pg.keyboard.press("Escape")
        pg.wait_for_function(f"""() => {{
            if (document.querySelector('[data-mime-type="application/vnd.jupyter.error"]')) return true;
            const p = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
            return p.length >= {len(CELLS)} && p.every(x => /\\[\\d+\\]/.test(x.textContent));
        }}""", timeout=240_000)
        errors = pg.locator('[data-mime-type="application/vnd.jupyter.error"]')
        if errors.count():
            pg.screenshot(path=str(SHOTS / "graph_error.png"), full_page=True)
            pytest.fail("a cell raised:\n" + errors.first.inner_text()[:3000])
        pg.wait_for_function("() => document.querySelectorAll('.kl-graph svg g.node').length > 0", timeout=60_000)
        try:
            yield pg
        finally:
            context.close()
            browser.close()


def _at(page, width):
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(600)


@pytest.mark.parametrize("width", [1280, 1600])
@pytest.mark.parametrize("which", [0, 1], ids=["matmul", "attention"])
def test_boxes_hold_their_text_and_a_click_shows_the_source_line(graph_page, width, which):
    page = graph_page
    _at(page, width)
    view = page.locator(".kl-graph").nth(which)
    view.scroll_into_view_if_needed()
    assert view.evaluate(OVERFLOW) == []
    # the drawing opens legible: 13 px text drawn at 75 % or more
    scale = view.evaluate("v => v.querySelector('.kl-gvp svg').getBoundingClientRect().width / v.dataset.w")
    assert 0.74 <= scale <= 1.01, scale
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
    view = page.locator(".kl-graph").nth(1)
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
    assert cell.locator(".kl-graph").evaluate(OVERFLOW) == []
