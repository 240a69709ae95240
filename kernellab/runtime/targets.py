"""Which GPU a kernel is built for: this machine's, or one named by the user (the lab and the magic ask here,
so they need nothing from the compiler's code generator)."""
from __future__ import annotations

from ..compiler.codegen.target import Target, detect_target

__all__ = ["Target", "detect_target", "native_target"]


def native_target() -> Target:
    """This machine's GPU, or sm_90a (H100/H200) without one: the lab shows GPU stages on any machine."""
    return detect_target() or Target(90)
