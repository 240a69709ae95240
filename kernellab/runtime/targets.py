"""Which GPU a kernel is built for: this machine's, or one named by the user (the lab and the magic ask here,
so they need nothing from the compiler's code generator)."""
from __future__ import annotations

from ..compiler.codegen.target import Target, detect_target

__all__ = ["Target", "current_target", "detect_target", "native_target"]

_TARGETS: dict = {}


def native_target() -> Target:
    """This machine's GPU, or sm_90a (H100/H200) without one: the lab shows GPU stages on any machine."""
    return detect_target() or Target(90)


def current_target() -> Target:
    """The Target of torch's current CUDA device (detected once per device)."""
    import torch

    dev = torch.cuda.current_device()
    target = _TARGETS.get(dev)
    if target is None:
        target = _TARGETS[dev] = detect_target()
    return target
