"""`triton.runtime.driver.active`: the device queries tutorials and libraries make (target, SM count,
shared memory, the current device and stream), answered by kernellab's runtime.

On a machine without a GPU the answers describe kernellab's default target (sm_90, an H200's figures),
the same target `CompiledKernel.build_gpu()` compiles for, so host code that sizes grids still runs."""
from __future__ import annotations

from dataclasses import dataclass

# The default target's figures (an H200), used where no GPU is present.
_DEFAULT_PROPS = {"multiprocessor_count": 132, "max_shared_mem": 232448, "max_num_regs": 65536, "warpSize": 32,
                  "sm_clock_rate": 1980000, "mem_clock_rate": 2619000, "mem_bus_width": 6144}


@dataclass(frozen=True)
class GPUTarget:
    backend: str
    arch: int | str
    warp_size: int


def _gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


class _Utils:
    @staticmethod
    def get_device_properties(device=0) -> dict:
        """Triton's property dict: multiprocessor_count, max_shared_mem, max_num_regs, warpSize, clocks, bus."""
        if not _gpu():
            return dict(_DEFAULT_PROPS)
        from ..runtime.driver import get_device_props

        p = get_device_props(int(device))
        return {"multiprocessor_count": p["sm_count"], "max_shared_mem": p["max_shared_per_block_optin"],
                "max_num_regs": p["regs_per_block"], "warpSize": p["warp_size"], "sm_clock_rate": p["clock_khz"],
                "mem_clock_rate": p["memory_clock_khz"], "mem_bus_width": p["memory_bus_width_bits"]}


class CudaDriver:
    """The answers of Triton's active CUDA driver."""

    backend = "cuda"
    utils = _Utils()

    @staticmethod
    def is_active() -> bool:
        return True

    def get_current_target(self) -> GPUTarget:
        if _gpu():
            import torch

            major, minor = torch.cuda.get_device_capability()
            return GPUTarget("cuda", major * 10 + minor, 32)
        return GPUTarget("cuda", 90, 32)

    @staticmethod
    def get_active_torch_device():
        import torch

        return torch.device("cuda", torch.cuda.current_device()) if _gpu() else torch.device("cpu")

    @staticmethod
    def get_current_device() -> int:
        if _gpu():
            import torch

            return torch.cuda.current_device()
        return 0

    @staticmethod
    def set_current_device(device) -> None:
        if _gpu():
            import torch

            torch.cuda.set_device(device)

    @staticmethod
    def get_current_stream(device=None) -> int:
        if not _gpu():
            return 0
        import torch

        return torch.cuda.current_stream(device).cuda_stream

    @staticmethod
    def get_device_interface():
        import torch

        return torch.cuda

    @staticmethod
    def get_benchmarker():
        from ..testing import do_bench

        return do_bench

    @staticmethod
    def get_empty_cache_for_benchmark():
        import torch

        return torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda" if _gpu() else "cpu")

    @staticmethod
    def clear_cache(cache):
        cache.zero_()


class CudaBackendCompiler:
    """What `triton.backends.backends["nvidia"].compiler` answers: the CUDA targets it builds for."""

    binary_ext = "cubin"

    @staticmethod
    def supports_target(target) -> bool:
        return getattr(target, "backend", None) == "cuda"


@dataclass(frozen=True)
class Backend:
    """Triton's backend plugin record: a compiler and a driver class."""

    compiler: type
    driver: type


# `triton.backends.backends`: one plugin, "nvidia", whose driver is active (kernels run: on a GPU, or on the CPU
# interpreter). Libraries count active drivers before they use Triton (vLLM disables Triton unless exactly one is);
# there is no "cpu" plugin, so torch does not pick Triton to compile CPU code.
BACKENDS = {"nvidia": Backend(compiler=CudaBackendCompiler, driver=CudaDriver)}


class DriverConfig:
    """`triton.runtime.driver`: `.active` is the driver in use (settable, as in Triton)."""

    def __init__(self):
        self.default = CudaDriver()
        self._active = None

    @property
    def active(self):
        return self._active or self.default

    def set_active(self, driver) -> None:
        self._active = driver

    def reset_active(self) -> None:
        self._active = None


driver = DriverConfig()
