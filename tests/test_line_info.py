"""Source lines through the whole compile: codegen's `!dbg` locations reach the PTX as `.loc` lines and the cubin as
a line table (ptxas -lineinfo); the CompileTrace maps each line of LLVM IR and PTX to its source line; and line
info changes nothing of the code: the same PTX instructions, registers and SASS with it and without it."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.backend import compile_to_cubin
from kernellab.compiler.codegen.line_map import llvm_positions, ptx_positions
from kernellab.compiler.codegen.target import Target
from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.trace import CompileTrace, PassRecord, from_json, to_json

from .corpus import make_kernels

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
KERNELS = make_kernels(kl, tl)
DEBUG = re.compile(r"^\s*(\.loc|\.file|\$L__(tmp|func_begin|func_end)\d+:|\.section\s+\.debug)")


@kl.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.exp(x) * 2.0 + 1.0
    tl.store(y_ptr + offs, y, mask=mask)


def _line_of(fn, text: str) -> int:
    """The file line of the statement of `fn` that contains `text`."""
    import inspect

    lines, first = inspect.getsourcelines(fn.fn if hasattr(fn, "fn") else fn)
    return first + next(i for i, s in enumerate(lines) if text in s)


def _scale(line_info=True, arch=90):
    x = torch.randn(1000)
    ck = scale_kernel.warmup(x, x, 1000, BLOCK=256, grid=(4,))
    out = compile_to_cubin(parse_module(ck.asm["tile"]), CompileTrace("scale_kernel"),
                           GpuOptions(num_warps=4, line_info=line_info), Target(arch), assemble=shutil.which("ptxas")
                           is not None)
    return ck, out


def _instructions(ptx: str) -> list:
    return [ln for ln in ptx.splitlines() if ln.strip() and not DEBUG.match(ln)]


def test_ptx_has_loc_lines_for_the_kernel_statements():
    ck, out = _scale()
    ptx = out["ptx"]
    files = re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, re.M)
    assert len(files) == 1 and files[0][1].endswith("test_line_info.py")
    locs = {int(m) for m in re.findall(r"^\s*\.loc\s+1\s+(\d+)\s+\d+", ptx, re.M)}
    for stmt in ("tl.program_id(0)", "mask = offs < n", "tl.load(", "tl.exp(x)", "tl.store("):
        assert _line_of(scale_kernel, stmt) in locs, stmt
    assert ".target sm_90a\n" in ptx  # line directives only: no `debug` target, no DWARF sections
    assert ".debug_info" not in ptx and ".debug_abbrev" not in ptx
    assert "!dbg" in out["llir"] and "DICompileUnit" in out["llir"]


def test_line_info_off_gives_no_loc():
    _, out = _scale(line_info=False)
    assert ".loc" not in out["ptx"] and "!dbg" not in out["llir"]


def test_trace_maps_llvm_and_ptx_lines_to_source_lines():
    ck = scale_kernel.warmup(torch.randn(1000), torch.randn(1000), 1000, BLOCK=256, grid=(4,))
    tr = CompileTrace("scale_kernel")
    compile_to_cubin(parse_module(ck.asm["tile"]), tr, GpuOptions(num_warps=4), Target(90),
                     assemble=shutil.which("ptxas") is not None)
    exp_line = _line_of(scale_kernel, "tl.exp(x)")
    for stage, must in (("llir", "ex2.approx"), ("ptx", "ex2.approx")):
        rec = tr.stage(stage)
        lines = rec.ir.splitlines()
        assert rec.positions is not None and len(rec.positions.source) == len(lines)
        mine = [ln for ln, s in zip(lines, rec.positions.source) if s == exp_line]
        assert any(must in ln for ln in mine), (stage, mine[:5])
        store_line = _line_of(scale_kernel, "tl.store(")
        stores = [ln for ln, s in zip(lines, rec.positions.source) if s == store_line]
        assert any("st.global" in ln for ln in stores), stage  # a masked store is inline PTX in the LLVM IR too
        # no source line for declarations, labels and metadata
        for ln, s in zip(lines, rec.positions.source):
            if ln.startswith(("declare", "!", ".visible", ".reg", "$L")) or ln.strip().startswith((".reg", ".param")):
                assert s is None, ln
    llir = tr.stage("llir")
    spans = [(ln, p) for ln, p in zip(llir.ir.splitlines(), llir.positions.loc) if p]
    assert spans and all(ln[a:b].lstrip(" ,").startswith("!dbg !") for ln, (a, b) in spans)
    back = from_json(PassRecord, to_json(tr.stage("ptx")))  # through the disk cache
    assert back.positions == tr.stage("ptx").positions


def test_position_parsers_on_handwritten_text():
    ptx = ("\t.file\t1 \"k.py\"\n.visible .entry k(\n)\n{\n\t.reg .b32 %r<3>;\n\t.loc\t1 5 3\n\tmov.u32 %r1, %tid.x;\n"
           "$L__BB0_1:\n\t// begin inline asm\n\tex2.approx.f32 %r2, %r1;\n\t.loc\t1 7 0\n@%p1 bra $L__BB0_1;\n}\n")
    src = ptx_positions(ptx).source
    assert src == (None, None, None, None, None, 5, 5, None, 5, 5, 7, 7, None)
    ll = ('define void @k() !dbg !3\n{\n  %".1" = add i32 1, 2 , !dbg !9\n  ret void, !dbg !10\n}\n'
          '!9 = !DILocation(column: 1, line: 12, scope: !3)\n!10 = !DILocation(column: 0, line: 14, scope: !3)\n')
    pos = llvm_positions(ll)
    assert pos.source[:5] == (None, None, 12, 14, None)
    line = ll.splitlines()[2]
    assert line[pos.loc[2][0]:pos.loc[2][1]] == " , !dbg !9"


def _sass(cubin: bytes) -> list:
    from kernellab.viz.data import find_nvdisasm

    with __import__("tempfile").NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([find_nvdisasm(), "-c", f.name], capture_output=True, text=True, check=True).stdout
    return [re.sub(r"/\*[0-9a-f]{4}\*/", "", ln) for ln in out.splitlines() if "/*" in ln and ";" in ln]


CORPUS = [("add_kernel", lambda: (torch.randn(5000), torch.randn(5000), torch.empty(5000), 5000),
           dict(BLOCK=1024, grid=(5,))),
          ("softmax_kernel", lambda: (torch.randn(64, 64), torch.empty(64, 64), 64, 64, 64, 64), dict(BLOCK=128, grid=(64,))),
          ("matmul_kernel", lambda: (torch.randn(128, 128).half(),) * 3 + (128, 128, 128, 128, 1, 128, 1, 128, 1),
           dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, grid=(4,)))]


@needs_ptxas
@pytest.mark.parametrize("name,args,kw", CORPUS, ids=[c[0] for c in CORPUS])
def test_line_info_changes_no_code(name, args, kw):
    """The same PTX instructions (the .loc lines aside), the same registers and spills, and (with nvdisasm) the
    same SASS, with line info and without (tests/corpus.py kernels; the real matmul and attention were checked
    the same way when this landed)."""
    from kernellab.viz.data import find_nvdisasm

    ck = KERNELS[name].warmup(*args(), **kw)
    outs = [compile_to_cubin(parse_module(ck.asm["tile"]), CompileTrace(name), GpuOptions(num_warps=4, line_info=li),
                             Target(90)) for li in (False, True)]
    off, on = outs
    assert ".loc" in on["ptx"] and ".loc" not in off["ptx"]
    assert _instructions(on["ptx"]) == _instructions(off["ptx"])
    for k in ("n_regs", "n_spills", "shared", "local"):
        assert on["report"][k] == off["report"][k], k
    if find_nvdisasm():
        assert _sass(on["cubin"]) == _sass(off["cubin"])


@needs_ptxas
def test_sass_lines_map_to_source_lines():
    from kernellab.viz import linked
    from kernellab.viz.data import find_nvdisasm

    if not find_nvdisasm():
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm)")
    _, out = _scale()
    lines, src, why = linked.sass_lines(out["cubin"])
    assert not why and len(lines) == len(src)
    store = _line_of(scale_kernel, "tl.store(")
    assert any("STG" in ln for ln, s in zip(lines, src) if s == store)
    assert any("MUFU.EX2" in ln for ln, s in zip(lines, src) if s == _line_of(scale_kernel, "tl.exp(x)"))
    _, plain = _scale(line_info=False)
    lines, src, why = linked.sass_lines(plain["cubin"])
    assert lines and all(s is None for s in src) and "line info" in why


@pytest.mark.gpu
def test_line_info_kernel_runs_correctly_on_the_gpu():
    """A kernel built with line info (the default) launches and computes the right values."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.randn(5000, device="cuda")
    y = torch.full_like(x, float("nan"))
    scale_kernel[(20,)](x, y, 5000, BLOCK=256)
    torch.cuda.synchronize()
    ref = torch.exp(x.double()) * 2 + 1
    torch.testing.assert_close(y.double(), ref, rtol=2e-6, atol=1e-6)
    ck = scale_kernel.warmup(x, y, 5000, BLOCK=256, grid=(20,))  # the specialization just launched
    assert ".loc" in ck.asm["ptx"] and ck.trace.stage("ptx").positions is not None


# --------------------------------------------------------------------------- a helper from another file

from tests.helpers_other_file.helper_mod import scaled_exp  # noqa: E402


@kl.jit
def uses_other_file_kernel(x_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(z_ptr + offs, scaled_exp(tl.load(x_ptr + offs, mask=m), 2.0), mask=m)


def test_an_inlined_helper_from_another_file_keeps_its_file():
    """The helper's ops carry its module's file through the tile and GPU IR (Positions.files, OpRecord.file), the
    LLVM IR (a DILexicalBlockFile scope) and the PTX (a second `.file`): nothing says "line 12" of the kernel's
    file for the helper's `y = x * s`."""
    import inspect

    import tests.helpers_other_file.helper_mod as hm

    x = torch.randn(100)
    ck = uses_other_file_kernel.warmup(x, x, 100, BLOCK=128).build_gpu(Target(90))
    helper_file = inspect.getsourcefile(hm)
    mul_line = _line_of(hm.scaled_exp, "y = x * s")
    seen = set()
    for p in ck.trace.passes:
        if p.positions is None or p.name == "frontend":  # before inlining, the helper is its own function
            continue
        pos = p.positions
        mine = {pos.source[i] for i in range(len(pos.source)) if pos.file_of(i) == helper_file}
        assert mul_line in mine or p.stage == "ptx" and mine, (p.name, mine)
        assert all(f in (None, helper_file) for f in pos.files)
        seen.add(p.stage)
    assert {"tile", "gpu", "llir", "ptx"} <= seen
    assert re.search(r'^\s*\.file\s+2\s+"' + re.escape(helper_file) + '"', ck.asm["ptx"], re.M)
    snap = ck.trace.snapshot("tile")
    assert any(o.file == helper_file and o.line == mul_line for o in snap.ops)
    assert all(o.file is None for o in snap.ops if o.line == _line_of(uses_other_file_kernel, "tl.store("))
    # the trace's JSON (the disk cache) keeps the files
    rec = next(p for p in ck.trace.passes if p.stage == "ptx")
    assert from_json(PassRecord, to_json(rec)).positions.files == rec.positions.files


@kl.jit
def other_file_reduce_kernel(x_ptr, z_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(z_ptr, hm_row_max(tl.load(x_ptr + offs)) + tl.max(tl.load(x_ptr + offs), axis=0))


from tests.helpers_other_file.helper_mod import row_max as hm_row_max  # noqa: E402


def test_shared_buffers_and_barriers_name_the_file_of_their_line():
    """A shared-memory buffer (here a cross-warp reduction's scratch) made for an op of a helper from another
    module carries that module's file with its line (SharedBuffer.file, in the module's plan and the trace's JSON);
    the kernel's own reduction has none: the lab quotes each buffer's line from the right file."""
    import inspect

    import tests.helpers_other_file.helper_mod as hm

    x = torch.randn(1024)
    ck = other_file_reduce_kernel.warmup(x, x, BLOCK=1024).build_gpu(Target(90))
    helper_file = inspect.getsourcefile(hm)
    plan = ck.trace.snapshot("gpu").shared_plan
    reduces = [b for b in plan if b.op == "tt.reduce"]
    assert len(reduces) == 2, plan
    theirs = [b for b in reduces if b.file == helper_file]
    mine = [b for b in reduces if b.file is None]
    assert len(theirs) == 1 and len(mine) == 1, reduces
    assert theirs[0].line == _line_of(hm.row_max, "tl.max(x, axis=0)")
    assert mine[0].line == _line_of(other_file_reduce_kernel, "tl.store(")
    assert {b.get("file") for b in ck.shared_plan if b["op"] == "tt.reduce"} == {helper_file, None}
    snap = ck.trace.snapshot("gpu")
    assert from_json(type(snap), to_json(snap)).shared_plan == snap.shared_plan
    assert all(bar.file in (None, helper_file) for bar in snap.barriers)
