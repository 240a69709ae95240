"""Launch chosen variants of tests/idioms.py once each (after a warm-up launch) for a profiler such as ncu.

    ncu --clock-control none -k regex:mm_ python benchmarks/tools/profile_idioms.py matmul acc_arg:0 dot_plus_acc:0
Each argument after the workload is variant:config_index; `tr.` before it compiles the variant with Triton.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.idioms import make_idioms  # noqa: E402


def main():
    import torch

    import kernellab
    import kernellab.language as kltl

    workload, picks = sys.argv[1], sys.argv[2:]
    built = {"kl": {w.name: w for w in make_idioms(kernellab.jit, kltl)}}
    try:
        import triton
        import triton.language as trtl

        built["tr"] = {w.name: w for w in make_idioms(triton.jit, trtl)}
    except ImportError:
        pass
    w = built["kl"][workload]
    x = w.inputs(w.sizes["bench"], "cuda", seed=0)
    for pick in picks:
        impl, _, rest = pick.rpartition(".")
        name, idx = rest.split(":")
        v = next(v for v in built[impl or "kl"][workload].variants if v.name == name)
        v.launch(v.kernel, x, v.configs[int(idx)])
        torch.cuda.synchronize()
        v.launch(v.kernel, x, v.configs[int(idx)])
        torch.cuda.synchronize()
        print(pick, "launched", flush=True)


if __name__ == "__main__":
    main()
