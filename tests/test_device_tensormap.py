"""Tensor maps the kernel makes itself (sm_90): a descriptor whose base or shape is computed in the kernel (Triton's
grouped GEMM: per-group pointers and sizes loaded from tables) gets its TMA map filled by `tensormap.replace` in
shared memory and copied to the launch's global scratch (codegen/lower_tma.py, runtime/scratch.py). Checked against
torch float64 with poisoned outputs on the interpreter and (marked `gpu`) on the device; compile-only checks that
the PTX makes the maps and that ptxas takes it; a fake launcher checks the scratch the launch asks for."""
from __future__ import annotations

import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")


@kl.jit
def grouped_gemm(table, dims, a_buf, b_buf, c_buf, G, NUM_PROGRAMS: tl.constexpr, DTYPE: tl.constexpr,
                 PACKED: tl.constexpr, HINT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Tutorial 08's grouped GEMM with descriptors: group g multiplies A_g [M, K] by B_g [K, N] into C_g [M, N],
    sizes in dims[3g:3g+3]; table[3g:3g+3] (int64) holds the three addresses, or (PACKED) the element offsets of
    the group's matrices in a_buf, b_buf, c_buf. Programs stride over all groups' tiles."""
    tile = tl.program_id(0)
    last = 0
    for g in range(G):
        M = tl.load(dims + g * 3)
        N = tl.load(dims + g * 3 + 1)
        K = tl.load(dims + g * 3 + 2)
        if HINT:  # the sizes are multiples of 8: 16-byte runs for the pipeliner's copies
            N = tl.multiple_of(N, 8)
            K = tl.multiple_of(K, 8)
        nn = tl.cdiv(N, BN)
        nt = tl.cdiv(M, BM) * nn
        if tile >= last and tile < last + nt:
            if PACKED:
                a_ptr = a_buf + tl.load(table + g * 3)
                b_ptr = b_buf + tl.load(table + g * 3 + 1)
                c_ptr = c_buf + tl.load(table + g * 3 + 2)
            else:
                a_ptr = tl.load(table + g * 3).to(tl.pointer_type(DTYPE))
                b_ptr = tl.load(table + g * 3 + 1).to(tl.pointer_type(DTYPE))
                c_ptr = tl.load(table + g * 3 + 2).to(tl.pointer_type(DTYPE))
            a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
            b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
            c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
            while tile >= last and tile < last + nt:
                t = tile - last
                om = (t // nn) * BM
                on = (t % nn) * BN
                acc = tl.zeros((BM, BN), dtype=tl.float32)
                for kk in range(0, tl.cdiv(K, BK)):
                    acc += tl.dot(a_desc.load([om, kk * BK]), b_desc.load([kk * BK, on]))
                c_desc.store([om, on], acc.to(DTYPE))
                tile += NUM_PROGRAMS
        last = last + nt


TL_DTYPE = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


class Problem:
    """The groups' operands and the kernel's tables. Packed: every group's matrices are views into three buffers,
    each starting at a multiple of 8 elements (16 bytes), the C views poisoned with NaN."""

    def __init__(self, sizes, dtype, device, packed, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.dtype, self.packed, self.groups = dtype, packed, []
        bufs = [torch.full((sum(-(-s // 8) * 8 for s in sz) + 8,), float("nan"), dtype=dtype, device=device)
                for sz in zip(*[(M * K, K * N, M * N) for M, N, K in sizes])]
        at, table = [0, 0, 0], []
        for M, N, K in sizes:
            a = (torch.randn(M, K, generator=g) + 0.25).to(dtype)
            b = (torch.randn(K, N, generator=g) * 0.1).to(dtype)
            views = []
            for j, (shape, src) in enumerate([((M, K), a), ((K, N), b), ((M, N), None)]):
                n = shape[0] * shape[1]
                if packed:
                    v = bufs[j][at[j]:at[j] + n].view(shape)
                    table.append(at[j])
                    at[j] += -(-n // 8) * 8
                else:
                    v = torch.full(shape, float("nan"), dtype=dtype, device=device)
                    table.append(v.data_ptr())
                if src is not None:
                    v.copy_(src)
                views.append(v)
            self.groups.append(views)
        self.bufs = bufs if packed else [torch.empty(8, dtype=dtype, device=device)] * 3
        self.table = torch.tensor(table, dtype=torch.int64, device=device)
        self.dims = torch.tensor([d for M, N, K in sizes for d in (M, N, K)], dtype=torch.int32, device=device)

    def launch(self, programs, hint=True, warmup=False, bm=128, bn=128, bk=64, warps=8, stages=3):
        args = (self.table, self.dims, *self.bufs, len(self.groups))
        meta = dict(NUM_PROGRAMS=programs, DTYPE=TL_DTYPE[self.dtype], PACKED=self.packed, HINT=hint, BM=bm, BN=bn,
                    BK=bk, num_warps=warps, num_stages=stages)
        if warmup:
            return grouped_gemm.warmup(*args, grid=(programs,), **meta)
        return grouped_gemm[(programs,)](*args, **meta)

    def check(self):
        for a, b, c in self.groups:
            assert not torch.isnan(c).any()
            ref = a.double() @ b.double()
            err = ((c.double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, err


RAGGED = [(200, 136, 520), (64, 256, 64), (1, 8, 8), (333, 72, 1000)]


def test_interpreter_grouped_gemm():
    """Packed groups (the bases are a buffer plus an offset loaded in the kernel): the interpreter knows only the
    argument buffers, so a table of raw addresses is a GPU-only test."""
    p = Problem([(40, 24, 40), (17, 16, 72), (33, 40, 16)], torch.float16, "cpu", packed=True)
    p.launch(3, bm=16, bn=16, bk=16, warps=4, stages=2)
    p.check()


@needs_ptxas
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("packed", [False, True], ids=["table", "packed"])
def test_sm90_ptx_makes_tensor_maps(dtype, packed, tmp_path, monkeypatch):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = Problem([(64, 64, 64)], dtype, "cpu", packed).launch(4, warmup=True)
    ck.build_gpu(Target(90))
    stats = next(p.stats for p in ck.trace.passes if p.name == "fill_stages_with_tma")
    assert stats.get("tma") == 2 and stats.get("device_tensormaps") == 2, stats
    stores = next(p.stats for p in ck.trace.passes if p.name == "tma_store")
    assert stores == {"tma_store": 1, "device_tensormaps": 1}, stores  # C goes out by TMA through a map made too
    ptx = ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF" and ck.n_spills == 0
    assert ".version 8.3" in ptx and "cp.async.bulk.tensor.2d" in ptx and "cp.async.cg" not in ptx
    for instr in ("tensormap.replace.tile.global_address.shared::cta.b1024.b64",
                  "tensormap.replace.tile.global_stride.shared::cta.b1024.b64",
                  "tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32",
                  "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned",
                  "fence.proxy.tensormap::generic.acquire.gpu"):
        assert instr in ptx, instr
    code = {torch.float16: 6, torch.bfloat16: 10}[dtype]  # the PTX ISA's elemtype codes
    assert [ln.split("]")[-1].strip() for ln in ptx.splitlines() if "replace.tile.elemtype" in ln] == [f", {code}; }}"] * 3
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    # one 128-byte slot per map per program in the launch's scratch, the last parameter
    assert ck.arg_kinds[-1] == {"scratch": 384}


@needs_ptxas
def test_kernel_argument_descriptors_keep_host_maps(tmp_path, monkeypatch):
    """A descriptor over kernel arguments is still encoded by the launcher (cheaper): no scratch, no replace."""
    from kernellab.compiler.codegen.target import Target

    from .test_tensor_descriptor import _launch_matmul, _matmul_operands

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _launch_matmul("device", *_matmul_operands(256, 256, 256, "cpu"), warmup=True)
    ck.build_gpu(Target(90))
    assert "tensormap.replace" not in ck.asm["ptx"]
    assert not any(isinstance(k, dict) and "scratch" in k for k in ck.arg_kinds)


def test_launch_asks_the_allocator_for_scratch():
    from kernellab.runtime.driver import LoadedKernel

    props = {"max_grid_dims": (2**31 - 1, 65535, 65535), "max_threads_per_block": 1024, "warp_size": 32,
             "max_shared_per_block_optin": 232448, "max_shared_per_block": 49152}
    calls, asked = [], []

    class Buf:
        def data_ptr(self):
            return 0x7000_0000

    def alloc(size, align, stream):
        asked.append((size, align, stream))
        return Buf()

    k = LoadedKernel("g", "F", ["ptr", "i32", {"scratch": 256}], device_index=0, props=props, attributes={},
                     launch_fn=lambda *a: calls.append(a) or (0,))
    kl.set_allocator(alloc)
    try:
        k.launch((3, 2), 4, 0, 77, [16, 5])
        k.warm_launcher(4, 0)((5,), 77, [16, 5])
    finally:
        kl.set_allocator(None)
    assert asked == [(3 * 2 * 256, 128, 77), (5 * 256, 128, 77)]
    assert k.packer.scratch_slot.value == 0x7000_0000 and len(calls) == 2
    import ctypes

    params = ctypes.cast(k.packer.params_address, ctypes.POINTER(ctypes.c_void_p))
    assert params[2] == ctypes.addressof(k.packer.scratch_slot)


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("hint", [True, False], ids=["tma", "unhinted"])
@pytest.mark.parametrize("programs", [4, 132])
@pytest.mark.parametrize("packed", [False, True], ids=["table", "packed"])
def test_gpu_grouped_gemm(dtype, hint, programs, packed):
    p = Problem(RAGGED, dtype, "cuda", packed)
    p.launch(programs, hint=hint)
    torch.cuda.synchronize()
    p.check()


@pytest.mark.gpu
def test_gpu_grouped_gemm_with_triton_style_allocator():
    asked = []

    def alloc(size, align, stream):
        asked.append((size, align))
        return torch.empty(size, dtype=torch.int8, device="cuda")

    p = Problem(RAGGED, torch.float16, "cuda", packed=False, seed=1)
    kl.set_allocator(alloc)
    try:
        p.launch(8)
        torch.cuda.synchronize()
    finally:
        kl.set_allocator(None)
    p.check()
    assert asked and all(a == 128 for _, a in asked)


@kl.jit
def fill_through_made_map(dims, c_ptr, ld, HINT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """C [M, N] (sizes loaded in the kernel, row stride `ld`) filled with 1000 * row + column through a tensor
    descriptor the kernel makes."""
    M = tl.load(dims)
    N = tl.load(dims + 1)
    if HINT:
        N = tl.multiple_of(N, 8)
    desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[ld, 1], block_shape=[BM, BN])
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    r = tl.arange(0, BM)[:, None] + pm * BM
    c = tl.arange(0, BN)[None, :] + pn * BN
    desc.store([pm * BM, pn * BN], (r * 1000 + c).to(tl.float32))


def _fill_through_made_map(M, N, width, hint, device, warmup=False):
    full = torch.full((M, width), float("nan"), dtype=torch.float32, device=device)
    dims = torch.tensor([M, N], dtype=torch.int32, device=device)
    grid = (-(-M // 64), -(-N // 64))
    if warmup:
        return full, fill_through_made_map.warmup(dims, full, width, HINT=hint, BM=64, BN=64, grid=grid)
    return full, fill_through_made_map[grid](dims, full, width, HINT=hint, BM=64, BN=64)


def _stores(ck):
    return next(p.stats for p in ck.trace.passes if p.name == "tma_store")


@needs_ptxas
@pytest.mark.parametrize("hint", [False, True])
def test_made_map_store_needs_a_whole_16_byte_extent(hint, tmp_path, monkeypatch):
    """A TMA store writes whole 16-byte chunks (past a ragged extent, into a strided view's padding: Triton 3.6's
    descriptor store did on an H200). A map the kernel makes from a size it loads keeps st.global unless the size is
    hinted a multiple of 16 bytes."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    _, ck = _fill_through_made_map(130, 256, 272, hint, "cpu", warmup=True)
    ck.build_gpu(Target(90))
    stores = _stores(ck)
    assert stores.get("tma_store", 0) == (1 if hint else 0), stores
    if not hint:
        assert "not known to be a multiple of 16 bytes" in stores["no_tma_store"][0]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("N, hint", [(257, False), (250, False), (256, False), (256, True)])
def test_made_map_store_keeps_the_padding_past_a_ragged_row(N, hint, device):
    """C a view of a padded float32 buffer, its descriptor made in the kernel from sizes it loads: every element
    written, none of the padding."""
    M, width = 130, 272
    full, _ = _fill_through_made_map(M, N, width, hint, device)
    want = torch.arange(M)[:, None] * 1000.0 + torch.arange(N)[None, :]
    assert torch.equal(full[:, :N].cpu(), want)
    assert torch.isnan(full[:, N:]).all(), "the store wrote past column N"
