"""Compile the kernels one unseen-library case launches for sm_90a on the CPU, with kernellab and with Triton 3.6,
and compare registers, spills and SASS.

    PYTHONPATH=.:<libs> python benchmarks/tools/library_kernel_compile.py kernellab OUT fla chunk_gla [--kernel K]
    PYTHONPATH=.:<libs> /tmp/tri/bin/python benchmarks/tools/library_kernel_compile.py triton OUT
    python benchmarks/tools/library_kernel_compile.py report OUT

`kernellab` runs the case (benchmarks/tools/unseen_libraries.py) on the CPU interpreter under kernellab.compat,
collects every specialization its launches compiled (the autotuner's first config that compiles, as on the CPU),
builds each for sm_90a and writes OUT/kernellab-<kernel>-<i>.ptx and OUT/specs.json (each specialization's
argument types, constants, divisibility and options). `triton` compiles the same specializations with the real
Triton (`ASTSource` + `GPUTarget("cuda", 90, 32)`; no GPU needed), importing the kernel from its module by name.
`report` runs `ptxas -v` and `nvdisasm` on both (attention_bwd_compile.resources) and prints a table, with each
compiler's seconds for the specialization (kernellab: `build_gpu` from the tile IR, the CPU run's frontend aside;
Triton: `triton.compile` from the AST, ptxas included).
`--kernel` keeps only kernels whose name contains it; `--env K=V` (kernellab, repeatable) sets a knob first.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _plain(v):
    """A constexpr value as JSON (fla's are ints, bools, floats, None, strings)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return {"repr": repr(v)}


def compile_kernellab(out: Path, lib: str, op: str, only: str | None):
    from kernellab.compiler.codegen.target import Target
    from kernellab.compiler.frontend import RuntimeArg
    from kernellab.runtime import jit as kjit

    seen = []
    orig = kjit.JITFunction._get_compiled

    def get_compiled(self, args, kwargs, warmup=False):
        r = orig(self, args, kwargs, warmup)
        if r[0] is not None and all(r[0] is not ck for _, ck in seen):
            seen.append((self, r[0]))
        return r

    kjit.JITFunction._get_compiled = get_compiled
    import unseen_libraries as ul

    rc = ul.main([lib, "--op", op])
    kjit.JITFunction._get_compiled = orig
    specs = []
    for fn, ck in seen:
        name = fn.__name__
        if only and only not in name:
            continue
        spec = ck._split_inputs[0]
        params, sig, consts, div = list(spec), {}, {}, []
        for n, v in spec.items():
            if isinstance(v, RuntimeArg):
                t = v.type
                if getattr(v, "equal_to_1", False):
                    sig[n], consts[n] = "constexpr", 1
                    continue
                s = ("*" + str(t.elem.name if hasattr(t.elem, "name") else t.elem)) if hasattr(t, "elem") else t.name
                sig[n] = s
                if (getattr(v, "attrs", None) or {}).get("tt.divisibility") == 16:
                    div.append(n)
            else:
                sig[n], consts[n] = "constexpr", _plain(v)
        i = sum(s["kernel"] == name for s in specs)
        tag = f"{name}-{i}"
        t0 = time.perf_counter()
        ck.build_gpu(Target(90))
        build_s = time.perf_counter() - t0
        (out / f"kernellab-{tag}.ptx").write_text(ck.asm["ptx"])
        (out / f"kernellab-{tag}.smem").write_text(str(ck.shared))
        if "llir" in ck.asm:
            (out / f"kernellab-{tag}.ll").write_text(ck.asm["llir"])
        (out / f"kernellab-{tag}.gpuir").write_text(ck.asm["gpu"])
        (out / f"kernellab-{tag}.passes").write_text("".join(
            f"// ===== {r.stage} {r.name}\n{r.ir}\n" for r in ck.trace.passes if r.stage in ("tile", "gpu")))
        specs.append({"tag": tag, "kernel": name, "module": fn.fn.__module__, "qualname": fn.fn.__qualname__,
                      "params": params, "signature": sig, "constants": consts, "divisible": div,
                      "num_warps": ck.options.get("num_warps", 4), "num_stages": ck.options.get("num_stages", 3),
                      "kernellab_compile_s": round(build_s, 2)})
        print(tag, f"{ck.options.get('num_warps')}w/{ck.options.get('num_stages')}s", "kernellab", ck.n_regs,
              "registers", ck.n_spills, "spills", f"{build_s:.1f} s")
    (out / "specs.json").write_text(json.dumps(specs, indent=1))
    return rc


def _jit_of(obj):
    while not hasattr(obj, "arg_names") or not hasattr(obj, "src"):
        obj = obj.fn
    return obj


def _import_for_triton(module: str):
    """Import a case's kernel module with the real Triton and no GPU, as unseen_libraries does for its cases
    (bare packages, the one pretended CUDA device, the libraries' import-time device probes); GemLite asks
    Triton's active driver for the target when imported, which a CPU without TRITON_INTERPRET lacks: a
    driver that answers sm_90 stands in while it is imported."""
    import importlib

    import unseen_libraries as ul

    lib = next((lib for lib, m in ul.LIBS.items() if module.split(".")[0] == m.split(".")[0]), None)
    ul._pretend_one_cuda_device()
    if lib in ul.BARE_PACKAGES:
        ul._bare_package(lib)
    for name in ul.BARE_SUBPACKAGES.get(lib, ()):
        ul._bare_package(name)
    if lib == "unsloth":
        os.environ.setdefault("UNSLOTH_IS_PRESENT", "1")
    import triton

    drv = triton.runtime.driver
    stand_in, saved = None, getattr(drv, "_active", None)
    if lib == "gemlite":
        from triton.backends.compiler import GPUTarget

        class _Sm90Driver:
            def get_current_target(self):
                return GPUTarget("cuda", 90, 32)

        stand_in = _Sm90Driver()
        drv.set_active(stand_in)
    try:
        with ul._accelerator_is_cuda(lib), ul._gemlite_on_cpu(lib):
            return importlib.import_module(module)
    finally:
        if stand_in is not None:
            drv._active = saved  # (reset_active() would build the default driver, which a GPU-less box lacks)


def compile_triton(out: Path):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig_map = {"f32": "fp32", "f16": "fp16", "f64": "fp64", "float32": "fp32", "float16": "fp16", "float64": "fp64",
               "bfloat16": "bf16", "int1": "i1", "bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32",
               "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}
    for s in json.loads((out / "specs.json").read_text()):
        mod = _import_for_triton(s["module"])
        kern = _jit_of(getattr(mod, s["qualname"].split(".")[-1]))
        names = list(kern.arg_names)
        sig, consts, attrs = {}, {}, {}
        for n in names:
            t = s["signature"][n]
            if t == "constexpr":
                sig[n] = "constexpr"
                v = s["constants"][n]
                if isinstance(v, dict) and str(v.get("repr", "")).startswith("triton.language."):
                    v = getattr(triton.language, v["repr"].rsplit(".", 1)[1])  # a dtype constexpr (GemLite's)
                consts[(names.index(n),)] = v
            else:
                if t.startswith("*"):
                    e = t[1:]
                    sig[n] = "*" + sig_map.get(e, e)
                else:
                    sig[n] = sig_map.get(t, t)
                if n in s["divisible"]:
                    attrs[(names.index(n),)] = [["tt.divisibility", 16]]
        t0 = time.perf_counter()
        k = triton.compile(ASTSource(kern, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=s["num_warps"], num_stages=s["num_stages"]))
        (out / f"triton-{s['tag']}.seconds").write_text(f"{time.perf_counter() - t0:.2f}")
        (out / f"triton-{s['tag']}.ptx").write_text(k.asm["ptx"])
        (out / f"triton-{s['tag']}.ttgir").write_text(k.asm["ttgir"])
        (out / f"triton-{s['tag']}.smem").write_text(str(k.metadata.shared))
        print(s["tag"], "triton ok")


def report(out: Path):
    from benchmarks.tools.attention_bwd_compile import resources

    specs = json.loads((out / "specs.json").read_text())
    print(f"{'kernel':40} {'cfg':6} {'kl regs/spill/sass':>20} {'triton regs/spill/sass':>24} {'kl s':>6} "
          f"{'triton s':>8}")
    for s in specs:
        row = []
        for comp in ("kernellab", "triton"):
            p = out / f"{comp}-{s['tag']}.ptx"
            if p.exists():
                r = resources(p)
                row.append(f"{r['regs']}/{r['spill_bytes']}/{r.get('sass', '?')}")
            else:
                row.append("-")
        ts = out / f"triton-{s['tag']}.seconds"
        print(f"{s['tag']:40} {s['num_warps']}w/{s['num_stages']}s {row[0]:>20} {row[1]:>24} "
              f"{s.get('kernellab_compile_s', '-'):>6} {ts.read_text() if ts.exists() else '-':>8}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("kernellab", "triton", "report"))
    ap.add_argument("out")
    ap.add_argument("lib", nargs="?")
    ap.add_argument("op", nargs="?")
    ap.add_argument("--kernel")
    ap.add_argument("--env", action="append", default=[])
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "benchmarks" / "tools"))
    if a.mode == "kernellab":
        for kv in a.env:
            k, v = kv.split("=", 1)
            os.environ[k] = v
        return compile_kernellab(out, a.lib, a.op, a.kernel)
    if a.mode == "triton":
        return compile_triton(out)
    return report(out)


if __name__ == "__main__":
    sys.exit(main())
