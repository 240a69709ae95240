"""Flash attention on the GPU, forward and backward: kernellab vs torch SDPA vs Triton compiling the same kernel text.

fp16, batch 4, 16 heads, head dim 64 and 128, sequence 1024 and 4096, causal and not. Each forward row first
checks kernellab and Triton against torch SDPA computed in float32 (fresh random inputs, output
poisoned with NaN before the launch), then times kernellab, `torch.nn.functional.scaled_dot_product_attention`
(fp16) and Triton. Each backward row runs each compiler's forward (with the log-sum-exp the backward reads), checks
its dq, dk, dv (poisoned with NaN) against float32 autograd through SDPA, then times the three backward launches
(delta, dK/dV, dQ) against `torch.autograd.grad` through fp16 SDPA, and the dK/dV and dQ kernels alone (the
line ends with Triton's time / kernellab's for each: "dkdv 0.95 dq 1.02"). Writes
benchmarks/results/<date>-<gpu>-attention.json and prints TFLOP/s (forward 4·B·H·S²·D, backward 2.5 times that,
halved when causal) and ratios.

    python benchmarks/attention.py       # needs a CUDA GPU, torch and (for the comparison) triton
    python benchmarks/attention.py --hd 128 --seq 4096 --causal 1 --config 128=128,64,8,3   # one row, a config
    python benchmarks/attention.py --mode bwd                                    # the backward rows only
    python benchmarks/attention.py --mode bwd --no-write                         # print, write no JSON
    python benchmarks/attention.py --mode bwd --hd 64 --seq 4096 --bwd-config 64=32,128,128,32,4,3 \
        --bwd-config 64=32,128,128,32,4,4                                         # backward configs side by side
    python benchmarks/attention.py --mode fwd --warp-specialize                  # the descriptor text, both ways
    python benchmarks/attention.py --mode fwd --hd 128 --warp-specialize --overlap   # + softmax under p·v (A/B)
    python benchmarks/attention.py --mode fwd --hd 128 --warp-specialize --pingpong  # + only warpgroup 0 polls (A/B)
    python benchmarks/attention.py --mode fwd --warp-specialize --also-env KERNELLAB_REDUCE_TREE=1 \
        --also-env KERNELLAB_ATTN_PINGPONG=1,KERNELLAB_REDUCE_TREE=1            # any codegen knobs, one column each
    python benchmarks/attention.py --mode fwd --variants gqa fp8                # + block-pointer text: GQA, e4m3

With --warp-specialize the forward rows time `make_attention_desc_kernel`'s text instead (tiles through in-kernel
tensor descriptors, so TMA fills the K/V stages): kernellab with the key loop warp-specialized (`WS=True`: a
producer warpgroup issues the copies) and without (column "kl no-ws"), Triton with WS=True (the same text), and
SDPA; the JSON is written as <date>-<gpu>-attention_ws.json. --overlap adds a column "kl overlap": the specialized
text compiled with KERNELLAB_ATTN_OVERLAP=1 (passes/overlap_softmax.py: the softmax under the warpgroup's own p·v),
timed in the same run, and its ratio to the "kernellab" column (compiled as the environment says: off by default).
--pingpong adds a column "kl pingpong" compiled with KERNELLAB_ATTN_PINGPONG=1 (passes/pingpong.py: the turns tell
warpgroup 1 that a stage has landed, only warpgroup 0 polls its mbarrier, as FlashAttention-3), and with --overlap
also "kl ov+pp" (both knobs), each with its ratio to the "kernellab" column. --also-env KEY=VAL[,KEY=VAL...] (given
several times) adds one such column per spec, compiled with those environment variables (the cache keys on them).
With --variants, each forward row is followed by rows of
`make_attention_bp_kernel`'s text (block pointers, `acc +=`): "gqa" (query heads over a quarter as many key/value
heads, against SDPA with enable_gqa) and "fp8" (e4m3 inputs, V stored transposed, against fp16 SDPA of the same
shape: torch has no fp8 attention). The JSON quotes published FlashAttention-3/4 figures (`reference_lines`, not
measured) and the table ends with them.

The kernel text is `benchmarks/attention_kernel.py`; both compilers get the same config
(forward: BLOCK_M, BLOCK_N, num_warps, num_stages; backward: BWD_CONFIGS).
"""
from __future__ import annotations

import argparse
import datetime
import functools
import math
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention_kernel import (  # noqa: E402
    attention,
    attention_backward,
    attention_bp,
    attention_desc,
    make_attention_bp_kernel,
    make_attention_bwd_kernels,
    make_attention_desc_kernel,
    make_attention_kernel,
)
from benchmarks.memory_bound import bench, interleaved, write_results  # noqa: E402

BATCH, HEADS = 4, 16
HEAD_DIMS = (64, 128)
SEQS = (1024, 4096)
# per head dim: BLOCK_M, BLOCK_N, num_warps, num_stages (the same for kernellab and Triton). Measured on the H200
# (benchmarks/NOTES.md, attention steps 11 and 13): hd64 runs fastest at 128x64 with 4 warps in both compilers;
# at hd128, 128x128 with 8 warps and 3 stages is Triton's best config (equal to or faster than 128x64) and ours.
CONFIGS = {64: dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3),
           128: dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)}
# backward, per head dim: dK/dV programs own BLOCK_N1 keys and walk BLOCK_M1 queries at a time, dQ programs own
# BLOCK_M2 queries and walk BLOCK_N2 keys (Triton's tutorial 06 blocks). At hd128 two 128x128 fp32 accumulators
# (dK, dV) fill 256 registers per thread with 4 warps, so 8 warps there.
BWD_CONFIGS = {64: dict(BLOCK_M1=32, BLOCK_N1=128, BLOCK_M2=128, BLOCK_N2=32, num_warps=4, num_stages=3),
               128: dict(BLOCK_M1=32, BLOCK_N1=128, BLOCK_M2=128, BLOCK_N2=32, num_warps=8, num_stages=3)}
GQA_GROUP = 4  # the --variants gqa rows: HEADS query heads over HEADS / GQA_GROUP key/value heads
# max |out - ref| for e4m3 inputs: p is rounded to e4m3 (3 mantissa bits, relative step 2^-3) before the second dot,
# as FA3's fp8 path does; both compilers erred up to 0.061 at hd64 s1024 causal on the H200 (norm-relative 0.019)
FP8_TOL = 0.125
# Published forward figures, quoted (not measured here) so the rows have the field's best beside them.
REFERENCE_LINES = [
    {"name": "FlashAttention-3 fp16, hd128, H100 SXM5", "tflops": 640, "dtype": "float16", "head_dim": 128,
     "source": "Shah et al., FlashAttention-3 (arXiv 2407.08608), forward without causal mask, seq 8k-16k; "
               "up to 740 TFLOP/s at hd256"},
    {"name": "FlashAttention-3 fp8, H100 SXM5", "tflops": 1200, "dtype": "float8_e4m3fn", "head_dim": 256,
     "source": "Shah et al., FlashAttention-3 (arXiv 2407.08608): 'close to 1.2 PFLOPs/s'"},
    {"name": "FlashAttention-4 / cuDNN fp16-bf16, H200, GQA, seq 4k-8k", "tflops": 756, "dtype": "bfloat16",
     "head_dim": 128, "source": "figures quoted in issue 15 (700-756 TFLOP/s)"},
]
TOL = 2e-2  # max |out - ref| for fp16 attention outputs (|ref| <= max |v|), against float32 SDPA
BWD_TOL = 1e-2  # per gradient: ||g - ref|| / ||ref|| (and max |g - ref| <= 5 * BWD_TOL * max |ref|)


def attention_flops(Z, H, S, D, causal):
    flops = 4 * Z * H * S * S * D  # q k^T and p v: 2 * S * S * D each
    return flops // 2 if causal else flops


def run_row(impls, Z, H, S, D, causal, device="cuda", timer=bench, seed=0, cfg=None):
    """Check every implementation against float32 SDPA, then time it; returns the row dict.

    `impls` maps a name to (jit module, kernel[, launcher like `attention`]); torch SDPA is always timed. A failing
    implementation is recorded as {"error": ...}, not raised. `cfg` defaults to CONFIGS[D]."""
    import torch
    import torch.nn.functional as F

    cfg = cfg or CONFIGS[D]
    g = torch.Generator(device=device).manual_seed(seed + 7 * S + D + int(causal))
    q, k, v = (torch.randn(Z, H, S, D, device=device, generator=g, dtype=torch.float32).half() for _ in range(3))
    sm_scale = 1.0 / math.sqrt(D)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=sm_scale)
    flops = attention_flops(Z, H, S, D, causal)
    row = {"case": f"hd{D} s{S} {'causal' if causal else 'full'}", "mode": "fwd", "batch": Z, "heads": H, "seq": S,
           "head_dim": D, "causal": causal, "flops": flops, "config": cfg}
    runs = {}
    for name, (mod, kernel, *launcher) in impls.items():
        launch = launcher[0] if launcher else attention
        out = torch.full_like(q, float("nan"))
        try:
            _, compiled = launch(q, k, v, causal, sm_scale, mod, kernel, out=out, **cfg)
            if device == "cuda":
                torch.cuda.synchronize()
            err = (out.float() - ref).abs().max().item()  # NaN when an element was never written
            rel = ((out.float() - ref).norm() / ref.norm()).item()
            ok = bool(math.isfinite(err) and err <= TOL)
            runs[name] = functools.partial(launch, q, k, v, causal, sm_scale, mod, kernel, out=out, **cfg)
            row[name] = {"max_err": err, "rel_err": rel, "ok": ok,
                         "n_regs": getattr(compiled, "n_regs", None), "n_spills": getattr(compiled, "n_spills", None)}
        except Exception as e:  # a failing implementation is recorded, not fatal
            row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
    row["torch"] = {"max_err": (out.float() - ref).abs().max().item()}
    runs["torch"] = functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal, scale=sm_scale)
    # the columns (knob A/Bs among them) take turns, so a clock change mid-row falls on all of them
    times = interleaved(runs, rounds=3, rep=70) if timer is bench else {n: timer(r) for n, r in runs.items()}
    for name, t in times.items():
        row[name].update(seconds=t, tflops=flops / t / 1e12)
    return row


def run_variant_row(impls, variant, Z, H, S, D, causal, device="cuda", timer=bench, seed=0, cfg=None):
    """A forward row of `make_attention_bp_kernel`'s text (`impls`: name -> (jit module, kernel)): variant "gqa"
    (H query heads over H / GQA_GROUP key/value heads; torch: SDPA with enable_gqa) or "fp8" (e4m3 q, k and v, v
    stored transposed, fp16 out; torch has no fp8 attention, so its column is fp16 SDPA of the same shape). Checked
    against float32 SDPA of the same (dequantized) inputs, output poisoned with NaN."""
    import torch
    import torch.nn.functional as F

    cfg = cfg or CONFIGS[D]
    g = torch.Generator(device=device).manual_seed(seed + 11 * S + D + int(causal) + (2 if variant == "fp8" else 3))
    h_kv = H // GQA_GROUP if variant == "gqa" else H
    q = torch.randn(Z, H, S, D, device=device, generator=g).half()
    k, v = (torch.randn(Z, h_kv, S, D, device=device, generator=g).half() for _ in range(2))
    sm_scale = 1.0 / math.sqrt(D)
    if variant == "fp8":
        q, k, v = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    kf, vf = (t.float().repeat_interleave(H // h_kv, dim=1) for t in (k, v))
    ref = F.scaled_dot_product_attention(q.float(), kf, vf, is_causal=causal, scale=sm_scale)
    del kf, vf
    vt = v.transpose(-1, -2).contiguous() if variant == "fp8" else v
    flops = attention_flops(Z, H, S, D, causal)
    row = {"case": f"{variant} hd{D} s{S} {'causal' if causal else 'full'}", "mode": "fwd", "variant": variant,
           "batch": Z, "heads": H, "kv_heads": h_kv, "seq": S, "head_dim": D, "causal": causal, "flops": flops,
           "config": cfg, "dtype": "float8_e4m3fn" if variant == "fp8" else "float16",
           "torch_column": "fp16 SDPA, same shape" if variant == "fp8" else "SDPA enable_gqa=True"}
    tol = FP8_TOL if variant == "fp8" else TOL
    for name, (mod, kernel) in impls.items():
        out = torch.full(q.shape, float("nan"), device=device, dtype=torch.float16)
        launch = functools.partial(attention_bp, q, k, vt, causal, sm_scale, mod, kernel, out=out,
                                   v_transposed=variant == "fp8", **cfg)
        try:
            _, compiled = launch()
            if device == "cuda":
                torch.cuda.synchronize()
            err = (out.float() - ref).abs().max().item()
            rel = ((out.float() - ref).norm() / ref.norm()).item()
            ok = bool(math.isfinite(err) and err <= tol)
            t = timer(launch)
            row[name] = {"seconds": t, "tflops": flops / t / 1e12, "max_err": err, "rel_err": rel, "ok": ok,
                         "n_regs": getattr(compiled, "n_regs", None), "n_spills": getattr(compiled, "n_spills", None)}
        except Exception as e:  # a failing implementation is recorded, not fatal
            row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
    if device == "cuda":
        tq, tk, tv = (t.half() for t in (q, k, v))
        gqa = {"enable_gqa": True} if h_kv != H else {}
        t = timer(lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, scale=sm_scale, **gqa))
        row["torch"] = {"seconds": t, "tflops": flops / t / 1e12}
    return row


def attention_bwd_flops(Z, H, S, D, causal):
    """Five S x S x D products (s, dp, dv, dk, dq) against the forward's two: 2.5 times its FLOPs (the tutorial's
    count; the dQ kernel recomputes s and dp, which is not counted)."""
    return attention_flops(Z, H, S, D, causal) * 5 // 2


def run_bwd_row(impls, Z, H, S, D, causal, device="cuda", timer=bench, seed=0, cfg=None, fwd_cfg=None):
    """The backward row: each implementation's forward (output and lse), then its backward checked against float32
    autograd through SDPA and timed; torch's SDPA backward timed beside. `impls` maps a name to (jit module,
    forward kernel, backward kernels). A failing implementation is recorded as {"error": ...}, not raised."""
    import torch
    import torch.nn.functional as F

    cfg = cfg or BWD_CONFIGS[D]
    fwd_cfg = fwd_cfg or CONFIGS[D]
    g = torch.Generator(device=device).manual_seed(seed + 7 * S + D + int(causal) + 1)
    q, k, v, do = (torch.randn(Z, H, S, D, device=device, generator=g, dtype=torch.float32).half() for _ in range(4))
    sm_scale = 1.0 / math.sqrt(D)
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    refs = torch.autograd.grad(F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=sm_scale),
                               (qf, kf, vf), do.float())
    del qf, kf, vf
    flops = attention_bwd_flops(Z, H, S, D, causal)
    row = {"case": f"hd{D} s{S} {'causal' if causal else 'full'} bwd", "mode": "bwd", "batch": Z, "heads": H,
           "seq": S, "head_dim": D, "causal": causal, "flops": flops, "config": cfg, "fwd_config": fwd_cfg}
    for name, (mod, fwd, bwd) in impls.items():
        try:
            o = torch.empty_like(q)
            lse = torch.empty(q.shape[:3], device=device, dtype=torch.float32)
            attention(q, k, v, causal, sm_scale, mod, fwd, out=o, lse=lse, **fwd_cfg)
            grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
            delta = torch.empty_like(lse)
            _, _, _, launched = attention_backward(q, k, v, o, do, lse, causal, sm_scale, mod, bwd, dq=grads[0],
                                                   dk=grads[1], dv=grads[2], delta=delta, **cfg)
            if device == "cuda":
                torch.cuda.synchronize()
            errs, rels = [], []
            for got, ref in zip(grads, refs):
                errs.append((got.float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30))
                rels.append(((got.float() - ref).norm() / ref.norm()).item())
            ok = all(math.isfinite(e) and e <= 5 * BWD_TOL for e in errs) and all(r <= BWD_TOL for r in rels)
            t = timer(lambda: attention_backward(q, k, v, o, do, lse, causal, sm_scale, mod, bwd, dq=grads[0],
                                                 dk=grads[1], dv=grads[2], delta=delta, **cfg))
            kv, dq = launched[1], launched[2]
            # each of the two big kernels alone (delta from the launches above), to see which one a gap is in
            alone = [timer(lambda part=part: attention_backward(q, k, v, o, do, lse, causal, sm_scale, mod, bwd,
                                                                 dq=grads[0], dk=grads[1], dv=grads[2], delta=delta,
                                                                 launch=(part,), **cfg))
                     for part in ("dkdv", "dq")]
            row[name] = {"seconds": t, "tflops": flops / t / 1e12, "max_err": max(errs), "rel_err": max(rels),
                         "ok": ok, "n_regs": [getattr(x, "n_regs", None) for x in (kv, dq)],
                         "n_spills": [getattr(x, "n_spills", None) for x in (kv, dq)],
                         "seconds_dkdv_dq": alone}
        except Exception as e:  # a failing implementation is recorded, not fatal
            row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
    qt, kt, vt = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=sm_scale)
    got = torch.autograd.grad(out, (qt, kt, vt), do, retain_graph=True)
    t = timer(lambda: torch.autograd.grad(out, (qt, kt, vt), do, retain_graph=True))
    row["torch"] = {"seconds": t, "tflops": flops / t / 1e12,
                    "rel_err": max(((a.float() - r).norm() / r.norm()).item() for a, r in zip(got, refs))}
    return row


def _parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hd", type=int, nargs="+", default=list(HEAD_DIMS), help="head dims (default 64 128)")
    p.add_argument("--seq", type=int, nargs="+", default=list(SEQS), help="sequence lengths (default 1024 4096)")
    p.add_argument("--causal", type=int, nargs="+", default=[0, 1], choices=[0, 1], help="0: full, 1: causal")
    p.add_argument("--config", action="append", default=[], metavar="HD=BM,BN,WARPS,STAGES",
                   help="override the launch config of one head dim, e.g. 128=128,64,8,3")
    p.add_argument("--mode", nargs="+", default=["fwd", "bwd"], choices=["fwd", "bwd"],
                   help="forward rows, backward rows or both (default both)")
    p.add_argument("--no-write", action="store_true", help="print the table only, write no results JSON")
    p.add_argument("--variants", nargs="*", default=[], choices=["gqa", "fp8"],
                   help="forward rows of the block-pointer text too: grouped-query (HEADS / 4 kv heads) and e4m3")
    p.add_argument("--warp-specialize", action="store_true",
                   help="forward rows: the descriptor text, kernellab with and without warp specialization")
    p.add_argument("--overlap", action="store_true",
                   help="with --warp-specialize: a column compiled with KERNELLAB_ATTN_OVERLAP=1 (an A/B in one run)")
    p.add_argument("--pingpong", action="store_true",
                   help="with --warp-specialize: a column compiled with KERNELLAB_ATTN_PINGPONG=1 (with --overlap, "
                        "also one with both knobs)")
    p.add_argument("--also-env", action="append", default=[], metavar="KEY=VAL[,KEY=VAL]",
                   help="with --warp-specialize: a column compiled with these environment variables set (repeatable)")
    p.add_argument("--bwd-config", action="append", default=[], metavar="HD=BM1,BN1,BM2,BN2,WARPS,STAGES",
                   help="the backward config of one head dim, e.g. 64=32,128,128,32,4,3; given several times for "
                        "one head dim, each config gets its rows (a sweep)")
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
    sweep = {}  # head dim -> backward configs given on the command line (each gets its rows)
    for spec in args.bwd_config:
        hd, vals = spec.split("=")
        keys = ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "num_warps", "num_stages")
        sweep.setdefault(int(hd), []).append(dict(zip(keys, (int(x) for x in vals.split(",")))))
    for hd, cfgs in sweep.items():
        BWD_CONFIGS[hd] = cfgs[0]

    impls = {"kernellab": (kernellab, make_attention_kernel(kernellab, kltl))}
    ws_impls = None
    if args.warp_specialize:
        desc = make_attention_desc_kernel(kernellab, kltl)
        ws_impls = {"kernellab": (kernellab, desc, functools.partial(attention_desc, warp_specialize=True)),
                    "kernellab_nows": (kernellab, desc, attention_desc),
                    # the loop left unmarked (WS=None): kernellab's own choice (passes/warp_specialize.py's default)
                    "kernellab_default": (kernellab, desc, functools.partial(attention_desc, warp_specialize=None))}
        if args.overlap:  # its own kernel object: the compile cache in memory is not keyed by the environment
            ws_impls["kernellab_overlap"] = (kernellab, make_attention_desc_kernel(kernellab, kltl),
                                             compiled_with(functools.partial(attention_desc, warp_specialize=True),
                                                           KERNELLAB_ATTN_OVERLAP="1"))
        if args.pingpong:
            ws_impls["kernellab_pingpong"] = (kernellab, make_attention_desc_kernel(kernellab, kltl),
                                              compiled_with(functools.partial(attention_desc, warp_specialize=True),
                                                            KERNELLAB_ATTN_PINGPONG="1"))
            if args.overlap:
                ws_impls["kernellab_overlap_pingpong"] = (
                    kernellab, make_attention_desc_kernel(kernellab, kltl),
                    compiled_with(functools.partial(attention_desc, warp_specialize=True), KERNELLAB_ATTN_OVERLAP="1",
                                  KERNELLAB_ATTN_PINGPONG="1"))
        for spec in args.also_env:  # one column per spec, its own kernel object (the in-memory cache ignores env)
            ws_impls[f"kernellab_env:{spec}"] = (kernellab, make_attention_desc_kernel(kernellab, kltl),
                                                 compiled_with(functools.partial(attention_desc, warp_specialize=True),
                                                               **env_spec(spec)))
    bwd_impls = {"kernellab": (kernellab, impls["kernellab"][1], make_attention_bwd_kernels(kernellab, kltl))}
    bp_impls = {"kernellab": (kernellab, make_attention_bp_kernel(kernellab, kltl))}
    triton_skipped = None
    try:
        import triton
        import triton.language as trtl

        impls["triton"] = (triton, make_attention_kernel(triton, trtl))
        if ws_impls is not None:
            ws_impls["triton"] = (triton, make_attention_desc_kernel(triton, trtl),
                                  functools.partial(attention_desc, warp_specialize=True))
        bwd_impls["triton"] = (triton, impls["triton"][1], make_attention_bwd_kernels(triton, trtl))
        bp_impls["triton"] = (triton, make_attention_bp_kernel(triton, trtl))
        triton_version = triton.__version__
    except ImportError as e:
        triton_version, triton_skipped = None, f"triton is not importable ({e})"
        print(f"skipping the Triton column: {triton_skipped}", flush=True)
    rows = []
    print(_header(), flush=True)
    for mode in args.mode:
        for D in args.hd:
            for S in args.seq:
                for causal in args.causal:
                    if mode == "fwd":
                        found = [run_row(ws_impls or impls, BATCH, HEADS, S, D, bool(causal))]
                        found += [run_variant_row(bp_impls, variant, BATCH, HEADS, S, D, bool(causal))
                                  for variant in args.variants]
                    else:
                        found = [run_bwd_row(bwd_impls, BATCH, HEADS, S, D, bool(causal), cfg=cfg)
                                 for cfg in sweep.get(D, [BWD_CONFIGS[D]])]
                    for row in found:
                        rows.append(row)
                        print(_fmt(row), flush=True)
    gpu = torch.cuda.get_device_name()
    result = {"date": datetime.date.today().isoformat(), "gpu": gpu, "batch": BATCH, "heads": HEADS,
              "dtype": "float16", "configs": {str(k): v for k, v in CONFIGS.items()}, "tolerance": TOL,
              "bwd_configs": {str(k): v for k, v in BWD_CONFIGS.items()}, "bwd_tolerance": BWD_TOL, "modes": args.mode,
              "versions": {"python": platform.python_version(), "torch": torch.__version__,
                           "triton": triton_version, "kernellab": kernellab.__version__, "cuda": torch.version.cuda},
              "triton_skipped": triton_skipped, "warp_specialize": args.warp_specialize, "variants": args.variants,
              "attn_overlap": os.environ.get("KERNELLAB_ATTN_OVERLAP", "0"), "overlap_column": args.overlap,
              "attn_pingpong": os.environ.get("KERNELLAB_ATTN_PINGPONG", "0"), "pingpong_column": args.pingpong,
              "also_env": args.also_env,
              "gqa_group": GQA_GROUP, "fp8_tolerance": FP8_TOL, "reference_lines": REFERENCE_LINES, "rows": rows}
    if not args.no_write:
        if not args.warp_specialize:
            _keep_other_modes(result, gpu)
        path = write_results(result, "attention_ws" if args.warp_specialize else "attention")
        print(f"\nwrote {path}")
    for row in rows:
        for name in [k for k in row if k.startswith("kernellab")] + ["triton"]:
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
    for ref in REFERENCE_LINES:  # quoted, not measured
        print(f"reference (quoted): {ref['name']}: {ref['tflops']} TFLOP/s")
    return result


def _keep_other_modes(result, gpu):
    """A run of one mode (`--mode bwd`) keeps the other mode's rows of today's JSON, marked as from an earlier run
    (their ratios were measured in that run), instead of overwriting them."""
    import json

    out_dir = Path(os.environ.get("KERNELLAB_RESULTS_DIR", ROOT / "benchmarks" / "results"))
    path = out_dir / f"{result['date']}-{gpu.replace(' ', '_')}-attention.json"
    if set(result["modes"]) == {"fwd", "bwd"} or not path.exists():
        return
    try:
        old = json.loads(path.read_text())
    except ValueError:
        return
    kept = [dict(r, earlier_run=True) for r in old.get("rows", []) if r.get("mode", "fwd") not in result["modes"]]
    result["rows"] = kept + result["rows"]


def env_spec(spec: str) -> dict:
    """`KEY=VAL[,KEY=VAL]` (--also-env) as a dict."""
    out = {}
    for part in spec.split(","):
        key, sep, val = part.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--also-env wants KEY=VAL[,KEY=VAL], got {spec!r}")
        out[key.strip()] = val.strip()
    return out


def compiled_with(launch, **env):
    """`launch` whose first call (the one that compiles) runs with the environment variables `env` set; later calls
    (the timed ones) do not touch the environment."""
    first = [True]

    def run(*args, **kwargs):
        if not first[0]:
            return launch(*args, **kwargs)
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return launch(*args, **kwargs)
        finally:
            first[0] = False
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    return run


def _header():
    return f"{'case':<24} {'kl TF/s':>8} {'triton':>8} {'torch':>8}  kl/torch kl/triton"


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

    cfg = ""
    if row.get("mode") == "bwd":
        c = row["config"]
        cfg = "  " + ",".join(str(c.get(k, "-")) for k in ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "num_warps",
                                                  "num_stages"))
        kl, tr = row.get("kernellab") or {}, row.get("triton") or {}
        if "seconds_dkdv_dq" in kl and "seconds_dkdv_dq" in tr:  # Triton's time / ours, per kernel
            cfg += "  dkdv {:.2f} dq {:.2f}".format(*(b / a for a, b in zip(kl["seconds_dkdv_dq"],
                                                                            tr["seconds_dkdv_dq"])))
    if "kernellab_nows" in row:  # --warp-specialize: the same text unspecialized, and the ratio to it
        cfg += f"  kl no-ws {tf('kernellab_nows')} ws/no-ws {ratio('kernellab', 'kernellab_nows')}"
    if "kernellab_default" in row:  # unmarked: specialized or not by kernellab's default
        cfg += f"  kl unmarked {tf('kernellab_default')} unmarked/no-ws {ratio('kernellab_default', 'kernellab_nows')}"
    if "kernellab_overlap" in row:  # --overlap: KERNELLAB_ATTN_OVERLAP=1, against the specialized column
        cfg += (f"  kl overlap {tf('kernellab_overlap')} overlap/ws {ratio('kernellab_overlap', 'kernellab')} "
                f"overlap/torch {ratio('kernellab_overlap', 'torch')}")
    if "kernellab_pingpong" in row:  # --pingpong: KERNELLAB_ATTN_PINGPONG=1, against the specialized column
        cfg += (f"  kl pingpong {tf('kernellab_pingpong')} pingpong/ws {ratio('kernellab_pingpong', 'kernellab')} "
                f"pingpong/torch {ratio('kernellab_pingpong', 'torch')}")
    if "kernellab_overlap_pingpong" in row:  # --pingpong --overlap: both knobs
        cfg += (f"  kl ov+pp {tf('kernellab_overlap_pingpong')} "
                f"ov+pp/ws {ratio('kernellab_overlap_pingpong', 'kernellab')} "
                f"ov+pp/torch {ratio('kernellab_overlap_pingpong', 'torch')}")
    for name in [k for k in row if k.startswith("kernellab_env:")]:  # --also-env columns
        cfg += f"  [{name.split(':', 1)[1]}] {tf(name)} /ws {ratio(name, 'kernellab')} /torch {ratio(name, 'torch')}"
    return f"{row['case']:<24} {tf('kernellab')} {tf('triton')} {tf('torch')}  {ratio('kernellab', 'torch')} " \
           f"{ratio('kernellab', 'triton')}{cfg}"


if __name__ == "__main__":
    main()
