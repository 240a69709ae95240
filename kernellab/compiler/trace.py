"""The CompileTrace: what the compiler did for one kernel, as plain data.

It is the seam between the compiler and everything that shows it (the lab's views, the CLI, tests): per
pass its IR text, whether it changed anything, its time and what it found, and where the printer put each
line's source location; for the stages the views need (the final tile IR and the final GPU IR) a Snapshot
of the IR itself: every op and value with its name, type, layout, source line and the pass that made it,
every global access with its vector width and coalescing, the shared-memory plan and the barriers.

Everything here is frozen dataclasses of str / int / float / bool / None and tuples of them: no IR object
is kept, so a trace pickles, and `to_json` / `from_json` carry it through the disk cache. This module
imports nothing from the compiler, so a view can import it alone.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property

# Bump when a record's fields change: a disk-cache entry written with another schema is recompiled.
TRACE_SCHEMA = 4  # 2: the LLVM IR and PTX records carry Positions (source lines from !dbg / .loc); 3: and files;
# 4: SharedBuffer.file and Barrier.file


@dataclass(frozen=True)
class Positions:
    """Where the printer put things, per line of a pass's IR text: `source`, the kernel source line the line
    came from (a region op's header carries the loc printed on its closing line) or None; `loc`, the
    (start, end) characters of the line's ` loc(...)` text (in LLVM IR its `, !dbg !N`) or None. The tile and GPU
    IR records have them from the printer, the LLVM IR and PTX records from codegen's line info
    (codegen/line_map.py; absent when GpuOptions.line_info is off). `files`: per line, the file its source line
    is in when that is not the kernel's own (an inlined @jit helper from another module), else None; empty when
    every line is the kernel's."""

    source: tuple = ()
    loc: tuple = ()
    files: tuple = ()

    def file_of(self, i: int) -> str | None:
        """The file of line `i`'s source line, None for the kernel's own."""
        return self.files[i] if i < len(self.files) else None


@dataclass(frozen=True)
class SharedTile:
    """The encoding of a tile in shared memory (a `!memdesc`): a leading stage count may head `shape`;
    `order` lists the dims from fastest-varying; each fast row is followed by `pad` unused elements;
    `swizzle` is the wgmma swizzle width in bytes (0 = none)."""

    shape: tuple
    elem: str
    elem_bytes: int
    order: tuple
    pad: int = 0
    swizzle: int = 0


@dataclass(frozen=True)
class ValueRecord:
    """One SSA value as printed. `kind` is "param", "arg" (a region's block argument) or "result"; `op` the
    name of the op defining it ("parameter", "block argument of scf.for" otherwise) and `op_index` that op's
    index in `Snapshot.ops` (for an argument: the op owning the region). `type` is the printed type (layout
    as its alias), `layout` the full layout text, `shared` the encoding of a shared-memory tile; `ir_line`
    is the 0-based line of the IR text that defines it, `line` the kernel source line, `defined_by` the
    pass that created it."""

    name: str
    type: str
    shape: tuple
    elem: str
    elem_bytes: int
    kind: str
    op: str
    op_index: int | None
    ir_line: int
    line: int | None
    defined_by: str
    layout: str | None = None
    alias: str | None = None
    shared: SharedTile | None = None


@dataclass(frozen=True)
class OpRecord:
    """One op, in print (pre-)order: `index` is its position in `Snapshot.ops`. `ir_line` is its (header)
    line, `end_line` its closing line (the same line for an op without regions), `region_lines` the line
    opening each region (the header, then each `} {`); `parent` is the index of the op whose region holds
    it (None at function level) and `region` which region; `point` its program point in the shared-memory
    plan (None for ops made after allocate_shared, and for stages without a plan); `attrs` its attributes
    as (name, value) pairs; `file` the file of `line` when it is not the kernel's."""

    index: int
    name: str
    results: tuple
    operands: tuple
    attrs: tuple
    line: int | None
    ir_line: int
    end_line: int
    region_lines: tuple
    parent: int | None
    region: int
    function: int
    defined_by: str
    point: int | None = None
    file: str | None = None  # the file of `line` when not the kernel's own (an inlined helper from another module)

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default


@dataclass(frozen=True)
class FunctionRecord:
    """A function of the snapshot: its header and closing lines, where its source starts, its parameters."""

    name: str
    ir_line: int
    end_line: int
    source_file: str
    first_line: int
    params: tuple


@dataclass(frozen=True)
class Coalescing:
    """How one warp's global accesses look under the dense-tile model (kernellab.compiler.layout_model):
    `instructions` per thread, `sectors` of 32 bytes per warp instruction (average) against the
    `ideal_sectors` the same bytes need, `efficiency` = useful / fetched bytes."""

    vec: int
    elem_bytes: int
    bytes_per_access: int
    fast_dim: int
    lanes_along_fast: int
    instructions: int
    sectors: float
    ideal_sectors: float
    efficiency: float
    consecutive_lanes: bool
    coalesced: bool


@dataclass(frozen=True)
class Access:
    """A tt.load or tt.store of a tensor: `value` is the loaded result or the stored value, `vec` the
    elements one thread moves per instruction and `bytes` those elements' size."""

    op: str
    value: str
    op_index: int
    ir_line: int
    line: int | None
    vec: int
    elem_bytes: int
    bytes: int
    coalescing: Coalescing | None = None


@dataclass(frozen=True)
class SharedBuffer:
    """One buffer of the shared-memory plan (allocate_shared): `offset` and `size` in bytes, `live` the first
    and last program point that use it, `op_index` the op owning it in the snapshot. Multi-stage buffers of
    a pipelined loop add `stages`, `stage_bytes`, `swizzle` (in words), `filled_by`, and the `mbarriers`
    (offsets) their copies complete on."""

    op: str
    line: int | None
    offset: int
    size: int
    live: tuple
    reason: str
    op_index: int | None = None
    stages: int = 0
    stage_bytes: int = 0
    swizzle: str = ""
    filled_by: str = ""
    align: int = 0
    mbarriers: tuple = ()
    file: str | None = None  # the file of `line` when not the kernel's own (an inlined helper from another module)


@dataclass(frozen=True)
class Barrier:
    """A CTA barrier between shared-memory ops: a `ttg.barrier` (bar.sync) or a `ttg.async_wait`
    (cp.async.wait_group `pending`, then bar.sync). `point` is the program point it stands at (that of the
    op it precedes, for a barrier inserted after the plan was made)."""

    point: int
    op_index: int
    ir_line: int
    line: int | None
    kind: str
    reason: str
    pending: int | None = None
    file: str | None = None  # the file of `line` when not the kernel's own


@dataclass(frozen=True)
class Snapshot:
    """The IR after one pass as records. GPU stages add `num_warps`, the accesses, the shared-memory plan,
    its barriers and `program_points` (how many ops the plan numbered)."""

    functions: tuple = ()
    ops: tuple = ()
    values: tuple = ()
    layouts: tuple = ()  # (alias, layout text) pairs, in alias order
    num_warps: int | None = None
    accesses: tuple = ()
    shared_plan: tuple = ()
    barriers: tuple = ()
    program_points: int = 0

    @cached_property
    def value_by_name(self) -> dict:
        return {v.name: v for v in self.values}

    @cached_property
    def op_at_line(self) -> dict:
        """{IR line: the op printed there (its header or closing line)}."""
        out = {}
        for op in self.ops:
            out[op.ir_line] = op
            out[op.end_line] = op
        return out

    def value(self, name: str) -> ValueRecord:
        return self.value_by_name[name if name.startswith("%") else "%" + name]

    def __getstate__(self):  # the cached lookups are rebuilt, not pickled
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)


@dataclass
class PassRecord:
    """One stage of the compile: `stage` names what its `ir` is ("tile", "gpu", "llir", "ptx", "cubin");
    `stats` is what the pass found; `positions` each line's source line (tile and GPU IR, LLVM IR, PTX);
    `snapshot` the IR as records, kept for the last pass of the tile and GPU stages."""

    name: str
    description: str
    ir: str
    seconds: float
    changed: bool
    stats: dict = field(default_factory=dict)
    stage: str = ""
    positions: Positions | None = None
    snapshot: Snapshot | None = None


@dataclass
class CompileTrace:
    """Everything the compiler did for one specialization of one kernel."""

    kernel: str
    passes: list = field(default_factory=list)
    key: str = ""
    signature: str = ""
    notes: list = field(default_factory=list)

    def record(self, name, description, ir, seconds, changed, stats=None, stage="", positions=None,
               snapshot=None) -> PassRecord:
        rec = PassRecord(name, description, ir, seconds, changed, dict(stats or {}), stage, positions, snapshot)
        self.passes.append(rec)
        return rec

    def ir_after(self, name: str) -> str:
        for p in reversed(self.passes):
            if p.name == name:
                return p.ir
        raise KeyError(f"no pass named {name!r} in the trace of {self.kernel}")

    def stage(self, stage: str) -> PassRecord:
        """The last record of `stage` ("tile", "gpu", "llir", "ptx", "cubin"): what `compiled.asm[stage]` holds."""
        for p in reversed(self.passes):
            if p.stage == stage:
                return p
        raise KeyError(f"no {stage} stage in the trace of {self.kernel}"
                       + (": call compiled.build_gpu() (works without a GPU)" if stage != "tile" else ""))

    def snapshot(self, stage: str = "gpu") -> Snapshot | None:
        """The IR records of the last record of `stage`, or None when there are none."""
        try:
            return self.stage(stage).snapshot
        except KeyError:
            return None

    @property
    def shared_plan(self) -> tuple:
        """The latest GPU build's shared-memory plan (SharedBuffer records); () before any."""
        snap = self.snapshot("gpu")
        return snap.shared_plan if snap else ()

    @property
    def barriers(self) -> tuple:
        """The latest GPU build's barriers between shared-memory ops (Barrier records); () before any."""
        snap = self.snapshot("gpu")
        return snap.barriers if snap else ()

    @property
    def final_ir(self) -> str:
        return self.passes[-1].ir

    def summary(self) -> str:
        """A table of the passes: name, changed or not, time, what it found."""
        rows = [f"{'pass':<18} {'changed':<8} {'ms':>8}  details"]
        for p in self.passes:
            details = ", ".join(f"{k}={v}" for k, v in p.stats.items() if v)
            rows.append(f"{p.name:<18} {'yes' if p.changed else 'no':<8} {p.seconds * 1e3:8.2f}  {details}")
        return "\n".join(rows)


# --------------------------------------------------------------------------- JSON (the disk cache)

# per record class, its fields that hold records: (class, a tuple of them?)
_NESTED = {
    PassRecord: {"positions": ("Positions", False), "snapshot": ("Snapshot", False)},
    Snapshot: {"functions": ("FunctionRecord", True), "ops": ("OpRecord", True), "values": ("ValueRecord", True),
               "accesses": ("Access", True), "shared_plan": ("SharedBuffer", True), "barriers": ("Barrier", True)},
    ValueRecord: {"shared": ("SharedTile", False)},
    Access: {"coalescing": ("Coalescing", False)},
}
_CLASSES = {c.__name__: c for c in (Positions, SharedTile, ValueRecord, OpRecord, FunctionRecord, Coalescing, Access,
                                    SharedBuffer, Barrier, Snapshot, PassRecord)}


_FIELD_NAMES: dict = {}  # record class -> its field names (dataclasses.fields is slow for tens of thousands of records)
_SCALARS = frozenset((str, int, float, bool, type(None)))


def to_json(record) -> dict:
    """A record (PassRecord, Snapshot, ...) as JSON-ready dicts and lists."""
    cls = type(record)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(record))
    return {n: _plain(getattr(record, n)) for n in names}


def _plain(v):
    # the exact types first (a GPU snapshot holds tens of thousands of values), then the general rules
    t = type(v)
    if t in _SCALARS:
        return v
    if t is tuple or t is list:
        return [_plain(x) for x in v]
    if t in _FIELD_NAMES or (dataclasses.is_dataclass(v) and not isinstance(v, type)):
        return to_json(v)
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _tuples(v):
    if type(v) is not list:
        return v
    # the common case, a list of scalars, without a call per element (a GPU snapshot holds tens of thousands)
    if all(type(x) in _SCALARS for x in v):
        return tuple(v)
    return tuple(_tuples(x) for x in v)


_DECODE: dict = {}  # record class -> ((field name, how), ...): how is a (class, many) pair, "dict" or None


def _decoding(cls) -> tuple:
    plan = _DECODE.get(cls)
    if plan is None:
        nested = _NESTED.get(cls, {})
        plan = _DECODE[cls] = tuple(
            (f.name, nested[f.name] if f.name in nested else "dict" if cls is PassRecord and f.name == "stats"
             else None) for f in dataclasses.fields(cls))
    return plan


def from_json(cls, data: dict):
    """The record of class `cls` that `to_json` made `data` from (lists become tuples again; a PassRecord's
    stats stay a dict). Raises KeyError / TypeError on data of another schema."""
    kwargs = {}
    for name, how in _decoding(cls):
        if name not in data:
            continue  # a field with a default that the writer did not have
        v = data[name]
        if how is None:
            v = _tuples(v)
        elif how == "dict":
            v = dict(v)
        elif v is not None:
            sub, many = how
            sub = _CLASSES[sub]
            v = tuple(from_json(sub, x) for x in v) if many else from_json(sub, v)
        kwargs[name] = v
    return cls(**kwargs)
