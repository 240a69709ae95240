"""Split-K at launch: when a launch has too few programs for the GPU and a long dot loop, run the split variant of
its specialization (compiler/passes/split_k.py) over grid (x, y, S) with a workspace and per-tile counters.

KERNELLAB_SPLIT_K: `auto` (default: split where it pays, on the GPU only), `0` / `off` (never), `1` / `on` (as
auto, on the interpreter too), or a number S >= 2 (always split S ways where the pass accepts the kernel: for
tests and A/B timing). Auto splits when the grid fills under half the SMs and the loop runs at least MIN_TRIP
iterations; S fills the SMs once, each split keeps at least MIN_ITERS loop iterations, and S stays <= MAX_SPLITS.
"""
from __future__ import annotations

from ..compiler.passes.split_k import COUNTERS, WORKSPACE
from ..compiler.trip_count import evaluate as evaluate_trip
from .variant import VariantState, cached_state, knob_mode, lazy_launcher  # noqa: F401  (lazy_launcher: jit.py's name for it here)

KNOB = "KERNELLAB_SPLIT_K"
MIN_ITERS = 8  # a split's iterations: fewer leave the partial tile's write and the sum too large a share
# a loop shorter than this is not split: H200, the corpus matmul at 128x256x64 / 8 warps, 1024^3 (32 programs, 16
# iterations) split in two ran at 0.90x the unsplit kernel, while 16x4096x4096 (64 iterations) split 8 ways ran 2.0x
MIN_TRIP = 32
MAX_SPLITS = 16
INTERPRETER_SMS = 132  # what auto assumes on the interpreter (an H200)


def mode() -> int | str:
    """"off", "auto", "on" or a forced S (an int >= 2), from KERNELLAB_SPLIT_K."""
    return knob_mode(KNOB, "auto")


def choose(trip: int | None, programs: int, sms: int, how) -> int:
    """How many ways to split a launch of `programs` programs whose loop runs `trip` iterations."""
    if how == "off" or programs <= 0:
        return 1
    if isinstance(how, int):
        return max(1, how)
    if trip is None or trip < MIN_TRIP or 2 * programs > sms:
        return 1
    s = min(sms // programs, trip // MIN_ITERS, MAX_SPLITS)
    return s if s >= 2 else 1


class SplitState(VariantState):
    """Per specialization: its split variant (compiled on first need, or why the pass refused it), the decisions
    per grid and trip count, and the workspaces per device and stream."""

    PASS, FLAG, APPLIED, ATTR, LABEL = "split_k", "split_k", "split", "split_k_variant", "split-K"
    EXTRA = (WORKSPACE, COUNTERS)

    def __init__(self, fn, ck, inputs):
        super().__init__(fn, ck, inputs)
        self.workspaces: dict = {}
        self.last = 1  # S of the latest launch (the benchmark reports what auto chose)

    def splits(self, grid, args, on_gpu: bool, device=0) -> int:
        """S for a launch of `grid` (3 entries) with kernel arguments `args` (1: do not split)."""
        if self.refused is not None or grid[2] != 1:
            return 1
        how = mode()
        if how == "off" or (how == "auto" and not on_gpu):
            return 1
        programs = grid[0] * grid[1]
        sms = self._sms(device) if on_gpu else INTERPRETER_SMS
        if how in ("auto", "on") and 2 * programs > sms:  # before compiling anything
            return 1
        if self.get_variant(on_gpu) is None:
            return 1
        expr = self.stats.get("trip_count")
        try:
            trip = None if expr is None else evaluate_trip(expr, args)
        except Exception:
            trip = None
        return choose(trip, programs, sms, how)

    def buffers(self, s: int, grid, like=None, device=None, stream=0):
        """(workspace, counters) tensors for S splits of this grid: cached per device, stream and size; the
        counters start at zero and every launch leaves them at zero."""
        import torch

        tiles = grid[0] * grid[1]
        dtype = torch.float32 if self.stats.get("acc_dtype", "f32") == "f32" else torch.int32
        dev = device if device is not None else "cpu"
        key = (str(dev), stream, dtype)
        have = self.workspaces.get(key)
        need = s * tiles * self.stats["tile_elems"]
        if have is None or have[0].numel() < need or have[1].numel() < tiles:
            have = (torch.empty(need, dtype=dtype, device=dev), torch.zeros(tiles, dtype=torch.int32, device=dev))
            self.workspaces[key] = have
        return have


def state(fn, ck):
    """The SplitState of compiled kernel `ck` of JITFunction `fn` (None when it was compiled without the inputs a
    variant needs)."""
    return cached_state(SplitState, "_split_state", fn, ck)


def fast_wrapper(st: SplitState, go, device):
    """The warm-launch fast path's `go` for a kernel that may split: the same launch, or the split variant's
    over (x, y, S) with the workspace appended (decisions cached per grid and trip count)."""
    sms = st._sms(device)

    def go_split(grid, stream, args):
        if grid.__class__ is not tuple or len(grid) == 3 and grid[2] != 1:
            return go(grid, stream, args)
        how = mode()
        programs = grid[0] * (grid[1] if len(grid) > 1 else 1)
        if how == "off" or (2 * programs > sms and not isinstance(how, int)):
            st.last = 1
            return go(grid, stream, args)
        g = tuple(grid) + (1,) * (3 - len(grid))
        expr = st.stats.get("trip_count")
        key = (g, how, None if expr is None else evaluate_trip(expr, args))
        s = st.decisions.get(key)
        if s is None:
            s = st.decisions[key] = st.splits(g, args, True, device)
        st.last = s
        if s <= 1:
            return go(grid, stream, args)
        ws, counters = st.buffers(s, g, device=f"cuda:{device}", stream=stream)
        return st.variant_launcher()((g[0], g[1], s), stream, list(args) + [ws.data_ptr(), counters.data_ptr()])

    return go_split
