"""The structured CompileTrace: value and op records checked against the kernel source, the printed IR text
and layouts derived by hand; the printer's positions against the text it printed; the records survive
pickling, JSON and the disk cache."""
from __future__ import annotations

import json
import pickle
import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.printer import print_positions
from kernellab.compiler.trace import PassRecord, Snapshot, from_json, to_json
from tests.corpus import make_kernels


@kl.jit
def add(x, y, z, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    a = tl.load(x + o, mask=m)
    b = tl.load(y + o, mask=m)
    tl.store(z + o, a + b, mask=m)


@kl.jit
def row_sum(x, out, N: tl.constexpr):
    rows = tl.arange(0, 16)[:, None]
    cols = tl.arange(0, N)[None, :]
    acc = tl.zeros((16,), dtype=tl.float32)
    for k in range(0, 4):
        acc += tl.sum(tl.load(x + rows * N + cols), axis=1)
    tl.store(out + tl.arange(0, 16), acc)


def _add():
    x = torch.randn(4096)
    return add.warmup(x, x, x, 4096, BLOCK=1024, grid=(4,))


def _line_of(ck, text):
    return next(i for i, s in enumerate(ck.source_lines, 1) if text in s)


def test_value_records_of_a_small_kernel():
    ck = _add().build_gpu()
    snap = ck.trace.snapshot("gpu")
    lines = ck.asm["gpu"].splitlines()
    # the parameters: types as printed, the def line as their source line
    params = [v for v in snap.values if v.kind == "param"]
    assert [v.name for v in params] == ["%x", "%y", "%z", "%n"]
    assert [v.type for v in params] == ["!ptr<f32>"] * 3 + ["i32"] and params[3].elem_bytes == 4
    assert all(v.line == _line_of(ck, "def add(") and v.defined_by == "frontend" for v in params)
    # the two loads: 1024 floats over 4 warps, 4 per thread in one 16-byte access: #blocked<[4], [32], [4], [0]>
    a, b = snap.value("a"), snap.value("%b")
    for v, src in ((a, "a = tl.load(x"), (b, "b = tl.load(y")):
        assert v.kind == "result" and v.op == "tt.load" and v.line == _line_of(ck, src)
        assert v.layout == "#blocked<[4], [32], [4], [0]>" and v.shape == (1024,) and v.elem == "f32"
        assert v.elem_bytes == 4 and v.type == f"tensor<1024xf32, {v.alias}>"
        assert f"{v.alias} = {v.layout}" in lines  # the alias line at the top of the IR says the same
        assert lines[v.ir_line].lstrip().startswith(f"{v.name} = tt.load ") and f": {v.type} loc(" in lines[v.ir_line]
        op = snap.ops[v.op_index]
        assert op.name == "tt.load" and op.results == (v.name,) and op.attr("vec") == 4 and op.line == v.line
    # the offsets: made by the frontend at the line of `o = ...`, used by the loads' address arithmetic
    o = snap.value("o")
    assert o.line == _line_of(ck, "o = tl.program_id(0)") and o.layout is not None
    assert lines[o.ir_line].lstrip().startswith("%o = ")
    # every value the IR defines has one record, named as printed
    defined = set(re.findall(r"(%[\w.]+)(?=(?:, %[\w.]+)* = )", ck.asm["gpu"]))
    assert defined <= {v.name for v in snap.values}
    # the accesses: two loads and a store, 16 bytes per thread, coalesced
    assert [(x.op, x.value, x.vec, x.bytes) for x in snap.accesses] == [
        ("tt.load", "%a", 4, 16), ("tt.load", "%b", 4, 16), ("tt.store", snap.ops[snap.accesses[2].op_index].operands[1],
                                                             4, 16)]
    assert all(x.coalescing.coalesced and x.coalescing.sectors == 16 for x in snap.accesses)
    assert snap.num_warps == 4 and snap.shared_plan == () and snap.barriers == ()


def test_defining_passes_and_block_arguments():
    x = torch.randn(16 * 64)
    ck = row_sum.warmup(x, torch.empty(16), N=64, grid=(1,)).build_gpu()
    h = torch.randn(64, 64).half()
    mm = make_kernels(kl, tl)["matmul_kernel"].warmup(h, h, h, 64, 64, 64, 64, 1, 64, 1, 64, 1, BLOCK_M=32,
                                                      BLOCK_N=32, BLOCK_K=32, GROUP_M=4).build_gpu()
    for c in (ck, mm):
        names = [p.name for p in c.trace.passes]
        snap = c.trace.snapshot("gpu")
        for name in {op.name for op in snap.ops}:
            # the IR texts are the reference: the first pass whose output prints an op of this name
            first = next(k for k, p in enumerate(c.trace.passes) if re.search(rf"(?:= |^\s*){re.escape(name)}\b",
                                                                                p.ir, re.M))
            made = [names.index(op.defined_by) for op in snap.ops if op.name == name]
            assert min(made) >= first, (name, names[first])  # no op is made before its kind appears (passes may
            if first > 0:                                    # rebuild ops later: a pipelined loop is a new scf.for)
                assert first in made, (name, names[first])
    local = [op.defined_by for op in mm.trace.snapshot("gpu").ops if op.name == "ttg.local_alloc"]
    assert local == ["pipeline_dot_operands"] * 2
    snap = ck.trace.snapshot("gpu")
    # the loop's iteration argument: a block argument of scf.for, at the line of the `for`
    acc = next(v for v in snap.values if v.kind == "arg" and v.name.startswith("%acc"))
    assert acc.op == "block argument of scf.for" and acc.line == _line_of(ck, "for k in range")
    assert ck.asm["gpu"].splitlines()[acc.ir_line].lstrip().startswith("^bb(")
    assert snap.ops[acc.op_index].name == "scf.for"
    # the tile snapshot knows the tile passes: the reduction's combine region and the sum
    tile = ck.trace.snapshot("tile")
    assert any(op.name == "tt.reduce" and len(op.region_lines) == 1 for op in tile.ops)
    assert {v.defined_by for v in tile.values} <= set(names) | {"frontend"}


def test_printer_positions_map_lines_to_ops():
    ck = _add()
    module = ck.module
    printed = print_positions(module)
    lines = printed.text.split("\n")[:-1]
    assert len(lines) == len(printed.rows) == len(printed.loc_spans)
    ops = [op for op in module.kernel.walk()]
    op_rows = [(i, obj) for i, (kind, obj, _) in enumerate(printed.rows) if kind == "op"]
    assert [obj for _, obj in op_rows] == ops  # one header line per op, in walk order
    for i, op in op_rows:
        results = ", ".join("%" + printed.names[id(r)] for r in op.results)
        assert lines[i].lstrip().startswith(f"{results} = {op.name}" if results else op.name)
        if op.loc is not None and not op.regions:
            s, e = printed.loc_spans[i]
            assert lines[i][s:e] == f" loc({op.loc.line}:{op.loc.col})" and e == len(lines[i])
    # the per-line source lines agree with the loc(...) each line prints
    src = printed.source_lines()
    for line, loc in zip(lines, src):
        m = re.search(r"loc\((?:\"[^\"]*\":)?(\d+)", line)
        if m:
            assert loc == int(m.group(1))
    # the trace's records carry the same positions
    rec = ck.trace.stage("tile")
    assert rec.ir == printed.text and rec.positions.source == src
    assert rec.positions.loc == tuple(printed.loc_spans)


def test_every_pass_records_positions_and_the_stage():
    ck = _add().build_gpu()
    stages = [p.stage for p in ck.trace.passes]
    assert stages[0] == "tile" and stages[-3:] == ["llir", "ptx", "cubin"][-len(stages[-3:]):]
    for p in ck.trace.passes:
        if p.stage in ("tile", "gpu"):
            assert len(p.positions.source) == len(p.ir.splitlines())
    assert ck.trace.stage("gpu").ir == ck.asm["gpu"] and ck.trace.stage("tile").ir == ck.asm["tile"]
    # the frontend, every tile or GPU pass that changed the IR (the graph view draws them) and the last pass of
    # each stage keep a snapshot; the LLVM IR, PTX and cubin records keep none
    kept = [p.name for p in ck.trace.passes if p.snapshot is not None]
    expected = [p.name for i, p in enumerate(ck.trace.passes) if p.stage in ("tile", "gpu")
                and (i == 0 or p.changed or p is ck.trace.stage(p.stage))]
    assert kept == expected and kept[0] == "frontend" and kept[-1] == "insert_barriers"
    assert "assign_layouts" in kept


def test_shared_plan_and_barriers_point_at_their_ops():
    h = torch.randn(64, 64).half()
    K = make_kernels(kl, tl)
    ck = K["matmul_kernel"].warmup(h, h, h, 64, 64, 64, 64, 1, 64, 1, 64, 1, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32,
                                   GROUP_M=4, num_stages=1).build_gpu()
    snap = ck.trace.snapshot("gpu")
    lines = ck.asm["gpu"].splitlines()
    assert [(b.op, b.offset, b.size, list(b.live)) for b in ck.trace.shared_plan] == \
        [(b["op"], b["offset"], b["size"], b["live"]) for b in ck.shared_plan]
    for b in snap.shared_plan:
        op = snap.ops[b.op_index]
        assert op.name == b.op and op.point == b.live[0]
        assert f"smem_offset = {b.offset}" in lines[op.ir_line] and f"smem_bytes = {b.size}" in lines[op.ir_line]
    (bar,) = snap.barriers
    assert "ttg.barrier" in lines[bar.ir_line] and bar.reason == "write-after-read on shared memory"
    assert bar.kind == "bar.sync" and bar.point == snap.shared_plan[0].live[0]  # before the dot that owns the buffer
    assert snap.ops[bar.op_index].point is None  # made after the plan: it has no program point of its own
    numbered = [op for op in snap.ops if op.point is not None]
    assert [op.point for op in numbered] == list(range(snap.program_points))


def test_trace_pickles_and_round_trips_through_json():
    ck = _add().build_gpu()
    t = ck.trace
    back = pickle.loads(pickle.dumps(t))
    assert back.passes == t.passes and back.snapshot("gpu").value("a") == t.snapshot("gpu").value("a")
    for rec in t.passes:
        assert from_json(PassRecord, json.loads(json.dumps(to_json(rec)))) == rec
    snap = t.snapshot("gpu")
    assert isinstance(snap, Snapshot) and from_json(Snapshot, json.loads(json.dumps(to_json(snap)))) == snap


def test_gpu_records_come_back_from_the_disk_cache(tmp_path, monkeypatch):
    from kernellab.runtime import jit as J

    if not J._can_assemble():
        pytest.skip("no ptxas or nvJitLink: GPU stages are not cached")
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x = torch.randn(2048)
    first = add.warmup(x, x, x, 2048, BLOCK=512, grid=(4,), num_warps=2).build_gpu()
    add.cache.clear()
    second = add.warmup(x, x, x, 2048, BLOCK=512, grid=(4,), num_warps=2).build_gpu()
    assert any("loaded from the disk cache" in n for n in second.trace.notes)
    assert second.trace.snapshot("gpu") == first.trace.snapshot("gpu")
    assert second.trace.stage("gpu").positions == first.trace.stage("gpu").positions


def test_one_stage_table_from_source_to_cubin(tmp_path, monkeypatch):
    """compile (launch) runs STAGES "frontend".."tile", build_gpu runs "gpu".."cubin" (or "ptx" without ptxas):
    the trace's records come in the table's order, every stage leaving its artifact."""
    import torch

    import kernellab as kl
    import kernellab.language as tl
    from kernellab.compiler.backend import STAGES
    from kernellab.runtime import jit as J

    assert [s.name for s in STAGES] == ["frontend", "tile", "gpu", "llir", "ptx", "cubin"]
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(J, "_can_assemble", lambda: False)

    @kl.jit
    def double(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    ck = double.warmup(torch.ones(64), 64, BLOCK=64, grid=(1,))
    stages = [p.stage for p in ck.trace.passes]
    assert ck.trace.passes[0].name == "frontend" and set(stages) == {"tile"}
    ck.build_gpu()
    order = [p.stage for p in ck.trace.passes]
    firsts = [s for i, s in enumerate(order) if i == 0 or order[i - 1] != s]
    assert firsts == ["tile", "gpu", "llir", "ptx"]  # no ptxas here: the table stops at "ptx"
    assert all(k in ck.asm for k in ("tile", "gpu", "llir", "ptx"))
