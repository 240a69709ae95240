"""Which kernels a codegen knob changes, without LLVM or ptxas: every kernel a `compile_time.py` case launches (its
collector records the specializations) is taken through the GPU passes with the knob off and on, and the GPU IR
texts compared (a knob acting in the GPU passes changes the PTX only where it changes the GPU IR). Fast enough to
sweep the idioms' bench sizes and the held-out texts on a busy CPU.

    PYTHONPATH=. python benchmarks/tools/knob_gpuir_ab.py --texts benchmarks/tools/idioms_bench_texts.py \\
        --knob KERNELLAB_DOMINANT_WIDENED=1 --knob KERNELLAB_BATCHED_SPLIT=1 all_matmul all_stencil ...
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--texts", required=True)
    ap.add_argument("--knob", action="append", default=[], metavar="VAR=VALUE")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    os.environ["COMPILE_TIME_TEXTS"] = os.path.abspath(a.texts)
    import kernellab.compat
    from benchmarks import compile_time as ct

    kernellab.compat.install()
    ct._texts_module()  # its folder on sys.path: the recorded kernels' module is imported by name
    from kernellab.compiler.backend import Build, run_stages
    from kernellab.compiler.codegen.target import Target
    from kernellab.runtime.jit import JITFunction

    knobs = dict(kv.split("=", 1) for kv in a.knob)
    target = Target(90)
    changed, total = [], 0
    for case in a.cases:
        kernels, err = ct._collect(case, a.timeout)
        if err and not kernels:
            print(f"[{case}] collect failed: {err}", flush=True)
            continue
        for i, k in enumerate(kernels):
            fn = ct._module_attr(k["module"], k["qualname"], lambda o: isinstance(o, JITFunction))
            texts = []
            for on in (False, True):
                for var, val in knobs.items():
                    if on:
                        os.environ[var] = val
                    else:
                        os.environ.pop(var, None)
                fn.cache.clear()
                ck = fn.preload(k["kl_spec"])
                build = run_stages(Build(ck.trace, ck.module.clone(), ck.gpu_options(target), target), "gpu", "gpu")
                texts.append(build.out["gpu"])
            total += 1
            tag = f"{case}-{i}-{k['kernel']} {ct._config_label(k)}"
            if texts[0] != texts[1]:
                changed.append(tag)
            print(("CHANGED " if texts[0] != texts[1] else "same    ") + tag, flush=True)
    print(f"{len(changed)} of {total} kernels change with {' '.join(a.knob)}")


if __name__ == "__main__":
    main()
