"""Static renderings: well-formed, self-contained (no network, no scripts), theme-neutral, and showing
what the trace holds (every pass, every element of a tile, every shared-memory buffer)."""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.viz import data as D
from kernellab.viz import html as H
from tests.corpus import make_kernels

K = make_kernels(kl, tl)
VOID = {"br", "hr", "img", "input", "meta", "link", "col", "area", "base", "embed", "source", "track", "wbr"}


class _Checker(HTMLParser):
    """Every non-void tag closes in order (self-closing SVG tags count as closed)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            if tag in self.stack:
                while self.stack.pop() != tag:
                    pass
        else:
            self.stack.pop()


def well_formed(markup: str) -> _Checker:
    c = _Checker()
    c.feed(markup)
    c.close()
    assert not c.errors, c.errors[:5]
    assert not c.stack, c.stack[-5:]
    return c


def self_contained(markup: str):
    """No scripts, no external stylesheets or images, no fetched URLs (SVG namespaces are not fetched)."""
    low = markup.lower()
    assert "<script" not in low and "<link" not in low and "@import" not in low and "<iframe" not in low
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", low)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", low)
    for url in re.findall(r"https?://[^\s\"'<>)]+", markup):
        assert url.startswith(("http://www.w3.org/",)), url


def theme_neutral(markup: str):
    """No opaque page backgrounds: text and strokes follow the theme (currentColor / JupyterLab vars)."""
    low = markup.lower()
    assert not re.search(r"background(-color)?\s*:\s*(#fff\b|#ffffff|white|#000\b|#000000|black)", low)
    assert 'fill="white"' not in low and 'fill="#ffffff"' not in low


@pytest.fixture(scope="module")
def cks():
    x2 = torch.randn(64, 64)
    h = torch.randn(64, 64).half()
    return {
        "softmax": K["softmax_kernel"].warmup(x2, x2, 64, 64, 64, 64, BLOCK=128).build_gpu(),
        "matmul": K["matmul_kernel"].warmup(h, h, h, 64, 64, 64, 64, 1, 64, 1, 64, 1, BLOCK_M=32, BLOCK_N=32,
                                            BLOCK_K=32, GROUP_M=4).build_gpu(),
        "transpose": K["transpose_kernel"].warmup(x2, x2, 64, 64, BM=32, BN=32).build_gpu(),
        "add": K["add_kernel"].warmup(torch.randn(4096), torch.randn(4096), torch.randn(4096), 4096,
                                      BLOCK=1024).build_gpu(),
    }


def _text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_highlight_marks_tokens_and_escapes():
    line = '  %x = tt.load %5, %mask {vec = 4} : tensor<128xf32, #L0> loc(31:13)'
    out = H.highlight(line)
    assert '<span class="ko">tt.load</span>' in out
    assert '<span class="kv">%x</span>' in out and '<span class="kv">%mask</span>' in out
    assert '<span class="kt">tensor&lt;128xf32, <span class="kL">#L0</span>&gt;</span>' in out
    assert '<span class="kc">loc(31:13)</span>' in out
    assert _text(out) == line
    assert "<b>" not in H.highlight("<b>not markup</b>")


def test_passes_html_lists_every_pass_and_marks_changes(cks):
    ck = cks["softmax"]
    small = H.passes_html(ck)  # the saved fallback: the table and the pass the live view opens on
    well_formed(small)
    assert small.count("<details open>") == 1 and "live notebook" in small
    out = H.passes_html(ck, full=True)
    well_formed(out)
    self_contained(out)
    theme_neutral(out)
    for p in ck.trace.passes:
        assert f"<b>{p.name}</b>" in out
    # one collapsible IR per pass whose IR differs from the previous one
    distinct = sum(1 for i, p in enumerate(ck.trace.passes) if i == 0 or p.ir != ck.trace.passes[i - 1].ir)
    assert out.count("<details>") == distinct
    assert "IR unchanged" in out
    # changed lines of assign_layouts are marked: the #L0 alias line did not exist before
    index = [p.name for p in ck.trace.passes].index("assign_layouts")
    sec = out.split(f"{index}. assign_layouts")[1].split("</details>")[0]
    marked = re.findall(r'<span class="kl-l kl-changed"><span class="kl-n">(\d+)</span>(.*?)</span>(?=<span class="kl-l|</div>)',
                        sec)
    assert any("#L0 = #blocked" in _text(body) for _, body in marked)
    assert "var(--jp-" in out  # JupyterLab theme variables with fallbacks


def test_ir_diff_html(cks):
    t = cks["softmax"].trace
    i = [p.name for p in t.passes].index("assign_layouts")
    before, after = t.passes[i - 1].ir, t.passes[i].ir  # the pass before -> assign_layouts
    out = H.ir_diff_html(before, after)
    well_formed(out)
    self_contained(out)
    diff = D.ir_diff(before, after)
    n_add = sum(tag == "add" for tag, _ in diff)
    n_del = sum(tag == "del" for tag, _ in diff)
    assert out.count('class="kl-l kl-add"') == n_add and out.count('class="kl-l kl-del"') == n_del
    assert f"+{n_add}" in out and f"-{n_del}" in out
    assert '<span class="kl-g">+</span>' in out and '<span class="kl-g">-</span>' in out
    short = H.ir_diff_html(before, after, context=1)
    assert "unchanged lines" in short and len(short) < len(out)
    assert "no changes" in H.ir_diff_html(before, before)


@pytest.mark.parametrize("layout,shape,vec,copies", [
    ("#blocked<[4], [32], [4], [0]>", (1024,), 4, False),
    ("#blocked<[1, 4], [4, 8], [4, 1], [1, 0]>", (32, 32), 4, False),
    ("#blocked<[1], [32], [4], [0]>", (64,), None, True),
    ("#slice<1, #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>>", (32,), None, True),
])
def test_layout_svg(layout, shape, vec, copies):
    svg = H.layout_svg(layout, shape, 4, vec=vec)
    well_formed(svg)
    self_contained(svg)
    theme_neutral(svg)
    numel = 1
    for s in shape:
        numel *= s
    assert len(re.findall(r'<rect class="c w\d"', svg)) == numel  # one cell per element
    g = D.layout_grid(layout, shape, 4)
    for w in range(4):
        assert f"warp {w}" in svg
        n_w = sum(1 for (ww, _, _) in g["elements"].values() if ww == w)
        assert len(re.findall(rf'<rect class="c w{w}"', svg)) == n_w
    hatched = len(re.findall(r'fill="url\(#klh\d+\)"', svg))  # the legend swatch is #klhl...
    assert (hatched == numel) if copies else (hatched == 0)
    assert ("replicated" in svg) == copies
    if vec:
        assert svg.count('stroke-width="1.4" rx="2"/>') == numel // vec + 1  # + the legend swatch
        assert f"one {vec * 4}-byte access" in svg
    assert "t0" in svg and "r0" in svg


def test_layout_svg_ids_are_unique_per_rendering():
    a = H.layout_svg("#blocked<[1], [32], [4], [0]>", (64,), 4)
    b = H.layout_svg("#blocked<[1], [32], [4], [0]>", (64,), 4)
    ida = set(re.findall(r'id="([^"]+)"', a))
    idb = set(re.findall(r'id="([^"]+)"', b))
    assert ida and not ida & idb


def test_layout_html_of_a_load(cks):
    out = H.layout_html(cks["add"])
    well_formed(out)
    assert "tt.load" in out and "coalesced" in out and "16 B" in out
    with pytest.raises(KeyError):
        H.layout_html(cks["add"], value="%nope")


@pytest.mark.parametrize("name", ["softmax", "matmul", "transpose", "add"])
def test_smem_svg_and_html(cks, name):
    ck = cks[name]
    m = D.smem_map(ck.trace)
    svg = H.smem_svg(m["buffers"], m["total"], m["limit"], m["barriers"], m["points"])
    well_formed(svg)
    theme_neutral(svg)
    titles = re.findall(r"<g><title>([^<]*)</title><rect", svg)
    assert len(titles) == len(m["buffers"])
    for t, b in zip(titles, ck.trace.shared_plan):
        assert t.startswith(b.op) and f"{b.size} B at offset {b.offset}" in t
    assert svg.count("bar.sync before op") == len(m["barriers"])
    assert "of 228 KiB" in svg
    out = H.smem_html(ck)
    well_formed(out)
    self_contained(out)
    if not m["buffers"]:
        assert "no shared memory" in out
    if name == "transpose":  # the conversion's pitch is the one with the fewest wavefronts (scratch.py)
        assert "layout conversion" in out and "1-way" in out and "4-way" not in out
    if name == "matmul":  # the pipelined loop: stage buffers, the waits that order them, their encodings
        assert "cp.async.wait_group" in out and "3\u00a0×\u00a0" in out
        assert "rows padded by 16 bytes: each row starts one bank group further" in out  # 32x32 tiles: mma.sync
        assert out.count("bank group") >= 2 * 8  # a picture per stage buffer


def test_smem_html_of_an_unpipelined_loop_shows_the_write_after_read_barrier():
    h = torch.randn(64, 64).half()
    ck = K["matmul_kernel"].warmup(h, h, h, 64, 64, 64, 64, 1, 64, 1, 64, 1, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32,
                                   GROUP_M=4, num_stages=1).build_gpu()
    out = H.smem_html(ck)
    well_formed(out)
    assert "write-after-read" in out and "cp.async" not in out


def test_smem_svg_over_the_limit():
    plan = [{"op": "ttg.convert_layout", "line": 3, "size": 300 * 1024, "offset": 0, "live": [2, 2], "reason": "x"}]
    svg = H.smem_svg(plan, 300 * 1024, 228 * 1024)
    assert "over the limit" in svg


def test_code_html(cks):
    ck = cks["matmul"]
    small = H.code_html(ck)  # the saved fallback: the report and the head of the PTX
    well_formed(small)
    assert f"<td>{ck.n_regs}</td>" in small and ".entry matmul_kernel" in small and "LLVM IR (" not in small
    out = H.code_html(ck, full=True)
    well_formed(out)
    self_contained(out)
    theme_neutral(out)
    assert "registers / thread" in out and f"<td>{ck.n_regs}</td>" in out
    assert f"PTX ({len(ck.asm['ptx'].splitlines())} lines)" in out
    assert f"LLVM IR ({len(ck.asm['llir'].splitlines())} lines)" in out
    assert "occupancy" in out
    if D.find_sass_tool():
        assert "SASS (" in out
    else:
        assert "nvdisasm was not found" in out


def test_graph_html(cks, monkeypatch):
    from kernellab.viz.graph_view import graph_page

    out = graph_page(cks["softmax"])
    well_formed(out)
    self_contained(out)
    theme_neutral(out)
    import kernellab.viz.graph as G

    if G.find_dot():
        assert "<svg" in out and "tt.load" in out
    monkeypatch.setattr(G, "find_dot", lambda: None)
    out = graph_page(cks["softmax"])
    assert "apt-get install graphviz" in out and "digraph dataflow" in out


def cell_labels(svg: str) -> list[tuple[int, int]]:
    """(lane, register) of every labelled cell of a layout grid: a row's group holds its lane labels, then its
    register labels, one <tspan> per cell, in the same order."""
    out = []
    for lanes, regs in re.findall(r'<text y="9">(.*?)</text><text class="r" y="18">(.*?)</text>', svg):
        t = re.findall(r">t(\d+)<", lanes)
        r = re.findall(r">r(\d+)<", regs)
        assert len(t) == len(r)
        out += [(int(a), int(b)) for a, b in zip(t, r)]
    return out


def test_layout_svg_of_a_big_tile_is_drawn_in_part():
    svg = H.layout_svg("#blocked<[1, 4], [2, 16], [8, 1], [1, 0]>", (256, 256), 8, vec=4)
    well_formed(svg)
    assert "showing rows 0–31 of 256, columns 0–31 of 256 (1024 of 65536 elements)" in svg
    assert "pattern repeats every 16 x 64 elements" in svg
    assert len(re.findall(r'<rect class="c w\d"', svg)) == 1024
    assert len(cell_labels(svg)) == 1024  # every cell labelled
    assert 'class="kl-overview"' in svg and 'class="kl-window"' in svg
    assert len(svg) < 200_000  # rows as groups, a <tspan> per label, sizes in the stylesheet


def test_smem_html_of_a_wgmma_loop_draws_the_swizzle():
    h = torch.randn(64, 64).half()
    ck = K["matmul_kernel"].warmup(h, h, h, 64, 64, 64, 64, 1, 64, 1, 64, 1, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64,
                                   GROUP_M=4, num_warps=4).build_gpu()
    assert "wgmma.mma_async" in ck.asm["ptx"]
    out = H.smem_html(ck)
    well_formed(out)
    assert "128-byte swizzle: chunk c of row r is stored at c XOR (r mod 8)" in out
    assert "wgmma reads (8 rows x 16 B): 1-way" in out and "cp.async writes (16 B per thread): 1-way" in out


def test_smem_chart_is_drawn_wide_and_shrinks_to_fit():
    """Drawn 960 px wide (it stayed 640 px in a 1400 px output), scaled down where the output is narrower."""
    svg = H.smem_svg([], 0, 228 * 1024)
    assert re.search(r'<svg class="kl-smem-map" viewBox="0 0 960 \d+" width="960"', svg) and "max-width:100%" in svg
