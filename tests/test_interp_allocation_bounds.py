"""bounds="allocation" (kernellab.compat's default on the CPU interpreter): "storage" whose loads may also read
past a tensor's storage, up to the end of its CUDA caching-allocator block (interp_memory.ALLOCATION_UNIT), as
zeros, where a GPU reads the block's padding without faulting. Stores and loads beyond the block still fault.
(SageAttention's causal kernels load the K scale of the block after the last one and mask its scores; Triton's
interpreter and a GPU run them, kernellab's interpreter faulted under "storage".)"""
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import InterpreterError
from kernellab.runtime.interp_memory import ALLOCATION_UNIT

pytestmark = pytest.mark.filterwarnings("ignore::kernellab.runtime.jit.InterpreterNotice")


@kl.jit
def next_or_zero(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y[i] = x[i] + x[i + 1] where i + 1 < n, else x[i]: the load of x[i + 1] is unmasked (one past the end for the
    last element) and its value selected away, as SageAttention does with its K scales."""
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    nxt = tl.load(x_ptr + offs + 1, mask=m)  # reads x[n] for offs == n - 1
    tl.store(y_ptr + offs, x + tl.where(offs + 1 < n, nxt, 0.0), mask=m)


@kl.jit
def load_at(x_ptr, y_ptr, off):
    tl.store(y_ptr, tl.load(x_ptr + off))


@kl.jit
def store_at(x_ptr, off, v):
    tl.store(x_ptr + off, v)


def _want(x):
    return x.double() + torch.cat((x[1:].double(), torch.zeros(1, dtype=torch.float64)))


def test_one_past_the_end_reads_under_allocation():
    x = torch.randn(7, generator=torch.Generator().manual_seed(0))
    y = torch.full((7,), float("nan"))
    next_or_zero[(1,)](x, y, 7, BLOCK=8, bounds="allocation")
    assert torch.equal(y.double(), _want(x).float().double())


def test_storage_still_faults_one_past_the_end():
    x = torch.randn(7, generator=torch.Generator().manual_seed(1))
    y = torch.full((7,), float("nan"))
    with pytest.raises(InterpreterError, match=r"reads out of bounds: element offset 7 of argument 'x_ptr'"):
        next_or_zero[(1,)](x, y, 7, BLOCK=8, bounds="storage")


def test_padding_reads_zero_up_to_the_allocation_unit():
    x = torch.randn(3, generator=torch.Generator().manual_seed(2))  # 12 bytes: one 512-byte block
    y = torch.full((1,), float("nan"))
    last = ALLOCATION_UNIT // 4 - 1
    load_at[(1,)](x, y, last, bounds="allocation")
    assert y.item() == 0.0
    with pytest.raises(InterpreterError, match=rf"reads out of bounds: element offset {last + 1} of argument"):
        load_at[(1,)](x, y, last + 1, bounds="allocation")
    with pytest.raises(InterpreterError, match=r"reads out of bounds: element offset -1 of argument"):
        load_at[(1,)](x, y, -1, bounds="allocation")  # before the storage: not the allocator's padding


def test_stores_past_the_end_still_fault():
    x = torch.zeros(3)
    with pytest.raises(InterpreterError, match=r"writes out of bounds: element offset 3 of argument 'x_ptr'"):
        store_at[(1,)](x, 3, 1.0, bounds="allocation")


def test_view_reaches_its_storage_and_the_padding_after_it():
    base = torch.randn(10, generator=torch.Generator().manual_seed(3))
    y = torch.full((1,), float("nan"))
    load_at[(1,)](base[2:5], y, 7, bounds="allocation")  # base[9]: in the storage
    assert y.item() == base[9].item()
    load_at[(1,)](base[2:5], y, 8, bounds="allocation")  # past the storage, within its block
    assert y.item() == 0.0


def test_compat_launches_default_to_allocation(triton):
    import triton.language as ttl

    @triton.jit
    def k(x_ptr, y_ptr, n, BLOCK: ttl.constexpr):
        offs = ttl.arange(0, BLOCK)
        m = offs < n
        nxt = ttl.load(x_ptr + offs + 1, mask=m)
        ttl.store(y_ptr + offs, ttl.load(x_ptr + offs, mask=m) + ttl.where(offs + 1 < n, nxt, 0.0), mask=m)

    x = torch.randn(5, generator=torch.Generator().manual_seed(4))
    y = torch.full((5,), float("nan"))
    k[(1,)](x, y, 5, BLOCK=8)
    assert torch.equal(y.double(), _want(x).float().double())


@pytest.mark.gpu
def test_one_past_the_end_on_the_gpu():
    """The same kernel compiled: the GPU reads the allocator block's padding, and the kernel selects it away."""
    x = torch.randn(7, generator=torch.Generator().manual_seed(0)).cuda()
    y = torch.full((7,), float("nan"), device="cuda")
    next_or_zero[(1,)](x, y, 7, BLOCK=8)
    torch.cuda.synchronize()
    assert torch.equal(y.cpu().double(), _want(x.cpu()).float().double())
