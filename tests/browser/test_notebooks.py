"""Every notebook of the lab in JupyterLab (headless Chromium), as a learner meets it: Run All, then click through
every view on screen at 1280 px. Each notebook runs without an error output, a page error or a widget that fails
to draw; the static copies of the live views stay hidden; in each tab of views every view draws something and
nothing of it reaches past the cell's output area (a long line scrolls inside its pane); the linked view moves its
highlight on hover; the compare views and the access maps are there and fit; an access map's program buttons
switch the program shown. Screenshots: artifacts/screenshots/nb_<notebook>_*.png."""
from __future__ import annotations

import re

import pytest

from tests.browser.lab_page import CLIPPED, LIVE, open_and_run
from tests.browser.test_lab_browser import ROOT, SHOTS, lab  # noqa: F401  (the JupyterLab fixture)

pytestmark = pytest.mark.slow

NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))

OUTSIDE = """view => {
    // elements past the right edge of the cell's output area that no box of theirs scrolls or clips
    const area = view.closest('.jp-OutputArea-output').getBoundingClientRect();
    const out = [];
    for (const el of [view, ...view.querySelectorAll('*')]) {
        const r = el.getBoundingClientRect();
        if (!r.width || !r.height || r.right <= area.right + 1) continue;
        let held = false;
        for (let a = el.parentElement; a && a !== view.parentElement; a = a.parentElement)
            if (getComputedStyle(a).overflowX !== 'visible') { held = true; break; }
        if (!held) out.push(`${el.tagName}.${String(el.className.baseVal ?? el.className).slice(0, 50)} ` +
                            `right=${Math.round(r.right)} area=${Math.round(area.right)}`);
    }
    return out.slice(0, 8);
}"""

DRAWN = """panel => {
    // what a view's panel shows: its text (without "loading…"), pictures and the size of its box
    const t = panel.innerText.trim();
    return {text: t.length, loading: /^loading…$/.test(t), svgs: panel.querySelectorAll('svg').length,
            imgs: panel.querySelectorAll('img').length, h: panel.getBoundingClientRect().height};
}"""


def _tabs_of_views(page):
    """The live tabs of views (kv.show's, the %%kernel cell's): top-level ipywidgets Tabs, not a view's own tabs."""
    return page.locator(f".jp-OutputArea-output > .widget-tab{LIVE}")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_every_view_draws(lab, name):  # noqa: F811
    stem = name.split("_")[0]
    with open_and_run(lab, name, shot=f"nb_{stem}", timeout_s=420) as page:
        page.set_viewport_size({"width": 1280, "height": 1000})
        page.wait_for_timeout(800)
        outputs = "\n".join(page.locator(".jp-NotebookPanel .jp-OutputArea-output").all_inner_texts())
        assert "Traceback" not in outputs, outputs[-3000:]
        assert "Error displaying widget" not in outputs
        assert "%%kernel: internal error" not in outputs and "the views failed" not in outputs
        copies = page.locator(".kl-static-copy")
        assert all(not copies.nth(k).is_visible() for k in range(copies.count())), "a static copy shows"
        tabs = _tabs_of_views(page)
        for t in range(tabs.count()):
            tab = tabs.nth(t)
            tab.scroll_into_view_if_needed()
            titles = tab.locator(":scope > .lm-TabBar .lm-TabBar-tab").all_inner_texts()
            assert titles, "a tab of views without views"
            for k, title in enumerate(titles):
                tab.locator(":scope > .lm-TabBar .lm-TabBar-tab").nth(k).click()
                panel = tab.locator(":scope > .widget-tab-contents > .lm-Widget:not(.lm-mod-hidden)").first
                page.wait_for_function("p => !/^loading…$/.test(p.innerText.trim())", arg=panel.element_handle(),
                                       timeout=30_000)
                page.wait_for_timeout(300)
                drawn = panel.evaluate(DRAWN)
                assert drawn["text"] > 20 and drawn["h"] > 60, (name, title, drawn)
                assert tab.evaluate(OUTSIDE) == [], (name, title, tab.evaluate(OUTSIDE))
                assert panel.evaluate(CLIPPED) == [], (name, title, panel.evaluate(CLIPPED))  # prose cut off
                if title.strip() == "linked":  # hovering a source line lights its lines in the stage panes
                    line = panel.locator(".kl-lk-src .kl-lk-l[data-s]").nth(3)
                    line.hover()
                    page.wait_for_timeout(200)
                    assert panel.locator(".kl-lk-pane:not(.kl-lk-src) .kl-lk-on").count() > 0, (name, "hover")
                if title.strip() == "graph":
                    assert panel.locator("svg g.node").count() > 0
                slug = re.sub(r"\W+", "_", title.strip())
                tab.screenshot(path=str(SHOTS / f"nb_{stem}_views{t}_{slug}.png"))
        for sel in (".kl-cmp", ".kl-am-programs", ".kl-perf"):
            found = page.locator(f".jp-NotebookPanel {sel}{LIVE}")
            for k in range(found.count()):
                el = found.nth(k)
                el.scroll_into_view_if_needed()
                assert el.evaluate(OUTSIDE) == [], (name, sel, el.evaluate(OUTSIDE))
                el.screenshot(path=str(SHOTS / f"nb_{stem}_{sel[4:]}{k}.png"))
        maps = page.locator(f".jp-NotebookPanel .kl-am-programs{LIVE}")
        for k in range(maps.count()):  # the program buttons switch the panel shown
            m = maps.nth(k)
            picks = m.locator("label.kl-am-pick")
            if picks.count() < 2:
                continue
            before = m.locator(".kl-am-prog:visible .kl-am-which").inner_text()
            picks.nth(0).click()
            after = m.locator(".kl-am-prog:visible .kl-am-which").inner_text()
            assert m.locator(".kl-am-prog:visible").count() == 1
            assert after == "program (0, 0, 0)" and (before != after or picks.count() == 1), (before, after)
        assert not page.errors, page.errors
        assert not page.console_errors, page.console_errors
