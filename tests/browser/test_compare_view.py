"""The compare view (kernellab.viz.compare) in JupyterLab in headless Chromium, on the kernels people compare:
the 128x128x64 fp16 matmul (64x64 tiles against 128x128) and the causal flash-attention forward (2 stages
against 3), compiled for sm_90a without a GPU. At 1280 and 1600 px nothing of the view reaches past the cell's
output area (no clipped pane), its tables scroll nowhere sideways, the called-out differences are on screen.
Screenshots: artifacts/screenshots/compare_{matmul,attention}_{1280,1600}.png."""
from __future__ import annotations

import pytest

from tests.browser.lab_page import run_notebook
from tests.browser.test_lab_browser import ROOT, SHOTS, lab  # noqa: F401  (the JupyterLab fixture)

pytestmark = pytest.mark.slow

NOTEBOOK = "compare_view.ipynb"
CELLS = [
    f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
    "import torch, kernellab as kl, kernellab.language as tl, kernellab.viz as kv\n"
    "from tests.corpus import make_kernels\n"
    "from benchmarks.attention import CONFIGS\n"
    "from benchmarks.attention_kernel import LOG2E, make_attention_kernel",
    "h = torch.randn(256, 256).half()\n"
    "kv.compare(make_kernels(kl, tl)['matmul_kernel'], h, h, h, 256, 256, 256, 256, 1, 256, 1, 256, 1,\n"
    "           grid=lambda m: (kl.cdiv(256, m['BLOCK_M']) * kl.cdiv(256, m['BLOCK_N']),), BLOCK_K=64, GROUP_M=8,\n"
    "           num_warps=4, num_stages=3, target='sm_90a',\n"
    "           a=dict(BLOCK_M=64, BLOCK_N=64), b=dict(BLOCK_M=128, BLOCK_N=128))",
    "q = torch.empty(1, 2, 256, 64, dtype=torch.float16)\n"
    "cfg = {k: v for k, v in CONFIGS[64].items() if k != 'num_stages'}\n"
    "kv.compare(make_attention_kernel(kl, tl), q, q, q, q, LOG2E / 8, *q.stride(), *q.stride(), *q.stride(),\n"
    "           *q.stride(), 2, 256, HEAD_DIM=64, CAUSAL=True, grid=(2, 2), target='sm_90a', **cfg,\n"
    "           a=dict(num_stages=2), b=dict(num_stages=3))",
]
KERNELS = ["matmul", "attention"]

OUTSIDE = """view => {
    // elements of the view past the right edge of the cell's output area (clipped there); the lines of a code
    // box that scrolls itself (the GPU IR diff) are not clipped, they scroll
    const area = view.closest('.jp-OutputArea-output').getBoundingClientRect();
    const out = [];
    for (const el of [view, ...view.querySelectorAll('*')]) {
        const r = el.getBoundingClientRect();
        if (r.width && r.right > area.right + 1 && !(el.parentElement && el.parentElement.closest('.kl-code')))
            out.push(`${el.tagName}.${String(el.className).slice(0, 60)} right=${Math.round(r.right)} ` +
                     `area=${Math.round(area.right)}`);
    }
    return out.slice(0, 12);
}"""

SIDEWAYS = """view => [...view.querySelectorAll('table, svg, .kl-code, .kl-callout, .kl-cmp-sides')]
    .filter(el => el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible'
                  && !el.classList.contains('kl-code'))
    .map(el => `${el.tagName}.${el.className} ${el.scrollWidth}>${el.clientWidth}`)"""


@pytest.fixture(scope="module")
def compare_page(lab):  # noqa: F811
    ready = "!!document.querySelector('.kl-cmp')"
    with run_notebook(lab, NOTEBOOK, CELLS, ready, 'compare') as pg:
        yield pg


@pytest.mark.parametrize("width", [1280, 1600])
@pytest.mark.parametrize("k", range(len(KERNELS)), ids=KERNELS)
def test_compare_view_has_no_clipped_pane(compare_page, width, k):
    page = compare_page
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(600)
    view = page.locator(".kl-cmp").nth(k)
    view.evaluate("v => v.querySelectorAll('details').forEach(d => d.open = true)")
    view.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    assert view.evaluate(OUTSIDE) == [], f"{KERNELS[k]} at {width} px: parts of the compare view are clipped"
    assert view.evaluate(SIDEWAYS) == [], f"{KERNELS[k]} at {width} px: a table or picture scrolls sideways"
    text = view.inner_text()
    assert "what changed" in text and "registers / thread" in text and "shared memory" in text
    assert "not measured" in text or "measured (median)" in text
    box = view.bounding_box()
    page.set_viewport_size({"width": width, "height": int(min(box["height"], 6000)) + 200})
    view.screenshot(path=str(SHOTS / f"compare_{KERNELS[k]}_{width}.png"))
