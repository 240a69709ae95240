"""`kernellab` command line: `kernellab demo` compiles and runs a kernel and prints its passes;
`kernellab info` prints the machine, versions and peaks; `kernellab lab` starts JupyterLab on a working copy of
the notebooks."""
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


WORKING_COPY = "my-notebooks"


def working_copy(source) -> tuple:
    """The learner's copy of the notebooks, beside `source` (`my-notebooks/`, gitignored): the lab serves it so
    that autosave never edits the repository's notebooks (which the tests run). Files missing from it are copied
    in; files already there are never overwritten. Returns (folder, names of the files copied now)."""
    import shutil

    dest = source.parent / WORKING_COPY
    dest.mkdir(exist_ok=True)
    copied = []
    for f in sorted(source.iterdir()):
        if f.is_file() and not f.name.startswith(".") and not (dest / f.name).exists():
            shutil.copy2(f, dest / f.name)
            copied.append(f.name)
    return dest, copied


def _option(args: list, *names: str):
    """The value of the first of `--name=value` / `--name value` in JupyterLab's arguments, else None."""
    for i, a in enumerate(args):
        for n in names:
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
            if a == n and i + 1 < len(args):
                return args[i + 1]
    return None


def _free_port(ip: str, start: int = 8888) -> int:
    """The first port from `start` that nothing listens on at `ip` (JupyterLab's default is 8888)."""
    import socket

    for port in range(start, start + 100):
        with socket.socket() as s:
            try:
                s.bind((ip if ip not in ("", "*") else "0.0.0.0", port))
                return port
            except OSError:
                continue
    return 0


def lab_command(port=None, no_browser=False, directory=None, extra=(), token=None, ip="127.0.0.1") -> list:
    """The command line that starts JupyterLab on `directory`; `extra` (JupyterLab's own arguments) comes last so
    it overrides ours. As root it adds --allow-root (JupyterLab refuses to start as root without it)."""
    import os

    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={directory}"]
    extra = list(extra)
    if _option(extra, "--ip", "--ServerApp.ip") is None:
        cmd.append(f"--ServerApp.ip={ip}")
    if port is not None:
        cmd += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    if token is not None:
        cmd.append(f"--IdentityProvider.token={token}")
    if no_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        cmd.append("--allow-root")
    return cmd + extra


def _banner(url: str, directory, copied: list, ip: str, port: int) -> str:
    """One block, printed once JupyterLab answers: the URL (with its token) and where the notebooks are."""
    bar = "=" * 78
    lines = ["", bar, "  kernellab lab is running; open this URL in a browser:", "", f"    {url}", "",
             f"  notebooks: {directory}"]
    if copied:
        lines.append(f"  (copied {len(copied)} file(s) from notebooks/: this is your working copy, edit freely; "
                     "it is never overwritten)")
    if ip in ("0.0.0.0", "", "*", "::"):
        lines.append("  listening on every interface: from another machine use this machine's address for 127.0.0.1")
    else:
        lines.append(f"  from another machine: ssh -L {port}:127.0.0.1:{port} <this host>, then open the URL there")
    lines += ["  stop: Ctrl-C", bar, ""]
    return "\n".join(lines)


def _wait_listening(proc, host: str, port: int, timeout: float = 120.0) -> bool:
    """True once JupyterLab answers on host:port; False if it exited or took longer than `timeout`."""
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def lab(port=None, no_browser=False, directory=None, extra=()) -> int:
    """Start JupyterLab on a working copy of the teaching notebooks (`%load_ext kernellab` works in them) and print
    one banner with the URL once it answers. `extra` goes to JupyterLab unchanged (e.g. --ip 0.0.0.0)."""
    import importlib.util
    import os
    import secrets
    import signal
    import subprocess
    from pathlib import Path

    if importlib.util.find_spec("jupyterlab") is None:
        print("JupyterLab is not installed in this Python environment. Install the lab extras with\n"
              "    pip install -e '.[lab]'        (in the kernellab checkout)\n"
              "or  pip install 'kernellab[lab]'", file=sys.stderr)
        return 1
    copied = []
    if directory is None:
        found = notebooks_dir()
        if found is None:
            print("cannot find the notebooks/ folder of the kernellab checkout; pass --dir DIR", file=sys.stderr)
            return 1
        directory, copied = working_copy(found)
    directory = Path(directory).expanduser().resolve()
    if not directory.is_dir():
        print(f"--dir {directory}: no such directory", file=sys.stderr)
        return 1
    extra = list(extra)
    ip = _option(extra, "--ip", "--ServerApp.ip") or "127.0.0.1"
    if port is None:
        given = _option(extra, "--port", "--ServerApp.port")
        port = None if given else _free_port(ip) or None
    else:
        given = None
    token = _option(extra, "--IdentityProvider.token", "--ServerApp.token", "--NotebookApp.token")
    if token is None:
        token = os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(24)
        token_arg = token
    else:
        token_arg = None
    try:
        shown_port = int(given) if given else port
    except ValueError:
        shown_port = None  # JupyterLab will say what is wrong with it
    host = "127.0.0.1" if ip in ("0.0.0.0", "", "*", "::", "localhost") else ip
    url = f"http://{host}:{shown_port}/lab" + (f"?token={token}" if token else "")
    cmd = lab_command(port, no_browser, directory, extra, token=token_arg, ip="127.0.0.1")
    if given and _option(extra, "--ServerApp.port_retries") is None:
        cmd.insert(3, "--ServerApp.port_retries=0")  # the banner's port, or JupyterLab's error that it is taken
    if _option(extra, "--log-level", "--ServerApp.log_level", "--Application.log_level") is None:
        cmd.insert(3, "--Application.log_level=WARN")  # JupyterLab's start-up chatter; the banner says what matters
    print(f"kernellab lab: starting JupyterLab in {directory} ...", flush=True)
    try:
        proc = subprocess.Popen(cmd)
    except KeyboardInterrupt:
        return 0
    # `kill <pid>` of this process (run.sh execs it) must stop JupyterLab too
    try:
        previous = signal.signal(signal.SIGTERM, lambda *a: proc.terminate())
    except ValueError:  # not the main thread
        previous = None
    try:
        if shown_port and _wait_listening(proc, host, shown_port):
            print(_banner(url, directory, copied, ip, shown_port), flush=True)
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # JupyterLab got it too and asks to confirm or shuts down
                continue
    finally:
        if proc.poll() is None:
            proc.terminate()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


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
    pl = sub.add_parser("lab", help="start JupyterLab on the teaching notebooks", allow_abbrev=False,
                        description="Start JupyterLab on your working copy of the repository's notebooks/ "
                                    f"({WORKING_COPY}/ beside it, copied the first time, never overwritten) and print "
                                    "the URL. Binds 127.0.0.1 unless you pass --ip. Any other argument goes to "
                                    "JupyterLab unchanged (e.g. --ip 0.0.0.0, --allow-root, --ServerApp.xyz=...). "
                                    "Needs the lab extras: pip install -e '.[lab]'.")
    pl.add_argument("--port", type=int, default=None,
                    help="the port to serve on (default: the first free one from 8888)")
    pl.add_argument("--no-browser", action="store_true", help="do not open a browser")
    pl.add_argument("--dir", default=None, metavar="DIR",
                    help=f"serve DIR instead of the working copy {WORKING_COPY}/")
    args, extra = p.parse_known_args(argv)
    if extra and args.cmd != "lab":
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.cmd == "demo":
        return demo()
    if args.cmd == "info":
        return info(measure=args.measure)
    return lab(args.port, args.no_browser, args.dir, extra)


if __name__ == "__main__":
    sys.exit(main())
