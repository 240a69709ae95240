"""Parse -> print -> parse -> print is stable on IR with nested regions, the full tile pipeline leaves
valid IR behind, and Module.clone gives a copy that prints like the original and shares no op, block, value
or attribute list with it (passes run on the copy, as the GPU build does, leave the original as it was)."""
from kernellab.compiler import passes
from kernellab.compiler.parser import parse_module
from kernellab.compiler.printer import print_module
from kernellab.compiler.verifier import verify

SAMPLE = """
tt.func @kernel(%x: !ptr<f32> {tt.divisibility = 16}, %out: !ptr<f32> {tt.divisibility = 16}, %n: i32) loc("k.py":3) {
  %pid = tt.get_program_id {axis = 0} : i32 loc(4:10)
  %c0 = arith.constant {value = 0} : i32 loc(5:4)
  %c1 = arith.constant {value = 1} : i32 loc(5:4)
  %c64 = arith.constant {value = 64} : i32 loc(5:4)
  %zero = arith.constant {value = 0.0} : tensor<64xf32> loc(6:4)
  %base = arith.muli %pid, %c64 : i32 loc(7:11)
  %r = tt.make_range {end = 64, start = 0} : tensor<64xi32> loc(8:8)
  %acc, %cnt = scf.for %c0, %n, %c1, %zero, %c0 : tensor<64xf32>, i32 {
  ^bb(%i: i32, %a: tensor<64xf32>, %k: i32):
    %b = tt.splat %base : tensor<64xi32> loc(10:8)
    %offs = arith.addi %b, %r : tensor<64xi32> loc(10:8)
    %ps = tt.splat %x : tensor<64x!ptr<f32>> loc(11:8)
    %ptrs = tt.addptr %ps, %offs : tensor<64x!ptr<f32>> loc(11:8)
    %nn = tt.splat %n : tensor<64xi32> loc(12:8)
    %mask = arith.cmpi %offs, %nn {predicate = "slt"} : tensor<64xi1> loc(12:8)
    %v = tt.load %ptrs, %mask, %zero {cache = "", evict = "", volatile = false} : tensor<64xf32> loc(13:8)
    %even = arith.remsi %i, %c64 : i32 loc(14:8)
    %isz = arith.cmpi %even, %c0 {predicate = "eq"} : i1 loc(14:8)
    %a2 = scf.if %isz : tensor<64xf32> {
      %w = arith.addf %a, %v : tensor<64xf32> loc(16:12)
      scf.yield %w
    } {
      %m = tt.reduce %v {axis = 0} : f32 {
      ^bb(%p: f32, %q: f32):
        %mx = arith.maxnumf %p, %q : f32 loc(18:20)
        tt.reduce.return %mx
      } loc(18:12)
      %ms = tt.splat %m : tensor<64xf32> loc(19:12)
      %w2 = arith.subf %a, %ms : tensor<64xf32> loc(19:12)
      scf.yield %w2
    } loc(15:8)
    %k2 = arith.addi %k, %c1 : i32 loc(20:8)
    scf.yield %a2, %k2
  } loc(9:4)
  %fin = scf.while %c0 : i32 {
  ^bb(%j: i32):
    %go = arith.cmpi %j, %cnt {predicate = "slt"} : i1 loc(22:10)
    scf.condition %go, %j
  } {
  ^bb(%j2: i32):
    %j3 = arith.addi %j2, %c1 : i32 loc(23:8)
    scf.yield %j3
  } loc(21:4)
  %s = tt.reduce %acc {axis = 0} : f32 {
  ^bb(%u: f32, %t: f32):
    %sum = arith.addf %u, %t : f32 loc(24:10)
    tt.reduce.return %sum
  } loc(24:4)
  %fp = arith.sitofp %fin : f32 loc(25:4)
  %res = arith.addf %s, %fp : f32 loc(25:4)
  %neg = arith.constant {value = -inf} : f32 loc(26:4)
  %big = arith.constant {value = 1e-30} : f32 loc(26:4)
  %nan = arith.constant {value = nan} : f32 loc(26:4)
  tt.print %neg, %big, %nan {hex = false, prefix = "x: "} loc(27:4)
  tt.store %out, %res loc(28:4)
  tt.return loc(29:4)
}
"""


def test_roundtrip_with_locs():
    once = print_module(parse_module(SAMPLE))
    twice = print_module(parse_module(once))
    assert once == twice
    assert 'loc("k.py":3)' in once and "loc(18:12)" in once


def test_roundtrip_without_locs():
    once = print_module(parse_module(SAMPLE), with_locs=False)
    assert print_module(parse_module(once), with_locs=False) == once
    assert "loc(" not in once


def test_tile_pipeline_leaves_valid_ir(check_uses):
    m = parse_module(SAMPLE)
    for p in passes.TILE_PASSES:
        stats = p.run(m)
        verify(m, after=p.NAME)
        assert isinstance(stats, dict) and all(isinstance(v, int) for v in stats.values())
        check_uses(m)
    text = print_module(m, with_locs=False)
    assert print_module(parse_module(text), with_locs=False) == text
    # The loop-invariant address computation left the loop; the load did not.
    loop_start = text.index("scf.for")
    assert text.index("tt.splat %x") < loop_start < text.index("tt.load")
    # The counter %cnt is used by the while loop, so it is still carried.
    assert "%acc, %cnt = scf.for" in text
    # Running the pipeline again changes nothing more than a no-op would.
    for p in passes.TILE_PASSES:
        assert not any(p.run(m).values()), p.NAME


def test_pass_modules_have_metadata():
    names = [p.NAME for p in passes.TILE_PASSES]
    assert names[:2] == ["inline", "canonicalize"]
    assert {"inline", "canonicalize", "constant_fold", "cse", "dce", "licm"} <= set(names)
    for p in passes.TILE_PASSES:
        assert isinstance(p.DESCRIPTION, str) and p.DESCRIPTION and "\n" not in p.DESCRIPTION
        assert callable(p.run)


def _objects(module):
    """ids of every op, block and value of the module."""
    out = set()
    for fn in module.functions:
        out |= {id(fn), id(fn.body)} | {id(a) for a in fn.args}
        for op in fn.walk():
            out |= {id(op)} | {id(r) for r in op.results}
            for reg in op.regions:
                out |= {id(reg)} | {id(a) for a in reg.args}
    return out


def test_a_clone_prints_like_the_original(check_uses):
    m = parse_module(SAMPLE)
    c = m.clone()
    assert print_module(c) == print_module(m)
    assert print_module(c, with_locs=False) == print_module(m, with_locs=False)
    fn, cf = m.kernel, c.kernel
    assert (cf.name, cf.source_file, cf.first_line, cf.arg_attrs) == (fn.name, fn.source_file, fn.first_line,
                                                                        fn.arg_attrs)
    check_uses(c)
    check_uses(m)  # cloning added no use to the original's values


def test_a_clone_shares_nothing_mutable():
    m = parse_module(SAMPLE)
    c = m.clone()
    assert not _objects(m) & _objects(c)
    for a, b in zip(m.kernel.walk(), c.kernel.walk()):
        assert a.attrs == b.attrs and a.attrs is not b.attrs
        for k, v in a.attrs.items():
            assert not isinstance(v, list) or v is not b.attrs[k]
    assert m.kernel.arg_attrs[0] is not c.kernel.arg_attrs[0]


def test_rewriting_the_clone_leaves_the_original(check_uses):
    m = parse_module(SAMPLE)
    before = print_module(m)
    c = m.clone()
    for p in passes.TILE_PASSES:
        p.run(c)
    ops = list(c.kernel.walk())
    next(op for op in ops if op.name == "tt.make_range").attrs["end"] = 32
    next(op for op in ops if op.name == "tt.print").attrs["prefix"] = "changed"
    c.kernel.arg_attrs[0]["tt.divisibility"] = 1
    c.kernel.args[0].hint = "renamed"
    c.functions.append(c.kernel.clone())
    assert print_module(c) != before
    assert print_module(m) == before
    check_uses(m)
    check_uses(c)


def test_nested_attribute_lists_are_copied():
    m = parse_module(SAMPLE)
    op = next(op for op in m.kernel.walk() if op.name == "tt.make_range")
    op.attrs["nested"] = [[1, 2], (3, [4])]
    c = m.clone()
    twin = next(op for op in c.kernel.walk() if op.name == "tt.make_range")
    twin.attrs["nested"][0].append(9)
    twin.attrs["nested"][1][1].append(9)
    assert op.attrs["nested"] == [[1, 2], (3, [4])]
    assert isinstance(twin.attrs["nested"][1], tuple)
