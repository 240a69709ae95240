"""benchmarks/libraries.py's rounds on a CPU: the running order, the medians and ratios from made-up
timings, the table, and the serve protocol of a real child (made-up figures: KERNELLAB_LIBRARIES_FAKE_ROUNDS).
The GPU timing itself (`_time_gpu`) runs only on the device: `python benchmarks/libraries.py`."""
from __future__ import annotations

import importlib.util
import json

import pytest

from benchmarks import libraries as lib

needs_liger = pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None,
                                 reason="liger_kernel is not installed")
SIDES = ["kernellab", "triton"]


def test_round_order_alternates_which_side_goes_first():
    assert lib._round_order(3, SIDES) == [(0, "kernellab"), (0, "triton"), (1, "triton"), (1, "kernellab"),
                                          (2, "kernellab"), (2, "triton")]
    assert lib._round_order(2, ["kernellab"]) == [(0, "kernellab"), (1, "kernellab")]


def test_summary_is_the_median_over_rounds_with_min_and_max():
    res = {"rounds": [{"fwd_ms": 3.0, "fwd_bwd_ms": 9.0}, {"fwd_ms": 1.0}, {"fwd_ms": 50.0, "fwd_bwd_ms": 7.0},
                      {"fwd_ms": 2.0, "fwd_bwd_ms": 8.0}, {"fwd_ms": 2.5, "fwd_bwd_ms": None}]}
    lib._summarize_rounds(res)
    assert (res["fwd_ms"], res["fwd_ms_min"], res["fwd_ms_max"]) == (2.5, 1.0, 50.0)  # one outlier: no effect
    assert (res["fwd_bwd_ms"], res["fwd_bwd_ms_min"], res["fwd_bwd_ms_max"]) == (8.0, 7.0, 9.0)
    assert "fwd_wall_ms" not in res
    assert lib._spread(res, "fwd_ms") == pytest.approx(49.0 / 2.5)
    assert lib._summarize_rounds({"correct": False}) == {"correct": False}


def test_ratio_is_of_the_medians_with_the_paired_rounds_beside_it():
    kl = lib._summarize_rounds({"rounds": [{"fwd_ms": t, "fwd_wall_ms": 2 * t} for t in (1.0, 2.0, 4.0)]})
    tr = lib._summarize_rounds({"rounds": [{"fwd_ms": t, "fwd_wall_ms": t} for t in (2.0, 2.0, 2.0)]})
    row = lib._add_ratios({"op": "x", "kernellab": kl, "triton": tr})
    assert row["kl_over_triton_fwd"] == 1.0
    assert row["kl_over_triton_fwd_rounds"] == [2.0, 1.0, 0.5]
    assert row["kl_over_triton_fwd_wall"] == 0.5
    assert row["kl_over_triton_fwd_wall_rounds"] == [1.0, 0.5, 0.25]
    assert "kl_over_triton_fwd_bwd" not in row
    one_side = lib._add_ratios({"op": "x", "kernellab": kl})
    assert not any(k.startswith("kl_over") for k in one_side)


class _FakeChild:
    """Stands in for lib._Child: kernellab takes 1.0 + 0.1 * round ms, Triton 2.0; `fail` sides error on
    their second round."""

    log: list = []
    fail: set = set()
    made: list = []

    def __init__(self, name, side, device, serve=True, gpu_index=None):
        self.side, self.t0, self.n, self.gpu_index = side, 0.0, 0, gpu_index
        self.made.append((side, gpu_index))

    def result(self, timeout, stage="crash"):
        return {"side": self.side, "correct": True, "timed": True}

    def round(self, timeout):
        self.log.append(self.side)
        self.n += 1
        if self.side in self.fail and self.n == 2:
            return {"side": self.side, "stage": "timing", "error": "boom"}
        t = 1.0 + 0.1 * (self.n - 1) if self.side == "kernellab" else 2.0
        return {"fwd_ms": t, "fwd_bwd_ms": 2 * t, "fwd_wall_ms": t, "fwd_bwd_wall_ms": 2 * t}

    def close(self, kill=False):
        pass


def test_run_op_alternates_children_and_summarizes(monkeypatch):
    monkeypatch.setattr(lib, "_Child", _FakeChild)
    _FakeChild.log, _FakeChild.fail = [], set()
    row = lib._run_op("rms_norm", "", SIDES, "cuda", 10, 5)
    assert _FakeChild.log == ["kernellab", "triton", "triton", "kernellab"] * 2 + ["kernellab", "triton"]
    kl = row["kernellab"]
    assert [r["fwd_ms"] for r in kl["rounds"]] == pytest.approx([1.0, 1.1, 1.2, 1.3, 1.4])
    assert kl["fwd_ms"] == pytest.approx(1.2) and kl["fwd_ms_min"] == 1.0 and kl["fwd_ms_max"] == pytest.approx(1.4)
    assert row["kl_over_triton_fwd"] == pytest.approx(2.0 / 1.2)
    assert row["kl_over_triton_fwd_bwd"] == pytest.approx(2.0 / 1.2)
    assert len(row["kl_over_triton_fwd_rounds"]) == 5
    table = lib._fmt_table([row], gpu=True)
    assert "1.67" in table and "33%" in table  # ratio; spread (1.4 - 1.0) / 1.2 of kernellab (Triton 0 %)
    # a side whose round fails keeps its earlier rounds, is asked no more, and the error is shown
    _FakeChild.log, _FakeChild.fail = [], {"triton"}
    row = lib._run_op("rms_norm", "", SIDES, "cuda", 10, 4)
    assert _FakeChild.log == ["kernellab", "triton", "triton", "kernellab", "kernellab", "kernellab"]
    assert row["triton"]["timing_error"] == "boom" and len(row["triton"]["rounds"]) == 1
    assert len(row["kernellab"]["rounds"]) == 4
    assert "triton timing: boom" in lib._fmt_table([row], gpu=True)


def test_run_op_on_one_gpu_of_several(monkeypatch):
    """--gpus: both sides' children of an op are made for the op's GPU, and the row says which."""
    monkeypatch.setattr(lib, "_Child", _FakeChild)
    _FakeChild.log, _FakeChild.fail, _FakeChild.made = [], set(), []
    row = lib._run_op("rms_norm", "", SIDES, "cuda", 10, 2, gpu_index=2)
    assert _FakeChild.made == [(side, 2) for side in SIDES] and row["gpu_index"] == 2
    rows = [{"op": "swiglu"}, {"op": "rms_norm"}, {"op": "unknown"}]
    assert [r["op"] for r in lib._in_order(rows, ["rms_norm", "swiglu"])] == ["rms_norm", "swiglu", "unknown"]


def test_rounds_must_be_positive():
    with pytest.raises(SystemExit):
        lib.main(["--rounds", "0", "rms_norm"])


@needs_liger
def test_a_served_child_checks_then_times_a_round_per_request(monkeypatch):
    monkeypatch.setenv(lib.FAKE_ROUNDS, "1")
    kid = lib._Child("rms_norm", "kernellab", "cpu")
    try:
        res = kid.result(300)
        assert res["correct"] and res["timed"], res
        rounds = [kid.round(60) for _ in range(3)]
    finally:
        kid.close()
    assert [r["fwd_ms"] for r in rounds] == [1.0] * 3
    assert rounds[0]["at"] < rounds[1]["at"] < rounds[2]["at"]
    assert kid.round(5)["error"]  # closed: an error, not a hang


@needs_liger
def test_main_writes_every_round_into_the_json(monkeypatch, tmp_path):
    monkeypatch.setenv(lib.FAKE_ROUNDS, "1")
    monkeypatch.setenv("KERNELLAB_RESULTS_DIR", str(tmp_path))
    assert lib.main(["rms_norm", "--rounds", "3"]) == 0
    (path,) = tmp_path.glob("*-cpu-libraries.json")
    result = json.loads(path.read_text())
    assert result["rounds"] == 3 and result["sides"] == ["kernellab"]
    kl = result["rows"][0]["kernellab"]
    assert kl["correct"] and len(kl["rounds"]) == 3
    assert (kl["fwd_ms"], kl["fwd_ms_min"], kl["fwd_wall_ms_max"]) == (1.0, 1.0, 2.0)


@needs_liger
def test_json_is_written_after_every_op_and_parts_merge(monkeypatch, tmp_path):
    """A run stopped by a time limit keeps the ops it finished (the JSON is rewritten after each, `complete`
    false until the end), and a later part with --merge adds its ops to them."""
    monkeypatch.setenv(lib.FAKE_ROUNDS, "1")
    monkeypatch.setenv("KERNELLAB_RESULTS_DIR", str(tmp_path))
    real_run_op, seen = lib._run_op, []

    def run_op_then_stop(name, *a, **k):
        if seen:  # the second op: as if the machine's time ran out here
            raise KeyboardInterrupt
        seen.append(name)
        return real_run_op(name, *a, **k)

    monkeypatch.setattr(lib, "_run_op", run_op_then_stop)
    with pytest.raises(KeyboardInterrupt):
        lib.main(["rms_norm", "swiglu", "--rounds", "1"])
    (path,) = tmp_path.glob("*-cpu-libraries.json")
    part = json.loads(path.read_text())
    assert [r["op"] for r in part["rows"]] == ["rms_norm"] and part["complete"] is False
    assert part["requested"] == ["rms_norm", "swiglu"]
    monkeypatch.setattr(lib, "_run_op", real_run_op)
    assert lib.main(["swiglu", "--rounds", "1", "--merge"]) == 0
    whole = json.loads(path.read_text())
    assert [r["op"] for r in whole["rows"]] == ["rms_norm", "swiglu"]
    assert whole["summary"]["kernellab"] == {"correct": 2, "of": 2}
    assert whole["complete"] is False  # the first part never finished its list


class _FakeEvent:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        import time

        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3

    def query(self):  # still pending when asked: the sleep covered the enqueue
        return False


def test_time_gpu_runs_its_steps_with_cuda_stubbed(monkeypatch):
    """The GPU timing's code path on a CPU (events = host clock, sleep and sync do nothing): warm-up first,
    then wall, host and event timings, in ms, with the rep count clamped."""
    import torch

    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    sleeps = []
    monkeypatch.setattr(torch.cuda, "_sleep", sleeps.append)
    calls = []
    x = torch.randn(256, 256)

    def fn():
        calls.append(1)
        x @ x

    cycles: list = []
    t = lib._time_gpu(fn, torch.empty(16), cycles, warmup_s=0.01, rep_s=0.02)
    assert set(t) == {"ms", "wall_ms", "host_ms", "reps", "uncovered", "sleep_ms"}
    assert 20 <= t["reps"] <= 200 and len(calls) > t["reps"] + 5
    assert 0 < t["ms"] < 1e3 and 0 < t["wall_ms"] < 1e3 and 0 < t["host_ms"] < 1e3
    assert len(cycles) == 1 and sleeps[0] == 10_000_000 and len(sleeps) == 1 + t["reps"]
    assert t["uncovered"] == 0
    lib._time_gpu(fn, torch.empty(16), cycles, warmup_s=0.01, rep_s=0.02)
    assert sleeps.count(10_000_000) == 2  # the clock is measured on every call (the largest reading kept)


def test_time_gpu_retakes_a_rep_whose_sleep_ran_out(monkeypatch):
    """A rep whose start event has completed by the time the call returns (the GPU got past the sleep while the
    host was still launching, so the events would hold host time) is taken again with twice the sleep; at most
    MAX_RETAKES times per call (an op that syncs inside is never covered)."""
    import torch

    readings = iter([1000.0, 4000.0] + [4000.0] * 10)  # cycles per ms: a low first reading, then the clock is up

    class Event(_FakeEvent):
        done = 2  # the first reps' start events are found completed

        def query(self):
            Event.done -= 1
            return Event.done >= 0

        def elapsed_time(self, end):
            if end.t is None:  # the clock measurement: 10M cycles / reading
                return 10_000_000 / next(readings)
            return (end.t - self.t) * 1e3

    def measure(cycles, sync):
        c = 10_000_000 / Event().elapsed_time(Event())
        cycles[:] = [max(cycles[0], c) if cycles else c]

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(lib, "_measure_cycles", measure)
    sleeps = []
    monkeypatch.setattr(torch.cuda, "_sleep", sleeps.append)
    calls = []
    cycles: list = []
    t = lib._time_gpu(lambda: calls.append(1), torch.empty(16), cycles, warmup_s=0.001, rep_s=0.002)
    assert t["uncovered"] == 2 and cycles == [4000.0]
    first = sleeps[0]
    assert first == int(1000.0 * (2 * t["host_ms"] + 0.05))
    # retaken with at least twice the sleep, and at least what the new clock reading asks for
    assert sleeps[1] == max(2 * first, int(4000.0 * (2 * t["host_ms"] + 0.05)))
    assert sleeps[2] == max(2 * sleeps[1], int(4000.0 * (2 * t["host_ms"] + 0.05)))
    assert len(sleeps) == t["reps"] + 2 and set(sleeps[2:]) == {sleeps[2]}
    assert t["sleep_ms"] == sleeps[-1] / 4000.0

    Event.done = 10 ** 6  # never covered (an op that syncs inside): bounded retakes, then timed as it is
    sleeps.clear()
    t = lib._time_gpu(lambda: None, torch.empty(16), [], warmup_s=0.001, rep_s=0.002)
    assert t["uncovered"] == lib.MAX_RETAKES and len(sleeps) == t["reps"] + lib.MAX_RETAKES


@pytest.mark.gpu
def test_time_gpu_keeps_host_time_out_when_the_clock_reading_is_low(monkeypatch):
    """Issue 14 (mamba-ssm 3-13x "slower" on an H100): the sleep before each rep counts SM cycles, and a clock
    reading taken while the GPU was still at lowered clocks made every sleep too short, so the events held the
    host's enqueue time. Here the reading is forced to a quarter of the truth and the call spends 2 ms of host
    time before launching a tiny kernellab kernel: the rep must be retaken with longer sleeps, and `ms` must be
    the kernel's time (microseconds), not the host's (~1 ms with the old timer). The kernel's result is checked
    against torch."""
    import time

    import torch

    import kernellab as kl
    import kernellab.language as tl

    @kl.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)

    x = torch.zeros(1000, device="cuda")

    def fn():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.002:  # the host's work before the launch (argument handling, ...)
            pass
        add_one[(1,)](x, x.numel(), BLOCK=1024)

    true = []
    lib._measure_cycles(true, torch.cuda.synchronize)
    low = true[0] / 4
    monkeypatch.setattr(lib, "_measure_cycles", lambda cycles, sync: cycles.__setitem__(slice(None), [low]))
    flush = torch.empty(1 << 20, dtype=torch.int32, device="cuda")
    t = lib._time_gpu(fn, flush, [], warmup_s=0.02, rep_s=0.05)
    torch.cuda.synchronize()
    n_calls = float(x[0])
    assert n_calls >= t["reps"] and torch.equal(x, torch.full_like(x, n_calls))  # every call added 1 everywhere
    assert t["uncovered"] >= 1 and t["sleep_ms"] > 2.0
    assert t["ms"] < 0.2, t  # one tiny kernel: microseconds (an uncovered sleep shows ~1 ms of host time)
