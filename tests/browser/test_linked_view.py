"""The linked view live in JupyterLab (anywidget) in headless Chromium, on the real matmul and flash attention:
hovering a source line highlights its lines in the PTX and SASS panes and scrolls them into view, a click pins it,
the search box marks matches in every pane, and nothing reaches past the output area at 1280 and 1600 px.
Screenshots: artifacts/screenshots/linked_*.png."""
from __future__ import annotations

import pytest

from tests.browser.lab_page import LIVE, run_notebook
from tests.browser.test_lab_browser import ROOT, SHOTS, lab  # noqa: F401  (the JupyterLab fixture)

pytestmark = pytest.mark.slow

NOTEBOOK = "linked_view.ipynb"
CELLS = [
    f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
    "import kernellab.viz as kv\nfrom tests.viz import real_kernels as R",
    "mm = kv.linked_view(R.matmul()); mm",
    "at = kv.linked_view(R.attention()); at",
]

OUTSIDE = """view => {
    // the view, its bar and its panes within the output area (a long line scrolls inside its pane)
    const area = view.closest('.jp-OutputArea-output').getBoundingClientRect();
    return [view, ...view.querySelectorAll('.kl-lk-bar, .kl-lk-pane, .kl-lk-head')]
        .map(el => [el.className, el.getBoundingClientRect().right]).filter(([c, r]) => r > area.right + 1);
}"""

PANE_STATE = """view => [...view.querySelectorAll('.kl-lk-pane')].map(p => {
    const body = p.querySelector('.kl-lk-body');
    const on = [...p.querySelectorAll('.kl-lk-on')];
    const vis = on.filter(l => l.offsetTop >= body.scrollTop - 1 && l.offsetTop + l.offsetHeight <= body.scrollTop + body.clientHeight + 1);
    const sel = p.querySelector('select');
    return {stage: sel ? sel.value : 'source', on: on.length, visible: vis.length,
            marks: p.querySelectorAll('mark').length, height: body.clientHeight, width: body.clientWidth};
})"""


@pytest.fixture(scope="module")
def page(lab):  # noqa: F811
    pytest.importorskip("anywidget", reason="anywidget is not installed (pip install -e '.[lab]')")
    ready = f"document.querySelectorAll('.kl-lk{LIVE} .kl-lk-panes').length >= 2"
    with run_notebook(lab, NOTEBOOK, CELLS, ready, 'linked') as pg:
        yield pg


def _view(page, k, width):
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(500)
    view = page.locator(f".kl-lk{LIVE}").nth(k)
    view.scroll_into_view_if_needed()
    return view


@pytest.mark.parametrize("width", [1280, 1600])
def test_hover_highlights_the_ptx_and_search_marks(page, width):
    view = _view(page, 0, width)
    assert view.evaluate(OUTSIDE) == []
    state = view.evaluate(PANE_STATE)
    assert [s["stage"] for s in state] == ["source", "ptx", "sass"]
    assert all(s["height"] > 300 and s["width"] > 250 for s in state), state
    dot = view.locator(".kl-lk-src .kl-lk-l", has_text="tl.dot(").first
    dot.hover()
    page.wait_for_timeout(200)
    state = view.evaluate(PANE_STATE)
    assert state[0]["on"] == 1 and state[1]["on"] > 0 and state[1]["visible"] > 0, state
    assert state[2]["on"] > 0 and state[2]["visible"] > 0, state  # the SASS has the line table (ptxas -lineinfo)
    assert "wgmma" in " ".join(view.locator(".kl-lk-pane").nth(1).locator(".kl-lk-on").all_inner_texts())
    page.screenshot(path=str(SHOTS / f"linked_matmul_hover_{width}.png"))
    # hovering a PTX line highlights its source line; a click pins it while the mouse moves on
    ptx_line = view.locator(".kl-lk-pane").nth(1).locator(".kl-lk-l[data-s]").nth(40)
    ptx_line.click()
    src = int(ptx_line.get_attribute("data-s"))
    view.locator(".kl-lk-src .kl-lk-l").first.hover()
    page.wait_for_timeout(100)
    assert view.locator(".kl-lk-src .kl-lk-on").get_attribute("data-s") == str(src)
    ptx_line.click()  # released
    # search: matches marked in every pane, each scrolled to its first
    view.locator(".kl-lk-search").fill("tl.load|ld\\.|LDG|LDC")
    page.wait_for_timeout(400)
    state = view.evaluate(PANE_STATE)
    assert all(s["marks"] > 0 for s in state), state
    page.screenshot(path=str(SHOTS / f"linked_matmul_search_{width}.png"))
    view.locator(".kl-lk-only").check()
    page.wait_for_timeout(200)
    shown = view.locator(".kl-lk-pane").nth(1).locator(".kl-lk-l:not(.kl-lk-hide)").count()
    assert 0 < shown < len(view.locator(".kl-lk-pane").nth(1).locator(".kl-lk-l").all())
    view.locator(".kl-lk-only").uncheck()
    # search everywhere: matches counted in every stage, those not on screen (nor in the browser) too: the stage
    # menus say how many, the status names the stages off screen that have some
    view.locator(".kl-lk-search").fill("load")
    page.wait_for_function("""() => [...document.querySelectorAll('.kl-lk-stage option')]
                              .some(o => o.value === 'llir' && /\\d+ matching/.test(o.textContent))""", timeout=15_000)
    assert "also in" in view.locator(".kl-lk-status").inner_text()
    view.locator(".kl-lk-search").fill("")
    page.wait_for_timeout(300)
    assert "matching" not in " ".join(view.locator(".kl-lk-stage option").all_inner_texts())
    assert not page.errors, page.errors


@pytest.mark.parametrize("width", [1280, 1600])
def test_attention_view_and_stage_choice(page, width):
    view = _view(page, 1, width)
    assert view.evaluate(OUTSIDE) == []
    line = view.locator(".kl-lk-src .kl-lk-l", has_text="tl.exp2(m_i - m_new)").first
    line.hover()
    page.wait_for_timeout(200)
    state = view.evaluate(PANE_STATE)
    assert state[1]["on"] > 0 and state[1]["visible"] > 0, state
    page.screenshot(path=str(SHOTS / f"linked_attention_hover_{width}.png"))
    # the GPU IR and the LLVM IR were not sent with the view: picking them asks the kernel for their lines
    for stage, least in (("gpu", 100), ("llir", 1000)):
        view.locator(".kl-lk-stage").first.select_option(stage)
        view.locator(".kl-lk-pane").nth(1).locator(".kl-lk-l").nth(least).wait_for(timeout=15_000)
        line.hover()
        page.wait_for_timeout(200)
        state = view.evaluate(PANE_STATE)
        assert state[1]["stage"] == stage and state[1]["on"] > 0, state
        page.screenshot(path=str(SHOTS / f"linked_attention_{stage}_{width}.png"))
    view.locator(".kl-lk-stage").first.select_option("ptx")
    assert not page.errors, page.errors
