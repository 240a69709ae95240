"""benchmarks/heldout_texts3.py's kernel texts compute what their float64 references say, on the CPU interpreter and
(marked gpu) compiled on a GPU, with kernellab.compat serving `triton` in a child process (so the import hook stays
out of this one); and the two codegen knobs this screen found gaps for change what benchmarks/NOTES.md says."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .heldout_screens import case_names, case_tests, child, idioms_dry_run

ROOT = Path(__file__).resolve().parents[1]


def _child(code: str, env=None, timeout=900):
    return child("heldout_texts3", code, env, timeout)


def test_cases_are_new_and_complete():
    names = case_names("heldout_texts3")
    assert len(names) >= 20 and len(set(names)) == len(names)
    assert all(n.startswith("h3_") for n in names)


test_heldout_text_on_interpreter, test_heldout_text_on_gpu = case_tests(
    "heldout_texts3", ["", "KERNELLAB_BATCHED_SPLIT=1 KERNELLAB_DOMINANT_WIDENED=1 KERNELLAB_STORE_RUN=1",
                       "KERNELLAB_STORE_SECTOR_VECTORS=1 KERNELLAB_NARROW_CONVERSIONS=1"])


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_fp8_quantization_stores_with_the_store_run_knob():
    """quant_fp8 (f32 in, e4m3 out) at BLOCK 1024 / 4 warps: 8 elements a thread. Triton 3.6 stores them as one
    st.global.v2.b32; kernellab's f32 load run (4) left two st.global.b32 without KERNELLAB_STORE_RUN=1, one
    st.global.v2.b32 with it."""
    code = ("import torch\n"
            "x = torch.empty(1 << 24); y = torch.empty(1 << 24, dtype=torch.float8_e4m3fn)\n"
            "s = torch.empty(1); a = torch.empty(1)\n"
            "ck = heldout_texts3.quant_fp8.warmup(x, y, s, a, x.numel(), BLOCK=1024, num_warps=4, grid=(1,))\n"
            "ck.build_gpu()\n"
            "ptx = ck.asm['ptx']\n"
            "print(ptx.count('st.global.v2.b32'), ptx.count('st.global.b32'))\n")
    off = _child(code, env={"KERNELLAB_STORE_RUN": "0"}).split()[-2:]
    on = _child(code, env={"KERNELLAB_STORE_RUN": "1"}).split()[-2:]
    assert off == ["0", "2"], off
    assert on == ["1", "0"], on


def test_idioms_texts_loader_keeps_kernellab_kernels_working_after_the_hook_is_removed():
    """benchmarks/idioms.py --texts loads the module once under kernellab.compat, then removes the hook to import the
    real Triton: kernellab's kernels must still compile and run (here on the interpreter) after that."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from benchmarks import idioms\n"
            "import kernellab.compat\n"
            "kernellab.compat.install()\n"
            f"kl = idioms._load_texts({str(ROOT / 'benchmarks' / 'heldout_texts3.py')!r}, '_texts_kernellab')\n"
            "kernellab.compat.uninstall()\n"
            "assert 'triton' not in sys.modules\n"
            "kl.check('h3_rope_interleaved'); kl.check('h3_linear_recurrence')\n"
            "print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-3000:]


def test_idioms_texts_dry_run_on_the_interpreter():
    """`idioms.py --texts`' loop on the CPU (test sizes, a stand-in timer, kernellab and one --also-env column): each
    config checked and launched, rows with seconds and a figure, the knob column's ratio absent without Triton."""
    idioms_dry_run("heldout_texts3", ["h3_rope_interleaved", "h3_histogram_atomic"], 5,
                   also_env=["KERNELLAB_STORE_RUN=1"])
