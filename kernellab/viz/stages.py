"""The GPU stages a view needs, built on demand for a kernel that only has its tile IR (a CPU run), and the
note a view shows when they could not be built. No ipywidgets here: the static views use it too."""
from __future__ import annotations


def ensure_gpu_stages(compiled) -> None:
    """Build the GPU stages a view needs when the kernel only has its tile IR (a CPU run): for this machine's
    GPU, else sm_90a, as the %%kernel magic does; no GPU is needed. A failure is kept for the view's note."""
    if "gpu" in (getattr(compiled, "asm", {}) or {}) or not hasattr(compiled, "build_gpu"):
        return
    if getattr(compiled, "_gpu_build_error", None):
        return  # tried once already: the note says why
    from ..errors import KernelLabError
    from ..runtime.targets import native_target

    try:
        compiled.build_gpu(native_target())
    except KernelLabError as e:
        compiled._gpu_build_error = f"{type(e).__name__}: {e}"


def _no_gpu_note(compiled) -> str | None:
    if "gpu" not in (getattr(compiled, "asm", {}) or {}):
        why = getattr(compiled, "_gpu_build_error", None)
        return f"the GPU stages could not be built: {why}" if why else "no GPU stages for this kernel"
    return None
