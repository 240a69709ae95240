"""Every tests/idioms.py workload at its bench size, as a `compile_time.py --texts` module: `CASES` (one per
workload, `all_<name>`) and `run(name)` launching every variant and config (not the autotune rows) on CPU tensors, so
both compilers' PTX / SASS of the whole idioms set can be dumped and compared on a CPU, e.g. with a codegen knob on and
off (benchmarks/NOTES.md, quant19):

    KERNELLAB_STORE_RUN=1 PYTHONPATH=. python benchmarks/compile_time.py \
        --texts benchmarks/tools/idioms_bench_texts.py --no-triton --no-write --dump DIR all_quantize all_rope ...

Name the cases: without them compile_time.py builds its whole default set (Liger, attorch) too."""
import os
import sys

import triton
import triton.language as tl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.append(ROOT)
from tests.idioms import make_idioms  # noqa: E402

WORKLOADS = {w.name: w for w in make_idioms(triton.jit, tl)}
# the kernels as module attributes, so that compile_time.py's workers find them by their qualnames
for _w in WORKLOADS.values():
    for _v in _w.variants:
        globals()[f"idiom_{_w.name}_{_v.name}"] = _v.kernel
CASES = tuple(f"all_{n}" for n in WORKLOADS)


def run(name):
    w = WORKLOADS[name[len("all_"):]]
    x = w.inputs(w.sizes["bench"], "cpu", 0)
    for v in w.variants:
        for cfg in v.configs:
            v.launch(v.kernel, x, cfg)
