"""Persistent launches: run the persistent variant of a specialization (compiler/passes/make_persistent.py) over
a fixed grid of P programs, each walking the tiles the launch's grid asked for (its grid x, passed as one more
argument), so that on the GPU the next tile's loads overlap this tile's epilogue (flatten_loops).

KERNELLAB_PERSISTENT: `0` / `off` (default: never; it changes the warm launch path of every dot kernel and waits
for GPU timings before it becomes a default), `1` / `on` (every 1-D launch the pass accepts, on the interpreter
too, over P = min(tiles, SMs x resident blocks per SM of the variant)), `auto` (the same on the GPU only, and
only when the tiles take more than one wave of P and the GPU build fused the tile loop with the K loop), or a
number P >= 2 (exactly P programs: for tests and A/B timing; P may exceed the tiles, the extra programs find no
tile).

Split-K and persistent never apply to one launch together: split-K decides first (it acts on launches with too
few programs for the GPU, persistent on launches with many), and a launch it splits is not made persistent.
The fast path's persistent wrapper is installed when the knob is on at a specialization's first GPU launch
(the default path stays as it was): set the knob before that launch, or clear the kernel's caches
(`kernel.device_caches.clear()`) after changing it.
"""
from __future__ import annotations

import os

from ..compiler.passes.make_persistent import TILES
from .variant import VariantState, cached_state

KNOB = "KERNELLAB_PERSISTENT"
INTERPRETER_SMS = 132  # what `on` assumes on the interpreter (an H200, one resident block per SM)


def mode() -> int | str:
    """"off", "auto", "on" or a forced program count P (an int >= 2), from KERNELLAB_PERSISTENT."""
    v = os.environ.get(KNOB, "0").strip().lower()
    if v in ("", "0", "off", "false", "no"):
        return "off"
    if v in ("1", "on", "true", "yes"):
        return "on"
    if v.isdigit():
        return int(v)
    return "auto"


def choose(tiles: int, slots: int, how) -> int:
    """The program count for a launch of `tiles` tiles where `slots` programs are resident at once (0: launch the
    kernel as written)."""
    if how == "off" or tiles <= 0:
        return 0
    if isinstance(how, int):
        return max(1, how)
    if how == "auto" and tiles <= slots:  # one wave: every program runs one tile either way
        return 0
    return max(1, min(tiles, slots))


class PersistentState(VariantState):
    """Per specialization: its persistent variant and the program count chosen per launch shape."""

    PASS, FLAG, APPLIED, ATTR, LABEL = "make_persistent", "persistent", "persistent", "persistent_variant", \
        "persistent"
    EXTRA = (TILES,)

    def __init__(self, fn, ck, inputs):
        super().__init__(fn, ck, inputs)
        self.last = 0  # P of the latest launch (0: as written)

    def slots(self, on_gpu: bool, device=0) -> int:
        """Programs of the variant resident at once: SMs x blocks per SM (from its registers, warps and shared
        memory); on the interpreter INTERPRETER_SMS."""
        if not on_gpu:
            return INTERPRETER_SMS
        from ..compiler.codegen.occupancy_cap import SMEM_PER_SM, blocks_per_sm
        from .targets import current_target

        v = self.variant
        arch = current_target().arch
        warps = v.launch_warps or v.num_warps
        per_sm = blocks_per_sm(v.n_regs or 255, warps, v.shared or 0, arch if arch in SMEM_PER_SM else 90)
        return self._sms(device) * max(1, per_sm)

    def programs(self, grid, on_gpu: bool, device=0) -> int:
        """P for a launch of `grid` (3 entries; 0: launch as written)."""
        if self.refused is not None or grid[1] != 1 or grid[2] != 1:
            return 0
        how = mode()
        if how == "off" or (how == "auto" and not on_gpu):
            return 0
        if how == "auto" and grid[0] <= (self._sms(device) if on_gpu else INTERPRETER_SMS):  # before compiling
            return 0
        if self.get_variant(on_gpu) is None:
            return 0
        if isinstance(how, int):
            return how
        if how == "auto" and on_gpu and not self.fused():  # a nest kept: nothing overlaps the epilogue
            return 0
        return choose(grid[0], self.slots(on_gpu, device), how)

    def fused(self) -> bool:
        """Whether the GPU build fused the tile loop with the K loop (flatten_loops keeps the nest where the stages
        and the epilogue's buffers do not fit in shared memory together, e.g. a 128x256 fp32 output tile)."""
        rec = next((p for p in self.variant.trace.passes if p.name == "flatten_loops"), None)
        return rec is not None and bool(rec.stats.get("flattened"))


def state(fn, ck):
    """The PersistentState of compiled kernel `ck` of JITFunction `fn` (None when it was compiled without the
    inputs a variant needs)."""
    return cached_state(PersistentState, "_persistent_state", fn, ck)


def fast_wrapper(st: PersistentState, go, device):
    """The warm-launch fast path's `go` for a kernel that may run persistent: the same launch, or the variant's over
    (P, 1, 1) with the tile count appended (decisions cached per grid x and knob value)."""

    def go_persistent(grid, stream, args):
        if grid.__class__ is not tuple or any(g != 1 for g in grid[1:]):
            return go(grid, stream, args)
        how = mode()
        if how == "off":
            st.last = 0
            return go(grid, stream, args)
        key = (grid[0], how)
        p = st.decisions.get(key)
        if p is None:
            p = st.decisions[key] = st.programs((grid[0], 1, 1), True, device)
        st.last = p
        if not p:
            return go(grid, stream, args)
        return st.variant_launcher()((p, 1, 1), stream, list(args) + [grid[0]])

    return go_persistent
