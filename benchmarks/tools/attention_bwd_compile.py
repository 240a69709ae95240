"""Compile the attention backward kernels for sm_90a on the CPU, with kernellab or with Triton, and compare.

No GPU is needed: kernellab builds through its own backend, Triton 3.6 through `triton.compile(ASTSource(...),
target=GPUTarget("cuda", 90, 32))` (run this script with an interpreter that has Triton). Both PTX texts then go
through the same `ptxas -v` (registers, spills, shared memory) and `nvdisasm` (SASS instruction counts), so the
numbers differ only by the compiler that wrote the PTX.

    python benchmarks/tools/attention_bwd_compile.py kernellab OUT_DIR         # kernellab's venv
    /tmp/tri/bin/python benchmarks/tools/attention_bwd_compile.py triton OUT_DIR
    python benchmarks/tools/attention_bwd_compile.py report OUT_DIR            # the table, both compilers

Each compile writes OUT_DIR/<compiler>-<kernel>-hd<D>-<full|causal>.ptx. The specialization is the one a launch
on contiguous [4, 16, 1024, D] fp16 tensors gets: 16-byte aligned pointers, the head-dim strides equal to 1,
every other integer divisible by 16.
"""
from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import BWD_CONFIGS  # noqa: E402
from benchmarks.attention_kernel import LOG2E, make_attention_bwd_kernels  # noqa: E402

Z, H, S = 4, 16, 1024
CASES = [(d, c) for d in (64, 128) for c in (False, True)]


def case_name(kernel, d, causal):
    return f"{kernel}-hd{d}-{'causal' if causal else 'full'}"


def configs(d):
    """(kernel name, constexprs, num_warps, num_stages) for each backward kernel at head dim d."""
    c = dict(BWD_CONFIGS[d])
    nw, ns = c.pop("num_warps"), c.pop("num_stages")
    return [("dkdv", dict(BLOCK_M=c["BLOCK_M1"], BLOCK_N=c["BLOCK_N1"], HEAD_DIM=d), nw, ns),
            ("dq", dict(BLOCK_M=c["BLOCK_M2"], BLOCK_N=c["BLOCK_N2"], HEAD_DIM=d), nw, ns)]


def compile_kernellab(out: Path):
    import torch

    import kernellab as kl
    import kernellab.language as tl
    from kernellab.compiler.codegen.target import Target

    _, dkdv, dq = make_attention_bwd_kernels(kl, tl)
    for d, causal in CASES:
        t = torch.empty(Z, H, S, d, dtype=torch.float16)
        lse = torch.empty(Z, H, S)
        scale = 1 / math.sqrt(d)
        for name, cx, nw, ns in configs(d):
            if name == "dkdv":
                args = (t, t, t, t, t, t, lse, lse, scale, scale * LOG2E)
                kern = dkdv
            else:
                args = (t, t, t, t, t, lse, lse, scale, scale * LOG2E)
                kern = dq
            ck = kern.warmup(*args, *t.stride() * 4, H, S, CAUSAL=causal, grid=(1,), num_warps=nw, num_stages=ns, **cx)
            ck.build_gpu(Target(90))
            (out / f"kernellab-{case_name(name, d, causal)}.ptx").write_text(ck.asm["ptx"])
            (out / f"kernellab-{case_name(name, d, causal)}.smem").write_text(str(ck.shared))
            (out / f"kernellab-{case_name(name, d, causal)}.gpuir").write_text(ck.asm["gpu"])
            print(case_name(name, d, causal), "kernellab", ck.n_regs, "registers", ck.n_spills, "spills")


def compile_triton(out: Path):
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    _, dkdv, dq = make_attention_bwd_kernels(triton, tl)
    for d, causal in CASES:
        for name, cx, nw, ns in configs(d):
            kern = dkdv if name == "dkdv" else dq
            names = list(kern.arg_names)
            sig, consts = {}, {}
            for n in names:
                if n in cx or n == "CAUSAL":
                    sig[n] = "constexpr"
                    consts[(names.index(n),)] = causal if n == "CAUSAL" else cx[n]
                elif n.startswith("stride_") and n.endswith("d"):
                    sig[n] = "constexpr"  # the head-dim strides: 1, specialized as Triton's launcher does
                    consts[(names.index(n),)] = 1
                elif n in ("LSE", "Delta"):
                    sig[n] = "*fp32"
                elif n[0].isupper() and n not in ("H", "N_CTX"):
                    sig[n] = "*fp16"
                elif n in ("sm_scale", "qk_scale"):
                    sig[n] = "fp32"
                else:
                    sig[n] = "i32"
            attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names
                     if sig[n].startswith("*") or sig[n] == "i32"}
            k = triton.compile(ASTSource(kern, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                               options=dict(num_warps=nw, num_stages=ns))
            (out / f"triton-{case_name(name, d, causal)}.ptx").write_text(k.asm["ptx"])
            (out / f"triton-{case_name(name, d, causal)}.ttgir").write_text(k.asm["ttgir"])
            (out / f"triton-{case_name(name, d, causal)}.smem").write_text(str(k.metadata.shared))
            print(case_name(name, d, causal), "triton ok")


def _nvdisasm():
    wheels = sorted(Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/*/bin/nvdisasm"))
    for c in (shutil.which("nvdisasm"), *wheels):
        if c:
            return str(c)
    return None


def resources(ptx_path: Path) -> dict:
    """ptxas -v on one PTX file: registers, spill bytes, static shared memory; nvdisasm: SASS counts."""
    cubin = ptx_path.with_suffix(".cubin")
    r = subprocess.run(["ptxas", "--gpu-name", "sm_90a", "-O3", "-v", str(ptx_path), "-o", str(cubin)],
                       capture_output=True, text=True, check=True)
    log = r.stderr + r.stdout
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    spill = [int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    smem = re.search(r"(\d+) bytes smem", log)
    ptx = ptx_path.read_text()
    wgmma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k\d+)\.f32\.\w+\.\w+\s+\{[^}]*\},\s*(\{?)", ptx)
    shapes = {}
    for shape, areg in wgmma:
        key = f"{shape}{'(A regs)' if areg else ''}"
        shapes[key] = shapes.get(key, 0) + 1
    dyn = ptx_path.with_suffix(".smem")
    shared = int(dyn.read_text()) if dyn.exists() else 0
    out = {"regs": regs, "spill_bytes": sum(spill), "smem": shared + (int(smem.group(1)) if smem else 0),
           "wgmma": shapes, "mma_sync": ptx.count("mma.sync.aligned"), "ptxas_warnings": re.findall(r"C75\d\d", log)}
    dis = _nvdisasm()
    if dis:
        sass = subprocess.run([dis, "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
        cubin.with_suffix(".sass").write_text(sass)
        ins = [ln for ln in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+\S", ln)]
        out["sass"] = len(ins)
        out["hgmma"] = sum("HGMMA" in ln for ln in ins)
        out["stl_ldl"] = sum(bool(re.search(r"\b(STL|LDL)\b", ln)) for ln in ins)
        out["loops"] = _loops(sass)
    return out


def _loops(sass: str) -> list:
    """Per loop of the SASS (a label up to a branch back to it): instructions, HGMMAs, wgmma waits, bar.syncs."""
    labels, ins = {}, []
    for ln in sass.splitlines():
        m = re.match(r"\s*(\.L_x_\d+):", ln)
        if m:
            labels[m.group(1)] = len(ins)
        if re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+\S", ln):
            ins.append(ln)
    loops = []
    for i, ln in enumerate(ins):
        m = re.search(r"BRA.*?(\.L_x_\d+)", ln)
        if m and labels.get(m.group(1), i) < i:
            body = ins[labels[m.group(1)]:i + 1]
            loops.append((len(body), sum("HGMMA" in b for b in body), sum("WARPGROUP.DEPBAR" in b for b in body),
                          sum("BAR.SYNC" in b for b in body)))
    return loops


def report(out: Path):
    print(f"{'kernel':<22} {'compiler':<10} {'regs':>4} {'spill':>6} {'smem':>6} {'sass':>5} {'hgmma':>5}  "
          "loops (SASS, HGMMA, wgmma waits, bar.sync)  wgmma in the PTX")
    for d, causal in CASES:
        for name, *_ in configs(d):
            for comp in ("kernellab", "triton"):
                p = out / f"{comp}-{case_name(name, d, causal)}.ptx"
                if not p.exists():
                    continue
                r = resources(p)
                print(f"{case_name(name, d, causal):<22} {comp:<10} {r['regs']:>4} {r['spill_bytes']:>6} "
                      f"{r['smem']:>6} {r.get('sass', 0):>5} {r.get('hgmma', 0):>5}  {r.get('loops')}  "
                      f"{r['wgmma']} mma.sync={r['mma_sync']} {' '.join(r['ptxas_warnings'])}")


if __name__ == "__main__":
    what, out = sys.argv[1], Path(sys.argv[2])
    for spec in sys.argv[3:]:  # HD=BM1,BN1,BM2,BN2,WARPS,STAGES overrides the benchmark's config
        hd, vals = spec.split("=")
        BWD_CONFIGS[int(hd)] = dict(zip(("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "num_warps", "num_stages"),
                                        (int(x) for x in vals.split(","))))
    out.mkdir(parents=True, exist_ok=True)
    {"kernellab": compile_kernellab, "triton": compile_triton, "report": report}[what](out)
