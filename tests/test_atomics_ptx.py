"""Atomics spell their memory semantics and scope in the PTX as Triton does (its tests read the PTX), and
16-bit compare-and-swap (Triton allows 16-, 32- and 64-bit CAS) assembles and runs."""
import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl


@kl.jit
def rmw_kernel(p, lock, x_ptr, SEM: tl.constexpr):
    o = tl.arange(0, 128)
    tl.atomic_add(p + o, tl.load(x_ptr + o), sem=SEM)
    while tl.atomic_cas(lock, 0, 1, SEM) == 1:
        pass
    tl.atomic_xchg(lock, 0)


@pytest.mark.parametrize("sem", ["acq_rel", "acquire", "release", "relaxed"])
def test_semantics_in_the_ptx(sem):
    ck = rmw_kernel.warmup(torch.zeros(128), torch.zeros(1, dtype=torch.int32), torch.zeros(128), sem, grid=(1,))
    ck.build_gpu()
    atoms = set(re.findall(r"atom\.[a-z0-9_.]+", ck.asm["ptx"]))
    assert f"atom.global.gpu.{sem}.add.f32" in atoms and f"atom.global.{sem}.cas.b32" in atoms
    assert "cubin" in ck.asm


@kl.jit
def cas16_kernel(p, out, DT: tl.constexpr):
    o = tl.arange(0, 128)
    old = tl.atomic_cas(p + o, tl.full((128,), 2, DT), tl.full((128,), 7, DT))
    tl.store(out + o, old)


DTYPES16 = [(torch.int16, tl.int16), (torch.float16, tl.float16), (torch.bfloat16, tl.bfloat16)]


def _cas16(device, dt, tdt):
    p = torch.tensor([2, 5] * 64, dtype=dt, device=device)
    out = torch.full((128,), -1, dtype=dt, device=device)
    cas16_kernel[(1,)](p, out, tdt)
    want_p = torch.tensor([7, 5] * 64, dtype=dt)
    assert torch.equal(p.cpu(), want_p) and torch.equal(out.cpu(), torch.tensor([2, 5] * 64, dtype=dt))


@pytest.mark.parametrize("dt,tdt", DTYPES16, ids=[str(d) for d, _ in DTYPES16])
def test_cas16_interpreter_and_ptx(dt, tdt):
    _cas16("cpu", dt, tdt)
    ck = cas16_kernel.warmup(torch.zeros(128, dtype=dt), torch.zeros(128, dtype=dt), tdt, grid=(1,))
    ck.build_gpu()
    assert "atom.global.acq_rel.cas.b16" in ck.asm["ptx"] and "cubin" in ck.asm


@pytest.mark.gpu
@pytest.mark.parametrize("dt,tdt", DTYPES16, ids=[str(d) for d, _ in DTYPES16])
def test_cas16_gpu(dt, tdt):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _cas16("cuda", dt, tdt)


@kl.jit
def use_result_kernel(index_ptr, out_ptr, size: tl.constexpr, OP: tl.constexpr):
    rows = tl.arange(0, size)[:, None]
    if OP == "add":
        old = tl.atomic_add(index_ptr + rows, rows.to(index_ptr.dtype.element_ty), sem="relaxed")
    else:
        old = tl.atomic_cas(index_ptr + rows, tl.zeros((size, 1), dtype=index_ptr.dtype.element_ty),
                            rows.to(index_ptr.dtype.element_ty), sem="relaxed")
    tl.store(out_ptr + old.to(tl.int32) * size + tl.arange(0, size)[None, :], 5)


USE_CASES = [(op, dt, size) for op in ("add", "cas") for dt in (torch.int32, torch.float16) for size in (1, 4, 16)]


def _use_result(device, op, dt, size):
    """A tile smaller than the block: several threads hold copies of each element, one runs the atomic, and
    every copy must see its old value (Triton's test_tensor_atomic_use_result)."""
    index = torch.arange(0, size).to(dt).to(device)
    out = torch.zeros((size, size), dtype=dt, device=device)
    use_result_kernel[(1,)](index, out, size, op)
    assert (out == 5).all()
    want = torch.arange(0, size).to(dt) * (2 if op == "add" else 1)
    if op == "cas":
        want[0] = 0  # only the zero entry matched cmp = 0 and took val = 0
    assert torch.equal(index.cpu(), want)


@pytest.mark.parametrize("op,dt,size", USE_CASES, ids=[f"{o}-{d}-{s}" for o, d, s in USE_CASES])
def test_atomic_old_values_reach_every_copy_interpreter_and_ptx(op, dt, size):
    _use_result("cpu", op, dt, size)
    ck = use_result_kernel.warmup(torch.zeros(size, dtype=dt), torch.zeros(size, size, dtype=dt), size, op, grid=(1,))
    ck.build_gpu()
    assert "cubin" in ck.asm


@pytest.mark.gpu
@pytest.mark.parametrize("op,dt,size", USE_CASES, ids=[f"{o}-{d}-{s}" for o, d, s in USE_CASES])
def test_atomic_old_values_reach_every_copy_gpu(op, dt, size):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _use_result("cuda", op, dt, size)
