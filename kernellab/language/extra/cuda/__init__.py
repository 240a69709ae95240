"""`tl.extra.cuda`: CUDA-specific language extras (Triton's module path)."""
from ....compiler.types import float8e4b15 as _e4b15
from ....compiler.types import float16 as _f16
from ....compiler.types import float32 as _f32
from ....compiler.types import int32 as _int32
from ....compiler.types import int64 as _int64
from ...core import builtin as _builtin  # noqa: E402
from ...core import constexpr as _constexpr
from ...core import unwrap as _unwrap
from . import libdevice  # noqa: F401


@_builtin
def gdc_wait(_sem=None):
    """Wait until the grid this one depends on has finished and its memory is visible (programmatic dependent
    launch, `launch_pdl=True`; PTX griddepcontrol.wait on sm_90+). Without PDL the previous grid has finished
    before this one starts, so it returns at once; before sm_90 it compiles to nothing."""
    _sem.emit("tt.grid_dependency", [], None, {"kind": "wait"})


@_builtin
def gdc_launch_dependents(_sem=None):
    """Let the next grid launched with `launch_pdl=True` start while this one finishes (griddepcontrol.
    launch_dependents on sm_90+). It orders no memory: the dependent's gdc_wait does that."""
    _sem.emit("tt.grid_dependency", [], None, {"kind": "launch_dependents"})


@_builtin
def globaltimer(_sem=None):
    """The GPU's global nanosecond timer (PTX `%globaltimer`), as an int64. GPU only; not pure, so two
    readings stay two."""
    return _sem.inline_asm("mov.u64 $0, %globaltimer;", "=l", [], [_int64], False, 1)[0]


@_builtin
def smid(_sem=None):
    """The index of the SM running this program (PTX `%smid`), as an int32. GPU only."""
    return _sem.inline_asm("mov.u32 $0, %smid;", "=r", [], [_int32], True, 1)[0]


@_builtin
def num_warps(_sem=None):
    """The launch's `num_warps`, as a constexpr (so `tl.arange(0, num_threads())` works). It is read when the
    kernel is traced; the compile cache keys on the launch options, so each num_warps gets its own compile."""
    return _constexpr(int(_sem.options.get("num_warps", 4)))


@_builtin
def num_threads(_sem=None):
    """Threads per program: the launch's `num_warps` times the warp size (32), as a constexpr."""
    return _constexpr(32 * int(_sem.options.get("num_warps", 4)))


def _convert_custom_float8(arg, dst_ty, _sem):
    """Triton's software conversion for fp8e4b15: from e4b15 up to fp16 (then fp32 if asked), or from fp16/fp32
    down to e4b15. kernellab's casts to and from e4b15 already follow that conversion (compiler/fp8.py), so
    this is a cast with Triton's argument checks."""
    x = _sem.to_tensor(arg)
    dst = _unwrap(dst_ty)
    dst = getattr(dst, "scalar", dst)
    if x.type.scalar == _e4b15:
        return _sem.cast(_sem.cast(x, _f16), _f32) if dst == _f32 else _sem.cast(x, _f16)
    if x.type.scalar not in (_f16, _f32):
        raise TypeError(f"convert_custom_float8 converts fp8e4b15 <-> fp16/fp32, got {x.type.scalar.name}")
    return _sem.cast(x, _e4b15)


@_builtin
def convert_custom_float8_sm80(arg, dst_ty, fp_downcast_rounding=None, _sem=None):
    """fp8e4b15 <-> fp16/fp32 as Triton converts it on sm_80+ (see _convert_custom_float8)."""
    return _convert_custom_float8(arg, dst_ty, _sem)


@_builtin
def convert_custom_float8_sm70(arg, dst_ty, fp_downcast_rounding=None, _sem=None):
    """fp8e4b15 <-> fp16/fp32 as Triton converts it on sm_70 (same values as on sm_80: NaN clamps to 1.75)."""
    return _convert_custom_float8(arg, dst_ty, _sem)
