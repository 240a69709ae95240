"""Shared-memory instructions of the transpose idioms (tests/idioms.py), kernellab against Triton 3.6, without a GPU.

Each side compiles the three transpose texts (tl.trans, transposed store pointers, block pointers) at the configs
the workload uses, for sm_90a, in 16-bit and 32-bit (and 8-bit) elements; this script counts in the PTX the
shared-memory accesses by width, ldmatrix / stmatrix, barriers, and in ptxas' report / nvdisasm's SASS the
registers, spills and instructions:

    PYTHONPATH=. python benchmarks/tools/transpose_ptx.py [--dtype fp16 --dtype fp32] [--no-triton] [--env K=V]
    PYTHONPATH=. python benchmarks/tools/transpose_ptx.py --time [--dtype int8 ...] [--also-env K=V ...]   # on a GPU

Triton runs in its own interpreter (--triton-python, default /tmp/tri/bin/python) with `triton.compile` on an
ASTSource (as benchmarks/compile_time.py does); its PTX goes through the same ptxas as kernellab's.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "int8": "int8", "int16": "int16"}
TRITON_TYPES = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "int8": "i8", "int16": "i16"}
SIZE = 1024  # divisible by 16 like the benchmark's 8192: the same specialization


def _variants(jit, tl):
    from tests.idioms import make_idioms

    w = next(w for w in make_idioms(jit, tl) if w.name == "transpose")
    return [(v.name, v.kernel, cfg) for v in w.variants for cfg in v.configs]


def _tag(name, cfg, dt):
    return f"{name}-{cfg['BM']}x{cfg['BN']}w{cfg['num_warps']}-{dt}"


def build_kernellab(out: Path, dtypes):
    import torch

    import kernellab as kl
    import kernellab.language as tl
    from kernellab.compiler.codegen.target import Target

    for name, kernel, cfg in _variants(kl.jit, tl):
        for dt in dtypes:
            t = getattr(torch, DTYPES[dt])
            x, y = torch.empty(SIZE, SIZE, dtype=t), torch.empty(SIZE, SIZE, dtype=t)
            meta = dict(cfg)
            grid = (SIZE // meta["BM"], SIZE // meta["BN"])
            kernel.device_caches.clear()
            ck = kernel.warmup(x, y, SIZE, SIZE, SIZE, SIZE, grid=grid, **meta)
            ck.build_gpu(Target(90))
            (out / (_tag(name, cfg, dt) + ".ptx")).write_text(ck.asm["ptx"])
            (out / (_tag(name, cfg, dt) + ".gpu")).write_text(ck.asm.get("gpu", ""))


def build_triton(out: Path, dtypes):
    import contextlib
    import io

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for name, kernel, cfg in _variants(triton.jit, tl):
        for dt in dtypes:
            names = list(kernel.arg_names)
            sig = {n: "*" + TRITON_TYPES[dt] if n.endswith("_ptr") else "i32" for n in names}
            sig.update(BM="constexpr", BN="constexpr")
            consts = {(names.index("BM"),): cfg["BM"], (names.index("BN"),): cfg["BN"]}
            attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n not in ("BM", "BN")}
            os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="transpose_ptx_")
            with contextlib.redirect_stdout(io.StringIO()):
                c = triton.compile(ASTSource(kernel, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                                   options={"num_warps": cfg["num_warps"]})
            (out / (_tag(name, cfg, dt) + ".ptx")).write_text(c.asm["ptx"])
            (out / (_tag(name, cfg, dt) + ".ttgir")).write_text(c.asm["ttgir"])


def counts(ptx: str) -> dict:
    """Shared-memory accesses by width, ldmatrix/stmatrix, barriers of one PTX text."""
    c = {}
    for op in ("st", "ld"):
        for m in re.finditer(rf"\b{op}\.shared(?:::cta)?(\.v[248])?\.(?:b|u|s|f)(\d+)", ptx):
            vec = int(m.group(1)[2:]) if m.group(1) else 1
            key = f"{op}.shared.{vec * int(m.group(2)) // 8}B"
            c[key] = c.get(key, 0) + 1
    for op in ("ldmatrix", "stmatrix"):
        for m in re.finditer(rf"\b{op}\.sync\.aligned\.m8n8\.(x\d)(\.trans)?", ptx):
            key = f"{op}.{m.group(1)}{m.group(2) or ''}"
            c[key] = c.get(key, 0) + 1
    c["bar"] = len(re.findall(r"\bbar(?:rier)?\.sync|\bbar\.cta\.sync", ptx))
    return c


def resources(ptx_path: Path) -> dict:
    from benchmarks.tools.attention_bwd_compile import _nvdisasm

    cubin = ptx_path.with_suffix(".cubin")
    r = subprocess.run(["ptxas", "--gpu-name", "sm_90a", "-O3", "-v", str(ptx_path), "-o", str(cubin)],
                       capture_output=True, text=True)
    if r.returncode:
        return {"ptxas_error": (r.stderr or r.stdout)[-400:]}
    log = r.stderr + r.stdout
    out = {"regs": int(re.search(r"Used (\d+) registers", log).group(1)),
           "spills": sum(int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))}
    dis = _nvdisasm()
    if dis:
        sass = subprocess.run([dis, "-c", str(cubin)], capture_output=True, text=True).stdout
        ins = [ln for ln in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+\S", ln)]
        out["sass"] = len(ins)
        out["sts_lds_ldsm"] = "/".join(str(sum(bool(re.search(rf"\b{k}\b", ln)) for ln in ins))
                                       for k in ("STS(?:\\.\\w+)*", "LDS(?:\\.\\w+)*", "LDSM(?:\\.\\w+)*"))
    return out


def time_on_gpu(dtypes, also_env, size=8192):
    """GB/s of kernellab (plus one column per --also-env setting) and Triton on the same transposes of a size x size
    tile, each checked bit for bit against x.t() on a poisoned output first; timed in alternating rounds
    (benchmarks/idioms.py's way). The idioms workload is fp16 only: this times the other element sizes too."""
    import torch
    import triton
    import triton.language as trtl

    import kernellab
    import kernellab.language as kltl
    from benchmarks.idioms import env_setting
    from benchmarks.memory_bound import bench

    sides = {"kernellab": (_variants(kernellab.jit, kltl), None), "triton": (_variants(triton.jit, trtl), None)}
    sides.update({f"kernellab[{s}]": (_variants(kernellab.jit, kltl), s) for s in also_env})
    for dt in dtypes:
        t = getattr(torch, DTYPES[dt])
        g = torch.Generator().manual_seed(0)
        x = (torch.randn(size, size, generator=g) * 100).to(t) if t.is_floating_point else \
            torch.randint(-100, 100, (size, size), generator=g).to(t)
        x = x.cuda()
        y = torch.empty(size, size, dtype=t, device="cuda")
        ref = x.t().contiguous()
        for i, (name, _, cfg) in enumerate(sides["kernellab"][0]):
            meta = dict(cfg)
            grid = (size // meta["BM"], size // meta["BN"])
            fns, row = {}, {}
            for side, (kernels, setting) in sides.items():
                k = kernels[i][1]
                with env_setting(setting):
                    y.fill_(7)
                    k[grid](x, y, size, size, size, size, **meta)
                    torch.cuda.synchronize()
                    if not torch.equal(y, ref):
                        row[side] = "WRONG"
                        continue
                fns[side] = (lambda k=k: k[grid](x, y, size, size, size, size, **meta), setting)
            times = {s: [] for s in fns}
            for _ in range(3):
                for side, (fn, setting) in fns.items():
                    with env_setting(setting):
                        times[side].append(bench(fn, warmup=10, rep=100))
            for side, ts in times.items():
                row[side] = 2 * x.numel() * x.element_size() / sorted(ts)[1] / 1e9
            tr = row.get("triton")
            print(f"{_tag(name, cfg, dt):<28} " + "  ".join(
                f"{s} {v:7.1f}" + (f" ({v / tr:.2f}x)" if isinstance(v, float) and isinstance(tr, float) and
                                   s != "triton" else "") if isinstance(v, float) else f"{s} {v}"
                for s, v in row.items()), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", action="append", choices=list(DTYPES))
    ap.add_argument("--triton-python", default="/tmp/tri/bin/python")
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--env", action="append", default=[], help="VAR=VALUE for kernellab's build")
    ap.add_argument("--out", default=None, help="keep the PTX here")
    ap.add_argument("--side", choices=["kernellab", "triton"], help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--time", action="store_true", help="time on the GPU (kernellab, Triton, --also-env columns)")
    ap.add_argument("--also-env", action="append", default=[], metavar="VAR=VALUE")
    a = ap.parse_args()
    dtypes = a.dtype or ["fp16", "fp32"]
    if a.time:
        time_on_gpu(dtypes, a.also_env)
        return
    if a.side:
        (build_kernellab if a.side == "kernellab" else build_triton)(Path(a.out), dtypes)
        return
    out = Path(a.out or tempfile.mkdtemp(prefix="transpose_ptx_"))
    sides = ["kernellab"] + ([] if a.no_triton else ["triton"])
    env = dict(os.environ, PYTHONPATH=str(ROOT), KERNELLAB_CACHE_DIR=tempfile.mkdtemp(prefix="transpose_kl_"))
    env.update(kv.split("=", 1) for kv in a.env)
    rows = {}
    for side in sides:
        d = out / side
        d.mkdir(parents=True, exist_ok=True)
        py = sys.executable if side == "kernellab" else a.triton_python
        cmd = [py, __file__, "--side", side, "--out", str(d)] + [f"--dtype={t}" for t in dtypes]
        subprocess.run(cmd, env=env, check=True)
        for p in sorted(d.glob("*.ptx")):
            rows.setdefault(p.stem, {})[side] = {**counts(p.read_text()), **resources(p)}
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    for tag, r in rows.items():
        for side, c in r.items():
            print(f"{tag:<32} {side:<10} " + " ".join(f"{k}={v}" for k, v in c.items()))
    print(f"PTX in {out}")


if __name__ == "__main__":
    main()
