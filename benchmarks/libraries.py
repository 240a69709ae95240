"""Library benchmark: Liger-Kernel's ops run unchanged, compiled by kernellab (through `kernellab.compat`) and by
Triton, checked against float64 torch references and timed side by side.

    python benchmarks/libraries.py [op ...] [--rounds N] [--timeout S] [--no-write] [--merge] [--gpus N]

Installs nothing: it needs `liger-kernel` (`pip install liger-kernel --no-deps`) and torch; a real `triton`
is optional (without it only the kernellab side runs). Each op runs in its own child process per side:
`kernellab` does `kernellab.compat.install()` before importing liger, so every `@triton.jit` in the
library is a kernellab kernel; `triton` imports the real Triton (with TRITON_INTERPRET=1 on a CPU).
A child builds the op's inputs from a fixed seed (random values with a few edge values: large
magnitudes, tiny ones; never zeros), runs the Liger op forward and backward, and compares every output
and every input gradient with the same op written in plain torch on float64 copies of the inputs.
On a CPU the shapes are small and only correctness is checked.

On a GPU both sides' children stay up after their check (which compiled and autotuned every kernel for
these shapes) and time forward and forward+backward in `--rounds` rounds (default 5), alternating between
the two children and which one goes first, so drifts in clocks or load fall on both alike. Both time with
the same code (`_time_gpu`; Triton's do_bench returns a mean, kernellab's a median): per round a first call
and 50 ms of calls as warm-up, then `ms` = the median of 20..200 CUDA-event timings, each after an L2 flush
and a GPU sleep that covers the launch (the GPU's time), and `wall_ms` = back-to-back calls (host included).

Writes benchmarks/results/<date>-<gpu or cpu>-libraries.json (date, GPU, versions; per op and side:
correct, max error, error and its cause when the child failed; `rounds`, every round's figures, and per
figure its median over rounds (`fwd_ms`, `fwd_bwd_ms`, `fwd_wall_ms`, ...) with `_min` and `_max`;
kl_over_triton_<fwd|fwd_bwd>[_wall] = Triton median / kernellab median, > 1: kernellab faster, with the
paired rounds' ratios as `..._rounds`) and prints a table last (spread = the larger side's (max-min)/median).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MARK = "@@libraries-result "
SIDES = ("kernellab", "triton")
SEED = 0
FAKE_ROUNDS = "KERNELLAB_LIBRARIES_FAKE_ROUNDS"  # set: a CPU child times with made-up figures (tests)


# ---------------------------------------------------------------------------------------------
# Inputs


def _rand(shape, scale=1.0, edges=(), positive=False):
    """randn * scale (abs if positive), never exactly zero, with the given edge values written at
    fixed pseudo-random positions (first and last element included)."""
    import torch

    x = torch.randn(tuple(shape), dtype=torch.float64) * scale
    if positive:
        x = x.abs()
    x = torch.where(x.abs() < 1e-3 * scale, torch.full_like(x, 1e-3 * scale), x)
    flat = x.view(-1)
    if edges and flat.numel() >= 2:
        pos = [0, flat.numel() - 1] + torch.randint(0, flat.numel(), (len(edges),)).tolist()
        for i, e in enumerate(edges):
            flat[pos[i % len(pos)]] = e
    return x.float()


def _labels(n, v, ignore=-100, every=5):
    """Class labels in [0, v) with every `every`-th one (from 2) set to `ignore`."""
    import torch

    t = torch.randint(0, v, (n,))
    t[2::every] = ignore
    return t


# ---------------------------------------------------------------------------------------------
# References (float64, plain torch)


def _rms(x, eps):
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _rotate_half(x):
    import torch

    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _ce_rows(logits, target, ignore_index, smoothing, z_scale):
    """Per-row CE (label smoothing, z-loss) and the row mask; rows whose target is ignore_index count 0."""
    import torch

    keep = target != ignore_index
    lse = torch.logsumexp(logits, dim=-1)
    x_t = logits.gather(1, target.clamp(min=0)[:, None])[:, 0]
    nll = lse - x_t
    smooth = lse - logits.mean(-1)
    loss = (1 - smoothing) * nll + smoothing * smooth
    z = z_scale * lse * lse
    zero = torch.zeros_like(loss)
    return torch.where(keep, loss, zero), torch.where(keep, z, zero), keep


def _sparsemax(x):
    import torch

    z, _ = torch.sort(x, dim=-1, descending=True)
    k = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)
    cs = z.cumsum(-1)
    support = (1 + k * z) > cs
    kz = support.sum(-1, keepdim=True)
    tau = (cs.gather(-1, kz - 1) - 1) / kz
    return torch.clamp(x - tau, min=0)


def _gen_jsd(log_q, log_p, beta, keep):
    """Generalized JSD of Liger: M = beta P + (1-beta) Q; beta KL(P||M) + (1-beta) KL(Q||M), averaged over kept rows."""
    import torch

    p, q = log_p.exp(), log_q.exp()
    log_m = torch.log(beta * p + (1 - beta) * q)
    per = beta * p * (log_p - log_m) + (1 - beta) * q * (log_q - log_m)
    return (per.sum(-1) * keep).sum() / keep.sum()


# ---------------------------------------------------------------------------------------------
# The ops


@dataclass
class Op:
    """One Liger op. `build(size)` -> dict of inputs (float32 tensors and plain values, on the CPU); `grads`
    names the inputs that require grad; `liger(x)` runs the Liger op (liger imported there); `ref(x)` is the
    float64 reference on the same dict (tensors already float64); both return a tuple of outputs, of which
    `backprop` (indices) are differentiated (with random output gradients)."""

    name: str
    sizes: dict
    build: Callable
    liger: Callable
    ref: Callable
    grads: tuple = ()
    backprop: tuple = (0,)
    atol: float = 1e-5
    rtol: float = 1e-4
    note: str = ""
    gpu_atol: float | None = None  # where the GPU side computes differently (fp32 tl.dot is TF32 there)
    gpu_rtol: float | None = None
    # on the GPU, atol is at least this fraction of each tensor's RMS: a gradient that sums a TF32 GEMM's output
    # over the B*S rows (mlp's dWd = dO^T A, dWg, dWu) errs with the size of the sum, not of its elements (a
    # float64 model of a correct TF32 forward at the GPU size gives dWd err/tol 3.2 and dWg 1.9 with 2e-2 alone)
    gpu_atol_rms: float | None = None
    gpu_only: str = ""  # why the op cannot run on a CPU (liger asserts CUDA tensors): skipped there
    cpu_patch: Callable | None = None  # run before the op on a CPU: stands in for what liger asks a GPU


def _ops() -> list[Op]:
    import torch
    import torch.nn.functional as F

    ops = []

    def add(**kw):
        ops.append(Op(**kw))

    # -- norms
    add(name="rms_norm", sizes={"cpu": (16, 96), "gpu": (4096, 4096)},
        build=lambda s: {"X": _rand(s, 2.0, (40.0, -35.0, 1e-3)), "W": _rand(s[-1:], 1.0, (3.0,))},
        liger=lambda x: (_L("rms_norm").LigerRMSNormFunction.apply(x["X"], x["W"], 1e-6),),
        ref=lambda x: (_rms(x["X"], 1e-6) * x["W"],),
        grads=("X", "W"))
    add(name="rms_norm_gemma", sizes={"cpu": (16, 96), "gpu": (4096, 4096)},
        build=lambda s: {"X": _rand(s, 2.0, (40.0, -35.0)), "W": _rand(s[-1:], 0.5)},
        liger=lambda x: (_L("rms_norm").LigerRMSNormFunction.apply(x["X"], x["W"], 1e-6, 1.0, "gemma"),),
        ref=lambda x: (_rms(x["X"], 1e-6) * (1.0 + x["W"]),),
        grads=("X", "W"), note="offset 1.0, casting_mode gemma")
    add(name="layer_norm", sizes={"cpu": (16, 96), "gpu": (4096, 4096)},
        build=lambda s: {"X": _rand(s, 2.0, (50.0, -45.0)), "W": _rand(s[-1:], 1.0), "B": _rand(s[-1:], 1.0)},
        liger=lambda x: (_L("layer_norm").LigerLayerNormFunction.apply(x["X"], x["W"], x["B"], 1e-6),),
        ref=lambda x: ((x["X"] - x["X"].mean(-1, keepdim=True))
                       * torch.rsqrt(x["X"].var(-1, unbiased=False, keepdim=True) + 1e-6) * x["W"] + x["B"],),
        grads=("X", "W", "B"))
    add(name="fused_add_rms_norm", sizes={"cpu": (16, 96), "gpu": (4096, 4096)},
        build=lambda s: {"X": _rand(s, 2.0, (30.0,)), "R": _rand(s, 1.0, (-25.0,)), "W": _rand(s[-1:], 1.0)},
        liger=lambda x: tuple(_L("fused_add_rms_norm").LigerFusedAddRMSNormFunction.apply(
            x["X"], x["R"], x["W"], 1e-6)),
        ref=lambda x: (_rms(x["X"] + x["R"], 1e-6) * x["W"], x["X"] + x["R"]),
        grads=("X", "R", "W"), backprop=(0, 1),
        atol=1e-4)  # dW sums 4096 rows in fp32: Triton's and kernellab's both land 2x past 1e-5 (H200, 2026-11-26)
    add(name="poly_norm", sizes={"cpu": (16, 96), "gpu": (4096, 4096)},
        build=lambda s: {"X": _rand(s, 1.0, (4.0, -3.5)), "W": _rand((3,), 0.5), "B": _rand((), 0.5)},
        liger=lambda x: (_L("poly_norm").LigerPolyNormFunction.apply(x["X"], x["W"], x["B"], 1e-6),),
        ref=lambda x: (x["W"][0] * _rms(x["X"] ** 3, 1e-6) + x["W"][1] * _rms(x["X"] ** 2, 1e-6)
                       + x["W"][2] * _rms(x["X"], 1e-6) + x["B"],),
        grads=("X", "W", "B"), atol=1e-4)

    def group_norm_ref(x):
        X, G = x["X"], x["groups"]
        b, c = X.shape[:2]
        xg = X.reshape(b, G, -1)
        y = (xg - xg.mean(-1, keepdim=True)) * torch.rsqrt(xg.var(-1, unbiased=False, keepdim=True) + 1e-6)
        shape = (1, c) + (1,) * (X.dim() - 2)
        return (y.reshape(X.shape) * x["W"].reshape(shape) + x["B"].reshape(shape),)

    add(name="group_norm", sizes={"cpu": (4, 8, 24), "gpu": (32, 64, 4096)},
        build=lambda s: {"X": _rand(s, 2.0, (30.0, -20.0)), "W": _rand(s[1:2], 1.0), "B": _rand(s[1:2], 1.0),
                         "groups": 4},
        liger=lambda x: (_L("group_norm").LigerGroupNormFunction.apply(
            x["X"], x["W"], x["B"], x["X"].shape[1], x["groups"], 1e-6),),
        ref=group_norm_ref, grads=("X", "W", "B"), atol=1e-4)

    # -- activations
    add(name="swiglu", sizes={"cpu": (16, 96), "gpu": (4096, 8192)},
        build=lambda s: {"a": _rand(s, 2.0, (30.0, -30.0)), "b": _rand(s, 1.0)},
        liger=lambda x: (_L("swiglu").LigerSiLUMulFunction.apply(x["a"], x["b"]),),
        ref=lambda x: (F.silu(x["a"]) * x["b"],), grads=("a", "b"))
    add(name="geglu", sizes={"cpu": (16, 96), "gpu": (4096, 8192)},
        build=lambda s: {"a": _rand(s, 2.0, (12.0, -12.0)), "b": _rand(s, 1.0)},
        liger=lambda x: (_L("geglu").LigerGELUMulFunction.apply(x["a"], x["b"]),),
        ref=lambda x: (F.gelu(x["a"], approximate="tanh") * x["b"],), grads=("a", "b"))
    add(name="swiglu_fused_gate_up", sizes={"cpu": (16, 192), "gpu": (4096, 16384)},
        build=lambda s: {"y": _rand(s, 2.0, (30.0, -30.0))},
        liger=lambda x: (_L("swiglu").LigerFusedGateUpSiLUMulFunction.apply(x["y"]),),
        ref=lambda x: (F.silu(x["y"][..., :x["y"].shape[-1] // 2]) * x["y"][..., x["y"].shape[-1] // 2:],),
        grads=("y",), note="gate and up concatenated in one tensor")
    add(name="relu_squared", sizes={"cpu": (16, 96), "gpu": (4096, 8192)},
        build=lambda s: {"X": _rand(s, 2.0, (30.0, -30.0))},
        liger=lambda x: (_L("relu_squared").LigerReLUSquaredFunction.apply(x["X"]),),
        ref=lambda x: (torch.relu(x["X"]) ** 2,), grads=("X",))
    add(name="dyt", sizes={"cpu": (16, 96), "gpu": (4096, 4096)},
        build=lambda s: {"x": _rand(s, 2.0, (30.0, -30.0)), "alpha": torch.tensor([0.7]),
                         "gamma": _rand(s[-1:], 1.0), "beta": _rand(s[-1:], 1.0)},
        liger=lambda x: (_L("dyt").LigerDyTFunction.apply(x["x"], x["alpha"], x["gamma"], x["beta"]),),
        ref=lambda x: (torch.tanh(x["alpha"] * x["x"]) * x["gamma"] + x["beta"],),
        grads=("x", "alpha", "gamma", "beta"), atol=1e-4, cpu_patch=_dyt_on_cpu,
        note="on a CPU the backward's program count (the GPU's SM count in liger) is patched to 4")
    add(name="softmax", sizes={"cpu": (16, 96), "gpu": (4096, 4096)},
        build=lambda s: {"x": _rand(s, 3.0, (80.0, -80.0))},
        liger=lambda x: (_L("softmax").LigerSoftmaxFunction.apply(x["x"]),),
        ref=lambda x: (torch.softmax(x["x"], -1),), grads=("x",))
    add(name="sparsemax", sizes={"cpu": (16, 96), "gpu": (4096, 1024)},
        build=lambda s: {"x": _rand(s, 1.0, (6.0, -6.0))},
        liger=lambda x: (_L("sparsemax").LigerSparsemaxFunction.apply(x["x"], -1),),
        ref=lambda x: (_sparsemax(x["x"]),), grads=("x",))

    # -- losses
    def ce_build(s):
        bt, v = s
        return {"x": _rand(s, 3.0, (30.0, -30.0)), "target": _labels(bt, v)}

    def ce_ref(x):
        loss, z, keep = _ce_rows(x["x"], x["target"], -100, 0.1, 1e-4)
        n = keep.sum()
        return ((loss + z).sum() / n, z.sum() / n)

    add(name="cross_entropy", sizes={"cpu": (16, 200), "gpu": (4096, 32768)},
        build=ce_build,
        liger=lambda x: tuple(_L("cross_entropy").LigerCrossEntropyFunction.apply(
            x["x"], x["target"], None, -100, 1e-4, 0.1, "mean", None, True)[:2]),
        ref=ce_ref, grads=("x",), note="label_smoothing 0.1, z-loss 1e-4, 1 in 5 targets ignored")

    def flce_build(s):
        bt, h, v = s
        return {"x": _rand((bt, h), 1.0, (8.0,)), "W": _rand((v, h), 0.05), "b": _rand((v,), 0.1),
                "target": _labels(bt, v)}

    def flce_ref(x):
        logits = x["x"] @ x["W"].T + x["b"]
        loss, z, keep = _ce_rows(logits, x["target"], -100, 0.1, 0.0)
        return (loss.sum() / keep.sum(),)

    add(name="fused_linear_cross_entropy", sizes={"cpu": (16, 32, 200), "gpu": (4096, 4096, 32768)},
        build=flce_build,
        liger=lambda x: (_L("fused_linear_cross_entropy").LigerFusedLinearCrossEntropyFunction.apply(
            x["x"], x["W"], x["target"], x["b"], None, -100, 0.0, 0.1)[0],),
        ref=flce_ref, grads=("x", "W", "b"), atol=1e-5, gpu_atol=2e-3, note="bias, label_smoothing 0.1")

    def kl_build(s):
        return {"y_pred": torch.log_softmax(_rand(s, 2.0, (20.0,)), -1),
                "y_true": torch.softmax(_rand(s, 2.0, (-20.0,)), -1)}

    add(name="kl_div", sizes={"cpu": (16, 200), "gpu": (4096, 32768)},
        build=kl_build,
        liger=lambda x: (_L("kl_div").LigerKLDivLossFunction.apply(x["y_pred"], x["y_true"], "batchmean"),),
        ref=lambda x: ((x["y_true"] * (torch.log(x["y_true"].clamp(min=1e-10)) - x["y_pred"])).sum()
                       / x["y_pred"].shape[0],),
        grads=("y_pred",))

    def jsd_build(s):
        bt, v = s
        return {"x": torch.log_softmax(_rand(s, 2.0, (20.0,)), -1),
                "y": torch.log_softmax(_rand(s, 2.0, (-20.0,)), -1), "labels": _labels(bt, v)}

    add(name="jsd", sizes={"cpu": (16, 200), "gpu": (4096, 32768)},
        build=jsd_build,
        liger=lambda x: (_L("jsd").LigerJSDFunction.apply(x["x"], x["y"], x["labels"], 0.3),),
        ref=lambda x: (_gen_jsd(x["x"], x["y"], 0.3, (x["labels"] != -100).double()),),
        grads=("x",), note="beta 0.3, shift_labels with ignored rows")

    def tvd_build(s):
        bt, v = s
        return {"p": torch.softmax(_rand(s, 2.0, (20.0,)), -1), "q": torch.softmax(_rand(s, 2.0), -1),
                "labels": _labels(bt, v)}

    def tvd_ref(x):
        keep = (x["labels"] != -100).double()
        return ((0.5 * (x["p"] - x["q"]).abs().sum(-1) * keep).sum() / keep.sum(),)

    add(name="tvd", sizes={"cpu": (16, 200), "gpu": (4096, 32768)},
        build=tvd_build,
        liger=lambda x: (_L("tvd").LigerTVDLossFunction.apply(x["p"], x["q"], x["labels"], "batchmean"),),
        ref=tvd_ref, grads=("p",))

    def fljsd_build(s):
        bt, h, v = s
        return {"xs": _rand((bt, h), 1.0, (6.0,)), "Ws": _rand((v, h), 0.1), "xt": _rand((bt, h), 1.0),
                "Wt": _rand((v, h), 0.1), "labels": _labels(bt, v)}

    def fljsd_ref(x):
        t = 2.0
        log_q = torch.log_softmax(x["xs"] @ x["Ws"].T / t, -1)
        log_p = torch.log_softmax(x["xt"] @ x["Wt"].T / t, -1)
        return (_gen_jsd(log_q, log_p, 0.3, (x["labels"] != -100).double()),)

    add(name="fused_linear_jsd", sizes={"cpu": (16, 32, 200), "gpu": (4096, 4096, 32768)},
        build=fljsd_build,
        liger=lambda x: (_L("fused_linear_jsd").LigerFusedLinearJSDFunction.apply(
            x["xs"], x["Ws"], x["xt"], x["Wt"], x["labels"], 0.3, -100, 2.0),),
        ref=fljsd_ref, grads=("xs", "Ws"), gpu_atol=2e-3, note="beta 0.3, temperature 2")

    # -- positional embeddings
    def rope_build(s):
        b, hq, hk, seq, d = s
        ang = torch.arange(seq, dtype=torch.float64)[:, None] * (1e4 ** (-torch.arange(0, d, 2) / d))[None]
        emb = torch.cat((ang, ang), -1)[None]
        return {"q": _rand((b, hq, seq, d), 1.0, (20.0,)), "k": _rand((b, hk, seq, d), 1.0, (-20.0,)),
                "cos": emb.cos().float(), "sin": emb.sin().float()}

    add(name="rope", sizes={"cpu": (2, 4, 2, 8, 32), "gpu": (8, 32, 8, 2048, 128)},
        build=rope_build,
        liger=lambda x: tuple(_L("rope").LigerRopeFunction.apply(x["q"], x["k"], x["cos"], x["sin"])),
        ref=lambda x: tuple(t * x["cos"][:, None] + _rotate_half(t) * x["sin"][:, None] for t in (x["q"], x["k"])),
        grads=("q", "k"), backprop=(0, 1))

    def mrope_build(s):
        b, hq, hk, seq, d = s
        pos = torch.randint(0, 64, (3, b, seq)).double()
        inv = 1e4 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = pos[..., None] * inv
        emb = torch.cat((ang, ang), -1)
        sec = [d // 8, (d // 2 - d // 8) // 2, d // 2 - d // 8 - (d // 2 - d // 8) // 2]
        return {"q": _rand((b, hq, seq, d), 1.0, (20.0,)), "k": _rand((b, hk, seq, d), 1.0),
                "cos": emb.cos().float(), "sin": emb.sin().float(), "section": sec}

    def mrope_ref(x):
        sec = x["section"] * 2
        cos = torch.cat([m[i % 3] for i, m in enumerate(x["cos"].split(sec, dim=-1))], -1)[:, None]
        sin = torch.cat([m[i % 3] for i, m in enumerate(x["sin"].split(sec, dim=-1))], -1)[:, None]
        return tuple(t * cos + _rotate_half(t) * sin for t in (x["q"], x["k"]))

    add(name="qwen2vl_mrope", sizes={"cpu": (2, 4, 2, 8, 32), "gpu": (8, 32, 8, 2048, 128)},
        build=mrope_build,
        liger=lambda x: tuple(_L("qwen2vl_mrope").LigerQwen2VLMRopeFunction.apply(
            x["q"], x["k"], x["cos"], x["sin"], x["section"])),
        ref=mrope_ref, grads=("q", "k"), backprop=(0, 1))

    def l4_build(s):
        b, hq, hk, seq, d = s
        ang = torch.arange(seq, dtype=torch.float64)[:, None] * (5e5 ** (-torch.arange(0, d, 2) / d))[None]
        return {"q": _rand((b, seq, hq, d), 1.0, (20.0,)), "k": _rand((b, seq, hk, d), 1.0),
                "freqs": torch.polar(torch.ones_like(ang), ang).to(torch.complex64)}

    def l4_ref(x):
        f = x["freqs"].to(torch.complex128)[None, :, None, :]
        out = []
        for t in (x["q"], x["k"]):
            c = torch.view_as_complex(t.reshape(*t.shape[:-1], -1, 2).contiguous())
            out.append(torch.view_as_real(c * f).flatten(3))
        return tuple(out)

    add(name="llama4_rope", sizes={"cpu": (2, 4, 2, 8, 32), "gpu": (8, 32, 8, 2048, 128)},
        build=l4_build,
        liger=lambda x: tuple(_L("llama4_rope").LigerLlama4RopeFunction.apply(x["q"], x["k"], x["freqs"])),
        ref=l4_ref, grads=("q", "k"), backprop=(0, 1), note="complex freqs_cis")
    def modrms_build(s):
        b, t, h = s
        return {"X": _rand(s, 2.0, (30.0,)), "W": _rand((h,), 1.0), "scale": _rand((b, h), 0.5),
                "shift": _rand((b, h), 0.5)}

    add(name="modulated_rms_norm", sizes={"cpu": (2, 8, 96), "gpu": (8, 1024, 4096)},
        build=modrms_build,
        liger=lambda x: (_L("modulated_rms_norm").LigerModulatedRMSNormFunction.apply(
            x["X"], x["W"], x["scale"], x["shift"], 1e-6),),
        ref=lambda x: ((1 + x["scale"][:, None]) * (_rms(x["X"], 1e-6) * x["W"]) + x["shift"][:, None],),
        grads=("X", "W", "scale", "shift"), atol=1e-4, note="per-batch scale/shift (atomic accumulation)")

    def mta_ref(x, sparse):
        s = x["scores"]
        L = s.shape[-1]
        future = torch.ones(L, L, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(future, -1e9)
        p = _sparsemax(s) if sparse else torch.softmax(s, -1)
        out = F.conv2d(p, x["w"], x["b"], padding=x["w"].shape[-1] // 2)
        return (out.masked_fill(future, 0.0),)

    for sparse in (False, True):
        add(name="multi_token_attention" + ("_sparse" if sparse else ""),
            sizes={"cpu": (2, 4, 16), "gpu": (4, 16, 1024)},
            build=lambda s: {"scores": _rand(s[:2] + (s[2], s[2]), 2.0, (20.0,)), "w": _rand((s[1], s[1], 3, 3), 0.3),
                             "b": _rand((s[1],), 0.1)},
            liger=lambda x, sparse=sparse: (_L("multi_token_attention").LigerMultiTokenAttentionFunction.apply(
                x["scores"], x["w"], x["b"], 1, 1, 1, 1, sparse),),
            ref=lambda x, sparse=sparse: mta_ref(x, sparse), grads=("scores", "w", "b"), atol=1e-4,
            # dw is torch's conv2d_weight (cuDNN, TF32 by default) summed over 4M products: TF32 inputs alone
            # give err/tol 88 at 1e-4 (benchmarks/tools/mta_dw_tf32.py; the H200 gave 87), float32 11.6
            gpu_atol=2e-2, gpu_rtol=2e-2,
            note="causal mask, 3x3 conv" + (", sparsemax" if sparse else ", softmax"))

    def na_ref(x):
        q, k, v = x["q"], x["k"], x["v"]
        L, d = q.shape[-2], q.shape[-1]
        i = torch.arange(L, device=q.device)
        rel = i[None, :] - i[:, None]
        keep = (rel.abs() <= (5 // 2) * 2) & (rel % 2 == 0)
        s = (q @ k.transpose(-1, -2)) * d ** -0.5
        return (torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v,)

    add(name="fused_neighborhood_attention", sizes={"cpu": (1, 2, 32, 16), "gpu": (4, 16, 2048, 64)},
        build=lambda s: {"q": _rand(s, 1.0, (6.0,)), "k": _rand(s, 1.0), "v": _rand(s, 1.0)},
        liger=lambda x: (_L("fused_neighborhood_attention").LigerFusedNeighborhoodAttentionFunction.apply(
            x["q"], x["k"], x["v"], 5, 2),),
        ref=na_ref, grads=("q", "k", "v"), atol=1e-4, gpu_atol=2e-2, gpu_rtol=2e-2,
        note="kernel 5, dilation 2; fp32 tl.dot (TF32 on the GPU)")

    def moe_build(s):
        t, h, i, e, k = s
        return {"x": _rand((t, h), 1.0, (5.0,)), "gu": _rand((e, 2 * i, h), h ** -0.5),
                "down": _rand((e, h, i), i ** -0.5),
                "idx": torch.stack([torch.randperm(e)[:k] for _ in range(t)]).to(torch.int32),
                "w": torch.softmax(_rand((t, k), 1.0), -1)}

    def moe_ref(x):
        """Expert by expert over the tokens routed to it (gathering one weight matrix per token would need
        T x 2I x H floats: 64 GiB at the GPU size)."""
        out = torch.zeros_like(x["x"])
        inter = x["gu"].shape[1] // 2
        for e in range(x["gu"].shape[0]):
            tok, slot = (x["idx"] == e).nonzero(as_tuple=True)
            gu = x["x"][tok] @ x["gu"][e].T
            a = F.silu(gu[:, :inter]) * gu[:, inter:]
            out = out.index_add(0, tok, x["w"][tok, slot][:, None] * (a @ x["down"][e].T))
        return (out,)

    add(name="fused_moe", sizes={"cpu": (16, 32, 16, 4, 2), "gpu": (4096, 2048, 1024, 8, 2)},
        build=moe_build,
        liger=lambda x: (_L("fused_moe").LigerFusedMoEFunction.apply(x["x"], x["gu"], x["down"], x["idx"], x["w"]),),
        # GPU: its tl.dot products of float32 tiles take TF32 operands (both compilers). TF32 operands alone, in
        # float64 (benchmarks/tools/tf32_model.py), give err/tol 2.47 at 2e-2 (dgu); the H200 gave 2.05
        # (kernellab) and 2.26 (Triton). At 6e-2 the model is at 0.82.
        ref=moe_ref, grads=("x", "gu", "down", "w"), atol=1e-4, gpu_atol=6e-2, gpu_rtol=6e-2,
        note="grouped GEMM + SwiGLU, top-2 of 4 (tl.sort, tl.associative_scan, tl.dot)")

    def mlp_ref(x):
        return ((F.silu(x["x"] @ x["Wg"].T) * (x["x"] @ x["Wu"].T)) @ x["Wd"].T,)

    add(name="mlp", sizes={"cpu": (16, 64, 128), "gpu": (4096, 4096, 14336)},
        build=lambda s: {"x": _rand((2, s[0] // 2, s[1]), 1.0, (5.0,)), "Wg": _rand((s[2], s[1]), s[1] ** -0.5),
                         "Wu": _rand((s[2], s[1]), s[1] ** -0.5), "Wd": _rand((s[1], s[2]), s[2] ** -0.5)},
        liger=lambda x: (_L("mlp").LigerMLPFunction.apply(x["x"], x["Wg"], x["Wu"], x["Wd"]),),
        ref=mlp_ref, grads=("x", "Wg", "Wu", "Wd"), gpu_atol=2e-2, gpu_rtol=2e-2, gpu_atol_rms=2e-2,
        gpu_only="liger asserts CUDA tensors (host TensorDescriptors, TMA)",
        note="SwiGLU MLP with host-side tensor descriptors")

    def flkl_build(s):
        bt, h, v = s
        return {"x": _rand((bt, h), 1.0, (6.0,)), "W": _rand((v, h), 0.1),
                "target": torch.softmax(_rand((bt, v), 2.0, (-20.0,)), -1)}

    add(name="fused_linear_kl_div", sizes={"cpu": (16, 32, 200), "gpu": (4096, 4096, 32768)},
        build=flkl_build,
        liger=lambda x: (_L("fused_linear_kl_div").LigerFusedLinearKLDivFunction.apply(
            x["x"], x["W"], x["target"], None, "batchmean", -100, 2.0),),
        ref=lambda x: ((x["target"] * (torch.log(x["target"].clamp(min=1e-10))
                                      - torch.log_softmax(x["x"] @ x["W"].T / 2.0, -1))).sum() / x["x"].shape[0],),
        grads=("x", "W"), gpu_atol=2e-3, note="temperature 2")

    def cetvd_build(s):
        bt, v = s
        return {"s": _rand(s, 3.0, (25.0,)), "t": _rand(s, 3.0, (-25.0,)), "target": _labels(bt, v)}

    def cetvd_ref(x):
        ce, _, keep = _ce_rows(x["s"], x["target"], -100, 0.0, 0.0)
        tvd = 0.5 * (torch.softmax(x["s"], -1) - torch.softmax(x["t"], -1)).abs().sum(-1)
        return (ce, torch.where(keep, tvd, torch.zeros_like(tvd)))

    add(name="fused_ce_tvd", sizes={"cpu": (16, 200), "gpu": (4096, 32768)},
        build=cetvd_build,
        liger=lambda x: tuple(_L("fused_ce_tvd").LigerFusedCETVDFunction.apply(x["s"], x["t"], x["target"])),
        ref=cetvd_ref, grads=("s",), backprop=(0, 1), gpu_atol=1e-4,
        note="gpu_atol: where p - q is within rounding of 0, float32 and float64 take opposite signs of the TVD "
             "subgradient, moving ds by ~p_j (6e-5 at V=32768, the same bits for both compilers)")

    add(name="embedding", sizes={"cpu": (200, 64, 48), "gpu": (32768, 4096, 8192)},
        build=lambda s: {"E": _rand(s[:2], 1.0, (9.0,)), "idx": torch.randint(0, s[0], (s[2],))},
        liger=lambda x: (importlib.import_module("liger_kernel.ops.experimental.embedding")
                         .LigerEmbeddingFunction.apply(x["E"], x["idx"]),),
        ref=lambda x: (x["E"][x["idx"]],), grads=("E",), note="experimental; repeated indices (atomic adds)")
    def sls_build(s):
        b, l1, v = s
        mask = torch.ones(b, l1 + 3, dtype=torch.int32)
        mask[:, 1::4] = 0
        return {"logits": _rand(s, 3.0, (30.0,)), "ids": torch.randint(0, v, (b, l1 + 3)), "mask": mask}

    def sls_ref(x):
        L = x["logits"].shape[1] - 1
        logp = torch.log_softmax(x["logits"][:, :L] / 0.9, -1).gather(-1, x["ids"][:, -L:, None])[..., 0]
        return (torch.where(x["mask"][:, -L:] != 0, logp, torch.zeros_like(logp)),)

    add(name="grpo_selective_log_softmax", sizes={"cpu": (2, 9, 300), "gpu": (8, 1025, 32768)},
        build=sls_build,
        liger=lambda x: (_L("grpo_loss").fused_selective_log_softmax(x["logits"], x["ids"], 0.9, x["mask"]),),
        ref=sls_ref, backprop=(), note="forward only (no grad); a masked-out token keeps 0; `MASK is not None`")
    return ops


def _dyt_on_cpu():
    """liger's dyt backward sizes its grid by the GPU's SM count and leaves it unset on a CPU: stand in 4."""
    m = _L("dyt")
    m.infer_device = lambda: "npu"
    m.get_npu_core_count = lambda *a, **k: 4


def _L(mod):
    return importlib.import_module(f"liger_kernel.ops.{mod}")


# ---------------------------------------------------------------------------------------------
# Child: one op on one side


def _to(x, dtype, device, grads=()):
    import torch

    out = {}
    for k, v in x.items():
        if isinstance(v, torch.Tensor):
            v = v.to(device)
            if v.is_floating_point():
                v = v.to(dtype)
            elif v.is_complex():
                v = v.to(torch.complex128 if dtype == torch.float64 else torch.complex64)
            if k in grads:
                v = v.detach().requires_grad_(True)
        out[k] = v
    return out


def _outs_and_grads(op, fn, x, gouts):
    """Run `fn(x)`, backprop `gouts` through op.backprop outputs; returns (outputs, grads by name)."""
    import torch

    outs = fn(x)
    diff = [outs[i] for i in op.backprop]
    if diff:
        torch.autograd.backward(diff, [g.to(o.dtype) for g, o in zip(gouts, diff)])
    return [o.detach() for o in outs], {k: x[k].grad for k in op.grads}


def _compare(got, ref, atol, rtol):
    """(max abs error, max error / tolerance); both NaN-aware (a NaN where the reference has none is inf)."""
    import torch

    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    if got.shape != ref.shape:
        return math.inf, math.inf
    err = (got - ref).abs()
    err = torch.where(torch.isnan(err) & ~torch.isnan(ref), torch.full_like(err, math.inf), err)
    err = torch.nan_to_num(err, nan=0.0)
    return err.max().item(), (err / (atol + rtol * ref.abs())).max().item()


def _cause(exc: BaseException) -> str:
    """The exception, and the innermost liger source line it came through (where the failing kernel is)."""
    where = ""
    for fs in traceback.extract_tb(exc.__traceback__):
        if "liger_kernel" in fs.filename:
            where = f" [{fs.filename.split('site-packages/')[-1]}:{fs.lineno}]"
    msg = str(exc).strip().replace("\n", " | ")
    msg = msg.replace(str(Path(importlib.util.find_spec("liger_kernel").origin).parents[1]) + os.sep, "")
    return f"{type(exc).__name__}: {msg[:600]}{where}"


def child(name: str, side: str, device: str):
    """Check `name` on `side`: (result dict, round timer or None). The timer exists on a GPU when the op ran."""
    if device != "cuda":  # one config for fused_moe's autotuned GEMMs (32 configs would take minutes to interpret)
        os.environ.setdefault("LIGER_FUSED_MOE_AUTOTUNE", "0")
    if side == "kernellab":
        import kernellab.compat

        kernellab.compat.install()
    elif device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    op = {o.name: o for o in _ops()}[name]
    res: dict = {"side": side}
    if op.gpu_only and device != "cuda":
        res.update(correct=None, skipped=f"GPU only: {op.gpu_only}")
        return res, None
    stage, timer = "import", None
    try:
        import triton  # noqa: F401  (kernellab's under compat: liger must find it)

        if device != "cuda" and op.cpu_patch:
            op.cpu_patch()

        torch.manual_seed(SEED)
        size = op.sizes["gpu" if device == "cuda" else "cpu"]
        res["shape"] = list(size)
        with torch.device(device):  # made where they are used: the GPU shapes are large for a CPU reference
            base = op.build(size)
            # output gradients: random, fixed by the seed; a 0-d output gets 0.75 (not 1: that is a fast path)
            with torch.no_grad():
                probe = op.ref(_to(base, torch.float64, device))
            gouts = [torch.full_like(probe[i], 0.75) if probe[i].dim() == 0 else _rand(probe[i].shape, 1.0)
                     for i in op.backprop]
        del probe
        stage = "reference"
        x64 = _to(base, torch.float64, device, op.grads)
        ref_outs, ref_grads = _outs_and_grads(op, op.ref, x64, [g.double() for g in gouts])
        stage = "forward+backward"
        del x64
        x = _to(base, torch.float32, device, op.grads)
        # poison: with deterministic mode on, torch.empty fills floats with NaN (ints with their max), so an
        # output element the library's kernels never write shows up as an error (off again before timing)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        try:
            outs, grads = _outs_and_grads(op, op.liger, x, gouts)
        finally:
            torch.use_deterministic_algorithms(False)
        stage = "check"
        gpu = device == "cuda"
        atol = op.gpu_atol if gpu and op.gpu_atol else op.atol
        rtol = op.gpu_rtol if gpu and op.gpu_rtol else op.rtol
        scaled = op.gpu_atol_rms if gpu else None

        def tol(r):
            return max(atol, scaled * r.detach().double().pow(2).mean().sqrt().item()) if scaled else atol

        checks = {f"out{i}": _compare(o, r, tol(r), rtol) for i, (o, r) in enumerate(zip(outs, ref_outs))}
        for k in op.grads:
            checks[f"d{k}"] = (_compare(grads[k], ref_grads[k], tol(ref_grads[k]), rtol) if grads[k] is not None
                               else (math.inf, math.inf))
        worst = max(checks, key=lambda k: checks[k][1])
        res.update(correct=all(v[1] <= 1.0 for v in checks.values()),
                   max_abs_err=max(v[0] for v in checks.values()), worst=worst,
                   worst_err_over_tol=checks[worst][1], atol=atol, rtol=rtol)
        if device == "cuda":
            res["timed"] = True
            timer = _timer(op, _to(base, torch.float32, device, op.grads), gouts)
    except Exception as e:  # a failing op is a result, not a crash of the benchmark
        res.update(correct=False, stage=stage, error=_cause(e), traceback=traceback.format_exc()[-4000:])
        timer = None
    if device != "cuda" and os.environ.get(FAKE_ROUNDS) and timer is None and "error" not in res:
        res["timed"] = True  # tests of the rounds on a CPU: fixed figures, each round stamped like a real one
        timer = lambda: {"fwd_ms": 1.0, "fwd_wall_ms": 2.0, "at": time.time()}  # noqa: E731
    return res, timer


def _timer(op, x, gouts):
    """A function timing one round of `op` on `x` (forward, and forward+backward where the op has a
    backward): {fwd_ms, fwd_wall_ms, fwd_host_ms, fwd_reps, ...}. Built after the correctness run, which
    compiled (and autotuned) every kernel for these shapes, so no round times a compile."""
    import torch

    def fwd():
        op.liger(x)

    def fwd_bwd():
        for k in op.grads:
            x[k].grad = None
        outs = op.liger(x)
        torch.autograd.backward([outs[i] for i in op.backprop], gouts)

    fns = {"fwd": fwd}
    if op.backprop:
        fns["fwd_bwd"] = fwd_bwd
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    cycles: list = []

    def one_round():
        out = {"at": time.time()}
        for key, fn in fns.items():
            t = _time_gpu(fn, flush, cycles)
            out.update({f"{key}_{k}": v for k, v in t.items()})
        return out

    return one_round


def _time_gpu(fn, flush, cycles, warmup_s=0.05, rep_s=0.1, min_reps=20, max_reps=200, setup=None):
    """Time `fn` on the GPU (ms): the same code on both sides (Triton's do_bench returns a mean,
    kernellab's a median: neither is used).

    After a first call and `warmup_s` of back-to-back calls (clocks up, allocator warm):
    - wall_ms: back-to-back calls, host included (what a training loop sees when launches are the limit);
    - host_ms: enqueue time of one call (median of 5), for sizing the sleep below;
    - ms: the median over reps of CUDA events around one call, each rep after an L2 flush and a
      `torch.cuda._sleep` twice as long as the enqueue, so the events time the GPU's work, not the launches
      (an op that syncs inside, as liger's cross_entropy does with .item(), still shows what follows the sync).
      The sleep counts SM clock cycles: `cycles` (cycles per ms) is measured on every call and the largest
      value kept, since one taken while the clocks were still low (a first timing on an idle GPU) makes every
      later sleep too short, and the GPU then waits for the host inside the events. Each rep checks that its
      sleep covered the enqueue (the start event must still be pending when the call returns); a rep whose
      did not is taken again with twice the sleep (`uncovered` counts them, at most MAX_RETAKES: an op that
      syncs inside is never covered; `sleep_ms` is the last sleep).

    `setup` (benchmarks/tools/unseen_libraries.py: restoring the tensors a replayed call changes), when given,
    runs before every call, outside what is timed: `ms` and `host_ms` leave it out, and `wall_ms` is
    back-to-back setup+call less back-to-back setup alone."""
    import torch

    sync = torch.cuda.synchronize
    has_setup, setup = setup is not None, setup or (lambda: None)

    def call():
        setup()
        fn()

    call()
    sync()
    t0, n = time.perf_counter(), 0
    while n < 3 or time.perf_counter() - t0 < warmup_s:
        call()
        n += 1
    sync()
    per_call = (time.perf_counter() - t0) / n
    n_wall = max(5, min(1000, int(rep_s / per_call)))
    t0 = time.perf_counter()
    for _ in range(n_wall):
        call()
    sync()
    wall_ms = (time.perf_counter() - t0) / n_wall * 1e3
    if has_setup:  # its own back-to-back time comes off
        t0 = time.perf_counter()
        for _ in range(n_wall):
            setup()
        sync()
        wall_ms = max(0.0, wall_ms - (time.perf_counter() - t0) / n_wall * 1e3)
    host = []
    for _ in range(5):
        setup()
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
        sync()
    host_ms = sorted(host)[2] * 1e3
    _measure_cycles(cycles, sync)
    sleep = int(cycles[0] * (2 * host_ms + 0.05))
    reps = max(min_reps, min(max_reps, int(rep_s * 1e3 / max(wall_ms, 1e-3))))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    i = uncovered = 0
    while i < reps:
        setup()
        flush.zero_()
        torch.cuda._sleep(sleep)
        starts[i].record()
        fn()
        if uncovered < MAX_RETAKES and starts[i].query():  # the GPU got past the sleep before the host was done
            sync()
            uncovered += 1
            _measure_cycles(cycles, sync)  # the clocks are up now
            sleep = max(2 * sleep, int(cycles[0] * (2 * host_ms + 0.05)))
            continue  # this rep again (its events are recorded anew)
        ends[i].record()
        i += 1
    sync()
    ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return {"ms": statistics.median(ms), "wall_ms": wall_ms, "host_ms": host_ms, "reps": reps,
            "uncovered": uncovered, "sleep_ms": sleep / cycles[0]}


MAX_RETAKES = 3  # reps of one _time_gpu call taken again with a longer sleep (the sleep grows at most 8x)


def _measure_cycles(cycles: list, sync) -> None:
    """GPU clock cycles per ms as `torch.cuda._sleep` counts them, kept in `cycles[0]`: the largest of this and
    earlier measurements (a measurement at lowered clocks reads low, and only makes sleeps shorter)."""
    import torch

    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(10_000_000)
    b.record()
    sync()
    c = 10_000_000 / max(a.elapsed_time(b), 1e-6)
    cycles[:] = [max(cycles[0], c) if cycles else c]




# ---------------------------------------------------------------------------------------------
# Parent


def _real_triton() -> bool:
    spec = importlib.util.find_spec("triton")
    return spec is not None and spec.origin is not None and "kernellab" not in spec.origin


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


class _Child:
    """One child process (one op, one side) that checks the op, then times a round each time it is asked
    (`--serve`): both sides' children of an op stay up, so rounds can alternate between them without
    paying the imports, the compile and the reference again. Result lines come through a reader thread,
    so every wait has a timeout."""

    def __init__(self, name, side, device, serve=True, gpu_index=None):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        if gpu_index is not None:  # --gpus: this op's children see one GPU of the host
            visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
            env["CUDA_VISIBLE_DEVICES"] = visible[gpu_index] if gpu_index < len(visible) else str(gpu_index)
        self.side, self.t0, self.closed = side, time.time(), False
        self.err = tempfile.TemporaryFile(mode="w+")
        cmd = [sys.executable, __file__, "--child", name, side, device] + (["--serve"] if serve else [])
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True,
                                  env=env, cwd=str(ROOT))
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            if line.startswith(MARK):
                self.q.put(json.loads(line[len(MARK):]))
        self.q.put(None)

    def result(self, timeout, stage="crash"):
        """The next result line; an error dict when the child times out or exits first."""
        try:
            r = self.q.get(timeout=timeout)
        except queue.Empty:
            self.close(kill=True)
            return {"side": self.side, "correct": False, "stage": "timeout", "error": f"timed out after {timeout} s"}
        if r is not None:
            return r
        self.p.wait()
        tail = ""
        if not self.closed:
            self.err.seek(0)
            tail = self.err.read()[-2000:]
        return {"side": self.side, "correct": False, "stage": stage,
                "error": f"child exited {self.p.returncode}: {tail[-600:]}", "traceback": tail}

    def round(self, timeout):
        if self.closed:
            return {"side": self.side, "stage": "timing", "error": "child already closed"}
        try:
            self.p.stdin.write("round\n")
            self.p.stdin.flush()
        except OSError:  # it exited: result() says how
            pass
        return self.result(timeout, stage="timing")

    def close(self, kill=False):
        if self.closed:
            return
        self.closed = True
        if kill:
            self.p.kill()
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.err.close()


def _round_order(rounds, sides):
    """(round, side) in running order: the sides alternate which goes first, so a drift in clocks or load
    over the run falls on both alike."""
    return [(r, side) for r in range(rounds) for side in (sides if r % 2 == 0 else sides[::-1])]


TIMES = ("fwd_ms", "fwd_bwd_ms", "fwd_wall_ms", "fwd_bwd_wall_ms")


def _summarize_rounds(res):
    """Per time key of `res["rounds"]`: the median over rounds (under the key itself), `_min` and `_max`."""
    for key in TIMES:
        ts = [r[key] for r in res.get("rounds", ()) if r.get(key) is not None]
        if ts:
            res.update({key: statistics.median(ts), f"{key}_min": min(ts), f"{key}_max": max(ts)})
    return res


def _ratio(row, key):
    """Triton median / kernellab median for `key` (> 1: kernellab faster), or None."""
    kl, tr = row.get("kernellab", {}).get(key), row.get("triton", {}).get(key)
    return tr / kl if kl and tr else None


def _add_ratios(row):
    """kl_over_triton_<fwd|fwd_bwd>[_wall] from the medians, with the per-round ratios (rounds paired in
    running order) beside them as `..._rounds`."""
    for key in TIMES:
        if (r := _ratio(row, key)) is None:
            continue
        name = "kl_over_triton_" + key[:-3].replace("_wall", "") + ("_wall" if "_wall" in key else "")
        row[name] = r
        pairs = zip(row["kernellab"].get("rounds", ()), row["triton"].get("rounds", ()))
        row[name + "_rounds"] = [t[key] / k[key] for k, t in pairs if k.get(key) and t.get(key)]
    return row


def _run_op(name, note, sides, device, timeout, rounds, gpu_index=None):
    """Both sides' children started together (checking runs in parallel), then `rounds` timing rounds
    alternating between them (one child runs at a time); returns the op's row."""
    row = {"op": name, "note": note}
    if gpu_index is not None:
        row["gpu_index"] = gpu_index
    kids = {side: _Child(name, side, device, gpu_index=gpu_index) for side in sides}
    try:
        for side, kid in kids.items():
            row[side] = kid.result(timeout)
            row[side]["wall_s"] = time.time() - kid.t0
            if row[side].get("timed"):
                row[side]["rounds"] = []
        for _, side in _round_order(rounds, sides):
            res = row[side]
            if "rounds" not in res or "timing_error" in res:
                continue
            r = kids[side].round(timeout)
            if "error" in r:
                res.update(timing_error=r["error"], timing_stage=r.get("stage", "timing"))
            else:
                r.pop("op", None)
                res["rounds"].append(r)
    finally:
        for kid in kids.values():
            kid.close()
    for side in sides:
        _summarize_rounds(row[side])
    return _add_ratios(row)


def _spread(res, key):
    """(max - min) / median over the rounds, or None."""
    if res and res.get(key) and f"{key}_max" in res:
        return (res[f"{key}_max"] - res[f"{key}_min"]) / res[key]
    return None


def _fmt_table(rows, gpu):
    def ms(r, k):
        v = r.get(k)
        return f"{v:8.3f}" if v is not None else "       -"

    def ratio(v):
        return f"{v:6.2f}" if v is not None else "     -"

    def spread(row, key):  # the larger of the two sides' (max - min) / median, in %
        v = [s for s in (_spread(row.get(side), key) for side in SIDES) if s is not None]
        return f"{100 * max(v):5.0f}%" if v else "     -"

    def ok(r):
        if not r:
            return "   -"
        if r.get("skipped"):
            return "skip"
        return " yes" if r.get("correct") else ("  NO" if "error" not in r else " ERR")

    head = f"{'op':<28} {'kl':>4} {'kl err':>8} {'tr':>4}"
    if gpu:
        head += (f" {'kl fwd':>8} {'tr fwd':>8} {'ratio':>6} {'spread':>6} {'kl f+b':>8} {'tr f+b':>8} {'ratio':>6}"
                 f" {'spread':>6} {'wall f':>6} {'wall fb':>7}")
    lines = [head]
    for row in rows:
        kl, tr = row.get("kernellab", {}), row.get("triton") or {}
        err = f"{kl['max_abs_err']:8.1e}" if "max_abs_err" in kl else "       -"
        line = f"{row['op']:<28} {ok(kl)} {err} {ok(tr)}"
        if gpu:
            line += (f" {ms(kl, 'fwd_ms')} {ms(tr, 'fwd_ms')} {ratio(row.get('kl_over_triton_fwd'))}"
                     f" {spread(row, 'fwd_ms')}"
                     f" {ms(kl, 'fwd_bwd_ms')} {ms(tr, 'fwd_bwd_ms')} {ratio(row.get('kl_over_triton_fwd_bwd'))}"
                     f" {spread(row, 'fwd_bwd_ms')} {ratio(row.get('kl_over_triton_fwd_wall'))}"
                     f"  {ratio(row.get('kl_over_triton_fwd_bwd_wall'))}")
        if "error" in kl:
            line += f"   {kl.get('stage')}: {kl['error'][:150]}"
        elif kl.get("skipped"):
            line += f"   {kl['skipped']}"
        elif not kl.get("correct"):
            line += f"   worst: {kl.get('worst')} at {kl.get('worst_err_over_tol', 0):.3g} x tolerance"
        for side in SIDES:
            if (row.get(side) or {}).get("timing_error"):
                line += f"   {side} timing: {row[side]['timing_error'][:150]}"
        lines.append(line)
    return "\n".join(lines)


def _serve(name, side, device):
    """Child side of `_Child`: the check's result line, then one round's line per `round` read from stdin."""
    res, timer = child(name, side, device)
    print(MARK + json.dumps(dict(res, op=name)), flush=True)
    if timer is None:
        return
    for line in sys.stdin:
        if line.strip() != "round":
            break
        try:
            r = timer()
        except Exception as e:
            r = {"side": side, "stage": "timing", "error": _cause(e)}
        print(MARK + json.dumps(r), flush=True)


def _earlier_part(gpu: str, sides: list, rounds: int) -> dict | None:
    """Today's JSON for this GPU when its sides and rounds match this run's (an earlier part of a run in parts)."""
    from benchmarks.memory_bound import ROOT as _root

    out_dir = Path(os.environ.get("KERNELLAB_RESULTS_DIR", _root / "benchmarks" / "results"))
    path = out_dir / f"{datetime.date.today().isoformat()}-{gpu.replace(' ', '_')}-libraries.json"
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return old if old.get("sides") == sides and old.get("rounds") == rounds else None


def _result(gpu, device, sides, rounds, rows, wall_s, requested, complete, gpus=1) -> dict:
    import torch

    import kernellab

    return {
        "date": datetime.date.today().isoformat(), "gpu": gpu, "device": device,
        "versions": {"kernellab": kernellab.__version__, "triton": _version("triton") if _real_triton() else None,
                     "torch": torch.__version__, "liger_kernel": _version("liger_kernel"),
                     "python": platform.python_version()},
        "sides": sides,
        "rounds": rounds,
        "ops_at_once": gpus,  # --gpus: that many ops ran at once, each on its own GPU of one host
        "method": "one child process per op and side (compat serves `import triton`, so the sides cannot share "
                  "one); inputs float32 from seed 0 (edge values included); outputs and input gradients vs "
                  "float64 torch references (outputs poisoned: torch.empty gives NaN): correct when "
                  "|got-ref| <= atol + rtol*|ref| everywhere. GPU: both children stay up after the check (which "
                  "compiled every kernel) and time `rounds` rounds, alternating sides and which goes first; a "
                  "round = 1 call + 50 ms of calls as warm-up, then ms = median of 20..200 CUDA-event timings, "
                  "each after an L2 flush and a GPU sleep covering the launch (GPU time), and wall_ms = "
                  "back-to-back calls over ~100 ms (host included); fwd_bwd resets .grad each call. Per side: "
                  "rounds (all figures), and per time key its median over rounds, _min and _max",
        "figure": "kl_over_triton_<fwd|fwd_bwd> = Triton median ms / kernellab median ms (> 1: kernellab faster); "
                  "_wall: the same for wall_ms; _rounds: the ratio in each round (rounds paired in running order)",
        # written after every op: `complete` false while the run goes on (or when it was stopped before the end)
        "requested": list(requested),
        "complete": complete,
        "rows": rows,
        "summary": _summary(rows, sides),
        "wall_s": wall_s,
    }


def _in_order(rows, names):
    """Rows in the catalogue's order (with --gpus they finish in any order)."""
    return sorted(rows, key=lambda r: names.index(r["op"]) if r["op"] in names else len(names))


def _summary(rows, sides):
    return {side: {"correct": sum(bool(r.get(side, {}).get("correct")) for r in rows),
                   "of": sum(not r.get(side, {}).get("skipped") for r in rows)} for side in sides}


def _write(result: dict, earlier: dict | None):
    """Write today's JSON: this run's rows, plus (a run in parts) the earlier parts' rows of other ops, in the
    catalogue's order; the summary and the wall time cover them all."""
    from benchmarks.memory_bound import write_results

    if earlier is not None:
        mine = {r["op"] for r in result["rows"]}
        order = [o.name for o in _ops()]
        merged = sorted([r for r in earlier.get("rows", []) if r["op"] not in mine] + result["rows"],
                        key=lambda r: order.index(r["op"]) if r["op"] in order else len(order))
        result = dict(result, rows=merged, summary=_summary(merged, result["sides"]),
                      wall_s=result["wall_s"] + earlier.get("wall_s", 0.0),
                      requested=sorted(set(earlier.get("requested", [])) | set(result["requested"]),
                                       key=lambda n: order.index(n) if n in order else len(order)),
                      complete=result["complete"] and earlier.get("complete", True))
    return write_results(result, "libraries"), result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ops", nargs="*", help="op names (default: all)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per child process and step "
                    "(the check, each round)")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds per op and side (GPU only; default 5)")
    ap.add_argument("--no-write", action="store_true", help="print only, write no JSON")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of other ops already in today's JSON for this GPU (a run in parts); "
                         "this run's ops replace theirs")
    ap.add_argument("--gpus", type=int, default=1,
                    help="run up to this many ops at once, each on a GPU of its own (CUDA_VISIBLE_DEVICES); "
                         "default 1")
    ap.add_argument("--child", nargs=3, metavar=("OP", "SIDE", "DEVICE"), help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.child and args.serve:
        _serve(*args.child)
        return 0
    if args.child:  # OP may be a comma-separated list (one result line each, one process: tests use it)
        for name in args.child[0].split(","):
            r, timer = child(name, *args.child[1:])
            if timer is not None:  # one round, its keys flat in the line
                r["rounds"] = [timer()]
                _summarize_rounds(r)
            print(MARK + json.dumps(dict(r, op=name)), flush=True)
        return 0
    if importlib.util.find_spec("liger_kernel") is None:
        print("libraries.py: liger-kernel is not installed (pip install liger-kernel --no-deps); skipped")
        return 0
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    sides = ["kernellab"] + (["triton"] if _real_triton() else [])
    notes = {o.name: o.note for o in _ops()}
    names = list(notes)
    unknown = [n for n in args.ops if n not in names]
    if unknown:
        ap.error(f"unknown op(s) {unknown}; known: {names}")
    t0 = time.time()
    rows = []
    # a run in parts (--merge): the other ops' rows of today's JSON, read once, kept in every write of this run
    earlier = _earlier_part(gpu, sides, args.rounds) if args.merge and not args.no_write else None
    lock = threading.Lock()

    def finished(row):  # one op's row: printed, and (after every op) today's JSON rewritten
        with lock:
            rows.append(row)
            kl = row["kernellab"]
            status = ("ok" if kl.get("correct") else kl["skipped"] if kl.get("skipped")
                      else f"FAIL {kl.get('stage', 'check')}: {kl.get('error', kl.get('worst'))}")
            if row.get("kl_over_triton_fwd") is not None:
                status += f"  fwd {row['kl_over_triton_fwd']:.2f}"
                if row.get("kl_over_triton_fwd_bwd") is not None:
                    status += f"  fwd+bwd {row['kl_over_triton_fwd_bwd']:.2f}"
            print(f"{row['op']:<28} {status[:200]}", flush=True)
            if not args.no_write:  # a run stopped by a time limit keeps what it measured
                _write(_result(gpu, device, sides, args.rounds, _in_order(rows, names), time.time() - t0,
                               args.ops or names, False, gpus), earlier)

    todo = list(args.ops or names)
    gpus = min(args.gpus, torch.cuda.device_count()) if device == "cuda" else 1
    if gpus <= 1:
        for name in todo:
            finished(_run_op(name, notes[name], sides, device, args.timeout, args.rounds))
    else:  # one op at a time on each GPU: its two sides' rounds still alternate on that GPU
        work: queue.Queue = queue.Queue()
        for name in todo:
            work.put(name)

        def worker(k):
            while True:
                try:
                    name = work.get_nowait()
                except queue.Empty:
                    return
                finished(_run_op(name, notes[name], sides, device, args.timeout, args.rounds, gpu_index=k))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(gpus)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    rows = _in_order(rows, names)
    result = _result(gpu, device, sides, args.rounds, rows, time.time() - t0, args.ops or names, True, gpus)
    if not args.no_write:
        path, result = _write(result, earlier)
        print(f"wrote {path}")
        rows = result["rows"]
    print(_fmt_table(rows, device == "cuda"))
    for side in sides:
        print(f"{side}: {result['summary'][side]['correct']} of {result['summary'][side]['of']} ops correct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
