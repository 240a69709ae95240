"""The GPU a kernel is compiled for: architecture, PTX ISA version, and the LLVM triple/cpu/features."""
from __future__ import annotations

from dataclasses import dataclass

TRIPLE = "nvptx64-nvidia-cuda"

# Lowest PTX ISA version (x10) that knows each architecture (PTX ISA manual, "PTX ISA version" tables).
_MIN_PTX = {70: 60, 72: 61, 75: 63, 80: 70, 86: 71, 87: 74, 89: 78, 90: 78,
            100: 86, 101: 86, 103: 88, 110: 90, 120: 87, 121: 88}
# The arch-specific ("a") variant needs a newer PTX than the plain architecture on Hopper.
_MIN_PTX_ARCH_SPECIFIC = {90: 80}
# Architectures that have an arch-specific "a" variant (sm_90a: wgmma, setmaxnreg; sm_100a: tcgen05 ...).
_HAS_ARCH_SPECIFIC = frozenset({90, 100, 101, 103, 110, 120, 121})
# PTX 8.0 (CUDA 12.0) is understood by every CUDA 12+ driver and ptxas; we never emit less than that.
_DEFAULT_PTX_FLOOR = 80
# Newer defaults where codegen uses a later feature: sm_90a's vector float atomics (atom .v4.f32) are PTX 8.1.
_DEFAULT_PTX_ARCH_SPECIFIC = {90: 81}


@dataclass(frozen=True)
class Target:
    """A compilation target.

    ``arch`` is the compute capability as ``major * 10 + minor`` (80 = A100, 90 = H100/H200).
    ``ptx_version`` is the PTX ISA version times ten (80 = PTX 8.0); left as None it becomes the lowest
    version that knows the architecture, but never below 8.0. It must not exceed what the installed
    driver / ptxas understand. ``arch_specific`` selects the "a" variant (``sm_90a``) where one exists:
    its code uses features such as wgmma but runs only on that exact architecture.
    """

    arch: int
    ptx_version: int | None = None
    arch_specific: bool = True

    def __post_init__(self):
        if not isinstance(self.arch, int) or self.arch < 50:
            raise ValueError(f"Target.arch must be a compute capability like 80 or 90, got {self.arch!r}")
        needed = self.min_ptx_version
        if self.ptx_version is None:
            preferred = _DEFAULT_PTX_ARCH_SPECIFIC.get(self.arch, 0) if self.has_arch_specific_features else 0
            object.__setattr__(self, "ptx_version", max(_DEFAULT_PTX_FLOOR, needed, preferred))
        elif self.ptx_version < needed:
            raise ValueError(f"{self.cpu} needs PTX ISA {needed // 10}.{needed % 10} or newer, "
                             f"got ptx_version={self.ptx_version}")

    @classmethod
    def from_capability(cls, capability: tuple[int, int], **kwargs) -> Target:
        """``Target.from_capability((9, 0))`` -> sm_90a."""
        major, minor = capability
        return cls(arch=major * 10 + minor, **kwargs)

    @property
    def capability(self) -> tuple[int, int]:
        return divmod(self.arch, 10)

    @property
    def has_arch_specific_features(self) -> bool:
        return self.arch_specific and self.arch in _HAS_ARCH_SPECIFIC

    @property
    def cpu(self) -> str:
        """The LLVM cpu / ptxas ``--gpu-name``: "sm_90a" for 90, "sm_80" for 80."""
        return f"sm_{self.arch}{'a' if self.has_arch_specific_features else ''}"

    @property
    def min_ptx_version(self) -> int:
        if self.has_arch_specific_features and self.arch in _MIN_PTX_ARCH_SPECIFIC:
            return _MIN_PTX_ARCH_SPECIFIC[self.arch]
        return _MIN_PTX.get(self.arch, 60 if self.arch < 80 else 90)

    @property
    def features(self) -> str:
        """LLVM target features: the PTX ISA version, e.g. "+ptx80"."""
        return f"+ptx{self.ptx_version}"

    @property
    def triple(self) -> str:
        return TRIPLE

    def __str__(self) -> str:
        return f"{self.cpu} (PTX {self.ptx_version // 10}.{self.ptx_version % 10})"


def detect_target(device_index: int | None = None) -> Target | None:
    """The target of a CUDA device (torch's current device by default), or None without a usable GPU."""
    try:
        import torch
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        if device_index is None:
            device_index = torch.cuda.current_device()
        return Target.from_capability(tuple(torch.cuda.get_device_capability(device_index)))
    except Exception:  # a broken driver install must not break importing/compiling for the CPU
        return None
