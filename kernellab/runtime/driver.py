"""The CUDA driver layer: device properties, loading cubins, launching kernels (``cuda.bindings.driver``).

cuda-python is imported lazily: ``import kernellab`` works without it, and :func:`driver_available` answers False
instead of raising on a machine with no driver or GPU.

Kernels are loaded into the device's *primary* context, the one PyTorch uses, so kernellab kernels and torch ops
share memory and streams. A launch is one generated ``struct.pack_into`` of the arguments into preallocated
storage (one 8-byte aligned slot per argument) behind a preallocated ``void*[]`` array, then ``cuLaunchKernel``
with that array's address: no per-launch allocation of ctypes objects.

Errors: a fault inside a kernel (illegal address, trap, failed assert ...) leaves the CUDA context unusable and
raises :class:`kernellab.errors.KernelCrashError`; launches the driver would reject (grid, block or shared memory
over the device limits) raise :class:`kernellab.errors.LaunchError` before launching.
"""
from __future__ import annotations

import ctypes
import struct
import threading
from _thread import get_ident as _get_ident
from functools import lru_cache
from typing import Any, Callable, Sequence

from ..errors import KernelCrashError, LaunchError, OutOfResources, ToolchainError

# ---------------------------------------------------------------------------------------------------------
# lazy import of cuda.bindings.driver

_drv = None
_init_lock = threading.Lock()
_init_result: str | None = None  # None: not tried; "": OK; otherwise why the driver is unusable


def _driver():
    """The ``cuda.bindings.driver`` module, cuInit done. Raises LaunchError when unusable."""
    global _drv, _init_result
    if _init_result == "":
        return _drv
    with _init_lock:
        if _init_result is None:
            try:
                from cuda.bindings import driver as drv
            except ImportError as e:
                _init_result = (f"cuda-python is not installed ({e}); `pip install cuda-python` "
                                "(or `pip install kernellab[gpu]`)")
            else:
                try:
                    err, = drv.cuInit(0)
                except Exception as e:  # libcuda.so missing: cuda-pathfinder raises its own error types
                    _init_result = f"the NVIDIA driver (libcuda) cannot be loaded: {e}"
                else:
                    if err:
                        _init_result = f"cuInit failed: {_error_name(drv, err)}"
                    else:
                        _drv, _init_result = drv, ""
    if _init_result:
        raise LaunchError(f"no usable CUDA GPU: {_init_result}")
    return _drv


def driver_available() -> bool:
    """True when cuda-python is installed, the driver initializes and at least one GPU is visible."""
    try:
        drv = _driver()
        err, count = drv.cuDeviceGetCount()
    except Exception:
        return False
    return not err and count > 0


def _error_name(drv, err) -> str:
    try:
        e1, name = drv.cuGetErrorName(err)
        e2, text = drv.cuGetErrorString(err)
        if not e1 and not e2:
            return f"{name.decode()} ({text.decode()})"
    except Exception:
        pass
    return f"CUresult {int(err)}"


# Faults that poison the context: every later CUDA call in the process fails with the same error.
_STICKY = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_ASSERT", "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_TENSOR_MEMORY_LEAK", "CUDA_ERROR_CONTEXT_IS_DESTROYED",
})
_last_launched: str | None = None  # the name of the last kernel kernellab launched, for crash reports


def _is_sticky(err) -> bool:
    return getattr(err, "name", "") in _STICKY


def _raise_for(drv, err, what: str, kernel: str | None = None):
    """Translate a failed CUresult into a kernellab exception (never returns)."""
    text = _error_name(drv, err)
    if _is_sticky(err):
        last = f" The last kernel kernellab launched was '{_last_launched}'." if _last_launched else ""
        who = f"kernel '{kernel}'" if kernel else "a kernel"
        raise KernelCrashError(
            f"{who} crashed on the GPU: {text}, reported by {what}. Kernel launches are asynchronous, so the "
            f"fault may come from an earlier launch.{last} The CUDA context is now unusable: every later CUDA "
            f"call in this process (torch included) fails, so restart the Python process / notebook kernel. "
            f"To find the bad access, run the kernel on the CPU interpreter (CPU tensors), which checks bounds, "
            f"or under compute-sanitizer.")
    prefix = f"kernel '{kernel}': " if kernel else ""
    raise LaunchError(f"{prefix}{what} failed: {text}")


def _check(result, what: str, kernel: str | None = None):
    """Unpack a cuda-bindings result tuple ``(CUresult, *outs)``; raise on error."""
    err = result[0]
    if err:
        _raise_for(_drv, err, what, kernel)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


# ---------------------------------------------------------------------------------------------------------
# devices and contexts

_DEVICE_ATTRS = {
    "sm_count": "MULTIPROCESSOR_COUNT",
    "cc_major": "COMPUTE_CAPABILITY_MAJOR",
    "cc_minor": "COMPUTE_CAPABILITY_MINOR",
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "max_block_dim_x": "MAX_BLOCK_DIM_X",
    "max_grid_dim_x": "MAX_GRID_DIM_X",
    "max_grid_dim_y": "MAX_GRID_DIM_Y",
    "max_grid_dim_z": "MAX_GRID_DIM_Z",
    "max_shared_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "max_shared_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "max_shared_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "reserved_shared_per_block": "RESERVED_SHARED_MEMORY_PER_BLOCK",
    "regs_per_block": "MAX_REGISTERS_PER_BLOCK",
    "regs_per_sm": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
    "max_blocks_per_sm": "MAX_BLOCKS_PER_MULTIPROCESSOR",
    "warp_size": "WARP_SIZE",
    "l2_cache_bytes": "L2_CACHE_SIZE",
    "clock_khz": "CLOCK_RATE",
    "memory_clock_khz": "MEMORY_CLOCK_RATE",
    "memory_bus_width_bits": "GLOBAL_MEMORY_BUS_WIDTH",
}


@lru_cache(maxsize=None)
def get_device_props(device_index: int = 0) -> dict:
    """The figures of a device that compiling and launching need (cached).

    Keys: name, cc (major, minor), sm_count, max_threads_per_block, max_block_dim_x, max_grid_dims (x, y, z),
    max_shared_per_block (without opt-in, 48 KiB), max_shared_per_block_optin, max_shared_per_sm,
    reserved_shared_per_block, regs_per_block, regs_per_sm, max_threads_per_sm, max_blocks_per_sm, warp_size,
    l2_cache_bytes, clock_khz, memory_clock_khz, memory_bus_width_bits, total_memory_bytes (an attribute the
    driver no longer reports is None).
    """
    drv = _driver()
    dev = _check(drv.cuDeviceGet(device_index), f"cuDeviceGet({device_index})")
    props: dict[str, Any] = {"device_index": device_index}
    name = _check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    props["name"] = name.split(b"\0", 1)[0].decode(errors="replace")
    for key, attr in _DEVICE_ATTRS.items():
        enum = getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{attr}", None)
        value = None
        if enum is not None:
            err, v = drv.cuDeviceGetAttribute(enum, dev)
            value = None if err else int(v)
        props[key] = value
    props["cc"] = (props.pop("cc_major"), props.pop("cc_minor"))
    props["max_grid_dims"] = (props.pop("max_grid_dim_x"), props.pop("max_grid_dim_y"), props.pop("max_grid_dim_z"))
    err, total = drv.cuDeviceTotalMem(dev)
    props["total_memory_bytes"] = None if err else int(total)
    return props


_contexts: dict[int, Any] = {}


def _primary_context(device_index: int):
    """Make sure the device's primary context exists (torch's context when torch is in use) and return it
    (retained once per device and process, never released: torch keeps using it)."""
    ctx = _contexts.get(device_index)
    if ctx is not None:
        return ctx
    drv = _driver()
    try:  # let torch create and own the primary context, so both sides agree on it
        import torch

        if torch.cuda.is_available():
            torch.cuda.init()
            with torch.cuda.device(device_index):
                torch.cuda.current_device()
    except ImportError:
        pass
    dev = _check(drv.cuDeviceGet(device_index), f"cuDeviceGet({device_index})")
    with _init_lock:
        if device_index not in _contexts:
            _contexts[device_index] = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    return _contexts[device_index]


def _current_device_index() -> int:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.current_device()
    except ImportError:
        pass
    drv = _driver()
    err, ctx = drv.cuCtxGetCurrent()
    if not err and int(ctx):
        err, dev = drv.cuCtxGetDevice()
        if not err:
            return int(dev)
    return 0


def synchronize(device_index: int | None = None) -> None:
    """Wait for the device's work; a kernel fault surfaces here as :class:`KernelCrashError`."""
    drv = _driver()
    ctx = _primary_context(_current_device_index() if device_index is None else device_index)
    _check(drv.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    try:
        _check(drv.cuCtxSynchronize(), "cuCtxSynchronize")
    finally:
        drv.cuCtxPopCurrent()


# ---------------------------------------------------------------------------------------------------------
# argument packing

# kind -> (struct code, size in bytes, converter name or None)
_KINDS: dict[str, tuple[str, int, str | None]] = {
    "ptr": ("Q", 8, "_ptr"),
    "i1": ("?", 1, None), "i8": ("b", 1, None), "u8": ("B", 1, None),
    "i16": ("h", 2, None), "u16": ("H", 2, None),
    "i32": ("i", 4, None), "u32": ("I", 4, None),
    "i64": ("q", 8, None), "u64": ("Q", 8, None),
    "f16": ("e", 2, None), "bf16": ("H", 2, "_bf16"), "f32": ("f", 4, None), "f64": ("d", 8, None),
}
_ALIASES = {"fp16": "f16", "fp32": "f32", "fp64": "f64", "int1": "i1", "bool": "i1", "int32": "i32",
            "int64": "i64", "uint32": "u32", "uint64": "u64"}
ARG_KINDS = tuple(_KINDS)
_SLOT = 8  # every argument gets an 8-byte aligned slot, enough for the natural alignment of all kinds


def normalize_kind(kind: str) -> str:
    """"ptr" for any pointer spelling ("ptr", "*fp32", "*f32"), else the canonical scalar kind."""
    if kind.startswith("*") or kind == "ptr":
        return "ptr"
    kind = _ALIASES.get(kind, kind)
    if kind not in _KINDS:
        raise LaunchError(f"unknown kernel argument kind {kind!r}; known: {', '.join(ARG_KINDS)}")
    return kind


class _NotOnGPU(Exception):
    pass


def _ptr(a) -> int:
    """A device address from a pointer argument: an int, None (null), or a tensor-like with data_ptr()
    (one with ``is_cuda == False`` is refused: its host address would crash the kernel and the context)."""
    if a.__class__ is int:
        return a
    try:
        on_gpu = a.is_cuda
    except AttributeError:
        on_gpu = None
    if on_gpu:
        return a.data_ptr()
    if on_gpu is False:
        raise _NotOnGPU
    if a is None:
        return 0
    data_ptr = getattr(a, "data_ptr", None)
    if data_ptr is not None:
        return data_ptr()
    return int(a)  # NumPy integers, cuda-bindings CUdeviceptr


def _bf16(x) -> int:
    """The bfloat16 bits of ``x``, rounded to nearest even (NaN stays a NaN)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


class ArgPacker:
    """Packs launch arguments of a fixed signature into preallocated storage.

    ``storage`` holds one 8-byte slot per argument (value in the low bytes, little endian), ``params`` is the
    ``void*[]`` array pointing at the slots, ``params_address`` its address: what ``cuLaunchKernel`` takes as
    ``kernelParams``. ``pack(args)`` overwrites the slots in place (a generated function: one tuple unpack,
    the pointer conversions, one ``struct.pack_into``). A signature entry ``{"tensormap": recipe}`` is a TMA
    tensor map the kernel takes besides the arguments: ``pack`` makes it from them (runtime/tensormap.py).
    """

    def __init__(self, signature: Sequence[str | dict], kernel: str = "kernel"):
        self.signature = tuple(k if isinstance(k, dict) else normalize_kind(k) for k in signature)
        self.scalars = tuple(k for k in self.signature if not isinstance(k, dict))
        recipes = [k["tensormap"] for k in self.signature if isinstance(k, dict) and "tensormap" in k]
        # bytes of global scratch per program (tensor maps the kernel makes): the launch fills `scratch_slot`
        self.scratch_bytes = sum(k["scratch"] for k in self.signature if isinstance(k, dict) and "scratch" in k)
        self.scratch_slot = ctypes.c_uint64(0)
        n = len(self.scalars)
        self.storage = (ctypes.c_uint64 * max(n, 1))()
        base = ctypes.addressof(self.storage)
        self.offsets = [i * _SLOT for i in range(n)]
        self.tensormaps = None
        addresses = [base + off for off in self.offsets]
        if recipes:  # parameters in signature order: scalar slots and tensor maps interleaved as declared
            from .tensormap import TensorMapSlots

            self.tensormaps = TensorMapSlots(recipes, kernel)
            slots, maps = iter(addresses), iter(self.tensormaps.addresses)
            addresses = [next(maps) if isinstance(k, dict) else next(slots) for k in self.signature
                         if not (isinstance(k, dict) and "scratch" in k)]
        if self.scratch_bytes:  # the scratch pointer is the last parameter
            addresses = addresses + [ctypes.addressof(self.scratch_slot)]
        self.params = (ctypes.c_void_p * max(len(self.signature), 1))(*addresses)
        self.params_address = ctypes.addressof(self.params)
        fmt = "<" + "".join(_KINDS[k][0] + "x" * (_SLOT - _KINDS[k][1]) for k in self.scalars)
        self._struct = struct.Struct(fmt)
        self.pack = self._generate()

    def _generate(self) -> Callable[[Sequence[Any]], None]:
        n = len(self.scalars)
        if n == 0:
            src = "def pack(args):\n    if len(args):\n        raise ValueError('too many arguments')\n"
        else:
            names = [f"a{i}" for i in range(n)]
            values = [f"{_KINDS[k][2]}({a})" if _KINDS[k][2] else a for k, a in zip(self.scalars, names)]
            src = (f"def pack(args):\n    {', '.join(names)}, = args\n"
                   f"    _pack_into(_storage, 0, {', '.join(values)})\n")
        if self.tensormaps is not None:
            src += "    _fill(args)\n"
        env = {"_pack_into": self._struct.pack_into, "_storage": self.storage, "_ptr": _ptr, "_bf16": _bf16,
               "_fill": self.tensormaps.fill if self.tensormaps is not None else None}
        # pack_raw: the same for values already converted (pointers as addresses, as the warm-launch fast path
        # passes them): one call into struct, no per-argument conversion; only where no scalar needs converting
        if not any(_KINDS[k][2] for k in self.scalars if k != "ptr"):
            tail = "    _fill(args)\n" if self.tensormaps is not None else ""
            src += f"def pack_raw(args):\n    _pack_into(_storage, 0, *args)\n{tail}" if n else \
                "def pack_raw(args):\n    pack(args)\n"
        exec(compile(src, f"<kernellab arg packer {','.join(self.scalars)}>", "exec"), env)
        self.pack_raw = env.get("pack_raw", env["pack"])
        return env["pack"]

    def as_bytes(self) -> bytes:
        """The packed slots (for tests and debugging)."""
        return bytes(self.storage)[: _SLOT * len(self.scalars)]

    def explain(self, args: Sequence[Any], kernel: str) -> LaunchError:
        """A LaunchError that says which argument does not fit its kind (called after pack failed)."""
        if len(args) != len(self.scalars):
            return LaunchError(f"kernel '{kernel}' takes {len(self.scalars)} arguments "
                               f"({', '.join(self.scalars)}), got {len(args)}")
        for i, (kind, a) in enumerate(zip(self.scalars, args)):
            code, size, conv = _KINDS[kind]
            try:
                v = globals()[conv](a) if conv else a
                struct.pack("<" + code, v)
            except _NotOnGPU:
                return LaunchError(f"kernel '{kernel}': argument {i} is a tensor on {getattr(a, 'device', 'the CPU')}"
                                   f", not on a CUDA device; move it with .cuda() (or pass only CPU tensors to run "
                                   f"on the CPU interpreter)")
            except (struct.error, TypeError, ValueError, OverflowError, AttributeError) as e:
                return LaunchError(f"kernel '{kernel}': argument {i} = {a!r} does not fit kind {kind!r} ({e})")
        if self.tensormaps is not None:
            try:
                self.tensormaps.fill(args)
            except LaunchError as e:
                return e
        return LaunchError(f"kernel '{kernel}': cannot pack arguments {args!r}")


# ---------------------------------------------------------------------------------------------------------
# loading and launching

_FUNC_ATTRS = {
    "n_regs": "NUM_REGS",
    "local_bytes": "LOCAL_SIZE_BYTES",
    "static_shared_bytes": "SHARED_SIZE_BYTES",
    "const_bytes": "CONST_SIZE_BYTES",
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "ptx_version": "PTX_VERSION",
    "binary_version": "BINARY_VERSION",
}


class LoadedKernel:
    """A kernel function loaded on one device, ready to launch with a fixed argument signature.

    ``attributes`` holds what the driver reports for the function (n_regs, local_bytes, static_shared_bytes,
    const_bytes, max_threads_per_block, ptx_version, binary_version). Launching from several threads is safe:
    each thread packs into storage of its own. Built by :func:`load_kernel`; tests build one directly with a
    fake ``launch_fn`` (same signature as ``cuLaunchKernel``, returning a tuple whose first item is 0 on success).
    """

    def __init__(self, name: str, function, signature: Sequence[str], *, device_index: int, props: dict,
                 attributes: dict, module=None, launch_fn: Callable | None = None, dynamic_shared_limit: int = 0,
                 launch_ex_fn: Callable | None = None):
        self.name = name
        self.function = function
        self.module = module
        self.device_index = device_index
        self.attributes = attributes  # n_regs, local_bytes, static_shared_bytes ... from cuFuncGetAttribute
        self.packer = ArgPacker(signature, name)
        self.signature = self.packer.signature
        self._params_address = self.packer.params_address
        # The packed slots are shared state between pack and cuLaunchKernel (the driver copies them at the
        # call): the first thread to launch owns self.packer, other threads get packers of their own.
        self._owner_thread: int | None = None
        self._thread_packers: dict[int, ArgPacker] = {}
        self._lock = threading.Lock()
        self._pack = self.packer.pack
        self._pack_raw = self.packer.pack_raw
        self._launch_fn = launch_fn
        self._launch_ex = launch_ex_fn  # cuLaunchKernelEx, for programmatic dependent launches
        self._max_grid = tuple(props["max_grid_dims"])
        self.cc_major = (props.get("cc") or (0, 0))[0]
        static = attributes.get("static_shared_bytes") or 0
        optin = props.get("max_shared_per_block_optin") or props.get("max_shared_per_block") or 48 * 1024
        self.max_dynamic_shared = optin - static  # the device limit for this kernel's dynamic shared memory
        self._dynamic_shared_limit = dynamic_shared_limit  # what the function is currently opted in to
        max_threads = min(props.get("max_threads_per_block") or 1024,
                          attributes.get("max_threads_per_block") or 1024)
        self.max_num_warps = max_threads // (props.get("warp_size") or 32)

    def __repr__(self) -> str:
        return f"LoadedKernel({self.name!r}, device={self.device_index}, signature={list(self.signature)})"

    def launch(self, grid: Sequence[int], num_warps: int, shared: int, stream: int, args: Sequence[Any],
               pdl: bool = False, raw: bool = False) -> None:
        """Launch on ``stream`` (a CUstream handle as an int, e.g. ``torch.cuda.current_stream().cuda_stream``;
        0 = the legacy default stream) with ``num_warps * 32`` threads per block and ``shared`` bytes of dynamic
        shared memory. A grid with a zero dimension launches nothing. ``pdl``: a programmatic dependent launch
        (sm_90+): the grid may start before the previous one on the stream has finished; its gdc_wait waits.
        ``raw``: every pointer in ``args`` is already an address (an int), so packing converts nothing."""
        global _last_launched
        try:
            n = len(grid)
            gx = grid[0]
            gy = grid[1] if n > 1 else 1
            gz = grid[2] if n > 2 else 1
        except (TypeError, IndexError, KeyError):
            raise self._grid_error(grid) from None
        mx, my, mz = self._max_grid
        if not (0 < gx <= mx and 0 < gy <= my and 0 < gz <= mz and n <= 3):
            if n <= 3 and 0 <= gx and 0 <= gy and 0 <= gz and (gx == 0 or gy == 0 or gz == 0):
                return
            raise self._grid_error(grid)
        if not 0 < num_warps <= self.max_num_warps:
            raise self._warps_error(num_warps)
        if shared > self._dynamic_shared_limit:
            self._opt_in_shared(shared)
        if _get_ident() == self._owner_thread:
            pack, params = self._pack_raw if raw else self._pack, self._params_address
        else:
            packer = self._packer_for_thread()
            pack, params = packer.pack_raw if raw else packer.pack, packer.params_address
        try:
            pack(args)
        except Exception:
            raise self.packer.explain(args, self.name) from None
        scratch = None
        if self.packer.scratch_bytes:  # held until the launch is queued (stream-ordered reuse after that)
            scratch = self._scratch(gx * gy * gz, stream, params)  # noqa: F841
        _last_launched = self.name
        try:
            if pdl:
                err = self._launch_dependent(gx, gy, gz, 32 * num_warps, shared, stream, params)
            else:
                err = self._launch_fn(self.function, gx, gy, gz, 32 * num_warps, 1, 1, shared, stream, params, 0)[0]
        except (TypeError, OverflowError, ValueError) as e:
            raise LaunchError(f"kernel '{self.name}': bad launch parameters grid={tuple(grid)}, "
                              f"num_warps={num_warps!r}, shared={shared!r}, stream={stream!r}: {e}") from None
        if err:
            self._launch_failed(err, (gx, gy, gz, num_warps, shared, stream, params))

    def _scratch(self, programs: int, stream: int, params: int):
        """Global scratch for a launch of `programs` programs, its address written into the packer that owns
        `params`; returns the object that owns the memory."""
        from .scratch import allocate

        packer = self.packer if params == self._params_address else self._thread_packers[_get_ident()]
        buf, address = allocate(programs * packer.scratch_bytes, self.device_index, stream)
        packer.scratch_slot.value = address
        return buf

    def warm_launcher(self, num_warps: int, shared: int, pdl: bool = False) -> Callable:
        """``go(grid, stream, args)``: ``launch(grid, num_warps, shared, stream, args, pdl, raw=True)`` with what
        does not change between launches of one specialization (the warps and shared memory checks, the shared
        memory opt-in) done once, here: the warm-launch fast path's launch. Anything unusual (a grid out of range
        or with a zero, another thread, pdl) goes through ``launch`` itself."""
        if not 0 < num_warps <= self.max_num_warps:
            raise self._warps_error(num_warps)
        if shared > self._dynamic_shared_limit:
            self._opt_in_shared(shared)
        launch = self.launch
        if pdl or self.packer.scratch_bytes:  # scratch is sized by the grid: the full launch path
            return lambda grid, stream, args: launch(grid, num_warps, shared, stream, args, pdl, True)
        mx, my, mz = self._max_grid
        threads, function, name, params = 32 * num_warps, self.function, self.name, self._params_address
        pack, explain = self._pack_raw, self.packer.explain

        def go(grid, stream, args):
            global _last_launched
            if grid.__class__ is not tuple or self._owner_thread != _get_ident():
                return launch(grid, num_warps, shared, stream, args, False, True)
            n = len(grid)
            if n == 3:
                gx, gy, gz = grid
            elif n == 1:
                gx, gy, gz = grid[0], 1, 1
            elif n == 2:
                gx, gy, gz = grid[0], grid[1], 1
            else:
                return launch(grid, num_warps, shared, stream, args, False, True)
            if not (0 < gx <= mx and 0 < gy <= my and 0 < gz <= mz):
                return launch(grid, num_warps, shared, stream, args, False, True)
            try:
                pack(args)
            except Exception:
                raise explain(args, name) from None
            _last_launched = name
            try:
                err = self._launch_fn(function, gx, gy, gz, threads, 1, 1, shared, stream, params, 0)[0]
            except (TypeError, OverflowError, ValueError) as e:
                raise LaunchError(f"kernel '{name}': bad launch parameters grid={tuple(grid)}, "
                                  f"num_warps={num_warps!r}, shared={shared!r}, stream={stream!r}: {e}") from None
            if err:
                self._launch_failed(err, (gx, gy, gz, num_warps, shared, stream, params))

        return go

    # -- slow paths ------------------------------------------------------------------------------------------

    def _launch_dependent(self, gx, gy, gz, threads, shared, stream, params):
        """cuLaunchKernelEx with programmatic stream serialization allowed (what Triton's `launch_pdl=True` asks).
        Where the device (before sm_90) or a test's fake launcher has no such launch, a plain launch is the same
        program: the grid then starts after the previous one, and gdc_wait has nothing to wait for."""
        if self._launch_ex is None or self.cc_major < 9:
            return self._launch_fn(self.function, gx, gy, gz, threads, 1, 1, shared, stream, params, 0)[0]
        drv = _driver()
        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = gx, gy, gz
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
        cfg.sharedMemBytes = shared
        cfg.hStream = drv.CUstream(stream)
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        cfg.attrs = [attr]
        cfg.numAttrs = 1
        return self._launch_ex(cfg, self.function, params, 0)[0]

    def _packer_for_thread(self) -> ArgPacker:
        tid = _get_ident()
        with self._lock:
            if self._owner_thread is None:
                self._owner_thread = tid
                return self.packer
            packer = self._thread_packers.get(tid)
            if packer is None:
                packer = self._thread_packers[tid] = ArgPacker(self.signature, self.name)
            return packer

    def _launch_failed(self, err, launch: tuple) -> None:
        drv = _driver()
        if getattr(err, "name", "") in ("CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_INVALID_HANDLE"):
            # No context current on this thread (torch has not used the GPU from it yet): make this kernel's
            # device current, as torch.cuda.set_device would. Another device's context is current: launch inside
            # a push/pop of ours, leaving the caller's current device alone. Either way, retry once.
            ctx = _primary_context(self.device_index)
            current = _check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent", self.name)
            gx, gy, gz, num_warps, shared, stream, params = launch
            if not int(current):
                _check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", self.name)
                err = self._launch_fn(self.function, gx, gy, gz, 32 * num_warps, 1, 1, shared, stream,
                                      params, 0)[0]
            else:
                _check(drv.cuCtxPushCurrent(ctx), "cuCtxPushCurrent", self.name)
                try:
                    err = self._launch_fn(self.function, gx, gy, gz, 32 * num_warps, 1, 1, shared, stream,
                                          params, 0)[0]
                finally:
                    drv.cuCtxPopCurrent()
            if not err:
                return
        if getattr(err, "name", "") == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES":
            raise LaunchError(f"kernel '{self.name}': not enough registers or shared memory for "
                              f"{launch[3]} warps per block ({self.attributes.get('n_regs')} registers per thread, "
                              f"{launch[4]} bytes of dynamic shared memory); use fewer warps")
        _raise_for(drv, err, "cuLaunchKernel", self.name)

    def _grid_error(self, grid) -> LaunchError:
        if not isinstance(grid, (tuple, list)):
            return LaunchError(f"kernel '{self.name}': the grid must be a tuple of 1 to 3 ints, got {grid!r}")
        if len(grid) > 3 or len(grid) == 0:
            return LaunchError(f"kernel '{self.name}': a grid has 1 to 3 dimensions, got {tuple(grid)}")
        for axis, (g, limit) in enumerate(zip(grid, self._max_grid)):
            if not isinstance(g, int):
                return LaunchError(f"kernel '{self.name}': grid dimension {axis} must be an int, got {g!r}")
            if g < 0:
                return LaunchError(f"kernel '{self.name}': grid dimension {axis} is negative ({g})")
            if g > limit:
                return LaunchError(f"kernel '{self.name}': grid dimension {axis} is {g}, over the device limit "
                                   f"of {limit} (grid {tuple(grid)}, limits {self._max_grid}); use bigger blocks "
                                   f"or put the large dimension on axis 0")
        return LaunchError(f"kernel '{self.name}': bad grid {tuple(grid)}")

    def _warps_error(self, num_warps) -> LaunchError:
        regs = self.attributes.get("n_regs")
        why = f" (it uses {regs} registers per thread)" if regs else ""
        return LaunchError(f"kernel '{self.name}': num_warps={num_warps} is out of range; this kernel can run at "
                           f"most {self.max_num_warps} warps per block on this device{why}")

    def _opt_in_shared(self, shared: int) -> None:
        if shared > self.max_dynamic_shared:
            static = self.attributes.get("static_shared_bytes") or 0
            raise OutOfResources(f"kernel '{self.name}' needs {shared + static} bytes of shared memory per block "
                              f"({shared} dynamic + {static} static); the device allows "
                              f"{self.max_dynamic_shared + static}. Use smaller blocks or fewer pipeline stages "
                              f"(num_stages).")
        if self.module is not None:  # a real function: raise its opt-in limit (needed above 48 KiB)
            drv = _driver()
            _check(drv.cuFuncSetAttribute(
                self.function, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", self.name)
        self._dynamic_shared_limit = shared

    def close(self) -> None:
        """Unload the module (the kernel cannot be launched afterwards)."""
        if self.module is not None:
            drv = _driver()
            drv.cuModuleUnload(self.module)
            self.module = None


def load_kernel(cubin: bytes, name: str, shared_bytes: int = 0, signature: Sequence[str] = (),
                device_index: int | None = None) -> LoadedKernel:
    """Load ``cubin`` (or NUL-terminated PTX, JIT-compiled by the driver) into the primary context of
    ``device_index`` (torch's current device by default) and return the kernel ``name`` ready to launch with
    arguments of the kinds in ``signature`` ("ptr", "i1", "i8" .. "i64", "u8" .. "u64", "f16", "bf16", "f32",
    "f64"). ``shared_bytes`` of dynamic shared memory are opted in now (above 48 KiB this is required);
    LaunchError if the device cannot give them."""
    drv = _driver()
    if device_index is None:
        device_index = _current_device_index()
    props = get_device_props(device_index)
    ctx = _primary_context(device_index)
    _check(drv.cuCtxPushCurrent(ctx), "cuCtxPushCurrent", name)
    try:
        try:
            module = _check(drv.cuModuleLoadData(cubin), "cuModuleLoadData", name)
        except LaunchError as e:
            raise ToolchainError(f"{e}. The cubin was built for a different GPU or with a newer toolchain than "
                                 f"the driver supports (device: {props['name']}, sm_{props['cc'][0]}"
                                 f"{props['cc'][1]}).") from None
        function = _check(drv.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name!r})", name)
        attributes = {}
        for key, attr in _FUNC_ATTRS.items():
            err, value = drv.cuFuncGetAttribute(getattr(drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{attr}"),
                                                function)
            attributes[key] = None if err else int(value)
        kernel = LoadedKernel(name, function, signature, device_index=device_index, props=props,
                              attributes=attributes, module=module, launch_fn=drv.cuLaunchKernel,
                              launch_ex_fn=getattr(drv, "cuLaunchKernelEx", None),
                              dynamic_shared_limit=(props.get("max_shared_per_block") or 48 * 1024)
                              - (attributes.get("static_shared_bytes") or 0))
        if shared_bytes > kernel._dynamic_shared_limit:
            kernel._opt_in_shared(shared_bytes)
    finally:
        drv.cuCtxPopCurrent()
    return kernel
