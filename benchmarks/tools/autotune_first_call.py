"""The autotuner's GPU path on the CPU: a Liger op's first forward+backward (benchmarks/libraries.py) with every
autotuned kernel tuned as on a GPU (each config's warmup, its GPU build for sm_90a, a fake timing from the config's
repr), nothing launched but the kernels the host code needs (compile_time.RUN_KERNELS, on the interpreter).
Prints one JSON line: wall and CPU seconds (this process; compile workers' CPU is not in it), the compile pool's
totals, and per autotuned kernel its best config per key, the PTX hash of every built config, the deferred count
and the seconds spent in the frontends, the GPU builds and the (fake) timings.

    PYTHONPATH=.:<liger> python benchmarks/tools/autotune_first_call.py fused_moe [--size 4096,2048,1024,8,2]

A/B the compile workers: run it with KERNELLAB_COMPILE_WORKERS=0 and =auto, each with a fresh KERNELLAB_CACHE_DIR
(the script makes one unless it is set); the best configs and PTX hashes must agree.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cpu() -> float:
    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op")
    ap.add_argument("--size", help="comma-separated shape (default: the op's GPU size)")
    a = ap.parse_args(argv)
    os.environ.setdefault("KERNELLAB_CACHE_DIR", tempfile.mkdtemp(prefix="first_call_"))
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    import kernellab.compat

    kernellab.compat.install()
    import compile_time
    import libraries
    import torch

    from kernellab.compiler.codegen.target import Target
    from kernellab.runtime import autotuner as at
    from kernellab.runtime import compile_pool, jit

    target = Target(90)
    at._on_gpu = lambda args, kwargs: True
    jit.current_target = lambda: target
    spent: dict = {}

    def timed(name, what, f, *args, **kwargs):
        t = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            d = spent.setdefault(name, {})
            d[what] = round(d.get(what, 0.0) + time.perf_counter() - t, 3)

    compiles, split = at.Autotuner._compiles, at.Autotuner._split_by_shared
    at.Autotuner._compiles = lambda self, *x, **k: timed(self.__name__, "frontends_s", compiles, self, *x, **k)
    at.Autotuner._split_by_shared = lambda self, c: timed(self.__name__, "gpu_builds_s", split, self, c)

    def fake_time(self, cfg, args, kwargs, grid, named, saved):
        ck = self.fn.warmup(*args, **{**kwargs, **cfg.all_kwargs()})
        timed(self.__name__, "timing_builds_s", ck.build_gpu, target)
        return 1.0 + (zlib.crc32(repr(cfg).encode()) % 1000) / 1000

    at.Autotuner._time_config = fake_time
    run = jit.JITFunction.run
    prefixes = compile_time.RUN_KERNELS.get(a.op, ())

    def launch(self, *args, grid, **kwargs):
        if self.__name__.startswith(prefixes):
            return run(self, *args, grid=grid, **kwargs)
        ck = self.warmup(*args, **kwargs)
        ck.build_gpu(target)
        return ck

    jit.JITFunction.run = launch
    op = {o.name: o for o in libraries._ops()}[a.op]
    size = tuple(int(v) for v in a.size.split(",")) if a.size else op.sizes["gpu"]
    compile_time._cheap_inputs(libraries)
    x = libraries._to(op.build(size), torch.float32, "cpu", op.grads)
    t0, c0 = time.perf_counter(), _cpu()
    outs = op.liger(x)
    diff = [outs[i] for i in op.backprop if isinstance(outs[i], torch.Tensor) and outs[i].requires_grad]
    if diff:
        torch.autograd.backward(diff, [torch.ones_like(o) for o in diff])
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    tuned = {}
    for mod in list(sys.modules.values()):
        for name, obj in list(vars(mod).items()) if mod is not None and "liger" in mod.__name__ else ():
            if isinstance(obj, at.Autotuner) and obj.cache and name not in tuned:
                base = obj.fn
                tuned[name] = {"best": {repr(k): repr(v) for k, v in obj.cache.items()},
                               "ptx": sorted(hashlib.sha256(ck.asm["ptx"].encode()).hexdigest()[:12]
                                             for ck in base.cache.values() if "ptx" in ck.asm),
                               "deferred": len(obj.deferred_configs), **spent.get(obj.__name__, {})}
    print(json.dumps({"op": a.op, "size": size, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                      "workers": compile_pool.n_workers(), "pool": compile_pool.stats, "autotuned": tuned}))


if __name__ == "__main__":
    main()
