"""A launch-time variant of a compiled specialization: the same kernel text and arguments through one more tile
pass (split-K: runtime/split_k.py, persistent: runtime/persistent.py), compiled on first need, with parameters
appended, launched over another grid. This holds what both share: compiling the variant (or recording why its
pass refused the kernel), building and loading it for the GPU, the SM count, and the warm launcher of a kernel
whose launches so far all ran a variant."""
from __future__ import annotations

import os


def knob_mode(name: str, default: str) -> int | str:
    """A variant's switch, environment variable `name` (unset or empty: `default`): "off" (0, off, false, no), "on"
    (1, on, true, yes), a forced count (a number >= 2, as an int) or "auto" (anything else)."""
    v = os.environ.get(name, "").strip().lower() or default
    if v in ("0", "off", "false", "no"):
        return "off"
    if v in ("1", "on", "true", "yes"):
        return "on"
    if v.isdigit():
        return int(v)
    return "auto"


def _candidate(ck) -> bool:
    text = ck.asm.get("tile", "") if isinstance(ck.asm, dict) else ""
    return "tt.dot" in text and "scf.for" in text


class VariantState:
    """Per specialization and kind of variant: the variant (compiled on first need, or why its pass refused the
    kernel), its pass's stats, decisions per launch shape, SM counts per device. Subclasses name the pass
    (PASS), JITFunction.compile's keyword (FLAG), the parameters the pass appends (EXTRA), the stats key that says
    the pass applied (APPLIED), the CompiledKernel attribute the lab reads the variant from (ATTR) and what the
    warning calls the variant (LABEL)."""

    PASS = FLAG = APPLIED = ATTR = LABEL = ""
    EXTRA: tuple = ()

    def __init__(self, fn, ck, inputs):
        self.fn, self.ck, self.inputs = fn, ck, inputs
        self.variant = None
        self.refused = None if _candidate(ck) else "no dot loop"
        self.stats: dict = {}
        self.decisions: dict = {}
        self.sms: dict = {}
        self._go = None
        self._built = False  # the variant built and loaded for the GPU

    def get_variant(self, on_gpu: bool = False):
        """The variant, compiled on first need (on the GPU also built, on the first need there); None where the pass
        refused the kernel or the variant failed to build (a warning says so: the launch then runs the kernel as
        written)."""
        if self.variant is None and self.refused is None:
            spec, key, runtime_names, options = self.inputs
            try:
                v = self.fn.compile(spec, key, list(runtime_names) + list(self.EXTRA), options, **{self.FLAG: True})
            except Exception as e:  # a bug of the variant must not stop a kernel that runs as written
                return self._failed(e)
            rec = next((p for p in v.trace.passes if p.name == self.PASS), None)
            self.stats = dict(rec.stats) if rec is not None else {}
            if not self.stats.get(self.APPLIED):
                self.refused = self.stats.get("refused", f"not {self.LABEL}")
            else:
                self.variant = v
                setattr(self.ck, self.ATTR, v)  # the lab shows its trace (the pass among the tile passes)
        if on_gpu and self.variant is not None and not self._built:
            from .targets import current_target

            try:
                self.variant.gpu(current_target())
            except Exception as e:
                return self._failed(e)
            self._built = True
        return self.variant

    def _failed(self, e):
        import warnings

        self.variant = None
        self.refused = f"the {self.LABEL} variant failed to build: {type(e).__name__}: {e}"
        warnings.warn(f"kernel '{self.ck.name}': {self.LABEL} off for this specialization ({self.refused})",
                      stacklevel=4)
        return None

    def variant_launcher(self):
        """The variant's warm launcher `go(grid, stream, raw args)` (built and loaded on first use)."""
        if self._go is None:
            from .targets import current_target

            v = self.variant
            v.gpu(current_target())
            self._go = v._loaded.warm_launcher(v.launch_warps or v.num_warps, v.shared, False)
        return self._go

    def _sms(self, device) -> int:
        if device not in self.sms:
            import torch

            self.sms[device] = torch.cuda.get_device_properties(device).multi_processor_count
        return self.sms[device]


def cached_state(cls, slot: str, fn, ck):
    """The `cls` state (a VariantState subclass) of compiled kernel `ck` of JITFunction `fn`, made once and kept on
    `ck` under `slot`; None when `ck` was compiled without the inputs a variant needs."""
    st = getattr(ck, slot, None)
    if st is None:
        inputs = getattr(ck, "_split_inputs", None)
        if inputs is None:
            return None
        st = cls(fn, ck, inputs)
        setattr(ck, slot, st)
    return st


def lazy_launcher(ck):
    """A warm launcher for `ck` that builds and loads it on its first launch (a kernel whose launches so far all ran
    a variant)."""
    cell = []

    def go(grid, stream, args):
        if not cell:
            from .targets import current_target

            ck.gpu(current_target())
            cell.append(ck._loaded.warm_launcher(ck.launch_warps or ck.num_warps, ck.shared, False))
        return cell[0](grid, stream, args)

    return go
