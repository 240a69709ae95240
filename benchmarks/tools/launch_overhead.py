"""Host cost of a warm kernel launch, on the CPU (no GPU needed): µs per `kernel[grid](...)` for kernels of 3, 12,
24 and 45 arguments (tensors, ints, floats, constexprs, None, a host TensorDescriptor) and for an autotuned kernel
after tuning.

Why: launch-bound library cases (tiny shapes) are timed back to back, so every microsecond of Python between the
call and cuLaunchKernel shows. Here the tensors are stand-ins that say they are CUDA tensors and the driver call is
a stub (`fake_gpu()`), so what is timed is binding, the specialization key, the cache lookup, the grid, argument
packing and `LoadedKernel.launch` up to (not including) cuLaunchKernel itself.

    PYTHONPATH=. python benchmarks/tools/launch_overhead.py [--iters 20000]

`fake_gpu()` and `make_kernel(n)` are also used by tests/test_launch_fast_path.py.
"""
from __future__ import annotations

import argparse
import contextlib
import time

import torch

import kernellab
import kernellab.language as tl
from kernellab.runtime import jit as _jit
from kernellab.runtime.driver import LoadedKernel

_PROPS = {"max_grid_dims": (2**31 - 1, 65535, 65535), "cc": (9, 0), "max_threads_per_block": 1024, "warp_size": 32,
          "max_shared_per_block_optin": 227 * 1024}


class FakeCudaTensor:
    """What the launch path reads of a CUDA tensor (is_cuda, dtype, data_ptr, device), with no memory behind it."""

    __slots__ = ("dtype", "_ptr", "shape")
    is_cuda = True
    device = torch.device("cuda", 0)

    def __init__(self, dtype=torch.float32, ptr=0x7F0000000000, shape=(1024,)):
        self.dtype, self._ptr, self.shape = dtype, ptr, tuple(shape)

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return 0

    def stride(self, i=None):
        s = [1] * len(self.shape)
        for j in range(len(self.shape) - 2, -1, -1):
            s[j] = s[j + 1] * self.shape[j + 1]
        return s if i is None else s[i]


def _kind(v):
    if hasattr(v, "data_ptr"):
        return "ptr"
    if isinstance(v, bool):
        return "i1"
    if isinstance(v, int):
        return "i32" if -2**31 <= v < 2**31 else "i64" if v < 2**63 else "u64"
    return "f32"


_RECORD: list = [None, None]  # [the list launches are recorded in (or None), the LoadedKernel launching]


def _stub_launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    """cuLaunchKernel's stand-in: records (grid x, y, z, packed argument bytes) when asked."""
    if _RECORD[0] is not None:
        _RECORD[0].append((gx, gy, gz, _RECORD[1].packer.as_bytes()))
    return (0,)


@contextlib.contextmanager
def fake_gpu(launches: list | None = None):
    """Launches of FakeCudaTensors go through the GPU launch path with a stub cuLaunchKernel; each launch appends
    (grid x, y, z, packed argument bytes) to `launches` when given. FakeCudaTensor plays torch.Tensor for the
    fast path's exact-type check."""
    saved = (list(_jit._TENSOR_TYPE), list(_jit._STREAM_FN), _jit.JITFunction._run_gpu, LoadedKernel.launch)
    orig_launch = LoadedKernel.launch

    def run_gpu(self, ck, grid, runtime_values, pdl=False):
        if ck._loaded is None:
            ck._loaded = LoadedKernel(ck.name, "F", [_kind(v) for v in runtime_values], device_index=0,
                                      props=_PROPS, attributes={}, launch_fn=_stub_launch)
        ck._loaded.launch(grid, ck.num_warps, ck.shared, 0, runtime_values, pdl)
        return ck

    def launch(self, *a, **k):
        _RECORD[1] = self
        return orig_launch(self, *a, **k)

    _jit._TENSOR_TYPE[:] = [FakeCudaTensor]
    _jit._STREAM_FN[:] = [lambda device: 0]
    _jit.JITFunction._run_gpu = run_gpu
    if launches is not None:
        LoadedKernel.launch = launch
        _RECORD[0] = launches
    try:
        yield
    finally:
        _jit._TENSOR_TYPE[:], _jit._STREAM_FN[:] = saved[0], saved[1]
        _jit.JITFunction._run_gpu, LoadedKernel.launch = saved[2], saved[3]
        _RECORD[0] = _RECORD[1] = None


def make_kernel(n: int, autotuned: bool = False):
    """A kernel of `n` parameters (n >= 3): (its JITFunction or Autotuner, positional arguments, keyword arguments).
    The mix: about 40% tensors, 25% ints, 10% floats, a None, constexprs by keyword and, from 12 parameters on,
    a host TensorDescriptor."""
    from kernellab.tools.tensor_descriptor import TensorDescriptor

    params, body, args, kwargs = ["out", "x"], [], [FakeCudaTensor(), FakeCudaTensor(ptr=0x7F0000100000)], {}
    n_const = 1 if n < 12 else max(2, n // 8)
    i = 0
    while len(params) < n - n_const:
        slot = i % 8
        name = f"a{i}"
        if n >= 12 and i == 3:
            params.append(f"d{i}")
            d = FakeCudaTensor(ptr=0x7F0000200000, shape=(64, 64))
            args.append(TensorDescriptor(d, [64, 64], [64, 1], [16, 16]))
            body.append(f"    acc += tl.sum(d{i}.load([0, 0]))")
        elif slot in (0, 3, 6):
            params.append(name)
            args.append(FakeCudaTensor(ptr=0x7F0000300000 + 4096 * i))
            body.append(f"    acc += tl.load({name} + offs)")
        elif slot in (1, 4):
            params.append(name)
            args.append(1024 + 16 * i)
            body.append(f"    acc += {name}")
        elif slot == 2:
            params.append(name)
            args.append(0.5 + i)
            body.append(f"    acc += {name}")
        elif slot == 5 and n >= 12:
            params.append(name)
            args.append(None)
            body.append(f"    if {name} is not None:\n        acc += tl.load({name} + offs)")
        else:
            params.append(name)
            args.append(7 + 16 * i)
            body.append(f"    acc += {name} * 2")
        i += 1
    consts = ["BLOCK"] + [f"C{j}" for j in range(n_const - 1)]
    for j, c in enumerate(consts):
        kwargs[c] = 128 if c == "BLOCK" else j % 3
        if c != "BLOCK":
            body.append(f"    acc += {c}")
    sig = ", ".join(params + [f"{c}: tl.constexpr" for c in consts])
    src = (f"def k{n}({sig}):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
           f"    acc = tl.load(x + offs)\n" + "\n".join(body) + "\n    tl.store(out + offs, acc)\n")
    env = {"tl": tl}
    exec(compile(src, f"<launch_overhead k{n}>", "exec"), env)
    fn = kernellab.jit(env[f"k{n}"])
    if autotuned:
        del kwargs["BLOCK"]
        key = [p for p, a in zip(params, args) if type(a) is int][:2]
        fn = kernellab.autotune([kernellab.Config({"BLOCK": 64}, num_warps=2), kernellab.Config({"BLOCK": 128})],
                                key=key, do_bench=lambda f, **_: (f(), 1.0)[1])(fn)
    return fn, args, kwargs


def time_launch(fn, args, kwargs, iters: int, repeat: int = 5) -> float:
    """Best-of-`repeat` µs per warm launch (the first launch compiles and is not timed)."""
    launcher = fn[(4,)]
    launcher(*args, **kwargs)
    launcher(*args, **kwargs)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(iters):
            launcher(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return best / iters * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--profile", type=int, default=0, help="cProfile the warm launch of a kernel of this many args")
    a = p.parse_args()
    with fake_gpu():
        if a.profile:
            import cProfile
            import pstats

            fn, args, kwargs = make_kernel(a.profile)
            launcher = fn[(4,)]
            launcher(*args, **kwargs)
            cProfile.runctx("for _ in range(20000): launcher(*args, **kwargs)", globals(), locals(), "/tmp/lo.prof")
            pstats.Stats("/tmp/lo.prof").sort_stats("tottime").print_stats(15)
            return
        for n in (3, 12, 24, 45):
            fn, args, kwargs = make_kernel(n)
            print(f"{n:3d} args: {time_launch(fn, args, kwargs, a.iters):7.2f} us/launch")
        fn, args, kwargs = make_kernel(12, autotuned=True)
        print(f"autotuned 12 args: {time_launch(fn, args, kwargs, a.iters):7.2f} us/launch")
        fn, args, kwargs = make_kernel(12)
        print(f"12 args, lambda grid: {time_launch_grid(fn, args, kwargs, a.iters):7.2f} us/launch")


def time_launch_grid(fn, args, kwargs, iters: int) -> float:
    """As time_launch, with a grid function of meta (as most libraries launch)."""
    launcher = fn[lambda meta: (triton_cdiv(1024, meta["BLOCK"]),)]
    launcher(*args, **kwargs)
    t0 = time.perf_counter()
    for _ in range(iters):
        launcher(*args, **kwargs)
    return (time.perf_counter() - t0) / iters * 1e6


def triton_cdiv(a, b):
    return (a + b - 1) // b


if __name__ == "__main__":
    main()
