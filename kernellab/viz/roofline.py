"""Rooflines: the machine's peaks (measured once per GPU and cached, or recorded on an H200), the
benchmark results recorded in ``benchmarks/results/*.json``, and matplotlib figures of both.

A point on a roofline is a kernel run: arithmetic intensity = FLOPs / bytes moved (x) against achieved
FLOP/s = FLOPs / seconds (y). The memory roof is ``bandwidth * intensity``, the compute roof the peak
FLOP/s; a kernel can sit under whichever is lower.

    peaks = measure_peaks()                         # GPU: copy and matmul through torch; cached as JSON
    peaks = machine_peaks()                         # that, measured on first use; the H200's without a GPU
    view = PerformanceView(recorded_results()[0])  # PNG figures of recorded H200 results, anywhere
"""
from __future__ import annotations

import base64
import datetime
import io
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

IMPLS = ("kernellab", "torch", "triton")
_STYLE = {"kernellab": ("o", "C0"), "torch": ("s", "C1"), "triton": ("^", "C2")}

# Peaks measured with `measure_peaks()` on the H200 lent to this project (2026-11-21, torch 2.11.0+cu130,
# medians of three runs): a 1 GiB device-to-device copy counting bytes read + written, and an 8192^3 bf16
# matmul on random data. Shown, labeled as recorded, on machines with no GPU.
RECORDED_PEAKS = {
    "NVIDIA H200": {
        "gpu": "NVIDIA H200", "date": "2026-11-21", "bytes_per_s": 4.18e12, "flops_per_s": 7.75e14,
        "flops_dtype": "bf16", "copy_bytes": 2 * 2**30, "matmul_shape": [8192, 8192, 8192],
        "source": "recorded: measure_peaks() on an NVIDIA H200, torch 2.11.0+cu130",
    },
}


def cache_dir() -> Path:
    """``$KERNELLAB_CACHE_DIR`` or ``~/.cache/kernellab`` (the compile cache's root too)."""
    env = os.environ.get("KERNELLAB_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kernellab"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "gpu"


def peaks_path(gpu_name: str) -> Path:
    return cache_dir() / f"peaks-{_slug(gpu_name)}.json"


def gpu_name(device: int = 0) -> str | None:
    """The CUDA device's name, or None without a usable GPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_name(device)
    except Exception:
        return None


def cached_peaks(device: int = 0) -> dict | None:
    """The peaks measured earlier on this machine's GPU (None: no GPU, or not measured yet)."""
    name = gpu_name(device)
    if name is None:
        return None
    try:
        return json.loads(peaks_path(name).read_text())
    except (OSError, ValueError):
        return None


def recorded_peaks(gpu: str = "NVIDIA H200") -> dict | None:
    """Peaks recorded on `gpu` (a copy of the table entry, labeled ``recorded``), or None."""
    rec = RECORDED_PEAKS.get(gpu)
    return dict(rec, recorded=True) if rec else None


def _time_cuda(fn, warmup: int, reps: int) -> float:
    """Median seconds of `fn` over `reps` runs timed with CUDA events, after `warmup` runs."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def _time_copy(torch, dev, copy_bytes):
    src = torch.empty(copy_bytes // 4, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    return _time_cuda(lambda: dst.copy_(src), warmup=3, reps=10), 2 * src.numel() * src.element_size()


def _time_matmul(torch, dev, n, dtype):
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    return _time_cuda(lambda: a @ b, warmup=3, reps=10)


def measure_peaks(device: int = 0, force: bool = False, copy_bytes: int = 2**30, matmul_n: int = 8192,
                  dtype: str = "bf16") -> dict:
    """Measure the GPU's memory bandwidth and matmul throughput through torch, and cache them.

    Bandwidth: a device-to-device copy of `copy_bytes`, counting bytes read + written. Compute: a
    `matmul_n`^3 matmul in `dtype` (bf16 or fp16) on random data, 2 n^3 FLOPs. Both are medians of 10
    runs. Returns the cached result when there is one (``force=True`` measures again). The cache is
    ``peaks-<gpu>.json`` in ``$KERNELLAB_CACHE_DIR`` (default ``~/.cache/kernellab``).
    Raises KernelLabError on a machine with no CUDA GPU.
    """
    from ..errors import KernelLabError

    name = gpu_name(device)
    if name is None:
        raise KernelLabError("measure_peaks needs a CUDA GPU and none is available here; "
                             "recorded_peaks('NVIDIA H200') gives the peaks recorded on an H200")
    path = peaks_path(name)
    if not force:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    peaks = _measure(name, device, copy_bytes, matmul_n, dtype)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(peaks, indent=2))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home only costs a re-measure next time
    return peaks


def _measure(name: str, device: int, copy_bytes: int, matmul_n: int, dtype: str) -> dict:
    """Time the copy and the matmul on the GPU (apart from measure_peaks so its caching is testable without one)."""
    import torch

    dev = torch.device("cuda", device)
    with torch.cuda.device(dev):
        t_copy, nbytes = _time_copy(torch, dev, copy_bytes)
        t_mm = _time_matmul(torch, dev, matmul_n, {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype])
        torch.cuda.empty_cache()
    return {"gpu": name, "date": datetime.date.today().isoformat(), "bytes_per_s": nbytes / t_copy,
            "flops_per_s": 2 * matmul_n ** 3 / t_mm, "flops_dtype": dtype, "copy_bytes": nbytes,
            "matmul_shape": [matmul_n] * 3, "source": f"measured: measure_peaks() on {name}, torch {torch.__version__}"}


def machine_peaks(device: int = 0, force: bool = False) -> dict | None:
    """The peaks this machine's rooflines are drawn against. With a GPU: its cached measurement, else measured
    now (once: a few seconds) and cached, so no roofline waits for an explicit ``measure_peaks()``; ``force``
    measures again. Without a GPU: the H200's recorded peaks, labeled ``recorded`` (there is nothing to measure).
    Raises what measuring raises (e.g. out of memory on a busy GPU)."""
    if gpu_name(device) is None:
        return recorded_peaks()
    return measure_peaks(device, force=force)


def describe_peaks(peaks: dict) -> str:
    """One line: "4.30 TB/s copy, 790 TFLOP/s bf16 matmul (recorded on NVIDIA H200, 2026-11-21)"."""
    how = "recorded" if peaks.get("recorded") else "measured"
    return (f"{peaks['bytes_per_s'] / 1e12:.2f} TB/s copy, {peaks['flops_per_s'] / 1e12:.0f} TFLOP/s "
            f"{peaks.get('flops_dtype', '')} matmul ({how} on {peaks.get('gpu', '?')}, {peaks.get('date', '?')})")


# --------------------------------------------------------------------------------------------- recorded results
def results_dir() -> Path | None:
    """``benchmarks/results`` of the repository this package lives in (editable installs and checkouts),
    or ``$KERNELLAB_RESULTS_DIR``; None when neither exists (an installed wheel has no results)."""
    env = os.environ.get("KERNELLAB_RESULTS_DIR")
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve()
    candidates += [p / "benchmarks" / "results" for p in here.parents[1:4]]
    try:  # an editable install whose package path is not the checkout (a .pth or finder pointing there)
        import kernellab

        for p in getattr(kernellab, "__path__", []):
            candidates.append(Path(p).resolve().parent / "benchmarks" / "results")
    except ImportError:
        pass
    for c in candidates:
        if c.is_dir():
            return c
    return None


def recorded_results(gpu_only: bool = True, benchmark: str | None = None) -> list[dict]:
    """Every ``benchmarks/results/*.json``, newest first, as ``{gpu, date, source, versions, rows,
    recorded: True}``. Rows keep the files' shape: ``{case, bytes, kernellab: {seconds, gbps, ...},
    torch: {...}, triton: {...}}``, plus ``flops`` (estimated from the case where the file has none) and
    ``flops_estimated``. With ``gpu_only`` (default), files without GPU rows (the CPU interpreter's) are
    left out. ``benchmark``: only that benchmark's files (``<date>-<gpu>-<benchmark>.json``), so a reader
    does not depend on which other benchmark ran last. Unreadable files are skipped."""
    root = results_dir()
    if root is None:
        return []
    out = []
    for path in sorted(root.glob("*.json" if benchmark is None else f"*-{benchmark}.json"), reverse=True):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):  # a tool's bare list of results (no date, no GPU): not a benchmark file
            continue
        rows = data.get("rows")
        if not isinstance(rows, list) or not data.get("gpu"):
            if gpu_only:
                continue
            rows = []
        fixed = []
        for row in rows:
            if not isinstance(row, dict) or "case" not in row:
                continue
            row = dict(row)
            if row.get("flops") is None:
                est = estimate_flops(row["case"])
                row["flops"], row["flops_estimated"] = est, est is not None
            if not row.get("bytes"):  # matmul and attention files record FLOPs only: no point without bytes
                est = estimate_bytes(row)
                row["bytes"], row["bytes_estimated"] = est, est is not None
            fixed.append(row)
        if gpu_only and not fixed:  # a result file of another shape (idioms: rows by workload and variant)
            continue
        out.append({"gpu": data.get("gpu"), "date": data.get("date"), "source": str(path),
                    "file": f"benchmarks/results/{path.name}", "versions":
                    data.get("versions", {}), "rows": fixed, "recorded": True})
    return out


def recorded_benchmark(benchmark: str, gpu: str = "NVIDIA H200") -> dict | None:
    """The newest ``benchmarks/results/<date>-<gpu>-<benchmark>.json`` as the benchmark wrote it, plus ``file``
    (its path from the repository root) and ``recorded: True``; None when there is none. For files of any shape
    (idioms, libraries, sweeps); the notebooks quote their recorded figures through it, labelled with the file's
    date and GPU, so a newer run of a benchmark refreshes them all."""
    root = results_dir()
    if root is None:
        return None
    for path in sorted(root.glob(f"*-{gpu.replace(' ', '_')}-{benchmark}.json"), reverse=True):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return dict(data, file=f"benchmarks/results/{path.name}", recorded=True)
    return None


def no_recorded(benchmark: str, script: str, gpu: str = "NVIDIA H200") -> str:
    """One line for a notebook cell that quotes recorded figures and finds none (a working copy outside the
    checkout, an installed wheel, ``$KERNELLAB_RESULTS_DIR`` pointing at another run's folder): what it looked
    for, where, and the command that records it."""
    env = os.environ.get("KERNELLAB_RESULTS_DIR")
    where = f"$KERNELLAB_RESULTS_DIR ({env})" if env else "benchmarks/results of the kernellab checkout"
    return (f"no recorded figures here: no *-{gpu.replace(' ', '_')}-{benchmark}.json in {where}; "
            f"`python {script}` on a GPU records them")


_TEACHING_NAMES = {"kernellab": "kernellab", "triton": "Triton"}


def _accesses(widths: dict) -> str:
    """{"ld": {"v4": 4}, "st": {"v1": 8}} -> "ld.global 4x v4, st.global 8x scalar"."""
    parts = []
    for op in ("ld", "st"):
        for w, n in sorted((widths or {}).get(op, {}).items()):
            parts.append(f"{op}.global {n}x {'scalar' if w == 'v1' else w}")
    return ", ".join(parts) or "no global accesses"


def describe_teaching(record: dict | None, ids) -> str:
    """The figures `benchmarks/teaching.py` recorded for the cases `ids`, as text the notebooks print: a
    RECORDED line naming the file, its date and GPU, then per case GB/s and the fraction of the copy bandwidth
    measured in the same run for kernellab, Triton (same kernel text) and torch, with the PTX's global access
    widths (v4: 16-byte fp32 accesses). `record` is ``recorded_benchmark("teaching")``; None (no file yet)
    gives one line saying so, a case the file lacks a line naming it, so an older file never breaks a cell."""
    if not record:
        return ("no recorded figures yet: there is no benchmarks/results/*-teaching.json "
                "(`python benchmarks/teaching.py` on a GPU records them)")
    peaks = record.get("peaks") or {}
    copy = f"{peaks['bytes_per_s'] / 1e12:.2f} TB/s" if peaks.get("bytes_per_s") else "?"
    lines = [f"RECORDED on {record.get('gpu', '?')}, {record.get('date', '?')} ({record.get('file', '?')}, "
             f"by benchmarks/teaching.py; not measured here)", f"copy bandwidth measured in the same run: {copy}"]
    rows = {r.get("id"): r for r in record.get("rows", []) if isinstance(r, dict)}
    for case in ids:
        row = rows.get(case)
        if row is None:
            lines.append(f"{case}: not in this file (recorded before the case existed)")
            continue
        lines.append(row.get("what", case))
        for impl in ("kernellab", "triton", "torch"):
            r = row.get(impl)
            name = row.get("torch_op", "torch") if impl == "torch" else _TEACHING_NAMES[impl]
            if not r:
                lines.append(f"  {name:13s} not run")
            elif "error" in r:
                lines.append(f"  {name:13s} ERROR: {r['error'][:100]}")
            elif "gbps" not in r:
                lines.append(f"  {name:13s} not timed")
            else:
                text = f"  {name:13s} {r['gbps']:5.0f} GB/s = {r['of_copy']:4.0%} of the copy bandwidth"
                if "ptx_accesses" in r:
                    text += f"   PTX: {_accesses(r['ptx_accesses'])}"
                lines.append(text)
    return "\n".join(lines)


# FLOPs per element of the recorded benchmark cases (elementwise arithmetic, exp counted as one):
#   vector_add: z = x + y                                   -> 1
#   softmax:    max, x - max, exp, sum, / sum               -> 5
#   layer_norm: sum, x - mean, xc*xc, sum, *rstd, *w, +b    -> 7
_FLOPS_PER_ELEMENT = {"vector_add": 1, "softmax": 5, "layer_norm": 7}


def estimate_flops(case: str) -> int | None:
    """FLOPs of a recorded case from its name ("softmax fp32 M=8192 N=16384", "vector_add 2^28 fp32"),
    counting the elementwise arithmetic per element; None for a case it does not know."""
    kind = case.split()[0] if case else ""
    per = _FLOPS_PER_ELEMENT.get(kind)
    if per is None:
        return None
    dims = dict((k, int(v)) for k, v in re.findall(r"\b([A-Z])=(\d+)", case))
    if "M" in dims and "N" in dims:
        return per * dims["M"] * dims["N"]
    m = re.search(r"\b(\d+)\^(\d+)\b", case)
    if m:
        return per * int(m.group(1)) ** int(m.group(2))
    m = re.search(r"\bn=(\d+)", case)
    return per * int(m.group(1)) if m else None


_ELEM_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}


def estimate_bytes(row: dict) -> int | None:
    """The bytes a recorded matmul or attention case must move at least (each input read once, the output written
    once), for rows that record only FLOPs: "float16 4096x4096x4096" (A, B and C; fp8 inputs with an fp16 C), or an
    attention row with batch, heads, seq and head_dim (fp16 q, k, v read and o written; the backward also reads o
    and do and writes dq, dk, dv). None for a case it does not know."""
    case = str(row.get("case", ""))
    m = re.match(r"\s*(\w+)\s+(\d+)x(\d+)x(\d+)\b", case)
    if m:
        dtype, (mm, nn, kk) = m.group(1), map(int, m.groups()[1:])
        elem = 1 if dtype.startswith(("fp8", "float8")) else _ELEM_BYTES.get(dtype)
        return None if elem is None else (mm * kk + kk * nn) * elem + mm * nn * max(elem, 2)
    dims = [row.get(k) for k in ("batch", "heads", "seq", "head_dim")]
    if all(isinstance(d, int) and d > 0 for d in dims):
        b, h, n, d = dims
        return (8 if row.get("mode") == "bwd" else 4) * b * h * n * d * 2
    return None


# --------------------------------------------------------------------------------------------- points
@dataclass(frozen=True)
class Point:
    """One run of one implementation on a roofline."""

    label: str
    impl: str
    flops: float
    bytes: float
    seconds: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds


def points_from_rows(rows: list[dict], impls=IMPLS) -> list[Point]:
    """Roofline points of result rows (the benchmark files' shape): one per row and implementation that
    has seconds, where the row knows its FLOPs and bytes."""
    pts = []
    for row in rows:
        flops, nbytes = row.get("flops"), row.get("bytes")
        if not flops or not nbytes:
            continue
        for impl in impls:
            rec = row.get(impl)
            if isinstance(rec, dict) and rec.get("seconds"):
                pts.append(Point(row.get("case", "?"), impl, float(flops), float(nbytes), float(rec["seconds"])))
    return pts


# --------------------------------------------------------------------------------------------- figures
def _figure(width=7.0, height=4.6, ncols=1, layout="constrained"):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout=layout)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _label_for(peaks: dict | None, recorded: bool, gpu: str | None, date: str | None) -> str | None:
    if recorded:
        return f"recorded on {gpu or (peaks or {}).get('gpu', '?')}, {date or (peaks or {}).get('date', '?')}"
    if peaks:
        how = "recorded" if peaks.get("recorded") else "measured"
        return f"peaks {how} on {peaks.get('gpu', '?')}, {peaks.get('date', '?')}"
    return None


@dataclass(frozen=True)
class Placed:
    """A kernel placed on a roofline by its arithmetic intensity alone (not timed: no GPU here): drawn as a
    vertical line at FLOPs / bytes up to the roof, the most it could reach on the roofline's GPU."""

    label: str
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    def bound(self, peaks: dict | None) -> float | None:
        """The attainable FLOP/s on `peaks`: min(bandwidth x intensity, compute peak)."""
        bw, pk = (peaks or {}).get("bytes_per_s"), (peaks or {}).get("flops_per_s")
        roofs = [r for r in (bw * self.intensity if bw else None, pk) if r]
        return min(roofs) if roofs else None


def roofline_figure(points, peaks: dict | None, title: str = "Roofline", recorded: bool = False,
                    gpu: str | None = None, date: str | None = None, note: str | None = None, placed=()):
    """A log-log roofline (matplotlib Figure): arithmetic intensity (FLOP/byte) against FLOP/s, the memory
    roof ``bytes_per_s * I`` and the compute roof ``flops_per_s`` from `peaks` (either may be None), and
    one marker per Point — kernellab's, PyTorch's (and Triton's). `recorded` adds "recorded on <GPU>,
    <date>" to the title (from `gpu`/`date` or the peaks)."""
    points = [p for p in points if p.flops > 0 and p.bytes > 0 and p.seconds > 0]
    placed = [k for k in placed if k.flops > 0 and k.bytes > 0]
    fig, (ax,) = _figure(width=8.6, layout=None)  # margins set below: a layout engine doubles the drawing time
    xs = [p.intensity for p in points] + [k.intensity for k in placed] or [1.0]
    bw = (peaks or {}).get("bytes_per_s")
    pk = (peaks or {}).get("flops_per_s")
    ridge = pk / bw if bw and pk else None
    lo = min(xs + ([ridge] if ridge else [])) / 8
    hi = max(xs + ([ridge] if ridge else [])) * 8
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    if bw:
        ys = [min(bw * x, pk) if pk else bw * x for x in grid]
        ax.plot(grid, ys, color="0.25", lw=2, label=f"memory roof {bw / 1e12:.2f} TB/s")
    if pk:
        ax.axhline(pk, color="0.55", lw=1.2, ls="--",
                   label=f"compute roof {pk / 1e12:.0f} TFLOP/s ({peaks.get('flops_dtype', '')} matmul)")
    if ridge:
        ax.axvline(ridge, color="0.8", lw=0.8, ls=":")
    seen = set()
    for p in points:
        marker, color = _STYLE.get(p.impl, ("D", "C3"))
        ax.scatter([p.intensity], [p.flops_per_s], marker=marker, color=color, s=46,
                   zorder=4 if p.impl == "kernellab" else 3, alpha=0.9,
                   label=p.impl if p.impl not in seen else None, edgecolors="white", linewidths=0.6)
        seen.add(p.impl)
    for k in placed:  # the user's kernel: where it sits by intensity, and the most it could reach there
        top = k.bound(peaks)
        ax.axvline(k.intensity, color="C3", lw=1.4, ls="--", zorder=5,
                   label=f"{k.label}: {k.intensity:.3g} FLOP/B (not timed)")
        if top:
            ax.scatter([k.intensity], [top], marker="*", s=160, color="C3", zorder=6, edgecolors="white",
                       linewidths=0.6)
            ax.annotate(f"{k.label}\n≤ {top / 1e12:.3g} TFLOP/s", (k.intensity, top), textcoords="offset points",
                        xytext=(6, -22), fontsize=8, color="C3", gid="kl-placed", zorder=7,
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("FLOP/s")
    sub = _label_for(peaks, recorded, gpu, date)
    ax.set_title(title + (f"\n{sub}" if sub else ""), fontsize=10)
    if note:
        ax.text(0.14, 0.02, note, transform=ax.transAxes, fontsize=7, color="0.4", ha="left", va="bottom")
    ax.grid(True, which="major", color="0.92")
    # the legend outside the axes, to the right: it never covers a point
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)
    _room_for_the_legend(fig, ax.get_legend_handles_labels()[1], two_line_title=bool(sub))
    # point labels: right of their point, left of it in the right third (not into the legend); a label that would
    # overlap a point, a label already placed (the fastest groups first) or the user's kernel's is left out
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    ax.get_ylim()  # the autoscaled limits, before measuring where labels land
    from matplotlib.transforms import Bbox

    marks = []
    for p in points:  # the markers too: a label over a point hides it
        x, y = ax.transData.transform((p.intensity, p.flops_per_s))
        marks.append(Bbox([[x - 4, y - 4], [x + 4, y + 4]]))
    frame = ax.get_window_extent(renderer)
    for t in ax.texts:  # the user's kernel's label: below right of its star, else a corner in the axes clear of points
        if t.get_gid() == "kl-placed":
            for xy, ha in (((6, -22), "left"), ((-8, -22), "right"), ((6, 6), "left"), ((-8, 6), "right"),
                           ((6, -22), "left")):  # the last: the first again, when every corner covers a point
                t.xyann = xy
                t.set_ha(ha)
                box = t.get_window_extent(renderer)
                if frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1) and \
                        not any(box.overlaps(b) for b in marks):
                    break
    taken = [t.get_window_extent(renderer) for t in ax.texts] + marks
    for label, p in sorted(_annotations(points), key=lambda t: -t[1].flops_per_s):
        right = math.log(p.intensity / lo) > 0.66 * math.log(hi / lo)
        t = ax.annotate(label, (p.intensity, p.flops_per_s), textcoords="offset points",
                        xytext=(-6, 4) if right else (6, 4), ha="right" if right else "left", fontsize=7, color="0.3")
        box = t.get_window_extent(renderer)
        if any(box.overlaps(b) for b in taken):
            t.remove()
        else:
            taken.append(box)
    return fig


def _room_for_the_legend(fig, labels, fontsize: float = 8, axes_w: float = 5.4, height: float = 4.6,
                         two_line_title: bool = True) -> None:
    """Fixed margins in place of a layout engine (which draws the figure twice more: half of a roofline's time):
    the axes `axes_w` inches wide, and the figure as much wider as the legend's longest label needs (its text at
    0.62 em per character, which DejaVu Sans, matplotlib's font, stays under, plus the marker)."""
    left, bottom, top, pad = 0.85, 0.6, 0.75 if two_line_title else 0.45, 0.15
    legend_w = 0.55 + max((len(x) for x in labels), default=0) * fontsize * 0.62 / 72
    width = left + axes_w + pad + legend_w + 0.1
    fig.set_size_inches(width, height)
    fig.subplots_adjust(left=left / width, right=(left + axes_w) / width, bottom=bottom / height,
                        top=1 - top / height)


def _annotations(points):
    """One label per group of cases at about the same intensity (2 significant digits), placed at the
    group's fastest kernellab point: "softmax fp32 (x4)" rather than four overlapping names."""
    groups: dict = {}
    for p in points:
        key = float(f"{p.intensity:.2g}")
        groups.setdefault(key, []).append(p)
    out = []
    for pts in groups.values():
        labels = list(dict.fromkeys(p.label for p in pts))
        mine = [p for p in pts if p.impl == "kernellab"] or pts
        best = max(mine, key=lambda p: p.flops_per_s)
        if len(labels) == 1:
            text = labels[0]
        else:
            # the words the cases share ("softmax fp32"), else the fastest one's name: never a word cut in two
            words = os.path.commonprefix([x.split() for x in labels])
            text = f"{' '.join(words)} (x{len(labels)})" if words else f"{best.label} (+{len(labels) - 1})"
        out.append((text, best))
    return out


def sweep_figure(sizes, times_kernel, times_torch=None, bytes=None, size_name: str = "n",
                 peaks: dict | None = None, title: str = "kernellab vs PyTorch", kernel_label: str = "kernellab",
                 torch_label: str = "torch"):
    """Time (and, given the bytes moved per size, GB/s) against problem size, log-log: the kernel's
    sweep beside the PyTorch expression's. Times are seconds; a None time is left out. The bandwidth
    panel draws the memory roof from `peaks` when given."""
    sizes = list(sizes)
    panels = 2 if bytes is not None else 1
    fig, axes = _figure(width=6.0 * panels, height=4.2, ncols=panels)

    def series(ax, ys, label, style, scale):
        pairs = [(s, scale(y, i)) for i, (s, y) in enumerate(zip(sizes, ys)) if y]
        if pairs:
            marker, color = style
            ax.plot([s for s, _ in pairs], [y for _, y in pairs], marker=marker, color=color, label=label)

    ax = axes[0]
    series(ax, times_kernel, kernel_label, _STYLE["kernellab"], lambda t, i: t * 1e6)
    if times_torch is not None:
        series(ax, times_torch, torch_label, _STYLE["torch"], lambda t, i: t * 1e6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(size_name)
    ax.set_ylabel("time (µs)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, color="0.92")
    ax.legend(fontsize=8)
    if bytes is not None:
        bytes = list(bytes)
        ax = axes[1]
        series(ax, times_kernel, kernel_label, _STYLE["kernellab"], lambda t, i: bytes[i] / t / 1e9)
        if times_torch is not None:
            series(ax, times_torch, torch_label, _STYLE["torch"], lambda t, i: bytes[i] / t / 1e9)
        if peaks and peaks.get("bytes_per_s"):
            ax.axhline(peaks["bytes_per_s"] / 1e9, color="0.4", ls="--", lw=1,
                       label=f"copy peak {peaks['bytes_per_s'] / 1e12:.2f} TB/s")
        ax.set_xscale("log")
        ax.set_xlabel(size_name)
        ax.set_ylabel("GB/s")
        ax.set_title("bandwidth", fontsize=10)
        ax.grid(True, color="0.92")
        ax.legend(fontsize=8)
    return fig


def figure_png(fig) -> bytes:
    """A Figure as PNG bytes (no pyplot, no display backend needed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# --------------------------------------------------------------------------------------------- the view
class PerformanceView:
    """The performance view: a roofline of result rows and, for a size sweep, time and GB/s against size.

    `records` is a result set (``{gpu, date, rows, recorded}``, as :func:`recorded_results` returns and
    the ``%%kernel --bench`` magic makes) or a list of rows. Rows have the benchmark files' shape:
    ``{case, bytes, flops?, size?: {name: value}, kernellab: {seconds}, torch: {seconds}, triton?}``.
    Shown in a notebook as PNG images (static: saved notebooks and nbconvert keep them).
    """

    def __init__(self, records, peaks: dict | None = None, title: str | None = None, placed=()):
        if isinstance(records, dict):
            self.rows = list(records.get("rows", []))
            self.gpu, self.date = records.get("gpu"), records.get("date")
            self.recorded = bool(records.get("recorded"))
            # a path relative to the repository (`file`), never this machine's absolute path
            src = records.get("file") or records.get("source")
            self.source = Path(src).name if src and os.path.isabs(str(src)) else src
        else:
            self.rows, self.gpu, self.date, self.recorded, self.source = list(records), None, None, False, None
        self.placed = list(placed)  # Placed kernels: the user's, by intensity only (no GPU to time it)
        if peaks is None:
            peaks = (recorded_peaks(self.gpu) if self.recorded and self.gpu else None) or cached_peaks() \
                or (recorded_peaks(self.gpu) if self.gpu else None)
        self.peaks = peaks
        self.title = title or ("recorded benchmarks" if self.recorded else "kernellab vs PyTorch")
        self._figures = None

    @property
    def points(self) -> list[Point]:
        return points_from_rows(self.rows)

    def _sweep(self):
        sized = [r for r in self.rows if isinstance(r.get("size"), dict) and r["size"]]
        if len(sized) < 2:
            return None
        name = next(iter(sized[0]["size"]))
        sizes = [r["size"][name] for r in sized]
        tk = [(r.get("kernellab") or {}).get("seconds") for r in sized]
        tt = [(r.get("torch") or {}).get("seconds") for r in sized]
        nbytes = [r.get("bytes") for r in sized]
        return sweep_figure(sizes, tk, tt if any(tt) else None, nbytes if all(nbytes) else None, name,
                            self.peaks, title=self.title)

    def figures(self) -> list:
        if self._figures is None:
            figs = []
            pts = self.points
            if pts or self.placed:
                est = [r for r in self.rows if r.get("flops_estimated")]
                how = est[0].get("flops_how", "each case's elementwise arithmetic") if est else ""
                notes = ([f"FLOPs estimated from {how}"] if est else []) + (
                    ["bytes: each input read and the output written once"]
                    if any(r.get("bytes_estimated") for r in self.rows) else [])
                figs.append(roofline_figure(pts, self.peaks, self.title, recorded=self.recorded, gpu=self.gpu,
                                            date=self.date, note="; ".join(notes) or None, placed=self.placed))
            sweep = self._sweep()
            if sweep is not None:
                figs.append(sweep)
            self._figures = figs
        return self._figures

    def png(self) -> list[bytes]:
        return [figure_png(f) for f in self.figures()]

    def table(self) -> str:
        """The rows as text: case, then GB/s per implementation for memory-bound sets (rows with bytes), TFLOP/s
        for compute-bound ones (matmul, attention: rows with FLOPs and no bytes)."""
        def rate(r, rec, unit):
            if unit == "GB/s":
                return rec.get("gbps") or (r["bytes"] / rec["seconds"] / 1e9 if rec.get("seconds") and r.get("bytes")
                                           else None)
            return rec.get("tflops") or (r["flops"] / rec["seconds"] / 1e12 if rec.get("seconds") and r.get("flops")
                                         else None)

        # bytes estimated for the roofline's x axis (matmul, attention) do not make a compute-bound set a GB/s table
        by_bytes = any((r.get("bytes") and not r.get("bytes_estimated")) or any((r.get(i) or {}).get("gbps")
                       for i in IMPLS) for r in self.rows)
        by_flops = any(r.get("flops") or any((r.get(i) or {}).get("tflops") for i in IMPLS) for r in self.rows)
        unit = "TFLOP/s" if by_flops and not by_bytes else "GB/s"
        head = f"{'case':<34}" + "".join(f"{impl + ' ' + unit:>19}" for impl in IMPLS)
        lines = [head]
        for r in self.rows:
            cells = []
            for impl in IMPLS:
                value = rate(r, r.get(impl) or {}, unit)
                cells.append(f"{value:19.0f}" if value else f"{'-':>19}")
            lines.append(f"{str(r.get('case', '?'))[:34]:<34}" + "".join(cells))
        return "\n".join(lines)

    def _caption(self) -> str:
        parts = []
        if self.recorded:
            parts.append(f"recorded on {self.gpu}, {self.date}" + (f" ({self.source})" if self.source else ""))
        if self.peaks:
            parts.append("peaks: " + describe_peaks(self.peaks))
        return "; ".join(parts)

    def __repr__(self):
        cap = self._caption()
        return f"PerformanceView: {self.title}" + (f" [{cap}]" if cap else "") + "\n" + self.table()

    def _repr_mimebundle_(self, include=None, exclude=None):
        import html

        pngs = self.png()
        imgs = "".join(f'<img src="data:image/png;base64,{base64.b64encode(p).decode()}" '
                       f'style="max-width:100%"/>' for p in pngs)
        cap = html.escape(self._caption())
        body = imgs or "<i>no points: the rows carry no FLOPs/bytes/seconds</i>"
        bundle = {"text/plain": repr(self),
                  "text/html": f'<div class="kl-perf">{body}<div style="font-size:11px;color:inherit;'
                                f'opacity:.7">{cap}</div></div>'}
        if pngs:
            bundle["image/png"] = base64.b64encode(pngs[0]).decode()
        return bundle

