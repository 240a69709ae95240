"""GPU regressions found while building the backend, each with the smallest kernel that showed it."""
import pytest
import torch

import kernellab as kl
import kernellab.language as tl

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@kl.jit
def atomic_old_values(x_ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_add(x_ptr + offs, 5)
    tl.store(old_ptr + offs, old)


@pytest.mark.parametrize("block, num_warps", [(16, 4), (32, 4), (64, 8)])
def test_atomic_old_values_survive_a_layout_conversion(block, num_warps):
    # a tile smaller than the program's threads holds copies of each element; only the representative
    # lane performs the atomic, so only it may write the old value when the tile changes layout
    g = torch.Generator().manual_seed(block)
    x0 = torch.randint(1, 1000, (block,), generator=g, dtype=torch.int32)
    x = x0.cuda()
    old = torch.full((block,), -1, dtype=torch.int32, device="cuda")
    atomic_old_values[(1,)](x, old, BLOCK=block, num_warps=num_warps)
    torch.cuda.synchronize()
    assert torch.equal(old.cpu(), x0)
    assert torch.equal(x.cpu(), x0 + 5)


@kl.jit
def store_int(out_ptr, n):
    tl.store(out_ptr, n.to(tl.int64))


def test_warm_launch_respecializes_integers_by_width():
    # the warm-launch fast path must not reuse an i32 kernel for a value that needs u32 or i64
    out = torch.zeros(1, dtype=torch.int64, device="cuda")
    for n in (5, 2**31 + 5, 2**40 + 3, -7, 5):
        store_int[(1,)](out, n)
        torch.cuda.synchronize()
        assert out.item() == n


def test_bool_block_pointer_copy_on_the_gpu():
    """Triton's test_block_copy with bool (the vector-width planner divided by int1's 0 bytes)."""
    from tests.test_tensor_descriptor import _bool_block_copy

    a = (torch.rand(1000) > 0.5).cuda()
    b = torch.ones(1000, dtype=torch.bool, device="cuda")
    _bool_block_copy[(16,)](a, b, 1000, 64)
    assert torch.equal(b[:1000], a)


@kl.jit
def double_in_place(p):
    pid = tl.program_id(axis=0)
    x = tl.load(p + pid)
    tl.store(p + pid, x * 2)


@pytest.mark.parametrize("num_warps", [1, 4, 32])
def test_scalar_store_back_to_its_load_is_done_once(num_warps):
    # every thread holds the scalar; if each stored it, a warp that loads after another warp's store doubles the
    # doubled value (Triton's test_load_store_same_ptr, 1024 threads a program)
    for _ in range(20):
        x = torch.ones(65536, device="cuda")
        double_in_place[(65536,)](x, num_warps=num_warps)
        assert torch.all(x == 2)
