"""The sanitizer's access map (`%%kernel --sanitize`) in JupyterLab in headless Chromium, on a memory-bound row
kernel (softmax over 8 rows of 781 fp32: a masked tail per row) and the shared-memory chart beside it, at 1280 and
1600 px. The map fits the output area, is drawn from runs (its output stays small: per-element rectangles made
megabytes), shows the input in its readers' colours (it was a blank sheet), and its program picker switches the
panel; the shared-memory chart uses the width it has. Screenshots: artifacts/screenshots/access_map_*.png."""
from __future__ import annotations

import pytest

from benchmarks.tools.lab_screenshots import SETUP, SETUP_MORE, SOFTMAX
from tests.browser.lab_page import CLIPPED, run_notebook
from tests.browser.test_lab_browser import ROOT, SHOTS, lab  # noqa: F401  (the JupyterLab fixture)

pytestmark = pytest.mark.slow

CELLS = [
    f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + SETUP + "\n" + SETUP_MORE,
    SOFTMAX.replace("--views perf", "--views none").replace(' --bench "torch.softmax(x, -1)"', ""),
    "import kernellab.viz as kv\nfrom tests.viz import real_kernels as R\nkv.SharedMemoryView(R.matmul())",
]

OUTSIDE = """view => {
    const area = view.closest('.jp-OutputArea-output').getBoundingClientRect();
    return [...view.querySelectorAll('*')].filter(el => { const r = el.getBoundingClientRect();
        return r.width && r.right > area.right + 1; }).map(el => el.tagName).slice(0, 8);
}"""


@pytest.fixture(scope="module")
def am_page(lab):  # noqa: F811
    ready = "!!document.querySelector('.kl-am-programs') && !!document.querySelector('svg.kl-smem-map')"
    with run_notebook(lab, "access_map_view.ipynb", CELLS, ready, "access_map") as pg:
        yield pg


@pytest.mark.parametrize("width", [1280, 1600])
def test_access_map_of_a_row_kernel(am_page, width):
    page = am_page
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(600)
    out = page.locator(".jp-OutputArea-output", has=page.locator(".kl-am-programs")).first
    out.scroll_into_view_if_needed()
    assert out.evaluate(OUTSIDE) == [] and out.evaluate(CLIPPED) == []
    assert len(out.inner_html()) < 400_000, "the map is drawn element by element"
    panels = out.locator(".kl-am-panel")
    x_panel = panels.filter(has_text="in_ptr").first
    assert "only read, by 8 programs" in x_panel.inner_text()
    assert x_panel.locator('rect[fill-opacity="0.35"]').count() >= 8  # the readers' colours, not a blank sheet
    out.locator("label.kl-am-pick", has_text="⚠").first.click()  # the picker opens on it (an earlier run moved it)
    assert "243 of them outside the argument" in out.inner_text()  # the last row's masked tail
    before = out.locator(".kl-am-prog:visible .kl-am-which").inner_text()
    out.locator("label.kl-am-pick").first.click()
    assert out.locator(".kl-am-prog:visible .kl-am-which").inner_text() != before
    out.screenshot(path=str(SHOTS / f"access_map_softmax_{width}.png"))
    assert page.errors == []


def test_smem_chart_uses_the_width_it_has(am_page):
    page = am_page
    page.set_viewport_size({"width": 1600, "height": 1000})
    page.wait_for_timeout(600)
    svg = page.locator("svg.kl-smem-map").last
    svg.scroll_into_view_if_needed()
    assert svg.bounding_box()["width"] > 900  # it stayed 640 px
    page.set_viewport_size({"width": 900, "height": 1000})
    page.wait_for_timeout(600)
    area = svg.evaluate("s => s.closest('.jp-OutputArea-output').getBoundingClientRect().right")
    assert svg.bounding_box()["x"] + svg.bounding_box()["width"] <= area + 1  # shrinks to fit a narrow window
