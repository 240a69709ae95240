"""The linked view's data and its fallbacks: every stage from the tile IR to SASS with a source line per text line,
the counterparts of a source line in each, the static HTML (coloured, no script) and the widget's bundle."""
from __future__ import annotations

import pytest
import torch

from kernellab.viz import linked as L
from tests.viz import real_kernels as R


@pytest.fixture(scope="module")
def mm():
    return R.matmul()


def test_linked_data_has_every_stage_with_source_lines(mm):
    d = L.linked_data(mm)
    ids = [s["id"] for s in d["stages"]]
    assert ids[0] == "p0" and "gpu" in ids and ids.index("gpu") < ids.index("llir") < ids.index("ptx")
    for s in d["stages"]:
        assert len(s["src"]) == len(s["lines"])
        if s["id"] != "sass" or not s["note"]:
            assert s["count"] > 0.5 * len(s["lines"]) or s["id"] == "llir" and s["count"] > 1000, s["id"]
    lines = {x["n"]: x["text"] for x in d["source"]}
    dot = next(n for n, t in lines.items() if "tl.dot(" in t)
    assert L.counterparts(d, "gpu", dot) and L.counterparts(d, "ptx", dot)
    ptx = next(s for s in d["stages"] if s["id"] == "ptx")
    assert any("wgmma.mma_async" in ptx["lines"][i] for i in L.counterparts(d, "ptx", dot))
    assert d["panes"][0] == "ptx"


def test_source_text_includes_inlined_helpers():
    d = L.linked_data(R.attention(), with_sass=False)
    text = "\n".join(x["text"] for x in d["source"])
    assert "def _attn_fwd_inner" in text and "def attention_fwd_kernel" in text
    helper = next(x["n"] for x in d["source"] if "tl.exp2(m_i - m_new)" in x["text"])
    assert L.counterparts(d, "ptx", helper)


def test_static_html_is_coloured_and_has_no_script(mm):
    d = L.linked_data(mm, with_sass=False)
    html = L.linked_html(d)
    assert "<script" not in html and "kernel source" in html and "hsla(" in html
    assert html.count("class=\"kl-lk-pane") == 3  # source, PTX (and the "kl-lk-panes" row)
    assert "PTX" in html and "LLVM IR" not in html


def test_widget_bundle_carries_the_static_copy(mm):
    if L.LinkedView is None:
        pytest.skip("anywidget is not installed")
    v = L.linked_view(mm)
    assert v.title == "linked" and v.data["kernel"] == "matmul_kernel"
    assert "export default" in v._esm
    data, _ = v._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data and "kl-lk-pane" in data["text/html"]


def test_widget_sends_only_its_open_panes_and_the_rest_on_request():
    """The payload bound: a %%kernel cell's linked view of the causal attention was 1.5 MB of widget state and
    0.68 MB of static HTML (the LLVM IR's 6,700 lines and every pass); now the open panes (PTX, SASS) only, the
    others' lines on request, and a static copy of the source and the PTX."""
    import json

    if L.LinkedView is None:
        pytest.skip("anywidget is not installed")
    v = L.linked_view(R.attention())
    state = len(json.dumps(v.get_state()))
    static = len(v.static_html())
    assert state < 350_000 and static < 250_000, (state, static)
    sent = {s["id"]: s for s in v.data["stages"]}
    assert sent["llir"]["lines"] is None and sent["llir"]["n"] > 1000
    assert all(sent[p]["lines"] for p in v.data["panes"])
    out = []
    v.send = out.append
    v._on_msg(v, {"type": "stage", "id": "llir"}, [])
    assert out and out[0]["type"] == "stage" and out[0]["stage"]["id"] == "llir"
    assert len(out[0]["stage"]["lines"]) == sent["llir"]["n"] == len(out[0]["stage"]["src"])
    v._on_msg(v, {"type": "stage", "id": "nope"}, [])
    assert len(out) == 1


def test_without_anywidget_the_view_is_static(mm, monkeypatch):
    monkeypatch.setattr(L, "LinkedView", None)
    v = L.linked_view(mm)
    assert "kl-lk-pane" in v.static_html() and v.title == "linked"


def test_a_helper_from_another_file_shows_its_own_lines():
    """An @jit helper imported from another module: the linked view lists its lines under its file's name
    (keys OTHER * k + line), the pass stepper labels its IR lines with that file, the graph's side panel quotes
    that file's line."""
    import inspect

    import tests.helpers_other_file.helper_mod as hm
    from kernellab.viz import data as D
    from kernellab.viz import graph_view as GV
    from kernellab.viz.widgets import _origin_text
    from tests.test_line_info import uses_other_file_kernel

    x = torch.randn(100)
    ck = uses_other_file_kernel.warmup(x, x, 100, BLOCK=128).build_gpu(_target())
    d = L.linked_data(ck, with_sass=False)
    # the kernel's lines start at its decorator: the helper's line numbers do not stretch the range
    from tests.test_line_info import _line_of

    assert d["source"][0]["n"] >= _line_of(uses_other_file_kernel, "offs = ") - 3, d["source"][0]
    helper = [x for x in d["source"] if x["n"] is not None and x["n"] > L.OTHER]
    assert any("y = x * s" in x["text"] for x in helper)
    assert any(x.get("head") and "helper_mod.py" in x["text"] for x in d["source"])
    mul = next(x for x in helper if "y = x * s" in x["text"])
    assert L.counterparts(d, "ptx", mul["n"]) and L.counterparts(d, "tile", mul["n"])
    # the kernel's own line of the same number is not credited with the helper's instructions
    assert not L.counterparts(d, "tile", mul["line"])
    html = L.linked_html(d)
    assert "helper_mod.py" in html and "y = x * s" in html
    tile = ck.trace.passes[max(i for i, p in enumerate(ck.trace.passes) if p.stage == "tile")]
    origins = [o for o in D.line_origins(tile) if o and o[0]]
    assert origins and origins[0][0] == inspect.getsourcefile(hm)
    assert _origin_text(origins[0]).strip().startswith("[helper_mod.py line ")
    # SASS (nvdisasm -g names each line's file): the helper's instructions under the helper's keys
    sass = next((s for s in L.linked_data(ck)["stages"] if s["id"] == "sass"), None)
    if sass is not None and any(x is not None for x in sass["src"]):
        first = d["source"][0]["n"]
        assert all(x is None or x >= first for x in sass["src"]) and any(x and x > L.OTHER for x in sass["src"])
    page = GV.graph_page(ck, fold=False)
    assert "of helper_mod.py" in page and "y = x * s" in page


def _target():
    from kernellab.compiler.codegen.target import Target

    return Target(90)


def test_search_counts_every_stage_including_those_not_sent(mm):
    """Search everywhere: the view asks Python how many lines of each stage match (most stages' lines are not in
    the browser); a bad regex is searched as text."""
    d = L.linked_data(mm)
    counts = L.search_counts(d, "wgmma")
    by_id = {s["id"]: s for s in d["stages"]}
    for sid, n in counts.items():
        lines = by_id[sid]["lines"] if sid != "source" else [x["text"] for x in d["source"]]
        assert n == sum("wgmma" in x.lower() for x in lines), sid
    assert counts["ptx"] > 0 and counts["llir"] > 0 and counts["source"] == 0
    assert L.search_counts(d, "tl.dot(")["source"] == 1  # not a regex (an open parenthesis): as text
    assert L.search_counts(d, "") == {}
    if L.LinkedView is None:
        return
    v = L.linked_view(mm)
    out = []
    v.send = out.append
    v._on_msg(v, {"type": "search", "q": "wgmma"}, [])
    assert out == [{"type": "search", "q": "wgmma", "counts": counts}]
