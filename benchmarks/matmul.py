"""Matmul on the GPU: kernellab vs torch (cuBLAS) vs Triton compiling the same kernel text.

fp16 and bf16, M = N = K in {1024, 2048, 4096, 8192}, plus 8192x8192x1024 and 16x4096x4096. Writes
benchmarks/results/<date>-<gpu>-matmul.json and prints TFLOP/s and ratios.

    python benchmarks/matmul.py          # needs a CUDA GPU, torch and (for the comparison) triton
"""
from __future__ import annotations

import datetime
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.memory_bound import bench, cdiv, write_results  # noqa: E402

# the best config of benchmarks/tools/matmul_sweep.py for Triton on the H200 (128x256x64, 8 warps, 3 stages:
# two warpgroups of m64n256k16); both compilers get the same one
CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8)
NUM_WARPS = 8
NUM_STAGES = 3


def matmul_kernel_for(jit_module, tl):
    """The tutorial-style matmul of the test corpus, compiled by `kernellab` or `triton`."""
    from tests.corpus import make_kernels

    return make_kernels(jit_module, tl)["matmul_kernel"]


def launch(kernel, a, b, c, config=CONFIG, num_warps=NUM_WARPS, num_stages=NUM_STAGES, **options):
    M, K = a.shape
    N = b.shape[1]
    grid = (cdiv(M, config["BLOCK_M"]) * cdiv(N, config["BLOCK_N"]),)
    return kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), num_warps=num_warps, num_stages=num_stages, **config, **options)


def implementations():
    """({"kernellab": kernel, "triton": kernel (when installed)}, triton version or None): the same text."""
    import kernellab
    import kernellab.language as kltl

    impls = {"kernellab": matmul_kernel_for(kernellab, kltl)}
    try:
        import triton
        import triton.language as trtl
    except ImportError:
        return impls, None
    impls["triton"] = matmul_kernel_for(triton, trtl)
    return impls, triton.__version__


def main():
    import torch

    import kernellab

    impls, triton_version = implementations()
    shapes = [(s, s, s) for s in (1024, 2048, 4096, 8192)] + [(8192, 8192, 1024), (16, 4096, 4096)]
    rows = []
    print(f"{'case':<28} {'kl TF/s':>8} {'triton':>8} {'cuBLAS':>8}  kl/cuBLAS kl/triton", flush=True)
    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K in shapes:
            g = torch.Generator(device="cuda").manual_seed(M + N + K)
            a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
            ref = a.float() @ b.float()
            flops = 2 * M * N * K
            row = {"case": f"{str(dtype)[6:]} {M}x{N}x{K}", "flops": flops}
            for name, k in impls.items():
                c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
                try:
                    compiled = launch(k, a, b, c)
                    torch.cuda.synchronize()
                    err = ((c.float() - ref).norm() / ref.norm()).item()
                    t = bench(lambda: launch(k, a, b, c))
                    row[name] = {"seconds": t, "tflops": flops / t / 1e12, "rel_err": err,
                                 "n_regs": getattr(compiled, "n_regs", None)}
                except Exception as e:
                    row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
            t = bench(lambda: torch.matmul(a, b))
            row["torch"] = {"seconds": t, "tflops": flops / t / 1e12}
            rows.append(row)
            print(_fmt(row), flush=True)
    gpu = torch.cuda.get_device_name()
    result = {"date": datetime.date.today().isoformat(), "gpu": gpu, "config": CONFIG, "num_warps": NUM_WARPS,
              "num_stages": NUM_STAGES,
              "versions": {"python": platform.python_version(), "torch": torch.__version__,
                           "triton": triton_version, "kernellab": kernellab.__version__, "cuda": torch.version.cuda},
              "rows": rows}
    path = write_results(result, "matmul")
    print(f"\nwrote {path}")
    print(f"{'case':<28} {'kl TF/s':>8} {'triton':>8} {'cuBLAS':>8}  kl/cuBLAS kl/triton")
    for row in rows:
        print(_fmt(row))


def _fmt(row):
    def tf(name):
        r = row.get(name)
        return "       -" if not r else ("     ERR" if "error" in r else f"{r['tflops']:8.1f}")

    def ratio(a, b):
        ra, rb = row.get(a), row.get(b)
        if ra and rb and "tflops" in ra and "tflops" in rb:
            return f"{ra['tflops'] / rb['tflops']:8.2f}"
        return "       -"

    return f"{row['case']:<28} {tf('kernellab')} {tf('triton')} {tf('torch')}  {ratio('kernellab', 'torch')} " \
           f"{ratio('kernellab', 'triton')}"


if __name__ == "__main__":
    main()
