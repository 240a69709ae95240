"""Live views build without a running Jupyter kernel, react to selections, and carry a static HTML
fallback in their mime bundle."""
from __future__ import annotations

import html
import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from tests.corpus import CASES, make_kernels

W = pytest.importorskip("ipywidgets")

import kernellab.viz as kv  # noqa: E402
from kernellab.viz import data as D  # noqa: E402

K = make_kernels(kl, tl)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def cks():
    x2 = torch.randn(64, 64)
    h = torch.randn(64, 64).half()
    return {
        "softmax": K["softmax_kernel"].warmup(x2, x2, 64, 64, 64, 64, BLOCK=128).build_gpu(),
        "matmul": K["matmul_kernel"].warmup(h, h, h, 64, 64, 64, 64, 1, 64, 1, 64, 1, BLOCK_M=32, BLOCK_N=32,
                                            BLOCK_K=32, GROUP_M=4).build_gpu(),
        "transpose": K["transpose_kernel"].warmup(x2, x2, 64, 64, BM=32, BN=32).build_gpu(),
    }


def pane_lines(markup: str) -> dict:
    """{line number: (css classes, text)} of a rendered code box."""
    out = {}
    for cls, num, body in re.findall(
            r'<span class="kl-l([^"]*)"><span class="kl-n">(\d+)</span>(.*?)</span>(?=<span class="kl-l|</div>)',
            markup):
        out[int(num)] = (cls.split(), html.unescape(re.sub(r"<[^>]+>", "", body)))
    return out


def test_show_builds_a_tab_of_every_view(cks):
    tab = kv.show(cks["softmax"])
    assert isinstance(tab, W.Tab)
    assert tuple(tab.titles) == ("passes", "linked", "layout", "shared memory", "code", "graph")
    assert [type(c).__name__ for c in tab.children] == ["PassesView", "LinkedView", "LayoutView", "SharedMemoryView",
                                                        "CodeView", "GraphView"]
    bundle = tab._repr_mimebundle_()
    assert WIDGET_MIME in bundle and bundle[WIDGET_MIME]["model_id"] == tab.model_id
    for title in tab.titles:
        assert f"<h3>{title}</h3>" in bundle["text/html"]
    only = kv.show(cks["softmax"], views=("code",))
    assert [type(c).__name__ for c in only.children] == ["CodeView"]
    with pytest.raises(ValueError, match="unknown view"):
        kv.show(cks["softmax"], views=("nope",))


@pytest.mark.parametrize("cls", ["PassesView", "LayoutView", "SharedMemoryView", "CodeView", "GraphView"])
def test_every_view_has_widget_and_static_html(cks, cls):
    view = getattr(kv, cls)(cks["transpose"])
    assert isinstance(view, W.Widget)
    bundle = view._repr_mimebundle_()
    assert WIDGET_MIME in bundle and bundle[WIDGET_MIME]["model_id"] == view.model_id
    assert bundle["text/html"].startswith('<div class="kl-lab">') and len(bundle["text/html"]) > 200
    assert "text/plain" in bundle


def test_passes_view_selecting_a_pass_updates_the_ir_pane(cks):
    ck = cks["softmax"]
    v = kv.PassesView(ck)
    names = [p.name for p in ck.trace.passes]
    assert [o[1] for o in v.pass_select.options] == list(range(len(names)))
    for label, (i, p) in zip([o[0] for o in v.pass_select.options], enumerate(ck.trace.passes)):
        assert p.name in label and label.startswith("●" if p.changed else "○") and "ms" in label
    # the last pass is shown first; pick others and compare the pane with that pass's IR text
    for name in ("frontend", "assign_layouts", "to_ptx"):
        i = names.index(name)
        v.select_pass(i)
        lines = pane_lines(v.ir_pane.value)
        ir = ck.trace.passes[i].ir.splitlines()
        assert len(lines) == len(ir)
        assert [lines[k + 1][1] for k in range(len(ir))] == ir
        assert name in v.header.value
    v.select_pass(names.index("frontend"))
    assert "#L0" not in v.ir_pane.value
    v.select_pass(names.index("assign_layouts"))
    assert "#L0 = #blocked" in html.unescape(re.sub(r"<[^>]+>", "", v.ir_pane.value))


def test_passes_view_diff_toggle(cks):
    ck = cks["softmax"]
    v = kv.PassesView(ck)
    i = [p.name for p in ck.trace.passes].index("assign_layouts")
    v.select_pass(i)
    v.diff_toggle.value = True
    diff = D.ir_diff(ck.trace.passes[i - 1].ir, ck.trace.passes[i].ir)
    assert v.ir_pane.value.count('class="kl-l kl-add') == sum(t == "add" for t, _ in diff)
    assert v.ir_pane.value.count('class="kl-l kl-del') == sum(t == "del" for t, _ in diff)
    v.diff_toggle.value = False
    assert 'class="kl-l kl-del' not in v.ir_pane.value


def test_passes_view_search_highlights_and_filters(cks):
    ck = cks["softmax"]
    v = kv.PassesView(ck)
    v.select_pass([p.name for p in ck.trace.passes].index("insert_barriers"))
    ir = ck.trace.passes[v.index].ir.splitlines()
    want = {k + 1 for k, l in enumerate(ir) if "tt.reduce" in l}
    v.search.value = "tt.reduce"
    hits = {n for n, (cls, _) in pane_lines(v.ir_pane.value).items() if "kl-hit" in cls}
    assert hits == want and len(want) >= 2
    assert f"{len(want)} line(s) match" in v.status.value
    v.only_matches.value = True
    shown = pane_lines(v.ir_pane.value)
    assert set(shown) == want
    assert len(v.ir_select.options) == len(want)
    v.search.value = "[unbalanced"  # not a regex: plain substring search, no exception
    assert "0 line(s) match" in v.status.value


def test_passes_view_ir_line_to_source_line_and_back(cks):
    ck = cks["softmax"]
    v = kv.PassesView(ck)
    v.select_pass([p.name for p in ck.trace.passes].index("insert_barriers"))
    ir = ck.trace.passes[v.index].ir.splitlines()
    k = next(i for i, l in enumerate(ir) if " tt.load " in l)
    # IR -> source: picking the load highlights the source line that has tl.load
    v.select_ir_line(k)
    src = pane_lines(v.source_pane.value)
    selected = [n for n, (cls, _) in src.items() if "kl-sel" in cls]
    assert len(selected) == 1
    assert "tl.load" in src[selected[0]][1] and src[selected[0]][1].strip() == ck.source_lines[selected[0] - 1].strip()
    assert v.src_select.value == selected[0]
    assert f"IR line {k + 1} → source line {selected[0]}" in v.status.value
    assert "kl-sel" in pane_lines(v.ir_pane.value)[k + 1][0]
    # source -> IR: picking the line of `z = x - tl.max(x, axis=0)` highlights the IR it became
    line = next(n for n, t in enumerate(ck.source_lines, 1) if "tl.max(x" in t)
    v.select_source_line(line)
    fwd, rev = D.op_source_map(ck.trace.passes[v.index])
    marked = {n - 1 for n, (cls, _) in pane_lines(v.ir_pane.value).items() if "kl-sel" in cls}
    assert marked == set(rev[line])
    assert any("tt.reduce" in ir[i] for i in marked) and any("arith.subf" in ir[i] for i in marked)
    assert "source line" in v.status.value


def test_layout_view_dropdown_switches_values(cks):
    ck = cks["transpose"]
    v = kv.LayoutView(ck)
    labels = [o[0] for o in v.dropdown.options]
    assert any("tt.load" in l for l in labels) and any(l.startswith("tt.store of") for l in labels)
    assert "tt.load" in v.current["op"]  # the first load is the default
    first = v.pane.value
    assert "coalesced" in first and "<svg" in first
    v.select("%35")  # the converted tile the store writes
    assert v.current["name"] == "%35" and v.pane.value != first
    assert "#blocked&lt;[4, 1], [8, 4], [1, 4], [0, 1]&gt;" in v.pane.value
    v2 = kv.LayoutView(ck, value="tile")
    assert v2.current["name"] == "%tile"
    with pytest.raises(KeyError):
        kv.LayoutView(ck, value="%missing")


def test_shared_memory_view_select_buffer(cks):
    ck = cks["matmul"]
    v = kv.SharedMemoryView(ck)
    n_buffers = len(ck.trace.shared_plan)
    assert [o[1] for o in v.buffer_select.options] == [None] + list(range(n_buffers))
    assert "KiB" in v.pane.value and "bar.sync before op" in v.pane.value
    v.buffer_select.value = 0  # the pipelined A tile: allocated for the tl.load that fills it
    assert "ttg.local_alloc" in v.detail.value and "tl.load" in html.unescape(v.detail.value)
    assert 'stroke-width="2"' in v.pane.value  # the picked buffer is drawn highlighted


def test_code_view_tabs(cks):
    ck = cks["matmul"]
    v = kv.CodeView(ck)
    assert tuple(v.tabs.titles) == ("PTX", "SASS", "LLVM IR", "report")
    ptx = html.unescape(re.sub(r"<[^>]+>", "", v.tabs.children[0].value))
    assert ".entry matmul_kernel" in ptx
    v.tabs.selected_index = 1  # the SASS is rendered when its tab is selected
    if D.find_sass_tool():
        assert "Function : matmul_kernel" in html.unescape(re.sub(r"<[^>]+>", "", v.tabs.children[1].value))
    else:
        assert "nvdisasm was not found" in v.tabs.children[1].value
    assert f"<td>{ck.n_regs}</td>" in v.tabs.children[3].value


def test_graph_view_with_and_without_graphviz(cks, monkeypatch):
    import kernellab.viz.graph as G

    v = kv.GraphView(cks["softmax"])
    if G.find_dot():
        assert "<svg" in v.pane.value
    monkeypatch.setattr(G, "find_dot", lambda: None)
    v = kv.GraphView(cks["softmax"])
    assert "apt-get install graphviz" in v.pane.value and "digraph dataflow" in v.pane.value


def test_pass_list_shows_each_pass_description(cks):
    """The live list carries what the static table does: every pass's one-line description, from the trace."""
    ck = cks["matmul"]
    v = kv.PassesView(ck)
    labels = [o[0] for o in v.pass_select.options]
    assert len(labels) == len(ck.trace.passes)
    for label, p in zip(labels, ck.trace.passes):
        assert p.description and label.endswith(p.description), (label, p.description)
        assert p.name in label


def test_show_builds_the_gpu_stages_of_a_cpu_run():
    """show() of a kernel compiled for a CPU run (tile IR only) builds its GPU stages itself (no GPU needed)
    instead of telling the user to call compiled.build_gpu()."""
    x = torch.randn(512)
    ck = K["add_kernel"].warmup(x, x, x, 512, BLOCK=512, num_warps=2)  # tile IR only
    assert "gpu" not in ck.asm
    tab = kv.show(ck)
    assert "gpu" in ck.asm and "ptx" in ck.asm and ck.num_warps == 2
    passes, linked, layout, smem, code, graph = tab.children
    assert linked.static_html().count('class="kl-lk-pane') >= 3  # source and two stages
    assert len(passes.pass_select.options) == len(ck.trace.passes)
    assert layout.entries and "<svg" in layout.pane.value
    assert "build_gpu" not in tab._repr_mimebundle_()["text/html"]
    assert ".entry add_kernel" in code.static_html() or ".entry" in code.static_html()
    assert "tt.load" in graph.static_html()


def test_views_say_why_when_the_gpu_stages_cannot_be_built(monkeypatch):
    from kernellab.errors import ToolchainError

    x = torch.randn(256)
    ck = K["add_kernel"].warmup(x, x, x, 256, BLOCK=256, num_warps=1)
    calls = []

    def broken(target=None):
        calls.append(target)
        raise ToolchainError("ptxas exploded")

    monkeypatch.setattr(ck, "build_gpu", broken)
    tab = kv.show(ck)
    passes, linked, layout, smem, code, graph = tab.children
    assert "tile IR" in linked.static_html()  # the linked view still shows the tile IR passes
    assert len(calls) == 1  # tried once, not once per view
    for pane in (layout.pane.value, smem.pane.value, code.static_html()):
        assert "could not be built" in pane and "ptxas exploded" in pane
    assert "tt.load" in graph.static_html()


def test_compiled_kernel_repr_is_one_short_line():
    x = torch.randn(128)
    ck = K["add_kernel"].warmup(x, x, x, 128, BLOCK=128, num_warps=2)  # not built by another test (the cache)
    assert "gpu" not in ck.asm
    text = repr(ck)
    assert "\n" not in text and len(text) < 200 and text.startswith("<CompiledKernel add_kernel(")
    assert "num_warps=2" in text and "PTX" not in text
    ck.build_gpu()
    text = repr(ck)
    assert "PTX for sm_90a" in text and "regs" in text and len(text) < 200 and "\n" not in text


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_view_builds_for_every_corpus_kernel(case, recwarn):
    """Run the corpus case on the CPU (interpreter), then build the GPU stages and every view."""
    kernels = make_kernels(kl, tl)
    case.run(kernels, "cpu")
    for ck in kernels[case.kernel].cache.values():
        ck.build_gpu()
        tab = kv.show(ck)
        bundle = tab._repr_mimebundle_()
        assert WIDGET_MIME in bundle and len(bundle["text/html"]) > 1000
        assert D.smem_map(ck.trace)["total"] == ck.shared
        layout = tab.children[2]
        for k in range(len(layout.entries)):
            layout.dropdown.value = k
            assert "<svg" in layout.pane.value


@pytest.mark.parametrize("make", ["show", "PassesView", "GraphView", "linked_view"])
def test_a_view_is_displayed_after_its_static_copy(cks, make):
    """A notebook reopened without its kernel has no widget models: the view's static copy is its own output
    before the widget's (whose bundle no longer repeats it), with the stylesheet that hides the copy while
    JupyterLab draws the widget and hides the renderer's "model not found" when it cannot."""
    from IPython.testing.globalipapp import start_ipython
    from IPython.utils.capture import capture_output

    from kernellab.viz.fallback import CSS

    start_ipython()  # display() publishes through a shell

    view = getattr(kv, make)(cks["softmax"])
    if not hasattr(view, "_ipython_display_"):
        pytest.skip("the static linked view (no anywidget) is plain HTML")
    with capture_output() as cap:
        view._ipython_display_()
    first, second = cap.outputs
    assert 'class="kl-static-copy"' in first.data["text/html"] and CSS in first.data["text/html"]
    assert view.static_html() in first.data["text/html"]
    assert WIDGET_MIME in second.data and "text/html" not in second.data
    assert len(second.data["text/plain"]) < 200
