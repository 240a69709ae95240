"""pingpong (KERNELLAB_ATTN_PINGPONG=1): in a warp-specialized loop whose two consumer warpgroups take turns on the
tensor cores, the full-stage mbarrier waits that a turn covers get `warpgroup = 0` (only warpgroup 0 polls; the turn
tells warpgroup 1). Both forms of attention's consumer loop (as warp_specialize leaves it, and as overlap_softmax
rewrites it); the waits no turn covers, one warpgroup, sm_80, kernels without a producer and the knob off are left
alone."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import overlap_softmax, pingpong
from tests.gpu_passes.conftest import normalize, printed, run_check, run_gpu_pass, run_gpu_passes
from tests.gpu_passes.test_overlap_softmax import CONSUMER_LOOP, SM90_8

WAIT = "    ttg.mbarrier_wait %fb, %phase\n"
TURN = '    ttg.warpgroup_turn {kind = "wait"}\n'
# the poll only in warpgroup 0, and the turn taken after the softmax's row statistics (pinned)
MARKED = CONSUMER_LOOP.replace(WAIT, "    ttg.mbarrier_wait %fb, %phase {warpgroup = 0}\n").replace(
    TURN, '    ttg.warpgroup_turn %l_new, %m_new {kind = "wait"}\n')


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setenv("KERNELLAB_ATTN_PINGPONG", "1")


def _waits(m):
    return [ln.strip() for ln in printed(m).splitlines() if "ttg.mbarrier_wait" in ln or "warpgroup_turn" in ln]


def test_marks_the_wait_inside_the_turn(on):
    """warp_specialize's form: wait full[read], q·kT, pass: the wait lies inside the turn. The turn before p·v
    takes the new row max and row sum (computed before it, carried to the next iteration) as operands."""
    assert WAIT in CONSUMER_LOOP and TURN in CONSUMER_LOOP
    _, stats = run_check(pingpong, CONSUMER_LOOP, MARKED, SM90_8)
    assert stats == {"pingponged": 1, "waits_for_warpgroup0": 1, "turns_pinned": 1}


def test_overlapped_form(on, monkeypatch):
    """overlap_softmax's form: the peeled first scores (wait, q·kT, pass) and the body (wait full[j], take the turn,
    q·kT_j and p·v_{j-1}, pass): both full waits are marked; the turns are unchanged."""
    monkeypatch.setenv("KERNELLAB_ATTN_OVERLAP", "1")
    m, (ov, stats) = run_gpu_passes([overlap_softmax, pingpong], CONSUMER_LOOP, SM90_8)
    # the body takes its turn at the top, before any row statistic: nothing to pin
    assert ov == {"overlapped": 1} and stats == {"pingponged": 1, "waits_for_warpgroup0": 2, "turns_pinned": 0}
    assert _waits(m) == ['ttg.warpgroup_turn {kind = "start"}',
                         "ttg.mbarrier_wait %fb, %c0 {warpgroup = 0}",
                         'ttg.warpgroup_turn {kind = "pass"}',
                         "ttg.mbarrier_wait %fb_1, %phase {warpgroup = 0}",
                         'ttg.warpgroup_turn {kind = "wait"}',
                         'ttg.warpgroup_turn {kind = "pass"}',
                         'ttg.warpgroup_turn {kind = "wait"}',
                         'ttg.warpgroup_turn {kind = "finish"}']
    # without pingpong the same text has the waits unmarked
    monkeypatch.setenv("KERNELLAB_ATTN_PINGPONG", "0")
    m2, _ = run_gpu_passes([overlap_softmax, pingpong], CONSUMER_LOOP, SM90_8)
    assert normalize(printed(m2)) == normalize(printed(m).replace(" {warpgroup = 0}", ""))


def test_off_by_default(monkeypatch):
    monkeypatch.delenv("KERNELLAB_ATTN_PINGPONG", raising=False)
    m, stats = run_gpu_pass(pingpong, CONSUMER_LOOP, SM90_8)
    assert stats == {"pingponged": 0, "waits_for_warpgroup0": 0, "turns_pinned": 0}
    assert normalize(printed(m)) == normalize(CONSUMER_LOOP)


@pytest.mark.parametrize("opts", [GpuOptions(num_warps=8, arch=80), GpuOptions(num_warps=4, arch=90)],
                         ids=["sm80", "one-warpgroup"])
def test_needs_sm90_and_two_warpgroups(on, opts):
    m, stats = run_gpu_pass(pingpong, CONSUMER_LOOP, opts)
    assert stats["pingponged"] == 0 and normalize(printed(m)) == normalize(CONSUMER_LOOP)


def test_needs_a_producer(on):
    """No ttg.warp_specialize (warpgroup_turns' cp.async loop): unchanged."""
    text = CONSUMER_LOOP.replace("  ttg.warp_specialize {producer_warps = 4} {\n  }\n", "")
    assert text != CONSUMER_LOOP
    m, stats = run_gpu_pass(pingpong, text, SM90_8)
    assert stats["pingponged"] == 0 and normalize(printed(m)) == normalize(text)


def test_cp_async_stage_keeps_every_wait(on):
    """A wait that fences the generic proxy (cp.async wrote the stage): every thread keeps it."""
    text = CONSUMER_LOOP.replace(WAIT, "    ttg.mbarrier_wait %fb, %phase {fence_proxy = true}\n")
    m, stats = run_gpu_pass(pingpong, text, SM90_8)
    assert stats["pingponged"] == 0 and "no full-stage wait" in stats["not_pingponged"][0]
    assert normalize(printed(m)) == normalize(text)


def test_wait_no_turn_covers(on):
    """The turn passed before the wait (the scores' dot then reads the stage outside any turn of warpgroup 1's that
    warpgroup 0 gave after its wait): unchanged."""
    pass_line = '    ttg.warpgroup_turn {kind = "pass"}\n'
    text = CONSUMER_LOOP.replace(pass_line, "").replace(WAIT, pass_line + WAIT)
    m, stats = run_gpu_pass(pingpong, text, SM90_8)
    assert stats["pingponged"] == 0 and normalize(printed(m)) == normalize(text)


def test_dot_before_the_turn_is_taken(on):
    """A wait, the scores' dot, then a turn taken (`wait`): the dot reads the stage before warpgroup 1 holds a turn
    warpgroup 0 gave after its wait: unchanged."""
    text = CONSUMER_LOOP.replace('{kind = "pass"}', '{kind = "wait"}')
    assert text != CONSUMER_LOOP
    m, stats = run_gpu_pass(pingpong, text, SM90_8)
    assert stats["pingponged"] == 0 and normalize(printed(m)) == normalize(text)


def test_one_dot_is_not_attention(on):
    """Fewer than two dots between the start and the finish turn: unchanged, and the stats say why."""
    start = CONSUMER_LOOP.index("    %acc_3 = tt.dot")
    end = CONSUMER_LOOP.index("\n", start)
    text = CONSUMER_LOOP[:start] + "    %acc_3 = arith.addf %acc_2, %acc_2 : tensor<128x64xf32, #L0>" + \
        CONSUMER_LOOP[end:]
    m, stats = run_gpu_pass(pingpong, text, SM90_8)
    assert stats["pingponged"] == 0 and "fewer than two dots" in stats["not_pingponged"][0]
