"""Benchmark: kernellab's CPU interpreter against Triton's interpreter (TRITON_INTERPRET=1) on the corpus.

    .venv/bin/python benchmarks/interpreter.py              # every corpus case, writes benchmarks/results/
    .venv/bin/python benchmarks/interpreter.py --profile    # also cProfile kernellab where it misses the target

Both interpreters run the same kernel texts (tests/corpus.py `make_kernels`), each in its own
subprocess (Triton's needs TRITON_INTERPRET=1 before `import triton`, and neither should see the
other's imports, caches or monkey-patching). The two subprocesses run one after the other, never at
the same time. In each, per case: one warm-up run (compiles; its results are checked against the
float64 torch reference with `corpus.check`), then timed runs, each also checked: at least `--reps`
(5), and more (up to `--max-reps`) until `--min-time` seconds of launches were timed, so that the
fast cases get enough samples for a stable median on a busy machine.

What is timed: only the kernel launches. The kernels handed to `Case.run` are wrapped so that
`kernel[grid](*args)` is timed with `time.perf_counter` (grid function, argument binding, the
interpreter run and, for Triton, its host copies); making the inputs and the float64 reference is
not. A case that launches twice (dropout) is timed over both launches. The whole `case.run` is timed
too and reported alongside, for reference. Seconds are the median over the timed runs.

Triton is only needed here (not a kernellab dependency): `pip install triton==3.9.0`. Without it the
script says so and exits 0 with a "skipped" note.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TARGET_SPEEDUP = 2.0

# The size preset per case: chosen so that one launch takes roughly 0.05-2 s on a CPU (at least for
# Triton's interpreter, the slower reference). A dict instead of a preset name runs the case's runner
# with those sizes (same kernel, larger problem), for cases whose "large" preset is too quick to time.
SIZES = {
    "layer_norm": {"rows": 128, "cols": 1024},  # "large" (256 rows) takes ~2.7 s a launch in Triton's
    "loop_carried": {"steps": 2000},  # "large" (200 steps) takes ~30 ms in Triton's
    "dropout_rand": {"n": 1 << 17},  # "large" (1 << 18) takes ~2-3 s (two launches) in Triton's
}
DEFAULT_SIZE = "large"

IMPLS = ("kernellab", "triton")


# ---------------------------------------------------------------------------------------------
# Worker side: runs inside the subprocess for one implementation


class _Clock:
    def __init__(self):
        self.seconds = 0.0
        self.launches = 0


class _TimedKernel:
    """Wraps a jit kernel so that `k[grid](*args, **kwargs)` adds its wall time to a clock."""

    def __init__(self, kernel, clock: _Clock):
        self._kernel, self._clock = kernel, clock

    def __getitem__(self, grid):
        launcher = self._kernel[grid]
        clock = self._clock

        def launch(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return launcher(*args, **kwargs)
            finally:
                clock.seconds += time.perf_counter() - t0
                clock.launches += 1

        return launch

    def __getattr__(self, name):
        return getattr(self._kernel, name)


def _load_impl(impl):
    """(jit module, language module, versions) for one implementation; imports only that one."""
    if impl == "triton":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("the triton worker must run with TRITON_INTERPRET=1")
        import triton
        import triton.language as tl

        return triton, tl, {"triton": triton.__version__}
    import kernellab
    import kernellab.language as tl

    return kernellab, tl, {"kernellab": kernellab.__version__}


def _case_for(case, size):
    """The case and the preset name to run it with; a dict size becomes an extra 'bench' preset."""
    if isinstance(size, str):
        return case, size
    from tests.corpus import Case

    return Case(case.name, case.kernel, case.fn, {**case.sizes, "bench": dict(size)}), "bench"


def _error_text(e: BaseException, limit=600) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _bench_case(case, size, kernels, reps, max_reps, min_time):
    from tests.corpus import check

    runnable, preset = _case_for(case, size)
    clock = _Clock()
    timed = {name: _TimedKernel(k, clock) for name, k in kernels.items()}
    res = {"ok": None, "error": None, "seconds": None, "min_seconds": None, "runs": [], "whole_run_seconds": None,
           "warmup_seconds": None, "launches_per_run": None}

    def one(seed):
        clock.seconds, clock.launches = 0.0, 0
        t0 = time.perf_counter()
        outs, refs, tol = runnable.run(timed, "cpu", seed=seed, size=preset)
        whole = time.perf_counter() - t0
        return outs, refs, tol, clock.seconds, whole, clock.launches

    # warm-up: compiles; a failure to run ends the case, a wrong result is recorded and timing goes on
    try:
        outs, refs, tol, launch_s, _, launches = one(0)
    except Exception as e:
        res["ok"], res["error"] = False, _error_text(e)
        return res
    res["warmup_seconds"], res["launches_per_run"] = launch_s, launches
    failures = []
    try:
        check(outs, refs, tol)
    except Exception as e:
        failures.append(f"seed 0: {_error_text(e)}")

    launch_times, whole_times = [], []
    for rep in range(max(reps, max_reps)):
        if rep >= reps and sum(launch_times) >= min_time:
            break
        gc.collect()
        try:
            outs, refs, tol, launch_s, whole_s, _ = one(rep + 1)
        except Exception as e:
            failures.append(f"seed {rep + 1}: {_error_text(e)}")
            break
        launch_times.append(launch_s)
        whole_times.append(whole_s)
        try:
            check(outs, refs, tol)
        except Exception as e:
            failures.append(f"seed {rep + 1}: {_error_text(e)}")
    res["ok"] = not failures
    res["error"] = failures[0] if failures else None
    if launch_times:
        res["seconds"] = statistics.median(launch_times)
        res["whole_run_seconds"] = statistics.median(whole_times)
        res["min_seconds"] = min(launch_times)
        res["runs"] = launch_times
    return res


def worker(impl, out_path, reps, max_reps, min_time, only):
    sys.path.insert(0, str(ROOT))
    try:
        jit, tl, versions = _load_impl(impl)
    except ImportError as e:
        Path(out_path).write_text(json.dumps({"skipped": _error_text(e)}))
        return 0
    import numpy
    import torch

    from tests.corpus import CASES, make_kernels

    versions.update(numpy=numpy.__version__, torch=torch.__version__)
    kernels = make_kernels(jit, tl)
    results = {}
    for case in CASES:
        if only and case.name not in only:
            continue
        size = SIZES.get(case.name, DEFAULT_SIZE)
        t0 = time.perf_counter()
        results[case.name] = r = _bench_case(case, size, kernels, reps, max_reps, min_time)
        status = "ok" if r["ok"] else f"FAILED ({r['error']})"
        secs = f"{r['seconds'] * 1e3:9.1f} ms x{len(r['runs']):<3d}" if r["seconds"] is not None else " " * 16
        print(f"  [{impl:9s}] {case.name:18s} {secs}  {status}  ({time.perf_counter() - t0:.1f} s total)",
              file=sys.stderr, flush=True)
    info = {"versions": versions, "torch_threads": torch.get_num_threads(), "results": results}
    Path(out_path).write_text(json.dumps(info))
    return 0


def profile_worker(names, top):
    """cProfile kernellab's launches (after a warm-up) for the named cases; prints the hotspots."""
    import cProfile
    import io
    import pstats

    sys.path.insert(0, str(ROOT))
    import kernellab
    import kernellab.language as tl
    from tests.corpus import CASES, make_kernels

    kernels = make_kernels(kernellab, tl)
    for case in CASES:
        if case.name not in names:
            continue
        runnable, preset = _case_for(case, SIZES.get(case.name, DEFAULT_SIZE))
        runnable.run(kernels, "cpu", seed=0, size=preset)  # warm-up (compile)
        prof = cProfile.Profile()

        class _Prof:
            def __init__(self, k):
                self.k = k

            def __getitem__(self, grid):
                launcher = self.k[grid]

                def launch(*a, **kw):
                    prof.enable()
                    try:
                        return launcher(*a, **kw)
                    finally:
                        prof.disable()

                return launch

        runnable.run({n: _Prof(k) for n, k in kernels.items()}, "cpu", seed=1, size=preset)
        for key in ("tottime", "cumulative"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(top)
            lines = buf.getvalue().strip().splitlines()
            start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
            total = next((line.strip() for line in lines if "function calls" in line), "")
            print(f"\n=== profile {case.name} (kernellab), by {key}: {total}")
            print("\n".join(lines[start:]))
    return 0


# ---------------------------------------------------------------------------------------------
# Driver side


def _run_worker(impl, args, reps):
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if impl == "triton":
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{impl}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", impl, "--worker-out", str(out),
               "--reps", str(reps), "--max-reps", str(args.max_reps), "--min-time", str(args.min_time)]
        if args.cases:
            cmd += ["--cases", *args.cases]
        proc = subprocess.run(cmd, env=env, cwd=ROOT, timeout=args.timeout)
        if proc.returncode != 0 or not out.exists():
            return {"crashed": f"{impl} worker exited with status {proc.returncode}"}
        return json.loads(out.read_text())


def _triton_importable():
    env = dict(os.environ, TRITON_INTERPRET="1")
    if importlib.util.find_spec("triton") is None:
        return False, "triton is not installed"
    proc = subprocess.run([sys.executable, "-c", "import triton, triton.language"], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return False, (proc.stderr.strip().splitlines() or ["import failed"])[-1]
    return True, ""


def _git_commit():
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        commit = out.stdout.strip() or None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return commit, bool(dirty)
    except Exception:
        return None, None


def _source_digest():
    """sha256 of kernellab's sources: identifies the interpreter measured when the tree is dirty."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted((ROOT / "kernellab").rglob("*.py")):
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _fmt_ms(s):
    return f"{s * 1e3:.1f}" if s is not None else "-"


def _ok_str(r):
    if r.get("ok") is None:
        return "-"
    return "ok" if r["ok"] else ("err" if r.get("seconds") is None else "WRONG")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="least timed runs per case (median reported; at least 5)")
    ap.add_argument("--max-reps", type=int, default=30, help="most timed runs per case")
    ap.add_argument("--min-time", type=float, default=1.0,
                    help="keep timing a case (up to --max-reps runs) until this many seconds of launches")
    ap.add_argument("--cases", nargs="*", default=None, help="only these corpus cases")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/<date>-...)")
    ap.add_argument("--profile", action="store_true",
                    help=f"cProfile kernellab on cases below {TARGET_SPEEDUP}x (or on --profile-cases)")
    ap.add_argument("--profile-cases", nargs="*", default=None)
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per worker subprocess")
    ap.add_argument("--worker", choices=IMPLS, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    ap.add_argument("--profile-worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    reps = max(5, args.reps)

    if args.worker:
        return worker(args.worker, args.worker_out, reps, args.max_reps, args.min_time, args.cases)
    if args.profile_worker:
        return profile_worker(args.profile_worker, args.profile_top)

    ok, why = _triton_importable()
    if not ok:
        print(f"skipped: Triton's interpreter is not available ({why}); install it for this benchmark only "
              "with `.venv/bin/pip install triton==3.9.0`.")
        return 0

    sys.path.insert(0, str(ROOT))
    from tests.corpus import CASES

    names = [c.name for c in CASES if not args.cases or c.name in args.cases]
    print(f"benchmarking {len(names)} corpus cases, >= {reps} timed runs each (kernel launches only)",
          file=sys.stderr, flush=True)
    load_before, digest = _loadavg(), _source_digest()
    runs = {impl: _run_worker(impl, args, reps) for impl in IMPLS}
    load_after = _loadavg()
    for impl, info in runs.items():
        if "crashed" in info:
            print(f"error: {info['crashed']}", file=sys.stderr)
            return 1
    if "skipped" in runs["triton"]:
        print(f"skipped: triton could not be imported in the worker ({runs['triton']['skipped']})")
        return 0

    versions = {"python": platform.python_version()}
    for impl in IMPLS:
        versions.update(runs[impl]["versions"])
    commit, dirty = _git_commit()
    today = datetime.date.today().isoformat()
    cases = []
    for name in names:
        case = next(c for c in CASES if c.name == name)
        size = SIZES.get(name, DEFAULT_SIZE)
        kl_r = runs["kernellab"]["results"][name]
        tr_r = runs["triton"]["results"][name]
        speedup = None
        if kl_r["seconds"] and tr_r["seconds"]:
            speedup = tr_r["seconds"] / kl_r["seconds"]
        cases.append({
            "case": name,
            "kernel": case.kernel,
            "size": size if isinstance(size, str) else "custom",
            "size_params": case.sizes[size] if isinstance(size, str) else size,
            "kernellab": kl_r,
            "triton": tr_r,
            "speedup": speedup,
            "speedup_of_min": (tr_r["min_seconds"] / kl_r["min_seconds"]
                               if kl_r["min_seconds"] and tr_r["min_seconds"] else None),
            "meets_target": None if speedup is None else speedup >= TARGET_SPEEDUP,
        })

    report = {
        "benchmark": "cpu-interpreter: kernellab interpreter vs Triton interpreter (TRITON_INTERPRET=1)",
        "date": today,
        "timestamp": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "machine": platform.machine(), "cpu": _cpu_model(),
                    "cpu_count": os.cpu_count(),
                    "torch_threads": runs["kernellab"].get("torch_threads"),
                    "loadavg_before": load_before, "loadavg_after": load_after},
        "versions": versions,
        "git": {"commit": commit, "dirty": dirty, "kernellab_sources_sha256": digest,
                "kernellab_sources_changed_during_run": digest != _source_digest()},
        "method": {
            "timed": "kernel launches only: wall clock (time.perf_counter) around kernel[grid](*args) inside the "
                     "corpus runner; input creation and the float64 reference are excluded "
                     "(whole_run_seconds times all of case.run, for reference)",
            "statistic": f"median (and min) of >= {reps} runs (more, up to {args.max_reps}, until "
                         f"{args.min_time:g} s of launches) after 1 warm-up run (compile); fresh inputs per run",
            "isolation": "each interpreter in its own subprocess, run one after the other",
            "correctness": "corpus.check against the float64 torch reference on the warm-up and every timed run",
            "target_speedup": TARGET_SPEEDUP,
            "speedup": "triton seconds / kernellab seconds (medians; speedup_of_min: of the fastest runs)",
        },
        "cases": cases,
    }
    out = args.out or RESULTS / f"{today}-cpu-interpreter.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    slow = [c["case"] for c in cases if c["meets_target"] is False]
    if args.profile or args.profile_cases:
        targets = args.profile_cases or slow
        if targets:
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--profile-worker", *targets,
                            "--profile-top", str(args.profile_top)], cwd=ROOT,
                           env={**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
                                "PYTHONPATH": str(ROOT)}, timeout=args.timeout)
        else:
            print("\nno case below the target speedup; nothing to profile")

    # the table, last
    print(f"\nwrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    print("times: median kernel-launch wall clock; speedup = triton / kernellab; "
          f"target >= {TARGET_SPEEDUP:g}x; ok = kernellab/triton correctness\n")
    header = f"{'case':20s} {'kernellab ms':>12s} {'triton ms':>10s} {'speedup':>8s}  ok (kl/triton)"
    print(header)
    print("-" * len(header))
    for c in cases:
        sp = f"{c['speedup']:.2f}x" if c["speedup"] is not None else "-"
        flag = "" if c["meets_target"] is not False else "  < target"
        print(f"{c['case']:20s} {_fmt_ms(c['kernellab']['seconds']):>12s} {_fmt_ms(c['triton']['seconds']):>10s} "
              f"{sp:>8s}  {_ok_str(c['kernellab'])}/{_ok_str(c['triton'])}{flag}")
    errors = [(c["case"], impl, c[impl]["error"]) for c in cases for impl in IMPLS if c[impl]["error"]]
    for name, impl, err in errors:
        print(f"  {name}: {impl}: {err[:160]}")
    measured = [c for c in cases if c["speedup"] is not None]
    if measured:
        met = sum(c["meets_target"] for c in measured)
        print(f"\n{met}/{len(measured)} measured cases meet the {TARGET_SPEEDUP:g}x target"
              + (f"; below: {', '.join(slow)}" if slow else ""))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
