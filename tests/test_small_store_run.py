"""KERNELLAB_SMALL_STORE_RUN=1 (assign_layouts, default off until timed on a GPU): a store of at most one element a
thread takes its value's layout (no conversion, as before) and, with the knob, moves each thread's run of
contiguous registers as one vector where the addresses and mask allow. heldout_texts4's attention decode stores
its [D] output from the reduction's slice layout, 8 halves a thread: 8 st.global.b16 a thread without the knob,
one st.global.v4.b32 with it (Triton converts through shared memory to 1 a thread). Pass-level test (the `vec`
kernellab picks, with register_run's rule), PTX test, and interpreter / GPU results with the knob on."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

from kernellab.compiler.gpu.layouts import Blocked, Slice  # noqa: E402
from kernellab.compiler.passes.assign_layouts import register_run  # noqa: E402


def test_register_run_rule():
    parent = Blocked((1, 8), (2, 16), (4, 1), (1, 0))
    s = Slice(0, parent)
    assert register_run(s, (128,), 0, 8) == 8
    assert register_run(s, (128,), 0, 4) == 4  # capped by what the addresses allow
    assert register_run(s, (256,), 0, 8) == 8  # two runs a thread, 128 apart
    # one element a thread: nothing to group
    assert register_run(Blocked((1,), (32,), (4,), (0,)), (128,), 0, 8) == 1
    # 2 a thread along rows of a [64, 2] tile held [2, 1]: contiguous along dim 0 only
    lay = Blocked((2, 1), (16, 2), (4, 1), (0, 1))
    assert register_run(lay, (128, 2), 0, 8) == 2 and register_run(lay, (128, 2), 1, 8) == 1


def _decode_ptx(knob: str):
    """heldout_texts4's attention decode (D = 128, BLOCK_N = 64, 4 warps) built for sm_90a in a child process
    (kernellab.compat serves the module's `triton`): its PTX's global stores and the store's line of GPU IR."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import kernellab.compat; kernellab.compat.install()\n"
            f"import sys; sys.path.insert(0, {str(root / 'benchmarks')!r})\n"
            "import torch, heldout_texts4 as h\n"
            "q = torch.empty(16, 32, 128, dtype=torch.float16); k = torch.empty(16, 8, 4096, 128, dtype=torch.float16)\n"
            "lens = torch.empty(16, dtype=torch.int32)\n"
            "ck = h.attn_decode_kvcache.warmup(q, k, k, q, lens, 0.088, 32, 8, q.stride(0), q.stride(1), k.stride(0),"
            " k.stride(1), k.stride(2), BLOCK_N=64, D=128, num_warps=4, grid=(16, 32))\n"
            "ck.build_gpu()\n"
            "ptx = ck.asm['ptx']\n"
            "print(ptx.count('st.global.b16'), ptx.count('st.global.v4.b32'))\n"
            "print([ln.strip() for ln in ck.asm['gpu'].splitlines() if 'tt.store' in ln][0])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(root), timeout=600,
                       env={**os.environ, "KERNELLAB_SMALL_STORE_RUN": knob})
    assert p.returncode == 0, p.stderr[-3000:]
    counts, store = p.stdout.strip().splitlines()[-2:]
    return tuple(int(c) for c in counts.split()), store


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_the_decode_output_goes_as_one_vector():
    off, off_store = _decode_ptx("0")
    on, on_store = _decode_ptx("1")
    assert off == (8, 0) and "vec = 1" in off_store, (off, off_store)
    assert on == (0, 1) and "vec = 8" in on_store, (on, on_store)


def _topk_ptx(knob: str):
    """heldout_texts3's topk (rows of 256 f32, the top 16, BLOCK_M = 4, 4 warps) built for sm_90a in a child."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import kernellab.compat; kernellab.compat.install()\n"
            f"import sys; sys.path.insert(0, {str(root / 'benchmarks')!r})\n"
            "import torch, heldout_texts3 as h\n"
            "x = torch.empty(32768, 256); v = torch.empty(32768, 16)\n"
            "ck = h.topk_rows.warmup(x, v, 32768, N=256, K=16, BLOCK_M=4, num_warps=4, grid=(8192,))\n"
            "ck.build_gpu()\n"
            "ptx = ck.asm['ptx']\n"
            "print(ptx.count('st.global.b32'), ptx.count('st.global.v4.b32'))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(root), timeout=600,
                       env={**os.environ, "KERNELLAB_SMALL_STORE_RUN": knob})
    assert p.returncode == 0, p.stderr[-3000:]
    return tuple(int(c) for c in p.stdout.split()[-2:])


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_topk_results_go_as_one_vector():
    """The third screen's topk stored its 64 results 4 contiguous f32 a thread by 4 scalar stores (16 threads)."""
    assert _topk_ptx("0") == (4, 0)
    assert _topk_ptx("1") == (0, 1)


def _check_decode(device: str):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import kernellab.compat; kernellab.compat.install()\n"
            f"import sys; sys.path.insert(0, {str(root / 'benchmarks')!r})\n"
            f"import heldout_texts4 as h; h.check('h4_attn_decode', device={device!r}); print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(root), timeout=600,
                       env={**os.environ, "KERNELLAB_SMALL_STORE_RUN": "1"})
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-3000:]


def test_decode_result_on_the_interpreter():
    _check_decode("cpu")


@pytest.mark.gpu
def test_decode_result_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _check_decode("cuda")
