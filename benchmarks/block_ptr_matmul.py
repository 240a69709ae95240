"""Block-pointer matmul on the GPU: kernellab with TMA, kernellab with cp.async (enable_tma=False), kernellab's
pointer matmul (benchmarks/matmul.py's kernel), Triton compiling the same block-pointer text, and cuBLAS.

fp16 and bf16, M = N = K = 4096 by default (`--sizes 2048 4096 8192`). Every variant is checked against
torch (relative Frobenius error, output poisoned with NaN first) before it is timed; writes
benchmarks/results/<date>-<gpu>-block_ptr_matmul.json and prints TFLOP/s and ratios.

    python benchmarks/block_ptr_matmul.py        # needs a CUDA GPU, torch and (for the comparison) triton
"""
from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul import CONFIG, NUM_STAGES, NUM_WARPS, launch, matmul_kernel_for  # noqa: E402
from benchmarks.memory_bound import bench, write_results  # noqa: E402


def block_ptr_kernel_for(jit_module, tl):
    """Triton's block-pointer matmul loop with grouped program order, for `kernellab` or `triton`."""

    @jit_module.jit
    def bp_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                         stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        in_group = GROUP_M * num_pid_n
        first_m = (pid // in_group) * GROUP_M
        group_m = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % in_group) % group_m
        pid_n = (pid % in_group) // group_m
        a_block_ptr = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                                        offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
        b_block_ptr = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                                        offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N), order=(1, 0))
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = tl.load(a_block_ptr, boundary_check=(0, 1))
            b = tl.load(b_block_ptr, boundary_check=(0, 1))
            acc = tl.dot(a, b, acc)
            a_block_ptr = tl.advance(a_block_ptr, (0, BLOCK_K))
            b_block_ptr = tl.advance(b_block_ptr, (BLOCK_K, 0))
        c_block_ptr = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                                        offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N),
                                        order=(1, 0))
        tl.store(c_block_ptr, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))

    return bp_matmul_kernel


def variants():
    """name -> (kernel, extra launch options); Triton's only when it is installed."""
    import kernellab
    import kernellab.language as kltl

    bp = block_ptr_kernel_for(kernellab, kltl)
    out = {"kl_tma": (bp, {}), "kl_cp_async": (bp, {"enable_tma": False}),
           "kl_pointers": (matmul_kernel_for(kernellab, kltl), {})}
    try:
        import triton
        import triton.language as trtl
    except ImportError:
        return out, None
    out["triton_bp"] = (block_ptr_kernel_for(triton, trtl), {})
    return out, triton.__version__


def main():
    import torch

    import kernellab

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[4096])
    sizes = ap.parse_args().sizes
    impls, triton_version = variants()
    names = list(impls) + ["cublas"]
    rows = []
    print(f"{'case':<22}" + "".join(f"{n:>13}" for n in names) + "   (TFLOP/s)", flush=True)
    for dtype in (torch.float16, torch.bfloat16):
        for s in sizes:
            M = N = K = s
            g = torch.Generator(device="cuda").manual_seed(s)
            a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
            ref = a.double() @ b.double()
            flops = 2 * M * N * K
            row = {"case": f"{str(dtype)[6:]} {M}x{N}x{K}"}
            for name, (k, opts) in impls.items():
                c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
                try:
                    compiled = launch(k, a, b, c, **opts)
                    torch.cuda.synchronize()
                    err = ((c.double() - ref).norm() / ref.norm()).item()
                    t = bench(lambda: launch(k, a, b, c, **opts))
                    row[name] = {"seconds": t, "tflops": flops / t / 1e12, "rel_err": err,
                                 "n_regs": getattr(compiled, "n_regs", None)}
                    if hasattr(compiled, "trace"):
                        st = next(p.stats for p in compiled.trace.passes if p.name == "fill_stages_with_tma")
                        row[name]["tma_buffers"] = st.get("tma", 0)
                except Exception as e:
                    row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
            t = bench(lambda: torch.matmul(a, b))
            row["cublas"] = {"seconds": t, "tflops": flops / t / 1e12}
            rows.append(row)
            print(_fmt(row, names), flush=True)
    result = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "config": CONFIG,
              "num_warps": NUM_WARPS, "num_stages": NUM_STAGES, "grid": "cdiv(M, BM) * cdiv(N, BN), GROUP_M order",
              "versions": {"python": platform.python_version(), "torch": torch.__version__,
                           "triton": triton_version, "kernellab": kernellab.__version__, "cuda": torch.version.cuda},
              "rows": rows}
    print(f"\nwrote {write_results(result, 'block_ptr_matmul')}")
    base = "kl_pointers"
    for row in rows:
        ratios = ", ".join(f"{n}/{base} {row[n]['tflops'] / row[base]['tflops']:.2f}" for n in names
                           if n != base and "tflops" in row.get(n, {}) and "tflops" in row.get(base, {}))
        errs = ", ".join(f"{n} {row[n]['rel_err']:.1e}" for n in names if "rel_err" in row.get(n, {}))
        print(f"{row['case']}: {ratios}\n    rel. error: {errs}")


def _fmt(row, names):
    def tf(name):
        r = row.get(name)
        return f"{'-':>13}" if not r else (f"{'ERR':>13}" if "error" in r else f"{r['tflops']:13.1f}")

    return f"{row['case']:<22}" + "".join(tf(n) for n in names)


if __name__ == "__main__":
    main()
