"""attorch's own pytest suite (BobMcDear/attorch, tests/test_*.py) run against kernellab, or against Triton.

    python benchmarks/tools/attorch_tests.py --pack                  # .ulibs/attorch.tar.xz from the mirror
    python benchmarks/tools/attorch_tests.py --device cpu --quick --small-shapes --max-cases 30   # ~3-9 min
    /tmp/tri/bin/python benchmarks/tools/attorch_tests.py --device cpu --side triton --quick --small-shapes \
        --max-cases 30 --failed-of kernellab                          # Triton's interpreter on our failures
    # the GPU machine (carry .ulibs), one command per side, each under 9 minutes:
    python3 benchmarks/tools/attorch_tests.py --device cuda --side triton --quick --max-cases 40 -n 8 \
        --case-timeout 120 --budget 450 --out $OUT/attorch-triton.json
    python3 benchmarks/tools/attorch_tests.py --device cuda --side kernellab --quick --max-cases 40 -n 8 \
        --case-timeout 120 --budget 450 --out $OUT/attorch-kernellab.json
    python benchmarks/tools/attorch_tests.py --merge attorch-triton.json attorch-kernellab.json  # dated file

The tool is also the pytest plugin of the run it starts (`-p attorch_tests`): on the kernellab side it installs
kernellab.compat before anything imports triton (as triton_tests_plugin.py does for Triton's own tests); on the
triton side it leaves the real Triton package alone (with --device cpu that is Triton's interpreter,
TRITON_INTERPRET=1).

attorch and its tests hard-code the GPU ('cuda' tensors, `autocast('cuda')`, `custom_fwd(device_type='cuda')`,
`torch.cuda.get_device_capability()`). With --device cpu the plugin runs them unchanged on the CPU: a torch
function mode turns every 'cuda' device a torch call names into 'cpu', `autocast('cuda')` becomes CPU autocast
to float16 (CUDA's autocast type; the `torch.is_autocast_enabled()`/`get_autocast_dtype('cuda')` that attorch and
torch.amp ask answer for the CPU's), and the capability is an H100's (9, 0). Both sides get the same mapping, so
a case that fails on both is the mapping's or attorch's, not kernellab's. Triton's interpreter on a machine
without a GPU cannot autotune (no driver to time with): there the plugin makes every config tie, so the first
is taken, as kernellab's interpreter does.

Selection: attorch's tests take `--subset` and then *return early* (a trivial pass) for shapes outside
`default_shapes(subset=True)`; --quick passes --subset and deselects those cases instead, so the counts are of
cases that ran. --max-numel drops cases whose input shape has more elements (the interpreter's cost);
--small-shapes replaces attorch's shapes by smaller ones of the same ranks (SMALL_SHAPES), for the
interpreter, whose conv and pooling at attorch's sizes take minutes a case. --max-cases keeps that many cases
per test function, a fixed random sample of its parameter grid. Cases of fp16 inputs without autocast are
deselected: every attorch test returns at once for them.

attorch comes from --src (a checkout holding attorch/ and tests/), or from .ulibs/attorch.tar.xz (made by --pack
from the git mirror, or from --src), unpacked into .ulibs-run/attorch. Carry ".ulibs" to the GPU machine.

Results: benchmarks/results/<date>-<gpu or cpu>-attorch.json, per side and test file: cases, passed / failed /
timed out (--case-timeout; counted apart) / skipped / not run (cut by --budget), seconds, and each failing test's
id with a one-line reason. A run of one side keeps the other sides' entries of the same file; --failed-of SIDE
runs only the cases SIDE failed (e.g. Triton on kernellab's failures), recorded as '<side>_on_failures_of_SIDE'.

What fails on the CPU, on both sides (2026-11-27, attorch 67c2772): attorch's own (its attention module raises
"deprecated" when built; conv with a tuple stride or kernel_size and groups that do not divide out_channels);
torch's CPU kernels, where attorch matches CUDA's (hardswish's gradient at +-3); CPU autocast, whose op lists
differ from CUDA's (softmax, log_softmax and layer_norm stay fp16 on the CPU, fp32 on CUDA; avg_pool) and whose
fp16 reference ops round otherwise (1e-3 tolerances on fp16 outputs). The GPU run is the one that counts.
"""
from __future__ import annotations

import os
import sys

from pytest import hookimpl as pytest_hookimpl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # kernellab's root
MIRROR = "/work/.mirror/BobMcDear+attorch/repo"
TARBALL = os.path.join(ROOT, ".ulibs", "attorch.tar.xz")
UNPACKED = os.path.join(ROOT, ".ulibs-run", "attorch")

# ---------------------------------------------------------------------------------------------------------
# The pytest plugin half (imported by pytest with -p attorch_tests, in the controller and in xdist workers)

_ENV_SIDE, _ENV_DEVICE, _ENV_NUMEL = "ATTORCH_TESTS_SIDE", "ATTORCH_TESTS_DEVICE", "ATTORCH_TESTS_MAX_NUMEL"
_ENV_CASES, _ENV_QUICK, _ENV_LOG = "ATTORCH_TESTS_MAX_CASES", "ATTORCH_TESTS_QUICK", "ATTORCH_TESTS_LOG"
_ENV_TIMEOUT, _ENV_IDS = "ATTORCH_TESTS_CASE_TIMEOUT", "ATTORCH_TESTS_IDS"
_ENV_SMALL, _ENV_BUILD = "ATTORCH_TESTS_SMALL_SHAPES", "ATTORCH_TESTS_BUILD_GPU"


def _cuda_to_cpu():
    """Run code written for 'cuda' tensors on the CPU, unchanged (see the module's docstring)."""
    import torch
    from torch.amp import autocast_mode
    from torch.overrides import TorchFunctionMode

    def cpu(d):
        if isinstance(d, torch.device) and d.type == "cuda":
            return torch.device("cpu")
        if isinstance(d, str) and d.startswith("cuda"):
            return "cpu"
        return d

    to, cuda = torch.Tensor.to, torch.Tensor.cuda

    class CudaToCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if "device" in kwargs:
                kwargs = dict(kwargs, device=cpu(kwargs["device"]))
            if func is cuda:
                return args[0]
            if func is to and len(args) > 1:
                args = (args[0], cpu(args[1])) + tuple(args[2:])
            return func(*args, **kwargs)

    CudaToCpu().__enter__()  # for the whole process: pytest runs every test inside it

    init = autocast_mode.autocast.__init__

    def autocast_init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type == "cuda":
            device_type, dtype = "cpu", dtype or torch.float16
        init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    autocast_mode.autocast.__init__ = autocast_init
    is_enabled, get_dtype = torch.is_autocast_enabled, torch.get_autocast_dtype
    torch.is_autocast_enabled = lambda device_type="cuda": is_enabled("cpu" if device_type == "cuda" else device_type)
    torch.get_autocast_dtype = lambda device_type: get_dtype("cpu" if device_type == "cuda" else device_type)
    torch.set_autocast_dtype("cpu", torch.float16)
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)


# --small-shapes: attorch's subset scaled down for the interpreter, as many per rank (1-D to 4-D), every last dim
# even (GLU halves it)
SMALL_SHAPES = [(96,), (768,), (4, 200), (8, 128), (2, 96, 50), (4, 64, 24), (2, 16, 14, 14), (4, 8, 8, 8)]


def _small_shapes():
    """Serve SMALL_SHAPES from attorch's tests.utils.default_shapes (the test modules import it by name, after
    this plugin is loaded, and build their parameter grids from it)."""
    import tests.utils

    def default_shapes(min_dim=0, max_dim=4, subset=False):
        return [s for s in SMALL_SHAPES if min_dim <= len(s) <= max_dim]

    tests.utils.default_shapes = default_shapes


def _plugin_setup():
    side, device = os.environ.get(_ENV_SIDE), os.environ.get(_ENV_DEVICE)
    if side is None:
        return  # imported as a module, not as the plugin of a run
    if side == "kernellab":
        if ROOT not in sys.path:  # after attorch's root: kernellab's own tests package must not shadow attorch's
            sys.path.append(ROOT)
        import kernellab.compat

        kernellab.compat.install()
        if device == "cpu" and os.environ.get(_ENV_BUILD):
            _build_for_the_gpu(os.environ[_ENV_BUILD])
    if device == "cpu":
        _cuda_to_cpu()
        if side == "triton":
            _triton_tunes_without_a_driver()
    if os.environ.get(_ENV_SMALL) == "1":
        _small_shapes()


def _build_for_the_gpu(log):
    """--build-gpu: every kernel specialization the interpreter runs is also built for sm_90a (PTX and ptxas, no
    GPU): what would not compile on the device shows here, with registers and spills. One JSON line per build."""
    import json
    import time

    from kernellab.compiler.codegen.target import Target
    from kernellab.runtime import jit as kjit

    orig, built = kjit.JITFunction._get_compiled, set()

    def get_compiled(self, args, kwargs, warmup=False):
        r = orig(self, args, kwargs, warmup)
        ck = r[0]
        if ck is not None and id(ck) not in built:
            built.add(id(ck))
            row = {"kernel": self.__name__, "num_warps": ck.options.get("num_warps", 4),
                   "num_stages": ck.options.get("num_stages", 3)}
            t0 = time.time()
            try:
                ck.build_gpu(Target(90))
                row.update(registers=ck.n_regs, spills=ck.n_spills)
            except Exception as e:  # recorded, not raised: the CPU case goes on
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            row["s"] = round(time.time() - t0, 2)
            with open(log, "a") as f:
                f.write(json.dumps(row) + "\n")
        return r

    kjit.JITFunction._get_compiled = get_compiled


def _triton_tunes_without_a_driver():
    """Triton's interpreter on a machine with no GPU stops at its autotuner, which asks the (absent) driver for a
    benchmarker. Time nothing: every config ties and the first is taken, as kernellab's CPU tuning does."""
    from triton.runtime import autotuner

    def bench(fn, quantiles=None, **kwargs):
        return [0.0] * len(quantiles) if quantiles else 0.0

    autotuner.Autotuner.do_bench = property(lambda self: bench)


_plugin_setup()


def _shape_of(params):
    shape = params.get("shape")
    if shape is None:  # a test that names its sizes otherwise
        for v in params.values():
            if isinstance(v, tuple) and v and all(isinstance(x, int) for x in v):
                return v
    return shape


def _numel(params):
    n = 1
    for x in _shape_of(params) or ():
        n *= x
    return n


def _selection():
    subset = None
    if os.environ.get(_ENV_QUICK) == "1":
        try:
            from tests.utils import default_shapes

            subset = set(default_shapes(subset=True))
        except Exception:  # an attorch without the helper: keep every shape
            subset = None
    return subset, int(os.environ.get(_ENV_NUMEL) or 0), int(os.environ.get(_ENV_CASES) or 0)


def _runs(params, subset, max_numel):
    if params.get("amp") is False and "float16" in str(params.get("input_dtype")):
        return False  # every attorch test returns at once for fp16 inputs without autocast
    if subset is not None and "shape" in params and tuple(params["shape"]) not in subset:
        return False  # the test would return at once (a trivial pass)
    return not (max_numel and _numel(params) > max_numel)


@pytest_hookimpl(hookwrapper=True)
def pytest_generate_tests(metafunc):
    """The selection, made where the parameter grid is made: before pytest builds an item per case (conv's grid
    alone is 131072 cases, which every xdist worker would otherwise build and then drop)."""
    yield
    if os.environ.get(_ENV_SIDE) is None or not hasattr(metafunc, "_calls"):
        return
    subset, max_numel, cap = _selection()
    if "subset" not in metafunc.fixturenames:
        subset = None  # a test that does not take attorch's switch runs every shape it names
    calls = [c for c in metafunc._calls if _runs(c.params, subset, max_numel)]
    if not calls:  # pytest would make one item without parameters of an empty grid: deselect them all later
        metafunc.function._attorch_tests_none = True
        return
    if cap and len(calls) > cap:
        import random

        chosen = set(random.Random(0).sample(range(len(calls)), cap))  # the same in every xdist worker
        calls = [c for i, c in enumerate(calls) if i in chosen]
    metafunc._calls = calls


def pytest_collection_modifyitems(session, config, items):
    drop = [it for it in items if getattr(getattr(it, "function", None), "_attorch_tests_none", False)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [it for it in items if it not in drop]


def pytest_collection_finish(session):
    ids = os.environ.get(_ENV_IDS)
    if ids and os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":  # what runs (after -k), told once
        with open(ids, "w") as f:
            f.write("".join(it.nodeid + "\n" for it in session.items))


def pytest_runtest_call(item):
    """A per-case time limit (SIGALRM, main thread): a case stuck in the interpreter fails instead of eating the
    budget. A kernel stuck on the GPU is not interrupted; --budget ends the whole run."""
    import signal
    import threading

    limit = int(os.environ.get(_ENV_TIMEOUT) or 0)
    if not limit or threading.current_thread() is not threading.main_thread():
        return  # signals reach the main thread only

    def expire(signum, frame):
        raise TimeoutError(f"case ran past {limit} s")

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit)


def pytest_runtest_teardown(item):
    import threading

    if os.environ.get(_ENV_TIMEOUT) and threading.current_thread() is threading.main_thread():
        import signal

        signal.alarm(0)


def pytest_runtest_logreport(report):
    """One JSON line per finished case, written by the controller as cases finish (so a run cut by --budget
    still has its results)."""
    path = os.environ.get(_ENV_LOG)
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import json

    if report.when == "call" or report.outcome != "passed":
        if report.when != "call" and report.outcome == "passed":
            return
        reason = ""
        if report.outcome == "failed":
            reason = _one_line(report)
        elif report.outcome == "skipped":
            lr = report.longrepr
            reason = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
        with open(path, "a") as f:
            f.write(json.dumps({"id": report.nodeid, "when": report.when, "outcome": report.outcome,
                                "reason": reason[:300], "s": round(report.duration, 2)}) + "\n")


def _one_line(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    msg = crash.message if crash is not None else str(report.longrepr)
    lines = [x.strip() for x in msg.splitlines() if x.strip()]
    # attorch's assert_close wraps torch's message: keep its first line and torch's mismatch count
    for x in lines[1:]:
        if x.startswith("Mismatched elements") or x.startswith("Greatest absolute"):
            return f"{lines[0]} | {x}"
    return lines[0] if lines else report.outcome


# ---------------------------------------------------------------------------------------------------------
# The command-line half


def pack(src=None):
    """.ulibs/attorch.tar.xz: attorch/ and tests/ of a checkout (src) or of the mirror's HEAD, and its commit."""
    import io
    import subprocess
    import tarfile

    os.makedirs(os.path.dirname(TARBALL), exist_ok=True)
    if src is None:
        commit = subprocess.run(["git", "-C", MIRROR, "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        tar = subprocess.run(["git", "-C", MIRROR, "archive", "HEAD", "attorch", "tests"], capture_output=True,
                             check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as t, tarfile.open(TARBALL, "w:xz") as out:
            for m in t.getmembers():
                out.addfile(m, t.extractfile(m) if m.isfile() else None)
            _add_commit(out, commit)
    else:
        with tarfile.open(TARBALL, "w:xz") as out:
            for d in ("attorch", "tests"):
                out.add(os.path.join(src, d), d, filter=lambda m: None if "__pycache__" in m.name else m)
            _add_commit(out, "unknown (from a checkout)")
    print(f"attorch_tests: wrote {TARBALL} ({os.path.getsize(TARBALL) // 1024} KiB)")


def _add_commit(out, commit):
    import io
    import tarfile

    data = (commit + "\n").encode()
    info = tarfile.TarInfo("COMMIT")
    info.size = len(data)
    out.addfile(info, io.BytesIO(data))


def source(src=None):
    """The directory holding attorch/ and tests/, and attorch's commit."""
    import tarfile

    if src:
        return os.path.abspath(src), "unknown (from a checkout)"
    if not os.path.exists(TARBALL):
        if not os.path.isdir(MIRROR):
            sys.exit(f"attorch_tests: no {TARBALL} and no mirror at {MIRROR}: pass --src or carry .ulibs")
        pack()
    stamp = os.path.join(UNPACKED, ".tarball_mtime")
    mtime = str(os.path.getmtime(TARBALL))
    if not (os.path.exists(stamp) and open(stamp).read() == mtime):
        import shutil

        shutil.rmtree(UNPACKED, ignore_errors=True)
        os.makedirs(UNPACKED)
        with tarfile.open(TARBALL) as t:
            t.extractall(UNPACKED, filter="data")
        with open(stamp, "w") as f:
            f.write(mtime)
    commit_file = os.path.join(UNPACKED, "COMMIT")
    return UNPACKED, open(commit_file).read().strip() if os.path.exists(commit_file) else "unknown"


def run_side(side, args, src):
    import json
    import signal
    import subprocess
    import tempfile
    import time

    files = [f if f.startswith("test_") else f"test_{f}" for f in args.files] if args.files else sorted(
        f for f in os.listdir(os.path.join(src, "tests")) if f.startswith("test_") and f.endswith(".py"))
    files = [f if f.endswith(".py") else f + ".py" for f in files]
    log = tempfile.NamedTemporaryFile(prefix=f"attorch_{side}_", suffix=".jsonl", delete=False).name
    env = dict(os.environ)
    env.update({_ENV_SIDE: side, _ENV_DEVICE: args.device, _ENV_LOG: log,
                _ENV_QUICK: "1" if args.quick else "0", _ENV_NUMEL: str(args.max_numel or 0),
                _ENV_CASES: str(args.max_cases or 0), _ENV_TIMEOUT: str(args.case_timeout or 0),
                _ENV_SMALL: "1" if args.small_shapes else "0"})
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), src]
                                        + ([ROOT] if side == "kernellab" else [])
                                        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton's interpreter for the triton side; kernellab's compat follows it
    else:
        env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "attorch_tests", "-q", "-p", "no:cacheprovider", "--rootdir", src,
           "--confcutdir", src,
           "-o", "addopts=", "--tb=line", "-rN"]
    if args.only_ids:  # the failures of an earlier run: those cases only (their files' grids are still selected)
        files = sorted({i.split("::")[0].split("/")[-1] for i in args.only_ids})
        cmd += list(args.only_ids)
    else:
        cmd += [os.path.join("tests", f) for f in files]
    if args.quick:
        cmd.append("--subset")
    if args.k:
        cmd += ["-k", args.k]
    env[_ENV_IDS] = ids_file = log[:-len(".jsonl")] + ".ids"
    builds_file = log[:-len(".jsonl")] + ".builds"
    if args.build_gpu and side == "kernellab" and args.device == "cpu":
        env[_ENV_BUILD] = builds_file
    print(f"attorch_tests: {side} on {args.device}: {len(files)} files", flush=True)
    if args.n:
        cmd += ["-n", str(args.n)]
    t0 = time.time()
    p = subprocess.Popen(cmd, cwd=src, env=env, start_new_session=True,
                         stdout=None if args.verbose else subprocess.DEVNULL)
    cut = False
    try:
        p.wait(timeout=args.budget or None)
    except subprocess.TimeoutExpired:
        cut = True
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    wall = time.time() - t0
    rows = [json.loads(x) for x in open(log)] if os.path.exists(log) else []
    ids = open(ids_file).read().split() if os.path.exists(ids_file) else []
    builds = [json.loads(x) for x in open(builds_file)] if os.path.exists(builds_file) else []
    for f in (log, ids_file, builds_file):
        if os.path.exists(f):
            os.unlink(f)
    def blank():
        return {"passed": 0, "failed": 0, "timed_out": 0, "skipped": 0, "not_run": 0, "cases": 0, "failures": {},
                "seconds": 0.0}

    per_file = {f: blank() for f in files}
    seen = set()
    for r in rows:
        f = r["id"].split("::")[0].split("/")[-1]
        d = per_file.setdefault(f, blank())
        d["seconds"] = round(d["seconds"] + r["s"], 2)
        if r["id"] in seen and r["outcome"] != "failed":
            continue  # a teardown after the call was counted
        if r["id"] in seen:  # a teardown error after a pass: counts as the failure
            d["passed"] -= 1
        seen.add(r["id"])
        if r["outcome"] == "failed" and "case ran past" in r["reason"]:
            r["outcome"] = "timed_out"  # too slow here (the interpreter), counted apart from failures
        d[r["outcome"]] = d.get(r["outcome"], 0) + 1
        if r["outcome"] in ("failed", "timed_out"):
            d["failures"][r["id"].split("::", 1)[1]] = (r["when"] + ": " if r["when"] != "call" else "") + r["reason"]
    for i in ids:
        f = i.split("::")[0].split("/")[-1]
        if f in per_file:
            per_file[f]["cases"] += 1
            if i not in seen:
                per_file[f]["not_run"] += 1
    total = {k: sum(d[k] for d in per_file.values())
             for k in ("cases", "passed", "failed", "timed_out", "skipped", "not_run")}
    res = {"wall_s": round(wall, 1), "cut_by_budget": cut, "returncode": p.returncode, "total": total,
           "files": per_file}
    if env.get(_ENV_BUILD):
        failed = [b for b in builds if "error" in b]
        res["gpu_builds"] = {"target": "sm_90a", "built": len(builds) - len(failed), "failed": failed,
                             "max_registers": max((b.get("registers") or 0 for b in builds), default=0),
                             "spilling": sorted({(b["kernel"], b["num_warps"], b["spills"]) for b in builds
                                                 if b.get("spills")}),
                             "seconds": round(sum(b["s"] for b in builds), 1)}
    return res


def main(argv=None):
    import argparse
    import datetime
    import json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when torch sees one")
    ap.add_argument("--side", choices=["kernellab", "triton", "both"], default="kernellab")
    ap.add_argument("--quick", action="store_true",
                    help="attorch's --subset shapes, the other shape cases deselected (not trivially passed)")
    ap.add_argument("--max-numel", type=int, default=None,
                    help="deselect cases whose input has more elements (default on cpu: 2**21; 0: none)")
    ap.add_argument("--small-shapes", action="store_true",
                    help="attorch's shapes scaled down (SMALL_SHAPES): conv and pooling fit the interpreter")
    ap.add_argument("--max-cases", type=int, default=0, help="at most this many cases per test function")
    ap.add_argument("--files", nargs="*", help="test files (act_layers, test_glu_layer.py...); default all")
    ap.add_argument("-k", help="pytest -k expression")
    ap.add_argument("-n", help="pytest-xdist workers")
    ap.add_argument("--budget", type=float, default=0, help="seconds for each side's run; the rest is 'not run'")
    ap.add_argument("--case-timeout", type=int, default=None,
                    help="seconds per case (SIGALRM), counted as timed out, not failed (default on cpu 60; 0: none)")
    ap.add_argument("--failed-of", choices=["kernellab", "triton"],
                    help="run only the cases that side failed (or timed out) in --out's results, with the same "
                         "selection options; recorded as '<side>_on_failures_of_<that side>'")
    ap.add_argument("--build-gpu", action="store_true",
                    help="cpu, kernellab side: also build every kernel specialization run for sm_90a (no GPU)")
    ap.add_argument("--src", help="a directory holding attorch/ and tests/ (default: the tarball / mirror)")
    ap.add_argument("--pack", action="store_true", help="(re)build .ulibs/attorch.tar.xz and stop")
    ap.add_argument("--out", help="results JSON (default benchmarks/results/<date>-<gpu or cpu>-attorch.json)")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="merge the sides of these results files into --out (default: the dated name) and stop")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="show pytest's output")
    args = ap.parse_args(argv)
    if args.merge:  # one results file from the per-side files of separate (device) runs
        merged = {}
        for path in args.merge:
            part = json.load(open(path))
            sides = {**merged.get("sides", {}), **part.get("sides", {})}
            merged.update(part)
            merged["sides"] = sides
        out = args.out or os.path.join(ROOT, "benchmarks", "results",
                                       f"{merged['date']}-{merged['device']}-attorch.json")
        with open(out, "w") as f:
            json.dump(merged, f, indent=1)
        print(f"attorch_tests: wrote {out} (sides {sorted(merged['sides'])})")
        return 0
    if args.pack:
        pack(args.src)
        return 0
    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.case_timeout is None:
        args.case_timeout = 60 if args.device == "cpu" else 0
    if args.max_numel is None:
        args.max_numel = 2 ** 21 if args.device == "cpu" else 0
    src, commit = source(args.src)
    gpu = torch.cuda.get_device_name().replace(" ", "_") if args.device == "cuda" else "cpu"
    out = args.out or os.path.join(ROOT, "benchmarks", "results",
                                   f"{datetime.date.today().isoformat()}-{gpu}-attorch.json")
    result = json.load(open(out)) if os.path.exists(out) else {}
    result.update({"date": datetime.date.today().isoformat(), "device": gpu, "attorch_commit": commit,
                   "torch": torch.__version__})
    result.setdefault("sides", {})
    args.only_ids = None
    if args.failed_of:
        earlier = result["sides"].get(args.failed_of)
        if not earlier:
            sys.exit(f"attorch_tests: {out} has no {args.failed_of} side to take failures from")
        args.only_ids = [f"tests/{f}::{t}" for f, d in earlier["files"].items() for t in d["failures"]]
        print(f"attorch_tests: the {len(args.only_ids)} failures of {args.failed_of}'s run")
    for side in (["triton", "kernellab"] if args.side == "both" else [args.side]):
        r = run_side(side, args, src)
        if args.failed_of:
            side = f"{side}_on_failures_of_{args.failed_of}"
        r["options"] = {k: getattr(args, k) for k in ("quick", "small_shapes", "max_numel", "max_cases", "files",
                                                      "k", "n", "budget", "case_timeout")}
        if side == "triton":
            try:
                import importlib.metadata

                r["triton"] = importlib.metadata.version("triton")
            except Exception:
                r["triton"] = None
        result["sides"][side] = r
        t = r["total"]
        print(f"attorch_tests: {side}: {t['passed']} passed, {t['failed']} failed, {t['timed_out']} timed out, "
              f"{t['skipped']} skipped, "
              f"{t['not_run']} not run of {t['cases']} ({r['wall_s']} s"
              f"{', cut by --budget' if r['cut_by_budget'] else ''})")
        for f, d in r["files"].items():
            print(f"  {f:38s} {d['passed']:5d} passed {d['failed']:5d} failed {d['timed_out']:3d} timed out "
                  f"{d['skipped']:4d} skipped "
                  f"{d['not_run']:5d} not run  {d['seconds']:8.1f} s")
        if "gpu_builds" in r:
            g = r["gpu_builds"]
            print(f"  sm_90a builds: {g['built']} built, {len(g['failed'])} failed, max {g['max_registers']} "
                  f"registers, {len(g['spilling'])} spilling ({g['seconds']} s)")
            for b in g["failed"]:
                print(f"    {b['kernel']} {b['num_warps']}w: {b['error']}")
        if not args.no_write:
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "w") as f:
                json.dump(result, f, indent=1)
    if not args.no_write:
        print(f"attorch_tests: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
