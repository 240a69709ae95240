"""Memory-bound kernels on the GPU: kernellab vs PyTorch vs Triton compiling the same kernel text.

Runs, in one process: vector add (2^28 fp32), fused softmax (fp32, N in 256..16384), layer norm
forward (fp16, N in 1024..8192, M = 4096); then cold compile (fresh process, empty caches) and warm
launch overhead (2000 launches of a tiny kernel). Writes
benchmarks/results/<date>-<gpu>-memory_bound.json and prints a table of GB/s and ratios.

    python benchmarks/memory_bound.py            # needs a CUDA GPU, torch and (for the comparison) triton
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def kernels(jit, tl):
    """The benchmark kernels, written once; `jit`/`tl` are kernellab's or Triton's."""

    @jit
    def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(z_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    @jit
    def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, ROWS: tl.constexpr,
                       BLOCK: tl.constexpr):
        # ROWS rows per program: short rows share a program so each one still moves enough bytes
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        x = tl.load(in_ptr + rows[:, None] * in_stride + cols[None, :], mask=mask, other=-float("inf"))
        z = x - tl.max(x, axis=1)[:, None]
        num = tl.exp(z)
        den = tl.sum(num, axis=1)[:, None]
        tl.store(out_ptr + rows[:, None] * out_stride + cols[None, :], num / den, mask=mask)

    @jit
    def layer_norm_kernel(X, Y, W, B, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * stride + cols, mask=mask, other=0.).to(tl.float32)
        mean = tl.sum(x, axis=0) / N
        xc = tl.where(mask, x - mean, 0.)
        var = tl.sum(xc * xc, axis=0) / N
        rstd = 1 / tl.sqrt(var + eps)
        w = tl.load(W + cols, mask=mask).to(tl.float32)
        b = tl.load(B + cols, mask=mask).to(tl.float32)
        y = xc * rstd * w + b
        tl.store(Y + row * stride + cols, y.to(tl.float16), mask=mask)

    return add_kernel, softmax_kernel, layer_norm_kernel


def bench(fn, warmup=25, rep=200):
    import torch

    fn()
    torch.cuda.synchronize()
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for _ in range(warmup):
        fn()
    for i in range(rep):
        cache.zero_()  # flush L2 so each run reads from HBM
        torch.cuda._sleep(100_000)  # keep the GPU busy while the CPU enqueues: time the kernel, not the launch
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2] * 1e-3


def cdiv(a, b):
    return (a + b - 1) // b


def npow2(n):
    return 1 << (n - 1).bit_length()


def run_rows(kl_k, tr_k):
    import torch

    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)

    def record(name, nbytes, fns, check):
        row = {"case": name, "bytes": nbytes}
        for impl, fn in fns.items():
            if fn is None:
                row[impl] = None
                continue
            try:
                err = check(impl, fn)
                t = bench(fn)
                row[impl] = {"seconds": t, "gbps": nbytes / t / 1e9, "max_err": err}
                compiled = fn() if impl != "torch" else None
                if compiled is not None and getattr(compiled, "n_regs", None) is not None:
                    row[impl]["n_regs"] = compiled.n_regs
                    row[impl]["n_spills"] = getattr(compiled, "n_spills", None)
            except Exception as e:  # a failing implementation is recorded, not fatal
                row[impl] = {"error": f"{type(e).__name__}: {e}"[:300]}
        rows.append(row)
        print(_fmt_row(row), flush=True)

    # vector add
    n = 1 << 28
    x, y = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
    outs = {k: torch.full_like(x, float("nan")) for k in ("kernellab", "triton", "torch")}
    ref = x + y
    grid = (cdiv(n, 1024),)
    fns = {"kernellab": lambda: kl_k[0][grid](x, y, outs["kernellab"], n, BLOCK=1024, num_warps=4),
           "triton": (lambda: tr_k[0][grid](x, y, outs["triton"], n, BLOCK=1024, num_warps=4)) if tr_k else None,
           "torch": lambda: torch.add(x, y, out=outs["torch"])}
    record("vector_add 2^28 fp32", 3 * n * 4, fns, lambda impl, fn: (fn(), (outs[impl] - ref).abs().max().item())[1])

    # softmax
    for N in (256, 1024, 4096, 16384):
        M = (1 << 27) // N
        x = torch.randn(M, N, device="cuda", generator=g)
        outs = {k: torch.full_like(x, float("nan")) for k in ("kernellab", "triton", "torch")}
        ref = torch.softmax(x.double(), dim=1).float()
        block = npow2(N)
        rows_per = max(1, min(16, 4096 // block))
        nw = 4 if block <= 1024 else (8 if block <= 4096 else 16)
        grid = (cdiv(M, rows_per),)
        fns = {"kernellab": lambda: kl_k[1][grid](outs["kernellab"], x, x.stride(0), N, M, N, ROWS=rows_per,
                                                  BLOCK=block, num_warps=nw),
               "triton": (lambda: tr_k[1][grid](outs["triton"], x, x.stride(0), N, M, N, ROWS=rows_per, BLOCK=block,
                                                num_warps=nw)) if tr_k else None,
               "torch": lambda: torch.softmax(x, dim=1)}
        record(f"softmax fp32 M={M} N={N}", 2 * M * N * 4, fns,
               lambda impl, fn: (fn(), (outs[impl] - ref).abs().max().item() if impl != "torch" else
                                 (torch.softmax(x, dim=1) - ref).abs().max().item())[1])

    # layer norm forward
    for N in (1024, 4096, 8192):
        M = 4096
        x = torch.randn(M, N, device="cuda", generator=g).half()
        w = torch.randn(N, device="cuda", generator=g).half()
        b = torch.randn(N, device="cuda", generator=g).half()
        outs = {k: torch.full_like(x, float("nan")) for k in ("kernellab", "triton")}
        ref = torch.nn.functional.layer_norm(x.float(), (N,), w.float(), b.float(), 1e-5)
        block = npow2(N)
        nw = min(max(block // 256, 1), 8)
        fns = {"kernellab": lambda: kl_k[2][(M,)](x, outs["kernellab"], w, b, x.stride(0), N, 1e-5, BLOCK=block,
                                                 num_warps=nw),
               "triton": (lambda: tr_k[2][(M,)](x, outs["triton"], w, b, x.stride(0), N, 1e-5, BLOCK=block,
                                                num_warps=nw)) if tr_k else None,
               "torch": lambda: torch.nn.functional.layer_norm(x, (N,), w, b, 1e-5)}
        record(f"layer_norm fp16 M={M} N={N}", 2 * M * N * 2 + 2 * N * 2, fns,
               lambda impl, fn: (fn(), ((outs[impl].float() - ref).abs().max().item() if impl != "torch" else
                                        (torch.nn.functional.layer_norm(x, (N,), w, b, 1e-5).float() - ref)
                                        .abs().max().item()))[1])
    return rows


def _fmt_row(row):
    def gb(impl):
        r = row.get(impl)
        if not r:
            return "     -"
        if "error" in r:
            return "   ERR"
        return f"{r['gbps']:7.0f}"

    def ratio(a, b):
        ra, rb = row.get(a), row.get(b)
        if ra and rb and "gbps" in ra and "gbps" in rb:
            return f"{ra['gbps'] / rb['gbps']:5.2f}"
        return "    -"

    return (f"{row['case']:<34} {gb('kernellab')} {gb('triton')} {gb('torch')}   "
            f"{ratio('kernellab', 'triton')}  {ratio('kernellab', 'torch')}")


_COLD_SRC = r'''
import sys, time, torch
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
if {which!r} == "kernellab":
    import kernellab as jitmod, kernellab.language as tl
else:
    import triton as jitmod, triton.language as tl
from benchmarks.memory_bound import kernels
k = kernels(jitmod.jit, tl)[1]
x = torch.randn(1024, 1024, device="cuda"); y = torch.empty_like(x)
torch.cuda.synchronize()
t1 = time.perf_counter()
k[(1024,)](y, x, x.stride(0), y.stride(0), 1024, 1024, ROWS=1, BLOCK=1024, num_warps=4)
torch.cuda.synchronize()
t2 = time.perf_counter()
print("COLD", t2 - t1)
'''


def cold_compile(which):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, KERNELLAB_CACHE_DIR=d, TRITON_CACHE_DIR=d)
        out = subprocess.run([sys.executable, "-c", _COLD_SRC.format(root=str(ROOT), which=which)], env=env,
                             capture_output=True, text=True, timeout=300)
        for line in out.stdout.splitlines():
            if line.startswith("COLD"):
                return float(line.split()[1])
        return {"error": (out.stderr or out.stdout)[-500:]}


def warm_launch(k):
    import torch

    x = torch.randn(1024, device="cuda")
    z = torch.empty_like(x)
    for _ in range(10):
        k[(1,)](x, x, z, 1024, BLOCK=1024)
    torch.cuda.synchronize()
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        k[(1,)](x, x, z, 1024, BLOCK=1024)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n


def interleaved(runs: dict, rounds: int = 3, rep: int = 80, timer=None) -> dict:
    """{name: seconds}: the median of `rounds` timings of each run, the runs taking turns within each round. Timed one
    after the other, the first column of a short kernel (8192x8192x1024) read 3-7% slower than the same code timed
    later in the row (H200: identical builds 572 vs 598 TFLOP/s), and attention's knob columns disagreed by 15%
    between two runs; taking turns spreads the drift over every column. `timer(fn, rep=...)` defaults to `bench`."""
    import statistics

    timer = timer or bench
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(timer(run, rep=rep))
    return {name: statistics.median(t) for name, t in times.items()}


def write_results(result: dict, name: str) -> Path:
    """Write `result` (with its date and gpu) to <date>-<gpu>-<name>.json under $KERNELLAB_RESULTS_DIR or
    benchmarks/results/; returns the path. $KERNELLAB_RESULTS_TAG, when set, is added to the name
    (<name>-<tag>): a run of a different kind (an A/B of a knob) beside the day's file instead of over it."""
    out_dir = Path(os.environ.get("KERNELLAB_RESULTS_DIR", ROOT / "benchmarks" / "results"))
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = os.environ.get("KERNELLAB_RESULTS_TAG", "").strip()
    name = f"{name}-{tag}" if tag else name
    path = out_dir / f"{result['date']}-{result['gpu'].replace(' ', '_')}-{name}.json"
    path.write_text(json.dumps(result, indent=2))
    return path


def main():
    import torch

    import kernellab
    import kernellab.language as kltl

    kl_k = kernels(kernellab.jit, kltl)
    try:
        import triton
        import triton.language as trtl

        tr_k = kernels(triton.jit, trtl)
        triton_version = triton.__version__
    except ImportError:
        tr_k, triton_version = None, None
    print(f"{'case':<34} {'kl GB/s':>7} {'triton':>7} {'torch':>7}   kl/tr  kl/torch", flush=True)
    rows = run_rows(kl_k, tr_k)
    overhead = {"kernellab_s": warm_launch(kl_k[0])}
    if tr_k:
        overhead["triton_s"] = warm_launch(tr_k[0])
    cold = {"kernellab_s": cold_compile("kernellab")}
    if tr_k:
        cold["triton_s"] = cold_compile("triton")
    gpu = torch.cuda.get_device_name()
    result = {
        "date": datetime.date.today().isoformat(), "gpu": gpu,
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "triton": triton_version,
                     "kernellab": kernellab.__version__, "cuda": torch.version.cuda},
        "rows": rows, "warm_launch": overhead, "cold_compile_softmax": cold,
    }
    path = write_results(result, "memory_bound")
    print(f"\nwrote {path}")
    print(f"warm launch: kernellab {overhead['kernellab_s'] * 1e6:.1f} us"
          + (f", triton {overhead['triton_s'] * 1e6:.1f} us" if "triton_s" in overhead else ""))
    print(f"cold compile (softmax): kernellab {cold['kernellab_s']}" + (f", triton {cold.get('triton_s')}"))
    print(f"\n{'case':<34} {'kl GB/s':>7} {'triton':>7} {'torch':>7}   kl/tr  kl/torch")
    for row in rows:
        print(_fmt_row(row))


if __name__ == "__main__":
    main()
