"""Memory for the CPU interpreter: argument buffers, synthetic addresses, checked loads/stores/atomics.

Every pointer argument k gets a synthetic base address ``((k + 1) << 40) + (real_ptr % 256)``, so a
pointer value is a plain int64 and its region is ``addr >> 40``. A region wraps the whole underlying
storage of the user's tensor/array as a writable uint8 NumPy array (no copy), so loads and stores land in
the user's memory; an access must stay within the argument's own view (its lowest to highest element
byte), or within the storage with ``bounds="storage"``, and be aligned to its element size: what a GPU
would corrupt silently or fault on is an error here. ``bounds="allocation"`` (kernellab.compat's default) is
"storage" plus what a GPU tolerates: a load may also reach past the storage's end up to the end of the
allocation unit of torch's CUDA caching allocator (the storage rounded up to ALLOCATION_UNIT bytes), where a GPU
reads the block's padding without faulting; those lanes read zero here.

Values travel through the interpreter in a *carrier* dtype: the NumPy dtype of the element type,
except bf16 (carried as float32, stored as the top 16 bits), fp8 (float32 on the format's grid, stored
as one byte: compiler/fp8.py) and i1 (carried as bool, stored as a byte).
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..compiler import fp8
from ..compiler.types import DType, PointerType

_REGION_SHIFT = 40
_U64 = np.dtype(np.uint64)
_umax = np.maximum.reduce
_bor = np.bitwise_or.reduce


class Fault(Exception):
    """A user error found while executing one op; the interpreter adds kernel/line/program id."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


# ---------------------------------------------------------------------------------------------
# bf16 helpers (bf16 values are float32 arrays whose low 16 bits are zero)

def bf16_bits(x):
    """float32 (scalar or array) -> uint16 bf16 bits, rounding to nearest even. NaNs keep their top
    16 bits (so a loaded NaN's payload survives a store or bitcast), made quiet only if truncation
    would turn them into an infinity."""
    a = np.asarray(x, np.float32)
    u = a.view(np.uint32)
    r = ((u + ((u >> 16) & 1) + np.uint32(0x7FFF)) >> 16).astype(np.uint16)
    nan = a != a
    if nan.any():
        hi = (u >> 16).astype(np.uint16)
        hi = np.where(hi & np.uint16(0x7F), hi, hi | np.uint16(0x40))
        r = np.where(nan, hi, r)
    return r


def bf16_from_bits(b):
    """uint16 bf16 bits -> float32 carrier."""
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bf16(x):
    """Round float32/float64 values to the nearest bf16, returned as float32 (scalar stays scalar)."""
    a = np.asarray(x, np.float32)
    u = a.view(np.uint32)
    r = (u + ((u >> 16) & 1) + np.uint32(0x7FFF)) & np.uint32(0xFFFF0000)
    nan = a != a
    if nan.any():
        r = np.where(nan, (u | np.uint32(0x00400000)) & np.uint32(0xFFFF0000), r)
    r = r.view(np.float32)
    return r[()] if r.ndim == 0 else r


class MemKind:
    """How one element type sits in memory: the memory dtype and the carrier conversions."""

    __slots__ = ("mem", "carrier", "isz", "shift", "to_carrier", "to_mem", "zero", "name", "is_float")

    def __init__(self, elem):
        if isinstance(elem, PointerType):
            self.mem = self.carrier = np.dtype(np.int64)
            self.to_carrier = self.to_mem = None
            self.name, self.is_float = str(elem), False
        else:
            assert isinstance(elem, DType), elem
            self.name, self.is_float = elem.ir, elem.kind == "float"
            if elem.ir == "bf16":
                self.mem, self.carrier = np.dtype(np.uint16), np.dtype(np.float32)
                self.to_carrier, self.to_mem = bf16_from_bits, bf16_bits
            elif elem.ir in fp8.FORMATS:  # float32 carrier on the format's grid, one byte in memory
                fmt = elem.ir
                self.mem, self.carrier = np.dtype(np.uint8), np.dtype(np.float32)
                self.to_carrier = lambda raw: fp8.decode(fmt, raw)
                self.to_mem = lambda v: fp8.encode(fmt, v)
            elif elem.ir == "i1":
                self.mem, self.carrier = np.dtype(np.uint8), np.dtype(np.bool_)
                self.to_carrier = lambda raw: raw != 0
                self.to_mem = lambda v: np.asarray(v).astype(np.uint8)
            else:
                self.mem = self.carrier = elem.np
                self.to_carrier = self.to_mem = None
        self.isz = self.mem.itemsize
        self.shift = self.isz.bit_length() - 1
        self.zero = np.zeros((), self.carrier)[()]


_KINDS: dict = {}


def mem_kind(elem) -> MemKind:
    k = _KINDS.get(elem)
    if k is None:
        k = _KINDS[elem] = MemKind(elem)
    return k


# ---------------------------------------------------------------------------------------------
# Regions

BOUNDS = ("view", "storage", "allocation")
# torch's CUDA caching allocator rounds every block up to 512 bytes (kMinBlockSize): a load up to there, past a
# tensor's last byte, reads the block's padding on a GPU instead of faulting (bounds="allocation")
ALLOCATION_UNIT = 512


class Region:
    """One pointer argument: its underlying storage, and the bytes a kernel may touch in it.

    `buf` is the whole storage (so loads and stores land in the user's memory); `lo`/`hi` bound the
    accessible bytes within it: by default the view's extent (from its lowest to its highest element
    byte, whatever its strides), or the whole storage with bounds="storage"."""

    def __init__(self, rid: int, name: str, buf: np.ndarray, byte_offset: int, real_ptr: int,
                 numel: int, elem_size: int, desc: str, owner, view_lo: int, view_hi: int,
                 bounds: str = "view"):
        self.rid, self.name, self.buf, self.byte_offset = rid, name, buf, byte_offset
        self.nbytes = int(buf.shape[0])
        self.base_addr = (rid << _REGION_SHIFT) + (real_ptr % 256)  # the argument's pointer value
        self.origin = self.base_addr - byte_offset  # address of storage byte 0
        self.real_storage = real_ptr - byte_offset  # its real address
        self.numel, self.elem_size, self.desc = numel, elem_size, desc
        self.owner = owner  # keeps the user's object alive while we hold raw memory
        self.view_lo, self.view_hi = max(0, view_lo), min(self.nbytes, view_hi)
        self.bounds = bounds
        self.lo, self.hi = (0, self.nbytes) if bounds in ("storage", "allocation") else (self.view_lo, self.view_hi)
        self.lo_addr, self.hi_addr = self.origin + self.lo, self.origin + self.hi
        # loads may reach here (exclusive): the storage's allocation unit under bounds="allocation"
        self.read_hi_addr = self.origin + -(-self.nbytes // ALLOCATION_UNIT) * ALLOCATION_UNIT \
            if bounds == "allocation" and self.nbytes else self.hi_addr
        self.typed_views: dict = {}
        self.writable = bool(buf.flags.writeable)

    def typed(self, mk: MemKind):
        """(T, typed array, lim) for accesses of `mk`: T is the first address >= lo_addr aligned for the type,
        element i of the array sits at T + i * isz, and an aligned access at `addr` is in bounds exactly when
        0 <= addr - T <= lim."""
        t = self.typed_views.get(mk.mem)
        if t is None:
            isz = mk.isz
            T = self.lo_addr + (-self.lo_addr) % isz
            start = T - self.origin
            n = max(0, (self.hi - start) // isz)
            arr = self.buf[start:start + n * isz].view(mk.mem) if n else np.zeros(0, mk.mem)
            t = self.typed_views[mk.mem] = (T, arr, self.hi_addr - T - isz)
        return t

    def _elems(self, nbytes: int) -> str:
        return f"{nbytes // self.elem_size}" if nbytes % self.elem_size == 0 else f"{nbytes} bytes"

    def describe_offset(self, addr: int) -> str:
        """Where `addr` is relative to this argument's pointer, the argument, and the offsets it may reach."""
        off = addr - self.base_addr
        esz = self.elem_size
        lo, hi = self.lo_addr - self.base_addr, self.hi_addr - self.base_addr
        if off % esz == 0 and lo % esz == 0 and hi % esz == 0:
            where = f"element offset {off // esz}"
            valid = f"valid element offsets {lo // esz}..{hi // esz - 1}" if hi > lo else "no valid offsets"
        else:
            where = f"byte offset {off}"
            valid = f"valid byte offsets {lo}..{hi - 1}" if hi > lo else "no valid offsets"
        size = f"{self.desc} of {self.numel} elements"
        storage = self.nbytes // esz
        view_span = self.view_hi - self.view_lo
        if storage != self.numel or view_span != self.numel * esz:
            if view_span != self.numel * esz and self.numel:
                size += f" spanning {self._elems(view_span)} elements"
            size += f" in a storage of {storage} elements"
        return f"{where} of argument '{self.name}' ({size}; {valid})"

    def in_storage(self, addr: int, isz: int) -> bool:
        return self.origin <= addr and addr + isz <= self.origin + self.nbytes


def _raw_bytes(addr: int, nbytes: int, writable: bool) -> np.ndarray:
    if nbytes <= 0:
        return np.zeros(0, np.uint8)
    arr = np.frombuffer((ctypes.c_uint8 * nbytes).from_address(addr), dtype=np.uint8)
    if not writable:
        arr.flags.writeable = False
    return arr


def _extent(shape, strides, isz: int) -> tuple:
    """(low, high) bytes of a strided view relative to its first element: from its lowest to one past its highest
    element byte, what the view can reach through any index (strides in elements)."""
    if any(int(n) == 0 for n in shape):
        return 0, 0
    lo = sum(min(0, (int(n) - 1) * int(s)) for n, s in zip(shape, strides))
    hi = sum(max(0, (int(n) - 1) * int(s)) for n, s in zip(shape, strides))
    return lo * isz, hi * isz + isz


def region_for(rid: int, name: str, obj, bounds: str = "view") -> Region:
    """Wrap a torch CPU tensor or a NumPy array (any view) as region `rid`, without copying."""
    obj = getattr(obj, "_kl_base", obj)  # a TensorWrapper: the memory is its base tensor's
    if isinstance(obj, np.ndarray):
        root = obj
        while isinstance(root.base, np.ndarray):
            root = root.base
        lo, hi = np.lib.array_utils.byte_bounds(root)
        if obj.size == 0 and root.size == 0:
            lo = hi = obj.__array_interface__["data"][0]
        ptr = obj.__array_interface__["data"][0]
        buf = _raw_bytes(lo, hi - lo, bool(obj.flags.writeable))
        isz = obj.dtype.itemsize
        vlo, vhi = _extent(obj.shape, [s // isz for s in obj.strides], isz) if obj.strides else (0, isz)
        if any(s % isz for s in obj.strides):  # byte strides that are not whole elements
            vlo, vhi = (0, 0) if obj.size == 0 else [b - ptr for b in np.lib.array_utils.byte_bounds(obj)]
        return Region(rid, name, buf, ptr - lo, ptr, int(obj.size), isz, f"{obj.dtype} array", obj,
                      ptr - lo + vlo, ptr - lo + vhi, bounds)
    if type(obj).__module__.startswith("torch") and hasattr(obj, "untyped_storage"):
        if obj.device.type != "cpu":
            raise TypeError(f"argument '{name}' is a {obj.device.type} tensor; the CPU interpreter needs CPU tensors")
        st = obj.untyped_storage()
        lo, n = st.data_ptr(), st.nbytes()
        ptr = obj.data_ptr()
        buf = _raw_bytes(lo, n, True)
        isz = obj.element_size()
        vlo, vhi = _extent(obj.shape, obj.stride(), isz)
        return Region(rid, name, buf, ptr - lo, ptr, obj.numel(), isz,
                      f"{str(obj.dtype).replace('torch.', '')} tensor", obj, ptr - lo + vlo, ptr - lo + vhi, bounds)
    if callable(getattr(obj, "data_ptr", None)) and hasattr(obj, "dtype") and hasattr(obj, "shape"):
        return _duck_region(rid, name, obj, bounds)
    raise TypeError(f"argument '{name}' must be a torch CPU tensor or a NumPy array, got {type(obj).__name__}"
                    + (" (an object with data_ptr() also needs `dtype`, `shape` and `stride()` or `strides` on "
                       "the CPU interpreter, to know what memory it spans)"
                       if callable(getattr(obj, "data_ptr", None)) else ""))


def _duck_region(rid: int, name: str, obj, bounds: str) -> Region:
    """A tensor-like object (Triton passes any object with `data_ptr()` and `dtype` as a pointer): a region over
    the bytes its shape and strides span from `data_ptr()` (FlagGems' StridedBuffer, a view with negative strides).
    Its storage is unknown, so `bounds="storage"` reaches no further than the view."""
    import torch

    dt = obj.dtype
    isz = dt.itemsize if isinstance(dt, torch.dtype) else np.dtype(dt).itemsize
    shape = tuple(int(n) for n in obj.shape)
    st = obj.stride() if callable(getattr(obj, "stride", None)) else getattr(obj, "strides", None)
    if st is None:
        st = [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]
    vlo, vhi = _extent(shape, st, isz)
    ptr = int(obj.data_ptr())
    numel = int(np.prod(shape, dtype=np.int64))
    buf = _raw_bytes(ptr + vlo, vhi - vlo, True)
    desc = f"{str(dt).replace('torch.', '')} {type(obj).__name__}"
    # (its allocation is unknown too: "allocation" reaches as far as "storage")
    return Region(rid, name, buf, -vlo, ptr, numel, isz, desc, obj, 0, vhi - vlo,
                  "storage" if bounds == "allocation" else bounds)


# ---------------------------------------------------------------------------------------------
# The memory of one launch

class Memory:
    """Checked loads, stores and atomics over the regions of one launch.

    Every access names `rid`, the region its pointer derives from when the interpreter can tell statically
    (pointer arithmetic from one argument); then every active lane must stay inside that argument's bounds,
    however far it strays (an offset of 2**40 bytes does not land in the next argument). With `rid` None
    (pointers loaded from memory, made from integers, chosen between two arguments) the address itself picks
    the region."""

    def __init__(self, regions: list, check_align: bool = True):
        self.regions = [None] + list(regions)  # index = region id
        # False when every pointer provably stays aligned (no int->ptr / pointer casts / loaded
        # pointers in the module, and every argument's base aligned for its element type).
        self.check_align = check_align

    # -- address resolution ------------------------------------------------------------------
    def _fast(self, addr: np.ndarray, mask, mk: MemKind, rid):
        """(region, typed array, element index array) when every active lane is aligned and in bounds of
        region `rid` (or of lane 0's region); masked-off lanes get index 0. None when the general path is
        needed (which finds and reports the bad lane)."""
        regs = self.regions
        if rid is None:
            rid = addr.item(0) >> _REGION_SHIFT
            if rid <= 0 or rid >= len(regs):
                if mask is None or not mask.any():
                    return None
                rid = addr.item(int(np.argmax(mask))) >> _REGION_SHIFT  # lane 0 is masked off
                if rid <= 0 or rid >= len(regs):
                    return None
        reg = regs[rid]
        base, tv, lim = reg.typed(mk)
        pos = np.subtract(addr, base)
        if mask is not None:
            pos = np.where(mask, pos, 0)
        if lim < 0 or _umax(pos.view(_U64), axis=None) > lim:
            return None
        if mk.isz > 1:
            if self.check_align and _bor(pos, axis=None) & (mk.isz - 1):
                return None
            pos >>= mk.shift
        return reg, tv, pos

    def _groups(self, addr: np.ndarray, act: np.ndarray | None, mk: MemKind, verb: str, rid=None):
        """General path: check every active lane; return [(region, typed array, lane indices, element
        indices)], or raise a Fault naming the first bad lane. Loads (verb "reads") of lanes past a region's
        storage but within its allocation unit (bounds="allocation") are in no group: they read zero."""
        a = np.ascontiguousarray(addr).reshape(-1)
        n = a.shape[0]
        act = np.ones(n, bool) if act is None else np.broadcast_to(act, addr.shape).reshape(-1)
        isz = mk.isz
        rids = None if rid is not None else a >> _REGION_SHIFT
        ok = np.zeros(n, bool)
        groups = []
        for r in [rid] if rid is not None else np.unique(rids[act]).tolist():
            if 0 < r < len(self.regions):
                reg = self.regions[r]
                base, tv, lim = reg.typed(mk)
                sel = act if rid is not None else act & (rids == r)
                pos = a - base
                good = sel & (pos >= 0) & (pos <= lim) & ((pos & (isz - 1)) == 0)
                ok |= good
                if verb == "reads" and reg.read_hi_addr > reg.hi_addr:  # the allocation's padding: reads zero
                    ok |= sel & ~good & (a >= reg.hi_addr) & (a + isz <= reg.read_hi_addr) & ((pos & (isz - 1)) == 0)
                lanes = np.nonzero(good)[0]
                if lanes.size:
                    groups.append((reg, tv, lanes, pos[lanes] >> mk.shift))
        bad = act & ~ok
        if bad.any():
            raise Fault(self._bad_lane_message(addr, a, bad, rid, rids, mk, verb))
        return groups

    def _bad_lane_message(self, addr, a, bad, rid, rids, mk: MemKind, verb: str) -> str:
        lane = int(np.argmax(bad))
        bad_addr = int(a[lane])
        rid = rid if rid is not None else int(rids[lane])
        reg = self.regions[rid] if 0 < rid < len(self.regions) else None
        idx = [int(i) for i in np.unravel_index(lane, addr.shape)] if addr.ndim else []
        at = f" at tile index {idx}" if addr.size > 1 else ""
        nbad = int(bad.sum())
        more = f" ({nbad} of {a.shape[0]} lanes bad)" if nbad > 1 else ""
        if reg is not None and reg.lo_addr <= bad_addr and bad_addr + mk.isz <= reg.hi_addr:
            return (f"{verb} a misaligned address: {reg.describe_offset(bad_addr)}{at}{more} is not a multiple of "
                    f"the {mk.isz}-byte element size ({mk.name}); a GPU faults on misaligned accesses")
        if reg is not None:
            what = reg.describe_offset(bad_addr)
        elif bad_addr == 0:
            what = "a null pointer"
        else:
            what = f"address {bad_addr:#x}, which is not inside any argument's buffer"
        hint = "mask the access or fix the offsets"
        if reg is not None and reg.bounds == "view" and reg.in_storage(bad_addr, mk.isz):
            hint += ("; the address is inside the storage the view belongs to: if the kernel addresses the parent "
                     "tensor on purpose, launch with bounds='storage'")
        return f"{verb} out of bounds: {what}{at}{more}; {hint}"

    # -- loads and stores --------------------------------------------------------------------
    def load(self, addr: np.ndarray, mask, other, mk: MemKind, rid=None):
        if mask is not None and mask.all():
            mask = None
        fast = self._fast(addr, mask, mk, rid)
        if fast is not None:
            _, tv, idx = fast
            raw = tv.take(idx)
        else:
            raw = np.zeros(addr.shape, mk.mem)
            flat = raw.reshape(-1)
            for _, tv, lanes, idx in self._groups(addr, mask, mk, "reads", rid):
                flat[lanes] = tv.take(idx)
        val = raw if mk.to_carrier is None else mk.to_carrier(raw)
        if mask is not None:
            val = np.where(mask, val, mk.zero if other is None else other)
        return val

    @staticmethod
    def raw_of(val, addr: np.ndarray, mk: MemKind) -> np.ndarray:
        """The bits a store writes: `val` converted to the memory dtype, shaped like `addr`."""
        raw = val if mk.to_mem is None else mk.to_mem(val)
        raw = np.asarray(raw, mk.mem)
        if raw.shape != addr.shape:
            raw = np.broadcast_to(raw, addr.shape)
        return raw

    def store(self, addr: np.ndarray, val, mask, mk: MemKind, rid=None):
        raw = self.raw_of(val, addr, mk)
        if mask is not None:
            if mask.all():
                mask = None
            elif np.shape(mask) != addr.shape:
                mask = np.broadcast_to(mask, addr.shape)
        fast = self._fast(addr, mask, mk, rid)
        if fast is not None:
            reg, tv, idx = fast
            self._writable(reg)
            if mask is None:
                tv[idx] = raw
            else:
                tv[idx[mask]] = raw[mask]
            return
        flat = raw.reshape(-1)
        for reg, tv, lanes, idx in self._groups(addr, mask, mk, "writes", rid):
            self._writable(reg)
            tv[idx] = flat[lanes]

    @staticmethod
    def _writable(reg: Region):
        if not reg.writable:
            raise Fault(f"writes to argument '{reg.name}', whose buffer is read-only")

    # -- atomics -----------------------------------------------------------------------------
    def _atomic_lanes(self, addr, mask, mk, rid=None):
        """[(region, typed array, active lane indices (flat, in lane order), element indices)]."""
        if mask is not None and np.shape(mask) != addr.shape:
            mask = np.broadcast_to(mask, addr.shape)
        fast = self._fast(addr, mask, mk, rid)
        if fast is not None:  # (aligned: _fast checks alignment whenever it is not guaranteed)
            reg, tv, idx = fast
            self._writable(reg)
            idx = idx.reshape(-1)
            if mask is None:
                return [(reg, tv, np.arange(idx.shape[0]), idx)]
            lanes = np.flatnonzero(mask)
            return [(reg, tv, lanes, idx[lanes])]
        groups = self._groups(addr, mask, mk, "atomically accesses", rid)
        for g in groups:
            self._writable(g[0])
        return groups

    def atomic_rmw(self, kind: str, addr: np.ndarray, val, mask, mk: MemKind, combine, need_old=True, at=None,
                   rid=None):
        """Apply `combine(old, val)` lane by lane (lanes act in order); return the old values.

        `at`: (ufunc, dtype) such that `ufunc.at(memory.view(dtype), idx, val)` does the same update
        on the memory directly; used when the old values are not needed."""
        val = np.broadcast_to(np.asarray(val, mk.carrier), addr.shape).reshape(-1)
        old = np.zeros(addr.size, mk.carrier) if need_old else None
        for _, tv, lanes, idx in self._atomic_lanes(addr, mask, mk, rid):
            v = val[lanes]
            n = idx.shape[0]
            if n == 0:
                continue
            if not need_old and at is not None:
                uf, dt = at
                uf.at(tv if dt is None else tv.view(dt), idx, v if dt is None else v.view(dt))
                continue
            order = np.argsort(idx, kind="stable")
            si = idx[order]
            dup = np.empty(n, bool)
            dup[0] = False
            np.equal(si[1:], si[:-1], out=dup[1:])
            cur = tv[idx]
            cur = cur if mk.to_carrier is None else mk.to_carrier(cur)
            if not dup.any():
                if need_old:
                    old[lanes] = cur
                new = combine(cur, v)
                tv[idx] = new if mk.to_mem is None else mk.to_mem(new)
                continue
            # Several lanes hit one address: a segmented scan over the lanes of each address, in order.
            sv, init = v[order], cur[order]
            start = ~dup
            end = np.empty(n, bool)
            end[-1] = True
            end[:-1] = start[1:]
            if kind == "xchg":
                prev = np.empty_like(sv)
                prev[1:] = sv[:-1]
                prev[0] = sv[0]
                old_sorted = np.where(start, init, prev)
                final = sv
            elif kind == "add" and sv.dtype.kind in "iu":
                csum = np.cumsum(sv, dtype=sv.dtype)  # wraps, so the differences below are exact
                excl = csum - sv
                base = excl[np.flatnonzero(start)][np.cumsum(start) - 1]
                old_sorted = init + (excl - base)
                final = init + (csum - base)
            else:
                inc = sv
                d = 1
                while d < n:
                    same = si[d:] == si[:-d]
                    comb = combine(inc[:-d], inc[d:])
                    nxt = inc.copy()
                    nxt[d:] = np.where(same, comb, inc[d:])
                    inc = nxt
                    d *= 2
                prev = np.empty_like(inc)
                prev[1:] = inc[:-1]
                prev[0] = inc[0]
                old_sorted = np.where(start, init, combine(init, prev))
                final = combine(init, inc)
            if need_old:
                o = np.empty_like(old_sorted)
                o[order] = old_sorted
                old[lanes] = o
            fv = final[end]
            tv[si[end]] = fv if mk.to_mem is None else mk.to_mem(fv)
        return None if old is None else old.reshape(addr.shape)

    def atomic_cas(self, addr: np.ndarray, cmp, val, mk: MemKind, rid=None):
        cmp = np.broadcast_to(np.asarray(cmp, mk.carrier), addr.shape).reshape(-1)
        val = np.broadcast_to(np.asarray(val, mk.carrier), addr.shape).reshape(-1)
        cmp_raw = cmp if mk.to_mem is None else mk.to_mem(cmp)
        val_raw = val if mk.to_mem is None else mk.to_mem(val)
        bits = np.dtype(f"u{mk.isz}")
        old = np.zeros(addr.size, mk.mem)
        for _, tv, lanes, idx in self._atomic_lanes(addr, None, mk, rid):
            n = idx.shape[0]
            c, v = np.asarray(cmp_raw[lanes], mk.mem), np.asarray(val_raw[lanes], mk.mem)
            if n <= 1 or np.unique(idx).shape[0] == n:
                cur = tv[idx]
                old[lanes] = cur
                hit = cur.view(bits) == c.view(bits)
                tv[idx[hit]] = v[hit]
                continue
            tvb = tv.view(bits) if tv.dtype != bits else tv
            cb, vb = c.view(bits), v
            for j in range(n):  # duplicates: lanes act one after another
                k = idx[j]
                cur = tv[k]
                old[lanes[j]] = cur
                if tvb[k] == cb[j]:
                    tv[k] = vb[j]
        res = old if mk.to_carrier is None else mk.to_carrier(old)
        return res.reshape(addr.shape)
