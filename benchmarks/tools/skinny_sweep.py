"""Skinny matmul (small M: 16 x 4096 x 4096 by default) over small-M tile configs: kernellab, Triton on the same
text and config, and cuBLAS, in TFLOP/s.

    python benchmarks/tools/skinny_sweep.py [--m 16] [--n 4096] [--k 4096]

BLOCK_M 16 or 32 runs on mma.sync on sm_90 (wgmma needs 64 rows per warpgroup); the 64-row configs (wgmma)
are the control. (The mma.sync copy-order experiment it once swept, after/reuse, measured the same as the default
and was removed.)
Outputs are NaN-poisoned and checked against float32 before timing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul import implementations, launch  # noqa: E402
from benchmarks.memory_bound import bench  # noqa: E402

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
CONFIGS = [(16, 32, 256, 4, 4), (16, 32, 128, 4, 6), (16, 64, 128, 4, 4), (16, 64, 256, 4, 3), (16, 128, 128, 4, 4),
           (16, 64, 64, 4, 6), (32, 64, 128, 4, 4), (32, 32, 128, 4, 4), (64, 64, 128, 4, 4), (64, 32, 128, 4, 5)]


def main():
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--k", type=int, default=4096)
    args = p.parse_args()
    M, N, K = args.m, args.n, args.k
    orders = ["kernellab"]
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(K, N, device="cuda").half()
    ref = a.float() @ b.float()
    flops = 2 * M * N * K
    cublas = flops / bench(lambda: torch.matmul(a, b)) / 1e12
    print(f"{torch.cuda.get_device_name()}  {M}x{N}x{K} fp16  cuBLAS {cublas:.1f} TFLOP/s", flush=True)

    def run(kernel, cfg):
        bm, bn, bk, w, s = cfg
        config = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.half)
        try:
            launch(kernel, a, b, c, config=config, num_warps=w, num_stages=s)
            torch.cuda.synchronize()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                return f"wrong ({err:.2g})"
            return flops / bench(lambda: launch(kernel, a, b, c, config=config, num_warps=w, num_stages=s)) / 1e12
        except Exception as e:  # a config one compiler cannot build: say so, keep sweeping
            return type(e).__name__

    rows = {cfg: {} for cfg in CONFIGS}
    impls, _ = implementations()
    triton = impls.get("triton")
    for cfg in CONFIGS:
        rows[cfg]["kernellab"] = run(impls["kernellab"], cfg)
    for cfg in CONFIGS:
        rows[cfg]["triton"] = run(triton, cfg) if triton is not None else "-"

    def f(x):
        return f"{x:6.1f}" if isinstance(x, float) else f"{str(x)[:6]:>6}"

    print(f"{'config':18} " + " ".join(f"{o:>10}" for o in orders) + f" {'triton':>7} {'best/tri':>8}"
          f" {'best/cuBLAS':>11}")
    for cfg, r in rows.items():
        bm, bn, bk, w, s = cfg
        kl = [r[o] for o in orders if isinstance(r[o], float)]
        best = max(kl) if kl else None
        tri = r["triton"]
        rel = f"{best / tri:8.2f}" if best and isinstance(tri, float) else f"{'-':>8}"
        rel_cb = f"{best / cublas:11.2f}" if best else f"{'-':>11}"
        print(f"{f'{bm}x{bn}x{bk}/{w}w/{s}s':18} " + " ".join(f"{f(r[o]):>10}" for o in orders)
              + f" {f(tri):>7} {rel} {rel_cb}", flush=True)


if __name__ == "__main__":
    main()
