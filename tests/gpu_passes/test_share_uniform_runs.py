"""share_uniform_runs: integer / mask ops constant over aligned runs of a thread's registers are marked, so
codegen computes one register per run."""
from __future__ import annotations

import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.passes import share_uniform_runs as sur

MASKED = """
#L0 = #blocked<[4], [32], [4], [0]>

tt.func @k(%x_ptr: !ptr<f32> {{tt.divisibility = 16}}, %n: i32{n_attrs}) {{
  %r = tt.make_range {{end = 1024, start = 0}} : tensor<1024xi32, #L0>
  %nt = tt.splat %n : tensor<1024xi32, #L0>
  %m = arith.cmpi %r, %nt {{predicate = "slt"{marked}}} : tensor<1024xi1, #L0>
  %p = tt.splat %x_ptr : tensor<1024x!ptr<f32>, #L0>
  %q = tt.addptr %p, %r : tensor<1024x!ptr<f32>, #L0>
  %x = tt.load %q, %m {{vec = 4}} : tensor<1024xf32, #L0>
  %y = arith.addf %x, %x : tensor<1024xf32, #L0>
  tt.store %q, %y, %m {{vec = 4}}
  tt.return
}}
"""


def test_a_bound_known_divisible_makes_the_mask_uniform_over_a_threads_run(check):
    # r < n with n a multiple of 16 is constant over 16 elements; a thread holds 4 of them (spt 4): run 4
    before = MASKED.format(n_attrs=" {tt.divisibility = 16}", marked="")
    after = MASKED.format(n_attrs=" {tt.divisibility = 16}", marked=", uniform_blocks = [4]")
    _, stats = check(sur, before, after)
    assert stats == {"marked": 1}


def test_an_unknown_bound_leaves_the_mask_per_element(check):
    text = MASKED.format(n_attrs="", marked="")
    _, stats = check(sur, text, text)
    assert stats == {"marked": 0}


ROWS = """
#L0 = #slice<1, #blocked<[1, 8], [2, 16], [4, 1], [1, 0]>>
#L1 = #blocked<[1, 8], [2, 16], [4, 1], [1, 0]>

tt.func @k(%x_ptr: !ptr<f16> {{tt.divisibility = 16}}, %n: i32 {{tt.divisibility = 16}}) {{
  %r = tt.make_range {{end = 64, start = 0}} : tensor<64xi32, #L0>
  %e = tt.expand_dims %r {{axis = 1}} : tensor<64x1xi32, #L1>
  %nt = tt.splat %n : tensor<64x1xi32, #L1>
  %m = arith.cmpi %e, %nt {{predicate = "slt"{marked}}} : tensor<64x1xi1, #L1>
  %mb = tt.broadcast %m : tensor<64x128xi1, #L1>
  %p = tt.splat %x_ptr : tensor<64x128x!ptr<f16>, #L1>
  %x = tt.load %p, %mb {{vec = 8}} : tensor<64x128xf16, #L1>
  tt.store %p, %x, %mb {{vec = 8}}
  tt.return
}}
"""


def test_rows_a_thread_holds_an_extent_apart_share_a_block(check):
    # a matmul's K mask on its B tile: a thread holds rows t, t+8, ..., t+56 (8 rows per CTA tile) and the
    # mask is constant over aligned 16-row blocks, so rows t and t+8 share one compare: 4 per thread, not 8
    before = ROWS.format(marked="")
    after = ROWS.format(marked=", uniform_blocks = [16, 1]")
    _, stats = check(sur, before, after)
    assert stats == {"marked": 1}


@pytest.mark.parametrize("const, spt, extent, block", [
    (16, 4, 512, 4),    # between a run and an extent: runs of spt
    (16, 8, 8, 16),     # whole extents: t and t + 8 fall in one block for every thread
    (2, 4, 512, 2),     # inside a run
    (12, 8, 8, 4),      # not a power of two: its largest power-of-two divisor
    (1, 4, 512, 1),
])
def test_block_choice(const, spt, extent, block):
    assert sur._block(const, spt, extent) == block


@kl.jit
def masked_tail(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    x = tl.load(x_ptr + offs, mask=keep, other=-1.0)
    tl.store(y_ptr + offs, tl.where(keep & (offs % 3 != 0), x * 2.0, x), mask=keep)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_one_compare_per_run_in_the_ptx():
    args = (torch.randn(4096), torch.empty(4096), 4096)
    ck = masked_tail.warmup(*args, BLOCK=1024, grid=(4,)).build_gpu()
    assert "uniform_blocks = [4]" in ck.asm["gpu"]
    # 8 registers per thread: two runs of 4, so two compares of offs < n
    assert ck.asm["ptx"].count("setp.lt.s32") == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n", [4096, 4000, 4093, 16, 1])
def test_masked_tails_on_the_gpu(n):
    x = torch.randn(4096, device="cuda")
    y = torch.full((4096,), float("nan"), device="cuda")
    masked_tail[(4,)](x, y, n, BLOCK=1024)
    offs = torch.arange(4096, device="cuda")
    want = torch.where(offs % 3 != 0, x * 2.0, x)
    torch.testing.assert_close(y[:n], want[:n])
    assert y[n:].isnan().all()


@kl.jit
def row_tail(x_ptr, y_ptr, n, N: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, N)[None, :]
    keep = rows < n
    x = tl.load(x_ptr + rows * N + cols, mask=keep, other=-1.0)
    tl.store(y_ptr + rows * N + cols, x * 2.0, mask=keep)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_one_compare_per_block_of_rows_in_the_ptx():
    x = torch.randn(64, 128)
    ck = row_tail.warmup(x, torch.empty_like(x), 48, N=128, ROWS=64, grid=(1,)).build_gpu()
    # 4 warps of 1 row each: a thread holds 16 rows, 4 apart; the mask (n a multiple of 16) is one compare
    # per 16-row block, 4 in all, not 16
    assert "uniform_blocks = [16, 1]" in ck.asm["gpu"], ck.asm["gpu"]
    assert ck.asm["ptx"].count("setp.lt.s32") == 4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n", [16, 48, 64, 40, 17, 0])
def test_row_tails_on_the_gpu(n):
    x = torch.randn(64, 128, device="cuda")
    y = torch.full((64, 128), float("nan"), device="cuda")
    row_tail[(1,)](x, y, n, N=128, ROWS=64)
    torch.testing.assert_close(y[:n], x[:n] * 2.0)
    assert y[n:].isnan().all()
