"""Global scratch memory for a launch: where a kernel's in-kernel tensor maps live (codegen/lower_tma.py).

A kernel that makes tensor maps takes one more pointer parameter (argument kind ``{"scratch": bytes}``): that many
bytes per program, 128-byte aligned. The launcher asks the allocator set by ``set_allocator`` (Triton's contract:
``allocator(size, alignment, stream) -> tensor``) for the grid's worth and keeps the tensor until the launch is
queued; with torch's caching allocator the memory is reused in stream order, as Triton's launcher relies on.
Without an allocator set, kernellab uses ``torch.empty`` on the kernel's device (Triton raises instead: a kernel
that runs under Triton needs ``triton.set_allocator``, one under kernellab works either way).
"""
from __future__ import annotations

ALIGN = 128
_allocator = [None]


def set_allocator(allocator) -> None:
    """Use ``allocator(size, alignment, stream) -> tensor`` (anything with ``data_ptr()``) for launch scratch;
    None restores kernellab's default (``torch.empty`` on the kernel's device)."""
    _allocator[0] = allocator


def allocate(nbytes: int, device_index: int, stream: int):
    """(the object that owns the memory, its address) for one launch's scratch."""
    alloc = _allocator[0]
    if alloc is None:
        import torch

        buf = torch.empty(nbytes + ALIGN, dtype=torch.uint8, device=f"cuda:{device_index}")
        return buf, (buf.data_ptr() + ALIGN - 1) // ALIGN * ALIGN
    buf = alloc(nbytes, ALIGN, stream)
    address = buf.data_ptr() if hasattr(buf, "data_ptr") else int(buf)
    return buf, address
