"""TMA tensor maps made at launch: evaluate a kernel's recipes on the launch's arguments, encode with
``cuTensorMapEncodeTiled`` and cache the 128-byte results.

The compiler records, for every ``ttg.tensormap`` of a kernel, a recipe among the kernel's argument kinds
(``{"tensormap": {...}}``, see codegen/lower_tma.py): which argument is the base pointer, which arguments (or
constants) are the tensor's extents and row stride (contiguous dim first, in elements), the box (one swizzle
span by the tile's rows), the swizzle width in bytes and the element type. The map itself depends on the
launch's values, so the launcher makes it per launch, from a cache keyed by everything that goes into it:
encoding costs tens of microseconds through the Python bindings, a dict lookup does not.

TMA is only compiled where the argument specialization proves the base and the row stride are multiples of
16 bytes (a launch that breaks that gets another specialization, compiled with cp.async), so the alignment
check here is a guard against a broken invariant, not the fallback.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Sequence

from ..errors import LaunchError

TENSORMAP_BYTES = 128
# element bytes and the driver's data type per tile element type (fp8 travels as bytes: TMA only copies)
_ELEM_TYPES = {"f16": (2, "FLOAT16"), "bf16": (2, "BFLOAT16"), "f32": (4, "FLOAT32"), "f64": (8, "FLOAT64"),
               "i8": (1, "UINT8"), "u8": (1, "UINT8"), "i16": (2, "UINT16"), "u16": (2, "UINT16"),
               "i32": (4, "INT32"), "u32": (4, "UINT32"), "i64": (8, "INT64"), "u64": (8, "UINT64")}


def _elem(dtype: str) -> tuple:
    if dtype.startswith("f8"):
        return 1, "UINT8"
    return _ELEM_TYPES[dtype]


_CACHE: dict = {}
_CACHE_LIMIT = 4096


def _value(ref, args) -> int:
    kind, x = ref[0], ref[1]
    if kind == "const":
        return int(x)
    if kind in ("muli", "addi"):  # [op, bits, a, b]: the kernel's integer arithmetic, wrapping at `bits`
        a, b = _value(ref[2], args), _value(ref[3], args)
        r = (a * b if kind == "muli" else a + b) % (1 << x)
        return r - (1 << x) if r >= 1 << (x - 1) else r
    return int(args[x])


def _address(a) -> int:
    if a.__class__ is int:
        return a
    dp = getattr(a, "data_ptr", None)
    return dp() if dp is not None else int(a)


def evaluate(recipe: dict, args: Sequence[Any]) -> tuple:
    """(dtype, address, dims, byte strides, box, swizzle) of a recipe on one launch's arguments: the key of
    the cache and everything the encoder needs."""
    esize = _elem(recipe["dtype"])[0]
    dims = tuple(_value(r, args) for r in recipe["dims"])
    strides = tuple(_value(r, args) * esize for r in recipe["strides"])
    return (recipe["dtype"], _address(args[recipe["base"]]), dims, strides, tuple(recipe["box"]),
            int(recipe["swizzle"]))


def check(key: tuple, kernel: str) -> None:
    """The conditions cuTensorMapEncodeTiled puts on a 2-D tiled map (LaunchError naming the kernel)."""
    _, address, dims, strides, box, swizzle = key
    if address % 16:
        raise LaunchError(f"kernel '{kernel}': a TMA operand's base address {address:#x} is not 16-byte aligned")
    for s in strides:
        if s % 16 or not 0 < s < 1 << 40:
            raise LaunchError(f"kernel '{kernel}': a TMA operand's row stride of {s} bytes is not a positive "
                              f"multiple of 16 below 2^40")
    for d in dims:
        if not 0 <= d <= 1 << 32:
            raise LaunchError(f"kernel '{kernel}': a TMA operand's extent {d} is outside 0 .. 2^32")
    if any(not 0 < b <= 256 for b in box) or box[0] * _elem(key[0])[0] > swizzle:
        raise LaunchError(f"kernel '{kernel}': TMA box {box} does not fit swizzle {swizzle}")


def encode_with_driver(key: tuple) -> bytes:
    """The 128-byte CUtensorMap for `key`, made by the CUDA driver."""
    from cuda.bindings import driver as drv

    dtype, address, dims, strides, box, swizzle = key
    dt = getattr(drv.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _elem(dtype)[1])
    sw = {128: drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B, 64: drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
          32: drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B}[swizzle]
    err, tmap = drv.cuTensorMapEncodeTiled(
        dt, len(dims), address, [drv.cuuint64_t(d) for d in dims], [drv.cuuint64_t(s) for s in strides],
        [drv.cuuint32_t(b) for b in box], [drv.cuuint32_t(1)] * len(dims),
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err:
        raise LaunchError(f"cuTensorMapEncodeTiled failed ({err}) for dims {dims}, strides {strides}, box {box}")
    return ctypes.string_at(tmap.getPtr(), TENSORMAP_BYTES)


def tensormap(key: tuple, kernel: str, encode: Callable[[tuple], bytes] | None = None) -> bytes:
    """The encoded map for `key`, from the cache or newly encoded. An empty tensor (a zero extent) gets
    zeros: the driver refuses to describe it (in a matmul a zero M or N launches no program and a zero K runs
    no iteration, so the map is never read)."""
    blob = _CACHE.get(key)
    if blob is None:
        check(key, kernel)
        if 0 in key[2]:
            blob = bytes(TENSORMAP_BYTES)
        else:
            blob = (encode or encode_with_driver)(key)
            if len(blob) != TENSORMAP_BYTES:
                raise LaunchError(f"kernel '{kernel}': a tensor map must be {TENSORMAP_BYTES} bytes")
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = blob
    return blob


class TensorMapSlots:
    """Parameter storage for a kernel's tensor maps: 128 bytes each, 64-byte aligned (a CUtensorMap's
    alignment), refilled from the cache at every launch."""

    def __init__(self, recipes: Sequence[dict], kernel: str, encode: Callable[[tuple], bytes] | None = None):
        self.recipes, self.kernel, self.encode = list(recipes), kernel, encode
        n = len(self.recipes)
        self._raw = (ctypes.c_uint8 * (TENSORMAP_BYTES * max(n, 1) + 64))()
        base = (ctypes.addressof(self._raw) + 63) // 64 * 64
        self.addresses = [base + TENSORMAP_BYTES * i for i in range(n)]

    def fill(self, args: Sequence[Any]) -> None:
        for recipe, address in zip(self.recipes, self.addresses):
            ctypes.memmove(address, tensormap(evaluate(recipe, args), self.kernel, self.encode), TENSORMAP_BYTES)

    def contents(self, i: int) -> bytes:
        return ctypes.string_at(self.addresses[i], TENSORMAP_BYTES)
