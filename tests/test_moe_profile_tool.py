"""benchmarks/tools/moe_profile.py (Liger's fused MoE forward, kernel by kernel, kernellab against Triton) and
benchmarks/tools/sass_compare.py, on the CPU: the profile's trace analysis on a made-up CUPTI timeline, config
labels and pinning on both autotuners' Config classes, the CPU plumbing of the kernellab side (the interpreter at
the tiny size), and the SASS comparison's loop and mix parsing on a hand-written listing."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "tools"))
import moe_profile  # noqa: E402
import sass_compare  # noqa: E402


def _trace(tmp_path, calls):
    """A chrome trace of `calls` forwards: flush (fill), sleep, then the op's activities with a gap after the
    .item() memcpy (the host launching after the sync)."""
    ev, t = [], 0.0

    def add(name, dur, cat="kernel", gap=0.0):
        nonlocal t
        t += gap
        ev.append({"ph": "X", "cat": cat, "name": name, "ts": t, "dur": dur})
        t += dur

    for _ in range(calls):
        add("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int> >(...)", 50.0)
        add("spin_kernel(long)", 100.0)
        add("_moe_router_histogram_kernel", 3.0, gap=1.0)
        add("Memcpy DtoH (Device -> Pageable)", 2.0, cat="gpu_memcpy", gap=1.0)
        add("_moe_router_scatter_kernel", 10.0, gap=20.0)
        add("_fused_up_proj_swiglu_kernel", 200.0, gap=2.0)
        add("_fused_down_proj_kernel", 100.0, gap=1.0)
    ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::item", "ts": 0.0, "dur": 5.0})
    p = tmp_path / "trace.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return str(p)


def test_analyse_splits_forwards_at_the_sleeps(tmp_path):
    r = moe_profile.analyse(moe_profile._gpu_activities(_trace(tmp_path, 3)), calls=3)
    assert r["forwards"] == 3
    assert r["kernels"]["_fused_up_proj_swiglu_kernel"] == {"us": 200.0, "launches": 1.0}
    assert not any("Fill" in k or "spin" in k for k in r["kernels"])  # the flush and the sleep are not the op's
    assert r["busy_us"] == pytest.approx(3 + 2 + 10 + 200 + 100)
    assert r["span_us"] == pytest.approx(r["busy_us"] + 1 + 20 + 2 + 1)
    gap = next(v for k, v in r["gaps_us"].items() if k.startswith("Memcpy"))
    assert gap == pytest.approx(20.0)


def test_analyse_keeps_the_last_calls(tmp_path):
    r = moe_profile.analyse(moe_profile._gpu_activities(_trace(tmp_path, 5)), calls=2)
    assert r["forwards"] == 2 and r["kernels"]["_fused_down_proj_kernel"]["us"] == 100.0


@pytest.mark.parametrize("side", ["kernellab", "triton"])
def test_config_labels_and_pinning(side):
    if side == "triton":
        triton = pytest.importorskip("triton")
        if "kernellab" in (getattr(triton, "__file__", "") or ""):
            pytest.skip("kernellab's compat is serving triton here")
        Config = triton.Config
    else:
        from kernellab import Config
    configs = [Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
               for n in (64, 128) for k in (32, 64) for w in (4, 8) for s in (2, 3)]
    assert moe_profile.config_label(configs[-1]) == "128x64 8w3s"
    assert moe_profile.config_label(Config({"BLOCK_H": 128, "BLOCK_K": 4, "X": 1}, num_warps=4, num_stages=4)) \
        == "128x4/X=1 4w4s"

    class Tuned:
        pass

    mod = Tuned()
    mod.k = Tuned()
    mod.k.configs = list(configs)
    got = moe_profile._pin(mod, {"k": "64x64 4w3s", "missing": "64x32 4w2s"})
    assert got["k"] == "64x64 4w3s" and mod.k.configs == [configs[5]]
    assert got["missing"] == "not an autotuned kernel here"
    assert moe_profile._pin(mod, {"k": "32x32 4w2s"})["k"].startswith("no config")


def test_table_ratios():
    tri = {"label": "triton", "side": "triton", "kernels": {"a": {"us": 110.0, "launches": 1}}, "busy_us": 110.0,
           "span_us": 130.0, "fwd_ms": 0.2, "chosen": {k: "64x64 4w2s" for k in moe_profile.AUTOTUNED}}
    kl = dict(tri, label="kernellab", side="kernellab", kernels={"a": {"us": 100.0, "launches": 1}}, busy_us=100.0)
    text = moe_profile.table([tri, kl])
    assert "100.0 (1.10)" in text and "_fused_up_proj_swiglu_ke" in text


@pytest.mark.slow
def test_cpu_plumbing_of_the_kernellab_side(tmp_path):
    """The kernellab child on the CPU interpreter at the tiny size, pinned: it runs, reports its configs and an
    error against float64 (nothing is timed on a CPU). Needs liger-kernel (`pip install liger-kernel --no-deps`)."""
    pytest.importorskip("liger_kernel")
    out = tmp_path / "r.json"
    rc = moe_profile.main(["--device", "cpu", "--sides", "kernellab", "--timeout", "300", "--json", str(out)])
    assert rc == 0
    (r,) = json.loads(out.read_text())["runs"]
    assert "error" not in r, r
    assert set(r["chosen"]) == set(moe_profile.AUTOTUNED) and r["max_abs_err"] < 1e-4 and r["out_finite"]


SASS = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   DEPBAR.LE SB0, 0x1 ;
        /*0020*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0030*/                   WARPGROUP.ARRIVE ;
        /*0040*/                   HGMMA.64x64x8.F32.TF32 R24, gdesc[UR20], R24 ;
        /*0050*/                   HGMMA.64x64x8.F32.TF32 R56, gdesc[UR8], R56, gsb0 ;
        /*0060*/                   WARPGROUP.DEPBAR.LE gsb0, 0x2 ;
        /*0070*/              @!PT LDS RZ, [RZ] ;
        /*0080*/                   LDGSTS.E.BYPASS.128 [R119], desc[UR26][R20.64+0x80], P6 ;
        /*0090*/                   IADD3 R117, R117, 0x20, RZ ;
        /*00a0*/                   LDGDEPBAR ;
        /*00b0*/              @!P5 BRA `(.L_x_0) ;
        /*00c0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*00d0*/                   STS.64 [R3], R24 ;
        /*00e0*/                   STG.E.128 desc[UR4][R4.64], R8 ;
        /*00f0*/                   MUFU.EX2 R9, R9 ;
        /*0100*/                   EXIT ;
"""


def test_sass_compare_reads_the_main_loop_and_the_epilogue(tmp_path):
    p = tmp_path / "k.kernellab.sass"
    p.write_text(SASS)
    line, m, body = sass_compare.side_line(p)
    assert m["n"] == 10 and m["hgmma"] == 2 and m["wgmma_waits"] == [2] and m["depbar"] == [1]
    assert m["ldgsts"] == {"128": 1} and m["ldgdepbar"] == 1 and m["bar"] == 1 and m["lds"] == {}  # @!PT: never runs
    assert "epi stg 128:1 sts 64:1" in line and "mufu 1" in line
