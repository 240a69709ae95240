"""remove_layout_conversions under KERNELLAB_NARROW_CONVERSIONS=1: a conversion of f32 arithmetic on a widened bf16
load (`dy.to(tl.float32) * scale`, stored elsewhere in its own layout so the load stays) becomes a conversion of the
bf16 load, where the original conversion was, with the arithmetic rebuilt in the wanted layout: half the bytes
through shared memory. Off by default; never where the narrower values are as many bytes as the converted one."""
from __future__ import annotations

from kernellab.compiler.passes import remove_layout_conversions

HEAD = """
#L0 = #blocked<[8], [32], [4], [0]>
#L1 = #blocked<[16], [32], [4], [0]>
tt.func @k(%x_ptr: !ptr<bf16> {tt.divisibility = 16}, %m_ptr: !ptr<u8> {tt.divisibility = 16}, %y_ptr: !ptr<bf16> {tt.divisibility = 16}, %z_ptr: !ptr<f32> {tt.divisibility = 16}, %s: f32) {
  %r = tt.make_range {end = 2048, start = 0} : tensor<2048xi32, #L0>
  %xs = tt.splat %x_ptr : tensor<2048x!ptr<bf16>, #L0>
  %xp = tt.addptr %xs, %r : tensor<2048x!ptr<bf16>, #L0>
  %x = tt.load %xp : tensor<2048xbf16, #L0>
  %r1 = tt.make_range {end = 2048, start = 0} : tensor<2048xi32, #L1>
  %ms = tt.splat %m_ptr : tensor<2048x!ptr<u8>, #L1>
  %mp = tt.addptr %ms, %r1 : tensor<2048x!ptr<u8>, #L1>
  %m = tt.load %mp : tensor<2048xu8, #L1>
"""

IN = HEAD + """  %xf = arith.extf %x : tensor<2048xf32, #L0>
  %ss = tt.splat %s : tensor<2048xf32, #L0>
  %p = arith.mulf %xf, %ss : tensor<2048xf32, #L0>
  %pc = ttg.convert_layout %p : tensor<2048xf32, #L1>
  %mf = arith.uitofp %m : tensor<2048xf32, #L1>
  %d = arith.mulf %pc, %mf : tensor<2048xf32, #L1>
  %zs = tt.splat %z_ptr : tensor<2048x!ptr<f32>, #L1>
  %zp = tt.addptr %zs, %r1 : tensor<2048x!ptr<f32>, #L1>
  tt.store %zp, %d
  %ys = tt.splat %y_ptr : tensor<2048x!ptr<bf16>, #L0>
  %yp = tt.addptr %ys, %r : tensor<2048x!ptr<bf16>, #L0>
  tt.store %yp, %x
  tt.return
}
"""

OUT = HEAD + """  %x_1 = ttg.convert_layout %x : tensor<2048xbf16, #L1>
  %xf = arith.extf %x_1 : tensor<2048xf32, #L1>
  %ss = tt.splat %s : tensor<2048xf32, #L1>
  %p = arith.mulf %xf, %ss : tensor<2048xf32, #L1>
  %mf = arith.uitofp %m : tensor<2048xf32, #L1>
  %d = arith.mulf %p, %mf : tensor<2048xf32, #L1>
  %zs = tt.splat %z_ptr : tensor<2048x!ptr<f32>, #L1>
  %zp = tt.addptr %zs, %r1 : tensor<2048x!ptr<f32>, #L1>
  tt.store %zp, %d
  %ys = tt.splat %y_ptr : tensor<2048x!ptr<bf16>, #L0>
  %yp = tt.addptr %ys, %r : tensor<2048x!ptr<bf16>, #L0>
  tt.store %yp, %x
  tt.return
}
"""


def test_knob_converts_the_narrow_load_instead(check, monkeypatch):
    monkeypatch.setenv("KERNELLAB_NARROW_CONVERSIONS", "1")
    _, stats = check(remove_layout_conversions, IN, OUT)
    assert stats["narrowed"] == 1 and stats["remaining"] == 1


def test_default_converts_the_f32_value(run_pass, monkeypatch):
    monkeypatch.delenv("KERNELLAB_NARROW_CONVERSIONS", raising=False)
    m, stats = run_pass(remove_layout_conversions, IN)
    assert stats["narrowed"] == 0
    (conv,) = [op for op in m.kernel.walk() if op.name == "ttg.convert_layout"]
    assert str(conv.result.type.scalar) in ("f32", "fp32")


def test_knob_leaves_it_where_the_leaves_are_not_narrower(run_pass, monkeypatch):
    # an f32 load: no narrower value to convert
    monkeypatch.setenv("KERNELLAB_NARROW_CONVERSIONS", "1")
    text = IN.replace("!ptr<bf16> {tt.divisibility = 16}, %m_ptr", "!ptr<f32> {tt.divisibility = 16}, %m_ptr") \
        .replace("%y_ptr: !ptr<bf16>", "%y_ptr: !ptr<f32>").replace("bf16", "f32") \
        .replace("%xf = arith.extf %x : tensor<2048xf32, #L0>", "%xf = arith.addf %x, %x : tensor<2048xf32, #L0>")
    m, stats = run_pass(remove_layout_conversions, text)
    assert stats["narrowed"] == 0 and stats["remaining"] == 1
