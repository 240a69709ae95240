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


@kl.jit
def scatter_add_rows(g_ptr, w_ptr, idx_ptr, old_ptr, n_rows, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    # an embedding backward: rows of g added into the rows of w that idx names (duplicates meet in atomics)
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    m = (rm[:, None] < n_rows) & (rn[None, :] < D)
    idx = tl.load(idx_ptr + rm, mask=rm < n_rows, other=0)
    g = tl.load(g_ptr + rm[:, None] * D + rn[None, :], mask=m, other=0.0)
    old = tl.atomic_add(w_ptr + idx[:, None] * D + rn[None, :], g, mask=m)
    tl.store(old_ptr + rm[:, None] * D + rn[None, :], old, mask=m)


def _scatter(device, dt, n_rows=200, vocab=37, D=96):
    gen = torch.Generator().manual_seed(3)
    g = (torch.randn(n_rows, D, generator=gen) * 0.5).to(dt)
    idx = torch.randint(0, vocab, (n_rows,), generator=gen)
    w = (torch.randn(vocab, D, generator=gen)).to(dt)
    ref = w.double().index_add(0, idx, g.double())
    w_d, old = w.to(device), torch.full((n_rows, D), float("nan"), dtype=dt, device=device)
    scatter_add_rows[(kl.cdiv(n_rows, 64), kl.cdiv(D, 64))](g.to(device), w_d, idx.to(device), old, n_rows,
                                                                    D=D, BM=64, BN=64)
    return w_d.cpu(), ref, old.cpu(), w


VEC_DTYPES = [(torch.float32, "f32", 4, 1e-5), (torch.float16, "f16", 8, 2e-2), (torch.bfloat16, "bf16", 8, 1e-1)]


@pytest.mark.parametrize("dt,name,vec,tol", VEC_DTYPES, ids=[v[1] for v in VEC_DTYPES])
def test_float_add_atomics_are_vectors_on_sm90(dt, name, vec, tol):
    """A contiguous float atomic add is one sm_90 vector instruction per run (Triton's form), in the operands'
    own layout (no conversion through shared memory); sm_80 keeps one element per instruction."""
    from kernellab.compiler.codegen.target import Target

    w, ref, old, _ = _scatter("cpu", dt)
    torch.testing.assert_close(w.double(), ref, atol=tol, rtol=tol)
    ck = list(scatter_add_rows.cache.values())[-1]
    ptx90 = ck.build_gpu().asm["ptx"]
    suffix = "f32" if name == "f32" else f"noftz.v{vec}.{name}"
    form = f"add.v{vec}.f32" if name == "f32" else f"add.{suffix}"
    assert f"atom.global.gpu.acq_rel.{form}" in ptx90
    # the atomic's pointer and value tiles come straight from their producers, not from a layout conversion
    gpu = ck.asm["gpu"]
    atomic = next(ln for ln in gpu.splitlines() if "tt.atomic_rmw" in ln)
    operands = re.findall(r"%[\w.]+", atomic.split("tt.atomic_rmw", 1)[1].split("{", 1)[0])
    defs = {m.group(1): m.group(2) for m in re.finditer(r"^\s*(%[\w.]+) = (\S+)", gpu, re.M)}
    assert operands and not [v for v in operands if defs.get(v) == "ttg.convert_layout"], atomic
    if name != "bf16":  # (bf16 atomic add is an sm_90 instruction)
        ptx80 = ck.build_gpu(Target(80)).asm["ptx"]
        assert ".v4.f32" not in ptx80 and re.search(r"atom\.global\.gpu\.acq_rel\.add\.(f32|noftz\.f16 )", ptx80)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dt,name,vec,tol", VEC_DTYPES, ids=[v[1] for v in VEC_DTYPES])
def test_float_add_atomics_on_the_gpu(dt, name, vec, tol):
    w, ref, old, w0 = _scatter("cuda", dt)  # 200 rows into 37: many adds meet on each row
    torch.testing.assert_close(w.double(), ref, atol=tol, rtol=tol)
    # the returned old values: a row named by one index only saw no other add, so it reads w's initial row
    w, ref, old, w0 = _scatter("cuda", dt, vocab=400)
    torch.testing.assert_close(w.double(), ref, atol=tol, rtol=tol)
    gen = torch.Generator().manual_seed(3)
    torch.randn(200, 96, generator=gen)
    idx = torch.randint(0, 400, (200,), generator=gen)
    once = torch.bincount(idx, minlength=400)[idx] == 1
    assert once.any()
    torch.testing.assert_close(old[once], w0[idx[once]], atol=0, rtol=0)
    assert not old.isnan().any()
