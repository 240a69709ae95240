"""Triton's tutorial 09 (persistent matmul), its file unchanged, timed with kernellab (through kernellab.compat)
and with Triton, at fixed configs instead of the tutorial's autotuning (so both compile the same specializations).

    python benchmarks/tools/tutorial09_matmul.py --tutorial <triton>/python/tutorials/09-persistent-matmul.py

Each compiler runs in its own child process (compat serves `import triton`, so they cannot share one). A child
loads the tutorial as a module, launches each kernel's `.fn` (the function under `@autotune`) at every config
in CONFIGS for M = N = 8192 and each K in --k (fp16, B given [N, K] as the tutorial passes it), checks the result
against torch in float32 (outputs poisoned with NaN), and times it: the median of 7 CUDA-event rounds of 20
launches after 0.2 s of warm-up. The Triton child times torch.matmul (cuBLAS) too. Prints one table,
kernellab's TFLOP/s over Triton's per kernel and config; needs a CUDA GPU and, for the Triton side, Triton.
Used for the tutorial-09 rows of benchmarks/NOTES.md (session of 2026-11-26, fourth).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 4), (128, 256, 128, 2, 8)]  # BM, BN, BK, stages, warps


def _timeit(fn, reps=20, rounds=7):
    import torch

    fn()
    torch.cuda.synchronize()
    t0 = time.time()
    while time.time() - t0 < 0.2:
        fn()
    out = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) / reps)
    return sorted(out)[len(out) // 2]


def _runs(t, triton, TensorDescriptor, a, b, c, K, cfg, num_sms):
    """The tutorial's kernels at one config, as (name, launch) pairs."""
    BM, BN, BK, S, W = cfg
    M, N = a.shape[0], b.shape[0]
    bT = b.T
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    g1, gp = (tiles,), (min(num_sms, tiles),)
    common = dict(BLOCK_SIZE_M=BM, BLOCK_SIZE_N=BN, BLOCK_SIZE_K=BK, GROUP_SIZE_M=8, num_stages=S, num_warps=W)
    strides = (a.stride(0), a.stride(1), bT.stride(0), bT.stride(1), c.stride(0), c.stride(1))
    runs = {
        "naive": lambda: t.matmul_kernel.fn[g1](a, bT, c, M, N, K, *strides, **common),
        "persistent": lambda: t.matmul_kernel_persistent.fn[gp](a, bT, c, M, N, K, *strides, NUM_SMS=num_sms, **common),
    }
    for sub in (False, True):
        ad, bd = TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(b, [BN, BK])
        cd = TensorDescriptor.from_tensor(c, [BM, BN // 2] if sub else [BM, BN])
        runs["tma_persistent" + ("_sub" if sub else "")] = (
            lambda ad=ad, bd=bd, cd=cd, sub=sub: t.matmul_kernel_tma_persistent.fn[gp](
                ad, bd, cd, M, N, K, FP8_OUTPUT=False, EPILOGUE_SUBTILE=sub, NUM_SMS=num_sms, WARP_SPECIALIZE=False,
                **common))
    for ws in (False, True):
        ad, bd = TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(b, [BN, BK])
        cd = TensorDescriptor.from_tensor(c, [BM, BN])
        runs["tma" + ("_ws" if ws else "")] = (  # the K loop marked (Triton 3.6 on Hopper may refuse it)
            lambda ad=ad, bd=bd, cd=cd, ws=ws: t.matmul_kernel_tma.fn[g1](
                ad, bd, cd, M, N, K, FP8_OUTPUT=False, WARP_SPECIALIZE=ws, **common))
        runs["desc_persistent" + ("_ws" if ws else "")] = (
            lambda ws=ws: t.matmul_kernel_descriptor_persistent.fn[gp](
                a, b, c, M, N, K, EPILOGUE_SUBTILE=False, NUM_SMS=num_sms, WARP_SPECIALIZE=ws, FLATTEN=not ws,
                **common))
    return runs


def child(side: str, tutorial: str, ks: list, only=None) -> list:
    if side == "kernellab":
        import kernellab.compat

        kernellab.compat.install()
    import torch
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    spec = importlib.util.spec_from_file_location("tutorial09", tutorial)
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8))
    num_sms = torch.cuda.get_device_properties("cuda").multi_processor_count
    rows = []
    for K in ks:
        torch.manual_seed(0)
        a = torch.randn((8192, K), device="cuda", dtype=torch.float16)
        b = torch.randn((8192, K), device="cuda", dtype=torch.float16)
        ref = a.float() @ b.float().T
        if side == "triton":
            rows.append(dict(K=K, kernel="torch", cfg="-", ms=_timeit(lambda: torch.matmul(a, b.T))))
        for cfg in CONFIGS:
            c = torch.empty((8192, 8192), device="cuda", dtype=torch.float16)
            for name, fn in _runs(t, triton, TensorDescriptor, a, b, c, K, cfg, num_sms).items():
                if only and name not in only:
                    continue
                row = dict(K=K, kernel=name, cfg="{}x{}x{}/{}/{}".format(*cfg))
                try:
                    c.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
                    row.update(err=err, ok=bool(err < 1e-2), ms=_timeit(fn))
                except Exception as e:  # a config one compiler refuses (shared memory) is a row, not a crash
                    row.update(error=f"{type(e).__name__}: {str(e)[:200]}")
                rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tutorial", required=True, help="path of Triton's python/tutorials/09-persistent-matmul.py")
    ap.add_argument("--k", type=int, nargs="+", default=[512, 1024, 4096])
    ap.add_argument("--also-env", action="append", default=[], metavar="VAR=VALUE",
                    help="one more kernellab child with this environment setting (a codegen switch such as "
                         "KERNELLAB_FLATTEN=0), timed in the same run; its column is 'alt'")
    ap.add_argument("--kernels", nargs="+", help="only these rows (naive, persistent, tma, tma_ws, tma_persistent, "
                    "tma_persistent_sub, desc_persistent, desc_persistent_ws); KERNELLAB_WARP_SPECIALIZE=1 in the "
                    "environment warp-specializes every TMA loop on the kernellab side")
    ap.add_argument("--child", choices=["kernellab", "triton"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("@@rows " + json.dumps(child(args.child, args.tutorial, args.k, args.kernels)), flush=True)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("tutorial09_matmul.py: needs a CUDA GPU; skipped")
        return 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    sides = [("kernellab", "kernellab", {})]
    for setting in args.also_env:
        var, _, value = setting.partition("=")
        sides.append(("alt", "kernellab", {var: value}))
    if importlib.util.find_spec("triton") is not None:
        sides.append(("triton", "triton", {}))
    res = {}
    for label, side, extra in sides:
        p = subprocess.run([sys.executable, __file__, "--tutorial", args.tutorial, "--k", *map(str, args.k),
                            *(["--kernels", *args.kernels] if args.kernels else []), "--child", side],
                           capture_output=True, text=True, env={**env, **extra})
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("@@rows ")]
        if not lines:
            print(f"{label}: the child failed:\n{p.stderr[-2000:]}")
            continue
        res[label] = {(r["K"], r["kernel"], r["cfg"]): r for r in json.loads(lines[-1][7:])}
    if args.also_env:
        print("alt: kernellab with " + " ".join(args.also_env))
    kl, tr, alt = res.get("kernellab", {}), res.get("triton", {}), res.get("alt")
    cublas = {k[0]: r["ms"] for k, r in tr.items() if k[1] == "torch"}
    print(f"{'K':>5} {'kernel':18} {'config':16} {'kl TF/s':>8} {'tri TF/s':>8} {'kl/tri':>6} {'kl/cuBLAS':>9}"
          + (f" {'alt/tri':>7}" if alt is not None else ""))
    for key in sorted(set(kl) | set(tr)):
        if key[1] == "torch":
            continue
        flops = 2 * 8192 * 8192 * key[0]
        k, t = kl.get(key, {}), tr.get(key, {})
        tf_k = flops / k["ms"] / 1e9 if "ms" in k else float("nan")
        tf_t = flops / t["ms"] / 1e9 if "ms" in t else float("nan")
        vs_blas = cublas.get(key[0], float("nan")) / k["ms"] if "ms" in k else float("nan")
        note = (k.get("error") or t.get("error") or ("" if k.get("ok", True) and t.get("ok", True) else "WRONG"))[:60]
        alt_col = ""
        if alt is not None:
            a = alt.get(key, {})
            alt_col = f" {(t['ms'] / a['ms'] if 'ms' in a and 'ms' in t else float('nan')):7.2f}"
            if a and not a.get("ok", True):
                note = note or "alt WRONG"
        print(f"{key[0]:>5} {key[1]:18} {key[2]:16} {tf_k:8.0f} {tf_t:8.0f} {tf_k / tf_t:6.2f} {vs_blas:9.2f}"
              f"{alt_col} {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
