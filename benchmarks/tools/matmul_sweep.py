"""Sweep matmul tile configurations at one shape: kernellab and Triton on the same kernel text and config,
with kernellab's registers, spills and shared memory, to see which knob limits the tensor-core path.

    python benchmarks/tools/matmul_sweep.py [--n 4096] [--dtype float16]

Writes benchmarks/results/<date>-<gpu>-matmul-sweep.json (or under $KERNELLAB_RESULTS_DIR).
"""
from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul import implementations, launch  # noqa: E402
from benchmarks.memory_bound import bench, write_results  # noqa: E402

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
CONFIGS = [(128, 128, 32, 8, 3), (128, 128, 32, 8, 4), (128, 128, 64, 8, 3), (128, 128, 64, 8, 4),
           (128, 256, 32, 8, 4), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (64, 256, 64, 4, 4),
           (64, 128, 64, 4, 4), (128, 128, 64, 4, 3), (256, 128, 64, 8, 3)]


def main():
    import torch

    import kernellab

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    args = p.parse_args()
    impls, triton_version = implementations()
    n, dtype = args.n, getattr(torch, args.dtype)
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=g).to(dtype)
    b = torch.randn(n, n, device="cuda", generator=g).to(dtype)
    ref = a.float() @ b.float()
    flops = 2 * n ** 3
    t_blas = bench(lambda: torch.matmul(a, b))
    rows = []
    for bm, bn, bk, warps, stages in CONFIGS:
        row = {"config": [bm, bn, bk, warps, stages]}
        for name, k in impls.items():
            c = torch.full((n, n), float("nan"), device="cuda", dtype=dtype)

            config = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8)

            def run():
                return launch(k, a, b, c, config, num_warps=warps, num_stages=stages)
            try:
                compiled = run()
                torch.cuda.synchronize()
                err = ((c.float() - ref).norm() / ref.norm()).item()
                t = bench(run)
                row[name] = {"tflops": flops / t / 1e12, "rel_err": err}
                if name == "kernellab":
                    row[name].update(n_regs=compiled.n_regs, n_spills=compiled.n_spills, shared=compiled.shared)
            except Exception as e:
                row[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
        rows.append(row)
    gpu = torch.cuda.get_device_name()
    result = {"date": datetime.date.today().isoformat(), "gpu": gpu, "shape": [n, n, n], "dtype": args.dtype,
              "cublas_tflops": flops / t_blas / 1e12,
              "versions": {"python": platform.python_version(), "torch": torch.__version__, "triton": triton_version,
                           "kernellab": kernellab.__version__, "cuda": torch.version.cuda},
              "rows": rows}
    path = write_results(result, "matmul-sweep")
    print(f"wrote {path}\n{args.dtype} {n}^3, cuBLAS {result['cublas_tflops']:.0f} TFLOP/s")
    print(f"{'BM BN BK w s':<18} {'kl TF/s':>8} {'triton':>8} {'kl/tri':>7} {'regs':>5} {'spill':>6} {'smem':>7}")
    for r in rows:
        kl, tr = r.get("kernellab", {}), r.get("triton", {})
        f = lambda d: f"{d['tflops']:8.1f}" if "tflops" in d else "     ERR"  # noqa: E731
        ratio = f"{kl['tflops'] / tr['tflops']:7.2f}" if "tflops" in kl and "tflops" in tr else "      -"
        print(f"{' '.join(map(str, r['config'])):<18} {f(kl)} {f(tr) if tr else '       -'} {ratio} "
              f"{kl.get('n_regs', '-'):>5} {kl.get('n_spills', '-'):>6} {kl.get('shared', '-'):>7}")


if __name__ == "__main__":
    main()
