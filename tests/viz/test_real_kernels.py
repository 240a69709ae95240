"""The lab's views on the kernels people come to understand — a 128x128x64 matmul and causal flash
attention, compiled for sm_90a without a GPU — not only on a vector add: the pass stepper, the layout
view at real tile sizes, the shared-memory view and the roofline. HTML / data assertions; the browser
test (tests/browser) checks what is on screen."""
from __future__ import annotations

import html
import re

import pytest

from kernellab.viz import data as D
from kernellab.viz import html as H
from tests.viz import real_kernels as R

W = pytest.importorskip("ipywidgets")
import kernellab.viz as kv  # noqa: E402

KERNELS = ["matmul", "attention"]


def text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def marked(markup: str, cls: str) -> list[str]:
    """Texts of the word marks `cls` in rendered HTML (marks wrap token spans, one level deep)."""
    return [text(m) for m in re.findall(rf'<span class="{cls}">((?:<span class="\w+">[^<]*</span>|[^<])*)</span>',
                                        markup)]


# ----------------------------------------------------------------------------------------- pass stepper
def test_word_ranges_of_an_appended_layout():
    before = "%x = tt.load %p : tensor<128x64xf16> loc(3:8)"
    after = "%x = tt.load %p : tensor<128x64xf16, #L3> loc(3:8)"
    dels, adds = D.word_ranges(before, after)
    assert dels == [] and [after[i:j] for i, j in adds] == [", #L3"]
    html_ = H.highlight(after, adds)
    assert marked(html_, "kl-wadd") == [", #L3"] and text(html_) == after


@pytest.mark.parametrize("name", KERNELS)
def test_stepper_opens_on_the_first_pass_that_changed_after_the_frontend(name):
    ck = getattr(R, name)()
    v = kv.PassesView(ck)
    first = next(i for i, p in enumerate(ck.trace.passes) if i > 0 and p.changed)
    assert v.index == first == D.first_informative_pass(ck.trace)
    assert ck.trace.passes[v.index].name != "insert_barriers" and "unchanged" not in v.header.value
    assert v.prev_button.disabled is False
    # next / previous step through every pass and stop at the ends
    v.select_pass(0)
    assert v.prev_button.disabled and not v.next_button.disabled
    for k in range(1, len(ck.trace.passes)):
        v.next_button.click()
        assert v.index == k and ck.trace.passes[k].name in v.header.value
    assert v.next_button.disabled
    v.next_button.click()
    assert v.index == len(ck.trace.passes) - 1
    v.prev_button.click()
    assert v.index == len(ck.trace.passes) - 2


@pytest.mark.parametrize("name", KERNELS)
def test_assign_layouts_diff_marks_only_the_added_words(name):
    ck = getattr(R, name)()
    v = kv.PassesView(ck)
    i = [p.name for p in ck.trace.passes].index("assign_layouts")
    v.select_pass(i)
    v.diff_toggle.value = True
    pane = v.ir_pane.value
    adds = marked(pane, "kl-wadd")
    assert len(adds) >= 10
    # lines whose only change is the appended layout: just ", #Lk" is marked, on both the + and the - side
    layout_only = [w for w in adds if re.fullmatch(r", #L\d+", w)]
    assert len(layout_only) >= 5, adds[:20]
    words = D.ir_diff_words(ck.trace.passes[i - 1].ir, ck.trace.passes[i].ir)
    paired = [(t, line, r) for t, line, r in words if t == "add" and r]
    assert paired and all(sum(b - a for a, b in r) < len(line) / 2 for _, line, r in paired)
    # the plain IR view marks the same words inside its changed lines
    v.diff_toggle.value = False
    assert "kl-changed" in v.ir_pane.value and set(layout_only) <= set(marked(v.ir_pane.value, "kl-wadd"))


def test_static_passes_html_marks_words():
    ck = R.matmul()
    assert re.search(r'<span class="kl-wadd">(?:<span class="\w+">)?, (?:</span>)?', H.passes_html(ck))


def test_passes_panes_scroll_once():
    """Each pane is the one scroll box: the code box inside it neither scrolls nor caps its height."""
    v = kv.PassesView(R.matmul())
    style = v.children[0].value
    assert ".kl-pane .kl-code{max-height:none;overflow:visible" in style
    assert v.ir_pane.layout.overflow == "auto" and v.source_pane.layout.overflow == "auto"
    assert "kl-pane" in v.ir_pane._dom_classes and "kl-pane" in v.source_pane._dom_classes
