"""Matmul on the GPU: kernellab vs torch (cuBLAS) vs Triton compiling the same kernel text.

fp16 and bf16, M = N = K in {1024, 2048, 4096, 8192}, plus 8192x8192x1024 and 16x4096x4096; on sm_89+ also fp8
e4m3 (per-tensor scales applied in the epilogue, bf16 out) at 4096^3 and 8192x8192x4096, against
torch._scaled_mm (cuBLAS, B column-major, fp32 scale tensors). Writes benchmarks/results/<date>-<gpu>-matmul.json
(`--fp8` alone: <date>-<gpu>-matmul-fp8.json) and prints TFLOP/s and ratios.

    python benchmarks/matmul.py          # needs a CUDA GPU, torch and (for the comparison) triton
    python benchmarks/matmul.py --fp8    # the fp8 rows only ("bp": the block-pointer text, TMA in kernellab)
    python benchmarks/matmul.py --fp8 --warp-specialize   # kernellab's TMA loops (the "bp" rows) warp-specialized
    python benchmarks/matmul.py --no-fp8 --also-env KERNELLAB_STMATRIX=0   # one more kernellab column, built
                                                         # with a codegen switch, timed in the same run
    python benchmarks/matmul.py --no-fp8 --fp32-out --also-env KERNELLAB_MMA32_PAD=16   # fp16 in, fp32 out rows
    python benchmarks/matmul.py --skinny  # skinny shapes: kernellab split-K auto / off / forced S, Triton, cuBLAS
    python benchmarks/matmul.py --skinny --shapes 16x4096x4096,64x8192x8192 --splits 2,4,8,16
    python benchmarks/matmul.py --no-fp8 --also-env KERNELLAB_PERSISTENT=1 \
        --shapes 8192x8192x512,8192x8192x1024,8192x8192x2048,4096x4096x4096,8192x8192x8192   # persistent column
    python benchmarks/matmul.py --no-fp8 --also-env KERNELLAB_PERSISTENT=auto --also-env KERNELLAB_PERSISTENT=1 \
        --shapes 8192x8192x512,8192x8192x1024,8192x8192x2048,8192x8192x3072,4096x4096x4096,8192x8192x8192
                                                         # auto (K loop <= 32 iterations) against always
"""
from __future__ import annotations

import contextlib
import datetime
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.memory_bound import bench, cdiv, interleaved, write_results  # noqa: E402

# the best config of benchmarks/tools/matmul_sweep.py for Triton on the H200 (128x256x64, 8 warps, 3 stages:
# two warpgroups of m64n256k16); both compilers get the same one
CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8)
NUM_WARPS = 8
NUM_STAGES = 3
# fp8: Triton's fp8 tutorial config (two warpgroups of m64n256k32, 128 bytes of K per stage row); both compilers
FP8_CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8)
FP8_NUM_WARPS = 8
FP8_NUM_STAGES = 3
FP8_SHAPES = [(4096, 4096, 4096), (8192, 8192, 4096)]
ROUNDS, REP_PER_ROUND = 3, 80  # the fp16/bf16 rows: each column timed in turns (`interleaved`)


def matmul_kernel_for(jit_module, tl):
    """The tutorial-style matmul of the test corpus, compiled by `kernellab` or `triton`."""
    from tests.corpus import make_kernels

    return make_kernels(jit_module, tl)["matmul_kernel"]


def fp8_matmul_kernel_for(jit, tl):
    """fp8 matmul as Triton's fp8 tutorials write it: A [M, K] row-major, B [K, N] read with `stride_bk` (1 when B is
    w.T of a row-major [N, K] w: K-major, the layout wgmma reads 8-bit operands in), fp32 accumulation, and the
    per-tensor scales (fp32 scalars in memory) applied once in the epilogue."""

    @jit
    def fp8_matmul_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                          stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        scale = tl.load(a_scale_ptr) * tl.load(b_scale_ptr)
        c = (accumulator * scale).to(c_ptr.dtype.element_ty)
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, c, mask=c_mask)

    return fp8_matmul_kernel


def fp8_block_ptr_kernel_for(jit, tl):
    """The same fp8 matmul on block pointers (B's block K-major, order (0, 1), when B is w.T): kernellab fills both
    operands' stages by TMA on sm_90. Same arguments as `fp8_matmul_kernel_for`'s kernel."""

    @jit
    def fp8_bp_matmul_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K, stride_am, stride_ak,
                             stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        in_group = GROUP_M * num_pid_n
        first_m = (pid // in_group) * GROUP_M
        group_m = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % in_group) % group_m
        pid_n = (pid % in_group) // group_m
        a_bp = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                                 offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
        b_bp = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                                 offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N), order=(0, 1))
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = tl.load(a_bp, boundary_check=(0, 1))
            b = tl.load(b_bp, boundary_check=(0, 1))
            acc = tl.dot(a, b, acc)
            a_bp = tl.advance(a_bp, (0, BLOCK_K))
            b_bp = tl.advance(b_bp, (BLOCK_K, 0))
        scale = tl.load(a_scale_ptr) * tl.load(b_scale_ptr)
        c_bp = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                                 offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N),
                                 order=(1, 0))
        tl.store(c_bp, (acc * scale).to(c_ptr.dtype.element_ty), boundary_check=(0, 1))

    return fp8_bp_matmul_kernel


def launch_fp8(kernel, a, b, c, a_scale, b_scale, config=FP8_CONFIG, num_warps=FP8_NUM_WARPS,
               num_stages=FP8_NUM_STAGES, **options):
    M, K = a.shape
    N = b.shape[1]
    grid = (cdiv(M, config["BLOCK_M"]) * cdiv(N, config["BLOCK_N"]),)
    return kernel[grid](a, b, c, a_scale, b_scale, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), num_warps=num_warps, num_stages=num_stages, **config, **options)


def fp8_operands(M, N, K, seed=0, device="cuda", b_k_major=True):
    """(a, b, a_scale, b_scale): e4m3 A [M, K] row-major; B [K, N] as w.T of a row-major [N, K] w (K-major, what
    torch._scaled_mm takes) or, with `b_k_major=False`, N-major; per-tensor fp32 scales (1-element tensors)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    a = (torch.randn(M, K, device=device, generator=g) * 2).to(torch.float8_e4m3fn)
    w = torch.randn(N, K, device=device, generator=g) * 2
    b = w.to(torch.float8_e4m3fn).t() if b_k_major else w.t().contiguous().to(torch.float8_e4m3fn)
    a_scale = torch.tensor([0.75], device=device)
    b_scale = torch.tensor([0.0625], device=device)
    return a, b, a_scale, b_scale


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


@contextlib.contextmanager
def env_setting(setting: str | None):
    """`VAR=VALUE` set around a launch (the switch acts when that launch compiles; the compile cache keys on it),
    then restored; `A=1,B=1` sets several at once (one column with knobs combined). None: nothing."""
    if not setting:
        yield
        return
    parts = setting.split(",")
    if not all("=" in p for p in parts):
        parts = [setting]
    old = {}
    for p in parts:
        var, _, value = p.partition("=")
        old.setdefault(var, os.environ.get(var))
        os.environ[var] = value
    try:
        yield
    finally:
        for var, was in old.items():
            if was is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = was


def time_row(case, M, N, K, dtype, out_dtype, impls):
    """(row, {name: compiled kernel}): each of `impls` ({name: (kernel, "VAR=VALUE" set around its launches or
    None)}) checked against float32 on NaN-poisoned output, then all of them and cuBLAS (for 16-bit outputs)
    timed in turns (`interleaved`)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
    ref = a.float() @ b.float()
    flops = 2 * M * N * K
    row, runs, compiled = {"case": case, "flops": flops}, {}, {}
    for name, (k, setting) in impls.items():
        c = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype)

        def run(k=k, c=c, setting=setting):
            with env_setting(setting):
                return launch(k, a, b, c)

        try:
            compiled[name] = run()
            torch.cuda.synchronize()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            row[name] = {"rel_err": err, "n_regs": getattr(compiled[name], "n_regs", None)}
            row[name].update(variant_launched(compiled[name]))
            runs[name] = run
        except Exception as e:
            row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
    if out_dtype == dtype:
        runs["torch"] = lambda: torch.matmul(a, b)
        row["torch"] = {}
    for name, t in interleaved(runs, ROUNDS, REP_PER_ROUND).items():
        row[name].update(seconds=t, tflops=flops / t / 1e12)
    return row, compiled


def variant_launched(ck) -> dict:
    """What a kernellab launch ran instead of the kernel as written: the persistent variant's program count and
    registers (KERNELLAB_PERSISTENT), split-K's S; {} when it ran as written (or is no kernellab kernel)."""
    out = {}
    pst = getattr(ck, "_persistent_state", None)
    if pst is not None and pst.last and pst.variant is not None:
        out.update(persistent_programs=pst.last, n_regs=pst.variant.n_regs, n_regs_as_written=ck.n_regs)
    elif pst is not None and pst.refused:
        out["persistent_refused"] = pst.refused
    st = getattr(ck, "_split_state", None)
    if st is not None and st.last > 1:
        out["split_k"] = st.last
    return out


def also_env_implementations(settings) -> dict:
    """{"kernellab[VAR=VALUE]": (a fresh kernellab kernel of the same text, "VAR=VALUE")}: each compiles its own
    specializations with the switch set (a fresh jit object: no in-memory specialization is shared)."""
    import kernellab
    import kernellab.language as kltl

    return {f"kernellab[{s}]": (matmul_kernel_for(kernellab, kltl), s) for s in settings}


def fp8_implementations(kernel_for=None):
    """One fp8 kernel text (`fp8_matmul_kernel_for` by default) for kernellab and (when installed) Triton."""
    import kernellab
    import kernellab.language as kltl

    kernel_for = kernel_for or fp8_matmul_kernel_for
    impls = {"kernellab": kernel_for(kernellab.jit, kltl)}
    try:
        import triton
        import triton.language as trtl
    except ImportError:
        return impls
    impls["triton"] = kernel_for(triton.jit, trtl)
    return impls


def fp8_supported() -> bool:
    """fp8 tensor cores: sm_89 (Ada) and sm_90 (Hopper) and later; torch._scaled_mm needs them too."""
    import torch

    return torch.cuda.get_device_capability() >= (8, 9) and hasattr(torch, "_scaled_mm")


def fp8_rows(num_stages=FP8_NUM_STAGES):
    """fp8 e4m3 x e4m3 -> bf16 with per-tensor scales: kernellab and Triton on the same text, cuBLAS through
    torch._scaled_mm (B column-major)."""
    import torch

    texts = {"": fp8_implementations(), "bp ": fp8_implementations(fp8_block_ptr_kernel_for)}
    rows = []
    for (text, impls), (M, N, K) in ((t, shape) for shape in FP8_SHAPES for t in texts.items()):
        a, b, sa, sb = fp8_operands(M, N, K, seed=M + N + K)
        ref = (a.float() @ b.float()) * (sa * sb)
        flops = 2 * M * N * K
        row = {"case": f"fp8e4m3 {text}{M}x{N}x{K}", "flops": flops,
               "text": "block pointers (kernellab: TMA)" if text else "pointers (cp.async)"}
        for name, k in impls.items():
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            try:
                compiled = launch_fp8(k, a, b, c, sa, sb, num_stages=num_stages)
                torch.cuda.synchronize()
                err = ((c.float() - ref).norm() / ref.norm()).item()
                t = bench(lambda: launch_fp8(k, a, b, c, sa, sb, num_stages=num_stages))
                row[name] = {"seconds": t, "tflops": flops / t / 1e12, "rel_err": err,
                             "n_regs": getattr(compiled, "n_regs", None)}
            except Exception as e:
                row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
        try:
            out = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            t = bench(lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
            row["torch"] = {"seconds": t, "tflops": flops / t / 1e12, "rel_err": err, "op": "torch._scaled_mm"}
        except Exception as e:
            row["torch"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        rows.append(row)
        print(_fmt(row), flush=True)
    return rows


def main(argv=None):
    import argparse

    import torch

    import kernellab

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fp8", action="store_true", help="only the fp8 rows (sm_89+)")
    ap.add_argument("--no-fp8", action="store_true", help="skip the fp8 rows")
    ap.add_argument("--fp8-stages", type=int, default=FP8_NUM_STAGES,
                    help=f"num_stages of the fp8 rows, both compilers (default {FP8_NUM_STAGES}; 4 fits 128x256x128)")
    ap.add_argument("--warp-specialize", action="store_true",
                    help="KERNELLAB_WARP_SPECIALIZE=1: kernellab's TMA dot loops (the fp8 'bp' rows) get a producer "
                    "warpgroup (passes/warp_specialize.py)")
    ap.add_argument("--also-env", action="append", default=[], metavar="VAR=VALUE",
                    help="one more kernellab column (the fp16, bf16 and --fp32-out rows) built with this codegen "
                    "switch, e.g. KERNELLAB_MMA32_PAD=16 or KERNELLAB_STMATRIX=0; repeatable")
    ap.add_argument("--fp32-out", action="store_true",
                    help="also fp16 operands with an fp32 output (the accumulator stored as is; no cuBLAS column)")
    ap.add_argument("--skinny", action="store_true",
                    help="only skinny shapes (few programs): kernellab with split-K auto, off and forced S "
                    "(KERNELLAB_SPLIT_K), Triton and cuBLAS in one run")
    ap.add_argument("--shapes", default=None,
                    help="MxNxK comma-separated: the fp16/bf16 rows' shapes (default: M = N = K in 1024..8192, "
                    "8192x8192x1024 and 16x4096x4096), or with --skinny its shapes (default: "
                    + ",".join("x".join(map(str, s)) for s in SKINNY_SHAPES) + ")")
    ap.add_argument("--splits", default="2,4,8,16", help="--skinny's forced S values (comma-separated; '' for none)")
    args = ap.parse_args(argv)
    given = None if args.shapes is None else [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
    if args.skinny:
        shapes = given or SKINNY_SHAPES
        splits = [int(x) for x in args.splits.split(",") if x]
        return skinny(shapes, splits)
    if args.warp_specialize:
        os.environ["KERNELLAB_WARP_SPECIALIZE"] = "1"
    impls, triton_version = implementations()
    impls = {name: (k, None) for name, k in impls.items()}
    impls.update(also_env_implementations(args.also_env))
    shapes = given or [(s, s, s) for s in (1024, 2048, 4096, 8192)] + [(8192, 8192, 1024), (16, 4096, 4096)]
    rows = []
    print(f"{'case':<28} {'kl TF/s':>8} {'triton':>8} {'cuBLAS':>8}  kl/cuBLAS kl/triton", flush=True)
    dtypes = [(torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16)]
    if args.fp32_out:
        dtypes.append((torch.float16, torch.float32))
    for dtype, out_dtype in () if args.fp8 else dtypes:
        for M, N, K in shapes:
            out = "" if out_dtype == dtype else "->fp32"
            row, _ = time_row(f"{str(dtype)[6:]}{out} {M}x{N}x{K}", M, N, K, dtype, out_dtype, impls)
            rows.append(row)
            print(_fmt(row), flush=True)
    if not args.no_fp8:
        if fp8_supported():
            rows += fp8_rows(args.fp8_stages)
        else:
            print(f"fp8 rows skipped: sm_{''.join(map(str, torch.cuda.get_device_capability()))} has no fp8 tensor "
                  "cores (sm_89+)")
    gpu = torch.cuda.get_device_name()
    result = {"date": datetime.date.today().isoformat(), "gpu": gpu, "config": CONFIG, "num_warps": NUM_WARPS,
              "num_stages": NUM_STAGES, "also_env": args.also_env, "fp32_out": args.fp32_out,
              "fp8": {"config": FP8_CONFIG, "num_warps": FP8_NUM_WARPS, "num_stages": args.fp8_stages,
                      "cuBLAS": "torch._scaled_mm, B column-major, fp32 per-tensor scales, bf16 out"},
              "versions": {"python": platform.python_version(), "torch": torch.__version__,
                           "triton": triton_version, "kernellab": kernellab.__version__, "cuda": torch.version.cuda},
              "rows": rows}
    # the fp8 rows alone get their own file, so they do not replace a day's fp16/bf16 rows
    path = write_results(result, "matmul-fp8" if args.fp8 else "matmul")
    print(f"\nwrote {path}")
    print(f"{'case':<28} {'kl TF/s':>8} {'triton':>8} {'cuBLAS':>8}  kl/cuBLAS kl/triton")
    for row in rows:
        print(_fmt(row))


SKINNY_SHAPES = [(16, 4096, 4096), (32, 4096, 4096), (64, 4096, 4096), (16, 8192, 8192), (128, 4096, 4096),
                 (16, 4096, 16384)]


def skinny(shapes, splits):
    """Skinny shapes at the benchmark's config: kernellab with KERNELLAB_SPLIT_K=auto (the default), 0 (off) and
    each forced S, Triton on the same text, cuBLAS; prints TFLOP/s, ratios and the S auto chose."""

    import torch

    import kernellab
    from kernellab.runtime import split_k

    impls, triton_version = implementations()
    kl_kernel = impls["kernellab"]
    variants = [("auto", "auto"), ("off", "0")] + [(f"S={s}", str(s)) for s in splits]
    head = f"{'case':<24}" + "".join(f"{v:>9}" for v, _ in variants) + f"{'triton':>9}{'cuBLAS':>9}" \
        + "  auto/cuBLAS auto/triton off/cuBLAS  auto S"
    print(head, flush=True)
    rows = []
    runs = {label: (kl_kernel, f"{split_k.KNOB}={knob}") for label, knob in variants}
    if "triton" in impls:
        runs["triton"] = (impls["triton"], None)
    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K in shapes:
            row, compiled = time_row(f"{str(dtype)[6:]} {M}x{N}x{K}", M, N, K, dtype, dtype, runs)
            st = getattr(compiled.get("auto"), "_split_state", None)
            if st is not None:
                row["auto_S"] = st.last
                row["split_refused"] = st.refused
            rows.append(row)
            print(_fmt_skinny(row, variants), flush=True)
    result = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "config": CONFIG,
              "num_warps": NUM_WARPS, "num_stages": NUM_STAGES, "splits": splits,
              "versions": {"python": platform.python_version(), "torch": torch.__version__,
                           "triton": triton_version, "kernellab": kernellab.__version__, "cuda": torch.version.cuda},
              "rows": rows}
    path = write_results(result, "matmul-skinny")
    print(f"\nwrote {path}")
    return rows


def _tf(row, name, width=8):
    r = row.get(name)
    return "-".rjust(width) if not r else ("ERR".rjust(width) if "error" in r else f"{r['tflops']:{width}.1f}")


def _ratio(row, a, b, width=8):
    ra, rb = row.get(a), row.get(b)
    if ra and rb and "tflops" in ra and "tflops" in rb:
        return f"{ra['tflops'] / rb['tflops']:{width}.2f}"
    return "-".rjust(width)


def _fmt_skinny(row, variants):
    return f"{row['case']:<24}" + "".join(_tf(row, v, 9) for v, _ in variants) + _tf(row, "triton", 9) \
        + _tf(row, "torch", 9) + f" {_ratio(row, 'auto', 'torch', 11)} {_ratio(row, 'auto', 'triton', 11)} " \
        f"{_ratio(row, 'off', 'torch', 11)}  {row.get('auto_S', '-')}"


def _launched(r) -> str:
    if not isinstance(r, dict):
        return ""
    if r.get("persistent_programs"):
        return f" (persistent P={r['persistent_programs']}, {r.get('n_regs')} regs)"
    return f" (split-K S={r['split_k']})" if r.get("split_k") else ""


def _fmt(row):
    alts = "".join(f"  {name}: {_tf(row, name).strip()} TF/s, {_ratio(row, name, 'kernellab').strip()}x kl, "
                   f"{_ratio(row, name, 'triton').strip()}x triton, {_ratio(row, name, 'torch').strip()}x cuBLAS"
                   + _launched(row[name]) for name in row if name.startswith("kernellab["))
    return f"{row['case']:<28} {_tf(row, 'kernellab')} {_tf(row, 'triton')} {_tf(row, 'torch')}  " \
           f"{_ratio(row, 'kernellab', 'torch')} {_ratio(row, 'kernellab', 'triton')}{alts}"


if __name__ == "__main__":
    main()
