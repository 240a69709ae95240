"""Which of Triton 3.6 test_dot's PTX checks kernellab's PTX passes, without a GPU.

Triton's test_dot (test/unit/language/test_core.py) launches one dot kernel over about 580 parameter sets and, on
NVIDIA GPUs, checks the PTX's form: vectorized global loads and stores (16 bytes a thread, 2 x f64 for float64, 2
elements for fp8 outputs) and the tensor-core instruction per dtype pair. This script compiles an equivalent
kernel (one dot of two loaded tiles, then test_dot's epilogues) for each parameter set Triton's CUDA path runs,
for sm_90a and sm_80, and applies those checks to the PTX. It prints the failures grouped by reason:

    PYTHONPATH=. python benchmarks/tools/dot_ptx_forms.py [--arch 90] [--arch 80] [-k float16] [-v]

The parameter sets are listed here as Triton's file builds them (shapes, warps, epilogues, precisions, dtype pairs);
column-major inputs compile the same kernel (test_dot copies them to contiguous tensors before the launch), so each
distinct kernel is compiled once and counted as many times as test_dot runs it.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import time

import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.codegen.target import Target

EPILOGUES = ["none", "trans", "add-matrix", "add-rows", "add-cols", "softmax", "chain-dot"]


@kl.jit
def dot_kernel(X, sxm, sxk, Y, syk, syn, W, swn, swl, Z, szm, szn, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, EPI: tl.constexpr, PREC: tl.constexpr, OUT_T: tl.constexpr):
    """x @ y in one program, then the epilogue test_dot names: add a matrix, a row or a column of Z, a row
    softmax, or a second dot with W."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(X + rm[:, None] * sxm + rk[None, :] * sxk)
    b = tl.load(Y + rk[:, None] * syk + rn[None, :] * syn)
    acc = tl.dot(a, b, input_precision=PREC, out_dtype=OUT_T)
    zp = Z + rm[:, None] * szm + rn[None, :] * szn
    if EPI == "add-matrix":
        acc += tl.load(zp)
    if EPI == "add-rows":
        acc += tl.load(Z + rm * szm)[:, None]
    if EPI == "add-cols":
        acc += tl.load(Z + rn * szn)[None, :]
    if EPI == "softmax":
        e = tl.exp((acc - tl.max(acc, 1)[:, None]).to(tl.float32)).to(acc.dtype)
        acc = e / tl.sum(e, 1)[:, None]
    if EPI == "chain-dot":
        w = tl.load(W + rn[:, None] * swn + rn[None, :] * swl)
        acc = tl.dot(acc.to(w.dtype), w, input_precision=PREC, out_dtype=OUT_T)
    tl.store(zp, acc)


def cases():
    """{(M, N, K, num_warps, epilogue, input_precision, in_dtype, out_dtype): how many of test_dot's cases compile
    it}, for the sets test_dot's CUDA path runs (no HIP-only sets, no K < 16, no non-ieee float64)."""
    out = []
    for shape in [(64, 64, 64), (32, 32, 32), (16, 16, 16)]:
        for epi in EPILOGUES:
            for prec in ["tf32", "tf32x3", "ieee", "bf16x3", "bf16x6"]:
                for pair in [("float16", "float16"), ("float16", "float32"), ("float32", "float32"),
                             ("float64", "float64")]:
                    if prec != "ieee" and pair[0] in ("float16", "float64"):
                        continue
                    out.append((*shape, 4, epi, prec, *pair))
    for shape_nw in [(128, 256, 32, 8), (128, 16, 32, 4), (32, 128, 64, 4), (128, 128, 64, 4), (64, 128, 128, 4),
                     (32, 128, 64, 2), (64, 64, 32, 4), (32, 32, 128, 16), (128, 128, 64, 2), (64, 128, 128, 2)]:
        for pair in [("int8", "int8"), ("float16", "float16"), ("float16", "float32"), ("float32", "float32")]:
            out += [(*shape_nw, "none", "tf32", *pair)] * 8  # col_a x col_b x kpack (1 twice on CUDA)
    out += [(64, 64, 64, 4, "none", "ieee", "float32", "float32")] * 4  # col_a x col_b
    out.append((64, 64, 64, 4, "chain-dot", "ieee", "bfloat16", "float32"))
    out += [(128, 128, 64, 4, "chain-dot", "ieee", t, "float32") for t in ("float8e5", "float8e4nv")]
    out.append((128, 128, 64, 8, "softmax", "ieee", "float16", "float32"))
    out += [(2, 4, 32, 1, "none", "ieee", "float16", "float32"), (1, 2, 32, 1, "none", "ieee", "float8e5", "float32")]
    return collections.Counter(out)


TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
         "int8": torch.int8, "int32": torch.int32, "float8e5": torch.float8_e5m2, "float8e4nv": torch.float8_e4m3fn}


def z_dtype(in_t, out_t):
    """The dtype of test_dot's Z array (NumPy's promotion of `1 + random(in_dtype) * .1`)."""
    if out_t == "int8":
        return torch.int32
    if in_t.startswith("float8"):
        return torch.float64
    return {"bfloat16": torch.float32}.get(in_t, TORCH[in_t])


def compile_case(case, arch):
    M, N, K, nw, epi, prec, in_t, out_t = case
    x = torch.zeros(M, K, dtype=TORCH[in_t])
    y = torch.zeros(K, N, dtype=TORCH[in_t])
    w = torch.zeros(N, N, dtype=TORCH[in_t])
    z = torch.zeros(M, N, dtype=z_dtype(in_t, out_t))
    szm, szn = (1, M) if epi == "trans" else (N, 1)
    out = {"int8": tl.int8, "float16": tl.float16}.get(out_t, tl.float32) if epi != "softmax" else tl.float32
    if out_t == "float64":
        out = tl.float32  # test_dot asks for float32 there too (its out_dtype falls to tl.float32)
    ck = dot_kernel.warmup(x, K, 1, y, N, 1, w, N, 1, z, szm, szn, BM=M, BN=N, BK=K, EPI=epi, PREC=prec,
                           OUT_T=out, num_warps=nw, grid=(1,))
    ck.build_gpu(Target(arch))
    return ck


def checks(case, arch, ptx):
    """test_dot's PTX assertions for this case on sm_<arch>: a list of (reason, passed)."""
    M, N, K, nw, epi, prec, in_t, out_t = case
    res = []
    if (K > 16 or N > 16 or M > 16) and (M * N // (nw * 32) >= 4):
        if in_t == "float64":
            res += [("ld.global.v2.b64", "ld.global.v2.b64" in ptx), ("st.global.v2.b64", "st.global.v2.b64" in ptx)]
        else:
            res.append(("ld.global.v4", "ld.global.v4" in ptx))
            st = "st.global.v2" if "float8" in in_t else "st.global.v4"
            res.append((st, st in ptx))
    out16 = out_t == "float16" and epi != "softmax"
    if in_t == "float32" and prec != "ieee":
        if prec in ("bf16x3", "bf16x6"):
            res.append(("mma bf16 (bf16xN)", bool(re.search(r"[mma|wgmma.mma_async].sync.aligned.m\d+n\d+k16"
                                                            r"(?:.row.col)?.f32.bf16.bf16", ptx))))
        else:
            res.append(("mma tf32", bool(re.search(r"[mma|wgmma.mma_async].sync.aligned.m\d+n\d+k8(?:.row.col)?"
                                                   r".f32.tf32.tf32", ptx))))
    elif in_t == "float16" and not out16:
        res.append(("mma f32.f16", bool(re.search(r"[mma|wgmma.mma_async].sync.aligned.m\d+n\d+k16(?:.row.col)?"
                                                  r".f32.f16.f16", ptx))))
    elif in_t == "float16" and out16:
        res.append(("mma f16.f16 (fp16 acc)", bool(re.search(r"[mma|wgmma.mma_async].sync.aligned.m\d+n\d+k16"
                                                             r"(?:.row.col)?.f16.f16.f16", ptx))))
    elif in_t == "int8":
        res.append(("mma s8", "wgmma.mma_async.sync.aligned" in ptx or
                    "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32" in ptx))
    elif in_t == "float8e5":
        if arch == 90 and M >= 64 and N >= 8:
            res.append(("wgmma m64n128k32 e5m2", "wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e5m2" in ptx))
        elif M < 64:
            res.append(("mma f16 for small fp8", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx))
    elif in_t == "float8e4nv" and arch == 90 and M >= 64 and N >= 8:
        res.append(("wgmma m64n128k32 e4m3", "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in ptx))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", type=int, action="append", help="90 (sm_90a) and/or 80; both by default")
    ap.add_argument("-k", default="", help="only cases whose text contains this")
    ap.add_argument("-v", action="store_true", help="print every failing case")
    args = ap.parse_args(argv)
    os.environ.setdefault("KERNELLAB_CACHE_DIR", tempfile.mkdtemp(prefix="kl_dotforms_"))
    weight = cases()
    for arch in args.arch or [90, 80]:
        todo = [c for c in weight if args.k in str(c) and not (arch < 90 and c[6] == "float8e4nv")]
        reasons, failed, failed_w, spills = collections.Counter(), 0, 0, []
        t0 = time.time()
        for c in todo:
            try:
                ck = compile_case(c, arch)
                bad = [r for r, ok in checks(c, arch, ck.asm["ptx"]) if not ok]
                if ck.n_spills:
                    spills.append((c, ck.n_spills))
            except Exception as e:  # noqa: BLE001  (a compile error is one more reason, by its type)
                bad = [f"compile error: {type(e).__name__}: {str(e).splitlines()[0][:80]}"]
            if bad:
                failed += 1
                failed_w += weight[c]
                reasons.update({r: weight[c] for r in bad})
                if args.v:
                    print(f"  sm_{arch} FAIL {c}: {bad}", flush=True)
        print(f"sm_{arch}: {failed} of {len(todo)} distinct kernels fail a PTX check: {failed_w} of "
              f"{sum(weight[c] for c in todo)} test_dot cases ({time.time() - t0:.0f} s); by reason (test_dot cases):")
        for r, n in reasons.most_common():
            print(f"  {n:4d}  {r}")
        if spills:
            print(f"  spilling: {len(spills)} cases (bytes): " + "; ".join(f"{c[:4]} {c[6]}->{c[7]}: {n}"
                                                                       for c, n in spills))
    return 0


if __name__ == "__main__":
    sys.exit(main())
