"""LLVM's loop strength reduction is off for kernels with a dot in a loop (backend._llvm_lsr): their pointers
are already loop-carried (by the user's `ptrs += step` or the strength_reduce_pointers pass), and LSR
re-formed them as an invariant base plus a shared offset — one 64-bit multiply-add per pointer next to the
tensor-core instructions in the PTX/SASS. Checked on the PTX of the matmul loop, on the CPU."""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

import kernellab  # noqa: E402
import kernellab.language as tl  # noqa: E402
from tests.idioms import make_idioms  # noqa: E402

N = 512


def _matmul(variant: str, monkeypatch, lsr: str | None):
    if lsr is None:
        monkeypatch.delenv("KERNELLAB_LLVM_LSR", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_LLVM_LSR", lsr)
    w = {w.name: w for w in make_idioms(kernellab.jit, tl)}["matmul"]
    v = next(v for v in w.variants if v.name == variant)
    a, b, c = (torch.empty((N, N), dtype=torch.float16) for _ in range(3))
    ck = v.kernel.warmup(a, b, c, N, N, N, N, 1, N, 1, N, 1, BM=128, BN=256, BK=64, GM=8, num_warps=8,
                         num_stages=3, grid=(1,))
    ck.build_gpu()
    return ck


def _main_loop(ptx: str) -> str:
    """The PTX of the loop holding the wgmma instructions (label to its backward branch)."""
    for m in re.finditer(r"^(\$L__BB\d+_\d+):", ptx, re.M):
        end = ptx.find(f"bra.uni \t{m.group(1)};", m.end())
        end = end if end >= 0 else ptx.find(f"bra \t{m.group(1)};", m.end())
        if end > 0 and "wgmma.mma_async" in ptx[m.end():end]:
            return ptx[m.end():end]
    raise AssertionError("no loop with wgmma in the PTX")


@pytest.mark.parametrize("variant", ["dot_plus_acc", "acc_arg"])
def test_dot_loops_advance_carried_pointers_without_wide_multiplies(variant, monkeypatch):
    ck = _matmul(variant, monkeypatch, None)
    loop = _main_loop(ck.asm["ptx"])
    assert "cp.async.cg.shared.global" in loop
    assert not re.search(r"\b(mul|mad)\.wide\.", loop), "a pointer is rebuilt from a base and an offset"
    assert "strength reduction off" in ck.trace.stage("ptx").description


def test_lsr_on_rebuilds_the_pointers(monkeypatch):
    """The control: with LSR forced on, the same loop forms each copy's address from an invariant base plus
    a shared offset — more 64-bit adds than the carried form's one increment per pointer (if this fails, LLVM
    stopped doing it and the switch may no longer be needed)."""
    def adds(lsr):
        return len(re.findall(r"\badd\.s64\b", _main_loop(_matmul("dot_plus_acc", monkeypatch, lsr).asm["ptx"])))

    assert adds("on") > adds("off")


def test_kernels_without_a_dot_loop_keep_lsr():
    @kernellab.jit
    def row_sum(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        acc = tl.zeros((BLOCK,), tl.float32)
        for start in range(0, n, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0)
        tl.store(y_ptr + row, tl.sum(acc, axis=0))

    x, y = torch.empty((4, 1000)), torch.empty(4)
    ck = row_sum.warmup(x, y, 1000, BLOCK=256, grid=(1,))
    ck.build_gpu()
    assert "strength reduction off" not in ck.trace.stage("ptx").description
