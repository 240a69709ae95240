"""The tutorial matmul's epilogue with and without KERNELLAB_TMA_POINTER_STORE, built for sm_90a without a GPU.

The text of tests/corpus.py (benchmarks/matmul.py's kernellab and Triton column) at the benchmark's config
(128x256x64, 8 warps, 3 stages, fp16, M = N = 8192): its persistent variant (what KERNELLAB_PERSISTENT=auto launches
at K = 512 and 1024) and the kernel as written, under each knob value (0: st.global after the conversion through
shared memory; 1: TMA stores, an offset the compiler cannot prove >= 0 checked at run time; 2: the same without the
check). Prints a markdown table: ptxas registers, spills, shared bytes, st.global and bulk tensor stores in the
PTX, the run-time checks (calls to __assertfail), whether the tile loop was fused, SASS instructions, STG and UTMASTG.

    PYTHONPATH=. python benchmarks/tools/pointer_store_ptx.py [--k 512 --k 1024]
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

KNOB = "KERNELLAB_TMA_POINTER_STORE"
COLUMNS = ("regs", "spills", "shared", "st_global", "tma", "checks", "fused", "sass", "stg", "utmastg")


def build(knob: str, K: int, which: str) -> dict:
    import torch

    import kernellab as kl
    import kernellab.language as tl
    from kernellab.compiler.codegen.target import Target
    from kernellab.runtime import persistent
    from kernellab.viz.data import sass
    from tests.corpus import make_kernels

    os.environ["KERNELLAB_CACHE_DIR"] = tempfile.mkdtemp()
    os.environ[KNOB] = knob
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    M = N = 8192
    a, b, c = (torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16),
               torch.empty(M, N, dtype=torch.float16))
    ck = kernel.warmup(a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                       c.stride(1), BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3,
                       grid=(1,))
    v = persistent.state(kernel, ck).get_variant() if which == "persistent" else ck
    v.build_gpu(Target(90))
    ptx = v.asm["ptx"]
    stats = {r.name: r.stats for r in v.trace.passes}
    text, _ = sass(v.asm.get("cubin"))
    lines = [ln for ln in (text or "").splitlines() if re.match(r"\s*/\*[0-9a-f]{4}\*/", ln)]
    return dict(regs=v.n_regs, spills=v.n_spills, shared=v.shared, st_global=len(re.findall(r"\bst\.global", ptx)),
                tma=ptx.count("cp.async.bulk.tensor.2d.global.shared"), checks=ptx.count("call.uni __assertfail"),
                fused=stats["flatten_loops"].get("flattened", 0), sass=len(lines),
                stg=sum(" STG." in ln for ln in lines), utmastg=sum("UTMASTG" in ln for ln in lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, action="append", help="K of the persistent rows (default 512 and 1024)")
    args = ap.parse_args(argv)
    print(f"| build | K | {KNOB} | regs | spills | shared bytes | st.global | bulk tensor stores | run-time checks "
          "| fused | SASS | STG | UTMASTG |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [("persistent", k) for k in (args.k or [512, 1024])] + [("as written", 512)]
    for which, K in rows:
        for knob in ("0", "1", "2"):
            r = build(knob, K, which)
            cells = [which, K, knob] + [r[k] for k in COLUMNS]
            print("| " + " | ".join(map(str, cells)) + " |", flush=True)


if __name__ == "__main__":
    main()
