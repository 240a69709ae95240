"""Memory for the CPU interpreter: argument buffers, synthetic addresses, checked loads/stores/atomics.

Every pointer argument k gets a synthetic base address ``((k + 1) << 40) + (real_ptr % 256)``, so a
pointer value is a plain int64 and its region is ``addr >> 40``. A region is the whole underlying
storage of the user's tensor/array as a writable uint8 NumPy array (no copy), so loads and stores
land in the user's memory and pointer arithmetic may reach anywhere in that storage.

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

class Region:
    """One pointer argument's underlying storage."""

    def __init__(self, rid: int, name: str, buf: np.ndarray, byte_offset: int, real_ptr: int,
                 numel: int, elem_size: int, desc: str, owner):
        self.rid, self.name, self.buf, self.byte_offset = rid, name, buf, byte_offset
        self.nbytes = int(buf.shape[0])
        self.base_addr = (rid << _REGION_SHIFT) + (real_ptr % 256)  # the argument's pointer value
        self.origin = self.base_addr - byte_offset  # address of storage byte 0
        self.numel, self.elem_size, self.desc = numel, elem_size, desc
        self.owner = owner  # keeps the user's object alive while we hold raw memory
        self.views: dict = {}
        self.writable = bool(buf.flags.writeable)

    def view(self, mk: MemKind) -> np.ndarray:
        v = self.views.get(mk.mem)
        if v is None:
            n = self.nbytes - self.nbytes % mk.isz
            v = self.views[mk.mem] = self.buf[:n].view(mk.mem)
        return v

    def describe_offset(self, addr: int) -> str:
        off = addr - self.base_addr
        if off % self.elem_size == 0:
            where = f"element offset {off // self.elem_size}"
        else:
            where = f"byte offset {off}"
        size = f"{self.desc} of {self.numel} elements"
        storage = self.nbytes // self.elem_size
        if storage != self.numel:
            size += f" in a storage of {storage} elements"
        return f"{where} of argument '{self.name}' ({size})"


def _raw_bytes(addr: int, nbytes: int, writable: bool) -> np.ndarray:
    if nbytes <= 0:
        return np.zeros(0, np.uint8)
    arr = np.frombuffer((ctypes.c_uint8 * nbytes).from_address(addr), dtype=np.uint8)
    if not writable:
        arr.flags.writeable = False
    return arr


def region_for(rid: int, name: str, obj) -> Region:
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
        return Region(rid, name, buf, ptr - lo, ptr, int(obj.size), obj.dtype.itemsize,
                      f"{obj.dtype} array", obj)
    if type(obj).__module__.startswith("torch") and hasattr(obj, "untyped_storage"):
        if obj.device.type != "cpu":
            raise TypeError(f"argument '{name}' is a {obj.device.type} tensor; the CPU interpreter needs CPU tensors")
        st = obj.untyped_storage()
        lo, n = st.data_ptr(), st.nbytes()
        ptr = obj.data_ptr()
        buf = _raw_bytes(lo, n, True)
        return Region(rid, name, buf, ptr - lo, ptr, obj.numel(), obj.element_size(),
                      f"{str(obj.dtype).replace('torch.', '')} tensor", obj)
    raise TypeError(f"argument '{name}' must be a torch CPU tensor or a NumPy array, got {type(obj).__name__}")


# ---------------------------------------------------------------------------------------------
# The memory of one launch

class Memory:
    def __init__(self, regions: list, check_align: bool = True):
        self.regions = [None] + list(regions)  # index = region id
        # False when every pointer provably stays aligned (no int->ptr / pointer casts / loaded
        # pointers in the module, and every argument's base aligned for its element type).
        self.check_align = check_align

    # -- address resolution ------------------------------------------------------------------
    def _fast(self, addr: np.ndarray, mask, mk: MemKind):
        """(region, element index array) when every active lane is aligned inside the region of
        lane 0; masked-off lanes get index 0. None when the general path is needed."""
        rid = addr.item(0) >> _REGION_SHIFT
        regs = self.regions
        if rid <= 0 or rid >= len(regs):
            if mask is None or not mask.any():
                return None
            rid = addr.item(int(np.argmax(mask))) >> _REGION_SHIFT  # lane 0 is masked off
            if rid <= 0 or rid >= len(regs):
                return None
        reg = regs[rid]
        pos = np.subtract(addr, reg.origin)
        if mask is not None:
            pos = np.where(mask, pos, 0)
        lim = reg.nbytes - mk.isz
        if lim < 0 or _umax(pos.view(_U64), axis=None) > lim:
            return None
        if mk.isz > 1:
            if self.check_align and _bor(pos, axis=None) & (mk.isz - 1):
                return None
            pos >>= mk.shift
        return reg, pos

    def _groups(self, addr: np.ndarray, act: np.ndarray | None, mk: MemKind, verb: str):
        """General path: check every active lane; return [(region, lane indices, byte positions)]."""
        a = np.ascontiguousarray(addr).reshape(-1)
        n = a.shape[0]
        act = np.ones(n, bool) if act is None else np.broadcast_to(act, addr.shape).reshape(-1)
        rids = a >> _REGION_SHIFT
        ok = np.zeros(n, bool)
        groups = []
        for rid in np.unique(rids[act]).tolist():
            if 0 < rid < len(self.regions):
                reg = self.regions[rid]
                sel = act & (rids == rid)
                pos = a - reg.origin
                good = sel & (pos >= 0) & (pos <= reg.nbytes - mk.isz)
                ok |= good
                lanes = np.nonzero(good)[0]
                if lanes.size:
                    groups.append((reg, lanes, pos[lanes]))
        bad = act & ~ok
        if bad.any():
            lane = int(np.argmax(bad))
            bad_addr = int(a[lane])
            rid = bad_addr >> _REGION_SHIFT
            if 0 < rid < len(self.regions):
                what = self.regions[rid].describe_offset(bad_addr)
            elif bad_addr == 0:
                what = "a null pointer"
            else:
                what = f"address {bad_addr:#x}, which is not inside any argument's buffer"
            idx = [int(i) for i in np.unravel_index(lane, addr.shape)] if addr.ndim else []
            at = f" at tile index {idx}" if addr.size > 1 else ""
            nbad = int(bad.sum())
            more = f" ({nbad} of {n} lanes bad)" if nbad > 1 else ""
            raise Fault(f"{verb} out of bounds: {what}{at}{more}; mask the access or fix the offsets")
        return groups

    # -- loads and stores --------------------------------------------------------------------
    def load(self, addr: np.ndarray, mask, other, mk: MemKind):
        if mask is not None and mask.all():
            mask = None
        fast = self._fast(addr, mask, mk)
        if fast is not None:
            reg, idx = fast
            raw = reg.view(mk).take(idx)
        else:
            raw = np.zeros(addr.shape, mk.mem)
            flat = raw.reshape(-1)
            for reg, lanes, pos in self._groups(addr, mask, mk, "reads"):
                flat[lanes] = self._gather(reg, pos, mk)
        val = raw if mk.to_carrier is None else mk.to_carrier(raw)
        if mask is not None:
            val = np.where(mask, val, mk.zero if other is None else other)
        return val

    @staticmethod
    def _gather(reg: Region, pos: np.ndarray, mk: MemKind):
        if mk.isz == 1 or not (np.bitwise_or.reduce(pos) & (mk.isz - 1)):
            return reg.view(mk).take(pos >> mk.shift)
        b = reg.buf[pos[:, None] + np.arange(mk.isz)]
        return np.ascontiguousarray(b).view(mk.mem).reshape(-1)

    def store(self, addr: np.ndarray, val, mask, mk: MemKind):
        raw = val if mk.to_mem is None else mk.to_mem(val)
        raw = np.asarray(raw, mk.mem)
        if raw.shape != addr.shape:
            raw = np.broadcast_to(raw, addr.shape)
        if mask is not None:
            if mask.all():
                mask = None
            elif np.shape(mask) != addr.shape:
                mask = np.broadcast_to(mask, addr.shape)
        fast = self._fast(addr, mask, mk)
        if fast is not None:
            reg, idx = fast
            self._writable(reg)
            tv = reg.view(mk)
            if mask is None:
                tv[idx] = raw
            else:
                tv[idx[mask]] = raw[mask]
            return
        flat = raw.reshape(-1)
        for reg, lanes, pos in self._groups(addr, mask, mk, "writes"):
            self._writable(reg)
            v = flat[lanes]
            if mk.isz == 1 or not (np.bitwise_or.reduce(pos) & (mk.isz - 1)):
                reg.view(mk)[pos >> mk.shift] = v
            else:
                reg.buf[pos[:, None] + np.arange(mk.isz)] = np.ascontiguousarray(v).view(np.uint8).reshape(-1, mk.isz)

    @staticmethod
    def _writable(reg: Region):
        if not reg.writable:
            raise Fault(f"writes to argument '{reg.name}', whose buffer is read-only")

    # -- atomics -----------------------------------------------------------------------------
    def _atomic_lanes(self, addr, mask, mk):
        """[(region, active lane indices (flat, in lane order), element indices)]."""
        if mask is not None and np.shape(mask) != addr.shape:
            mask = np.broadcast_to(mask, addr.shape)
        fast = self._fast(addr, mask, mk)
        if fast is not None:  # (aligned: _fast checks alignment whenever it is not guaranteed)
            reg, idx = fast
            self._writable(reg)
            idx = idx.reshape(-1)
            if mask is None:
                return [(reg, np.arange(idx.shape[0]), idx)]
            lanes = np.flatnonzero(mask)
            return [(reg, lanes, idx[lanes])]
        groups = self._groups(addr, mask, mk, "atomically accesses")
        out = []
        for reg, lanes, pos in groups:
            if mk.isz > 1 and (np.bitwise_or.reduce(pos) & (mk.isz - 1)):
                raise Fault(f"misaligned atomic access to argument '{reg.name}'")
            self._writable(reg)
            out.append((reg, lanes, pos >> mk.shift))
        return out

    def atomic_rmw(self, kind: str, addr: np.ndarray, val, mask, mk: MemKind, combine, need_old=True, at=None):
        """Apply `combine(old, val)` lane by lane (lanes act in order); return the old values.

        `at`: (ufunc, dtype) such that `ufunc.at(memory.view(dtype), idx, val)` does the same update
        on the memory directly; used when the old values are not needed."""
        val = np.broadcast_to(np.asarray(val, mk.carrier), addr.shape).reshape(-1)
        old = np.zeros(addr.size, mk.carrier) if need_old else None
        for reg, lanes, idx in self._atomic_lanes(addr, mask, mk):
            tv = reg.view(mk)
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

    def atomic_cas(self, addr: np.ndarray, cmp, val, mk: MemKind):
        cmp = np.broadcast_to(np.asarray(cmp, mk.carrier), addr.shape).reshape(-1)
        val = np.broadcast_to(np.asarray(val, mk.carrier), addr.shape).reshape(-1)
        cmp_raw = cmp if mk.to_mem is None else mk.to_mem(cmp)
        val_raw = val if mk.to_mem is None else mk.to_mem(val)
        bits = np.dtype(f"u{mk.isz}")
        old = np.zeros(addr.size, mk.mem)
        for reg, lanes, idx in self._atomic_lanes(addr, None, mk):
            tv = reg.view(mk)
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
