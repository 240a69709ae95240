"""Times the grouped GEMM of tests/test_device_tensormap.py (tutorial 08's, with tensor descriptors over per-group
pointers loaded from a table): kernellab with the tensor maps made in the kernel (TMA loads and stores) against the
same kernel with `enable_tma=False` (cp.async stages, st.global stores) and a loop of torch.matmul (cuBLAS).

    python benchmarks/tools/grouped_gemm.py [--groups 8] [--size 1024] [--ragged]

Groups are size x size x size (or, --ragged, sizes drawn from multiples of 8 between size/4 and size), fp16 and
bf16; outputs are poisoned with NaN and checked against torch in float64 before timing. Prints TFLOP/s per variant:
the median of 7 CUDA-event rounds of 20 launches after 0.2 s of warm-up. Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.tools.tutorial09_matmul import _timeit  # noqa: E402  (one event timer for both tools)


def main():
    import torch

    from tests.test_device_tensormap import TL_DTYPE, Problem, grouped_gemm

    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--ragged", action="store_true")
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    if args.ragged:
        pick = lambda: int(torch.randint(args.size // 32, args.size // 8 + 1, (1,), generator=g)) * 8  # noqa: E731
        sizes = [(pick(), pick(), pick()) for _ in range(args.groups)]
    else:
        sizes = [(args.size,) * 3] * args.groups
    flops = sum(2 * m * n * k for m, n, k in sizes)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{args.groups} groups, sizes {sizes[:4]}{' ...' if len(sizes) > 4 else ''}; TFLOP/s")
    for dtype in (torch.float16, torch.bfloat16):
        p = Problem(sizes, dtype, "cuda", packed=False)
        p.launch(sms)
        torch.cuda.synchronize()
        p.check()
        row = {}
        for name, kw in (("device TMA", {}), ("cp.async (enable_tma=False)", {"enable_tma": False})):
            def run(kw=kw):
                meta = dict(NUM_PROGRAMS=sms, DTYPE=TL_DTYPE[dtype], PACKED=False, HINT=True, BM=128, BN=128,
                            BK=64, num_warps=8, num_stages=3, **kw)
                grouped_gemm[(sms,)](p.table, p.dims, *p.bufs, len(p.groups), **meta)
            row[name] = flops / _timeit(run) / 1e9
        row["torch loop"] = flops / _timeit(lambda: [a @ b for a, b, _ in p.groups]) / 1e9
        print(f"  {str(dtype):15s} " + "  ".join(f"{k}: {v:7.1f}" for k, v in row.items()))


if __name__ == "__main__":
    main()
