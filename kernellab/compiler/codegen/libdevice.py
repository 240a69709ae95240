"""Find NVIDIA's libdevice bitcode (``libdevice.10.bc``), the library behind every ``__nv_*`` math function."""
from __future__ import annotations

import os
import shutil
import site
import sys
from pathlib import Path

from ...errors import ToolchainError

LIBDEVICE_NAME = "libdevice.10.bc"
ENV_VAR = "KERNELLAB_LIBDEVICE"

# Where pip wheels put libdevice, relative to a site-packages directory.
_WHEEL_DIRS = (
    ("nvidia", "cu13", "nvvm", "libdevice"),          # nvidia-cuda-nvcc 13.x
    ("nvidia", "cuda_nvcc", "nvvm", "libdevice"),     # nvidia-cuda-nvcc-cu12
    ("triton", "backends", "nvidia", "lib"),          # triton bundles one
)


def _site_packages() -> list[Path]:
    dirs: list[str] = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some embedded/virtualenv setups lack it
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    seen, out = set(), []
    for d in dirs:
        if d and d not in seen:
            seen.add(d)
            out.append(Path(d))
    return out


def _tool_dirs() -> list[Path]:
    """``<prefix>/nvvm/libdevice`` for the CUDA install that ``ptxas``/``nvcc`` on PATH belong to."""
    out = []
    for tool in ("ptxas", "nvcc"):
        found = shutil.which(tool)
        if found:
            out.append(Path(os.path.realpath(found)).parent.parent / "nvvm" / "libdevice")
    return out


def candidate_dirs() -> list[Path]:
    """The directories searched for libdevice, in order (see :func:`find_libdevice`)."""
    dirs: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]) / "nvvm" / "libdevice")
    dirs += _tool_dirs()
    dirs.append(Path("/usr/local/cuda/nvvm/libdevice"))
    if os.environ.get("CONDA_PREFIX"):
        dirs.append(Path(os.environ["CONDA_PREFIX"]) / "nvvm" / "libdevice")
    for sp in _site_packages():
        dirs += [sp.joinpath(*rel) for rel in _WHEEL_DIRS]
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def find_libdevice() -> str:
    """The path of ``libdevice.10.bc``.

    Search order (the first existing file wins):

    1. the file named by the environment variable ``KERNELLAB_LIBDEVICE`` (an error if it does not exist);
    2. ``$CUDA_HOME/nvvm/libdevice``, then ``$CUDA_PATH/nvvm/libdevice``;
    3. ``<dir of ptxas>/../nvvm/libdevice`` and ``<dir of nvcc>/../nvvm/libdevice`` for the tools on PATH,
       symlinks resolved (a shell-script wrapper is not followed);
    4. ``/usr/local/cuda/nvvm/libdevice``, then ``$CONDA_PREFIX/nvvm/libdevice``;
    5. pip wheels in each site-packages directory: ``nvidia/cu13/nvvm/libdevice``,
       ``nvidia/cuda_nvcc/nvvm/libdevice`` (``pip install nvidia-cuda-nvcc``), and the copy triton bundles in
       ``triton/backends/nvidia/lib``.

    Raises :class:`kernellab.errors.ToolchainError` listing the places searched when none has it.
    """
    override = os.environ.get(ENV_VAR)
    if override:
        path = Path(override)
        if path.is_dir():
            path = path / LIBDEVICE_NAME
        if path.is_file():
            return str(path)
        raise ToolchainError(f"{ENV_VAR}={override!r} does not name an existing libdevice file "
                             f"(expected a path to {LIBDEVICE_NAME} or a directory holding it)")
    searched = candidate_dirs()
    for d in searched:
        f = d / LIBDEVICE_NAME
        if f.is_file():
            return str(f)
    where = "\n".join(f"  - {d}" for d in searched)
    raise ToolchainError(
        f"cannot find {LIBDEVICE_NAME} (NVIDIA's libdevice, needed for math functions such as exp/log/sqrt "
        f"in kernels). Looked in:\n{where}\n"
        f"Fix: install the CUDA toolkit (and set CUDA_HOME), or `pip install nvidia-cuda-nvcc`, "
        f"or set {ENV_VAR}=/path/to/{LIBDEVICE_NAME}.")
