"""Validation before compiling and launching (issue 18), the accepting side: what must still work next to what
test_bad_kernels.py refuses, and Python's own limits turned into kernellab errors."""
import warnings

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler import frontend
from kernellab.runtime import jit as J

pytestmark = pytest.mark.filterwarnings("ignore::kernellab.runtime.jit.InterpreterNotice")


@kl.jit
def fill(o_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(o_ptr + offs, offs + tl.program_id(0) * 0)


@pytest.mark.parametrize("num_warps", [1, 2, 4, 8, 16, 32])
def test_every_power_of_two_warp_count_is_accepted(num_warps):
    o = torch.full((16,), -1, dtype=torch.int32)
    fill[(1,)](o, BLOCK=16, num_warps=num_warps, num_stages=1)
    assert torch.equal(o, torch.arange(16, dtype=torch.int32))


@pytest.mark.parametrize("grid", [(np.int64(2),), (np.int32(1), 2, 3), 3, (1, 65535), (2**31 - 1, 1, 1)])
def test_grids_within_cudas_limits_are_accepted(grid):
    assert J._normalize_grid("k", grid)[0] >= 1


def test_numpy_integer_grid_runs():
    o = torch.full((16,), -1, dtype=torch.int32)
    fill[(np.int64(1),)](o, BLOCK=16)
    assert torch.equal(o, torch.arange(16, dtype=torch.int32))


def test_full_accepts_bit_patterns_that_fit_the_width():
    @kl.jit
    def k(o_ptr, B: tl.constexpr):
        offs = tl.arange(0, B)
        tl.store(o_ptr + offs, tl.full((B,), 0xFFFFFFFF, tl.int32))
        tl.store(o_ptr + B + offs, tl.full((B,), -2**31, tl.int32))

    o = torch.zeros(8, dtype=torch.int32)
    k[(1,)](o, B=4)
    assert o[:4].tolist() == [-1] * 4 and o[4:].tolist() == [-2**31] * 4


def test_load_may_broadcast_the_pointer_like_triton():
    """Triton's tl.load broadcasts pointer and mask to their common shape (only tl.store refuses)."""
    @kl.jit
    def k(x_ptr, o_ptr, B: tl.constexpr):
        offs = tl.arange(0, B)
        v = tl.load(x_ptr + offs, mask=offs[:, None] <= offs[None, :], other=0.0)  # [B, B]
        tl.store(o_ptr + offs, tl.sum(v, 0))

    x = torch.randn(8, dtype=torch.float64).float()
    o = torch.full((8,), float("nan"))
    k[(1,)](x, o, B=8)
    want = torch.tensor([(j + 1) * x[j].double() for j in range(8)])  # v[i, j] = x[j] where i <= j
    torch.testing.assert_close(o.double(), want, rtol=1e-6, atol=1e-6)


def test_a_400_term_expression_compiles_and_runs():
    terms = " + ".join(f"x * {i}" for i in range(400))
    src = ("import kernellab as kl\nimport kernellab.language as tl\n@kl.jit\ndef deep(x_ptr, o_ptr, B: tl.constexpr):\n"
           "    offs = tl.arange(0, B)\n    x = tl.load(x_ptr + offs)\n"
           f"    tl.store(o_ptr + offs, {terms})\n")
    ns = {}
    exec(src, ns)
    x = torch.arange(4, dtype=torch.int32)
    o = torch.zeros(4, dtype=torch.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ns["deep"][(1,)](x, o, B=4)
    assert o.tolist() == [v * sum(range(400)) for v in range(4)]


@pytest.mark.parametrize("exc, words", [(RecursionError, "nests too deeply"), (MemoryError, "out of memory")])
def test_python_limits_become_compilation_errors(monkeypatch, exc, words):
    def boom(self, jitfn, bound):
        raise exc()

    monkeypatch.setattr(frontend.ModuleCompiler, "compile_kernel", boom)

    @kl.jit
    def limited(o_ptr, B: tl.constexpr):
        tl.store(o_ptr, 1)

    with pytest.raises(kl.CompilationError) as ei:
        limited.warmup(torch.zeros(4), B=4)
    assert ei.value.kernel == "limited" and words in ei.value.reason and ei.value.line is not None
    assert ei.value.__cause__ is None or ei.value.__cause__.__traceback__ is None


def test_messages_never_print_a_whole_tensor():
    assert len(J._short_repr(torch.arange(10**6))) < 80
    with pytest.raises(kl.LaunchError) as ei:
        fill[(torch.arange(10**5),)](torch.zeros(4, dtype=torch.int32), BLOCK=4)
    assert len(str(ei.value)) < 300


def test_gpu_build_refuses_a_tile_over_the_per_thread_byte_budget():
    """BLOCK=2**20 is legal (Triton's numel limit) and runs on the interpreter, but 32 KiB of one value per thread
    of 4 warps cannot be registers: unless the GPU pass strip_mine_tiles can compute it in chunks (every op on it
    element by element), the GPU build says so at once instead of running LLVM for many minutes."""
    @kl.jit
    def big(x_ptr, o_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(o_ptr + offs, x * 2)
        tl.store(o_ptr, tl.max(x, axis=0))

    @kl.jit
    def elementwise(x_ptr, o_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(o_ptr + offs, tl.load(x_ptr + offs) * 2)

    x = torch.zeros(2**20)
    ck = big.warmup(x, x, BLOCK=2**20)
    with pytest.raises(kl.CompilationError) as ei:
        ck.build_gpu()
    assert ei.value.kernel == "big" and "budget" in ei.value.reason and "tt.reduce" in ei.value.reason
    assert "warps" in ei.value.reason and ei.value.line is not None
    elementwise.warmup(x, x, BLOCK=2**20)._check_register_budget(4)  # split into chunks by the GPU pass
    # with enough warps per element the same size is within budget (checked without building)
    big.warmup(x, x, BLOCK=2**20, num_warps=32)._check_register_budget(32)
