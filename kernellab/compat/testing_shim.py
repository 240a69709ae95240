"""`triton.testing`: kernellab's timing helpers plus the benchmark-table decorator tutorials use."""
from __future__ import annotations


class Benchmark:
    """One sweep: `x_names` take each of `x_vals`; `line_arg` takes each of `line_vals` (one line per value)."""

    def __init__(self, x_names, x_vals, line_arg, line_vals, line_names, plot_name, args=None, xlabel="", ylabel="",
                 x_log=False, y_log=False, styles=None, color=None):
        self.x_names, self.x_vals, self.line_arg = list(x_names), list(x_vals), line_arg
        self.line_vals, self.line_names, self.plot_name = list(line_vals), list(line_names), plot_name
        self.args, self.xlabel, self.ylabel = dict(args or {}), xlabel, ylabel
        self.x_log, self.y_log, self.styles = x_log, y_log, styles


class Mark:
    """What `@perf_report(...)` returns: `.run(print_data=True, show_plots=..., save_path=...)` runs the sweep."""

    def __init__(self, fn, benchmarks):
        self.fn, self.benchmarks = fn, benchmarks

    def _sweep(self, bench: Benchmark, **kwargs):
        rows = []
        for x in bench.x_vals:
            xs = list(x) if isinstance(x, (list, tuple)) else [x] * len(bench.x_names)
            point = dict(zip(bench.x_names, xs))
            means, lows, highs = [], [], []
            for value in bench.line_vals:
                out = self.fn(**point, **{bench.line_arg: value}, **bench.args, **kwargs)
                mean, low, high = (tuple(out) + (None, None))[:3] if isinstance(out, (tuple, list)) else (out, out, out)
                means.append(mean)
                lows.append(low if low is not None else mean)
                highs.append(high if high is not None else mean)
            rows.append((xs, means, lows, highs))
        return rows

    def _table(self, bench, rows):
        head = list(bench.x_names) + [f"{n} ({bench.ylabel})" if bench.ylabel else n for n in bench.line_names]
        body = [[_fmt(v) for v in xs + means] for xs, means, _, _ in rows]
        widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(head)]
        lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in body]
        return "\n".join(lines)

    def _plot(self, bench, rows, show_plots, save_path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots()
        xs = [r[0][0] for r in rows]
        for i, name in enumerate(bench.line_names):
            color, style = (bench.styles[i] if bench.styles and i < len(bench.styles) else (None, "-"))
            ax.plot(xs, [r[1][i] for r in rows], label=name, color=color, ls=style)
            ax.fill_between(xs, [r[2][i] for r in rows], [r[3][i] for r in rows], alpha=0.15, color=color)
        ax.legend()
        ax.set_xlabel(bench.xlabel or bench.x_names[0])
        ax.set_ylabel(bench.ylabel)
        ax.set_xscale("log" if bench.x_log else "linear")
        ax.set_yscale("log" if bench.y_log else "linear")
        if save_path:
            import os

            fig.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
        if show_plots:
            plt.show()
        plt.close(fig)

    def run(self, show_plots=False, print_data=False, save_path="", return_df=False, **kwargs):
        benches = self.benchmarks if isinstance(self.benchmarks, list) else [self.benchmarks]
        frames = []
        for bench in benches:
            rows = self._sweep(bench, **kwargs)
            if print_data:
                print(f"{bench.plot_name}:")
                print(self._table(bench, rows))
            if show_plots or save_path:
                self._plot(bench, rows, show_plots, save_path)
            if return_df:
                frames.append(_frame(bench, rows))
        if return_df:
            return frames[0] if len(frames) == 1 else frames


def _fmt(v):
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _frame(bench, rows):
    """A pandas DataFrame where pandas is installed, else a list of dict rows."""
    records = [dict(zip(bench.x_names, xs)) | dict(zip(bench.line_names, means)) for xs, means, _, _ in rows]
    try:
        import pandas as pd
    except ImportError:
        return records
    return pd.DataFrame.from_records(records)


def perf_report(benchmarks):
    """Decorate a function `f(**x, line_arg=value, **args) -> ms or (ms, min, max)` into a runnable sweep."""
    return lambda fn: Mark(fn, benchmarks)


def do_bench_cudagraph(fn, rep=20, grad_to_none=None, quantiles=None, return_mode="mean"):
    from ..testing import do_bench

    return do_bench(fn, rep=rep, grad_to_none=grad_to_none, quantiles=quantiles, return_mode=return_mode)


def get_dram_gbps(device=None):
    """The DRAM bandwidth in GB/s from the device's memory clock and bus width."""
    from .driver import driver

    p = driver.active.utils.get_device_properties(device or 0)
    return 2 * p["mem_clock_rate"] * 1e3 * p["mem_bus_width"] / 8 / 1e9


def get_max_tensorcore_tflops(dtype, clock_rate, device=None):
    """Dense tensor-core TFLOP/s of an sm_90 part at `clock_rate` kHz (fp16/bf16; tf32 half, 8-bit double)."""
    from .driver import driver

    sms = driver.active.utils.get_device_properties(device or 0)["multiprocessor_count"]
    bits = getattr(dtype, "bits", getattr(dtype, "itemsize", 2) * 8)
    per_sm_per_clock = {32: 2048, 16: 4096, 8: 8192}.get(bits, 4096)
    return sms * per_sm_per_clock * clock_rate * 1e3 / 1e12


def get_max_simd_tflops(dtype, clock_rate, device=None):
    """FMA-pipe (non-tensor-core) TFLOP/s at `clock_rate` kHz: 4 sub-cores per SM, 32 fp32 or 64 fp16/bf16
    flops per sub-core per clock (Triton's model for sm_80 and later); xformers' matmul perf model reads it."""
    from .driver import driver

    sms = driver.active.utils.get_device_properties(device or 0)["multiprocessor_count"]
    bits = getattr(dtype, "bits", getattr(dtype, "itemsize", 4) * 8)
    if bits not in (16, 32):
        raise RuntimeError(f"get_max_simd_tflops: dtype {dtype} not supported (float32, float16, bfloat16)")
    return sms * 4 * (32 if bits == 32 else 64) * clock_rate * 1e-9


def nvsmi(attrs):
    """`nvidia-smi --query-gpu=<attrs>` for GPU 0, as integers (Triton's helper)."""
    import subprocess

    try:
        out = subprocess.check_output(["nvidia-smi", "-i", "0", "--query-gpu=" + ",".join(attrs),
                                       "--format=csv,noheader,nounits"])
    except (OSError, subprocess.CalledProcessError) as e:
        raise RuntimeError(f"triton.testing.nvsmi({attrs}): nvidia-smi failed ({e}); it needs an NVIDIA GPU") from None
    return [int(x) for x in out.decode().split(",")]


def module(make_module, testing):
    import contextlib

    return make_module(
        "triton.testing", "Timing and comparison helpers (kernellab.testing) and Triton's perf_report.",
        package=False, do_bench=testing.do_bench, assert_close=testing.assert_close,
        do_bench_cudagraph=do_bench_cudagraph,
        Benchmark=Benchmark, Mark=Mark, perf_report=perf_report, get_dram_gbps=get_dram_gbps,
        get_max_tensorcore_tflops=get_max_tensorcore_tflops, get_max_simd_tflops=get_max_simd_tflops, nvsmi=nvsmi,
        set_gpu_clock=lambda *a, **k: contextlib.nullcontext((None, None)),
    )
