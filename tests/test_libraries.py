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
