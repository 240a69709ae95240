"""A saved notebook reopened without its kernel shows the views' static copy, not JupyterLab's "Error displaying
widget: model not found": run a cell of views on the real matmul in JupyterLab (headless Chromium), see the live
views with their copy hidden, save, shut the kernel down, open the notebook again. Screenshots:
artifacts/screenshots/reopen_{live,reopened}.png."""
from __future__ import annotations

import pytest

from tests.browser.lab_page import run_notebook
from tests.browser.test_lab_browser import ROOT, SHOTS, lab  # noqa: F401  (the JupyterLab fixture)

pytestmark = pytest.mark.slow

NOTEBOOK = "reopen_static_copy.ipynb"
CELLS = [
    f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
    "import kernellab.viz as kv\nfrom tests.viz import real_kernels as R",
    "kv.show(R.matmul(), views=('passes', 'linked', 'smem'))",
]
MISSING = "Error displaying widget"


def test_the_static_copy_stands_in_for_the_views_once_the_kernel_is_gone(lab):  # noqa: F811
    ready = "!!document.querySelector('.jp-NotebookPanel .widget-tab .kl-passes')"
    with run_notebook(lab, NOTEBOOK, CELLS, ready, "reopen") as page:
        cell = page.locator(".jp-CodeCell").nth(1)
        copy = cell.locator(".kl-static-copy")
        assert copy.count() == 1 and not copy.is_visible()  # the live views are on screen: the copy is hidden
        assert cell.locator(".widget-tab").first.is_visible()
        cell.screenshot(path=str(SHOTS / "reopen_live.png"))
        page.keyboard.press("Control+s")
        page.wait_for_timeout(1500)
        page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Shut Down Kernel").first.click()
        page.wait_for_timeout(1500)
        page.goto(f"{lab['base']}/lab/tree/{NOTEBOOK}?reset&token={lab['token']}")
        page.wait_for_selector(".jp-NotebookPanel .kl-static-copy", timeout=60_000)
        dialog = page.locator(".jp-Dialog")
        if dialog.count():  # a kernel-choice dialog: no kernel (the point is the notebook without one)
            page.locator(".jp-Dialog .jp-mod-reject").first.click()
        cell = page.locator(".jp-CodeCell").nth(1)
        # the widget manager gives up on the missing models after a moment: wait for it, then look
        page.wait_for_function(f"""() => [...document.querySelectorAll('.jp-OutputArea-output')]
            .some(o => o.textContent.includes({MISSING!r}))""", timeout=60_000)
        page.wait_for_timeout(500)
        copy = cell.locator(".kl-static-copy")
        assert copy.is_visible(), "the static copy is hidden in the reopened notebook"
        text = copy.inner_text()
        for part in ("passes", "linked", "shared memory", "static copy"):
            assert part in text, part
        assert cell.get_by_text(MISSING).count() == 0 or not cell.get_by_text(MISSING).first.is_visible()
        cell.screenshot(path=str(SHOTS / "reopen_reopened.png"))
