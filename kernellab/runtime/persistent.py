"""Persistent launches: run the persistent variant of a specialization (compiler/passes/make_persistent.py) over
a fixed grid of P programs, each walking the tiles the launch's grid asked for (its grid x, passed as one more
argument), so that on the GPU the next tile's loads overlap this tile's epilogue (flatten_loops).

KERNELLAB_PERSISTENT: `auto` (the DEFAULT since the H200 timings below), `0` / `off` (never), `1` / `on` (every 1-D
launch the pass accepts, on the interpreter too, over P = min(tiles, SMs x resident blocks per SM of the variant)),
`auto` (the same on the GPU only, and only when the tiles take more than one wave of P, the dot loop runs at most
MAX_TRIP iterations for the launch's arguments, and the GPU build fused the tile loop with the K loop), or a number
P >= 2 (exactly P programs: for tests and A/B timing; P may exceed the tiles, the extra programs find no tile).

Split-K and persistent never apply to one launch together: split-K decides first (it acts on launches with too
few programs for the GPU, persistent on launches with many), and a launch it splits is not made persistent.
The fast path's persistent wrapper is installed where the knob is on (auto, the default, included). The knob
is one of the codegen knobs the compile caches key on (runtime/codegen_env.py): each value has its own
specialization and warm-launch entries, so a change reaches the next launch.
"""
from __future__ import annotations

from ..compiler.passes.make_persistent import TILES
from ..compiler.trip_count import evaluate
from .variant import VariantState, cached_state, knob_mode

KNOB = "KERNELLAB_PERSISTENT"
# KERNELLAB_PERSISTENT when unset. H200, benchmarks/matmul.py's kernel at 128x256x64 / 8 warps / 3 stages, columns
# timed in turns (NOTES, session 10, run 5): auto 1.08x the kernel as written at 8192x8192x512 (fp16 and bf16),
# 1.05-1.06x at K = 1024, 0.99-1.02x at 2048, and as written (within 2%) at 3072, 4096^3 and 8192^3
DEFAULT = "auto"
INTERPRETER_SMS = 132  # what `on` assumes on the interpreter (an H200, one resident block per SM)
# auto: the longest dot loop (iterations at launch) made persistent. What persistence hides is the epilogue and
# the pipeline's fill and drain, once a tile, so it pays where the K loop is short. H100, the corpus matmul at
# 128x256x64 / 8 warps / 3 stages, fp16 (benchmarks/NOTES.md, "persist16"): 8192x8192x1024 (16 iterations)
# 1.05-1.07x the kernel as written, 4096^3 (64) 1.00-1.01x, 8192^3 (128) 0.97-1.00x. 32 is the longest loop
# at which the gain outweighs the loss: H200, 8192x8192x2048 (32 iterations) 0.99-1.02x, x3072 (48) with `on`
# 1.01-1.02x (auto leaves it as written; the margin is within the noise either way).
MAX_TRIP = 32


def mode() -> int | str:
    """"off", "auto", "on" or a forced program count P (an int >= 2), from KERNELLAB_PERSISTENT (unset: DEFAULT)."""
    return knob_mode(KNOB, DEFAULT)


def short_loop(trip: int | None) -> bool:
    """Whether auto may make a launch whose dot loop runs `trip` iterations persistent (None: unknown, no)."""
    return trip is not None and trip <= MAX_TRIP


def choose(tiles: int, slots: int, how, trip: int | None = None) -> int:
    """The program count for a launch of `tiles` tiles where `slots` programs are resident at once and the dot loop
    runs `trip` iterations (None: unknown); 0: launch the kernel as written."""
    if how == "off" or tiles <= 0:
        return 0
    if isinstance(how, int):
        return max(1, how)
    if how == "auto" and (tiles <= slots or not short_loop(trip)):  # one wave: every program runs one tile anyway
        return 0
    return max(1, min(tiles, slots))


def _blocks_per_sm(k) -> int:
    """Blocks of built kernel `k` resident on one SM of the current GPU (its registers, warps, shared memory)."""
    from ..compiler.codegen.occupancy_cap import SMEM_PER_SM, blocks_per_sm
    from .targets import current_target

    arch = current_target().arch
    return blocks_per_sm(k.n_regs or 255, k.launch_warps or k.num_warps, k.shared or 0,
                         arch if arch in SMEM_PER_SM else 90)


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
        return self._sms(device) * max(1, _blocks_per_sm(self.variant))

    def trip(self, args) -> int | None:
        """The dot loop's iterations for a launch with kernel arguments `args` (None: unknown)."""
        expr = self.stats.get("trip_count")
        try:
            return None if expr is None else evaluate(expr, args)
        except Exception:
            return None

    def programs(self, grid, args, on_gpu: bool, device=0, how=None) -> int:
        """P for a launch of `grid` (3 entries) with kernel arguments `args` under knob value `how` (None: the
        knob's now); 0: launch as written."""
        if self.refused is not None or grid[1] != 1 or grid[2] != 1:
            return 0
        how = mode() if how is None else how
        if how == "off" or (how == "auto" and not on_gpu):
            return 0
        if how == "auto" and grid[0] <= (self._sms(device) if on_gpu else INTERPRETER_SMS):  # before compiling
            return 0
        if self.get_variant() is None:  # the tile IR (its stats: the trip count)
            return 0
        trip = self.trip(args)
        if how == "auto" and not short_loop(trip):  # before the GPU build
            return 0
        if self.get_variant(on_gpu) is None:
            return 0
        if isinstance(how, int):
            return how
        if how == "auto" and on_gpu and not self.fused():  # a nest kept: nothing overlaps the epilogue
            return 0
        if how == "auto" and on_gpu and self.fewer_blocks_per_sm():
            return 0
        return choose(grid[0], self.slots(on_gpu, device), how, trip)

    def fewer_blocks_per_sm(self) -> bool:
        """Whether the variant fits fewer blocks an SM than the kernel as written (its epilogue's buffer beside the
        stages, more registers): then a second resident block no longer overlaps one block's epilogue with the
        other's main loop, which is what persistence was to add. H200, the corpus matmul at K = 512-2048
        (`.tut`-style A/B in benchmarks/NOTES.md, fifteenth session): 128x128x64 at 4 and 8 warps, 3 stages, 2
        blocks an SM as written and 1 persistent, auto 0.85-0.94x of as written in all 8 rows; 128x256x64/8w
        (1 and 1) and 64x128x64/4w4s, 64x64x128/4w3s (2 and 2) 1.00-1.12x in 11 of 12."""
        return _blocks_per_sm(self.variant) < _blocks_per_sm(self.ck)

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
    (P, 1, 1) with the tile count appended (decisions cached per grid x, knob value and, for auto, trip count).
    The knob's value is the one now: the fast path uses this entry only while the knob keeps it (a codegen knob)."""
    how = mode()

    def go_persistent(grid, stream, args):
        if grid.__class__ is not tuple or any(g != 1 for g in grid[1:]):
            return go(grid, stream, args)
        key = (grid[0], how, st.trip(args) if how == "auto" else None)
        p = st.decisions.get(key)
        if p is None:
            p = st.decisions[key] = st.programs((grid[0], 1, 1), args, True, device, how)
        st.last = p
        if not p:
            return go(grid, stream, args)
        return st.variant_launcher()((p, 1, 1), stream, list(args) + [grid[0]])

    return go_persistent
