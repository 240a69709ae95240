"""The sanitizing interpreter: `kernel[grid](..., sanitize=True)` on CPU tensors.

A GPU runs a launch's programs in any order and at once; the interpreter runs them one after another, so a
kernel whose result depends on that order still passes its tests here. With `sanitize=True` the interpreter
records, for every byte a launch touches, its last writer, its last readers and its last atomic accessor
(program, lane, op), and reports:

- **races**: two programs touching one byte, at least one of them writing, with no atomic in between that
  orders them (write-write with different bytes, read-after-write, write-after-read, a plain access against
  an atomic one). Atomics against atomics never race. An atomic with `sem` other than "relaxed" orders every
  access its program makes afterwards after the accesses of the programs that last touched its address
  atomically (and, transitively, of those they were ordered after): a lock taken with `atomic_cas` and
  released with `atomic_xchg` protects plain loads and stores, as on a GPU. The model is coarse in one
  direction: all of the releasing program's accesses count as ordered, even those after its release.
- **duplicate stores**: two lanes of one store writing different values to one address (which one lands is
  unspecified on a GPU). Lanes storing the same value are not reported (the result does not depend on which
  wins); neither are two programs writing identical bytes.
- **uninitialized reads**: a load (or atomic) of bytes of a tensor made with `kernellab.empty` or marked with
  `kernellab.uninitialized(t)` that nothing has written since (the launch's own stores, earlier launches
  and torch ops all count as writes). The marked memory is filled with a poison pattern (0xFF bytes for float
  dtypes: NaN; 0xA5 for the others), and a byte counts as unwritten while it still holds it and this launch
  has not stored to it; a tensor written elsewhere with exactly that pattern is the blind spot. Memory from
  a plain `torch.empty` cannot be told from written memory, so it is not checked: mark it.

Findings with the same kind, argument and pair of source lines are merged (`Finding.count`). The report is
plain data (`SanitizerReport`: findings, per argument an `AccessMap` of which program last wrote and read
each element, and per program a `ProgramAccess` per argument: the elements it read, wrote and accessed
atomically, and those its masked-off lanes pointed at) for the lab to draw. By default findings raise a
`SanitizerError` at the end of the launch (its memory effects stay); `sanitize="warn"` warns instead. The report
is returned by `Interpreter.run` and kept as `compiled_kernel.sanitizer_report`.

Cost: 12 bytes of shadow state per byte read, 12 more per byte written (24 more where several programs
touch it), and 1.5 to 10 times the interpreter's time on the corpus kernels; nothing when sanitize is off.
Arguments that alias one storage (in-place kernels, overlapping views) share their shadow, so races through
two arguments are found too.
"""
from __future__ import annotations

import itertools
import warnings
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..errors import InterpreterError, SanitizerError
from .interp_memory import _REGION_SHIFT, MemKind, Memory

_SHIFT = 20  # a byte's tag is program << _SHIFT | site id
_SITE_MASK = (1 << _SHIFT) - 1
MODES = (True, False, None, "raise", "warn")


class SanitizerWarning(UserWarning):
    """`sanitize="warn"`: the findings of a launch, as a warning."""


class Site:
    """One memory op of the kernel (a load, store or atomic), where a sanitized access comes from."""

    __slots__ = ("id", "op", "fn", "line", "name", "kind", "shape", "acquires")

    def __init__(self, sid: int, op, fn: str):
        self.id, self.op, self.fn = sid, op, fn
        self.line = op.loc.line if getattr(op, "loc", None) is not None else None
        ty = op.operands[0].type
        self.shape = tuple(getattr(ty, "block_shape", None) or ty.shape)
        if op.name == "tt.load":
            self.name, self.kind = "tl.load", "read"
        elif op.name == "tt.store":
            self.name, self.kind = "tl.store", "write"
        else:
            k = "cas" if op.name == "tt.atomic_cas" else op.attrs.get("kind", "?").lstrip("fu")
            self.name, self.kind = f"tl.atomic_{k}", "atomic"
        self.acquires = self.kind == "atomic" and op.attrs.get("sem", "acq_rel") != "relaxed"


@dataclass
class Access:
    """One side of a finding: which program and lane, from which line and op, did what."""

    program: tuple  # (x, y, z)
    lane: tuple | None  # index in the op's tile; None for a scalar access
    line: int | None
    source: str  # the text of that line ("" when unknown)
    op: str  # "tl.load", "tl.store", "tl.atomic_add", ...
    kind: str  # "read", "write" or "atomic"
    function: str

    def __str__(self):
        lane = f" lane {list(self.lane)}" if self.lane else ""
        line = f" line {self.line}" if self.line else ""
        src = f" `{self.source}`" if self.source else ""
        return f"program {self.program}{lane}{line}{src} ({self.op})"


@dataclass
class Finding:
    """One problem: kind "race" (detail "write-write", "read-after-write", "write-after-read" or
    "atomic-plain"), "duplicate-store" or "uninitialized-read"; where (argument, byte and element offset
    relative to the argument's pointer, for the first occurrence); the two accesses (`first` the earlier one,
    None for an uninitialized read); `count`: the lanes that showed the same problem at the same lines."""

    kind: str
    detail: str
    argument: str
    byte_offset: int
    element_offset: int | None
    first: Access | None
    second: Access
    count: int = 1

    def message(self) -> str:
        where = (f"element offset {self.element_offset}" if self.element_offset is not None
                 else f"byte offset {self.byte_offset}")
        where += f" of argument '{self.argument}'"
        more = f" ({self.count} lanes like it)" if self.count > 1 else ""
        if self.kind == "uninitialized-read":
            return f"uninitialized read at {where}{more}: {self.second} reads memory nothing has written"
        if self.kind == "duplicate-store":
            return (f"duplicate store at {where}{more}: two lanes of one store write different values, "
                    f"{self.first} and lane {list(self.second.lane or ())}")
        verb = {"write-write": "writes what", "read-after-write": "reads what", "write-after-read": "writes what",
                "atomic-plain": "accesses what"}[self.detail]
        done = {"write-write": "wrote", "read-after-write": "wrote", "write-after-read": "read",
                "atomic-plain": "accessed"}[self.detail]
        return f"race ({self.detail}) at {where}{more}: {self.second} {verb} {self.first} {done}"


_ADVICE = {
    "race": "Races: programs run in any order and at once on a GPU, so the result depends on scheduling; give each "
            "program its own elements, or use atomics.",
    "duplicate-store": "Duplicate stores: which lane's value lands is unspecified on a GPU; make the addresses of one "
                       "store distinct (or reduce the values first).",
    "uninitialized-read": "Uninitialized reads: the memory came from kernellab.empty / kernellab.uninitialized and "
                          "nothing wrote it; initialize it (torch.zeros) or mask the access.",
}


@dataclass
class AccessMap:
    """Per element of one argument (element i at element offset `offset + i` of its pointer): the flat id of
    the program that last wrote it, last read it, last accessed it atomically (-1: none) in the launch.
    Flat ids number programs x-fastest: x + gx * (y + gy * z)."""

    argument: str
    elem_size: int
    offset: int
    writer: np.ndarray
    reader: np.ndarray
    atomic: np.ndarray


@dataclass
class ProgramAccess:
    """What one program did to one argument, as element offsets from the argument's pointer (sorted, unique):
    the elements its active lanes read, wrote and accessed atomically, and those its masked-off lanes pointed at
    (`masked`: they touched nothing; the ones outside the argument are what the mask protected)."""

    read: np.ndarray
    written: np.ndarray
    atomic: np.ndarray
    masked: np.ndarray


MAX_PROGRAMS = 4096  # the per-program record keeps the launch's first programs (flat ids below this)


@dataclass
class SanitizerReport:
    kernel: str
    grid: tuple
    findings: list = field(default_factory=list)
    maps: dict = field(default_factory=dict)  # argument name -> AccessMap
    # flat program id -> {argument name: ProgramAccess}, for the first MAX_PROGRAMS programs
    programs: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.findings

    def program(self, flat: int) -> tuple:
        gx, gy, _ = self.grid
        return (flat % gx, flat // gx % gy, flat // (gx * gy))

    def of_kind(self, kind: str) -> list:
        return [f for f in self.findings if f.kind == kind]

    def summary(self, limit: int = 5) -> str:
        if not self.findings:
            return f"kernel '{self.kernel}': the sanitizer found nothing (grid {self.grid})"
        counts: dict = {}
        for f in self.findings:
            counts[f.kind] = counts.get(f.kind, 0) + 1
        kinds = ", ".join(f"{n} {k}{'s' if n > 1 else ''}" for k, n in counts.items())
        lines = [f"kernel '{self.kernel}': the sanitizer found {kinds} (grid {self.grid}):"]
        lines += [f"  - {f.message()}" for f in self.findings[:limit]]
        if len(self.findings) > limit:
            lines.append(f"  ... and {len(self.findings) - limit} more (the error's .report has them all)")
        lines += [_ADVICE[k] for k in counts]
        return "\n".join(lines)

    __str__ = summary


# ---------------------------------------------------------------------------------------------
# Uninitialized memory: kernellab.empty / kernellab.uninitialized

_MARKED: dict = {}  # key -> (real lo address, nbytes, byte mask or None, pattern byte)
_KEYS = itertools.count()


def _pattern(obj) -> int:
    """The poison byte: 0xFF makes every float format a NaN; 0xA5 is an unlikely integer."""
    if isinstance(obj, np.ndarray):
        return 0xFF if obj.dtype.kind == "f" else 0xA5
    return 0xFF if obj.is_floating_point() else 0xA5


def _element_starts(obj, isz: int) -> np.ndarray:
    """Byte offsets of a view's elements, relative to its lowest one."""
    if isinstance(obj, np.ndarray):
        shape, strides = obj.shape, obj.strides
    else:
        shape, strides = tuple(obj.shape), [s * isz for s in obj.stride()]
    starts = np.zeros(1, np.int64)
    for n, st in zip(shape, strides):
        starts = (starts[:, None] + np.arange(n, dtype=np.int64) * st).reshape(-1)
    return starts - starts.min() if starts.size else starts


def uninitialized(t):
    """Mark tensor (or NumPy array) `t` as uninitialized for sanitized launches: fill it with the poison pattern
    (NaN for floats) and remember its memory, so that `sanitize=True` reports a kernel reading it before anything
    wrote it. Returns `t`. The mark ends when `t` is garbage collected."""
    from .interp_memory import region_for

    obj = getattr(t, "_kl_base", t)
    if getattr(getattr(obj, "device", None), "type", "cpu") != "cpu":
        # GPU memory: poisoned (so unwritten elements show), not tracked (the sanitizer runs on the CPU)
        import torch

        if obj.is_floating_point():
            obj.fill_(float("nan"))
        else:
            obj.fill_(True if obj.dtype == torch.bool else int.from_bytes(b"\xa5" * obj.element_size(), "little",
                                                                          signed=True))
        return t
    try:
        reg = region_for(1, "t", obj)
    except TypeError as e:
        raise InterpreterError(f"kernellab.uninitialized: {e}") from None
    if not reg.writable:
        raise InterpreterError("kernellab.uninitialized: the array is read-only")
    lo, hi = reg.view_lo, reg.view_hi
    mask = None
    if hi - lo != reg.numel * reg.elem_size:  # not dense: only the bytes of its elements
        mask = np.zeros(hi - lo, bool)
        starts = _element_starts(obj, reg.elem_size)
        mask[(starts[:, None] + np.arange(reg.elem_size)).reshape(-1)] = True
    pat = _pattern(obj)
    buf = reg.buf[lo:hi]
    if mask is None:
        buf[:] = pat
    else:
        buf[mask] = pat
    key = next(_KEYS)
    _MARKED[key] = (reg.real_storage + lo, hi - lo, mask, pat)
    try:
        weakref.finalize(obj, _MARKED.pop, key, None)
    except TypeError:  # not weak-referenceable: the mark lives as long as the process
        pass
    return t


def empty(*size, dtype=None, device="cpu", **kwargs):
    """`torch.empty` whose memory the sanitizer knows is uninitialized (see `uninitialized`)."""
    import torch

    return uninitialized(torch.empty(*size, dtype=dtype, device=device, **kwargs))


# ---------------------------------------------------------------------------------------------
# The sanitizing memory

class _Shadow:
    """Per byte of one storage (from byte `lo` of it, `n` bytes: the union of the spans its arguments may reach;
    arguments that alias one storage share it): the last write, the last two reads by different programs, the
    last atomic (tags: access sequence number << _SHIFT | site id, -1 none; lanes: flat index in the tile)."""

    def __init__(self, lo: int, n: int):
        self.lo, self.n = lo, n
        self.w_tag = self.w_lane = self.r_tag = self.r_lane = self.r2_tag = self.r2_lane = None
        self.a_tag = self.a_lane = None
        self.poison = None  # bool per byte: marked uninitialized; with `pattern`, its poison byte
        self.pattern = None

    def arrays(self, which: str):
        tag = getattr(self, which + "_tag")
        if tag is None:
            tag = np.full(self.n, -1, np.int64)
            setattr(self, which + "_tag", tag)
            setattr(self, which + "_lane", np.zeros(self.n, np.int32))
        return tag, getattr(self, which + "_lane")


class SanitizingMemory(Memory):
    """Memory that checks and records every access of a launch (see the module docstring).

    Every access (one op, one program) gets the next sequence number. Programs run one after another, so the
    accesses of one program have consecutive numbers: an earlier access is another program's exactly when its
    number is below the current program's first. An acquiring atomic of program p (at number t) that finds an
    earlier atomic of program q (at number s) on its bytes adds the edge (t, q, s): q's accesses up to s are
    ordered before p's accesses after t, and so are those ordered before them (followed at query time)."""

    def __init__(self, regions: list, check_align: bool, kernel: str, grid: tuple, source_lines, mode):
        super().__init__(regions, check_align)
        self.site: Site | None = None  # set by the op before each access
        self.ctx = None  # the interpreter's launch context (program id)
        self._sites: list = []  # site id -> Site (the interpreter's)
        self.kernel, self.grid, self.source_lines, self.mode = kernel, grid, source_lines, mode
        self.shadows: dict = {}
        self.findings: dict = {}  # (kind, detail, argument, site, site) -> Finding
        self._marked = list(_MARKED.values())
        self._seq = 0
        self._pid = None  # the current program's pid tuple (identity), flat id, first sequence number
        self._p = self._start = 0
        self._starts: list = []  # first sequence number of each program that accessed memory, and its flat id
        self._progs: list = []
        self._starts_np = None
        self.edges: dict = {}  # program -> [(its sequence number, other program, that program's number)]
        self._bound: tuple = (None, 0, {})  # (program, len(edges), {program q: q's last access ordered before})
        self._per_program: dict = {}  # flat id -> {argument: {kind: [element offset arrays]}}

    # -- bookkeeping -------------------------------------------------------------------------
    def _tag(self) -> int:
        pid = self.ctx.pid
        if pid is not self._pid:
            gx, gy, _ = self.grid
            self._pid, self._p, self._start = pid, int(pid[0]) + gx * (int(pid[1]) + gy * int(pid[2])), self._seq
            self._starts.append(self._seq)
            self._progs.append(self._p)
            self._starts_np = None
        seq = self._seq
        self._seq += 1
        return seq << _SHIFT | self.site.id

    def _programs_of(self, tags: np.ndarray) -> np.ndarray:
        """Flat program ids of the accesses with these tags (all >= 0)."""
        if self._starts_np is None:
            self._starts_np = (np.array(self._starts, np.int64), np.array(self._progs, np.int64))
        starts, progs = self._starts_np
        return progs[np.searchsorted(starts, tags >> _SHIFT, side="right") - 1]

    def _shadow(self, reg) -> _Shadow:
        key = (reg.real_storage, reg.nbytes)
        sh = self.shadows.get(key)
        if sh is None:
            same = [r for r in self.regions[1:] if (r.real_storage, r.nbytes) == key]
            lo, hi = min(r.lo for r in same), max(r.hi for r in same)
            sh = self.shadows[key] = _Shadow(lo, hi - lo)
            real_lo = reg.real_storage + lo
            for m_lo, m_n, m_mask, pat in self._marked:
                a, b = max(real_lo, m_lo), min(real_lo + sh.n, m_lo + m_n)
                if a >= b:
                    continue
                if sh.poison is None:
                    sh.poison = np.zeros(sh.n, bool)
                    sh.pattern = np.zeros(sh.n, np.uint8)
                part = slice(a - real_lo, b - real_lo)
                sh.poison[part] = True if m_mask is None else m_mask[a - m_lo:b - m_lo]
                sh.pattern[part] = pat
        return sh

    def _program_tuple(self, flat: int) -> tuple:
        gx, gy, _ = self.grid
        return (flat % gx, flat // gx % gy, flat // (gx * gy))

    def _access(self, tag: int, lane: int) -> Access:
        site = self._sites[tag & _SITE_MASK]
        prog = self._program_tuple(int(self._programs_of(np.array([tag]))[0]))
        lane_t = tuple(int(i) for i in np.unravel_index(int(lane), site.shape)) if site.shape else None
        src = ""
        if site.line and self.source_lines and 0 < site.line <= len(self.source_lines):
            src = self.source_lines[site.line - 1].strip()
        return Access(prog, lane_t, site.line, src, site.name, site.kind, site.fn)

    def _add(self, kind, detail, reg, bpos: int, first_tag, first_lane, tag, lane, count: int):
        key = (kind, detail, reg.name, None if first_tag is None else int(first_tag) & _SITE_MASK, tag & _SITE_MASK)
        f = self.findings.get(key)
        if f is not None:
            f.count += count
            return
        off = reg.origin + self.shadows[(reg.real_storage, reg.nbytes)].lo + int(bpos) - reg.base_addr
        eoff = off // reg.elem_size if off % reg.elem_size == 0 else None
        first = None if first_tag is None else self._access(int(first_tag), int(first_lane))
        self.findings[key] = Finding(kind, detail, reg.name, off, eoff, first, self._access(tag, lane), count)

    def _bounds(self) -> dict:
        """{program q: the last sequence number of q's accesses ordered (by atomics) before the current point}."""
        p = self._p
        mine = self.edges.get(p, ())
        prog, n, bound = self._bound
        if prog == p and n == len(mine):
            return bound
        bound = {}
        stack = [(q, s) for _, q, s in mine]
        while stack:
            r, b = stack.pop()
            if bound.get(r, -1) >= b:
                continue
            bound[r] = b
            stack.extend((q, s) for t, q, s in self.edges.get(r, ()) if t <= b)
        self._bound = (p, len(mine), bound)
        return bound

    def _conflicts(self, kind, detail, reg, prev, prev_lane, b, ln, tag, isz, extra=None):
        """Report bytes `b` (`isz` per lane) whose previous access `prev` (tags, -1 none) is another program's
        and not ordered before this one; `extra`: a further condition per byte."""
        other = (prev >= 0) & ((prev >> _SHIFT) < self._start)
        if extra is not None:
            other &= extra
        if not other.any():
            return
        if self.edges.get(self._p):
            bound = self._bounds()
            progs = self._programs_of(np.where(other, prev, 0))
            limit = np.array([bound.get(q, -1) for q in progs.tolist()], np.int64)
            other &= (prev >> _SHIFT) > limit
            if not other.any():
                return
        sites = prev & _SITE_MASK
        for s in np.unique(sites[other]).tolist():
            sel = other & (sites == s)
            i = int(np.argmax(sel))
            self._add(kind, detail, reg, b[i - i % isz], prev[i], prev_lane[i], tag, ln[i],
                      int(np.unique(ln[sel]).size))

    # -- byte positions ----------------------------------------------------------------------
    @staticmethod
    def _bytes(reg, sh, mk: MemKind, lanes, idx):
        """Byte positions in the shadow `sh` (storage byte sh.lo + b) and their lanes."""
        base = reg.typed(mk)[0] - reg.origin - sh.lo
        start = base + idx.astype(np.int64) * mk.isz
        if mk.isz == 1:
            return start, lanes
        return (start[:, None] + np.arange(mk.isz)).reshape(-1), np.repeat(lanes, mk.isz)

    def _groups_of(self, addr, mask, mk, verb, rid):
        if mask is not None and np.shape(mask) != addr.shape:
            mask = np.broadcast_to(mask, addr.shape)
        return self._groups(addr, mask, mk, verb, rid)

    def _note(self, addr, mask, mk: MemKind, rid, kind: str) -> None:
        """Record, for the per-program access map, the elements this access's lanes point at: active lanes under
        `kind` (read, written, atomic), masked-off ones under `masked`, as element offsets from the argument's
        pointer (the region of each lane is the static `rid`, else its address's)."""
        if self._p >= MAX_PROGRAMS:
            return
        a = np.ascontiguousarray(addr).reshape(-1).astype(np.int64, copy=False)
        act = None if mask is None else np.broadcast_to(mask, np.shape(addr)).reshape(-1)
        rids = None if rid is not None else a >> _REGION_SHIFT
        mine = self._per_program.setdefault(self._p, {})
        for r in [rid] if rid is not None else np.unique(rids).tolist():
            if not 0 < r < len(self.regions):
                continue
            reg = self.regions[r]
            sel = slice(None) if rid is not None else rids == r
            off = (a[sel] - reg.base_addr) // reg.elem_size
            rec = mine.setdefault(reg.name, {})
            if act is None:
                rec.setdefault(kind, []).append(off)
            else:
                on = act[sel]
                rec.setdefault(kind, []).append(off[on])
                rec.setdefault("masked", []).append(off[~on])

    # -- checks per access -------------------------------------------------------------------
    def _read(self, sh, reg, b, ln, tag, mk, atomic=False):
        isz = mk.isz
        if sh.w_tag is not None:
            self._conflicts("race", "read-after-write" if not atomic else "atomic-plain", reg, sh.w_tag[b],
                            sh.w_lane[b], b, ln, tag, isz)
        if not atomic and sh.a_tag is not None:
            self._conflicts("race", "atomic-plain", reg, sh.a_tag[b], sh.a_lane[b], b, ln, tag, isz)
        if sh.poison is not None:
            self._uninitialized(sh, reg, b, ln, tag, mk)

    def _uninitialized(self, sh, reg, b, ln, tag, mk):
        bad = sh.poison[b] & (reg.buf[sh.lo + b] == sh.pattern[b])
        if not bad.any():
            return
        if sh.w_tag is not None:
            bad &= sh.w_tag[b] < 0
        if sh.a_tag is not None:
            bad &= sh.a_tag[b] < 0
        if mk.isz > 1:  # an element counts when all its bytes are unwritten
            bad = np.repeat(bad.reshape(-1, mk.isz).all(axis=1), mk.isz)
        if bad.any():
            i = int(np.argmax(bad))
            self._add("uninitialized-read", "", reg, b[i - i % mk.isz], None, None, tag, ln[i],
                      int(np.unique(ln[bad]).size))

    def _record_read(self, sh, b, ln, tag):
        r, rl = sh.arrays("r")
        old = r[b]
        move = (old >= 0) & ((old >> _SHIFT) < self._start)  # keep the last read of another program in r2
        if move.any():
            r2, r2l = sh.arrays("r2")
            mb = b[move]
            r2[mb] = old[move]
            r2l[mb] = rl[mb]
        r[b] = tag
        rl[b] = ln

    def _write(self, sh, reg, b, ln, tag, isz, new_bytes=None, atomic=False):
        w, wl = sh.arrays("w")
        if not atomic:
            differs = None
            if new_bytes is not None:  # an element whose bytes all stay the same is no race
                differs = (reg.buf[sh.lo + b] != new_bytes).reshape(-1, isz).any(axis=1)
                differs = np.repeat(differs, isz) if isz > 1 else differs
            self._conflicts("race", "write-write", reg, w[b], wl[b], b, ln, tag, isz, differs)
        if sh.r_tag is not None:
            r = sh.r_tag[b]
            prev, lane = r, sh.r_lane[b]
            if sh.r2_tag is not None:  # where this program read it last, check the other program's read
                mine = (r >> _SHIFT) >= self._start
                prev = np.where(mine, sh.r2_tag[b], r)
                lane = np.where(mine, sh.r2_lane[b], lane)
            self._conflicts("race", "write-after-read" if not atomic else "atomic-plain", reg, prev, lane, b, ln,
                            tag, isz)
        if not atomic and sh.a_tag is not None:
            self._conflicts("race", "atomic-plain", reg, sh.a_tag[b], sh.a_lane[b], b, ln, tag, isz)

    # -- the memory operations ---------------------------------------------------------------
    def load(self, addr, mask, other, mk: MemKind, rid=None):
        tag = self._tag()
        self._note(addr, mask, mk, rid, "read")
        for reg, _, lanes, idx in self._groups_of(addr, mask, mk, "reads", rid):
            sh = self._shadow(reg)
            b, ln = self._bytes(reg, sh, mk, lanes, idx)
            self._read(sh, reg, b, ln, tag, mk)
            self._record_read(sh, b, ln, tag)
        return super().load(addr, mask, other, mk, rid)

    def store(self, addr, val, mask, mk: MemKind, rid=None):
        tag = self._tag()
        self._note(addr, mask, mk, rid, "written")
        raw = self.raw_of(val, addr, mk).reshape(-1)
        bits = np.ascontiguousarray(raw).view(np.dtype(f"u{mk.isz}"))
        for reg, _, lanes, idx in self._groups_of(addr, mask, mk, "writes", rid):
            self._writable(reg)
            sh = self._shadow(reg)
            self._duplicates(reg, sh, mk, lanes, idx, bits, tag)
            b, ln = self._bytes(reg, sh, mk, lanes, idx)
            self._write(sh, reg, b, ln, tag, mk.isz, np.ascontiguousarray(raw[lanes]).view(np.uint8))
            w, wl = sh.arrays("w")
            w[b] = tag
            wl[b] = ln
        super().store(addr, val, mask, mk, rid)

    def _duplicates(self, reg, sh, mk, lanes, idx, bits, tag):
        if idx.shape[0] < 2:
            return
        order = np.argsort(idx, kind="stable")
        si = idx[order]
        same = si[1:] == si[:-1]
        if not same.any():
            return
        v = bits[lanes[order]]
        diff = same & (v[1:] != v[:-1])
        if diff.any():
            j = int(np.argmax(diff))
            first_lane, lane = int(lanes[order[j]]), int(lanes[order[j + 1]])
            b = reg.typed(mk)[0] - reg.origin - sh.lo + int(si[j]) * mk.isz
            self._add("duplicate-store", "", reg, b, tag, first_lane, tag, lane, int(diff.sum()))

    def _atomic(self, addr, mask, mk, rid):
        tag = self._tag()
        self._note(addr, mask, mk, rid, "atomic")
        for reg, _, lanes, idx in self._groups_of(addr, mask, mk, "atomically accesses", rid):
            self._writable(reg)
            sh = self._shadow(reg)
            b, ln = self._bytes(reg, sh, mk, lanes, idx)
            a, al = sh.arrays("a")
            if self.site.acquires:
                prev = a[b]
                prev = prev[(prev >= 0) & ((prev >> _SHIFT) < self._start)]
                if prev.size:
                    progs = self._programs_of(prev)
                    last: dict = {}
                    for q, s in zip(progs.tolist(), (prev >> _SHIFT).tolist()):
                        if s > last.get(q, -1):
                            last[q] = s
                    self.edges.setdefault(self._p, []).extend((tag >> _SHIFT, q, s) for q, s in last.items())
            self._read(sh, reg, b, ln, tag, mk, atomic=True)
            self._write(sh, reg, b, ln, tag, mk.isz, atomic=True)
            a[b] = tag
            al[b] = ln

    def atomic_rmw(self, kind, addr, val, mask, mk: MemKind, combine, need_old=True, at=None, rid=None):
        self._atomic(addr, mask, mk, rid)
        return super().atomic_rmw(kind, addr, val, mask, mk, combine, need_old, at, rid)

    def atomic_cas(self, addr, cmp, val, mk: MemKind, rid=None):
        self._atomic(addr, None, mk, rid)
        return super().atomic_cas(addr, cmp, val, mk, rid)

    # -- the end of the launch ---------------------------------------------------------------
    def report(self) -> SanitizerReport:
        rep = SanitizerReport(self.kernel, tuple(self.grid), list(self.findings.values()))
        for reg in self.regions[1:]:
            sh = self.shadows.get((reg.real_storage, reg.nbytes))
            if sh is None:
                continue
            esz = reg.elem_size
            first = (-(reg.lo_addr - reg.base_addr)) % esz  # the region's first byte of an element
            n = max(0, (reg.hi - reg.lo - first) // esz)
            first += reg.lo - sh.lo  # in the shadow

            def per_elem(tag, first=first, n=n, esz=esz):
                out = np.full(n, -1, np.int64)
                if tag is not None:
                    t = tag[first:first + n * esz:esz]
                    seen = t >= 0
                    out[seen] = self._programs_of(t[seen])
                return out.astype(np.int32)

            off = (reg.origin + sh.lo + first - reg.base_addr) // esz
            rep.maps[reg.name] = AccessMap(reg.name, esz, off, per_elem(sh.w_tag), per_elem(sh.r_tag),
                                           per_elem(sh.a_tag))
        empty = np.zeros(0, np.int64)

        def merged(parts):
            return np.unique(np.concatenate(parts)) if parts else empty

        for p, args in sorted(self._per_program.items()):
            rep.programs[p] = {name: ProgramAccess(*(merged(rec.get(k, ())) for k in
                                                     ("read", "written", "atomic", "masked")))
                               for name, rec in args.items()}
        return rep

    def finish(self) -> SanitizerReport:
        rep = self.report()
        if rep.findings:
            if self.mode == "warn":
                warnings.warn(rep.summary(), SanitizerWarning, stacklevel=4)
            else:
                raise SanitizerError(rep.summary(), rep)
        return rep
