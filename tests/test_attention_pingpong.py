"""FlashAttention-3's ping-pong, its last piece (passes/pingpong.py, KERNELLAB_ATTN_PINGPONG=1, issue 15): in the
warp-specialized key loop of `benchmarks/attention_kernel.py`'s descriptor text, whose two consumer warpgroups take
turns on the tensor cores (named barriers 1 and 2), only warpgroup 0 polls a stage's full mbarrier.

Without a GPU: the sm_90a build (ptxas) with the knob on, alone and with KERNELLAB_ATTN_OVERLAP=1, full and causal,
hd128 and hd64 at 8 warps: the consumers' PTX has the named barriers in the intended order (warpgroup 1 lets
warpgroup 0 start: `bar.arrive 1`; each takes its turn on its own barrier, `bar.sync 1|2`; polls the stage only in
warpgroup 0; issues its wgmmas; passes the turn, `bar.arrive 2|1`; ...; warpgroup 0 gives back the last turn,
`bar.arrive 2`), no plain poll left in the consumers, in SASS each consumer TRYWAIT is jumped over by a predicated
branch, no spills, no serialized wgmma, the consumers within their setmaxnreg budget. Knob off: the same PTX as
unset. On the GPU (`-m gpu`): each case with the knob off, on, and on with the overlap, against float32 attention
(outputs and log-sum-exp poisoned), and on against off bit for bit (the pass changes who polls, not the arithmetic),
in a child process with a timeout (a wait skipped wrongly reads a stage early or hangs)."""
from __future__ import annotations

import os
import re
import shutil

import pytest
import torch

from kernellab.compiler.codegen.lower_warp_specialize import registers

from .test_attention_overlap import consumer_registers
from .test_warp_specialize import run_in_child
from .test_warp_specialize_attention import DESC, assert_close_to_reference, run_desc

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")

KNOBS = ("KERNELLAB_ATTN_PINGPONG", "KERNELLAB_ATTN_OVERLAP")


def pass_stats(ck, name="pingpong"):
    ck = getattr(ck, "_kl", ck)
    return next(p.stats for p in ck.trace.passes if p.name == name)


def build(S, D, BN, stages, warps, causal, env: dict, monkeypatch, tmp_path, BM=128):
    """The descriptor text built for sm_90a under `env` (the in-memory compile cache, not keyed by the environment,
    is dropped before and after)."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    for k in KNOBS:
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    DESC.device_caches.clear()
    try:
        ck, *_ = run_desc(S, D, BN, stages, warps, causal, True, device="cpu", warmup=True, BM=BM)
        ck = getattr(ck, "_kl", ck)
        ck.build_gpu(Target(90))
    finally:
        DESC.device_caches.clear()
    return ck


def turn_tokens(ptx: str) -> list:
    """The consumers' named-barrier turns, stage polls and wgmma groups in PTX order (after setmaxnreg.inc),
    repeats collapsed: start (`bar.arrive 1`, warpgroup 1 lets 0 go first), take (`bar.sync` of its own barrier),
    pass (`bar.arrive` on the other's), finish (`bar.arrive 2`), poll0 (a poll only warpgroup 0 runs), poll (every
    thread polls), mma (a wgmma commit)."""
    out = []
    for ln in ptx[ptx.index("setmaxnreg.inc"):].splitlines():
        t = None
        if re.search(r"bar\.arrive 1, ", ln):
            t = "start"
        elif re.search(r"bar\.arrive 2, ", ln):
            t = "finish"
        elif re.search(r"bar\.sync %r\d+", ln):
            t = "take"
        elif re.search(r"bar\.arrive %r\d+", ln):
            t = "pass"
        elif "mbarrier.try_wait" in ln:
            t = "poll0" if "skip_wait" in ln else "poll"
        elif "wgmma.commit_group" in ln:
            t = "mma"
        if t and (not out or out[-1] != t):
            out.append(t)
    return out


# one key loop: as warp_specialize leaves it (poll, q·kT, pass ... take, p·v), and as overlap_softmax rewrites it
# (peeled first scores, then per block: poll, take, q·kT and p·v, pass; peeled last p·v); LLVM drops the body of a
# loop that runs no iteration between the peeled ends (causal's diagonal with BLOCK_N = BLOCK_M)
PLAIN = ["start", "take", "poll0", "mma", "pass", "take", "mma", "finish"]
OVERLAPPED = ["start", "take", "poll0", "mma", "pass", "poll0", "take", "mma", "pass", "take", "mma", "finish"]


def loops_of(tokens: list) -> list:
    out, cur = [], []
    for t in tokens:
        cur.append(t)
        if t == "finish":
            out.append(cur)
            cur = []
    return out


def sass_polls_skipped(sass: str) -> tuple:
    """(consumer TRYWAITs in line, those a predicated branch just before jumps over); the retry blocks ptxas moves
    past the last EXIT are not counted."""
    tail = sass[sass.index("USETMAXREG.TRY_ALLOC"):]
    lines = [ln.strip() for ln in tail[:tail.index("EXIT")].splitlines()]
    polls = skipped = 0
    for i, ln in enumerate(lines):
        if "SYNCS.PHASECHK.TRANS64.TRYWAIT" not in ln:
            continue
        polls += 1
        for back in lines[max(0, i - 12):i]:
            m = re.search(r"@!?U?P\d+ BRA `\((\.L_x_\d+)\)", back)
            if m and any(x.startswith(m.group(1) + ":") for x in lines[i + 1:i + 6]):
                skipped += 1
                break
    return polls, skipped


def turn_after_softmax(sass: str) -> list:
    """Per key loop of the consumers (the form warp_specialize leaves: pass the turn after the scores' wgmmas ...
    take it before the p·v wgmmas): (line of the turn's BAR.SYNC, line of the last MUFU.EX2, MUFU.EX2 count) between
    the pass and the first p·v HGMMA (A from registers)."""
    tail = sass[sass.index("USETMAXREG.TRY_ALLOC"):]
    lines = tail[:tail.index("EXIT")].splitlines()
    out, i = [], 0
    while True:
        starts = [k for k in range(i, len(lines)) if re.search(r"BAR\.ARV R\d+", lines[k])]
        if not starts:
            return out
        a = starts[0]
        ends = [k for k in range(a, len(lines)) if re.search(r"HGMMA\.\S+ R\d+, R\d+, gdesc", lines[k])]
        if not ends:
            return out
        seg = lines[a:ends[0]]
        exps = [k for k, ln in enumerate(seg) if "MUFU.EX2" in ln]
        turns = [k for k, ln in enumerate(seg) if re.search(r"BAR\.SYNC\.DEFER_BLOCKING R\d+", ln)]
        if exps:
            out.append((turns[-1] if turns else -1, exps[-1], len(exps)))
        i = ends[0] + 1


def fmnmx_depth(sass: str) -> int:
    """The longest chain of dependent FMNMX in the consumers' loop between the scores' wait and the first shuffle
    (the row max a thread takes over its own scores)."""
    tail = sass[sass.index("USETMAXREG.TRY_ALLOC"):]
    lines = tail[:tail.index("EXIT")].splitlines()
    a = next(k for k, ln in enumerate(lines) if re.search(r"BAR\.ARV R\d+", ln))
    depth, best = {}, 0
    for ln in lines[a:]:
        if "SHFL.BFLY" in ln:
            break
        m = re.search(r"FMNMX (R\d+), (R\d+), (R\d+)", ln)
        if m:
            d = 1 + max(depth.get(m.group(2), 0), depth.get(m.group(3), 0))
            depth[m.group(1)] = d
            best = max(best, d)
    return best


# (D, BLOCK_N, stages, warps, BLOCK_M): the benchmark's hd128 row, 64-key blocks with 2 stages, hd64 with two
# warpgroups of 64 rows, and of 128 rows each (BLOCK_M 256: two m64 blocks per warpgroup; at 128 keys ptxas
# serializes the wgmmas, C7511)
CFGS = [(128, 128, 3, 8, 128), (128, 64, 2, 8, 128), (64, 64, 3, 8, 128), (64, 64, 3, 8, 256)]


@needs_ptxas
@pytest.mark.parametrize("overlap", [False, True], ids=["turns", "overlap"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("cfg", CFGS, ids=lambda c: "x".join(map(str, c)))
def test_barriers_in_order(cfg, causal, overlap, monkeypatch, tmp_path):
    from kernellab.viz.data import sass

    D, BN, stages, warps, BM = cfg
    env = {"KERNELLAB_ATTN_PINGPONG": "1", **({"KERNELLAB_ATTN_OVERLAP": "1"} if overlap else {})}
    ck = build(1000, D, BN, stages, warps, causal, env, monkeypatch, tmp_path, BM=BM)
    loops = 2 if causal else 1
    assert pass_stats(ck, "overlap_softmax")["overlapped"] == (loops if overlap else 0)
    assert pass_stats(ck) == {"pingponged": loops, "waits_for_warpgroup0": loops * (2 if overlap else 1),
                              "turns_pinned": 0 if overlap else loops}
    entry, _, inc = registers(warps)
    assert ck.n_spills == 0 and ck.n_regs == entry
    log = ck.report.get("log", "")
    assert "C75" not in log, log  # no "wgmma.mma_async instructions are serialized"
    tokens = turn_tokens(ck.asm["ptx"])
    assert "poll" not in tokens, tokens  # every consumer poll is warpgroup 0's
    found = loops_of(tokens)
    assert len(found) == loops, tokens
    for i, lp in enumerate(found):
        body_dropped = overlap and causal and i == 1 and BN == BM
        assert lp == (OVERLAPPED if overlap and not body_dropped else PLAIN), tokens
    text, why = sass(ck.asm["cubin"])
    if text is None:
        pytest.skip(why)
    polls, skipped = sass_polls_skipped(text)
    assert polls >= loops and skipped == polls, (polls, skipped)
    assert consumer_registers(text) <= inc
    if not overlap:  # the turn before p·v is taken after the softmax's exponentials
        for turn_at, last_exp, exps in turn_after_softmax(text):
            assert turn_at > last_exp and exps >= 64 * BN // 128, (turn_at, last_exp, exps)


@needs_ptxas
def test_knob_off_is_unchanged(monkeypatch, tmp_path):
    """KERNELLAB_ATTN_PINGPONG=0 (the default): the pass records nothing and the PTX equals the unset build's; every
    consumer polls."""
    ck = build(1024, 128, 128, 3, 8, False, {"KERNELLAB_ATTN_PINGPONG": "0"}, monkeypatch, tmp_path)
    assert pass_stats(ck) == {"pingponged": 0, "waits_for_warpgroup0": 0, "turns_pinned": 0}
    ck2 = build(1024, 128, 128, 3, 8, False, {}, monkeypatch, tmp_path)
    assert ck2.asm["ptx"] == ck.asm["ptx"]
    assert turn_tokens(ck.asm["ptx"]) == [t.replace("poll0", "poll") for t in PLAIN]


def test_interpreter_unaffected(monkeypatch):
    """The pass is part of GPU lowering: the interpreter's result with the knob on equals the one with it off."""
    from .test_warp_specialize_attention import _inputs, attention_desc, kl, reference

    outs = []
    for on in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_ATTN_PINGPONG", on)
        q, k, v = _inputs(1, 2, 40, 16, 7, "cpu")
        out = torch.full_like(q, float("nan"))
        attention_desc(q, k, v, True, 0.25, kl, DESC, BLOCK_M=16, BLOCK_N=16, out=out, warp_specialize=True)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    torch.testing.assert_close(outs[1].double(), reference(q, k, v, True, 0.25)[0], atol=2e-2, rtol=0)


# ---------------------------------------------------------------------------------------------- GPU

VARIANTS = {"off": {"KERNELLAB_ATTN_PINGPONG": "0", "KERNELLAB_ATTN_OVERLAP": "0"},
            "on": {"KERNELLAB_ATTN_PINGPONG": "1", "KERNELLAB_ATTN_OVERLAP": "0"},
            "on+overlap": {"KERNELLAB_ATTN_PINGPONG": "1", "KERNELLAB_ATTN_OVERLAP": "1"}}


def gpu_cases(cases):
    """Each case with the knob off, on, and on with the overlap (the compile cache dropped between), each against
    float32 attention, and on against off bit for bit."""
    for case in cases:
        got = {}
        for name, env in VARIANTS.items():
            os.environ.update(env)
            DESC.device_caches.clear()
            S, D, BN, stages, warps, BM, causal = case
            ck, out, lse, ref, ref_lse = run_desc(S, D, BN, stages, warps, causal, True, Z=2, H=3, seed=S + D, BM=BM)
            torch.cuda.synchronize()
            loops = 2 if causal else 1
            assert pass_stats(ck)["pingponged"] == (0 if name == "off" else loops), (case, name, pass_stats(ck))
            assert_close_to_reference(out, lse, ref, ref_lse, f"case {case} {name}: ")
            got[name] = (out, lse)
        assert torch.equal(got["off"][0], got["on"][0]) and torch.equal(got["off"][1], got["on"][1]), \
            f"case {case}: knob on and off differ"


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("cfg", CFGS, ids=lambda c: "x".join(map(str, c)))
def test_gpu_pingpong_matches_torch(cfg, causal):
    """S: less than one key block (64), one (128: causal's off-band loop runs no iteration), ragged (200, 1000),
    several even blocks (1024)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    cases = [(S, *cfg, causal) for S in (64, 128, 200, 1000, 1024)]
    if cfg[-1] == 256:
        cases.append((300, *cfg, causal))  # one full 256-row block and a ragged one
    run_in_child(f"import tests.test_attention_pingpong as t; t.gpu_cases({cases!r})", 400)


def test_benchmark_pingpong_columns_on_cpu(monkeypatch):
    """benchmarks/attention.py --warp-specialize --pingpong [--overlap]: the columns compiled with the knobs (the
    interpreter, a dummy timer), so the GPU script does not rot; the environment is set for the compiling call only."""
    import functools

    import kernellab as kl
    import kernellab.language as tl
    from benchmarks.attention import _fmt, compiled_with, run_row
    from benchmarks.attention_kernel import attention_desc, make_attention_desc_kernel

    for k in KNOBS:
        monkeypatch.delenv(k, raising=False)
    seen = []

    def spy(*args, **kwargs):
        seen.append(tuple(os.environ.get(k) for k in KNOBS))
        return attention_desc(*args, warp_specialize=True, **kwargs)

    impls = {"kernellab": (kl, DESC, functools.partial(attention_desc, warp_specialize=True)),
             "kernellab_pingpong": (kl, make_attention_desc_kernel(kl, tl),
                                    compiled_with(spy, KERNELLAB_ATTN_PINGPONG="1")),
             "kernellab_overlap_pingpong": (kl, make_attention_desc_kernel(kl, tl),
                                            compiled_with(spy, KERNELLAB_ATTN_OVERLAP="1",
                                                          KERNELLAB_ATTN_PINGPONG="1"))}
    row = run_row(impls, 1, 2, 48, 16, True, device="cpu", timer=lambda fn: (fn(), fn(), 1e-3)[2],
                  cfg=dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=3))
    assert all(row[k]["ok"] for k in impls), row
    assert seen[0] == ("1", None) and ("1", "1") in seen and (None, None) in seen[1:], seen
    assert all(os.environ.get(k) is None for k in KNOBS)
    text = _fmt(row)
    assert "kl pingpong" in text and "pingpong/ws     1.00" in text and "ov+pp/ws     1.00" in text, text


def test_benchmark_flag_parses():
    from benchmarks.attention import _parse_args

    args = _parse_args(["--mode", "fwd", "--warp-specialize", "--pingpong", "--overlap"])
    assert args.pingpong and args.overlap and args.warp_specialize


@needs_ptxas
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tree_row_max_keeps_the_turn(causal, monkeypatch, tmp_path):
    """KERNELLAB_REDUCE_TREE=1 (codegen/lower_reduce.py): a thread's row max over its 64 scores is a tree (depth 6
    with the two rows interleaved, against two chains of 32); with the knob alone ptxas hoists the turn's bar.sync
    to right after the scores' wait, with pingpong the turn stays after the exponentials."""
    from kernellab.viz.data import sass

    base = build(1000, 128, 128, 3, 8, causal, {"KERNELLAB_ATTN_PINGPONG": "1"}, monkeypatch, tmp_path)
    tree = build(1000, 128, 128, 3, 8, causal, {"KERNELLAB_ATTN_PINGPONG": "1", "KERNELLAB_REDUCE_TREE": "1"},
                 monkeypatch, tmp_path)
    monkeypatch.delenv("KERNELLAB_REDUCE_TREE")
    assert tree.n_spills == 0 and "C75" not in tree.report.get("log", "")
    texts = [sass(ck.asm["cubin"])[0] for ck in (base, tree)]
    if texts[0] is None:
        pytest.skip("no nvdisasm")
    assert fmnmx_depth(texts[0]) >= 30 and fmnmx_depth(texts[1]) <= 8, [fmnmx_depth(t) for t in texts]
    for turn_at, last_exp, _ in turn_after_softmax(texts[1]):
        assert turn_at > last_exp


def test_benchmark_also_env_column_on_cpu(monkeypatch):
    """attention.py --also-env KEY=VAL[,KEY=VAL]: a column compiled with those variables, the spec parsed, the table
    shows its ratio to the specialized column."""
    import functools

    import kernellab as kl
    import kernellab.language as tl
    from benchmarks.attention import _fmt, _parse_args, compiled_with, env_spec, run_row
    from benchmarks.attention_kernel import attention_desc, make_attention_desc_kernel

    spec = "KERNELLAB_ATTN_PINGPONG=1,KERNELLAB_REDUCE_TREE=1"
    assert _parse_args(["--warp-specialize", "--also-env", spec, "--also-env", "A=2"]).also_env == [spec, "A=2"]
    assert env_spec(spec) == {"KERNELLAB_ATTN_PINGPONG": "1", "KERNELLAB_REDUCE_TREE": "1"}
    with pytest.raises(SystemExit):
        env_spec("KERNELLAB_REDUCE_TREE")
    monkeypatch.delenv("KERNELLAB_REDUCE_TREE", raising=False)
    seen = []

    def spy(*args, **kwargs):
        seen.append(os.environ.get("KERNELLAB_REDUCE_TREE"))
        return attention_desc(*args, warp_specialize=True, **kwargs)

    name = f"kernellab_env:{spec}"
    impls = {"kernellab": (kl, DESC, functools.partial(attention_desc, warp_specialize=True)),
             name: (kl, make_attention_desc_kernel(kl, tl), compiled_with(spy, **env_spec(spec)))}
    row = run_row(impls, 1, 2, 48, 16, False, device="cpu", timer=lambda fn: (fn(), fn(), 1e-3)[2],
                  cfg=dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=3))
    assert row[name]["ok"] and seen[0] == "1" and os.environ.get("KERNELLAB_REDUCE_TREE") is None
    assert f"[{spec}]" in _fmt(row) and "/ws     1.00" in _fmt(row)
