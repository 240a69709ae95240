"""benchmarks/heldout_texts4.py's kernel texts compute what their float64 references say, on the CPU interpreter and
(marked gpu) compiled on a GPU, with kernellab.compat serving `triton` in a child process (so the import hook stays
out of this one)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .heldout_screens import case_names, case_tests, idioms_dry_run

ROOT = Path(__file__).resolve().parents[1]


def test_cases_are_new_and_complete():
    names = case_names("heldout_texts4")
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


test_heldout_text_on_interpreter, test_heldout_text_on_gpu = case_tests(
    "heldout_texts4", ["", "KERNELLAB_STORE_RUN=1 KERNELLAB_CONVERSION_LDMATRIX=on KERNELLAB_SMALL_STORE_RUN=1",
                       "KERNELLAB_STORE_SECTOR_VECTORS=1 KERNELLAB_LOADS_PAST_DIVISION=1 KERNELLAB_NARROW_CONVERSIONS=1"])


def test_idioms_texts_dry_run_on_the_interpreter():
    """`idioms.py --texts` on this module on the CPU (test sizes, a stand-in timer, kernellab only): every config of
    two cases (one with an in-place update, one whose launch takes a constexpr from its inputs) checked and timed."""
    idioms_dry_run("heldout_texts4", ["h4_adamw", "h4_persistent_gelu"], 6)
