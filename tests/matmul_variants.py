"""What the tests of a dot kernel's launch-time variants share (split-K: tests/test_split_k.py, persistent:
tests/test_make_persistent.py, the launch cache's codegen knobs: tests/test_codegen_env.py): the tutorial matmul's
launch over a 1-D grid and its runtime arguments, fresh operands with edge values into a NaN-poisoned output, a
kernel's latest variant state, and benchmarks/tools/launch_overhead.py (its stub GPU: FakeCudaTensor, fake_gpu)."""
from __future__ import annotations

import functools

import torch

import kernellab as kl


def launch(kernel, a, b, c, block=(16, 32, 16), group_m=2, **options):
    """The tutorial matmul `kernel` over (cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N),) programs; returns what the launch
    returns (the CompiledKernel)."""
    M, N = a.shape[0], b.shape[1]
    bm, bn, bk = block
    grid = (kl.cdiv(M, bm) * kl.cdiv(N, bn),)
    return kernel[grid](*args(a, b, c), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m, **options)


def args(a, b, c) -> list:
    """The tutorial matmul's runtime arguments, in its parameters' order (what a variant's trip count reads)."""
    (M, K), N = a.shape, b.shape[1]
    return [a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)]


def operands(M, N, K, dtype=torch.float16, out=torch.float32, device="cpu", seed=0):
    """a (M x K), b (K x N) uniform in [-1, 1) with the range's extremes in a corner each, c (M x N) all NaN (an
    element the kernel does not write shows)."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.rand(M, K, generator=g) * 2 - 1)
    b = (torch.rand(K, N, generator=g) * 2 - 1)
    if K:
        a[0, 0], b[-1, -1] = 1.0, -1.0
    a, b = a.to(dtype).to(device), b.to(dtype).to(device)
    c = torch.full((M, N), float("nan"), dtype=out, device=device)
    return a, b, c


def state(kernel, slot: str):
    """The variant state kept under `slot` ("_split_state", "_persistent_state") of `kernel`'s latest compiled
    specialization that has one."""
    states = [ck.__dict__[slot] for ck in kernel.cache.values() if ck.__dict__.get(slot) is not None]
    assert states, f"no {slot} on any specialization"
    return states[-1]


@functools.cache
def launch_overhead_tool():
    """benchmarks/tools/launch_overhead.py as a module (benchmarks/ is no package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "tools" / "launch_overhead.py"
    spec = importlib.util.spec_from_file_location("launch_overhead_for_variant_tests", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def stub_variants(monkeypatch, sms: int = 132) -> list:
    """For launches under launch_overhead's fake_gpu (stand-in CUDA tensors, a stub driver): a GPU of `sms` SMs
    holding one program of a variant each, variants compiled (tile IR) but not built for a GPU (the persistent
    build fused its loops), split-K's workspace and counters stand-ins at 0x7F0000100000 and 0x7F0000200000. Returns
    the list the variants' warm launches are recorded in: ("p" persistent | "s" split-K, grid, number of
    arguments, last argument)."""
    from kernellab.runtime import persistent, split_k

    fake = launch_overhead_tool().FakeCudaTensor
    warm = []
    for cls, tag in ((persistent.PersistentState, "p"), (split_k.SplitState, "s")):
        build = cls.get_variant
        monkeypatch.setattr(cls, "_sms", lambda self, device: sms)
        monkeypatch.setattr(cls, "get_variant", lambda self, on_gpu=False, build=build: build(self, False))
        monkeypatch.setattr(cls, "variant_launcher", lambda self, tag=tag: (
            lambda grid, stream, args: warm.append((tag, grid, len(args), args[-1]))))
    monkeypatch.setattr(persistent.PersistentState, "slots", lambda self, on_gpu, device=0: sms)
    monkeypatch.setattr(persistent.PersistentState, "fused", lambda self: True)
    monkeypatch.setattr(persistent.PersistentState, "fewer_blocks_per_sm", lambda self: False)
    monkeypatch.setattr(split_k.SplitState, "buffers", lambda self, s, g, device=None, stream=0: (
        fake(torch.float32, ptr=0x7F0000100000), fake(torch.int32, ptr=0x7F0000200000)))
    return warm


def launch_fake(kernel, M, N, K, block=(128, 256, 64), **options):
    """`launch` over launch_overhead's stand-in CUDA tensors (fp16 a: M x K, b: K x N, c: M x N; for fake_gpu), the
    benchmark's config (128x256x64, 8 warps, 3 stages) unless told otherwise."""
    fake = launch_overhead_tool().FakeCudaTensor
    a, b, c = fake(torch.float16, shape=(M, K)), fake(torch.float16, shape=(K, N)), fake(torch.float16, shape=(M, N))
    return launch(kernel, a, b, c, block=block, **{"num_warps": 8, "num_stages": 3, **options})
