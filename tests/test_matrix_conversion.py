"""Layout conversions through 8x8 matrices (gpu/matrix_conversion.py, codegen/lower_shape.py; knob
KERNELLAB_CONVERSION_LDMATRIX=on): one side moves 16-byte vectors, the other ldmatrix / stmatrix (.trans).

CPU: every plan is run on a model of the instructions written from the PTX ISA's description of ldmatrix and
stmatrix (not from the planner's own tables): each source thread's registers go to shared memory, each result
thread's registers come back, and must be the elements the result layout gives it; the address formulas codegen
emits (`address_terms`) reproduce every access's address table. The sm_90a PTX of the transpose idioms has
st.shared.v4 + ldmatrix.x4.trans where the knob is on and 16-bit tiles fit, and the padded scratch otherwise.
GPU (marked gpu): transposes and other conversions against torch for several shapes, dtypes and warps."""
from __future__ import annotations

import random
import re
import shutil

import pytest

from kernellab.compiler.gpu import matrix_conversion as mc
from kernellab.compiler.gpu.layouts import Blocked, parse_layout

ROWS = parse_layout("#blocked<[1, 8], [4, 8], [4, 1], [1, 0]>")
COLS = parse_layout("#blocked<[8, 1], [8, 4], [1, 4], [0, 1]>")
ANY = 1 << 30  # no cap on a thread's bytes (the planner's correctness, whatever codegen then takes)


def _run(plan, src, dst, shape, esize, warps):
    """Model the plan's accesses on a byte-addressed scratch: returns each result thread's registers (the element
    coordinates they received)."""
    cs, cd = mc._thread_coords(src, shape, warps), mc._thread_coords(dst, shape, warps)
    nthreads = 32 * warps
    mem = {}  # byte address -> (element, byte of it)

    def put(addr, el):
        for k in range(esize):
            assert addr + k not in mem, "two elements on one byte"
            assert 0 <= addr + k < plan.bytes
            mem[addr + k] = (el, k)

    def get(addr):
        el = mem[addr][0]
        assert all(mem[addr + k] == (el, k) for k in range(esize)), "an element read across two"
        return el

    nres = len(cd[0])
    out = [[None] * nres for _ in range(nthreads)]
    vec_side, mat_side = (cs, cd) if plan.side == "ldmatrix" else (cd, cs)

    def matrix_elements(acc, warp):
        """(thread, register, byte address) of every element a matrix instruction of `warp` moves, from the ISA:
        lane 8m + i addresses row i of matrix m (16 bytes); without .trans lane t's word for matrix m is row t // 4,
        bytes 4 (t % 4)..+3; with .trans (b16) its halves are column t // 4 of rows 2 (t % 4) and 2 (t % 4) + 1."""
        rows = [acc.addrs[warp * 32 + ln] for ln in range(32)]
        for m in range(plan.count):
            for a in rows[8 * m:8 * m + 8]:
                assert a % 16 == 0
            for t in range(32):
                for h in range(plan.word_regs):
                    reg = acc.regs[m * plan.word_regs + h]
                    if plan.trans:
                        addr = rows[8 * m + 2 * (t % 4) + h] + 2 * (t // 4)
                    else:
                        addr = rows[8 * m + t // 4] + 4 * (t % 4) + h * esize
                    yield warp * 32 + t, reg, addr

    if plan.side == "ldmatrix":
        for acc in plan.vector:
            for tid in range(nthreads):
                assert acc.addrs[tid] % (plan.vec * esize) == 0
                for i, r in enumerate(acc.regs):
                    put(acc.addrs[tid] + i * esize, cs[tid][r])
        for acc in plan.matrix:
            for w in range(warps):
                for tid, reg, addr in matrix_elements(acc, w):
                    out[tid][reg] = get(addr)
    else:
        for acc in plan.matrix:
            for w in range(warps):
                for tid, reg, addr in matrix_elements(acc, w):
                    put(addr, cs[tid][reg])
        for acc in plan.vector:
            for tid in range(nthreads):
                assert acc.addrs[tid] % (plan.vec * esize) == 0
                for i, r in enumerate(acc.regs):
                    out[tid][r] = get(acc.addrs[tid] + i * esize)
    assert len(mem) == shape[0] * shape[1] * esize
    del vec_side, mat_side
    return out, cd


def _check(plan, src, dst, shape, esize, warps):
    out, cd = _run(plan, src, dst, shape, esize, warps)
    assert out == cd
    for acc in plan.matrix + plan.vector:
        c, basis = mc.thread_basis(acc.addrs)
        terms, disjoint = mc.address_terms(basis)
        lo, hi = mc.split_constant(c, basis)
        for tid, a in enumerate(acc.addrs):
            assert (mc.eval_terms(terms, disjoint, tid) ^ lo) + hi == a


def test_transpose_fp16_is_v4_and_ldmatrix_trans():
    for shape, src, dst in [((64, 64), COLS, ROWS)]:
        p = mc.plan(src, dst, shape, 2, 4)
        assert (p.side, p.trans, p.count, p.vec) == ("ldmatrix", True, 4, 8)
        assert len(p.matrix) == 4 and len(p.vector) == 4
        assert p.wavefronts == (16, 16)  # conflict-free both sides (4 accesses x 4 phases)
        _check(p, src, dst, shape, 2, 4)


def _blocked(shape, warps, rng):
    """A random blocked layout of `warps` warps covering `shape` exactly (None where it cannot)."""
    for _ in range(50):
        order = rng.choice([(1, 0), (0, 1)])
        spt = [rng.choice([1, 2, 4, 8, 16]) for _ in shape]
        t0 = rng.choice([1, 2, 4, 8, 16, 32])
        tpw = (t0, 32 // t0)
        w0 = rng.choice([d for d in (1, 2, 4, 8) if d <= warps and warps % d == 0])
        wpc = (w0, warps // w0)
        if all(s * t * w <= n for s, t, w, n in zip(spt, tpw, wpc, shape)):
            return Blocked(tuple(spt), tpw, wpc, order)
    return None


@pytest.mark.parametrize("esize", [1, 2, 4])
def test_random_blocked_pairs_simulate(esize):
    """Random blocked pairs over shapes and warps: every plan found moves every element to its thread."""
    rng = random.Random(1234 + esize)
    found = 0
    for _ in range(60):
        shape = (rng.choice([16, 32, 64, 128]), rng.choice([16, 32, 64, 128]))
        warps = rng.choice([1, 2, 4, 8])
        if shape[0] * shape[1] < 32 * warps:
            continue
        src, dst = _blocked(shape, warps, rng), _blocked(shape, warps, rng)
        if src is None or dst is None or src == dst:
            continue
        p = mc.plan(src, dst, shape, esize, warps, max_bytes=ANY)
        if p is not None:
            found += 1
            _check(p, src, dst, shape, esize, warps)
    assert found > 10


@pytest.mark.parametrize("shape, warps", [((64, 64), 4), ((32, 128), 4), ((128, 64), 8), ((16, 16), 1),
                                          ((128, 128), 8), ((16, 256), 2)])
@pytest.mark.parametrize("esize", [1, 2, 4])
def test_transposes_simulate(shape, warps, esize):
    """Row-vectorized to column-vectorized tiles (both directions): the transposes users write."""
    vec = 16 // esize
    rows = Blocked((1, vec), (4, 8), (warps, 1), (1, 0))
    cols = Blocked((vec, 1), (8, 4), (1, warps), (0, 1))
    for src, dst in ((cols, rows), (rows, cols)):
        if any(i.replicated for lay in (src, dst) for i in lay.dims_info(shape)):
            continue
        p = mc.plan(src, dst, shape, esize, warps, max_bytes=ANY)
        if p is not None:
            _check(p, src, dst, shape, esize, warps)
        if esize == 2 and shape[0] >= 32 and shape[1] >= 32:
            assert p is not None and p.vec == 8 and p.trans


def test_no_plan_past_the_per_thread_cap():
    rows = Blocked((1, 8), (4, 8), (4, 1), (1, 0))
    cols = Blocked((8, 1), (8, 4), (1, 4), (0, 1))
    assert mc.plan(cols, rows, (64, 64), 2, 4) is not None            # 32 fp16 a thread: 64 bytes
    assert mc.plan(cols, rows, (128, 128), 2, 4) is None              # 128 fp16 a thread: 256 bytes
    assert mc.plan(cols, rows, (128, 128), 2, 4, max_bytes=ANY) is not None


def test_no_plan_where_layouts_do_not_fit():
    assert mc.plan(COLS, ROWS, (64, 64), 8, 4) is None               # 8-byte elements
    assert mc.plan(COLS, ROWS, (64, 64), 2, 8) is None               # layouts of 4 warps in an 8-warp program
    assert mc.plan(COLS, ROWS, (8, 64), 2, 4) is None                # replicated rows
    assert mc.plan(COLS, ROWS, (64, 64), 2, 4, arch=70) is None      # no ldmatrix before sm_75
    assert mc.plan(COLS, ROWS, (48, 64), 2, 4) is None               # not a power of two


def test_bits_layout_pair_simulates():
    """A `Bits` layout (a reshaped accumulator's) on either side."""
    from kernellab.compiler.gpu.layouts import Bits

    bits = Bits.make((("r0", "r1", "l2", "l3", "l4", "w0"), ("r2", "l0", "l1", "r3", "r4", "w1")))
    shape = (64, 64)
    for src, dst in ((bits, ROWS), (ROWS, bits), (bits, COLS)):
        p = mc.plan(src, dst, shape, 2, 4, max_bytes=ANY)
        if p is not None:
            _check(p, src, dst, shape, 2, 4)


# ---------------------------------------------------------------------------------------------- PTX (sm_90a)
torch = pytest.importorskip("torch")
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")


def _transposes():
    import kernellab as kl
    import kernellab.language as tl
    from tests.idioms import make_idioms

    w = next(w for w in make_idioms(kl.jit, tl) if w.name == "transpose")
    return {v.name: v.kernel for v in w.variants}


KERNELS = {}


def _build(variant, dtype, bm, bn, warps, knob, monkeypatch, tmp_path):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    if knob:
        monkeypatch.setenv("KERNELLAB_CONVERSION_LDMATRIX", knob)
    else:
        monkeypatch.delenv("KERNELLAB_CONVERSION_LDMATRIX", raising=False)
    if not KERNELS:
        KERNELS.update(_transposes())
    k = KERNELS[variant]
    x, y = torch.empty(1024, 1024, dtype=dtype), torch.empty(1024, 1024, dtype=dtype)
    ck = k.warmup(x, y, 1024, 1024, 1024, 1024, grid=(1024 // bm, 1024 // bn), BM=bm, BN=bn, num_warps=warps)
    ck.build_gpu(Target(90))
    return ck


CFGS = [(64, 64, 4), (32, 128, 4), (128, 64, 8)]


@needs_ptxas
@pytest.mark.parametrize("variant", ["trans", "strided", "block_ptr"])
@pytest.mark.parametrize("bm, bn, warps", CFGS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int16"])
def test_16bit_transposes_are_v4_stores_and_ldmatrix_trans(variant, bm, bn, warps, dtype, monkeypatch, tmp_path):
    """Triton 3.6's form: per thread BM*BN/(32*warps)/8 st.shared.v4 and as many ldmatrix.x4.trans, nothing else
    through shared memory; no more registers than the padded scratch's build plus 4, no spills (ptxas)."""
    dt = getattr(torch, dtype)
    on = _build(variant, dt, bm, bn, warps, "on", monkeypatch, tmp_path / "on")
    off = _build(variant, dt, bm, bn, warps, None, monkeypatch, tmp_path / "off")
    ptx = on.asm["ptx"]
    n = bm * bn // (32 * warps) // 8
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16", ptx)) == n
    assert len(re.findall(r"st\.shared\.v4\.b32", ptx)) == n
    assert len(re.findall(r"\b(?:st|ld)\.shared", ptx)) == n
    assert "ldmatrix" not in off.asm["ptx"]
    assert on.n_spills == 0 and on.n_regs <= off.n_regs + 4, (on.n_regs, off.n_regs)


@needs_ptxas
def test_fallbacks(monkeypatch, tmp_path):
    """The padded scratch where the matrices take no fewer wavefronts (a 64x64 fp32 transpose: 4-byte accesses
    either way), for 8-byte elements, and past 64 bytes of the tile a thread (matrix_conversion.MATRIX_BYTES: ptxas
    keeps more of the tile live around the .aligned matrix instructions; a 32x128 fp32 tile at 4 warps is 128
    bytes, 128x128 fp16 at 4 warps 256)."""
    for i, (dt, bm, bn) in enumerate([(torch.float32, 64, 64), (torch.float64, 64, 64), (torch.float32, 32, 128),
                                      (torch.float16, 128, 128)]):
        ck = _build("trans", dt, bm, bn, 4, "on", monkeypatch, tmp_path / str(i))
        assert "matrix" not in ck.asm["ptx"] and "st.shared" in ck.asm["ptx"], (dt, bm, bn)


@needs_ptxas
@pytest.mark.parametrize("variant", ["trans", "strided"])
def test_8bit_tiles_read_by_plain_ldmatrix(variant, monkeypatch, tmp_path):
    """int8 (32 bytes a thread): each lane's b32 word of a matrix is 4 bytes of a 16-byte row, ldmatrix.x4 without
    .trans, the fewer wavefronts the model counts (40 against 80 at 64x64); assembled without spills."""
    ck = _build(variant, torch.int8, 64, 64, 4, "on", monkeypatch, tmp_path)
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", ck.asm["ptx"])) == 2
    assert ck.n_spills == 0


@needs_ptxas
@pytest.mark.parametrize("bm, bn, warps", CFGS)
def test_stmatrix_form(bm, bn, warps, monkeypatch, tmp_path):
    """KERNELLAB_CONVERSION_LDMATRIX=stmatrix: the mirror form (sm_90), stmatrix.x4.trans from the source's
    registers and ld.shared.v4 into the result's, assembled by ptxas without spills."""
    ck = _build("trans", torch.float16, bm, bn, warps, "stmatrix", monkeypatch, tmp_path)
    ptx = ck.asm["ptx"]
    n = bm * bn // (32 * warps) // 8
    assert len(re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16", ptx)) == n
    assert len(re.findall(r"ld\.shared\.v4\.b32", ptx)) == n
    assert "ldmatrix" not in ptx and "st.shared" not in ptx
    assert ck.n_spills == 0


@needs_ptxas
def test_sm80_reads_by_ldmatrix_even_preferring_stmatrix(monkeypatch, tmp_path):
    """stmatrix is sm_90's: an sm_80 build takes the ldmatrix form (from sm_75) and assembles."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELLAB_CONVERSION_LDMATRIX", "stmatrix")
    if not KERNELS:
        KERNELS.update(_transposes())
    x = torch.empty(1024, 1024, dtype=torch.float16)
    ck = KERNELS["trans"].warmup(x, x, 1024, 1024, 1024, 1024, grid=(16, 16), BM=64, BN=64, num_warps=4)
    ck.build_gpu(Target(80))
    ptx = ck.asm["ptx"]
    assert "stmatrix" not in ptx and ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans") == 4
    assert ck.n_spills == 0


def test_knob_is_a_codegen_switch():
    from kernellab.runtime.codegen_env import CODEGEN_ENV

    assert "KERNELLAB_CONVERSION_LDMATRIX" in CODEGEN_ENV


# ---------------------------------------------------------------------------------------------- GPU
def _values(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g) * 100
        x.view(-1)[:4] = torch.tensor([float("inf"), -float("inf"), 65504.0, -0.0])
        return x.to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max + 1, shape, generator=g, dtype=torch.int64).to(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["on", "stmatrix", None])
@pytest.mark.parametrize("variant", ["trans", "strided", "block_ptr"])
@pytest.mark.parametrize("bm, bn, warps", CFGS + [(16, 16, 1), (64, 32, 2), (128, 128, 8), (16, 128, 2)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int16", "float32", "int8"])
@pytest.mark.parametrize("shape", [(300, 520), (70, 130)])
def test_gpu_transposes_match_torch(knob, variant, bm, bn, warps, dtype, shape, monkeypatch):
    """y = x.T bit for bit, every element written (the output is poisoned first), with and without the knob."""
    if shape == (70, 130) and knob != "on":
        pytest.skip("the small ragged shape with the knob on only")
    if knob:
        monkeypatch.setenv("KERNELLAB_CONVERSION_LDMATRIX", knob)
    else:
        monkeypatch.delenv("KERNELLAB_CONVERSION_LDMATRIX", raising=False)
    if not KERNELS:
        KERNELS.update(_transposes())
    dt = getattr(torch, dtype)
    M, N = shape
    x = _values((M, N), dt, seed=M + N + warps).cuda()
    y = torch.full((N, M), 7 if not dt.is_floating_point else float("nan"), dtype=dt, device="cuda")
    import kernellab as kl

    KERNELS[variant][(kl.cdiv(M, bm), kl.cdiv(N, bn))](x, y, M, N, x.stride(0), y.stride(0), BM=bm, BN=bn,
                                                        num_warps=warps)
    torch.cuda.synchronize()
    ref = x.t().contiguous()
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32}[x.element_size()]
    assert torch.equal(y.view(bits).cpu(), ref.view(bits).cpu())


@needs_ptxas
def test_lab_view_shows_the_matrix_form(monkeypatch, tmp_path):
    """The lab's shared-memory view reads the same decision (layout_model.matrix_conversion_plan): with the knob,
    the transposed fp16 tile's conversion is 16-byte stores and ldmatrix.x4.trans, each one wavefront a phase;
    without it, the padded scratch's accesses as before."""
    from kernellab.viz import data as D

    ck = _build("trans", torch.float16, 64, 64, 4, "on", monkeypatch, tmp_path / "on")
    (buf,) = [b for b in D.smem_map(ck.trace)["buffers"] if b["op"] == "ttg.convert_layout"]
    phases = buf["bank"]["phases"]
    assert sorted(k.split("(")[1] for k in phases) == ["16 B stores)", "ldmatrix.x4.trans)"]
    assert all(v["ways"] == 1 and v["instructions"] == 4 for v in phases.values())
    monkeypatch.delenv("KERNELLAB_CONVERSION_LDMATRIX")
    (buf,) = [b for b in D.smem_map(ck.trace)["buffers"] if b["op"] == "ttg.convert_layout"]
    assert not any("ldmatrix" in k for k in buf["bank"]["phases"])
