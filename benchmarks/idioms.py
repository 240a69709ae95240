"""Equivalent formulations of matmul, a linear layer with its fused epilogue, softmax, layer norm, a row reduction,
a row-wise prefix sum, an atomic weight gradient, ..., rotary embeddings, int8 row quantization, a 3x3 stencil and
paged-KV decode attention (tests/idioms.py),
each launched with several configs (and the matmul ones through an autotuner too),
kernellab against Triton compiling the same text, on the same inputs in one process.

Every variant is checked against a float64 torch reference on both compilers before it is timed.
Writes benchmarks/results/<date>-<gpu>-idioms.json with every row and, per workload, the minimum and
the geometric mean of kernellab time / Triton time inverted to a speed ratio (kl/Triton > 1: faster).

    python benchmarks/idioms.py [workload ...]     # needs a CUDA GPU, torch and triton
    python benchmarks/idioms.py transpose --also-env KERNELLAB_CONVERSION_LDMATRIX=on   # one more kernellab column
                                      # per VAR=VALUE: fresh kernels built and timed with it set, in the same rounds
    python benchmarks/idioms.py quantize --fixed-order --settle 0 --rounds 3   # the timing before 2026-11-27's
                                      # quant19 (each round kernellab first, no settle round; see time_rounds)
    python benchmarks/idioms.py --texts benchmarks/heldout_texts3.py [case ...]   # a held-out texts module instead
                                      # of tests/idioms.py: its CASE_DEFS, every config, checked on the GPU at its
                                      # test size on both sides (check(..., device="cuda")), timed at its GPU size
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matmul import env_setting  # noqa: E402  (VAR=VALUE around a build, as matmul.py's --also-env)
from benchmarks.memory_bound import bench, write_results  # noqa: E402
from tests.idioms import make_idioms  # noqa: E402

ROUNDS = 4  # even: with every other round reversed, each implementation's mean place in time is the same


def _check(w, v, kernel, x, config, launch):
    w.poison(x)
    launch(kernel, x, config)
    import torch

    torch.cuda.synchronize()
    got = w.result(x)
    ref = w.expected(x, v)
    err = ((got - ref).norm() / ref.norm()).item()
    if not (err < w.tol):
        raise AssertionError(f"relative error {err:.2e} > {w.tol}")
    return err


def _figure(w, x, seconds):
    kind, amount = w.flops_or_bytes(x)
    return {"tflops": amount / seconds / 1e12} if kind == "flop" else {"gbps": amount / seconds / 1e9}


def _autotuned(jit_module, kernel, configs):
    cfgs = [jit_module.Config({k: c[k] for k in c if k not in ("num_warps", "num_stages")},
                              num_warps=c["num_warps"], num_stages=c["num_stages"]) for c in configs]
    return jit_module.autotune(configs=cfgs, key=["M", "N", "K"])(kernel)


def _warm_up_the_gpu(seconds=1.0):
    """Keep the GPU busy for a while so that its clocks are up before the first timing."""
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    t0 = time.time()
    while time.time() - t0 < seconds:
        a @ a
        torch.cuda.synchronize()


def time_rounds(fns, settings, rounds=ROUNDS, settle=1, fixed_order=False, timer=None):
    """Each implementation's seconds in `rounds` timed rounds, and the order of each timed round.

    Alternating rounds, so that clock changes between them fall on all alike: after the matmul warm-up the clocks
    settle for a few hundred ms (quantize's samples fell 77 -> 67 us in time order on the H200 of 2026-11-27,
    benchmarks/NOTES.md, issue 14), so `settle` untimed rounds go first, and every other round runs in the
    reverse order (A B C, C B A, ...: over an even number of rounds each implementation's mean place in time is the
    same, so a linear drift falls on all alike; a fixed order charged it to the one timed first, kernellab, in
    every round; `fixed_order` keeps that old order to compare). `timer(fn)` -> seconds, `bench` by default."""
    timer = timer or (lambda fn: bench(fn, warmup=10, rep=100))
    names = list(fns)
    times = {impl: [] for impl in names}
    orders = []
    for r in range(settle + rounds):
        order = names if fixed_order or r % 2 == 0 else names[::-1]
        for impl in order:
            with env_setting(settings.get(impl)):
                t = timer(fns[impl])
            if r >= settle:
                times[impl].append(t)
        if r >= settle:
            orders.append(order)
    return times, orders


def run(names=None, also_env=(), rounds=ROUNDS, settle=1, fixed_order=False):
    import triton
    import triton.language as trtl

    import kernellab
    import kernellab.language as kltl

    kl_w = make_idioms(kernellab.jit, kltl)
    tr_w = {w.name: w for w in make_idioms(triton.jit, trtl)}
    # per --also-env setting, the same texts as fresh kernellab kernels (no specialization shared)
    alt_w = {s: {w.name: w for w in make_idioms(kernellab.jit, kltl)} for s in also_env}
    rows = []
    for w in kl_w:
        if names and w.name not in names:
            continue
        x = w.inputs(w.sizes["bench"], "cuda", seed=0)
        _warm_up_the_gpu()
        tw = {v.name: v for v in tr_w[w.name].variants}
        aw = {s: {v.name: v for v in alt_w[s][w.name].variants} for s in also_env}
        for v in w.variants:
            runs = [(f"{cfg}", v.launch, v.kernel, tw[v.name].kernel, cfg,
                     {s: aw[s][v.name].kernel for s in also_env}) for cfg in v.configs]
            if v.autotune:
                # the variant's own launcher with no config: the autotuner picks it (and the grid asks it)
                runs.append(("autotune", v.launch, _autotuned(kernellab, v.kernel, v.configs),
                             _autotuned(triton, tw[v.name].kernel, v.configs), None,
                             {s: _autotuned(kernellab, aw[s][v.name].kernel, v.configs) for s in also_env}))
            for label, launch, klk, trk, cfg, alts in runs:
                row = {"workload": w.name, "variant": v.name, "config": label, **({"params": v.params} if v.params
                                                                                  else {})}
                fns, settings = {}, {}
                impls = [("kernellab", klk, None), ("triton", trk, None)] + \
                    [(f"kernellab[{s}]", k, s) for s, k in alts.items()]
                for impl, k, setting in impls:
                    try:  # compile and check (an autotuned kernel tunes on its first call)
                        with env_setting(setting):
                            if cfg is None:
                                launch(k, x, cfg)
                            row[impl] = {"rel_err": _check(w, v, k, x, cfg, launch)}
                        fns[impl] = (lambda k=k: launch(k, x, cfg))
                        settings[impl] = setting
                    except Exception as e:  # a failing variant is a result, not a crash of the run
                        row[impl] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                _warm_up_the_gpu(0.3)
                times, orders = time_rounds(fns, settings, rounds, settle, fixed_order)
                row["timing"] = {"rounds": rounds, "settle": settle, "order": orders}
                for impl, ts in times.items():
                    s_med = statistics.median(ts)
                    row[impl].update(seconds=s_med, rounds=ts, **_figure(w, x, s_med))
                if "kernellab" in fns and "triton" in fns:
                    row["kl_over_triton"] = row["triton"]["seconds"] / row["kernellab"]["seconds"]
                for s in alts:
                    if f"kernellab[{s}]" in fns and "triton" in fns:
                        row[f"kl_over_triton[{s}]"] = row["triton"]["seconds"] / row[f"kernellab[{s}]"]["seconds"]
                rows.append(row)
                print(_fmt(row), flush=True)
    return rows


def _load_texts(path, name):
    """`path` imported afresh as module `name` (its kernels new objects of whatever `triton` is now)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_texts_both(path, also_env=()):
    """The texts module (it imports `triton`) twice: with kernellab.compat serving `triton` (and once more per
    --also-env setting: fresh kernels), then, the hook removed, with the real Triton. Call it before anything
    imports the real Triton in this process."""
    import kernellab.compat

    kernellab.compat.install()
    try:
        kl = _load_texts(path, "_texts_kernellab")
        alts = {s: _load_texts(path, f"_texts_kernellab_{i}") for i, s in enumerate(also_env)}
    finally:
        kernellab.compat.uninstall()
    import triton  # noqa: F401  (the real one from here on)

    return kl, _load_texts(path, "_texts_triton"), alts


def run_texts(path, names=None, also_env=(), rounds=ROUNDS, settle=1, fixed_order=False, device="cuda",
              timer=None, with_triton=True, size="gpu"):
    """Every case and config of a held-out texts module (heldout_texts3.py's format: CASE_DEFS, check(name, configs,
    device), bench_inputs(name, device)): each side checked against the float64 reference at the test size on the
    GPU, then timed at the GPU size on the same inputs, rounds alternating as in `run`. Rows as `run`'s.
    `device="cpu"`, `timer`, `with_triton=False`, `size="test"`: a dry run of the harness on the CPU interpreter
    (tests/test_heldout_texts3.py)."""
    if with_triton:
        kl_mod, tr_mod, alt_mods = load_texts_both(path, also_env)
    else:
        import kernellab.compat

        kernellab.compat.install()
        kl_mod, tr_mod = _load_texts(path, "_texts_kernellab"), None
        alt_mods = {s: _load_texts(path, f"_texts_kernellab_{i}") for i, s in enumerate(also_env)}
    gpu = device != "cpu"
    rows = []
    for name, case in kl_mod.CASE_DEFS.items():
        if names and name not in names:
            continue
        x = kl_mod.bench_inputs(name, device) if size == "gpu" else \
            case.inputs(case.test_size, kl_mod._maker(0, device))
        if gpu:
            _warm_up_the_gpu()
        for cfg in case.configs:
            row = {"workload": name, "variant": "text", "config": f"{cfg}"}
            fns, settings = {}, {}
            impls = [("kernellab", kl_mod, None)] + ([("triton", tr_mod, None)] if tr_mod else []) + \
                [(f"kernellab[{s}]", m, s) for s, m in alt_mods.items()]
            for impl, mod, setting in impls:
                try:
                    with env_setting(setting):
                        mod.check(name, configs=[cfg], device=device)
                        mod.CASE_DEFS[name].launch(x, cfg)  # compile at the GPU size before timing
                    row[impl] = {"checked": True}
                    fns[impl] = (lambda mod=mod: mod.CASE_DEFS[name].launch(x, cfg))
                    settings[impl] = setting
                except Exception as e:  # a failing side is a result, not a crash of the run
                    row[impl] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            if gpu:
                _warm_up_the_gpu(0.3)
            times, orders = time_rounds(fns, settings, rounds, settle, fixed_order, timer)
            row["timing"] = {"rounds": rounds, "settle": settle, "order": orders}
            moved = case.moves(x) if case.moves else None
            for impl, ts in times.items():
                s_med = statistics.median(ts)
                row[impl].update(seconds=s_med, rounds=ts)
                if isinstance(moved, tuple):
                    row[impl]["tflops"] = moved[1] / s_med / 1e12
                elif moved:
                    row[impl]["gbps"] = moved / s_med / 1e9
            if "kernellab" in fns and "triton" in fns:
                row["kl_over_triton"] = row["triton"]["seconds"] / row["kernellab"]["seconds"]
            for s in alt_mods:
                if f"kernellab[{s}]" in fns and "triton" in fns:
                    row[f"kl_over_triton[{s}]"] = row["triton"]["seconds"] / row[f"kernellab[{s}]"]["seconds"]
            rows.append(row)
            print(_fmt(row), flush=True)
    return rows


def _fmt(row):
    def fig(impl):
        r = row.get(impl, {})
        if "error" in r:
            return "ERR".rjust(8)
        return f"{r.get('tflops', r.get('gbps', 0)):8.1f}"

    ratio = f"{row['kl_over_triton']:6.2f}" if "kl_over_triton" in row else "     -"
    alts = "".join(f"  [{k[15:-1]}] {row[k]:5.2f}" for k in row if k.startswith("kl_over_triton["))
    return f"{row['workload'][:20]:<12} {row['variant']:<13} {row['config'][:60]:<60} {fig('kernellab')} " \
           f"{fig('triton')} {ratio}{alts}"


def summarize(rows):
    out = {}
    for name in dict.fromkeys(r["workload"] for r in rows):
        ratios = [r["kl_over_triton"] for r in rows if r["workload"] == name and "kl_over_triton" in r]
        errors = [f"{r['variant']} {r['config']}" for r in rows if r["workload"] == name and
                  "kl_over_triton" not in r]
        out[name] = {"min": min(ratios) if ratios else None,
                     "geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
                     "n": len(ratios), "not_compared": errors}
        keys = dict.fromkeys(k for r in rows if r["workload"] == name for k in r if k.startswith("kl_over_triton["))
        for k in keys:  # the --also-env columns
            alt = [r[k] for r in rows if r["workload"] == name and k in r]
            out[name][k[len("kl_over_triton"):]] = {"min": min(alt), "n": len(alt),
                                                    "geomean": math.exp(sum(map(math.log, alt)) / len(alt))}
    return out


def main():
    import torch

    import kernellab

    ap = argparse.ArgumentParser(description="idioms against Triton on the GPU")
    ap.add_argument("workloads", nargs="*")
    ap.add_argument("--also-env", action="append", default=[], metavar="VAR=VALUE",
                    help="one more kernellab column built and timed with VAR=VALUE set (repeatable)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="timed rounds (median kept; default %(default)s)")
    ap.add_argument("--settle", type=int, default=1,
                    help="untimed rounds after the warm-up, while the clocks settle (default %(default)s)")
    ap.add_argument("--fixed-order", action="store_true",
                    help="every round in the same order (kernellab first), as before 2026-11-27's quant19")
    ap.add_argument("--texts", metavar="FILE",
                    help="time a held-out texts module's cases (benchmarks/heldout_texts3.py) instead of the idioms")
    a = ap.parse_args()
    names = a.workloads
    t0 = time.time()
    if a.texts:
        rows = run_texts(a.texts, names, a.also_env, rounds=a.rounds, settle=a.settle, fixed_order=a.fixed_order)
    else:
        rows = run(names, a.also_env, rounds=a.rounds, settle=a.settle, fixed_order=a.fixed_order)
    import triton

    kind = Path(a.texts).stem if a.texts else "idioms"
    if names:  # a partial run replaces its workloads' rows in the day's file for this GPU, keeping the others
        old = Path(os.environ.get("KERNELLAB_RESULTS_DIR", ROOT / "benchmarks" / "results")) / \
            f"{datetime.date.today().isoformat()}-{torch.cuda.get_device_name().replace(' ', '_')}-{kind}.json"
        if old.exists():
            rows = [r for r in json.loads(old.read_text())["rows"] if r["workload"] not in names] + rows
    summary = summarize(rows)
    result = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "versions": {"kernellab": getattr(kernellab, "__version__", "dev"), "triton": triton.__version__,
                           "torch": torch.__version__, "python": platform.python_version()},
              "figure": "kl_over_triton = triton seconds / kernellab seconds (> 1: kernellab faster); matmul in "
                        "TFLOP/s, the others in GB/s of the bytes each must move",
              "rows": rows, "summary": summary, "also_env": a.also_env, "wall_s": time.time() - t0,
              "timing": {"rounds": a.rounds, "settle": a.settle, "fixed_order": a.fixed_order}}
    path = write_results(result, kind)
    print(f"\n{'workload':<12} {'min':>6} {'geomean':>8} {'n':>3}  not compared")
    for name, s in summary.items():
        mn = f"{s['min']:6.2f}" if s["min"] else "     -"
        gm = f"{s['geomean']:8.2f}" if s["geomean"] else "       -"
        print(f"{name:<12} {mn} {gm} {s['n']:3d}  {', '.join(s['not_compared'])[:80]}")
        for k, alt in s.items():
            if k.startswith("["):
                print(f"  {k:<10} {alt['min']:6.2f} {alt['geomean']:8.2f} {alt['n']:3d}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
