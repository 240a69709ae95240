"""flatten_loops (passes/flatten_loops.py): a `tl.range(..., flatten=True)` tile loop fused with its K loop.

The pass runs first in the GPU pipeline, on tile IR, so the CPU interpreter can run its output: each kernel's
tile IR is flattened here and interpreted against torch (ragged shapes, K shorter than a tile, K = 0, programs
with no tile), besides the pass's own IR checks, its reasons for leaving a nest alone, and builds for sm_90a /
sm_80 through ptxas (one fused loop, pipelined, wgmma overlapped, TMA kept). On a GPU (`gpu`) the compiled
kernels run against torch float32 into NaN-poisoned outputs."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import flatten_loops
from kernellab.compiler.verifier import verify
from kernellab.errors import ToolchainError
from kernellab.runtime.interpreter import Interpreter
from kernellab.runtime.jit import CompiledKernel

from .passes.conftest import check_uses


# ------------------------------------------------------------------------------------------- kernels
@kl.jit
def _tile_of(tile, num_m, num_in_group, GROUP: tl.constexpr):
    group = tile // num_in_group
    first_m = group * GROUP
    size_m = min(num_m - first_m, GROUP)
    return first_m + tile % size_m, (tile % num_in_group) // size_m


@kl.jit
def ptr_matmul(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, GROUP: tl.constexpr, NUM_SMS: tl.constexpr, FLAT: tl.constexpr):
    """C = A @ B over grouped tiles, pointers stepped along K (carried by the K loop from the tile's prologue),
    the epilogue's tile from a counter the tile loop carries (as tutorial 09 does)."""
    start = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    in_group = GROUP * num_n
    tile_c = start - NUM_SMS
    rk = tl.arange(0, BK)
    for tile in tl.range(start, num_m * num_n, NUM_SMS, flatten=FLAT):
        pm, pn = _tile_of(tile, num_m, in_group, GROUP)
        rm = tl.max_contiguous(tl.multiple_of(pm * BM + tl.arange(0, BM), BM), BM)
        rn = tl.max_contiguous(tl.multiple_of(pn * BN + tl.arange(0, BN), BN), BN)
        a_ptrs = A + rm[:, None] * sam + rk[None, :] * sak
        b_ptrs = B + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in range(k_tiles):
            a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - kt * BK), other=0.0)
            b = tl.load(b_ptrs, mask=(rk[:, None] < K - kt * BK) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        tile_c += NUM_SMS
        pm, pn = _tile_of(tile_c, num_m, in_group, GROUP)
        cm = pm * BM + tl.arange(0, BM)
        cn = pn * BN + tl.arange(0, BN)
        tl.store(C + cm[:, None] * scm + cn[None, :] * scn, acc.to(C.dtype.element_ty),
                 mask=(cm[:, None] < M) & (cn[None, :] < N))


@kl.jit
def desc_matmul(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                NUM_SMS: tl.constexpr, FLAT: tl.constexpr):
    """C = A @ B.T, A [M, K], B [N, K] through device-side descriptors (tutorial 09's descriptor kernel's form)."""
    start = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    in_group = GROUP * num_n
    a_desc = tl.make_tensor_descriptor(A, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(B, [N, K], [K, 1], [BN, BK])
    c_desc = tl.make_tensor_descriptor(C, [M, N], [N, 1], [BM, BN])
    for tile in tl.range(start, num_m * num_n, NUM_SMS, flatten=FLAT):
        pm, pn = _tile_of(tile, num_m, in_group, GROUP)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in range(k_tiles):
            a = a_desc.load([pm * BM, kt * BK])
            b = b_desc.load([pn * BN, kt * BK])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([pm * BM, pn * BN], acc.to(C.dtype.element_ty))


@kl.jit
def bp_matmul(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
              NUM_SMS: tl.constexpr, FLAT: tl.constexpr):
    """C = A @ B, block pointers made in the tile's prologue and advanced along K (carried by the K loop)."""
    start = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    in_group = GROUP * num_n
    for tile in tl.range(start, num_m * num_n, NUM_SMS, flatten=FLAT):
        pm, pn = _tile_of(tile, num_m, in_group, GROUP)
        a_bp = tl.make_block_ptr(A, (M, K), (K, 1), (pm * BM, 0), (BM, BK), (1, 0))
        b_bp = tl.make_block_ptr(B, (K, N), (N, 1), (0, pn * BN), (BK, BN), (1, 0))
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in range(tl.cdiv(K, BK)):
            acc = tl.dot(tl.load(a_bp, boundary_check=(0, 1)), tl.load(b_bp, boundary_check=(0, 1)), acc)
            a_bp = tl.advance(a_bp, (0, BK))
            b_bp = tl.advance(b_bp, (BK, 0))
        c_bp = tl.make_block_ptr(C, (M, N), (N, 1), (pm * BM, pn * BN), (BM, BN), (1, 0))
        tl.store(c_bp, acc.to(C.dtype.element_ty), boundary_check=(0, 1))


@kl.jit
def odd_nest(A, B, C, bias, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, NUM_SMS: tl.constexpr):
    """A nest off the common path: the tile loop runs backwards, the K loop from 1 in steps of 2 over K-tile
    pairs (the even K-tile added in the body), the accumulator starts from a bias row loaded in the prologue,
    and the tile loop carries a count of its tiles (stored after C, one per program)."""
    num_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    rk = tl.arange(0, BK)
    count = 0.0
    for tile in tl.range(tl.cdiv(M, BM) * num_n - 1 - tl.program_id(0), -1, -NUM_SMS, flatten=True):
        pm = tile // num_n
        pn = tile % num_n
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32) + tl.load(bias + rn, mask=rn < N, other=0.0)[None, :]
        for kt in range(1, k_tiles + 1, 2):
            for h in tl.static_range(2):
                ks = (kt - 1 + h) * BK + rk
                a = tl.load(A + rm[:, None] * K + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
                b = tl.load(B + ks[:, None] * N + rn[None, :], mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
                acc = tl.dot(a, b, acc)
        count += 1.0
        tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
    tl.store(C + M * N + tl.program_id(0), count)


# ------------------------------------------------------------------------------------------- helpers
def _interpret_flattened(monkeypatch, launch):
    """Run `launch()` with each kernel's tile IR flattened (flatten_loops run on it) and interpreted; the pass's
    stats of each launch."""
    seen = []

    def run(self, grid, args):
        tile = [rec for rec in self.trace.passes if rec.stage == "tile"][-1]
        module = parse_module(tile.ir)
        stats = flatten_loops.run(module)
        verify(module, after="flatten_loops")
        check_uses(module)
        seen.append((stats, module))
        Interpreter(module, self.name, self.source_lines, arg_names=self.arg_names).run(grid, args)

    monkeypatch.setattr(CompiledKernel, "run", run)
    launch()
    return seen


def _inputs(M, N, K, seed, b_nk=False):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(M, K, generator=g) * 0.5 + 0.25).half()
    b = (torch.randn(N, K, generator=g) if b_nk else torch.randn(K, N, generator=g)) * 0.5 - 0.25
    return a, b.half()


def _ref(a, b, b_nk=False):
    return a.double() @ (b.double().T if b_nk else b.double())


# M, N, K (ragged, K shorter than one K-tile, K = 0) and programs (more programs than tiles in some)
SHAPES = [(45, 70, 40, 3), (33, 17, 8, 2), (64, 64, 0, 3), (20, 30, 50, 9), (1, 1, 17, 4)]


@pytest.mark.parametrize("M, N, K, sms", SHAPES)
def test_interpreted_pointer_matmul(M, N, K, sms, monkeypatch):
    a, b = _inputs(M, N, K, M + N + K)
    c = torch.full((M, N), float("nan"), dtype=torch.float32)
    seen = _interpret_flattened(monkeypatch, lambda: ptr_matmul[(sms,)](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=16, BN=32, BK=16, GROUP=2, NUM_SMS=sms, FLAT=True))
    assert seen[0][0]["flattened"] == 1, seen[0][0]
    torch.testing.assert_close(c.double(), _ref(a, b), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("M, N, K, sms", SHAPES)
def test_interpreted_descriptor_matmul(M, N, K, sms, monkeypatch):
    a, b = _inputs(M, N, K, M * 3 + N + K, b_nk=True)
    c = torch.full((M, N), float("nan"), dtype=torch.float32)
    seen = _interpret_flattened(monkeypatch, lambda: desc_matmul[(sms,)](
        a, b, c, M, N, K, BM=16, BN=32, BK=16, GROUP=2, NUM_SMS=sms, FLAT=True))
    assert seen[0][0]["flattened"] == 1, seen[0][0]
    torch.testing.assert_close(c.double(), _ref(a, b, b_nk=True), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("M, N, K, sms", SHAPES)
def test_interpreted_block_pointer_matmul(M, N, K, sms, monkeypatch):
    a, b = _inputs(M, N, K, M * 5 + N + K)
    c = torch.full((M, N), float("nan"), dtype=torch.float32)
    seen = _interpret_flattened(monkeypatch, lambda: bp_matmul[(sms,)](
        a, b, c, M, N, K, BM=16, BN=32, BK=16, GROUP=2, NUM_SMS=sms, FLAT=True))
    assert seen[0][0]["flattened"] == 1, seen[0][0]
    torch.testing.assert_close(c.double(), _ref(a, b), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("M, N, K, sms", [(45, 70, 40, 3), (33, 40, 16, 2), (16, 32, 0, 5), (40, 20, 80, 1)])
def test_interpreted_odd_nest(M, N, K, sms, monkeypatch):
    a, b = _inputs(M, N, K, M + 5 * N + K)
    bias = torch.randn(N, generator=torch.Generator().manual_seed(1))
    c = torch.full((M * N + sms,), float("nan"), dtype=torch.float32)
    seen = _interpret_flattened(monkeypatch, lambda: odd_nest[(sms,)](
        a, b, c, bias, M, N, K, BM=16, BN=32, BK=16, NUM_SMS=sms))
    assert seen[0][0]["flattened"] == 1, seen[0][0]
    ref = _ref(a, b) + bias.double()[None, :]
    torch.testing.assert_close(c[:M * N].view(M, N).double(), ref, rtol=1e-3, atol=1e-3)
    tiles = -(-M // 16) * -(-N // 32)
    want = [len(range(tiles - 1 - p, -1, -sms)) for p in range(sms)]
    assert c[M * N:M * N + sms].tolist() == want


def test_flattened_ir_shape(monkeypatch):
    """One loop (marked `flattened`) where the nest was, the tile prologue in an `scf.if` at the top of its body,
    the epilogue in one at the bottom, the accumulator reset by a select at the tile's start (lower_wgmma turns
    it into the wgmma's scale-d), and the nest kept for a K loop that runs zero times."""
    a, b = _inputs(40, 40, 40, 0)
    c = torch.empty(40, 40)
    seen = _interpret_flattened(monkeypatch, lambda: ptr_matmul[(2,)](
        a, b, c, 40, 40, 40, 40, 1, 40, 1, 40, 1, BM=16, BN=32, BK=16, GROUP=2, NUM_SMS=2, FLAT=True))
    module = seen[0][1]
    ops = list(module.kernel.walk())
    version = next(op for op in module.kernel.body.ops if op.name == "scf.if")
    flat = [op for op in version.regions[0].ops if op.name == "scf.for"]
    assert len(flat) == 1 and flat[0].attrs.get("flattened") and "flatten" not in flat[0].attrs
    body = flat[0].regions[0]
    assert not [op for op in body.ops if op.name == "scf.for"]  # no loop left inside
    ifs = [op for op in body.ops if op.name == "scf.if"]
    assert len(ifs) == 2
    assert any(op.name == "arith.divsi" for op in ifs[0].walk())  # the grouped tile order, once per tile
    assert any(op.name == "tt.store" for op in ifs[1].walk())  # the epilogue
    dot = next(op for op in body.ops if op.name == "tt.dot")
    assert dot.operands[2].defining_op.name == "arith.select"
    assert ifs[0].results[0] is not None and body.ops.index(ifs[0]) < body.ops.index(dot) < body.ops.index(ifs[1])
    # the kept nest: the tile loop without its K loop (the epilogue only)
    kept = [op for op in version.regions[1].ops if op.name == "scf.for"]
    assert len(kept) == 1 and not any(o.name in ("scf.for", "tt.dot") for o in list(kept[0].walk())[1:])
    assert sum(op.name == "scf.for" for op in ops) == 2


@kl.jit
def _nest_kinds(X, Y, N, K, BK: tl.constexpr, KIND: tl.constexpr):
    r = tl.arange(0, 16)
    for i in tl.range(0, N, 1, flatten=True):
        acc = tl.zeros((16, 16), dtype=tl.float32)
        if KIND == 0:  # no dot in the inner loop
            for k in range(K):
                acc += tl.load(X + k * 256 + r[:, None] * 16 + r[None, :])
        elif KIND == 1:  # inner bounds that change with the tile
            for k in range(i):
                acc = tl.dot(tl.load(X + k * 256 + r[:, None] * 16 + r[None, :]), tl.load(Y + r[:, None] * 16 + r[None, :]), acc)
        elif KIND == 2:  # three loops deep
            for k in range(K):
                for j in range(2):
                    acc = tl.dot(tl.load(X + k * 256 + r[:, None] * 16 + r[None, :]), tl.load(Y + j + r[:, None] * 16 + r[None, :]), acc)
        else:  # a block pointer made per tile from a base that changes with the tile: no placeholder for it
            p = tl.make_block_ptr(X + i, (N * 16, K * 16), (K * 16, 1), (i * 16, 0), (16, 16), (1, 0))
            for k in range(K):
                acc = tl.dot(tl.load(p, boundary_check=(0, 1)), tl.load(Y + r[:, None] * 16 + r[None, :]), acc)
                p = tl.advance(p, (0, 16))
        tl.store(X + i * 256 + r[:, None] * 16 + r[None, :], acc)


@pytest.mark.parametrize("kind, why", [(0, "no tl.dot"), (1, "bounds depend on the outer loop"),
                                       (2, "loops"), (3, "carried across tiles")])
def test_nests_left_alone_say_why(kind, why, monkeypatch):
    x = torch.randn(4096)
    y = torch.randn(4096)
    seen = _interpret_flattened(monkeypatch, lambda: _nest_kinds[(1,)](x, y, 2, 2, BK=16, KIND=kind))
    stats = seen[0][0]
    assert stats["flattened"] == 0 and len(stats["not_flattened"]) == 1, stats
    assert why in stats["not_flattened"][0], stats


def test_knob_turns_it_off(monkeypatch):
    monkeypatch.setenv("KERNELLAB_FLATTEN", "0")
    a, b = _inputs(40, 40, 40, 0)
    c = torch.full((40, 40), float("nan"))
    seen = _interpret_flattened(monkeypatch, lambda: ptr_matmul[(2,)](
        a, b, c, 40, 40, 40, 40, 1, 40, 1, 40, 1, BM=16, BN=32, BK=16, GROUP=2, NUM_SMS=2, FLAT=True))
    assert seen[0][0]["flattened"] == 0 and "KERNELLAB_FLATTEN=0" in seen[0][0]["not_flattened"][0]
    torch.testing.assert_close(c.double(), _ref(a, b), rtol=1e-3, atol=1e-3)


def test_flatten_false_is_not_touched(monkeypatch):
    a, b = _inputs(40, 40, 40, 0)
    c = torch.full((40, 40), float("nan"))
    seen = _interpret_flattened(monkeypatch, lambda: ptr_matmul[(2,)](
        a, b, c, 40, 40, 40, 40, 1, 40, 1, 40, 1, BM=16, BN=32, BK=16, GROUP=2, NUM_SMS=2, FLAT=False))
    assert seen[0][0] == {"flattened": 0}


# ------------------------------------------------------------------------------------------- built for the GPU
def _build(kernel_name, arch=90, flat=True, BM=128, BN=256, BK=64, warps=8, stages=3):
    from kernellab.compiler.codegen.target import Target

    M = N = K = 512
    for k in (ptr_matmul, desc_matmul, bp_matmul):
        k.device_caches.clear()
    a = torch.empty(M, K, dtype=torch.float16)
    c = torch.empty(M, N, dtype=torch.float16)
    common = dict(BM=BM, BN=BN, BK=BK, GROUP=8, NUM_SMS=132, FLAT=flat, num_warps=warps, num_stages=stages, grid=(1,))
    if kernel_name == "pointers":
        b = torch.empty(K, N, dtype=torch.float16)
        ck = ptr_matmul.warmup(a, b, c, M, N, K, K, 1, N, 1, N, 1, **common)
    elif kernel_name == "block_ptrs":
        b = torch.empty(K, N, dtype=torch.float16)
        ck = bp_matmul.warmup(a, b, c, M, N, K, **common)
    else:
        b = torch.empty(N, K, dtype=torch.float16)
        ck = desc_matmul.warmup(a, b, c, M, N, K, **common)
    try:
        return ck.build_gpu(Target(arch))
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")


def _stats(ck, name):
    return next(rec.stats for rec in ck.trace.passes if rec.name == name)


@pytest.mark.parametrize("kernel_name", ["pointers", "descriptors", "block_ptrs"])
def test_sm90_one_pipelined_loop(kernel_name, tmp_path, monkeypatch):
    """sm_90a, 128x256x64, 8 warps, 3 stages: the fused loop is pipelined with its wgmma left in flight (the tile's
    epilogue waits for it first), descriptor tiles come by TMA and go out by TMA store, no spills; the PTX has one
    wgmma wait_group 1 in the loop and the epilogue's wait_group 0 inside it, and no f32 select (the reset is the
    wgmma's scale-d predicate)."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _build(kernel_name)
    assert _stats(ck, "flatten_loops") == {"flattened": 1}
    pipe = _stats(ck, "pipeline_dot_operands")
    assert pipe["pipelined"] == 1 and pipe.get("overlapped_wgmma") == 1, pipe
    if kernel_name != "pointers":
        assert _stats(ck, "fill_stages_with_tma")["tma"] == 2
        assert _stats(ck, "tma_store")["tma_store"] == 2  # the fused loop's and the kept nest's, one buffer
        assert sum(b["size"] for b in ck.shared_plan if "TMA store" in b["reason"]) == 128 * 256 * 2
    ptx = ck.asm["ptx"]
    assert ck.n_spills == 0, (ck.n_regs, ck.n_spills)
    assert "selp.f32" not in ptx
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", ptx)
    assert waits.count("1") == 1 and waits.count("0") >= 2, waits
    assert re.search(r"wgmma\.mma_async[^;]*, p,", ptx) or "setp.ne.b32 p" in ptx


def test_sm90_knob_off_keeps_the_nest(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELLAB_FLATTEN", "0")
    ck = _build("descriptors")
    assert _stats(ck, "flatten_loops")["flattened"] == 0
    assert "flattened" not in ck.asm["gpu"]


def test_sm90_over_shared_memory_keeps_the_nest(tmp_path, monkeypatch):
    """128x256x128 in 2 stages (192 KB) and the epilogue's 64 KB tile do not fit together in the fused loop (its
    stages live through the epilogue): the build keeps the nest, still in 2 stages, instead of dropping to one."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _build("descriptors", BK=128, stages=2)
    assert ck.n_spills == 0 and ck.shared <= 232448
    assert "over the shared memory" in _stats(ck, "flatten_loops")["not_flattened"][0]
    assert _stats(ck, "pipeline_dot_operands")["pipelined"] == 1
    assert any("nest kept" in n for n in ck.trace.notes), ck.trace.notes


def test_sm80_mma_sync(tmp_path, monkeypatch):
    """sm_80 (mma.sync, cp.async): the fused loop pipelines too; the reset is a select there."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _build("pointers", arch=80, BM=128, BN=128, BK=32, warps=4, stages=3)
    assert _stats(ck, "flatten_loops") == {"flattened": 1}
    assert _stats(ck, "pipeline_dot_operands")["pipelined"] == 1
    assert ck.n_spills == 0, (ck.n_regs, ck.n_spills)


# ------------------------------------------------------------------------------------------- on a GPU
GPU_SHAPES = [(200, 336, 136), (129, 272, 64), (300, 100, 24), (64, 512, 1008), (257, 129, 0), (1000, 1000, 40)]
GPU_CFGS = [(128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (64, 64, 32, 4, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K", GPU_SHAPES)
@pytest.mark.parametrize("cfg", GPU_CFGS, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("kernel_name", ["pointers", "descriptors", "block_ptrs"])
@pytest.mark.parametrize("sms", [5, 1000])
def test_gpu(M, N, K, cfg, kernel_name, sms):
    """Against torch float32, outputs NaN-poisoned; 1000 programs leave most without a tile."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    BM, BN, BK, warps, stages = cfg
    if kernel_name == "descriptors" and (K % 8 or N % 8):
        pytest.skip("descriptor strides must be 16-byte aligned")
    if kernel_name != "pointers" and K == 0:
        pytest.skip("no TMA tensor map of an empty tensor (the interpreted tests cover K = 0 for these)")
    a, b = _inputs(M, N, K, M + N + K, b_nk=kernel_name == "descriptors")
    a, b = a.cuda(), b.cuda()
    c = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    if kernel_name == "pointers":
        ptr_matmul[(sms,)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                           c.stride(1), BM=BM, BN=BN, BK=BK, GROUP=8, NUM_SMS=sms, FLAT=True, num_warps=warps,
                           num_stages=stages)
    elif kernel_name == "block_ptrs":
        bp_matmul[(sms,)](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, GROUP=8, NUM_SMS=sms, FLAT=True, num_warps=warps,
                          num_stages=stages)
    else:
        desc_matmul[(sms,)](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, GROUP=8, NUM_SMS=sms, FLAT=True,
                            num_warps=warps, num_stages=stages)
    torch.cuda.synchronize()
    ref = a.float() @ (b.float().T if kernel_name == "descriptors" else b.float())
    torch.testing.assert_close(c.float(), ref, rtol=1e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K", [(45, 70, 40), (33, 40, 16), (16, 32, 0), (200, 100, 300)])
def test_gpu_odd_nest(M, N, K):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    a, b = _inputs(M, N, K, M + 5 * N + K)
    a, b = a.cuda(), b.cuda()
    bias = torch.randn(N, generator=torch.Generator().manual_seed(1)).cuda()
    c = torch.full((M * N + 32,), float("nan"), dtype=torch.float32, device="cuda")
    c[M * N:] = 0
    odd_nest[(3,)](a, b, c, bias, M, N, K, BM=16, BN=32, BK=16, NUM_SMS=3)
    torch.cuda.synchronize()
    ref = a.double() @ b.double() + bias.double()[None, :]
    torch.testing.assert_close(c[:M * N].view(M, N).double(), ref, rtol=1e-3, atol=1e-3)


# ------------------------------------------------------------------------------------------- IR text in
NEST = """
tt.func @k(%x: !ptr<f32>, %y: !ptr<f32>, %out: !ptr<f32>, %lo: i32, %hi: i32, %klo: i32, %khi: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c2 = arith.constant {value = 2} : i32
  %step = arith.constant {value = STEP} : i32
  %zero = arith.constant {value = 0.0} : tensor<16x16xf32>
  %r = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %rc = tt.expand_dims %r {axis = 0} : tensor<1x16xi32>
  %rr = tt.expand_dims %r {axis = 1} : tensor<16x1xi32>
  %c16 = arith.constant {value = 16} : tensor<16x1xi32>
  %rows = arith.muli %rr, %c16 : tensor<16x1xi32>
  %rb = tt.broadcast %rows : tensor<16x16xi32>
  %cb = tt.broadcast %rc : tensor<16x16xi32>
  %offs = arith.addi %rb, %cb : tensor<16x16xi32>
  %xs = tt.splat %x : tensor<16x16x!ptr<f32>>
  %ys = tt.splat %y : tensor<16x16x!ptr<f32>>
  %os = tt.splat %out : tensor<16x16x!ptr<f32>>
  %tiles = scf.for %lo, %hi, %step, %c0 {flatten = true} : i32 {
  ^bb(%i: i32, %n: i32):
    %ib = tt.splat %i : tensor<16x16xi32>
    %xi = tt.addptr %xs, %ib : tensor<16x16x!ptr<f32>>
    %acc = scf.for %klo, %khi, %c2, %zero : tensor<16x16xf32> {
    ^bb(%k: i32, %a: tensor<16x16xf32>):
      %kb = tt.splat %k : tensor<16x16xi32>
      %o = arith.addi %offs, %kb : tensor<16x16xi32>
      %xp = tt.addptr %xi, %o : tensor<16x16x!ptr<f32>>
      %yp = tt.addptr %ys, %o : tensor<16x16x!ptr<f32>>
      %xa = tt.load %xp : tensor<16x16xf32>
      %yb = tt.load %yp : tensor<16x16xf32>
      %d = tt.dot %xa, %yb, %a {input_precision = "ieee"} : tensor<16x16xf32>
      scf.yield %d
    }
    %n1 = arith.addi %n, %c2 : i32
    %c256 = arith.constant {value = 256} : i32
    %t = arith.muli %n, %c256 : i32
    %tb = tt.splat %t : tensor<16x16xi32>
    %ot = arith.addi %offs, %tb : tensor<16x16xi32>
    %op = tt.addptr %os, %ot : tensor<16x16x!ptr<f32>>
    tt.store %op, %acc
    scf.yield %n1
  }
  %last = arith.constant {value = 8192} : i32
  %lp = tt.addptr %out, %last : !ptr<f32>
  %tf = arith.sitofp %tiles : f32
  tt.store %lp, %tf
  tt.return
}
"""


@pytest.mark.parametrize("lo, hi, step, klo, khi", [(0, 5, 1, 0, 6), (4, -1, -2, 1, 4), (0, 3, 1, 2, 2),
                                                    (0, 3, 2, 0, 1), (3, 3, 1, 0, 4)],
                         ids=["plain", "backwards-odd-k", "empty-k", "one-k", "no-tiles"])
def test_ir_nest_interprets_the_same(lo, hi, step, klo, khi):
    """A nest given as IR text (outer step STEP, inner step 2 from `klo`, outer counter carried, epilogue
    store): flattened, it computes what the nest computes on the interpreter, for empty inner loops and an
    empty outer one too."""
    text = NEST.replace("STEP", str(step))
    g = torch.Generator().manual_seed(lo + 7 * hi)
    x = torch.randn(4096, generator=g)
    y = torch.randn(4096, generator=g)
    outs = []
    for flatten in (False, True):
        m = parse_module(text)
        stats = flatten_loops.run(m) if flatten else None
        if flatten:
            assert stats["flattened"] == 1, stats
            verify(m, after="flatten_loops")
            check_uses(m)
        out = torch.full((8193,), float("nan"))
        Interpreter(m, "k", text.splitlines(), arg_names=["x", "y", "out", "lo", "hi", "klo", "khi"]).run(
            (1,), [x, y, out, lo, hi, klo, khi])
        outs.append(out)
    assert torch.equal(torch.nan_to_num(outs[0], 1e30), torch.nan_to_num(outs[1], 1e30))
    assert outs[1][8192].item() == 2 * len(range(lo, hi, step))
