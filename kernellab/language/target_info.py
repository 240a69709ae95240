"""`tl.target_info` (Triton's `triton.language.target_info`): which GPU kernels are compiled for, asked at compile
time (`if target_info.cuda_capability_geq(9, 0): ...` in a kernel folds to a constant).

The target is torch's current CUDA device; with no GPU (the CPU interpreter, builds without a device) it is the
sm_90 kernellab compiles for by default. kernellab compiles for NVIDIA GPUs only, so `is_hip()` is always False.
"""
from __future__ import annotations

from dataclasses import dataclass

from .builtins import constexpr_function

__all__ = ["current_target", "is_cuda", "cuda_capability_geq", "is_hip", "is_hip_cdna3", "is_hip_cdna4"]


@dataclass(frozen=True)
class GPUTarget:
    """Triton's target record: backend name, architecture (compute capability as major * 10 + minor), warp size."""

    backend: str
    arch: int
    warp_size: int


def current_target() -> GPUTarget:
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return GPUTarget("cuda", major * 10 + minor, 32)
    except Exception:  # no torch, or no driver: the default target
        pass
    return GPUTarget("cuda", 90, 32)


@constexpr_function
def is_cuda():
    return current_target().backend == "cuda"


@constexpr_function
def cuda_capability_geq(major, minor=0):
    return current_target().arch >= major * 10 + minor


@constexpr_function
def is_hip():
    return False


@constexpr_function
def is_hip_cdna3():
    return False


@constexpr_function
def is_hip_cdna4():
    return False
