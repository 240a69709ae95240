"""benchmarks/heldout_texts4.py's kernel texts compute what their float64 references say, on the CPU interpreter and
(marked gpu) compiled on a GPU, with kernellab.compat serving `triton` in a child process (so the import hook stays
out of this one)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cases():
    import ast

    tree = ast.parse((ROOT / "benchmarks" / "heldout_texts4.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CASE_DEFS":
            return [k.value for k in node.value.keys]
    raise AssertionError("no CASE_DEFS")


def _child(code: str, env=None, timeout=900):
    full = ("import kernellab.compat; kernellab.compat.install()\n"
            f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
            "import heldout_texts4\n" + code)
    p = subprocess.run([sys.executable, "-c", full], capture_output=True, text=True, cwd=str(ROOT), timeout=timeout,
                       env={**os.environ, **(env or {})})
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_cases_are_new_and_complete():
    names = _cases()
    assert 16 <= len(names) <= 24 and len(set(names)) == len(names)
    assert all(n.startswith("h4_") for n in names)


def test_philox_reference_matches_kernellab_randint(tmp_path):
    """The NumPy Philox the Gumbel case checks against is tl.randint's: the raw words of a kernel, bit for bit."""
    code = ("import kernellab.compat; kernellab.compat.install()\n"
            f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
            "import heldout_texts4\n"
            "import numpy as np, torch, triton, triton.language as tl\n"
            "@triton.jit\n"
            "def k(OUT, seed, n, BLOCK: tl.constexpr):\n"
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
            "    tl.store(OUT + offs, tl.randint(seed, offs * 7 + 3).to(tl.int32, bitcast=True), mask=offs < n)\n"
            "out = torch.empty(1000, dtype=torch.int32)\n"
            "for seed in (0, 1234, (5 << 32) + 17):\n"
            "    k[(4,)](out, seed, 1000, BLOCK=256)\n"
            "    want = heldout_texts4._philox_randint(seed, np.arange(1000, dtype=np.int64) * 7 + 3)\n"
            "    assert np.array_equal(out.numpy().view(np.uint32).astype(np.uint64), want), seed\n"
            "print('ok')\n")
    f = tmp_path / "philox_words.py"  # a file: kernels need their source
    f.write_text(code)
    p = subprocess.run([sys.executable, str(f)], capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-3000:]


@pytest.mark.parametrize("case", _cases())
def test_heldout_text_on_interpreter(case):
    _child(f"heldout_texts4.check({case!r})\n")


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", ["", "KERNELLAB_STORE_RUN=1 KERNELLAB_CONVERSION_LDMATRIX=on KERNELLAB_SMALL_STORE_RUN=1",
                                   "KERNELLAB_STORE_SECTOR_VECTORS=1 KERNELLAB_LOADS_PAST_DIVISION=1 KERNELLAB_NARROW_CONVERSIONS=1"])
@pytest.mark.parametrize("case", _cases())
def test_heldout_text_on_gpu(case, knobs):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    env = dict(kv.split("=") for kv in knobs.split())
    _child(f"heldout_texts4.check({case!r}, device='cuda')\n", env=env)


def test_idioms_texts_dry_run_on_the_interpreter():
    """`idioms.py --texts` on this module on the CPU (test sizes, a stand-in timer, kernellab only): every config of
    two cases (one with an in-place update, one whose launch takes a constexpr from its inputs) checked and timed."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from benchmarks import idioms\n"
            f"rows = idioms.run_texts({str(ROOT / 'benchmarks' / 'heldout_texts4.py')!r}, "
            "['h4_adamw', 'h4_persistent_gelu'], rounds=2, settle=0, device='cpu', "
            "timer=lambda fn: (fn(), 1e-3)[1], with_triton=False, size='test')\n"
            "assert len(rows) == 6, len(rows)\n"
            "for r in rows:\n"
            "    assert r['kernellab']['checked'] and r['kernellab']['seconds'] == 1e-3, r\n"
            "print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), (p.stdout[-2000:], p.stderr[-3000:])
