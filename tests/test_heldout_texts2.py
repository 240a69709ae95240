"""benchmarks/heldout_texts2.py's kernel texts compute what their float64 references say on the CPU interpreter
(served as `triton` by kernellab.compat, in a child process so the import hook stays out of this one)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _cases():
    import ast

    tree = ast.parse((ROOT / "benchmarks" / "heldout_texts2.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CASE_DEFS":
            return [k.value for k in node.value.keys]
    raise AssertionError("no CASE_DEFS")


# the grouped GEMM reads its operands through pointers loaded from memory: the interpreter only knows argument
# buffers (checked with TRITON_INTERPRET=1 under Triton instead)
INTERPRETABLE = [c for c in _cases() if c != "h2_grouped_gemm"]


@pytest.mark.parametrize("case", INTERPRETABLE)
def test_heldout_text_on_interpreter(case):
    code = ("import kernellab.compat; kernellab.compat.install()\n"
            f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
            f"import heldout_texts2; heldout_texts2.check({case!r})\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
