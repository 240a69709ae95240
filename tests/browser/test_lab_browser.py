"""The lab in a real browser: JupyterLab (headless, a free localhost port, a token) serving a copy of the
notebooks, driven by Debian's chromium through Playwright. Notebook 01 is run top to bottom from the Run
menu; then the `%%kernel` cell's views must have rendered — the pass list, an IR diff (after picking the
`assign_layouts` pass and pressing "diff vs previous") and the layout picture — and every check must have
passed. Screenshots go to artifacts/screenshots/. Skips, with the reason, when chromium, JupyterLab or
Playwright is missing.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("KERNELLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
NOTEBOOK = "01_vector_add.ipynb"
RUN_TIMEOUT_S = 240


def _requirements():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        found = shutil.which("chromium") or shutil.which("chromium-browser")
        if not found:
            pytest.skip(f"no chromium at {CHROMIUM} or on PATH (Debian: apt-get install chromium)")
        return found
    return CHROMIUM


def _require_gpu_stages(cache_dir: Path):
    """Notebook 01 builds its kernels' GPU stages (`compiled.build_gpu()`: ptxas or nvJitLink, no GPU needed)."""
    import torch

    import kernellab as kl
    import kernellab.language as tl
    from kernellab.errors import ToolchainError

    @kl.jit
    def probe_kernel(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELLAB_CACHE_DIR", str(cache_dir))
        try:
            probe_kernel.warmup(torch.zeros(16), BLOCK=16).build_gpu()
        except ToolchainError as e:
            pytest.skip(f"compiled.build_gpu() cannot assemble here (no ptxas or nvJitLink): {e}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of the notebooks: yields (base_url, token, root); shut down after."""
    chromium = _requirements()
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (pip install -e '.[lab]')")
    pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[lab]')")
    pytest.importorskip("ipywidgets", reason="ipywidgets is not installed (pip install -e '.[lab]')")
    if not Path(sys.executable).with_name("jupyter").exists():
        pytest.skip(f"no jupyter next to {sys.executable}")
    tmp = tmp_path_factory.mktemp("lab")
    _require_gpu_stages(tmp / "probe-cache")
    with jupyterlab(tmp, chromium) as server:
        yield server


@contextmanager
def jupyterlab(tmp: Path, chromium: str, theme: str | None = None):
    """JupyterLab on a copy of the notebooks under `tmp` (its own settings, cache and runtime folders): yields
    {base, token, root, chromium, log}; shut down after. `theme`: e.g. "JupyterLab Dark". Shared by the `lab`
    fixture and benchmarks/tools/lab_screenshots.py."""
    jupyter = Path(sys.executable).with_name("jupyter")
    root = tmp / "notebooks"
    shutil.copytree(ROOT / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    # Lab settings of our own: render every cell (no windowing, so off-screen outputs are in the DOM), no
    # news or update checks (no network here), and no user settings or workspaces leaking in or out.
    settings = tmp / "settings"
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none"}))
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    if theme:
        (settings / "@jupyterlab" / "apputils-extension" / "themes.jupyterlab-settings").write_text(
            json.dumps({"theme": theme}))
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               KERNELLAB_CACHE_DIR=str(tmp / "kernellab-cache"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"))
    env.pop("JUPYTER_CONFIG_DIR", None)
    # the kernels import this checkout's kernellab (a relative PYTHONPATH would resolve in the notebooks' folder)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [os.path.abspath(p) for p in
                                                       env.get("PYTHONPATH", "").split(os.pathsep) if p])

    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp / "jupyterlab.log", "w")
    cmd = [str(jupyter), "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
           "--LabApp.news_url="]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI often run as root
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{(tmp / 'jupyterlab.log').read_text()[-3000:]}")
            try:
                status, _ = _get(f"{base}/api/status?token={token}")
                if status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail("JupyterLab did not answer within 90 s:\n" + (tmp / "jupyterlab.log").read_text()[-3000:])
            time.sleep(0.5)
        yield {"base": base, "token": token, "root": root, "chromium": chromium, "log": tmp / "jupyterlab.log"}
    finally:
        try:  # a clean shutdown first (kernels too), then make sure
            req = urllib.request.Request(f"{base}/api/shutdown", method="POST",
                                         headers={"Authorization": f"token {token}"})
            urllib.request.urlopen(req, timeout=5).close()
        except Exception:
            pass
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


@pytest.fixture(scope="module")
def page(lab):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=lab["chromium"], headless=True, args=CHROMIUM_ARGS)
        except Exception as e:  # chromium present but unusable (a broken install): say so rather than fail
            pytest.skip(f"chromium at {lab['chromium']} does not start under Playwright: {e}")
        context = browser.new_context(viewport={"width": 1500, "height": 1400}, device_scale_factor=1)
        pg = context.new_page()
        console = []
        pg.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        pg.console_messages = console
        try:
            yield pg
        finally:
            context.close()
            browser.close()


def _run_all(page, lab):
    page.goto(f"{lab['base']}/lab/tree/{NOTEBOOK}?token={lab['token']}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    # the kernel is started from the notebook's kernelspec (python3); wait until it is idle
    page.wait_for_selector(".jp-NotebookPanel-toolbar .jp-Toolbar-kernelStatus, .jp-Notebook-ExecutionIndicator",
                           timeout=60_000)
    page.wait_for_function("""() => {
        const s = document.querySelector('.jp-Notebook-ExecutionIndicator');
        return !s || !s.getAttribute('data-status') || s.getAttribute('data-status') === 'idle';
    }""", timeout=60_000)
    page.keyboard.press("Control+b")  # hide the file browser: more room for the notebook in the screenshots
    # the lab renders cells progressively: wait until every code cell of the file is in the DOM
    cells = json.loads((lab["root"] / NOTEBOOK).read_text())["cells"]
    n_expected = sum(c["cell_type"] == "code" for c in cells)
    page.wait_for_function(f"""() => document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell').length >= {n_expected}""",
                           timeout=60_000)
    n_code = page.locator(".jp-NotebookPanel .jp-CodeCell").count()
    done = """() => {
        const prompts = [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')];
        const ind = document.querySelector('.jp-Notebook-ExecutionIndicator');
        // a cell's exception: a stderr output (as warnings are) holding the traceback
        const errors = [...document.querySelectorAll('.jp-NotebookPanel [data-mime-type="application/vnd.jupyter.stderr"]')]
            .filter(o => o.textContent.includes('most recent call last'));
        if (errors.length) return 'error';
        return prompts.length > 0 && /\\[\\d+\\]/.test(prompts[prompts.length - 1].textContent)
            && !prompts.some(p => p.textContent.includes('*'))
            && (!ind || ind.getAttribute('data-status') === 'idle');
    }"""
    started = """() => [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')]
                   .some(p => /\\[(\\d+|\\*)\\]/.test(p.textContent))"""
    for attempt in range(2):  # a click that lands while the page is still settling is retried once
        if page.locator(".jp-Dialog").count():  # a kernel-choice dialog on a slow start: take its default
            print("dialog:", page.locator(".jp-Dialog").first.inner_text()[:300])
            page.locator(".jp-Dialog .jp-mod-accept").first.click()
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            page.wait_for_function(started, timeout=30_000)
            break
        except Exception:
            page.keyboard.press("Escape")
    # done: cells run in order, so the last code cell has an execution count, nothing is queued or running
    # ([*]), and the kernel is idle (cells with a collapsed input, the solutions, show no prompt)
    try:
        result = page.wait_for_function(done, timeout=RUN_TIMEOUT_S * 1000).json_value()
    except Exception:
        page.screenshot(path=str(SHOTS / "01_run_all_timeout.png"), full_page=True)
        raise
    if result == "error":
        page.screenshot(path=str(SHOTS / "01_cell_error.png"), full_page=True)
        text = page.locator('.jp-NotebookPanel [data-mime-type="application/vnd.jupyter.stderr"]',
                            has_text="most recent call last").first.inner_text()
        pytest.fail(f"a notebook cell raised in the browser run:\n{text[:3000]}")
    return n_code


def test_notebook_01_runs_and_the_views_render(page, lab):
    n_code = _run_all(page, lab)
    n_expected = sum(c["cell_type"] == "code" for c in json.loads((lab["root"] / NOTEBOOK).read_text())["cells"])
    assert n_code == n_expected >= 10
    page.screenshot(path=str(SHOTS / "01_after_run_all.png"))

    outputs = page.locator(".jp-NotebookPanel .jp-OutputArea-output")
    text = "\n".join(outputs.all_inner_texts())
    assert "Traceback" not in text, "a cell failed:\n" + text[-3000:]
    for done in ("✓ exercise 1", "✓ exercise 2", "check passed"):
        assert done in text, f"'{done}' is missing from the outputs"

    # the %%kernel cell's views: a Tab of passes / layout / code, rendered as live widgets
    views = page.locator(".jp-NotebookPanel .jupyter-widgets.widget-tab").first
    views.wait_for(state="visible", timeout=90_000)
    page.locator(".jp-NotebookPanel .jp-CodeCell", has_text="%%kernel").first.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "01_kernel_cell.png"))

    # 1. the pass list: every pass of the trace, the GPU passes among them
    passes = views.locator(".kl-passes select").first
    options = passes.locator("option").all_inner_texts()
    names = " ".join(options)
    assert len(options) >= 10, options
    for name in ("frontend", "canonicalize", "assign_layouts", "allocate_shared", "to_ptx"):
        assert name in names, f"pass {name} is not in the pass list: {options}"
    assert views.locator(".kl-lab .kl-code").count() >= 1, "no IR shown next to the pass list"

    # 2. an IR diff: pick assign_layouts, press "diff vs previous": added (+) and removed (-) lines appear
    index = next(i for i, o in enumerate(options) if "assign_layouts" in o)
    passes.evaluate("(el, i) => { el.selectedIndex = i; el.dispatchEvent(new Event('change', {bubbles: true})); }",
                    index)
    page.wait_for_function("""() => [...document.querySelectorAll('.kl-passes b')]
                                  .some(b => b.textContent.includes('assign_layouts'))""", timeout=60_000)
    views.locator(".kl-passes button", has_text="diff vs previous").first.click()
    added = views.locator(".kl-passes .kl-add")
    added.first.wait_for(state="visible", timeout=60_000)
    assert added.count() >= 3, "the diff shows no added lines"
    assert views.locator(".kl-passes .kl-del").count() >= 1, "the diff shows no removed lines"
    assert any("#blocked" in t for t in added.all_inner_texts()), "the diff of assign_layouts adds no layout"
    views.screenshot(path=str(SHOTS / "01_passes_diff.png"))

    # 3. the layout picture: the layout tab draws the 1024-element tile, one rect per element
    views.locator(".lm-TabBar-tab", has_text="layout").first.click()
    cells = views.locator("svg rect.c")
    cells.first.wait_for(state="visible", timeout=60_000)
    assert cells.count() >= 1024, f"the layout picture has {cells.count()} element cells, expected 1024"
    assert "#blocked<[4], [32], [4], [0]>" in views.inner_text(), "the layout view does not name the layout"
    views.screenshot(path=str(SHOTS / "01_layout.png"))

    # the roofline of recorded H200 results is an image in the outputs
    perf = page.locator(".jp-NotebookPanel .kl-perf img").first
    perf.scroll_into_view_if_needed()
    assert perf.evaluate("img => img.naturalWidth") > 100, "the recorded roofline image did not load"
    perf.screenshot(path=str(SHOTS / "01_roofline.png"))
