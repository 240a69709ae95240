"""`kernellab` command line: `kernellab demo` compiles and runs a kernel and prints its passes;
`kernellab info` prints the machine, versions and peaks; `kernellab lab` starts JupyterLab on the notebooks."""
from __future__ import annotations

import argparse
import platform
import sys


def demo() -> int:
    import torch

    import kernellab as kl
    import kernellab.language as tl

    @kl.jit
    def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        y = num / tl.sum(num, axis=0)
        tl.store(out_ptr + row * n_cols + cols, y, mask=mask)

    x = torch.randn(64, 100, generator=torch.Generator().manual_seed(0))
    y = torch.full_like(x, float("nan"))
    compiled = softmax_kernel[(x.shape[0],)](y, x, x.shape[1], BLOCK=128)
    ref = torch.softmax(x.double(), dim=1)
    err = (y.double() - ref).abs().max().item()
    print("kernellab demo: a fused softmax, compiled by kernellab and run on the CPU interpreter\n")
    print(compiled.trace.summary())
    print("\nfinal tile IR:\n")
    print(compiled.asm["tile"])
    print(f"max |kernellab - torch(float64)| = {err:.2e} over {x.numel()} elements")
    return 0 if err < 1e-5 else 1


def _version(dist: str, module: str | None = None) -> str | None:
    """The installed version of a distribution (or a module's __version__), None when absent."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        pass
    if module:
        try:
            return getattr(__import__(module, fromlist=["_"]), "__version__", "installed")
        except ImportError:
            return None
    return None


def _gpu_line() -> tuple[str, bool]:
    try:
        import torch
    except ImportError:
        return "none (torch is not installed)", False
    try:
        if not torch.cuda.is_available():
            return "none: kernels run on the CPU interpreter", False
        props = torch.cuda.get_device_properties(0)
        from .compiler.codegen.target import detect_target

        target = detect_target(0)
        n = torch.cuda.device_count()
        return (f"{props.name} ({target.cpu if target else '?'}, {props.multi_processor_count} SMs, "
                f"{props.total_memory / 2**30:.0f} GiB)" + (f", and {n - 1} more" if n > 1 else "")), True
    except Exception as e:  # a broken driver: say so, keep printing
        return f"none usable ({type(e).__name__}: {e})", False


def _toolchain() -> list[tuple[str, str]]:
    rows = []
    try:
        from .compiler.codegen.ptx_to_cubin import find_ptxas, ptxas_version

        path = find_ptxas()
        rows.append(("ptxas", f"{ptxas_version(path)} ({path})"))
    except Exception as e:
        rows.append(("ptxas", f"not found ({str(e).splitlines()[0]})"))
    try:
        from .compiler.codegen.libdevice import find_libdevice

        rows.append(("libdevice", find_libdevice()))
    except Exception as e:
        rows.append(("libdevice", f"not found ({str(e).splitlines()[0]})"))
    return rows


def info(measure: bool = False) -> int:
    """Print the GPU, the versions of everything kernellab uses, and the peaks a roofline is drawn against
    (measured on this GPU the first time and cached, so rooflines have roofs without a separate step)."""
    import kernellab

    from .viz import roofline

    gpu, has_gpu = _gpu_line()
    llvm = None
    try:
        import llvmlite.binding as llvm_binding

        llvm = ".".join(map(str, llvm_binding.llvm_version_info))
    except Exception:
        pass
    llvmlite_v = _version("llvmlite", "llvmlite")
    rows = [("kernellab", kernellab.__version__),
            ("python", f"{platform.python_version()} ({sys.platform}, {platform.machine()})"),
            ("torch", _version("torch", "torch") or "not installed"),
            ("llvmlite", f"{llvmlite_v} (LLVM {llvm})" if llvmlite_v else "not installed"),
            ("cuda-bindings", _version("cuda-bindings") or _version("cuda-python") or "not installed"),
            ("triton", _version("triton", "triton") or "not installed (optional: benchmarks compare with it)")]
    rows += _toolchain()
    rows.append(("GPU", gpu))
    width = max(len(k) for k, _ in rows) + 2
    for k, v in rows:
        print(f"{k:<{width}}{v}")
    print()
    if has_gpu:
        if measure or roofline.cached_peaks() is None:
            print("peaks: measuring this GPU (a 2 GiB copy and an 8192^3 bf16 matmul, a few seconds; cached)...",
                  flush=True)
        try:
            peaks = roofline.machine_peaks(force=measure)
        except Exception as e:  # a busy GPU (out of memory): nothing is cached, the next run measures again
            print(f"peaks: measuring failed: {type(e).__name__}: {e}")
            return 1 if measure else 0
        print(f"peaks: {roofline.describe_peaks(peaks)}")
        if not peaks.get("recorded"):
            print(f"       cached in {roofline.peaks_path(peaks['gpu'])}")
    else:
        if measure:
            print("peaks: --measure needs a CUDA GPU and none is available here")
        _print_recorded(roofline)
        return 1 if measure else 0
    return 0


def _print_recorded(roofline) -> None:
    """The peaks and benchmark results recorded on a GPU, labeled as recorded (for machines without one)."""
    for gpu, peaks in roofline.RECORDED_PEAKS.items():
        print(f"peaks (recorded, not measured here): {roofline.describe_peaks(dict(peaks, recorded=True))}")
    results = roofline.recorded_results()
    if not results:
        print("recorded results: none found (benchmarks/results/*.json in the kernellab checkout)")
        return
    for res in results:
        print(f"\nrecorded results on {res['gpu']}, {res['date']} ({res['source']}):")
        view = roofline.PerformanceView(res)
        for line in view.table().splitlines():
            print("  " + line)


def notebooks_dir():
    """The repository's notebooks/ folder (a checkout or an editable install), or None."""
    from pathlib import Path

    import kernellab

    for p in getattr(kernellab, "__path__", [str(Path(__file__).parent)]):
        cand = Path(p).resolve().parent / "notebooks"
        if cand.is_dir():
            return cand
    return None


def lab_command(port=None, no_browser=False, directory=None) -> list:
    """The command line that starts JupyterLab on `directory` (default: the repository's notebooks/)."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={directory}"]
    if port is not None:
        cmd.append(f"--ServerApp.port={port}")
    if no_browser:
        cmd.append("--no-browser")
    return cmd


def lab(port=None, no_browser=False, directory=None) -> int:
    """Start JupyterLab on the teaching notebooks (`%load_ext kernellab` works in them)."""
    import importlib.util
    import subprocess
    from pathlib import Path

    if importlib.util.find_spec("jupyterlab") is None:
        print("JupyterLab is not installed in this Python environment. Install the lab extras with\n"
              "    pip install -e '.[lab]'        (in the kernellab checkout)\n"
              "or  pip install 'kernellab[lab]'", file=sys.stderr)
        return 1
    if directory is None:
        found = notebooks_dir()
        if found is None:
            print("cannot find the notebooks/ folder of the kernellab checkout; pass --dir DIR", file=sys.stderr)
            return 1
        directory = found
    directory = Path(directory).expanduser().resolve()
    if not directory.is_dir():
        print(f"--dir {directory}: no such directory", file=sys.stderr)
        return 1
    print(f"starting JupyterLab in {directory} (Ctrl-C to stop)")
    try:
        return subprocess.call(lab_command(port, no_browser, directory))
    except KeyboardInterrupt:
        return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="kernellab")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help="compile and run a kernel on this machine and print its passes")
    pi = sub.add_parser("info", help="print the GPU, versions and peaks",
                        description="Print the GPU (or that there is none), the versions of python, torch, llvmlite, "
                                    "cuda-bindings, triton, ptxas and the libdevice path, and the peaks rooflines "
                                    "are drawn against: measured on this GPU (the first time; cached), or, without "
                                    "a GPU, the ones recorded on an H200 with the recorded benchmark results.")
    pi.add_argument("--measure", action="store_true",
                    help="measure this GPU's peaks again and replace the cached ones (without it they are "
                         "measured once, the first time, and cached)")
    pl = sub.add_parser("lab", help="start JupyterLab on the teaching notebooks",
                        description="Start JupyterLab on the repository's notebooks/ folder. Needs the lab extras: "
                                    "pip install -e '.[lab]'.")
    pl.add_argument("--port", type=int, default=None, help="the port to serve on (default: JupyterLab's, 8888)")
    pl.add_argument("--no-browser", action="store_true", help="do not open a browser")
    pl.add_argument("--dir", default=None, metavar="DIR", help="serve DIR instead of the repository's notebooks/")
    args = p.parse_args(argv)
    if args.cmd == "demo":
        return demo()
    if args.cmd == "info":
        return info(measure=args.measure)
    return lab(args.port, args.no_browser, args.dir)


if __name__ == "__main__":
    sys.exit(main())
