"""remove_layout_conversions (KERNELLAB_CARRY_IN_USE_LAYOUT, on by default): a loop-carried value (iter argument, `scf.if`
result) that every reader converts to one layout is carried in that layout, when everything entering it can be
recomputed there (gpu/carried_layout.py). IR in, IR out; what is not taken (a reader in the web's own layout, readers
wanting two layouts, an entry that is a load)."""
from __future__ import annotations

from kernellab.compiler.gpu.carried_layout import Web
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import remove_layout_conversions as rlc
from tests.gpu_passes.conftest import normalize, printed, run_gpu_pass

LAYOUTS = """
#L0 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>
#L1 = #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>
#L2 = #slice<0, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>
"""

# a fused loop: at a tile's first iteration the prologue `scf.if` builds the column mask (in #L0), the other
# iterations carry it; the load reads it in #L1 every iteration
FUSED = LAYOUTS + """
tt.func @k(%p: tensor<64x32x!ptr<f32>, #L1>, %q: tensor<64x32x!ptr<f32>, #L1>, %n: i32, %per: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %u = ub.poison : i1
  %m0 = tt.splat %u : tensor<64x32xi1, #L0>
  %fin = scf.for %c0, %n, %c1, %m0 : tensor<64x32xi1, #L0> {
  ^bb(%i: i32, %m: tensor<64x32xi1, #L0>):
    %start = arith.cmpi %i, %per {predicate = "eq"} : i1
    %mask = scf.if %start : tensor<64x32xi1, #L0> {
      %r = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L2>
      %e = tt.expand_dims %r {axis = 0} : tensor<1x32xi32, #L0>
      %lim = tt.splat %i : tensor<1x32xi32, #L0>
      %ok = arith.cmpi %e, %lim {predicate = "slt"} : tensor<1x32xi1, #L0>
      %b = tt.broadcast %ok : tensor<64x32xi1, #L0>
      scf.yield %b
    } {
      scf.yield %m
    }
    %mc = ttg.convert_layout %mask : tensor<64x32xi1, #L1>
    %x = tt.load %p, %mc : tensor<64x32xf32, #L1>
    tt.store %q, %x
    scf.yield %mask
  }
  tt.return
}
"""


CARRIED = LAYOUTS + """#L3 = #slice<0, #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>>
tt.func @k(%p: tensor<64x32x!ptr<f32>, #L1>, %q: tensor<64x32x!ptr<f32>, #L1>, %n: i32, %per: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %u = ub.poison : i1
  %m0 = tt.splat %u : tensor<64x32xi1, #L1>
  %fin = scf.for %c0, %n, %c1, %m0 : tensor<64x32xi1, #L1> {
  ^bb(%i: i32, %m: tensor<64x32xi1, #L1>):
    %start = arith.cmpi %i, %per {predicate = "eq"} : i1
    %mask = scf.if %start : tensor<64x32xi1, #L1> {
      %r = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L3>
      %e = tt.expand_dims %r {axis = 0} : tensor<1x32xi32, #L1>
      %lim = tt.splat %i : tensor<1x32xi32, #L1>
      %ok = arith.cmpi %e, %lim {predicate = "slt"} : tensor<1x32xi1, #L1>
      %b = tt.broadcast %ok : tensor<64x32xi1, #L1>
      scf.yield %b
    } {
      scf.yield %m
    }
    %x = tt.load %p, %mask : tensor<64x32xf32, #L1>
    tt.store %q, %x
    scf.yield %mask
  }
  tt.return
}
"""


def _carried(m):
    return [op for op in m.kernel.walk() if op.name == "ttg.convert_layout"]


def test_the_carried_mask_takes_its_readers_layout(monkeypatch):
    """The loop's init, iter argument, result and the if's result carry #L1; the prologue builds the mask there."""
    monkeypatch.setenv(rlc.CARRY_KNOB, "1")
    m, stats = run_gpu_pass(rlc, FUSED)
    assert stats["carried"] == 1 and stats["remaining"] == 0, stats
    assert normalize(printed(m)) == normalize(printed(parse_module(CARRIED)))


def test_the_knob_off_keeps_the_conversion(monkeypatch):
    monkeypatch.setenv(rlc.CARRY_KNOB, "0")
    m, stats = run_gpu_pass(rlc, FUSED)
    assert "carried" not in stats and len(_carried(m)) == 1


def test_a_reader_in_the_webs_own_layout_keeps_it(monkeypatch):
    monkeypatch.setenv(rlc.CARRY_KNOB, "1")
    text = FUSED.replace("    tt.store %q, %x\n", "    tt.store %q, %x\n    %other = arith.xori %mask, %mask : "
                         "tensor<64x32xi1, #L0>\n")
    m, stats = run_gpu_pass(rlc, text)
    assert "carried" not in stats and len(_carried(m)) == 1


def test_readers_wanting_two_layouts_keep_it(monkeypatch):
    monkeypatch.setenv(rlc.CARRY_KNOB, "1")
    text = LAYOUTS + "#L3 = #blocked<[1, 1], [1, 32], [4, 1], [1, 0]>\n" + FUSED[len(LAYOUTS):]
    text = text.replace("    tt.store %q, %x\n", "    tt.store %q, %x\n    %mc3 = ttg.convert_layout %mask : "
                        "tensor<64x32xi1, #L3>\n")
    m, stats = run_gpu_pass(rlc, text)
    assert "carried" not in stats


def test_a_loaded_row_entering_is_converted_in_the_prologue(monkeypatch):
    """The prologue loads the mask's limit row: the web is carried all the same; that small load is issued again in
    the mask's new layout, and only its pointer argument is converted, once, at the kernel's entry (not the 64x32
    mask every iteration)."""
    monkeypatch.setenv(rlc.CARRY_KNOB, "1")
    text = FUSED.replace("tt.func @k(%p: tensor<64x32x!ptr<f32>, #L1>,",
                         "tt.func @k(%lp: tensor<1x32x!ptr<i32>, #L0>, %p: tensor<64x32x!ptr<f32>, #L1>,")
    text = text.replace("%lim = tt.splat %i : tensor<1x32xi32, #L0>", "%lim = tt.load %lp : tensor<1x32xi32, #L0>")
    m, stats = run_gpu_pass(rlc, text)
    assert stats["carried"] == 1
    (conv,) = _carried(m)
    assert conv.operands[0].hint == "lp" and conv.block is m.kernel.body


def test_an_entry_that_is_a_loaded_tile_is_not_recomputed(monkeypatch):
    """The prologue loads the whole mask: converting it there would only move the conversion, so the web stays."""
    monkeypatch.setenv(rlc.CARRY_KNOB, "1")
    text = FUSED.replace("tt.func @k(%p: tensor<64x32x!ptr<f32>, #L1>,",
                         "tt.func @k(%lp: tensor<64x32x!ptr<i1>, #L0>, %p: tensor<64x32x!ptr<f32>, #L1>,")
    text = text.replace("      scf.yield %b\n", "      %lb = tt.load %lp : tensor<64x32xi1, #L0>\n      scf.yield %lb\n")
    m, stats = run_gpu_pass(rlc, text)
    assert "carried" not in stats and len(_carried(m)) == 1


# an epilogue's row offsets: carried one element a thread (#L4), read in a replicated slice layout (#L2, 8 a thread)
# only in the branch that stores, once a tile
EPILOGUE = LAYOUTS + """#L4 = #blocked<[1], [32], [4], [0]>
tt.func @k(%q: tensor<1x32x!ptr<i32>, #L0>, %n: i32, %per: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %u = ub.poison : i32
  %o0 = tt.splat %u : tensor<32xi32, #L4>
  %fin = scf.for %c0, %n, %c1, %o0 : tensor<32xi32, #L4> {
  ^bb(%i: i32, %o: tensor<32xi32, #L4>):
    %start = arith.cmpi %i, %per {predicate = "eq"} : i1
    %offs = scf.if %start : tensor<32xi32, #L4> {
      %r = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L4>
      %s = tt.splat %i : tensor<32xi32, #L4>
      %a = arith.addi %r, %s : tensor<32xi32, #L4>
      scf.yield %a
    } {
      scf.yield %o
    }
    scf.if %start {
      %oc = ttg.convert_layout %offs : tensor<32xi32, #L2>
      %e = tt.expand_dims %oc {axis = 0} : tensor<1x32xi32, #L0>
      tt.store %q, %e
      scf.yield
    } {
      scf.yield
    }
    scf.yield %offs
  }
  tt.return
}
"""


def test_read_once_a_tile_in_a_wider_layout_stays(monkeypatch):
    """Read only in a branch and in a layout of more registers a thread: carrying it there would cost registers every
    iteration to save one conversion a tile (the corpus matmul's persistent epilogue), so the web stays."""
    monkeypatch.setenv(rlc.CARRY_KNOB, "1")
    m, stats = run_gpu_pass(rlc, EPILOGUE)
    assert "carried" not in stats and len(_carried(m)) == 1


def test_read_once_a_tile_in_a_layout_as_narrow_is_carried(monkeypatch):
    monkeypatch.setenv(rlc.CARRY_KNOB, "1")
    text = EPILOGUE.replace("#L4 = #blocked<[1], [32], [4], [0]>", "#L4 = #blocked<[8], [32], [4], [0]>")  # 8 a thread
    m, stats = run_gpu_pass(rlc, text)
    assert stats.get("carried") == 1 and not _carried(m), stats


def test_the_web_spans_loop_init_iter_argument_if_and_result():
    m = parse_module(FUSED)
    loop = next(op for op in m.kernel.walk() if op.name == "scf.for")
    web = Web(loop.regions[0].args[1])
    names = sorted(v.hint or "" for v in web.members.values())
    assert len(web.members) == 3, names  # %m, %fin, %mask
    # what enters: the loop's init (%m0) and the prologue's freshly built mask (%b); the else branch's %m is a member
    assert sorted((op.name, op.operands[i].hint) for op, i in web.entries) == [("scf.for", "m0"), ("scf.yield", "b")]
    assert [r.name for r in web.readers] == ["ttg.convert_layout"]
    assert str(web.target()) == "#blocked<[4, 1], [8, 4], [1, 4], [0, 1]>"
