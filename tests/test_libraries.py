"""Liger-Kernel's ops through `kernellab.compat` on the CPU interpreter, checked against float64 torch
(benchmarks/libraries.py does the checking; these are its cheapest ops). Skipped without liger_kernel
(CI does not install it: `pip install liger-kernel --no-deps`)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPS = ("rms_norm", "swiglu", "cross_entropy", "llama4_rope")

pytestmark = pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None,
                                reason="liger_kernel is not installed")


@pytest.fixture(scope="module")
def results():
    """One child process for all ops: compat.install() must come before liger imports triton."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "libraries.py"), "--child", ",".join(OPS),
                        "kernellab", "cpu"], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=600)
    rows = [json.loads(line.split(" ", 1)[1]) for line in p.stdout.splitlines() if line.startswith("@@libraries")]
    assert len(rows) == len(OPS), p.stderr[-3000:]
    return {r["op"]: r for r in rows}


@pytest.mark.parametrize("op", OPS)
def test_liger_op_on_the_interpreter(results, op):
    r = results[op]
    assert "error" not in r, r.get("traceback", r["error"])
    assert r["correct"], f"{r['worst']} is off by {r['worst_err_over_tol']:.3g} x the tolerance"


def test_a_run_in_parts_merges_into_one_json(tmp_path, monkeypatch):
    """`--merge`: this run's ops replace theirs, the other ops of the same day's file stay, in catalogue order."""
    monkeypatch.setenv("KERNELLAB_RESULTS_DIR", str(tmp_path))
    sys.path.insert(0, str(ROOT))
    from benchmarks import libraries

    names = [o.name for o in libraries._ops()]
    base = {"date": "2026-01-01", "gpu": "G", "sides": ["kernellab"], "rounds": 3, "wall_s": 10.0}
    old = dict(base, rows=[{"op": names[0], "kernellab": {"correct": True}},
                           {"op": names[2], "kernellab": {"correct": False}}])
    (tmp_path / "2026-01-01-G-libraries.json").write_text(json.dumps(old))
    new = dict(base, wall_s=5.0)
    rows = libraries._merged_rows(new, [{"op": names[2], "kernellab": {"correct": True}},
                                        {"op": names[1], "kernellab": {"correct": True}}], ["kernellab"])
    assert [r["op"] for r in rows] == names[:3]
    assert all(r["kernellab"]["correct"] for r in rows)
    assert new["summary"] == {"kernellab": {"correct": 3, "of": 3}} and new["wall_s"] == 15.0
    other = dict(base, rounds=5)  # another kind of run: not mixed in
    assert len(libraries._merged_rows(other, rows[:1], ["kernellab"])) == 1
