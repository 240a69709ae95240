"""One notebook opened in the test JupyterLab in headless Chromium and run to the end, shared by the browser
tests of the lab's views: they differ only in their cells and in what says their view has drawn."""
from __future__ import annotations

import json
from contextlib import contextmanager

import pytest

from tests.browser.test_lab_browser import CHROMIUM_ARGS, SHOTS

# A cell's exception: JupyterLab renders it as a stderr output (as it does warnings) holding the traceback
ERROR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]:has-text("most recent call last")'
ERROR_JS = """[...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
    .some(o => o.textContent.includes('most recent call last'))"""
# prose (paragraphs, headings, list items, table cells) cut off by a box that clips or scrolls; code boxes, the
# layout grid, the graph and the pass stepper's panes scroll on purpose
CLIPPED = """root => {
    // prose (paragraphs, headings, list items, table cells) cut off by a box that clips or scrolls: text a
    // reader cannot see without a scrollbar meant for code
    const out = [];
    for (const el of root.querySelectorAll('p, h4, li, td, th, b')) {
        if (!el.getClientRects().length || el.closest('.kl-code, .kl-grid-box, .kl-gvp, .kl-pane')) continue;
        const r = el.getBoundingClientRect();
        for (let a = el.parentElement; a && a !== root.parentElement; a = a.parentElement) {
            const cs = getComputedStyle(a);
            if (cs.overflowX !== 'visible') {
                const ar = a.getBoundingClientRect();
                if (r.right > ar.right + 1) out.push(`${el.tagName} "${el.textContent.trim().slice(0, 50)}" `
                    + `right=${Math.round(r.right)} box=${a.className.slice(0, 40)} right=${Math.round(ar.right)}`);
                break;
            }
        }
    }
    return out.slice(0, 10);
}"""
# appended to a selector: only the live views, not their static copies (hidden outputs before them: fallback.py)
LIVE = ":not(.kl-static-copy *)"


def notebook_json(cells) -> dict:
    return {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
                       "outputs": [], "source": src} for i, src in enumerate(cells)],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


@contextmanager
def run_notebook(lab, name: str, cells, ready_js: str, shot: str):
    """Write `cells` as notebook `name` into the lab's root, open it at 1600x1000, Run All, wait until every
    cell ran (or one raised: the test fails with its traceback and a screenshot `<shot>_error.png`), then
    until `ready_js` (a JS expression) holds; yields the page. Page errors are collected in `page.errors`."""
    (lab["root"] / name).write_text(json.dumps(notebook_json(cells)))
    with open_and_run(lab, name, ready_js, shot) as pg:
        yield pg


@contextmanager
def open_and_run(lab, name: str, ready_js: str = "true", shot: str = "nb", timeout_s: int = 240):
    """Open notebook `name` of the lab's root at 1600x1000, Run All, wait until the last code cell ran, nothing
    is queued and the kernel is idle (or a cell raised: the test fails with its traceback and a screenshot
    `<shot>_error.png`), then until `ready_js` holds; yields the page (uncaught page errors in `page.errors`,
    console errors in `page.console_errors`)."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=lab["chromium"], headless=True, args=CHROMIUM_ARGS)
        except Exception as e:
            pytest.skip(f"chromium does not start under Playwright: {e}")
        context = browser.new_context(viewport={"width": 1600, "height": 1000}, device_scale_factor=1)
        try:
            pg = context.new_page()
            pg.errors, pg.console_errors = [], []
            pg.on("pageerror", lambda e: pg.errors.append(str(e)))
            pg.on("console", lambda m: m.type == "error" and pg.console_errors.append(m.text))
            # reset: a fresh workspace, no panel of an earlier test restored beside this notebook
            pg.goto(f"{lab['base']}/lab/tree/{name}?reset&token={lab['token']}")
            pg.wait_for_selector(".jp-NotebookPanel .jp-CodeCell", timeout=60_000)
            pg.wait_for_function("""() => { const s = document.querySelector('.jp-Notebook-ExecutionIndicator');
                return !s || s.getAttribute('data-status') === 'idle'; }""", timeout=180_000)  # a loaded box starts
            # kernels slowly: a CI run beside other jobs timed out here at 60 s
            pg.wait_for_timeout(1500)
            dialog = pg.locator(".jp-Dialog")
            if dialog.count():  # a kernel-choice or similar dialog on a slow start: take its default and say so
                print("dialog:", dialog.first.inner_text()[:300])
                pg.locator(".jp-Dialog .jp-mod-accept").first.click()
            pg.keyboard.press("Control+b")  # the file browser away: the notebook gets the width
            for _ in range(2):
                if pg.locator(".jp-Dialog").count():  # one that opened late (a slow kernel start)
                    print("dialog:", pg.locator(".jp-Dialog").first.inner_text()[:300])
                    pg.locator(".jp-Dialog .jp-mod-accept").first.click()
                pg.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
                pg.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
                try:
                    pg.wait_for_function("""() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
                                            .some(p => /\\[(\\d+|\\*)\\]/.test(p.textContent))""", timeout=30_000)
                    break
                except Exception:
                    pg.keyboard.press("Escape")
            # done: the last prompt has its number, none is queued or running, the kernel is idle (a cell with a
            # collapsed input, a notebook's solution, shows no prompt)
            try:
                pg.wait_for_function(f"""() => {{
                    if ({ERROR_JS}) return true;
                    const p = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
                    const ind = document.querySelector('.jp-Notebook-ExecutionIndicator');
                    return p.length > 0 && /\\[\\d+\\]/.test(p[p.length - 1].textContent)
                        && !p.some(x => x.textContent.includes('*'))
                        && (!ind || ind.getAttribute('data-status') === 'idle');
                }}""", timeout=timeout_s * 1000)
            except Exception:
                pg.screenshot(path=str(SHOTS / f"{shot}_run_all_timeout.png"))
                raise
            errors = pg.locator(ERROR)
            if errors.count():
                pg.screenshot(path=str(SHOTS / f"{shot}_error.png"), full_page=True)
                pytest.fail("a cell raised:\n" + errors.first.inner_text()[:3000])
            pg.wait_for_function(f"() => {ready_js}", timeout=60_000)
            yield pg
        finally:
            context.close()
            browser.close()
