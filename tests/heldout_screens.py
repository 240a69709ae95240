"""What the tests of the held-out kernel-text screens (benchmarks/heldout_texts3.py .. heldout_texts5.py) share: their
case names (read from the module's source, so collecting imports neither triton nor kernellab.compat), a child
process with kernellab.compat serving `triton` (the import hook stays out of pytest's process), the interpreter and
GPU tests of every case, and a dry run of `benchmarks/idioms.py --texts` on the CPU."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def case_names(stem: str) -> list[str]:
    """The keys of benchmarks/<stem>.py's CASE_DEFS."""
    tree = ast.parse((ROOT / "benchmarks" / f"{stem}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CASE_DEFS":
            return [k.value for k in node.value.keys]
    raise AssertionError("no CASE_DEFS")


def child(stem: str, code: str, env=None, timeout=900) -> str:
    """`code` run after `import <stem>` under kernellab.compat in a child; its stdout (fails on a nonzero exit)."""
    full = ("import kernellab.compat; kernellab.compat.install()\n"
            f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
            f"import {stem}\n" + code)
    p = subprocess.run([sys.executable, "-c", full], capture_output=True, text=True, cwd=str(ROOT), timeout=timeout,
                       env={**os.environ, **(env or {})})
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def case_tests(stem: str, gpu_knobs=("",)):
    """(test on the interpreter, test on the GPU) of every case of the screen, the GPU one once per knob setting
    ("VAR=VALUE VAR2=VALUE2"); assign them to test_... names in the test module."""
    cases = case_names(stem)

    @pytest.mark.parametrize("case", cases)
    def on_interpreter(case):
        child(stem, f"{stem}.check({case!r})\n")

    @pytest.mark.gpu
    @pytest.mark.parametrize("knobs", list(gpu_knobs))
    @pytest.mark.parametrize("case", cases)
    def on_gpu(case, knobs):
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU")
        env = dict(kv.split("=") for kv in knobs.split())
        child(stem, f"{stem}.check({case!r}, device='cuda')\n", env=env)

    return on_interpreter, on_gpu


def idioms_dry_run(stem: str, names, n_rows: int, also_env=()):
    """`idioms.py --texts` on the screen on the CPU (test sizes, a stand-in timer, kernellab only, one column per
    `also_env` setting): every config of `names` checked and timed, `n_rows` rows."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from benchmarks import idioms\n"
            f"rows = idioms.run_texts({str(ROOT / 'benchmarks' / f'{stem}.py')!r}, {list(names)!r}, "
            f"also_env={list(also_env)!r}, rounds=2, settle=0, device='cpu', "
            "timer=lambda fn: (fn(), 1e-3)[1], with_triton=False, size='test')\n"
            f"assert len(rows) == {n_rows}, len(rows)\n"
            "for r in rows:\n"
            "    assert r['kernellab']['checked'] and r['kernellab']['seconds'] == 1e-3, r\n"
            f"    for s in {list(also_env)!r}:\n"
            "        assert r[f'kernellab[{s}]']['checked'], r\n"
            "    assert 'kl_over_triton' not in r\n"
            "    assert 'gbps' in r['kernellab'] or 'tflops' in r['kernellab'], r\n"
            "print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), (p.stdout[-2000:], p.stderr[-3000:])
