"""Registers just above an occupancy cliff: assemble again under the cliff.

ptxas picks a kernel's register count without regard to how many blocks then fit on an SM. A few registers too
many can cost a whole block: Liger's kl_div forward (16 warps) takes 33 registers, which rounds up to 40 per
thread and fits 3 blocks per SM; at 32 (Triton's count) 4 fit, a third more warps to hide the memory latency of a
memory-bound kernel. When a kernel without tensor-core instructions (whose register budgets are planned) lands at
most SLACK above such a cliff, the backend assembles it again with ``.maxnreg`` at the cliff and keeps that only
if nothing spills and the machine code grows by at most MAX_GROWTH (ptxas meets a cap by recomputing values too;
kl_div: 32 registers, no spills, the same 1056 SASS instructions). Off with
KERNELLAB_OCCUPANCY_CAP=off; never applied when the launch gives ``maxnreg``.

The occupancy model is sm_80/sm_90's: 65536 registers per SM allocated per warp in units of 256, at most 64
warps and 32 blocks per SM, shared memory per SM less 1 KiB reserved per block.
"""
from __future__ import annotations

import os
import re

REGS_PER_SM = 65536
REG_ALLOC_UNIT = 256  # registers, per warp
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
SMEM_RESERVED_PER_BLOCK = 1024
SMEM_PER_SM = {80: 164 * 1024, 90: 228 * 1024}
WARP_SIZE = 32
SLACK = 1 / 8  # the most registers given up, as a fraction of ptxas' own count
MIN_REGS = 24  # below this a cap buys little and ptxas' own choice is better kept
MAX_GROWTH = 0.02  # the most the capped kernel's SASS may grow, as a fraction

_MMA_RE = re.compile(r"^\s*(?:@!?%p\d+\s+)?(?:wgmma|mma|tcgen05)\.", re.M)


def enabled() -> bool:
    return os.environ.get("KERNELLAB_OCCUPANCY_CAP", "on").lower() not in ("off", "0", "false")


def blocks_per_sm(regs: int, num_warps: int, shared: int, arch: int) -> int:
    """Resident blocks per SM of a kernel using `regs` registers a thread and `shared` bytes of shared memory."""
    per_warp = -(-regs * WARP_SIZE // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    smem = SMEM_PER_SM[arch] // ((shared or 0) + SMEM_RESERVED_PER_BLOCK)
    return min(REGS_PER_SM // (per_warp * num_warps), MAX_WARPS_PER_SM // num_warps, MAX_BLOCKS_PER_SM, smem)


def cliff(regs: int, num_warps: int, shared: int, arch: int) -> int | None:
    """The register cap that fits one more block per SM than `regs` does, when registers are the limit and the cap
    is at most SLACK below `regs` (and at least MIN_REGS); None otherwise."""
    if arch not in SMEM_PER_SM or regs <= MIN_REGS or num_warps <= 0:  # sm_86/89/100...: other limits
        return None
    want = blocks_per_sm(regs, num_warps, shared, arch) + 1
    if blocks_per_sm(8, num_warps, shared, arch) < want:  # warps, blocks or shared memory limit it already
        return None
    cap = REGS_PER_SM // (want * num_warps * WARP_SIZE) // 8 * 8  # per-thread counts come in units of 8
    if cap < MIN_REGS or cap >= regs or regs - cap > max(1, int(regs * SLACK)):
        return None
    return cap


def has_tensor_core_code(ptx: str) -> bool:
    return _MMA_RE.search(ptx) is not None


def text_bytes(cubin: bytes) -> int | None:
    """Bytes of SASS in a cubin (its ``.text.*`` sections; 16 a instruction on sm_70+), None if it is no ELF64."""
    import struct

    if cubin[:5] != b"\x7fELF\x02":
        return None
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def section(i):
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize)
        return name, offset, size

    _, str_off, _ = section(shstrndx)
    total = 0
    for i in range(shnum):
        name, _, size = section(i)
        end = cubin.index(b"\0", str_off + name)
        if cubin[str_off + name:end].startswith(b".text."):
            total += size
    return total


def acceptable(before: dict, after: dict, cap: int, cubin_before: bytes, cubin_after: bytes) -> bool:
    """Whether the capped assembly is kept: no spills, within the cap, SASS grown by at most MAX_GROWTH."""
    if after.get("n_spills") or not after.get("n_regs") or after["n_regs"] > cap:
        return False
    a, b = text_bytes(cubin_before), text_bytes(cubin_after)
    return a is not None and b is not None and b <= a * (1 + MAX_GROWTH)
