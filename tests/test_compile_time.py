"""Compile time of large tiles stays bounded (issue 14; benchmarks/compile_time.py measures the library kernels).

LLVM 22's straight-line strength reduction (SLSR), run inside the NVPTX code generator, compares every address
off a pointer with every earlier one: Liger's group_norm (512 gathered weights per thread) spent 8.5 s there.
Kernels with more than SLSR_MAX_ADDRESSES_PER_POINTER addresses off one pointer now run the code generator in a
child process with SLSR off (llvm_to_ptx); the others keep it in process, unchanged. Checked: which path a
kernel takes, that the child's PTX equals a whole process with SLSR off, and LLVM's time at N and 4N elements
per thread (best of two against the noise of a shared machine; quadratic growth approaches 16x)."""
from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402
from kernellab.compiler.codegen.llvm_to_ptx import (  # noqa: E402
    SLSR_MAX_ADDRESSES_PER_POINTER,
    compile_llvm,
    slsr_mode,
)
from kernellab.compiler.codegen.target import Target  # noqa: E402


@kl.jit
def gather_scale(X, W, Y, n, per_channel, BLOCK: tl.constexpr):
    """group_norm's shape: each element scaled by a weight gathered through a runtime division."""
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m)
    w = tl.load(W + offs // per_channel, mask=m)
    tl.store(Y + offs, x * w, mask=m)


def _llir(block: int) -> tuple[str, str]:
    """The kernel's LLVM IR at BLOCK elements over 4 warps (GPU stages up to PTX, no ptxas, no disk cache)."""
    from kernellab.compiler.backend import compile_to_cubin
    from kernellab.compiler.gpu.options import GpuOptions
    from kernellab.compiler.parser import parse_module

    x = torch.empty(block)
    ck = gather_scale.warmup(x, x, x, 4096, 7, BLOCK=block, num_warps=4, grid=(1,))
    out = compile_to_cubin(parse_module(ck.asm["tile"]), ck.trace, GpuOptions(num_warps=4), Target(90),
                           assemble=False)
    return out["llir"], ck.name


def _llvm_seconds(block: int) -> float:
    llir, name = _llir(block)
    best = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        compile_llvm(llir, Target(90), name)
        best = min(best, time.perf_counter() - t)
    return best


def test_slsr_mode(monkeypatch):
    monkeypatch.delenv("KERNELLAB_LLVM_SLSR", raising=False)
    assert slsr_mode() == "pairs"
    for mode in ("on", "off", "auto"):
        monkeypatch.setenv("KERNELLAB_LLVM_SLSR", mode)
        assert slsr_mode() == mode


@pytest.mark.skipif(slsr_mode() not in ("auto", "pairs"), reason="KERNELLAB_LLVM_SLSR is set for this process")
def test_slsr_runs_unless_a_pointer_has_too_many_addresses(tmp_path):
    import os
    import subprocess
    import sys

    llir, name = _llir(8192)  # 64 gathered weights per thread
    small = compile_llvm(llir, Target(90), name)
    assert small.slsr and small.max_addresses_per_pointer == 64
    llir, name = _llir(32768)  # 256
    large = compile_llvm(llir, Target(90), name)
    assert not large.slsr and large.max_addresses_per_pointer == 256
    assert SLSR_MAX_ADDRESSES_PER_POINTER < 256
    # the child's code generator is the one of a process where SLSR is off, on the same IR
    (tmp_path / "k.ll").write_text(llir)
    code = ("import sys; from kernellab.compiler.codegen.llvm_to_ptx import compile_llvm; "
            "from kernellab.compiler.codegen.target import Target; "
            f"sys.stdout.write(compile_llvm(open({str(tmp_path / 'k.ll')!r}).read(), Target(90), {name!r}).ptx)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                         env={**os.environ, "KERNELLAB_LLVM_SLSR": "off", "PYTHONPATH": root}).stdout
    assert off == large.ptx


def test_llvm_time_is_linear_in_elements_per_thread():
    small = _llvm_seconds(8192)  # 64 elements per thread
    large = _llvm_seconds(32768)  # 256 (SLSR in process: 0.5 s -> 3.5 s; in the child: 0.05 s -> 0.2 s)
    assert large / small < 8, f"64 elements/thread: {small:.2f} s, 256: {large:.2f} s (ratio {large / small:.1f})"
