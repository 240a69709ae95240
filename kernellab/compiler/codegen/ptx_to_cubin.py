"""PTX text -> cubin bytes, with the resource report ptxas prints (registers, spills, shared/local memory).

ptxas (a subprocess) is the main path: ``ptxas --gpu-name sm_90a -O3 -v``. Without a ptxas, nvJitLink
(``cuda.bindings.nvjitlink``, in process) compiles the PTX instead; its info log is parsed the same way, but it
may not hold the ``-v`` figures, in which case the report has ``None`` for them and the loader's
``CU_FUNC_ATTRIBUTE_*`` values are the source of truth.
"""
from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from ...errors import ToolchainError
from .target import Target

ENV_VAR = "KERNELLAB_PTXAS"

_WHEEL_BINS = (
    ("nvidia", "cu13", "bin"),            # nvidia-cuda-nvcc 13.x
    ("nvidia", "cuda_nvcc", "bin"),       # nvidia-cuda-nvcc-cu12
    ("triton", "backends", "nvidia", "bin"),
)


def _site_packages() -> list[Path]:
    dirs: list[str] = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return [Path(d) for d in dict.fromkeys(d for d in dirs if d)]


def ptxas_candidates() -> list[Path]:
    """Where :func:`find_ptxas` looks after the environment override and PATH, in order."""
    dirs: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]) / "bin")
    dirs.append(Path("/usr/local/cuda/bin"))
    for sp in _site_packages():
        dirs += [sp.joinpath(*rel) for rel in _WHEEL_BINS]
    return list(dict.fromkeys(d / "ptxas" for d in dirs))


def find_ptxas() -> str:
    """The path of the ``ptxas`` to use.

    Search order (the first executable file wins):

    1. the environment variable ``KERNELLAB_PTXAS`` (an error if it does not name an executable);
    2. ``ptxas`` on PATH;
    3. ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, ``/usr/local/cuda/bin``;
    4. pip wheels in each site-packages directory: ``nvidia/cu13/bin``, ``nvidia/cuda_nvcc/bin``
       (``pip install nvidia-cuda-nvcc``) and triton's bundled ``triton/backends/nvidia/bin/ptxas``.

    Raises :class:`kernellab.errors.ToolchainError` listing the places searched.
    """
    override = os.environ.get(ENV_VAR)
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        raise ToolchainError(f"{ENV_VAR}={override!r} is not an executable ptxas")
    on_path = shutil.which("ptxas")
    if on_path:
        return on_path
    searched = ptxas_candidates()
    for p in searched:
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    where = "\n".join(f"  - {p}" for p in ["PATH", *searched])
    raise ToolchainError(f"cannot find ptxas. Looked in:\n{where}\nFix: install the CUDA toolkit (and set "
                         f"CUDA_HOME), or `pip install nvidia-cuda-nvcc`, or set {ENV_VAR}=/path/to/ptxas.")


@lru_cache(maxsize=8)
def ptxas_version(path: str) -> str:
    """The release line of ``ptxas --version`` (e.g. "Cuda compilation tools, release 13.0, V13.0.88"),
    for compile-cache keys."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    lines = [ln for ln in out.splitlines() if "release" in ln]
    return lines[-1].strip() if lines else out.strip()


# ---------------------------------------------------------------------------------------------------------
# ptxas -v report

_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_BARRIERS_RE = re.compile(r"used (\d+) barriers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas_report(log: str, kernel_name: str) -> dict:
    """The resource figures ptxas -v printed for entry ``kernel_name``.

    ``{"n_regs", "n_spills" (spill store + load bytes), "spill_stores", "spill_loads", "shared" (static shared
    bytes), "local" (stack frame bytes), "n_barriers", "const" (cmem[0] bytes), "log"}``; a figure the log does
    not hold is None ("shared" and "const" are 0 when ptxas prints no such item, as it does for zero).
    """
    report: dict = {"n_regs": None, "n_spills": None, "spill_stores": None, "spill_loads": None, "shared": None,
                    "local": None, "n_barriers": None, "const": None, "log": log}
    # Split the log into one chunk per entry: "Compiling entry function 'k'" up to the next one.
    chunks = _ENTRY_RE.split(log)
    body = None
    for i in range(1, len(chunks) - 1, 2):
        if chunks[i] == kernel_name:
            body = chunks[i + 1]
    if body is None:
        return report
    props = None
    for m in _PROPS_RE.finditer(body):
        if m.group(1) == kernel_name:
            props = body[m.end():]
    frame = _FRAME_RE.search(props if props is not None else body)
    if frame:
        stack, stores, loads = map(int, frame.groups())
        report.update(local=stack, spill_stores=stores, spill_loads=loads, n_spills=stores + loads)
    used_line = next((ln for ln in body.splitlines() if _USED_RE.search(ln)), None)
    if used_line:
        report["n_regs"] = int(_USED_RE.search(used_line).group(1))
        for key, rx in (("n_barriers", _BARRIERS_RE), ("shared", _SMEM_RE), ("const", _CMEM_RE)):
            m = rx.search(used_line)
            report[key] = int(m.group(1)) if m else (None if key == "n_barriers" else 0)
    return report


# ---------------------------------------------------------------------------------------------------------
# compilation


def _failure(kernel_name: str, tool: str, log: str) -> ToolchainError:
    return ToolchainError(f"kernel '{kernel_name}': {tool} failed to compile the PTX (a kernellab codegen bug, "
                          f"or a PTX version/architecture the installed toolkit does not know). Its log:\n"
                          f"{log.strip()}\nLook at the PTX in compiled.asm['ptx'].")


def _safe_name(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", name) or "kernel"


def ptx_to_cubin_ptxas(ptx: str, target: Target, kernel_name: str, ptxas: str,
                       options: Sequence[str] = ()) -> tuple[bytes, dict]:
    with tempfile.TemporaryDirectory(prefix="kernellab-ptxas-") as tmp:
        src = Path(tmp) / f"{_safe_name(kernel_name)}.ptx"
        out = src.with_suffix(".cubin")
        src.write_text(ptx)
        cmd = [ptxas, "--gpu-name", target.cpu, "-O3", "-v", *options, str(src), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log = (proc.stdout + proc.stderr).replace(str(src), f"{kernel_name}.ptx")
        if proc.returncode != 0 or not out.is_file():
            raise _failure(kernel_name, f"ptxas ({ptxas} --gpu-name {target.cpu})", log)
        cubin = out.read_bytes()
    report = parse_ptxas_report(log, kernel_name)
    report["compiler"] = "ptxas"
    return cubin, report


def ptx_to_cubin_nvjitlink(ptx: str, target: Target, kernel_name: str,
                           options: Sequence[str] = ()) -> tuple[bytes, dict]:
    """In-process PTX -> cubin through nvJitLink. Best effort: the report parses nvJitLink's info log with
    ``-Xptxas=-v``; figures missing from it are None."""
    try:
        from cuda.bindings import nvjitlink
    except ImportError as e:
        raise ToolchainError(f"kernel '{kernel_name}': no ptxas and no nvJitLink (cuda.bindings.nvjitlink: {e}). "
                             "Fix: install the CUDA toolkit or `pip install nvidia-cuda-nvcc`, or set "
                             f"{ENV_VAR}.") from None
    opts = [f"-arch={target.cpu}", "-O3", "-Xptxas=-v", *options]
    try:
        handle = nvjitlink.create(len(opts), opts)
    except Exception as e:  # library missing (cuda-pathfinder raises its own error types) or bad options
        raise ToolchainError(f"kernel '{kernel_name}': no ptxas, and nvJitLink is unusable: {e}. Fix: install "
                             "the CUDA toolkit or `pip install nvidia-cuda-nvcc nvidia-nvjitlink`, or set "
                             f"{ENV_VAR}.") from None

    def read_log(size_fn, get_fn) -> str:
        try:
            n = size_fn(handle)
            buf = bytearray(n)
            get_fn(handle, buf)
            return bytes(buf).rstrip(b"\0").decode(errors="replace")
        except Exception:
            return ""

    try:
        data = ptx.encode()
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), f"{_safe_name(kernel_name)}.ptx")
            nvjitlink.complete(handle)
        except Exception as e:
            log = read_log(nvjitlink.get_error_log_size, nvjitlink.get_error_log)
            raise _failure(kernel_name, "nvJitLink", f"{e}\n{log}") from None
        size = nvjitlink.get_linked_cubin_size(handle)
        buf = bytearray(size)
        nvjitlink.get_linked_cubin(handle, buf)
        log = read_log(nvjitlink.get_info_log_size, nvjitlink.get_info_log)
    finally:
        nvjitlink.destroy(handle)
    report = parse_ptxas_report(log, kernel_name)
    report["compiler"] = "nvjitlink"
    return bytes(buf), report


def ptx_to_cubin(ptx: str, target: Target, kernel_name: str, options: Sequence[str] = ()) -> tuple[bytes, dict]:
    """PTX text -> (cubin bytes, report) for ``target``.

    The report: ``{"n_regs", "n_spills", "spill_stores", "spill_loads", "shared", "local", "n_barriers", "const",
    "log", "compiler"}`` (see :func:`parse_ptxas_report`; "compiler" is "ptxas" or "nvjitlink"). ``options``
    are extra ptxas options (e.g. ``["--maxrregcount=128"]``), handed to nvJitLink as ``-Xptxas=...``.
    Raises :class:`kernellab.errors.ToolchainError` with the compiler's log on failure.
    """
    if os.environ.get(ENV_VAR):
        return ptx_to_cubin_ptxas(ptx, target, kernel_name, find_ptxas(), options)
    try:
        ptxas = find_ptxas()
    except ToolchainError as missing:
        try:
            return ptx_to_cubin_nvjitlink(ptx, target, kernel_name, [f"-Xptxas={o}" for o in options])
        except ToolchainError as e:
            raise ToolchainError(f"{e}\n(ptxas: {missing})") from None
    return ptx_to_cubin_ptxas(ptx, target, kernel_name, ptxas, options)
