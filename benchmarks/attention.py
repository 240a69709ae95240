"""Flash-attention forward on the GPU: kernellab vs torch SDPA vs Triton compiling the same kernel text.

fp16, batch 4, 16 heads, head dim 64 and 128, sequence 1024 and 4096, causal and not. Each row first
checks kernellab and Triton against torch SDPA computed in float32 (fresh random inputs, output
poisoned with NaN before the launch), then times kernellab, `torch.nn.functional.scaled_dot_product_attention`
(fp16) and Triton. Writes benchmarks/results/<date>-<gpu>-attention.json and prints TFLOP/s
(4·B·H·S²·D, halved when causal) and ratios.

    python benchmarks/attention.py       # needs a CUDA GPU, torch and (for the comparison) triton
    python benchmarks/attention.py --hd 128 --seq 4096 --causal 1 --config 128=128,64,8,3   # one row, a config

The kernel text is `benchmarks/attention_kernel.py`; both compilers get the same config
(BLOCK_M, BLOCK_N, num_warps, num_stages).
"""
from __future__ import annotations

import argparse
import datetime
import math
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention_kernel import attention, make_attention_kernel  # noqa: E402
from benchmarks.memory_bound import bench, write_results  # noqa: E402

BATCH, HEADS = 4, 16
HEAD_DIMS = (64, 128)
SEQS = (1024, 4096)
# per head dim: BLOCK_M, BLOCK_N, num_warps, num_stages (the same for kernellab and Triton). Measured on the H200
# (benchmarks/NOTES.md, attention steps 11 and 13): hd64 runs fastest at 128x64 with 4 warps in both compilers;
# at hd128, 128x128 with 8 warps and 3 stages is Triton's best config (equal to or faster than 128x64) and ours.
CONFIGS = {64: dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3),
           128: dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)}
TOL = 2e-2  # max |out - ref| for fp16 attention outputs (|ref| <= max |v|), against float32 SDPA


def attention_flops(Z, H, S, D, causal):
    flops = 4 * Z * H * S * S * D  # q k^T and p v: 2 * S * S * D each
    return flops // 2 if causal else flops


def run_row(impls, Z, H, S, D, causal, device="cuda", timer=bench, seed=0, cfg=None):
    """Check every implementation against float32 SDPA, then time it; returns the row dict.

    `impls` maps a name to (jit module, kernel); torch SDPA is always timed. A failing
    implementation is recorded as {"error": ...}, not raised. `cfg` defaults to CONFIGS[D]."""
    import torch
    import torch.nn.functional as F

    cfg = cfg or CONFIGS[D]
    g = torch.Generator(device=device).manual_seed(seed + 7 * S + D + int(causal))
    q, k, v = (torch.randn(Z, H, S, D, device=device, generator=g, dtype=torch.float32).half() for _ in range(3))
    sm_scale = 1.0 / math.sqrt(D)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=sm_scale)
    flops = attention_flops(Z, H, S, D, causal)
    row = {"case": f"hd{D} s{S} {'causal' if causal else 'full'}", "batch": Z, "heads": H, "seq": S,
           "head_dim": D, "causal": causal, "flops": flops, "config": cfg}
    for name, (mod, kernel) in impls.items():
        out = torch.full_like(q, float("nan"))
        try:
            _, compiled = attention(q, k, v, causal, sm_scale, mod, kernel, out=out, **cfg)
            if device == "cuda":
                torch.cuda.synchronize()
            err = (out.float() - ref).abs().max().item()  # NaN when an element was never written
            rel = ((out.float() - ref).norm() / ref.norm()).item()
            ok = bool(math.isfinite(err) and err <= TOL)
            t = timer(lambda: attention(q, k, v, causal, sm_scale, mod, kernel, out=out, **cfg))
            row[name] = {"seconds": t, "tflops": flops / t / 1e12, "max_err": err, "rel_err": rel, "ok": ok,
                         "n_regs": getattr(compiled, "n_regs", None), "n_spills": getattr(compiled, "n_spills", None)}
        except Exception as e:  # a failing implementation is recorded, not fatal
            row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
    t = timer(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale))
    row["torch"] = {"seconds": t, "tflops": flops / t / 1e12, "max_err": (out.float() - ref).abs().max().item()}
    return row


def _parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hd", type=int, nargs="+", default=list(HEAD_DIMS), help="head dims (default 64 128)")
    p.add_argument("--seq", type=int, nargs="+", default=list(SEQS), help="sequence lengths (default 1024 4096)")
    p.add_argument("--causal", type=int, nargs="+", default=[0, 1], choices=[0, 1], help="0: full, 1: causal")
    p.add_argument("--config", action="append", default=[], metavar="HD=BM,BN,WARPS,STAGES",
                   help="override the launch config of one head dim, e.g. 128=128,64,8,3")
    return p.parse_args(argv)


def main(argv=None):
    import torch

    import kernellab
    import kernellab.language as kltl

    args = _parse_args(argv)
    for spec in args.config:
        hd, vals = spec.split("=")
        bm, bn, w, s = (int(x) for x in vals.split(","))
        CONFIGS[int(hd)] = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)

    impls = {"kernellab": (kernellab, make_attention_kernel(kernellab, kltl))}
    triton_skipped = None
    try:
        import triton
        import triton.language as trtl

        impls["triton"] = (triton, make_attention_kernel(triton, trtl))
        triton_version = triton.__version__
    except ImportError as e:
        triton_version, triton_skipped = None, f"triton is not importable ({e})"
        print(f"skipping the Triton column: {triton_skipped}", flush=True)
    rows = []
    print(_header(), flush=True)
    for D in args.hd:
        for S in args.seq:
            for causal in args.causal:
                row = run_row(impls, BATCH, HEADS, S, D, bool(causal))
                rows.append(row)
                print(_fmt(row), flush=True)
    gpu = torch.cuda.get_device_name()
    result = {"date": datetime.date.today().isoformat(), "gpu": gpu, "batch": BATCH, "heads": HEADS,
              "dtype": "float16", "configs": {str(k): v for k, v in CONFIGS.items()}, "tolerance": TOL,
              "versions": {"python": platform.python_version(), "torch": torch.__version__,
                           "triton": triton_version, "kernellab": kernellab.__version__, "cuda": torch.version.cuda},
              "triton_skipped": triton_skipped, "rows": rows}
    path = write_results(result, "attention")
    print(f"\nwrote {path}")
    for row in rows:
        for name in ("kernellab", "triton"):
            r = row.get(name)
            if r and "error" in r:
                print(f"{row['case']} {name}: {r['error']}")
            elif r and not r["ok"]:
                print(f"{row['case']} {name}: WRONG max_err={r['max_err']:.3g} rel_err={r['rel_err']:.3g}")
    if triton_skipped:
        print(f"Triton column skipped: {triton_skipped}")
    print(_header())
    for row in rows:
        print(_fmt(row))
    return result


def _header():
    return f"{'case':<20} {'kl TF/s':>8} {'triton':>8} {'torch':>8}  kl/torch kl/triton"


def _fmt(row):
    def tf(name):
        r = row.get(name)
        if not r:
            return "       -"
        if "error" in r:
            return "     ERR"
        return f"{r['tflops']:8.1f}" if r.get("ok", True) else "   WRONG"

    def ratio(a, b):
        ra, rb = row.get(a), row.get(b)
        if ra and rb and "tflops" in ra and "tflops" in rb and ra.get("ok", True) and rb.get("ok", True):
            return f"{ra['tflops'] / rb['tflops']:8.2f}"
        return "       -"

    return f"{row['case']:<20} {tf('kernellab')} {tf('triton')} {tf('torch')}  {ratio('kernellab', 'torch')} " \
           f"{ratio('kernellab', 'triton')}"


if __name__ == "__main__":
    main()
