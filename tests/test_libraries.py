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
    """`--merge`: this run's ops replace theirs, the other ops of the same day's file stay, in catalogue order;
    only a file of the same sides and rounds is an earlier part."""
    import datetime

    monkeypatch.setenv("KERNELLAB_RESULTS_DIR", str(tmp_path))
    sys.path.insert(0, str(ROOT))
    from benchmarks import libraries

    names = [o.name for o in libraries._ops()]
    base = {"date": datetime.date.today().isoformat(), "gpu": "G", "sides": ["kernellab"], "rounds": 3,
            "complete": True}
    old = dict(base, wall_s=10.0, requested=[names[0], names[2]],
               rows=[{"op": names[0], "kernellab": {"correct": True}}, {"op": names[2], "kernellab": {"correct": False}}])
    (tmp_path / f"{base['date']}-G-libraries.json").write_text(json.dumps(old))
    earlier = libraries._earlier_part("G", ["kernellab"], 3)
    assert earlier is not None and libraries._earlier_part("G", ["kernellab"], 5) is None
    rows = [{"op": names[2], "kernellab": {"correct": True}}, {"op": names[1], "kernellab": {"correct": True}}]
    new = dict(base, wall_s=5.0, requested=[names[2], names[1]], rows=rows,
               summary=libraries._summary(rows, ["kernellab"]))
    _, merged = libraries._write(new, earlier)
    assert [r["op"] for r in merged["rows"]] == names[:3]
    assert all(r["kernellab"]["correct"] for r in merged["rows"])
    assert merged["summary"] == {"kernellab": {"correct": 3, "of": 3}} and merged["wall_s"] == 15.0
    assert merged["requested"] == names[:3]
