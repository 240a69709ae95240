"""benchmarks/tools/unseen_libraries.py's own plumbing, without the libraries it runs: the launch recorder
that `--time` replays (restoring what a call changed), the `--compare` driver (a child per library and side,
resumed after a child dies in a case) and its merged results object. The GPU run itself is the lead's:
the command is in benchmarks/NOTES.md ("Unseen libraries")."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "benchmarks" / "tools" / "unseen_libraries.py"


def _tool():
    spec = importlib.util.spec_from_file_location("unseen_libraries_under_test", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_recorder_replays_outer_launches_and_restores_what_the_call_changed(triton):
    """An autotuned in-place kernel and a plain one: two outermost launches are recorded (the autotuner's
    inner launches belong to its own), the in-place tensor is found changed and the output too, and replays
    after a restore each see the call's inputs (x + 1 again, not x + 3)."""
    import triton.language as tl

    u = _tool()

    @triton.autotune([triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
    @triton.jit
    def bump(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)

    @triton.jit
    def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)

    x0 = torch.randn(50) + 3.0
    x, y, ro = x0.clone(), torch.full((50,), float("nan")), torch.randn(50)

    def call():
        bump[lambda meta: (triton.cdiv(50, meta["BLOCK"]),)](x, 50)
        double[(4,)](x, y, 50, BLOCK=16)
        double[(4,)](ro, torch.empty(50), 50, BLOCK=16)  # `ro` is only read: not restored

    with u._LaunchRecorder() as rec:
        call()
    assert len(rec.launches) == 3
    # the objects launched through, in order: the autotuner's chosen config goes into the timed row
    assert rec.kernels[0] is bump and rec.kernels[1] is double and bump.best_config.kwargs["BLOCK"] in (16, 32)
    changed = rec.changed()
    ids = {id(t) for t, _ in changed}
    assert id(x) in ids and id(y) in ids and id(ro) not in ids
    after = (x.clone(), y.clone())
    for _ in range(2):
        for t, before in changed:
            t.copy_(before)
        for f in rec.launches:
            f()
        torch.testing.assert_close(x, after[0])
        torch.testing.assert_close(y, after[1])
    torch.testing.assert_close(x, x0 + 1)
    # the wrappers are gone: a launch now records nothing
    call()
    assert len(rec.launches) == 3


def _write(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_merge_pairs_sides_into_one_object_with_ratios_and_launch_bound(tmp_path):
    u = _tool()
    meta = {"meta": {"side": "kernellab", "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3",
                     "versions": {"torch": "2.11.0"}, "timed": True, "rounds": 3}}
    row = lambda op, ms, ok=True: {"library": "xformers", "op": op, "kind": "norm", "passed": ok,  # noqa: E731
                                   "error": 0.0, "ms": ms, "wall_ms": 2 * ms, "timer": "cuda events"}
    _write(tmp_path / "kernellab-xformers.jsonl", [meta, row("rms_norm", 0.010), row("tiled_matmul", 0.200),
                                                   row("index_select_cat", 0.050), {"end": True}])
    _write(tmp_path / "triton-xformers.jsonl", [dict(meta, meta=dict(meta["meta"], side="triton")),
                                                row("rms_norm", 0.008), row("tiled_matmul", 0.100),
                                                row("index_select_cat", 0.050, ok=False), {"end": True}])
    res = u.merge(tmp_path, ["xformers"], "cuda")
    assert isinstance(res, dict) and res["gpu"] == "NVIDIA H100 80GB HBM3" and res["versions"]["torch"] == "2.11.0"
    rows = {r["op"]: r for r in res["rows"]}
    assert rows["rms_norm"]["launch_bound"] and not rows["tiled_matmul"]["launch_bound"]
    assert abs(rows["tiled_matmul"]["ratio"] - 2.0) < 1e-9 and abs(rows["rms_norm"]["ratio"] - 1.25) < 1e-9
    s = res["summary"]["xformers"]
    assert (s["cases"], s["kernellab_correct"], s["triton_correct"], s["timed_both_correct"]) == (3, 3, 2, 2)
    assert abs(s["geomean_ratio"] - (2.0 * 1.25) ** 0.5) < 1e-9 and abs(s["geomean_ratio_not_launch_bound"] - 2) < 1e-9
    assert s["worst"] == {"op": "tiled_matmul", "ratio": 2.0} and s["launch_bound"] == 1
    assert all("case" not in r for r in res["rows"])  # the roofline's readers skip it (rows without a case)
    assert "tiled_matmul" in u._table(res).splitlines()[1]


def test_compare_resumes_after_a_child_dies_in_a_case(tmp_path):
    """The driver on the CPU with the torch-inductor cases (torch's helpers only, no library to install): the
    kernellab child dies in the first case, which is recorded as crashed, and a new child runs the rest, timed."""
    env = dict(os.environ, UNSEEN_LIBRARIES_CRASH_AT="welford_layer_norm",
               PYTHONPATH=os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH")] if p))
    out = subprocess.run([sys.executable, str(TOOL), "--compare", "torch_inductor", "--device", "cpu", "--time",
                          "--rounds", "1", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "r.json")],
                         capture_output=True, text=True, env=env, timeout=600, cwd=str(ROOT))
    assert out.returncode == 0, out.stdout + out.stderr
    res = json.loads((tmp_path / "r.json").read_text())
    kl = {r["op"]: r["kernellab"] for r in res["rows"]}
    assert kl["welford_layer_norm"]["crashed"] and not kl["welford_layer_norm"]["passed"]
    assert kl["softmax_argmax"]["passed"] and kl["softmax_argmax"]["launches"] == 1 and kl["softmax_argmax"]["ms"] > 0
    assert out.stdout.strip().splitlines()[-1].startswith("all ")  # the table is printed last


def test_compare_jobs_run_sides_at_once_timing_under_the_lock_and_a_rerun_goes_on(tmp_path):
    """`--jobs 2`: both sides' children at once, each timing its cases right after their checks while holding the
    time lock (no separate warm-up pass); a first run stopped by --budget before any child leaves nothing that a
    rerun of the same command does not finish."""
    tri = os.environ.get("TRITON_PYTHON", "/tmp/tri/bin/python")  # a Python with the real Triton (CPU build)
    if not os.access(tri, os.X_OK):  # absent, or another user's (a root-made /tmp/tri seen by a user)
        pytest.skip("no Python with the real Triton this user may run (set TRITON_PYTHON)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH")] if p))
    cmd = [sys.executable, str(TOOL), "--compare", "torch_inductor", "--device", "cpu", "--time", "--rounds", "1",
           "--jobs", "2", "--triton-python", tri, "--work", str(tmp_path / "work"), "--out", str(tmp_path / "r.json")]
    first = subprocess.run(cmd + ["--budget", "1"], capture_output=True, text=True, env=env, timeout=600,
                           cwd=str(ROOT))
    assert first.returncode == 0 and "stopped at the --budget" in first.stdout, first.stdout + first.stderr
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=str(ROOT))
    assert out.returncode == 0, out.stdout + out.stderr
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["overall"]["cases"] == 2 and res["overall"]["kernellab_correct"] == 2, res["overall"]
    assert all(r["kernellab"]["ms"] > 0 and r["triton"]["passed"] is not None for r in res["rows"])  # both ran
    assert not (tmp_path / "work" / "warm").exists() and (tmp_path / "work" / "time.lock").exists()
    meta = json.loads((tmp_path / "work" / "triton-torch_inductor.jsonl").read_text().splitlines()[0])["meta"]
    assert meta["time_lock"] and meta["timed"]


def test_tf32_tolerance_only_for_marked_cases_on_cuda():
    u = _tool()
    assert ("fla", "chunk_gla") in u.TF32_CASES and ("flag_gems", "mm") not in u.TF32_CASES
    assert u._tolerance("fla", "chunk_gla", 2e-3) == 2e-3  # the CPU interpreters compute fp32 dots in fp32
    u.DEVICE = "cuda"
    assert u._tolerance("fla", "chunk_gla", 2e-3) == u.TF32_TOL == 2.0 ** -5
    assert u._tolerance("flag_gems", "mm", 1e-3) == 1e-3 and u._tolerance("fla", "chunk_delta_rule", 3e-2) == 2.0 ** -5


def test_libraries_timer_runs_setup_before_every_call_outside_the_events(monkeypatch):
    """benchmarks/libraries.py's `_time_gpu(setup=)` with CUDA stubbed: setup precedes every call, and each
    event pair encloses a call only."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import libraries as lib

    log = []

    class Event:
        def __init__(self, enable_timing=False):
            self.t = 0.0

        def record(self):
            log.append("event")
            self.t = len(log)

        def elapsed_time(self, end):
            return end.t - self.t

        def query(self):
            return False

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda n: None)
    t = lib._time_gpu(lambda: log.append("fn"), torch.empty(4), [], warmup_s=0.001, rep_s=0.002,
                      setup=lambda: log.append("setup"))
    calls = [x for x in log if x != "event"]
    assert calls[0] == "setup" and all(a == "setup" for a, b in zip(calls, calls[1:]) if b == "fn")
    timed = "".join("e" if x == "event" else x[0] for x in log)
    assert timed.count("efe") >= t["reps"]  # start event, the call, end event: nothing else between


def test_gpu_timing_branch_with_cuda_stubbed(monkeypatch):
    """`_time_launches` as on a GPU (CUDA events, sleep and sync stubbed): rounds of libraries.py's timer with
    the restore as its setup, medians over rounds."""
    u = _tool()

    class Event:
        def __init__(self, enable_timing=False):
            self.t = 0.0

        def record(self):
            import time
            self.t = time.perf_counter()

        def elapsed_time(self, end):
            return (end.t - self.t) * 1e3

        def query(self):
            return False

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda n: None)
    monkeypatch.setattr(u, "DEVICE", "cuda")
    monkeypatch.setattr(u, "REP_S", 0.002)
    u._TIMER.update(flush=torch.empty(4), cycles=[1e6])
    x = torch.zeros(8)
    restores = []
    t = u._time_launches([lambda: x.add_(1)], lambda: (restores.append(1), x.zero_()), 3)
    assert len(t["ms_rounds"]) == 3 and len(t["reps"]) == 3 and t["ms"] > 0 and t["wall_ms"] >= 0
    assert "cuda events" in t["timer"] and len(restores) > sum(t["reps"]) and float(x[0]) == 0.0
    assert t["uncovered"] == [0, 0, 0] and len(t["sleep_ms"]) == 3


def test_poisoned_empty_tensors():
    """The new libraries' cases run with torch.empty & co. poisoned: NaN for floats, 0x5A.. for integers (90 as
    int8/uint8), True for bool; nothing changes outside the context or with it off."""
    ul = _tool()
    with ul._poison_empty(True):
        assert torch.empty(5).isnan().all() and torch.empty_like(torch.zeros(2, 3)).isnan().all()
        assert (torch.empty(4, dtype=torch.int8) == 90).all() and (torch.empty(4, dtype=torch.uint8) == 90).all()
        assert (torch.empty(2, dtype=torch.int32) == 0x5A5A5A5A).all()
        assert torch.zeros(3).new_empty((2,)).isnan().all() and torch.empty((2,), dtype=torch.bool).all()
        assert torch.empty_strided((2, 2), (1, 2)).isnan().all() and torch.empty(0).numel() == 0
    empty = torch.empty
    with ul._poison_empty(False):
        assert torch.empty is empty
    assert torch.empty is empty and torch.Tensor.new_empty is not None
