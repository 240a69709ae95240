"""The graph view: the dataflow after any tile or GPU pass, with the pointer and mask arithmetic folded into one
box per access (graph_model), drawn by graphviz into a zoomable page with a side panel (graph_view). Checked on
a vector add (exact node count), the real 128x128x64 matmul and causal attention (tests/viz/real_kernels.py)."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.viz import graph as G
from kernellab.viz import graph_view as GV
from kernellab.viz.graph_model import build_graph, op_class
from tests.viz import real_kernels as R

W = pytest.importorskip("ipywidgets")


@kl.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(z_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@pytest.fixture(scope="module")
def vector_add():
    x = torch.randn(1000)
    return add_kernel.warmup(x, x, x, 1000, BLOCK=256)


def _ops(g, snap, kind):
    return [n for n in g.nodes.values() if n.op is not None and snap.ops[n.op].name == kind]


def test_vector_add_folds_to_loads_add_store(vector_add):
    snap = vector_add.trace.snapshot("tile")
    g = build_graph(snap)
    g.check()
    # 2 loads, the add, the store, and one address box per access: 7 boxes for the tile IR's ops
    assert len(g.nodes) == 7, [n.lines for n in g.nodes.values()]
    kinds = sorted(n.kind for n in g.nodes.values())
    assert kinds == ["expr"] * 3 + ["op"] * 4
    for access in _ops(g, snap, "tt.load") + _ops(g, snap, "tt.store"):
        feeding = [e.src for e in g.edges if e.dst == access.id]
        addr = [g.nodes[s] for s in feeding if g.nodes[s].kind == "expr"]
        assert len(addr) == 1  # the whole address chain is one box
        text = "\n".join(addr[0].detail)
        assert "program_id(0) * 256 + arange(0, 256)" in text and "offs < n" in text
        folded = {snap.ops[i].name for i in addr[0].folded}
        assert {"tt.make_range", "tt.splat", "arith.addi", "arith.muli", "tt.addptr", "arith.cmpi"} <= folded
    # the add takes both loads
    add = _ops(g, snap, "arith.addf")[0]
    srcs = {g.nodes[e.src].op for e in g.edges if e.dst == add.id}
    assert {snap.ops[i].name for i in srcs} == {"tt.load"}
    # unfolded: one box per op (constants and make_range too), no expression boxes
    u = build_graph(snap, fold=False)
    u.check()
    drawn = [i for i in range(len(snap.ops)) if snap.ops[i].name != "tt.return"]
    assert all(u.owner[i] == f"o{i}" for i in drawn) and not any(n.kind == "expr" for n in u.nodes.values())


@pytest.mark.parametrize("stage", ["tile", "gpu"], ids=["tile_ir", "gpu_ir"])  # an id "gpu" would mark it a GPU test
def test_matmul_loop_cluster_holds_the_dot_and_carries_the_accumulator(stage):
    snap = R.matmul().trace.snapshot(stage)
    g = build_graph(snap, gpu=stage == "gpu")
    g.check()
    loops = [c for c in g.clusters.values() if c.kind == "loop"]
    assert len(loops) == 1
    dots = _ops(g, snap, "tt.dot")
    assert len(dots) == 1 and dots[0].cluster == loops[0].id
    back = [e for e in g.edges if e.kind == "back"]
    assert back and all(g.nodes[e.src].kind == "yield" and g.nodes[e.dst].kind == "arg" for e in back)
    acc = g.nodes[back[0].dst]
    assert acc.cluster == loops[0].id and "initially 0.0" in acc.lines
    assert any(e.src == acc.id and e.dst == dots[0].id for e in g.edges)  # the accumulator feeds the dot
    # loads -> dot -> store: the matmul reads in a handful of boxes, not 94 or 165
    assert len(g.nodes) <= (12 if stage == "tile" else 32), len(g.nodes)
    header = g.nodes[f"o{loops[0].op}"]
    assert header.lines[0].startswith("for k in range(0, (K + 64 - 1) // 64")
    if stage == "gpu":
        assert "#L" in " ".join(dots[0].lines) and "mma" in dots[0].lines[1]


@pytest.mark.parametrize("name", ["matmul", "attention"])
@pytest.mark.parametrize("fold", [True, False])
def test_every_op_is_drawn_or_folded_into_a_drawn_box(name, fold):
    tr = getattr(R, name)().trace
    for i, _ in GV.graph_passes(tr):
        snap, rec = GV.snapshot_at(tr, i)
        g = build_graph(snap, fold=fold, gpu=rec.stage == "gpu")
        g.check()
        assert all(e.src in g.nodes and e.dst in g.nodes for e in g.edges)


def test_attention_reduces_are_one_box_each():
    snap = R.attention().trace.snapshot("tile")
    g = build_graph(snap)
    g.check()
    # a one-op combine (maxnumf, addf) is drawn in its reduce's box: no cluster, no region boxes
    assert not [c for c in g.clusters.values() if c.kind == "reduce"]
    reduces = _ops(g, snap, "tt.reduce")
    assert len(reduces) == 4 and all("combine: " in n.lines[-1] for n in reduces)
    assert {n.cluster for n in reduces} <= {c.id for c in g.clusters.values() if c.kind == "loop"}
    combine = [i for i, o in enumerate(snap.ops) if o.name in ("arith.maxnumf", "arith.addf", "tt.reduce.return")
               and o.parent is not None and snap.ops[o.parent].name == "tt.reduce"]
    assert combine and all(g.owner[i] in {n.id for n in reduces} for i in combine)
    # grey boxes wrap their expressions: none wider than the matmul's widest op box
    widest = max(len(x) for n in g.nodes.values() if n.kind == "expr" for x in n.lines[1:])
    assert widest <= 36, widest
    # the causal mask's index arithmetic folds into the select's condition box
    sel = _ops(g, snap, "arith.select")[0]
    cond = [g.nodes[e.src] for e in g.edges if e.dst == sel.id and g.nodes[e.src].kind == "expr"]
    assert cond and ">=" in cond[0].detail[0]


def test_graph_opens_on_the_main_loop():
    """The page names the loop it opens on (data-focus): attention's first KV loop, the matmul's K loop; the
    start-up script zooms to it and builds the overview."""
    from kernellab.viz.graph_model import main_loop

    for name, line in (("attention", "start_n in range(0, "), ("matmul", "for k in range(")):
        snap = getattr(R, name)().trace.snapshot("tile")
        g = build_graph(snap)
        focus = main_loop(g, snap)
        assert focus is not None and g.clusters[focus].kind == "loop"
        assert line in g.nodes[f"o{g.clusters[focus].op}"].lines[0]
    page = GV.graph_page(R.attention())
    if G.find_dot() is None:
        pytest.skip("graphviz dot is not installed")
    fid = re.search(r'data-focus="([^"]+)"', page).group(1)
    assert f'<g id="{fid}" class="cluster"' in page
    assert "onload=" in page and "kl-gmini" in page and 'data-kz="loop"' in page
    w = float(re.search(r'data-w="(\d+)"', page).group(1))
    assert w < 3000, w  # was 3408 px before the reduces and the grey boxes got narrower


def test_pass_selection_draws_each_pass_that_changed():
    ck = R.matmul()
    tr = ck.trace
    opts = GV.graph_passes(tr)
    names = [tr.passes[i].name for i, _ in opts]
    assert names[0] == "frontend" and "assign_layouts" in names and names[-1] == "insert_barriers"
    assert all(tr.passes[i].stage in ("tile", "gpu") for i, _ in opts)

    def drawn(name):
        i = max(k for k, p in enumerate(tr.passes) if p.name == name)
        return GV.graph_page(ck, i)

    def labels(page):
        return sorted(re.findall(r'<text[^>]*>([^<]*)</text>', page))

    # cse removed ops: the tile graph after it differs from the one before; an unchanged pass shows the one before
    i_cse = next(k for k, p in enumerate(tr.passes) if p.name == "cse" and p.changed)
    assert GV.snapshot_at(tr, i_cse)[0] is not GV.snapshot_at(tr, i_cse - 1)[0]
    assert labels(GV.graph_page(ck, i_cse, fold=False)) != labels(GV.graph_page(ck, i_cse - 1, fold=False))
    unchanged = next(k for k, p in enumerate(tr.passes) if k > 0 and p.stage == "tile" and not p.changed)
    assert GV.snapshot_at(tr, unchanged)[0] is GV.snapshot_at(tr, unchanged - 1)[0]
    # the GPU stage adds layouts and the pipelining's async copies
    tile, gpu = labels(drawn("dce")), labels(drawn("insert_barriers"))
    assert tile != gpu and any("#L" in t for t in gpu) and not any("#L" in t for t in tile)
    assert any("async_copy" in t for t in gpu) and not any("async_copy" in t for t in tile)


def test_view_steps_passes_and_unfolds():
    ck = R.matmul()
    v = GV.GraphView(ck)
    assert ck.trace.passes[v.pass_select.value].name == "dce"  # opens on the final tile IR
    folded = v.pane.value
    v.fold_toggle.value = False
    assert v.pane.value != folded and "unfolded" in v.pane.value
    v.fold_toggle.value = True
    before = v.pass_select.value
    v.next_button.click()
    assert v.pass_select.value > before and "GPU IR" in v.pane.value
    assert "GraphView" in v._repr_mimebundle_()["text/plain"]


def test_page_has_zoom_legend_and_details_for_every_box():
    ck = R.attention()
    page = GV.graph_page(ck)
    if G.find_dot() is None:
        pytest.skip("graphviz dot is not installed")
    assert 'data-kz="in"' in page and 'data-kz="fit"' in page and "onwheel=" in page and "kl-legend" in page
    ids = re.findall(r'<g id="(kg\d+_[oxpa][\w]*)" class="node', page)
    details = set(re.findall(r'data-kn="([^"]+)"', page))
    assert ids and set(ids) <= details
    assert "source line <b>" in page and "tt.dot" in page
    for cls in ("memory", "dot", "reduce", "control", "address"):
        assert f"kl-{cls}" in page.replace("&#45;", "-")
    assert "<script" not in page and "http" not in page.split("<svg", 1)[0]


def test_no_graphviz_keeps_the_install_hint(monkeypatch):
    monkeypatch.setattr(G, "find_dot", lambda: None)
    page = GV.graph_page(R.matmul())
    assert "apt-get install graphviz" in page and "digraph dataflow" in page


def test_op_classes():
    assert op_class("tt.load") == op_class("ttg.async_copy") == "memory"
    assert op_class("tt.dot") == "dot" and op_class("ttg.convert_layout") == "convert"
    assert op_class("scf.for") == "control" and op_class("tt.reduce") == "reduce"
    assert op_class("ttg.local_alloc") == "shared" and op_class("math.exp2") == "compute"
