"""Liger's fused MoE forward, kernel by kernel, kernellab against Triton (issue 14: its forward ran at 0.93x).

    python benchmarks/tools/moe_profile.py [--timeout 240] [--calls 20] [--pin same] [--also-env K=V ...]
    python benchmarks/tools/moe_profile.py --device cpu        # the plumbing, tiny sizes, the CPU interpreters

Runs `LigerFusedMoEFunction.apply` forward (the inputs benchmarks/libraries.py builds for `fused_moe`, float32,
at its GPU sizes T, H, I, E, K = 4096, 2048, 1024, 8, 2; `--size` another) in one child process per run, as
libraries.py does: `kernellab` (kernellab.compat installed before liger is imported) and `triton` (the real one).
Each child calls the forward once (compiling and autotuning its GEMMs over `_get_gemm_autotune_configs()`, the
token gather over its own list; LIGER_FUSED_MOE_AUTOTUNE unset), then on a GPU:
- `fwd_ms`: libraries.py's own timing of the forward (`_time_gpu`: median of CUDA events after an L2 flush and a
  sleep covering the launch), the figure whose ratio was 0.93; `wall_ms` and `host_ms` beside it;
- per kernel: the GPU time by torch.profiler (CUPTI), mean per forward over `--calls` calls (each after the same
  flush and sleep), and how many launches a forward makes;
- the timeline: per forward, the span from the first GPU activity after the sleep to the last, the time the GPU
  was busy in it and the idle gaps (waiting for the host: the forward syncs on `.item()` mid-way), each gap
  named by the activities around it (mean over the calls);
- the config each autotuned kernel chose.
Then a table per kernel: both sides' mean time and Triton / kernellab.

Runs, in order (each child gets what is left of `--timeout`, which bounds the whole script):
1. `triton` and 2. `kernellab`, each autotuning;
3. with `--pin same`: kernellab pinned to the configs Triton chose (kernel by kernel, the same config on both
   sides: the compilers compared, not the autotuners); `--pin kl` pins Triton to kernellab's instead;
4. per `--also-env K=V[,K2=V2]` (repeatable, e.g. KERNELLAB_SIBLING_WGMMA=1): kernellab with those set, pinned
   as in 3 when `--pin same` is given, else autotuning; `--also-env-autotune` adds an autotuning run of it too.
`--sides kernellab` (or `triton`) runs one side only. `--json PATH` writes every child's result.
On a CPU (`--device cpu`, default size 16, 32, 16, 4, 2) the interpreters run the forward (Triton's under
TRITON_INTERPRET=1, by `--triton-python`, default this interpreter, then /tmp/tri/bin/python); nothing is timed,
the configs chosen (the first that compiles) and the plumbing are shown.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK = "@@moe-profile "
AUTOTUNED = ("_fused_up_proj_swiglu_kernel", "_fused_down_proj_kernel", "_token_gather_weighted_sum_kernel")
GPU_SIZE, CPU_SIZE = (4096, 2048, 1024, 8, 2), (16, 32, 16, 4, 2)
FLUSH_KERNELS = ("fill", "zero", "sleep", "spin")  # the flush's zero_() and torch.cuda._sleep: not the op's


def config_label(cfg) -> str:
    """`64x128x64 8w3s`-like: the BLOCK constexprs in order, warps, stages (Triton's and kernellab's Config)."""
    if cfg is None:
        return "-"
    kw = getattr(cfg, "kwargs", {}) or {}
    blocks = "x".join(str(v) for k, v in kw.items() if k.startswith("BLOCK"))
    rest = ",".join(f"{k}={v}" for k, v in kw.items() if not k.startswith("BLOCK"))
    return f"{blocks}{'/' + rest if rest else ''} {cfg.num_warps}w{cfg.num_stages}s"


def _pin(mod, pins: dict) -> dict:
    """Keep in each autotuned kernel's list only the config `pins` names for it; what was pinned (or why not)."""
    out = {}
    for name, label in pins.items():
        at = getattr(mod, name, None)
        configs = getattr(at, "configs", None)
        if not configs:
            out[name] = "not an autotuned kernel here"
            continue
        keep = [c for c in configs if config_label(c) == label]
        if keep:
            at.configs = keep[:1]
            out[name] = label
        else:
            out[name] = f"no config {label} among {len(configs)}"
    return out


def _gpu_activities(trace_path: str) -> list[dict]:
    """The GPU activities of a chrome trace (kernels, memcpys, memsets): name, start and duration in µs."""
    events = json.loads(Path(trace_path).read_text()).get("traceEvents", [])
    out = []
    for e in events:
        cat = str(e.get("cat", "")).lower()
        if e.get("ph") == "X" and (cat == "kernel" or cat.startswith("gpu_mem")):
            out.append({"name": e.get("name", "?"), "ts": float(e["ts"]), "dur": float(e.get("dur", 0.0)),
                        "cat": cat})
    return sorted(out, key=lambda a: a["ts"])


def _is_flush(name: str) -> bool:
    n = name.lower()
    return any(k in n for k in FLUSH_KERNELS) and "moe" not in n and "fused" not in n and "gather" not in n


def short(name: str, n: int = 48) -> str:
    """A kernel's name made readable (torch's are long C++ signatures)."""
    name = name.replace("void ", "").split("(")[0].split("<")[0]
    return name if len(name) <= n else name[:n - 2] + ".."


def analyse(acts: list[dict], calls: int) -> dict:
    """Per kernel (mean µs per forward, launches per forward) and the timeline of each forward: the activities
    between two sleeps (each call's flush and sleep come first), their span, busy time and gaps."""
    windows, cur = [], None
    for a in acts:
        if "sleep" in a["name"].lower() or "spin" in a["name"].lower():
            cur = []
            windows.append(cur)
        elif cur is not None and not _is_flush(a["name"]):
            cur.append(a)
    windows = [w for w in windows if w][-calls:]
    per_kernel: dict = {}
    for w in windows:
        for a in w:
            per_kernel.setdefault(a["name"], []).append(a["dur"])
    n = max(1, len(windows))
    kernels = {k: {"us": sum(v) / n, "launches": len(v) / n} for k, v in per_kernel.items()}
    spans, busy, gaps = [], [], {}
    for w in windows:
        spans.append(w[-1]["ts"] + w[-1]["dur"] - w[0]["ts"])
        busy.append(sum(a["dur"] for a in w))
        for prev, nxt in zip(w, w[1:]):
            g = nxt["ts"] - (prev["ts"] + prev["dur"])
            key = f"{short(prev['name'], 28)} -> {short(nxt['name'], 28)}"
            gaps.setdefault(key, []).append(max(0.0, g))
    return {"forwards": len(windows), "kernels": kernels,
            "span_us": statistics.mean(spans) if spans else None,
            "busy_us": statistics.mean(busy) if busy else None,
            "gaps_us": {k: sum(v) / n for k, v in gaps.items()}}


def child(side: str, device: str, size: tuple, calls: int, pins: dict, out_dir: str) -> dict:
    res: dict = {"side": side, "env": {k: v for k, v in os.environ.items() if k.startswith("KERNELLAB_")}}
    if side == "kernellab":
        import kernellab.compat

        kernellab.compat.install()
    elif device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import libraries
    import liger_kernel.ops.fused_moe_kernels as kmod
    import triton  # noqa: F401  (kernellab's under compat)

    res["triton"] = getattr(triton, "__version__", "?")
    res["pinned"] = _pin(kmod, pins) if pins else {}
    op = next(o for o in libraries._ops() if o.name == "fused_moe")
    torch.manual_seed(libraries.SEED)
    with torch.device(device):
        base = op.build(size)
    x = libraries._to(base, torch.float32, device, op.grads)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def fwd():
        return op.liger(x)

    t0 = time.perf_counter()
    out = fwd()[0]
    sync()
    res["first_call_s"] = round(time.perf_counter() - t0, 2)
    res["chosen"] = {k: config_label(getattr(getattr(kmod, k), "best_config", None)) for k in AUTOTUNED}
    res["out_finite"] = bool(torch.isfinite(out).all().item())
    with torch.no_grad():
        ref = op.ref(libraries._to(base, torch.float64, device))[0]
    res["max_abs_err"] = float((out.double() - ref).abs().max().item())
    if not cuda:
        return res
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    cycles: list = []
    t = libraries._time_gpu(fwd, flush, cycles)
    res.update(fwd_ms=t["ms"], wall_ms=t["wall_ms"], host_ms=t["host_ms"], uncovered=t["uncovered"])
    sleep = int(cycles[0] * (2 * t["host_ms"] + 0.05))
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fwd()
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            torch.cuda._sleep(sleep)
            fwd()
        sync()
    path = os.path.join(out_dir, f"moe_profile_{side}_{os.getpid()}.json")
    prof.export_chrome_trace(path)
    res.update(analyse(_gpu_activities(path), calls))
    os.remove(path)
    return res


def _run_child(label: str, side: str, a, pins: dict, env_extra: dict, deadline: float) -> dict:
    python = sys.executable
    if side == "triton" and a.device == "cpu":
        python = a.triton_python or sys.executable
    cmd = [python, __file__, "--child", side, "--device", a.device, "--size", ",".join(map(str, a.size)),
           "--calls", str(a.calls), "--pins", json.dumps(pins)]
    env = dict(os.environ, **env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if a.device == "cpu":  # as libraries.py: one config per autotuned kernel (Triton's interpreter would run all)
        env.setdefault("LIGER_FUSED_MOE_AUTOTUNE", "0")
    left = deadline - time.time()
    if left < 20:
        return {"label": label, "side": side, "error": f"not run: {left:.0f} s left of --timeout"}
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=left, env=env, cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        return {"label": label, "side": side, "error": f"timed out after {left:.0f} s (--timeout)"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
    if not lines:
        return {"label": label, "side": side, "error": f"exit {p.returncode}: {p.stderr[-1500:]}"}
    r = json.loads(lines[-1][len(MARK):])
    r.update(label=label, child_s=round(time.time() - t0, 1))
    return r


def report(r: dict) -> str:
    out = [f"--- {r['label']} ({r.get('side')}, child {r.get('child_s')} s, first call {r.get('first_call_s')} s)"]
    if "error" in r:
        return "\n".join(out + [f"  error: {r['error']}"])
    if r.get("pinned"):
        out.append(f"  pinned: {r['pinned']}")
    out.append("  chosen: " + "; ".join(f"{short(k, 40)} {v}" for k, v in r.get("chosen", {}).items()))
    out.append(f"  max abs err vs float64: {r.get('max_abs_err'):.3g}")
    if "fwd_ms" in r:
        out.append(f"  fwd_ms {r['fwd_ms']:.4f}  wall_ms {r['wall_ms']:.4f}  host_ms {r['host_ms']:.4f}  "
                   f"(uncovered {r['uncovered']})")
        if r.get("span_us") is None:
            out.append("  no GPU activities between the sleeps in the profiler's trace (CUPTI off?)")
            return "\n".join(out)
        out.append(f"  per forward ({r['forwards']} profiled): span {r['span_us']:.1f} us, GPU busy "
                   f"{r['busy_us']:.1f} us, idle {r['span_us'] - r['busy_us']:.1f} us")
        for k, v in sorted(r["kernels"].items(), key=lambda kv: -kv[1]["us"]):
            out.append(f"    {v['us']:9.1f} us  x{v['launches']:.0f}  {short(k, 70)}")
        for k, v in sorted(r["gaps_us"].items(), key=lambda kv: -kv[1])[:6]:
            out.append(f"    gap {v:7.1f} us  {k}")
    return "\n".join(out)


def table(runs: list[dict]) -> str:
    ok = [r for r in runs if "kernels" in r]
    if not ok:
        return "(no GPU timings)"
    base = next((r for r in ok if r["side"] == "triton"), None)
    names = []
    for r in ok:
        names += [k for k in r["kernels"] if k not in names]
    head = f"{'kernel (us per forward)':<40}" + "".join(f"{r['label'][:25]:>26}" for r in ok)
    lines = [head, "-" * len(head)]
    for k in names:
        cells = []
        for r in ok:
            v = r["kernels"].get(k, {}).get("us")
            ratio = ""
            if v and base is not None and r is not base and base["kernels"].get(k, {}).get("us"):
                ratio = f" ({base['kernels'][k]['us'] / v:.2f})"
            cells.append(f"{'-' if v is None else f'{v:.1f}'}{ratio}")
        lines.append(f"{short(k, 40):<40}" + "".join(f"{c:>26}" for c in cells))
    for key, name in (("busy_us", "GPU busy"), ("span_us", "span"), ("fwd_ms", "fwd_ms (events)")):
        cells = []
        for r in ok:
            v = r.get(key)
            ratio = ""
            if v and base is not None and r is not base and base.get(key):
                ratio = f" ({base[key] / v:.2f})"
            cells.append(f"{v:.4g}{ratio}" if v is not None else "-")
        lines.append(f"{name:<40}" + "".join(f"{c:>26}" for c in cells))
    cfg = [f"{short(k, 28)}: " + " | ".join(f"{r['label']} {r['chosen'].get(k)}" for r in ok) for k in AUTOTUNED]
    return "\n".join(lines + ["(Triton / this run in parentheses; chosen configs:)"] + cfg)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--size", help="T,H,I,E,K (default the benchmark's GPU or CPU size)")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds for the whole script")
    ap.add_argument("--pin", choices=("same", "kl"), help="a run with one side pinned to the other's configs")
    ap.add_argument("--also-env", action="append", default=[],
                    help="K=V[,K2=V2...]: one more kernellab run with these set")
    ap.add_argument("--also-env-autotune", action="store_true",
                    help="each --also-env run also autotunes (besides its run pinned as --pin says)")
    ap.add_argument("--sides", default="triton,kernellab")
    ap.add_argument("--triton-python", help="the Python of Triton's side on a CPU (default /tmp/tri/bin/python)")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--pins", default="{}", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    t_start = time.time()
    if a.device is None:
        try:
            import torch

            a.device = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            a.device = "cpu"
    a.size = tuple(int(v) for v in a.size.split(",")) if a.size else (GPU_SIZE if a.device == "cuda" else CPU_SIZE)
    if a.child:
        res = child(a.child, a.device, a.size, a.calls, json.loads(a.pins), os.environ.get("TMPDIR", "/tmp"))
        print(MARK + json.dumps(res), flush=True)
        return 0
    if a.device == "cpu" and not a.triton_python:
        a.triton_python = "/tmp/tri/bin/python" if os.path.exists("/tmp/tri/bin/python") else sys.executable
    deadline = t_start + a.timeout
    sides = a.sides.split(",")
    runs = []
    for side in ("triton", "kernellab"):
        if side in sides:
            runs.append(_run_child(side, side, a, {}, {}, deadline))
            print(report(runs[-1]), flush=True)
    tri = next((r for r in runs if r["side"] == "triton" and "chosen" in r), None)
    kl = next((r for r in runs if r["side"] == "kernellab" and "chosen" in r), None)
    pins = {}
    if a.pin == "same" and tri is not None and "kernellab" in sides:
        pins = dict(tri["chosen"])
        runs.append(_run_child("kl@tri-cfg", "kernellab", a, pins, {}, deadline))
        print(report(runs[-1]), flush=True)
    elif a.pin == "kl" and kl is not None and "triton" in sides:
        runs.append(_run_child("tri@kl-cfg", "triton", a, dict(kl["chosen"]), {}, deadline))
        print(report(runs[-1]), flush=True)
    for spec in a.also_env:
        env = dict(kv.split("=", 1) for kv in spec.split(","))
        name = "+".join(f"{k[10:] if k.startswith('KERNELLAB_') else k}={v}" for k, v in env.items())
        if pins or not a.also_env_autotune:  # pinned first: the compilers compared, cheap (three builds)
            runs.append(_run_child(f"kl {name}" + ("@tri-cfg" if pins else ""), "kernellab", a, pins, env,
                                   deadline))
            print(report(runs[-1]), flush=True)
        if a.also_env_autotune:
            runs.append(_run_child(f"kl {name}", "kernellab", a, {}, env, deadline))
            print(report(runs[-1]), flush=True)
    print()
    print(table(runs))
    print(f"\n(whole script {time.time() - t_start:.0f} s)")
    if a.json:  # an object (date, GPU, versions, runs) from the next run on; the first H200 file is the bare list
        import datetime
        import platform

        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        meta = {"date": datetime.date.today().isoformat(), "gpu": gpu,
                "versions": {"python": platform.python_version(), "torch": torch.__version__},
                "size": a.size, "calls": a.calls, "pin": a.pin, "also_env": a.also_env}
        Path(a.json).write_text(json.dumps({**meta, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
