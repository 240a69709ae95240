"""reuse_conversions (KERNELLAB_REUSE_CONVERSIONS=1): elementwise math whose result is converted to a layout its
operands were converted to already (an epilogue storing gate, up and silu(gate) * up: Liger's fused MoE
up-projection) is rebuilt on those conversions, and its own conversion goes. IR in, IR out; what is not taken."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import reuse_conversions
from tests.gpu_passes.conftest import normalize, printed, run_gpu_pass

KNOB = reuse_conversions.KNOB

EPILOGUE = """
#L0 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>
#L1 = #mma<[4, 1]>
tt.func @k(%g: tensor<64x32xf32, #L1>, %u: tensor<64x32xf32, #L1>, %pg: tensor<64x32x!ptr<f32>, #L0>, %pu: tensor<64x32x!ptr<f32>, #L0>, %ph: tensor<64x32x!ptr<f32>, #L0>) {
  %cg = ttg.convert_layout %g : tensor<64x32xf32, #L0>
  tt.store %pg, %cg
  %cu = ttg.convert_layout %u : tensor<64x32xf32, #L0>
  tt.store %pu, %cu
  %one = arith.constant {value = 1.0} : tensor<64x32xf32, #L1>
  %n = arith.negf %g : tensor<64x32xf32, #L1>
  %e = math.exp %n : tensor<64x32xf32, #L1>
  %d = arith.addf %one, %e : tensor<64x32xf32, #L1>
  %s = arith.divf %g, %d : tensor<64x32xf32, #L1>
  %h = arith.mulf %s, %u : tensor<64x32xf32, #L1>
  %ch = ttg.convert_layout %h : tensor<64x32xf32, #L0>
  tt.store %ph, %ch
  tt.return
}
"""

REUSED = """
#L0 = #mma<[4, 1]>
#L1 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>

tt.func @k(%g: tensor<64x32xf32, #L0>, %u: tensor<64x32xf32, #L0>, %pg: tensor<64x32x!ptr<f32>, #L1>, %pu: tensor<64x32x!ptr<f32>, #L1>, %ph: tensor<64x32x!ptr<f32>, #L1>) {
  %cg = ttg.convert_layout %g : tensor<64x32xf32, #L1>
  tt.store %pg, %cg
  %cu = ttg.convert_layout %u : tensor<64x32xf32, #L1>
  tt.store %pu, %cu
  %one = arith.constant {value = 1.0} : tensor<64x32xf32, #L1>
  %n = arith.negf %cg : tensor<64x32xf32, #L1>
  %e = math.exp %n : tensor<64x32xf32, #L1>
  %d = arith.addf %one, %e : tensor<64x32xf32, #L1>
  %s = arith.divf %cg, %d : tensor<64x32xf32, #L1>
  %h = arith.mulf %s, %cu : tensor<64x32xf32, #L1>
  tt.store %ph, %h
  tt.return
}
"""


def test_math_rebuilt_on_the_conversions(check, monkeypatch):
    monkeypatch.setenv(KNOB, "1")
    _, stats = check(reuse_conversions, EPILOGUE, REUSED, GpuOptions(num_warps=4))
    assert stats == {"reused": 1}


def _unchanged(text, monkeypatch, knob="1"):
    monkeypatch.setenv(KNOB, knob)
    m, stats = run_gpu_pass(reuse_conversions, text, GpuOptions(num_warps=4))
    from kernellab.compiler.parser import parse_module

    assert stats == {} and normalize(printed(m)) == normalize(printed(parse_module(text)))


def test_off_by_default(monkeypatch):
    monkeypatch.delenv(KNOB, raising=False)
    m, stats = run_gpu_pass(reuse_conversions, EPILOGUE, GpuOptions(num_warps=4))
    assert stats == {} and "ttg.convert_layout %h" in printed(m)
    _unchanged(EPILOGUE, monkeypatch, knob="0")


def _variant(old: str, new: str) -> str:
    assert old in EPILOGUE
    return EPILOGUE.replace(old, new)


# `u`'s conversion comes after the product's: not there yet where the product is converted
LATE = _variant("""  %cu = ttg.convert_layout %u : tensor<64x32xf32, #L0>
  tt.store %pu, %cu
""", "").replace("  tt.store %ph, %ch\n", "  tt.store %ph, %ch\n  %cu = ttg.convert_layout %u : tensor<64x32xf32, #L0>\n"
                 "  tt.store %pu, %cu\n")
# `u` never converted: rebuilding the product would need a new conversion
UNCONVERTED = _variant("""  %cu = ttg.convert_layout %u : tensor<64x32xf32, #L0>
  tt.store %pu, %cu
""", "")
# a leaf that is not elementwise math of converted values (a load in the accumulator's layout)
LOADED = _variant("%h = arith.mulf %s, %u", "%v = tt.load %pv : tensor<64x32xf32, #L1>\n  %h = arith.mulf %s, %v").replace(
    "%ph: tensor<64x32x!ptr<f32>, #L0>)", "%ph: tensor<64x32x!ptr<f32>, #L0>, %pv: tensor<64x32x!ptr<f32>, #L1>)")
# a target layout whose threads hold more elements than the source's (the math would cost more)
WIDER = EPILOGUE.replace("#L0 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>", "#L0 = #blocked<[1, 8], [2, 16], [4, 1], [1, 0]>")


@pytest.mark.parametrize("text", [LATE, UNCONVERTED, LOADED, WIDER], ids=["late", "unconverted", "loaded", "wider"])
def test_not_taken(text, monkeypatch):
    _unchanged(text, monkeypatch)
