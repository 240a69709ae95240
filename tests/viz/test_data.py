"""The lab's data layer, checked against the CompileTrace, the kernel source and hand-derived layouts.

Each view's data is compared with something independent of the function computing it: the trace's
own records, the kernel's source text, layouts worked out by hand from their definition, and
expected bank-conflict / occupancy numbers computed in comments.
"""
from __future__ import annotations

import itertools
import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.gpu.layouts import parse_layout
from kernellab.viz import data as D
from tests.corpus import make_kernels


@kl.jit
def add(x, y, z, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK); m = o < n  # noqa: E702
    tl.store(z + o, tl.load(x + o, mask=m) + tl.load(y + o, mask=m), mask=m)


K = make_kernels(kl, tl)


def _build(name):
    x1 = torch.randn(4096)
    x2 = torch.randn(64, 64)
    h = torch.randn(64, 64).half()
    if name == "add":
        return add.warmup(x1, x1, x1, 4096, BLOCK=1024, grid=(4,)).build_gpu()
    if name == "softmax":
        return K["softmax_kernel"].warmup(x2, x2, 64, 64, 64, 64, BLOCK=128).build_gpu()
    if name == "matmul":
        return K["matmul_kernel"].warmup(h, h, h, 64, 64, 64, 64, 1, 64, 1, 64, 1, BLOCK_M=32, BLOCK_N=32,
                                         BLOCK_K=32, GROUP_M=4).build_gpu()
    if name == "transpose":
        return K["transpose_kernel"].warmup(x2, x2, 64, 64, BM=32, BN=32).build_gpu()
    if name == "cumsum":
        return K["cumsum_kernel"].warmup(x2, x2, 64, BLOCK=128).build_gpu()
    if name == "layer_norm":
        return K["layer_norm_kernel"].warmup(x2, x2, x1, x1, x1, x1, 64, 64, 1e-5, BLOCK=128).build_gpu()
    raise KeyError(name)


NAMES = ["add", "softmax", "matmul", "transpose", "cumsum", "layer_norm"]


@pytest.fixture(scope="module")
def kernels():
    return {n: _build(n) for n in NAMES}


# ----------------------------------------------------------------------------- passes and IR text

@pytest.mark.parametrize("name", NAMES)
def test_pass_rows_mirror_the_trace(kernels, name):
    trace = kernels[name].trace
    rows = D.pass_rows(trace)
    assert [r["name"] for r in rows] == [p.name for p in trace.passes]
    assert [r["index"] for r in rows] == list(range(len(trace.passes)))
    assert [r["changed"] for r in rows] == [p.changed for p in trace.passes]
    assert [r["ms"] for r in rows] == pytest.approx([p.seconds * 1e3 for p in trace.passes])
    assert [r["description"] for r in rows] == [p.description for p in trace.passes]
    for r, p in zip(rows, trace.passes):
        for k, v in p.stats.items():
            if v:
                assert f"{k}={v}" in r["summary"]
    # the GPU stages the docs promise are all there, in order
    names = [r["name"] for r in rows]
    assert names[0] == "frontend"
    tail = ["prefetch_fma_dot_loads", "assign_layouts", "remove_layout_conversions", "store_in_value_layout",
            "merge_conversions", "reuse_conversions", "share_uniform_runs", "stage_invariant_dot_operands",
            "pipeline_dot_operands",
            "register_dot_operand", "fill_stages_with_tma", "warpgroup_turns", "warp_specialize", "overlap_softmax",
            "pingpong", "tma_store", "issue_loads_early", "sink_conversions",
            "allocate_shared", "insert_barriers", "to_llvm", "to_ptx", "to_cubin"]
    assert names[-len(tail):] == tail


def test_ir_diff_reconstructs_both_sides(kernels):
    trace = kernels["softmax"].trace
    for prev, cur in zip(trace.passes, trace.passes[1:]):
        diff = D.ir_diff(prev.ir, cur.ir)
        assert {t for t, _ in diff} <= {"same", "add", "del"}
        assert [l for t, l in diff if t != "add"] == prev.ir.splitlines()
        assert [l for t, l in diff if t != "del"] == cur.ir.splitlines()
        assert any(t != "same" for t, _ in diff) == (prev.ir != cur.ir)
    assert D.ir_diff("a\nb\nc", "a\nx\nc") == [("same", "a"), ("del", "b"), ("add", "x"), ("same", "c")]


def test_ir_lines_with_locs_strips_and_reads_locations(kernels):
    ir = kernels["softmax"].asm["gpu"]
    assert kernels["softmax"].trace.stage("gpu").ir == ir
    got = D.ir_lines_with_locs(kernels["softmax"].trace)
    lines = ir.splitlines()
    assert len(got) == len(lines)
    for (text, loc), raw in zip(got, lines):
        assert "loc(" not in text
        own = re.findall(r"loc\((\d+):\d+\)", raw)
        if own:
            assert loc == int(own[-1])
            assert raw.startswith(text.rstrip())
        elif re.match(r"(%\S+(, %\S+)* = )?scf\.for\b", raw.strip()) or (raw.strip().endswith("{") and "tt.reduce" in raw):
            # region ops print their loc on the closing brace; the header line inherits it
            assert loc is not None
    # the scf.for header and its closing brace point at the `for` statement of the source
    k = next(i for i, l in enumerate(lines) if re.match(r"(%\S+(, %\S+)* = )?scf\.for\b", l.strip()))
    src = kernels["softmax"].source_lines
    assert src[got[k][1] - 1].strip().startswith("for r in range(")


@pytest.mark.parametrize("name", NAMES)
def test_op_source_map_points_at_the_kernel_source(kernels, name):
    ck = kernels[name]
    checks = {"tt.load": "tl.load", "tt.store": "tl.store", "tt.dot": "tl.dot", "tt.scan": "tl.cumsum",
              "tt.make_range": "tl.arange", "tt.get_program_id": "tl.program_id",
              "ttg.async_copy": "tl.load", "ttg.local_alloc": "tl.load"}
    for stage in ("tile", "gpu"):
        ir = ck.asm[stage]
        fwd, rev = D.op_source_map(ck.trace.stage(stage))
        lines = ir.splitlines()
        seen = set()
        for i, line in enumerate(lines):
            for op, src_call in checks.items():
                if re.search(rf"= {re.escape(op)} |^\s*{re.escape(op)} ", line):
                    assert i in fwd, line
                    assert src_call in ck.source_lines[fwd[i] - 1], (op, fwd[i], ck.source_lines[fwd[i] - 1])
                    seen.add(op)
        assert "tt.load" in seen or "ttg.async_copy" in seen  # a pipelined dot's tiles are copied, not loaded
        # the reverse map is exactly the inverse of the forward map
        assert {(i, l) for l, idx in rev.items() for i in idx} == set(fwd.items())


def test_op_source_map_of_the_brief_kernel_hits_tl_load(kernels):
    ck = kernels["add"]
    fwd, _ = D.op_source_map(ck.trace)
    loads = [i for i, l in enumerate(ck.asm["gpu"].splitlines()) if " tt.load " in l]
    assert len(loads) == 2
    for i in loads:
        assert "tl.load" in ck.source_lines[fwd[i] - 1]
    lo, hi = D.kernel_source_range(ck.trace)
    assert ck.source_lines[lo - 1].lstrip().startswith("def add(")
    assert "tl.store" in ck.source_lines[hi - 1]


# ----------------------------------------------------------------------------- values and layouts

def _aliases_by_regex(ir):
    return dict(re.findall(r"^(#L\d+) = (.+)$", ir, flags=re.M))


@pytest.mark.parametrize("name", ["add", "softmax", "matmul", "transpose"])
def test_tensor_values_find_the_load_with_the_layout_the_ir_says(kernels, name):
    ir = kernels[name].asm["gpu"]
    aliases = _aliases_by_regex(ir)
    values = D.tensor_values(kernels[name].trace)
    by_name = {v["name"]: v for v in values}
    loads = re.findall(r"^\s*(%[\w.]+) = tt\.load .*?\{vec = (\d+)\} : tensor<([^,]+), (#L\d+)>", ir, flags=re.M)
    assert loads or (name == "matmul" and "ttg.async_copy" in ir)
    for res, vec, body, alias in loads:
        v = by_name[res]
        assert v["op"] == "tt.load"
        assert v["alias"] == alias and v["layout"] == aliases[alias]
        dims = body.split("x")
        assert v["shape"] == tuple(int(d) for d in dims[:-1]) and v["elem"] == dims[-1]
        assert v["vec"] == int(vec)
        assert " tt.load " in ir.splitlines()[v["ir_line"]]
    # every value defined with a layout is found (results and block arguments alike)
    defined = re.findall(r"(%[\w.]+)(?:, %[\w.]+)* = [\w.]+ [^\n]*? : tensor<", ir)
    assert {d for d in defined} <= set(by_name)


def test_tensor_values_of_the_add_kernel(kernels):
    vals = D.tensor_values(kernels["add"].trace)
    loads = [v for v in vals if v["op"] == "tt.load"]
    assert len(loads) == 2
    for v in loads:
        assert v["layout"] == "#blocked<[4], [32], [4], [0]>" and v["shape"] == (1024,) and v["elem"] == "f32"
        assert v["vec"] == 4 and v["line"] == kernels["add"].source_lines.index(
            "    tl.store(z + o, tl.load(x + o, mask=m) + tl.load(y + o, mask=m), mask=m)") + 1


def _all_layouts(kernels):
    seen = {}
    for ck in kernels.values():
        for v in D.tensor_values(ck.trace):
            seen[(v["layout"], v["shape"])] = ck.num_warps
    return sorted(seen.items())


def test_layout_grid_covers_every_element_once_and_agrees_with_dims_info(kernels):
    layouts = _all_layouts(kernels)
    assert len(layouts) >= 8
    assert any(text.startswith("#slice") for (text, _), _ in layouts)
    for (text, shape), nw in layouts:
        lay = parse_layout(text)
        g = D.layout_grid(text, shape, nw)
        regs = lay.registers(shape)
        infos = lay.dims_info(shape)
        numel = 1
        for s in shape:
            numel *= s
        # every thread holds len(registers) elements
        assert g["registers"] == len(regs)
        assert len(g["holders"]) == nw * 32 * len(regs)
        # each element of the shape is represented exactly once
        reps = [h[0] for h in g["holders"] if h[4]]
        assert len(reps) == numel == len(set(reps)), (text, shape)
        assert set(g["elements"]) == set(reps)
        all_idx = set(itertools.product(*[range(s) for s in shape]))
        assert set(g["copies"]) == all_idx
        # copies: every holder is listed, exactly one representative per element
        assert sum(len(c) for c in g["copies"].values()) == len(g["holders"])
        assert all(sum(1 for c in cs if c[3]) == 1 for cs in g["copies"].values())
        # the element index is the documented dims_info formula
        for idx, warp, lane, r, _ in g["holders"][:: max(1, len(g["holders"]) // 257)]:
            for d, info in enumerate(infos):
                part = (((warp // info.warp_div) % info.warps) * info.warp_stride
                        + ((lane // info.lane_div) % info.lanes) * info.lane_stride)
                assert idx[d] == (part + regs[r][d]) % info.size


def test_layout_grid_matches_hand_derived_mappings():
    # 1-D: #blocked<[4], [32], [4], [0]> on 1024 elements: thread t owns 4 consecutive elements at
    # 4t..4t+3 of each 512-element CTA tile; tile k puts them in registers 4k..4k+3.
    g = D.layout_grid("#blocked<[4], [32], [4], [0]>", (1024,), 4)
    for i in range(1024):
        t = (i % 512) // 4
        assert g["elements"][(i,)] == (t // 32, t % 32, (i // 512) * 4 + i % 4)
    assert g["replication"] == 1
    # 2-D: #blocked<[1, 4], [4, 8], [4, 1], [1, 0]> on 32x32: lanes are 8 along columns (fastest)
    # then 4 along rows; warps stack along rows; the 16-row CTA tile repeats twice.
    g = D.layout_grid("#blocked<[1, 4], [4, 8], [4, 1], [1, 0]>", (32, 32), 4)
    for r in range(32):
        for c in range(32):
            rr = r % 16
            lane = (rr % 4) * 8 + (c // 4) % 8
            warp = rr // 4
            reg = (r // 16) * 4 + c % 4  # 4 column registers, then the second row repetition
            assert g["elements"][(r, c)] == (warp, lane, reg)
    # replication: 128 threads over a 64-element tile -> threads t and t+64 hold the same element
    g = D.layout_grid("#blocked<[1], [32], [4], [0]>", (64,), 4)
    assert g["replication"] == 2
    for i in range(64):
        holders = sorted((w * 32 + l) for w, l, _, _ in g["copies"][(i,)])
        assert holders == [i, i + 64]
        assert g["elements"][(i,)] == (i // 32, i % 32, 0)
    # slice: rows of #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>: the 4 lanes along columns hold copies,
    # lane with column component 0 is the representative
    g = D.layout_grid("#slice<1, #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>>", (32,), 4)
    assert g["replication"] == 4
    for i in range(32):
        assert g["elements"][(i,)] == ((i % 32) // 8, (i % 8) * 4, 0)
        assert sorted(l for _, l, _, _ in g["copies"][(i,)]) == [(i % 8) * 4 + k for k in range(4)]


def test_coalescing_of_real_and_bad_accesses(kernels):
    acc = D.accesses(kernels["add"].trace, 4)
    assert [a["op"] for a in acc] == ["tt.load", "tt.load", "tt.store"]
    for a in acc:
        c = a["coalescing"]
        # 32 lanes x 16 B contiguous = 512 B = 16 full sectors per warp instruction
        assert c["vec"] == 4 and c["bytes_per_access"] == 16 and c["sectors"] == 16 == c["ideal_sectors"]
        assert c["coalesced"] and c["consecutive_lanes"] and c["instructions"] == 2
    # transposed store: the layout's fastest dim is 0 (rows of y are columns of x), still coalesced
    st = [a for a in D.accesses(kernels["transpose"].trace, 4) if a["op"] == "tt.store"][0]
    assert st["coalescing"]["fast_dim"] == 0 and st["coalescing"]["coalesced"]
    # 8 elements per thread but 4 per access: lane l starts at 32*l bytes, every sector half used
    bad = D.coalescing("#blocked<[8], [32], [4], [0]>", (1024,), 4, vec=4, elem_bytes=4)
    assert bad["efficiency"] == pytest.approx(0.5) and not bad["coalesced"] and not bad["consecutive_lanes"]
    # lanes walking the slow dim of a row-major tile: each lane's 4 bytes in its own sector
    strided = D.coalescing("#blocked<[1, 1], [32, 1], [4, 1], [1, 0]>", (128, 32), 4, vec=1, elem_bytes=4)
    assert strided["lanes_along_fast"] == 1 and strided["sectors"] == 32
    assert strided["efficiency"] == pytest.approx(4 / 32)


def test_layout_grid_carries_access_info():
    g = D.layout_grid("#blocked<[4], [32], [4], [0]>", (1024,), 4, vec=4, elem_bytes=4)
    assert g["access"]["coalesced"] and g["access"]["bytes_per_access"] == 16


def test_bank_conflict_model_on_the_transpose_conversion(kernels):
    # write in #blocked<[1,4],[4,8],[4,1],[1,0]>: for register r, lane l writes row l//8 (+4w), column
    # 4*(l%8)+r; word = row*32 + col, bank = col: 8 banks, each hit by 4 rows -> 4-way.
    w = D.bank_conflicts("#blocked<[1, 4], [4, 8], [4, 1], [1, 0]>", (32, 32), 4, 4)
    assert w["ways"] == 4
    # read in #blocked<[4,1],[8,4],[1,4],[0,1]>: lane l reads row 4*(l%8)+r, column l//8 (+4w):
    # 4 banks, each hit by 8 rows -> 8-way.
    r = D.bank_conflicts("#blocked<[4, 1], [8, 4], [1, 4], [0, 1]>", (32, 32), 4, 4)
    assert r["ways"] == 8
    # consecutive lanes on consecutive words: conflict-free
    assert D.bank_conflicts("#blocked<[1], [32], [4], [0]>", (128,), 4, 4)["ways"] == 1
    # f16 pairs share a word: two lanes per word is a broadcast, not a conflict
    assert D.bank_conflicts("#blocked<[1], [32], [4], [0]>", (128,), 4, 2)["ways"] == 1
    # as codegen lowers the conversion, rows are padded by 16 bytes (pitch 36 words) and the write moves 16 bytes
    # per lane: 8 lanes write one whole row per phase (conflict-free); the read's 32 rows 4*(l%8)+r now fall in
    # banks (4*row + col) % 32: 8 banks, each hit by 4 rows -> 4-way instead of 8
    assert D.bank_conflicts("#blocked<[1, 4], [4, 8], [4, 1], [1, 0]>", (32, 32), 4, 4, pitch=36, vec=4)["ways"] == 1
    assert D.bank_conflicts("#blocked<[4, 1], [8, 4], [1, 4], [0, 1]>", (32, 32), 4, 4, pitch=36)["ways"] == 4
    # the compiler picks the pitch with the fewest wavefronts (gpu/scratch.py): 4 bytes of padding (33 words),
    # both sides 4 bytes a lane and conflict-free; the lab shows what codegen does
    assert D.bank_conflicts("#blocked<[4, 1], [8, 4], [1, 4], [0, 1]>", (32, 32), 4, 4, pitch=33)["ways"] == 1
    m = D.smem_map(kernels["transpose"].trace)
    (buf,) = m["buffers"]
    assert buf["op"] == "ttg.convert_layout" and buf["bank"]["ways"] == 1 and buf["size"] == 32 * 33 * 4
    assert sorted(v["ways"] for v in buf["bank"]["phases"].values()) == [1, 1]
    assert all("(4 B)" in k for k in buf["bank"]["phases"])


# ----------------------------------------------------------------------------- shared memory

@pytest.mark.parametrize("name", NAMES)
def test_smem_map_agrees_with_the_plan_and_the_module(kernels, name):
    ck = kernels[name]
    m = D.smem_map(ck.trace)
    assert m["available"]
    assert m["total"] == ck.shared
    assert m["limit"] == 228 * 1024 and m["fits"]
    assert [(b["offset"], b["size"], b["live"], b["op"]) for b in m["buffers"]] == \
        [(b.offset, b.size, b.live, b.op) for b in ck.trace.shared_plan]
    for b in m["buffers"]:
        # the buffer's op line in the GPU IR is the op that owns it
        assert re.match(r"^(?:%[\w.]+(?:, %[\w.]+)* = )?(\S+)", b["ir_text"]).group(1) == b["op"]
        assert f"smem_offset = {b['offset']}" in b["ir_text"] and f"smem_bytes = {b['size']}" in b["ir_text"]
        assert b["end"] == b["offset"] + b["size"]
    stats = {p.name: p.stats for p in ck.trace.passes}
    waits = ck.asm["gpu"].count("ttg.async_wait ")
    assert len(m["barriers"]) == stats["insert_barriers"]["barriers"] + waits
    assert len(m["buffers"]) == stats["allocate_shared"]["buffers"]


def test_smem_map_barriers_and_limit(kernels):
    h = torch.randn(64, 64).half()
    unpipelined = K["matmul_kernel"].warmup(h, h, h, 64, 64, 64, 64, 1, 64, 1, 64, 1, BLOCK_M=32, BLOCK_N=32,
                                            BLOCK_K=32, GROUP_M=4, num_stages=1).build_gpu()
    m = D.smem_map(unpipelined.trace)
    (bar,) = m["barriers"]
    lines = unpipelined.asm["gpu"].splitlines()
    assert "ttg.barrier" in lines[bar["ir_line"]] and bar["reason"] == "write-after-read on shared memory"
    # the barrier sits right before the op at its program point: the dot that owns the buffer
    assert bar["point"] == m["buffers"][0]["live"][0]
    assert "tt.dot" in lines[bar["ir_line"] + 1]
    # pipelined (num_stages=3): no inserted barrier; the waits order the stage buffers, which live across the loop
    m = D.smem_map(kernels["matmul"].trace)
    lines = kernels["matmul"].asm["gpu"].splitlines()
    waits = [b for b in m["barriers"] if "ttg.async_wait" in lines[b["ir_line"]]]
    assert len(waits) == len(m["barriers"]) == 2
    assert "pending = 1" in lines[waits[0]["ir_line"]] and "pending = 0" in lines[waits[1]["ir_line"]]
    stage_bufs = [b for b in m["buffers"] if b["op"] == "ttg.local_alloc"]
    assert [b["stages"] for b in stage_bufs] == [3, 3]
    for b in stage_bufs:
        assert b["size"] == 3 * b["stage_bytes"] and b["live"][0] < waits[0]["point"] and b["live"][1] >= waits[1]["point"]
    small = D.smem_map(kernels["matmul"].trace, limit=1024)
    assert not small["fits"] and small["fraction"] == pytest.approx(m["total"] / 1024)


def test_smem_map_without_gpu_stages():
    x = torch.randn(256)
    ck = add.warmup(x, x, x, 256, BLOCK=256, num_warps=2)  # not built for the GPU
    m = D.smem_map(ck.trace)
    assert not m["available"] and "build_gpu" in m["note"]


# ----------------------------------------------------------------------------- code

def test_code_summary(kernels):
    ck = kernels["matmul"]
    s = D.code_summary(ck)
    assert s["regs"] == ck.n_regs == ck.report["n_regs"]
    assert s["spills"] == ck.n_spills and s["shared"] == ck.shared == D.smem_map(ck.trace)["total"]
    assert s["ptx_lines"] == len(ck.asm["ptx"].splitlines())
    # hand occupancy for 4 warps/block: regs r -> ceil(32r/256)*256 per warp; blocks = min(64/4, 32,
    # 65536 // (4 * that), 228K // (shared + 1K))
    per_warp = -(-ck.n_regs * 32 // 256) * 256
    blocks = min(16, 32, 65536 // (4 * per_warp), (228 * 1024) // (ck.shared + 1024))
    assert s["occupancy"]["blocks_per_sm"] == blocks
    assert s["occupancy"]["warps_per_sm"] == 4 * blocks
    assert s["occupancy"]["occupancy"] == pytest.approx(4 * blocks / 64)
    if D.find_sass_tool():
        assert "Function : matmul_kernel" in s["sass"] and s["sass_reason"] == ""
        assert "/* 0x" not in s["sass"] and ".section" not in s["sass"]
        assert re.search(r"/\*[0-9a-f]{4}\*/\s+\S+", s["sass"])  # instructions with their offsets
    else:
        assert s["sass"] is None and "nvidia-cuda-nvdisasm" in s["sass_reason"]


def test_occupancy_limits():
    assert D.occupancy(255, 0, 4)["limiter"] == ["registers"]
    assert D.occupancy(32, 100 * 1024, 4)["blocks_per_sm"] == 2  # 228K // 101K
    assert D.occupancy(32, 0, 8)["warps_per_sm"] == 64


def test_sass_without_cubin_or_tool(monkeypatch):
    assert D.sass(None)[0] is None
    monkeypatch.delenv("KERNELLAB_NVDISASM", raising=False)
    monkeypatch.setenv("KERNELLAB_CUOBJDUMP", "/nonexistent/cuobjdump")
    D._SASS_CACHE.clear()
    text, why = D.sass(b"not a cubin")
    assert text is None and "nvdisasm was not found" in why and "pip install nvidia-cuda-nvdisasm" in why
    monkeypatch.delenv("KERNELLAB_CUOBJDUMP")
    monkeypatch.setattr(D.shutil, "which", lambda name: None)
    monkeypatch.setattr(D, "_tool_dirs", lambda: [])
    assert D.find_sass_tool() is None and D.sass(b"still not a cubin")[1] == D.NO_SASS_TOOL


_FAKE_NVDISASM = r"""#!/bin/sh
[ "$1" = -c ] || exit 3
cat <<'OUT'
	.target	sm_90a
	.elftype	@"ET_EXEC"
//--------------------- .text.add_kernel        --------------------------
	.section	.text.add_kernel,"ax",@progbits
	.align	128
        .global         add_kernel
        .type           add_kernel,@function
add_kernel:
.text.add_kernel:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   EXIT ;
OUT
"""


def test_sass_through_a_wheels_nvdisasm(monkeypatch, tmp_path):
    """Without nvdisasm or cuobjdump on PATH, the SASS view finds nvdisasm where the `nvidia-cuda-nvdisasm`
    wheel puts it (site-packages/nvidia/cu13/bin) and shows its listing in cuobjdump's shape."""
    bindir = tmp_path / "site-packages" / "nvidia" / "cu13" / "bin"
    bindir.mkdir(parents=True)
    tool = bindir / "nvdisasm"
    tool.write_text(_FAKE_NVDISASM)
    tool.chmod(0o755)
    for env in ("KERNELLAB_CUOBJDUMP", "KERNELLAB_NVDISASM"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr(D.shutil, "which", lambda name: None)
    monkeypatch.setattr(D, "_tool_dirs", lambda: [tmp_path / "nowhere", bindir])
    assert D.find_sass_tool() == ("nvdisasm", str(tool))
    D._SASS_CACHE.clear()
    text, why = D.sass(b"a cubin for the fake tool")
    assert why == "" and text.splitlines() == ["\t.target\tsm_90a", "\t\tFunction : add_kernel",
                                               "        /*0000*/                   LDC R1, c[0x0][0x28] ;",
                                               ".L_x_1:", "        /*0010*/                   EXIT ;"]


# ----------------------------------------------------------------------------- dataflow graph

@pytest.mark.parametrize("name", ["softmax", "matmul", "cumsum"])
def test_dataflow_dot_nodes_edges_and_clusters(kernels, name):
    ir = kernels[name].asm["tile"]
    dot = D.dataflow_dot(kernels[name].trace)
    lines = ir.splitlines()
    n_ops = sum(1 for l in lines if re.match(r"^\s*(%[\w.]+(, %[\w.]+)* = )?[a-z_]+\.[\w.]+", l.strip())
                and not l.strip().startswith("tt.func"))
    assert len(re.findall(r"^\s*n\d+ \[", dot, flags=re.M)) == n_ops
    n_regions = sum(1 for l in lines if l.rstrip().endswith("{") and not l.strip().startswith("tt.func"))
    assert dot.count("subgraph cluster_") >= n_regions
    assert dot.count("{") == dot.count("}")
    nodes = set(re.findall(r"^\s*(\w+) \[label", dot, flags=re.M))
    edges = re.findall(r"^\s*(\w+) -> (\w+);", dot, flags=re.M)
    assert edges and all(a in nodes and b in nodes for a, b in edges)
    # every load has an incoming edge from its pointer
    for i, l in enumerate(lines):
        if " tt.load " in l:
            assert any(b == f"n{i}" for _, b in edges)


def test_render_dot_when_graphviz_is_installed(kernels):
    from kernellab.viz.graph import find_dot, render_dot

    svg = render_dot(D.dataflow_dot(kernels["softmax"].trace))
    if find_dot() is None:
        assert svg is None
        return
    assert svg.startswith("<svg") and "tt.load" in svg and 'stroke="black"' not in svg


def _tile(type_text):
    """The trace's record of a shared-memory tile, from its IR type (read by the compiler's own type parser)."""
    from kernellab.compiler.snapshot import shared_tile
    from kernellab.compiler.types import parse_type

    return shared_tile(parse_type(type_text))


@pytest.mark.parametrize("type_text, reads, writes", [
    # 128-byte swizzle (wgmma): 8 rows of one chunk and 8 threads' 16-byte writes both hit 8 bank groups
    ("!memdesc<3x128x64xf16, order=1,0, pad=0, swizzle=128>", 1, 1),
    ("!memdesc<3x32x128xf16, order=0,1, pad=0, swizzle=64>", 1, 1),
    # rows padded by 16 bytes (ldmatrix): reads conflict-free; 80-byte rows put two of 8 writes in one group
    ("!memdesc<3x128x32xf16, order=1,0, pad=8>", 1, 2),
    # no padding, no swizzle: the 8 rows of a column sit 64 bytes apart, 4 of them in each group they use
    ("!memdesc<3x128x32xf16, order=1,0, pad=0>", 4, 1),
])
def test_stage_buffer_bank_conflicts(type_text, reads, writes):
    est = D.stage_buffer_banks(_tile(type_text))
    (r_name, r), (w_name, w) = est["phases"].items()
    assert r["ways"] == reads and w["ways"] == writes and est["ways"] == max(reads, writes)
    assert r_name.startswith("wgmma" if "swizzle" in type_text else "ldmatrix")


def test_swizzle_grid_is_a_latin_square():
    g = D.swizzle_grid(_tile("!memdesc<3x128x64xf16, order=1,0, pad=0, swizzle=128>"))
    assert g["chunks"] == 8 and len(g["rows"]) == 8
    assert g["rows"][0] == list(range(8)) and g["rows"][3][0] == 3  # chunk 0 of row 3 sits in group 3
    for row in g["rows"]:
        assert sorted(row) == list(range(8))
    for col in zip(*g["rows"]):
        assert sorted(col) == list(range(8))
