"""Screenshots of the lab as a user sees it: a `%%kernel` cell with every view on a real matmul (tutorial 03's
grouped 128x128x64 fp16 tile, a K loop of tl.dot, 3 stages) and one on the causal flash-attention forward of the
benchmarks (head dim 64), run in JupyterLab in headless Chromium (no GPU needed: the CPU interpreter runs them and
the GPU stages are built for sm_90a), at 1280 and 1600 px. Each view of each cell is clicked and shot (and, with
--notebook more or both, the compare view and the sanitizer's access map of a second notebook); the
console's errors, elements reaching past their cell's output area and empty views are listed at the end (exit
status 1 when there are any).

    PYTHONPATH=. python -m benchmarks.tools.lab_screenshots [--out /tmp/kl-lab-shots] [--widths 1280,1600] [--dark]

Needs JupyterLab, ipywidgets, Playwright and a chromium (KERNELLAB_CHROMIUM, default /usr/bin/chromium).
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MATMUL_ARGS = ('%%kernel --args "a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), '
               'c.stride(1)" -c BLOCK_M=128 -c BLOCK_N=128 -c BLOCK_K=64 -c GROUP_M=8 --num-warps 4 --num-stages 3 '
               '--grid "(cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N),)" --views all --run '
               '--check "torch.allclose(c.float(), a.float() @ b.float(), atol=0.1, rtol=0.01)"\n')


def _kernel_text(path: Path, first: str, end: str) -> str:
    """A kernel's source out of one of our files (from the line `first` to the line before `end`), dedented."""
    text = path.read_text()
    start = text.index(first)
    return textwrap.dedent(text[start:text.index(end, start)])


# tutorial 03's kernel, as the corpus has it
MATMUL = MATMUL_ARGS + _kernel_text(ROOT / "tests" / "corpus.py", "    @kl.jit\n    def matmul_kernel",
                                    "    @kl.jit\n    def cumsum_kernel")

ATTENTION_ARGS = ('%%kernel --args "q, k, v, o, sm_scale * 1.4426950408889634, *q.stride(), *k.stride(), *v.stride(), '
                  '*o.stride(), H, N_CTX" -c BLOCK_M=128 -c BLOCK_N=64 -c HEAD_DIM=64 -c CAUSAL=True --num-warps 4 '
                  '--num-stages 3 --grid "(cdiv(N_CTX, BLOCK_M), Z * H)" --views all --run --out o '
                  '--check "torch.softmax((q.double() @ k.double().transpose(-1, -2) * sm_scale).masked_fill('
                  'torch.ones(N_CTX, N_CTX, dtype=torch.bool).triu(1), float(\'-inf\')), -1) @ v.double()" '
                  '--atol 2e-2 --rtol 2e-2\n')

SETUP = """%load_ext kernellab
import torch
torch.manual_seed(0)
M = N = K = 256
a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
c = torch.full((M, N), float("nan")).half()
Z, H, N_CTX, D = 1, 2, 256, 64
q, k, v = (torch.randn(Z, H, N_CTX, D).half() for _ in range(3))
o = torch.full_like(q, float("nan"))
sm_scale = D ** -0.5"""

# elements of a view that reach past the right edge of the cell's output area (scrolled boxes excepted)
OUTSIDE = """view => {
    const area = view.closest('.jp-OutputArea-output').getBoundingClientRect();
    const out = [];
    for (const el of [view, ...view.querySelectorAll('*')]) {
        if (!el.getClientRects().length) continue;
        const r = el.getBoundingClientRect();
        let p = el.parentElement, scrolled = false;
        while (p && p !== view) {
            const cs = getComputedStyle(p);
            if (/(auto|scroll|hidden)/.test(cs.overflowX)) { scrolled = true; break; }
            p = p.parentElement;
        }
        if (r.width && r.right > area.right + 1 && !scrolled) out.push(
            `${el.tagName}.${String(el.className.baseVal ?? el.className).slice(0, 50)} right=${Math.round(r.right)} `
            + `area=${Math.round(area.right)} "${(el.textContent || '').trim().slice(0, 40)}"`);
    }
    return out.slice(0, 8);
}"""



SETUP_MORE = """n_rows, n_cols = 8, 781
x = torch.randn(n_rows, n_cols)
y = torch.full_like(x, float("nan"))
w, bias = torch.randn(n_cols), torch.randn(n_cols)
ln_out = torch.full_like(x, float("nan"))
mean, rstd = torch.full((n_rows,), float("nan")), torch.full((n_rows,), float("nan"))"""

# a memory-bound row kernel: one program per row of 781 fp32, a masked tail, 16-byte vector loads; no GPU, so
# --bench must say that nothing was timed
SOFTMAX = ('%%kernel --args "y, x, x.stride(0), y.stride(0), n_rows, n_cols" -c BLOCK_SIZE=1024 --grid "(n_rows,)" '
           '--sanitize --out y --check "torch.softmax(x, -1)" --bench "torch.softmax(x, -1)" --views perf\n') + '''\
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_cols
    x = tl.load(in_ptr + row * in_row_stride + offs, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    tl.store(out_ptr + row * out_row_stride + offs, num / tl.sum(num, axis=0), mask=mask)
'''

LAYER_NORM = ('%%kernel --args "x, ln_out, w, bias, mean, rstd, x.stride(0), n_cols, 1e-5" -c BLOCK_SIZE=256 '
              '--grid "(n_rows,)" --sanitize --out ln_out '
              '--check "torch.nn.functional.layer_norm(x, (n_cols,), w, bias, 1e-5)" --views none\n') + '''\
def layer_norm_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(X + cols, mask=cols < N, other=0.)
    mu = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        d = tl.where(cols < N, tl.load(X + cols, mask=cols < N, other=0.) - mu, 0.)
        acc += d * d
    r = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(Mean + row, mu)
    tl.store(Rstd + row, r)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        v = (tl.load(X + cols, mask=mask, other=0.) - mu) * r
        tl.store(Y + cols, v * tl.load(W + cols, mask=mask) + tl.load(B + cols, mask=mask), mask=mask)
'''


def _flags(cell: str, flags: str) -> str:
    """`cell` (a `%%kernel` cell of the views notebook) with its run and view flags replaced by `flags`."""
    head, body = cell.split("\n", 1)
    head = head[:head.index(" --views")] if " --views" in head else head
    return f"{head} {flags}\n{body}"


def more_cells() -> list[tuple[str, str]]:
    """(name, cell) of the second notebook: the compare view (--compare) on the matmul and on attention, and the
    access map (--sanitize) on softmax, layer norm, the matmul and attention."""
    return [
        ("compare_matmul", _flags(MATMUL, '--compare "BLOCK_M=64, BLOCK_N=64" "BLOCK_M=128, BLOCK_N=128"')),
        ("compare_attention", _flags(attention_cell(), '--compare "num_stages=2" "num_stages=3"')),
        ("access_softmax", SOFTMAX),
        ("access_layer_norm", LAYER_NORM),
        ("access_matmul", _flags(MATMUL, "--views none --sanitize --run").replace(
            ' --check "torch.allclose(c.float(), a.float() @ b.float(), atol=0.1, rtol=0.01)"', "")),
        ("access_attention", _flags(attention_cell(), "--views none --sanitize --run")),
    ]


def attention_cell() -> str:
    """The benchmarks' attention forward (its inner loop function and the kernel), as a `%%kernel` cell."""
    return ATTENTION_ARGS + _kernel_text(ROOT / "benchmarks" / "attention_kernel.py",
                                         "    @kl.jit\n    def _attn_fwd_inner", "    return attention_fwd_kernel")


def shoot(page, out: Path, width: int, problems: list[str]):
    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(800)
    page.screenshot(path=str(out / f"page_{width}.png"))
    from tests.browser.lab_page import CLIPPED, LIVE

    cells = page.locator(".jp-CodeCell", has_text="%%kernel")
    for i, name in enumerate(("matmul", "attention")):
        cell = cells.nth(i)
        tabs = cell.locator(f".jupyter-widgets.widget-tab{LIVE}").first
        tabs.scroll_into_view_if_needed()
        bar = tabs.locator(":scope > .lm-TabBar .lm-TabBar-tab")  # not the tabs of a view's own tab bar
        titles = bar.all_inner_texts()
        for k, title in enumerate(titles):
            bar.nth(k).click()
            page.wait_for_timeout(1500)
            slug = re.sub(r"\W+", "_", title.strip()).strip("_") or str(k)
            tabs.screenshot(path=str(out / f"{name}_{slug}_{width}.png"))
            panel = tabs.locator(":scope > .widget-tab-contents > .lm-Widget:not(.lm-mod-hidden)").first
            if panel.count():
                if not panel.inner_text().strip() and not panel.locator("svg, img, canvas").count():
                    problems.append(f"{width}px {name} / {title}: empty view")
                for o in panel.evaluate(OUTSIDE):
                    problems.append(f"{width}px {name} / {title}: past the output area: {o}")
                for o in panel.evaluate(CLIPPED):
                    problems.append(f"{width}px {name} / {title}: text cut off: {o}")
        perf = cell.locator(".kl-perf").first  # the recorded roofline (no GPU: --views all shows it)
        if perf.count():
            perf.scroll_into_view_if_needed()
            perf.screenshot(path=str(out / f"{name}_roofline_{width}.png"))
            if not perf.locator("img").count():
                problems.append(f"{width}px {name}: the roofline has no picture: {perf.inner_text()[:120]!r}")
        for o in cell.locator(".jp-OutputArea-output").all():
            if o.is_visible():
                for x in o.evaluate(OUTSIDE.replace("view.closest('.jp-OutputArea-output')", "view")):
                    problems.append(f"{width}px {name} outputs: {x}")


def shoot_more(page, out: Path, width: int, names: list[str], problems: list[str]):
    """Each cell's whole output at `width`: the compare views opened fully, the access maps with their default
    program and then with their second program picked."""
    from tests.browser.lab_page import CLIPPED

    page.set_viewport_size({"width": width, "height": 1000})
    page.wait_for_timeout(800)
    cells = page.locator(".jp-CodeCell", has_text="%%kernel")
    for i, name in enumerate(names):
        cell = cells.nth(i)
        area = cell.locator(".jp-OutputArea").first
        area.evaluate("a => a.querySelectorAll('details').forEach(d => d.open = true)")
        # the notebook scrolls inside the window: a window as tall as the output, the output scrolled to its top
        page.set_viewport_size({"width": width, "height": int(min(area.bounding_box()["height"], 7000)) + 300})
        page.wait_for_timeout(1000)
        area.evaluate("a => a.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(500)
        box = area.bounding_box()
        vh = page.viewport_size["height"]
        page.screenshot(path=str(out / f"{name}_{width}.png"), clip={
            "x": box["x"], "y": max(box["y"], 0), "width": box["width"],
            "height": max(min(box["y"] + box["height"], vh) - max(box["y"], 0), 1)})
        picks = area.locator(".kl-am-pick")
        if picks.count() > 1:
            picks.nth(1).click()
            page.wait_for_timeout(300)
            area.locator(".kl-am-programs").first.screenshot(path=str(out / f"{name}_program1_{width}.png"))
        page.set_viewport_size({"width": width, "height": 1000})
        for o in area.locator(".jp-OutputArea-output").all():
            if o.is_visible():
                for x in o.evaluate(OUTSIDE.replace("view.closest('.jp-OutputArea-output')", "view")):
                    problems.append(f"{width}px {name}: past the output area: {x}")
                for x in o.evaluate(CLIPPED):
                    problems.append(f"{width}px {name}: text cut off: {x}")
        if name.startswith("access") and not area.locator(".kl-am-panel").count():
            problems.append(f"{width}px {name}: no access map")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/kl-lab-shots")
    ap.add_argument("--widths", default="1280,1600")
    ap.add_argument("--notebook", choices=("views", "more", "both"), default="both",
                    help="views: every view of the matmul and attention cells; more: the compare view and the "
                         "access map (matmul, attention, softmax, layer norm); both (default)")
    ap.add_argument("--dark", action="store_true", help="JupyterLab's dark theme (the PNGs go to OUT/dark)")
    args = ap.parse_args(argv)
    out = Path(args.out) / ("dark" if args.dark else "")
    out.mkdir(parents=True, exist_ok=True)

    import json
    import os
    import shutil

    from tests.browser.lab_page import open_and_run
    from tests.browser.test_lab_browser import CHROMIUM, jupyterlab

    chromium = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if not chromium:
        sys.exit("no chromium (KERNELLAB_CHROMIUM or /usr/bin/chromium)")
    from tests.browser.lab_page import notebook_json

    problems: list[str] = []
    theme = "JupyterLab Dark" if args.dark else None
    with tempfile.TemporaryDirectory(prefix="kl-lab-") as tmp, jupyterlab(Path(tmp), chromium, theme) as lab:
        widths = [int(x) for x in args.widths.split(",")]
        msgs = []
        if args.notebook in ("views", "both"):
            (lab["root"] / "real_kernels.ipynb").write_text(
                json.dumps(notebook_json([SETUP, MATMUL, attention_cell()])))
            ready = "document.querySelectorAll('.jp-CodeCell .widget-tab').length >= 2"
            with open_and_run(lab, "real_kernels.ipynb", ready, "shots", timeout_s=600) as page:
                page.wait_for_timeout(2000)
                for w in widths:
                    shoot(page, out, w, problems)
                problems += [f"page error: {e}" for e in page.errors]
                problems += [f"console error: {e}" for e in page.console_errors]
                msgs += page.locator(".jp-CodeCell .kl-msg").all_inner_texts()
        if args.notebook in ("more", "both"):
            named = more_cells()
            (lab["root"] / "compare_access.ipynb").write_text(
                json.dumps(notebook_json([SETUP + "\n" + SETUP_MORE] + [c for _, c in named])))
            ready = "document.querySelectorAll('.kl-am-panel').length >= 1"
            with open_and_run(lab, "compare_access.ipynb", ready, "shots", timeout_s=900) as page:
                page.wait_for_timeout(2000)
                for w in widths:
                    shoot_more(page, out, w, [n for n, _ in named], problems)
                problems += [f"page error: {e}" for e in page.errors]
                problems += [f"console error: {e}" for e in page.console_errors]
                msgs += page.locator(".jp-CodeCell .kl-msg").all_inner_texts()
    print("cell messages:\n  " + "\n  ".join(m.replace("\n", " | ")[:300] for m in msgs))
    print(f"screenshots in {out}:", ", ".join(sorted(p.name for p in out.glob("*.png"))))
    print("\n".join(problems) or "no problems found")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
