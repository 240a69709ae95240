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


_RECORD: list = [None]  # the list launches are recorded in, or None


def _stub_launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    """cuLaunchKernel's stand-in (`fn`: the LoadedKernel itself): records (grid x, y, z, packed argument bytes)
    when asked."""
    if _RECORD[0] is not None:
        _RECORD[0].append((gx, gy, gz, fn.packer.as_bytes()))
    return (0,)


@contextlib.contextmanager
def fake_gpu(launches: list | None = None):
    """Launches of FakeCudaTensors go through the GPU launch path with a stub cuLaunchKernel; each launch appends
    (grid x, y, z, packed argument bytes) to `launches` when given. FakeCudaTensor plays torch.Tensor for the
    fast path's exact-type check."""
    saved = (list(_jit._TENSOR_TYPE), list(_jit._STREAM_FN), _jit.JITFunction._run_gpu)

    def run_gpu(self, ck, grid, runtime_values, pdl=False):
        if ck._loaded is None:
            ck._loaded = LoadedKernel(ck.name, None, [_kind(v) for v in runtime_values], device_index=0,
                                      props=_PROPS, attributes={}, launch_fn=_stub_launch)
            ck._loaded.function = ck._loaded
        ck._loaded.launch(grid, ck.num_warps, ck.shared, 0, runtime_values, pdl)
        return ck

    _jit._TENSOR_TYPE[:] = [FakeCudaTensor]
    _jit._STREAM_FN[:] = [lambda device: 0]
    _jit.JITFunction._run_gpu = run_gpu
    _RECORD[0] = launches
    try:
        yield
    finally:
        _jit._TENSOR_TYPE[:], _jit._STREAM_FN[:] = saved[0], saved[1]
        _jit.JITFunction._run_gpu = saved[2]
        _RECORD[0] = None


SIZES = (3, 12, 24, 45)
AUTOTUNED = 12  # the autotuned case: a kernel of this many parameters, BLOCK tuned over two configs


def kernel_spec(n: int):
    """A kernel of `n` parameters (n >= 3) as (source lines of its body, parameter names, argument specs, constexpr
    keyword arguments). The mix: about 40% tensors, 25% ints, 10% floats, a None, constexprs by keyword and, from
    12 parameters on, a host TensorDescriptor. An argument spec: ("t", i) a tensor, ("d",) a descriptor, ("i", v),
    ("f", v), ("none",)."""
    params, body, specs, kwargs = ["out", "x"], [], [("t", 0), ("t", 1)], {}
    n_const = 1 if n < 12 else max(2, n // 8)
    i = 0
    while len(params) < n - n_const:
        slot = i % 8
        name = f"a{i}"
        if n >= 12 and i == 3:
            name = f"d{i}"
            specs.append(("d",))
            body.append(f"    acc += tl.sum(tl.sum({name}.load([0, 0]), axis=1), axis=0)")
        elif slot in (0, 3, 6):
            specs.append(("t", i + 2))
            body.append(f"    acc += tl.load({name} + offs)")
        elif slot in (1, 4):
            specs.append(("i", 1024 + 16 * i))
            body.append(f"    acc += {name}")
        elif slot == 2:
            specs.append(("f", 0.5 + i))
            body.append(f"    acc += {name}")
        elif slot == 5 and n >= 12:
            specs.append(("none",))
            body.append(f"    if {name} is not None:\n        acc += tl.load({name} + offs)")
        else:
            specs.append(("i", 7 + 16 * i))
            body.append(f"    acc += {name} * 2")
        params.append(name)
        i += 1
    consts = ["BLOCK"] + [f"C{j}" for j in range(n_const - 1)]
    for j, c in enumerate(consts):
        kwargs[c] = 128 if c == "BLOCK" else j % 3
        if c != "BLOCK":
            body.append(f"    acc += {c}")
    return body, params + [f"{c}: tl.constexpr" for c in consts], specs, kwargs


def kernels_module(framework: str = "kernellab") -> str:
    """A module's text defining k3, k12, ... and the autotuned `tuned` for `framework` ("kernellab" or "triton"):
    the same source for both, so the timings compare launch paths."""
    lines = [f"import {framework}", f"import {framework}.language as tl", ""]
    for n in SIZES:
        body, params, _, _ = kernel_spec(n)
        lines += [f"@{framework}.jit", f"def k{n}({', '.join(params)}):",
                  "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "    acc = tl.load(x + offs)", *body,
                  "    tl.store(out + offs, acc)", ""]
    _, params, specs, _ = kernel_spec(AUTOTUNED)
    key = [p for p, s in zip(params, specs) if s[0] == "i"][:2]
    bench = ", do_bench=BENCH" if framework == "kernellab" else ""
    lines += [f"tuned = {framework}.autotune([{framework}.Config({{'BLOCK': 64}}, num_warps=2), "
              f"{framework}.Config({{'BLOCK': 128}})], key={key!r}{bench})(k{AUTOTUNED})", ""]
    return "\n".join(lines)


def load_kernels(framework: str = "kernellab", bench=None):
    """Import `kernels_module(framework)` from a file (both compilers read a kernel's source from its file)."""
    import importlib.util
    import os
    import tempfile

    d = tempfile.mkdtemp(prefix="launch_overhead_")
    path = os.path.join(d, f"lo_kernels_{framework}.py")
    text = kernels_module(framework)
    if framework == "kernellab":  # the autotuner's benchmarker, handed over through builtins
        text = "import builtins\nBENCH = builtins._LO_BENCH\n" + text
    with open(path, "w") as f:
        f.write(text)
    import builtins

    builtins._LO_BENCH = bench
    spec = importlib.util.spec_from_file_location(f"lo_kernels_{framework}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_args(n: int, tensor, descriptor, tuned: bool = False):
    """(positional arguments, keyword arguments) for kernel k`n` (the autotuned one without BLOCK): `tensor(i)` makes
    the i-th tensor, `descriptor()` the host TensorDescriptor."""
    _, _, specs, kwargs = kernel_spec(n)
    args = []
    for s in specs:
        args.append(tensor(s[1]) if s[0] == "t" else descriptor() if s[0] == "d" else None if s[0] == "none" else s[1])
    if tuned:
        kwargs = {k: v for k, v in kwargs.items() if k != "BLOCK"}
    return args, kwargs


def time_launch(launcher, args, kwargs, iters: int, repeat: int = 5, sync=None) -> float:
    """Best-of-`repeat` µs per warm launch (the first launches compile and are not timed); `sync` (e.g.
    torch.cuda.synchronize) is called before the clock starts and before it stops."""
    for _ in range(3):
        launcher(*args, **kwargs)
    best = float("inf")
    for _ in range(repeat):
        if sync:
            sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            launcher(*args, **kwargs)
        if sync:
            sync()
        best = min(best, time.perf_counter() - t0)
    return best / iters * 1e6


def _fake_args(n, tuned=False):
    from kernellab.tools.tensor_descriptor import TensorDescriptor

    return make_args(n, lambda i: FakeCudaTensor(ptr=0x7F0000000000 + 0x100000 * i),
                     lambda: TensorDescriptor(FakeCudaTensor(ptr=0x7F0010000000, shape=(64, 64)), [64, 64], [64, 1],
                                              [16, 16]), tuned)


def cpu_main(a):
    """The host path on the CPU: stand-in CUDA tensors, a stub cuLaunchKernel."""
    with fake_gpu():
        mod = load_kernels("kernellab", bench=lambda f, **_: (f(), 1.0)[1])
        if a.profile:
            import cProfile
            import pstats

            args, kwargs = _fake_args(a.profile)
            launcher = getattr(mod, f"k{a.profile}")[(4,)]
            launcher(*args, **kwargs)
            cProfile.runctx("for _ in range(20000): launcher(*args, **kwargs)", globals(), locals(), "/tmp/lo.prof")
            pstats.Stats("/tmp/lo.prof").sort_stats("tottime").print_stats(15)
            return
        for n in SIZES:
            args, kwargs = _fake_args(n)
            print(f"{n:3d} args: {time_launch(getattr(mod, f'k{n}')[(4,)], args, kwargs, a.iters):7.2f} us/launch")
        args, kwargs = _fake_args(AUTOTUNED, tuned=True)
        print(f"autotuned {AUTOTUNED} args: {time_launch(mod.tuned[(4,)], args, kwargs, a.iters):7.2f} us/launch")
        args, kwargs = _fake_args(AUTOTUNED)
        grid = getattr(mod, f"k{AUTOTUNED}")[lambda meta: ((1024 + meta["BLOCK"] - 1) // meta["BLOCK"],)]
        print(f"{AUTOTUNED} args, grid function: {time_launch(grid, args, kwargs, a.iters):7.2f} us/launch")


def gpu_main(a):
    """Back-to-back launches on a GPU, kernellab and Triton on the same kernels, plus kernellab's split: its host
    path with the driver call stubbed, and the bare cuda-python cuLaunchKernel call."""
    import kernellab.tools.tensor_descriptor as kl_td

    pool = [torch.randn(1024, device="cuda") for _ in range(64)]
    base = torch.randn(64, 64, device="cuda")
    sync = torch.cuda.synchronize
    rows = []
    frameworks = ["kernellab"] + ([] if a.no_triton else ["triton"])
    for fw in frameworks:
        if fw == "triton":
            try:
                import triton.tools.tensor_descriptor as td

                mod = load_kernels("triton")
                desc = lambda: td.TensorDescriptor(base, [64, 64], [64, 1], [16, 16])  # noqa: E731
            except Exception as e:
                print(f"triton: not available ({type(e).__name__}: {e})")
                continue
        else:
            from kernellab.testing import do_bench

            mod = load_kernels("kernellab", bench=do_bench)
            desc = lambda: kl_td.TensorDescriptor(base, [64, 64], [64, 1], [16, 16])  # noqa: E731
        for n in SIZES:
            args, kwargs = make_args(n, lambda i: pool[i], desc)
            try:
                us = time_launch(getattr(mod, f"k{n}")[(4,)], args, kwargs, a.iters, sync=sync)
            except Exception as e:
                us = float("nan")
                print(f"{fw} k{n}: {type(e).__name__}: {str(e)[:200]}")
            rows.append((fw, f"{n} args", us))
        args, kwargs = make_args(AUTOTUNED, lambda i: pool[i], desc, tuned=True)
        try:
            us = time_launch(mod.tuned[(4,)], args, kwargs, a.iters, sync=sync)
        except Exception as e:
            us = float("nan")
            print(f"{fw} tuned: {type(e).__name__}: {str(e)[:200]}")
        rows.append((fw, f"autotuned {AUTOTUNED} args", us))
        if fw == "kernellab":
            for n in SIZES:  # the split: host path without the driver, and the driver call alone
                k = getattr(mod, f"k{n}")
                args, kwargs = make_args(n, lambda i: pool[i], desc)
                ck = k[(4,)](*args, **kwargs)
                ld = ck._loaded
                real = ld._launch_fn
                ld._launch_fn = lambda *x: (0,)
                try:
                    host = time_launch(k[(4,)], args, kwargs, a.iters)
                finally:
                    ld._launch_fn = real
                stream = torch.cuda.current_stream().cuda_stream
                call = (ld.function, 4, 1, 1, 32 * (ck.launch_warps or ck.num_warps), 1, 1, ck.shared, stream,
                        ld._params_address, 0)
                drv = time_launch(lambda: real(*call), (), {}, a.iters, sync=sync)
                rows.append(("kernellab", f"{n} args: host path, driver stubbed", host))
                rows.append(("kernellab", f"{n} args: cuLaunchKernel alone", drv))
                try:  # the same call with the stream as a CUstream object (cuda-python converts an int per call)
                    from cuda.bindings import driver as cudrv

                    call_obj = call[:8] + (cudrv.CUstream(stream),) + call[9:]
                    rows.append(("kernellab", f"{n} args: cuLaunchKernel, CUstream object",
                                 time_launch(lambda: real(*call_obj), (), {}, a.iters, sync=sync)))
                except Exception as e:
                    print(f"CUstream variant: {type(e).__name__}: {e}")
                try:  # the driver entry point through ctypes, for comparison with cuda-python's binding
                    import ctypes

                    cu = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
                    cu.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
                    cu.restype = ctypes.c_int
                    call_ct = (int(ld.function),) + call[1:10] + (None,)
                    rows.append(("kernellab", f"{n} args: cuLaunchKernel via ctypes",
                                 time_launch(lambda: cu(*call_ct), (), {}, a.iters, sync=sync)))
                except Exception as e:
                    print(f"ctypes variant: {type(e).__name__}: {e}")
    print(f"{'compiler':<10} {'case':<40} us/launch (back to back, {torch.cuda.get_device_name()})")
    for fw, case, us in rows:
        print(f"{fw:<10} {case:<40} {us:8.2f}")
    if not a.no_triton:
        tri = {case: us for fw, case, us in rows if fw == "triton"}
        for fw, case, us in rows:
            if fw == "kernellab" and case in tri:
                print(f"ratio kernellab/triton {case:<30} {us / tri[case]:6.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--profile", type=int, default=0, help="cProfile the warm launch of a kernel of this many args")
    p.add_argument("--gpu", action="store_true", help="real launches on a GPU, against Triton's")
    p.add_argument("--no-triton", action="store_true", help="with --gpu: kernellab only")
    a = p.parse_args()
    if a.gpu:
        gpu_main(a)
    else:
        cpu_main(a)


if __name__ == "__main__":
    main()
