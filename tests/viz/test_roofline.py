"""Rooflines, peaks and recorded results: points are placed at flops/bytes and flops/seconds, computed here
by hand from the benchmark files (the independent reference), not from the module's own helpers."""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure  # noqa: E402

from kernellab.errors import KernelLabError  # noqa: E402
from kernellab.viz import roofline  # noqa: E402
from kernellab.viz.roofline import (  # noqa: E402
    PerformanceView,
    Point,
    estimate_flops,
    points_from_rows,
    recorded_results,
    roofline_figure,
    sweep_figure,
)

H200 = "2026-11-21-NVIDIA_H200-memory_bound.json"


def _has_cuda():
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.fixture()
def h200():
    results = [r for r in recorded_results() if r["source"].endswith(H200)]
    assert results, "benchmarks/results holds the recorded H200 results"
    return results[0]


def test_recorded_results_are_found_and_labeled(h200):
    raw = json.loads(open(h200["source"]).read())
    assert h200["gpu"] == raw["gpu"] == "NVIDIA H200" and h200["date"] == raw["date"] == "2026-11-21"
    assert h200["recorded"] is True
    assert [r["case"] for r in h200["rows"]] == [r["case"] for r in raw["rows"]]
    # the CPU interpreter's file has no GPU rows: left out by default, kept on request
    assert all(r["gpu"] for r in recorded_results())
    assert len(recorded_results(gpu_only=False)) >= len(recorded_results()) + 1


def test_flops_estimates_per_case():
    assert estimate_flops("vector_add 2^28 fp32") == 2**28
    assert estimate_flops("softmax fp32 M=8192 N=16384") == 5 * 8192 * 16384
    assert estimate_flops("layer_norm fp16 M=4096 N=1024") == 7 * 4096 * 1024
    assert estimate_flops("matmul bf16 M=1 N=2") is None


def test_points_are_flops_over_bytes_and_flops_over_seconds(h200):
    raw = json.loads(open(h200["source"]).read())
    row = raw["rows"][0]  # vector add of 2^28 fp32: 1 add per element, 12 bytes per element
    pts = [p for p in points_from_rows(h200["rows"]) if p.label == row["case"]]
    assert {p.impl for p in pts} == {"kernellab", "torch", "triton"}
    for p in pts:
        assert p.intensity == pytest.approx(2**28 / row["bytes"]) == pytest.approx(1 / 12)
        assert p.flops_per_s == pytest.approx(2**28 / row[p.impl]["seconds"])
        assert p.bytes_per_s / 1e9 == pytest.approx(row[p.impl]["gbps"])


def test_points_skip_rows_without_flops_or_time():
    rows = [{"case": "a", "bytes": 100, "flops": 50, "kernellab": {"seconds": 2.0}, "torch": {"seconds": None}},
            {"case": "b", "bytes": 100, "kernellab": {"seconds": 1.0}}]
    (p,) = points_from_rows(rows)
    assert (p.label, p.impl, p.intensity, p.flops_per_s) == ("a", "kernellab", 0.5, 25.0)


def test_roofline_figure_from_recorded_results(h200):
    peaks = roofline.recorded_peaks("NVIDIA H200")
    pts = points_from_rows(h200["rows"])
    fig = roofline_figure(pts, peaks, "recorded", recorded=True, gpu=h200["gpu"], date=h200["date"])
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "recorded on NVIDIA H200, 2026-11-21" in ax.get_title()
    # the memory roof: y = bandwidth * intensity left of the ridge, the compute peak right of it
    roof = next(line for line in ax.get_lines() if "memory roof" in line.get_label())
    ridge = peaks["flops_per_s"] / peaks["bytes_per_s"]
    for x, y in zip(roof.get_xdata(), roof.get_ydata()):
        assert y == pytest.approx(min(peaks["bytes_per_s"] * x, peaks["flops_per_s"]))
    assert min(roof.get_xdata()) < ridge < max(roof.get_xdata())
    # the scatter markers sit at (flops / bytes, flops / seconds) of each run
    plotted = sorted((float(x), float(y)) for c in ax.collections for x, y in c.get_offsets())
    expected = []
    for row in h200["rows"]:
        for impl in ("kernellab", "torch", "triton"):
            expected.append((row["flops"] / row["bytes"], row["flops"] / row[impl]["seconds"]))
    expected.sort()
    assert len(plotted) == len(expected)
    for (px, py), (ex, ey) in zip(plotted, expected):
        assert (px, py) == (pytest.approx(ex), pytest.approx(ey))
    labels = {t.get_text() for t in ax.get_legend().get_texts()}
    assert {"kernellab", "torch", "triton"} <= labels
    # memory-bound kernels lie under the memory roof (within measurement noise of the copy peak)
    for x, y in plotted:
        assert y <= 1.1 * peaks["bytes_per_s"] * x


def test_sweep_figure_time_and_bandwidth():
    sizes = [2**10, 2**14, 2**18]
    tk, tt = [1e-6, 2e-6, 1e-5], [2e-6, 3e-6, 1.2e-5]
    nbytes = [12 * n for n in sizes]
    fig = sweep_figure(sizes, tk, tt, nbytes, "n", {"bytes_per_s": 4e12})
    t_ax, bw_ax = fig.axes
    k_line = next(line for line in t_ax.get_lines() if line.get_label() == "kernellab")
    assert list(k_line.get_xdata()) == sizes
    assert list(k_line.get_ydata()) == pytest.approx([t * 1e6 for t in tk])
    bw = next(line for line in bw_ax.get_lines() if line.get_label() == "torch")
    assert list(bw.get_ydata()) == pytest.approx([b / t / 1e9 for b, t in zip(nbytes, tt)])
    assert len(sweep_figure(sizes, tk).axes) == 1


def test_performance_view_png_and_bundle(h200):
    view = PerformanceView(h200)
    pngs = view.png()
    assert len(pngs) == 1 and pngs[0].startswith(b"\x89PNG")
    bundle = view._repr_mimebundle_()
    assert {"text/plain", "text/html", "image/png"} <= set(bundle)
    assert "recorded on NVIDIA H200, 2026-11-21" in bundle["text/plain"]
    assert "vector_add 2^28 fp32" in view.table()


def test_table_units_follow_the_rows():
    """Memory-bound rows (bytes) in GB/s; compute-bound rows (FLOPs, no bytes: matmul, attention) in TFLOP/s —
    `kernellab info` printed "-" for every matmul row when it read them as GB/s."""
    mem = PerformanceView([{"case": "add", "bytes": 12e9, "kernellab": {"seconds": 4e-3}, "torch": {"gbps": 2000}}])
    assert "kernellab GB/s" in mem.table().splitlines()[0]
    assert mem.table().splitlines()[1].split()[1:3] == ["3000", "2000"]
    mm = PerformanceView([{"case": "mm", "flops": 2 * 4096**3, "kernellab": {"seconds": 2 * 4096**3 / 700e12},
                           "torch": {"tflops": 650.0}}])
    head, row = mm.table().splitlines()
    assert "kernellab TFLOP/s" in head and "GB/s" not in head
    assert row.split()[1:] == ["700", "650", "-"]  # triton absent


def test_performance_view_of_a_sweep_has_two_figures():
    rows = [{"case": f"k n={n}", "size": {"n": n}, "bytes": 12 * n, "flops": n,
             "kernellab": {"seconds": 1e-6 + n * 3e-12}, "torch": {"seconds": 2e-6 + n * 3e-12}}
            for n in (2**10, 2**14, 2**18)]
    view = PerformanceView({"gpu": "NVIDIA H200", "date": "2026-11-21", "rows": rows},
                           peaks=roofline.recorded_peaks())
    figs = view.figures()
    assert len(figs) == 2 and len(figs[1].axes) == 2


def test_peaks_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(roofline, "gpu_name", lambda device=0: "Fake GPU 9000")
    assert roofline.cached_peaks() is None
    peaks = {"gpu": "Fake GPU 9000", "date": "2026-01-01", "bytes_per_s": 1e12, "flops_per_s": 1e14,
             "flops_dtype": "bf16"}
    (tmp_path / "peaks-Fake_GPU_9000.json").write_text(json.dumps(peaks))
    assert roofline.cached_peaks() == peaks
    assert roofline.measure_peaks() == peaks  # cached: nothing is measured
    assert "measured on Fake GPU 9000, 2026-01-01" in roofline.describe_peaks(peaks)




def test_machine_peaks_are_measured_once_then_cached(fake_gpu, tmp_path):
    peaks = roofline.machine_peaks()
    assert fake_gpu == ["Fake GPU 9000"] and not peaks.get("recorded")
    assert json.loads((tmp_path / "peaks-Fake_GPU_9000.json").read_text()) == peaks
    assert roofline.machine_peaks() == peaks and len(fake_gpu) == 1  # the cache: nothing measured again
    again = roofline.machine_peaks(force=True)
    assert len(fake_gpu) == 2 and again["bytes_per_s"] != peaks["bytes_per_s"] and roofline.cached_peaks() == again


def test_machine_peaks_without_gpu_are_the_recorded_ones(monkeypatch):
    monkeypatch.setattr(roofline, "gpu_name", lambda device=0: None)
    monkeypatch.setattr(roofline, "_measure", lambda *a: pytest.fail("measured without a GPU"))
    peaks = roofline.machine_peaks()
    assert peaks["recorded"] and peaks["gpu"] == "NVIDIA H200"
    assert "recorded on NVIDIA H200, 2026-11-21" in roofline.describe_peaks(peaks)


def test_performance_view_html_has_no_fixed_text_colour(h200):
    """The caption takes the theme's text colour (a fixed grey is unreadable on JupyterLab's dark theme)."""
    text = PerformanceView(h200)._repr_mimebundle_()["text/html"]
    styles = [s for s in re.findall(r'style="([^"]*)"', text) if "color" in s]
    assert styles and all("color:inherit" in s and "#" not in s for s in styles), styles


@pytest.mark.skipif(_has_cuda(), reason="checks the no-GPU error")
def test_measure_peaks_without_gpu_raises_a_kernellab_error():
    with pytest.raises(KernelLabError, match="needs a CUDA GPU"):
        roofline.measure_peaks()


def test_results_dir_override(tmp_path, monkeypatch):
    (tmp_path / "a.json").write_text(json.dumps({"gpu": "G", "date": "d", "rows": [
        {"case": "vector_add n=100", "bytes": 1200, "kernellab": {"seconds": 1e-6}}]}))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "cpu-list.json").write_text(json.dumps([{"op": "x", "passed": True}]))  # a tool's bare list
    monkeypatch.setenv("KERNELLAB_RESULTS_DIR", str(tmp_path))
    (res,) = recorded_results()
    assert res["gpu"] == "G" and res["rows"][0]["flops"] == 100 and res["rows"][0]["flops_estimated"]


def test_point_properties():
    p = Point("x", "kernellab", flops=200.0, bytes=50.0, seconds=2.0)
    assert (p.intensity, p.flops_per_s, p.bytes_per_s) == (4.0, 100.0, 25.0)


@pytest.mark.gpu
def test_measure_peaks_on_the_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    peaks = roofline.measure_peaks(copy_bytes=2**28, matmul_n=4096)
    assert 1e11 < peaks["bytes_per_s"] < 2e13 and 1e12 < peaks["flops_per_s"] < 5e15
    assert roofline.cached_peaks() == peaks


def test_recorded_results_of_one_benchmark_and_its_raw_file():
    """Readers pick their benchmark by name (not "the newest file with rows"), and get other shapes raw."""
    (mb,) = [r for r in roofline.recorded_results(benchmark="memory_bound") if r["source"].endswith(H200)]
    assert any(r["case"].startswith("vector_add") for r in mb["rows"])
    assert all(r["source"].endswith("-memory_bound.json") for r in roofline.recorded_results(benchmark="memory_bound"))
    idioms = roofline.recorded_benchmark("idioms")
    assert idioms["recorded"] and idioms["gpu"] == "NVIDIA H200" and idioms["file"].endswith("-NVIDIA_H200-idioms.json")
    newest = sorted(p.name for p in roofline.results_dir().glob("*-NVIDIA_H200-idioms.json"))[-1]
    assert idioms["file"] == f"benchmarks/results/{newest}" and idioms["date"] == newest[:10]
    assert roofline.recorded_benchmark("no-such-benchmark") is None
