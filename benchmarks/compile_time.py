"""Compile time of real kernels: kernellab's seconds per stage, registers and spills, against Triton 3.6 compiling
the same kernel (same specialization, num_warps, num_stages) for the same GPU. CPU only: nothing is launched.

    python benchmarks/compile_time.py [case ...] [--timeout S] [--triton-python PY] [--no-triton] [--no-write]
                                      [--all-configs] [--kernel NAME]
    python benchmarks/compile_time.py --list

--all-configs: every config of an autotuned kernel is recorded and built (what the GPU path's first call compiles;
the CPU path compiles only the first config), and Liger's fused MoE keeps its full config lists
(LIGER_FUSED_MOE_AUTOTUNE unset; 240 builds). --kernel keeps only kernels whose name contains NAME. A case's
kernels named in RUN_KERNELS really run on the interpreter (fused_moe's routing kernels: the host code sizes its
buffers from their outputs), and are recorded and built like the others.

Cases: every Liger-Kernel op of benchmarks/libraries.py at its GPU size, plus the known slow compiles (`jsd` at
vocab 32000; attorch's flash-attention forward and its kernels autotuned over 1..32 warps, and its AvgPool layers'
conv2d at its tests' shapes (ATTORCH_POOL_CASES), when attorch is importable or $ATTORCH_PATH names a checkout).

How: a collector child (one per case) runs the library op on CPU tensors with `kernellab.compat` installed and a
compile hook that records every specialization a launch (or the autotuner's warm-up of each config) asks for,
and compiles and runs nothing (outputs stay uninitialized; the host code goes on). Each recorded kernel is then
built in a worker child: kernellab (`preload` of the recorded specialization: frontend + tile, then
`build_gpu()` for sm_90a: gpu, llir, ptx (LLVM O3 + NVPTX), cubin (ptxas)) and Triton (`triton.compile` of an
`ASTSource` with the same signature, constexprs and divisibility, `GPUTarget("cuda", 90, 32)`, run by
--triton-python, default /tmp/tri/bin/python, with an empty cache). A worker that passes --timeout seconds on one
kernel is killed and that kernel recorded as timed out; the next one gets a fresh worker. Both sides use the same
ptxas (kernellab's, passed to Triton as TRITON_PTXAS_PATH) unless --triton-own-ptxas.

Writes benchmarks/results/<date>-cpu-compile_time.json (per kernel and side: seconds per stage, total, registers,
spilled bytes (stores + loads), IR lines per stage, or the error / timeout) and prints a table.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import platform
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "@@compile-time "
DEFAULT_TRITON_PYTHON = "/tmp/tri/bin/python"
H200_SMS = 132


# ---------------------------------------------------------------------------------------------
# Cases (run in the collector child, kernellab side)


def _liger_cases():
    """name -> (libraries Op, size) for every Liger op that runs on a CPU, at its GPU size."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import libraries

    cases = {}
    for op in libraries._ops():
        if op.gpu_only:
            continue
        size = op.sizes["gpu"]
        if op.name.startswith("fused_linear"):
            # the kernels see the vocabulary and hidden sizes; 4096 rows would be a CPU matmul of a teraflop
            size = (256,) + tuple(size[1:])
        cases[op.name] = (op, size)
    cases["jsd_v32000"] = (cases["jsd"][0], (4096, 32000))
    return cases


ATTORCH_CASES = ("attorch_flash_fwd_d64", "attorch_flash_fwd_d128", "attorch_flash_fwd_d64_fp32",
                 "attorch_flash_fwd_d128_fp32", "attorch_layer_norm", "attorch_softmax", "attorch_cross_entropy",
                 "attorch_nll_loss")
# attorch's AvgPool layers (a depthwise conv2d_forward_kernel: groups = channels) at its tests' subset shapes:
# name -> (input shape, kernel_size, stride, padding, autocast to fp16)
ATTORCH_POOL_CASES = {
    "attorch_pool2d_64x64x56x56_k3s1p1": ((64, 64, 56, 56), 3, 1, 1, False),
    "attorch_pool2d_256x128x28x28_k4s2p2_amp": ((256, 128, 28, 28), 4, 2, 2, True),
    "attorch_pool1d_8x960x196_k2s2p0": ((8, 960, 196), 2, 2, 0, False),
    "attorch_pool1d_64x768x128_k3s1p1_amp": ((64, 768, 128), 3, 1, 1, True),
    # its Conv2d layer (groups 1, 64 output channels: the same kernel over 64 input channels a program)
    "attorch_conv2d_64x64x56x56_k3s1p1_o64": ((64, 64, 56, 56), 3, 1, 1, False, 64, 1),
}
ATTORCH_CASES += tuple(ATTORCH_POOL_CASES)


def case_names() -> list[str]:
    return list(_liger_cases()) + list(ATTORCH_CASES) + list(_texts_module().CASES if _texts_module() else ())


def _texts_module():
    """The module of $COMPILE_TIME_TEXTS (`--texts FILE`): kernel texts of one's own, its `CASES` names and
    `run(name)` launching them on CPU tensors (the launches are recorded, not compiled or run)."""
    path = os.environ.get("COMPILE_TIME_TEXTS")
    if not path:
        return None
    d, stem = os.path.split(os.path.abspath(path))
    if d not in sys.path:
        sys.path.insert(0, d)
    if importlib.util.find_spec("triton") is None:  # kernellab's side: the texts import triton
        import kernellab.compat

        kernellab.compat.install()
    return importlib.import_module(stem[:-3] if stem.endswith(".py") else stem)


def _cheap_inputs(libraries):
    """libraries' inputs without the float64 detour (the values never reach a kernel here): positive, nonzero."""
    import torch

    def rand(shape, scale=1.0, edges=(), positive=False):
        return torch.rand(tuple(shape)) * scale + 0.5 * scale

    libraries._rand = rand


def _run_liger(name):
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import libraries

    _cheap_inputs(libraries)
    op, size = _liger_cases()[name]
    if op.cpu_patch:
        op.cpu_patch()
    x = libraries._to(op.build(size), torch.float32, "cpu", op.grads)
    outs = op.liger(x)
    diff = [outs[i] for i in op.backprop if isinstance(outs[i], torch.Tensor) and outs[i].requires_grad]
    if diff:
        torch.autograd.backward(diff, [torch.ones_like(o) for o in diff])


def _attorch_path():
    p = os.environ.get("ATTORCH_PATH")
    if p:
        sys.path.insert(0, p)
    return importlib.util.find_spec("attorch") is not None


def _attorch_on_cpu():
    """attorch asks torch for the GPU's capability (TF32, stage counts), some of it at import: an H200's."""
    import torch

    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    if not _attorch_path():
        raise RuntimeError("attorch is not importable: set ATTORCH_PATH to a checkout of BobMcDear/attorch")


def _run_attorch(name):
    """attorch's layers as its tests call them (fp32 unless said), forward and backward."""
    import torch

    _attorch_on_cpu()
    if name.startswith("attorch_flash_fwd"):
        from attorch.multi_head_attention_kernels import _attention

        d = 64 if "_d64" in name else 128
        dtype = torch.float32 if name.endswith("fp32") else torch.float16
        q, k, v = (torch.rand(4, 16, 1024, d, dtype=dtype) for _ in range(3))
        _attention.forward(type("Ctx", (), {"save_for_backward": lambda self, *a: None})(), q, k, v, False, d ** -0.5)
        return
    if name in ATTORCH_POOL_CASES:
        _run_attorch_pool(*ATTORCH_POOL_CASES[name])
        return
    x = torch.rand(4096, 4096, requires_grad=True)
    if name == "attorch_layer_norm":
        from attorch.layer_norm_layer import LayerNormAutoGrad

        y = LayerNormAutoGrad.apply(x, torch.rand(4096, requires_grad=True), torch.rand(4096, requires_grad=True),
                                    1e-5)
    elif name == "attorch_softmax":
        from attorch.softmax_layers import SoftmaxAutoGrad

        y = SoftmaxAutoGrad.apply(x, False, False)
    elif name == "attorch_cross_entropy":
        from attorch.cross_entropy_loss_layer import CrossEntropyLossAutoGrad

        y = CrossEntropyLossAutoGrad.apply(x, torch.randint(0, 4096, (4096,)), None)
    elif name == "attorch_nll_loss":
        from attorch.nll_loss_layer import NLLLossAutoGrad

        x = torch.rand(256, 1000, 1024, requires_grad=True)
        y = NLLLossAutoGrad.apply(x, torch.randint(0, 1000, (256, 1024)), "mean", None)
    else:
        raise KeyError(name)
    y.sum().backward()


def _run_attorch_pool(shape, k, stride, padding, amp, out_channels=None, groups=None):
    """AvgPool1d/2d's forward as attorch builds it (its layers make their weights on 'cuda'): a depthwise
    Conv2dAutoGrad with 1/k**2 weights (or its Conv2d's, with `out_channels` and `groups`); its backward is torch's
    (nn.grad.conv2d_input/weight), no kernel. Under autocast attorch's conv loads and multiplies in fp16
    (fp16=True); it asks torch.is_autocast_enabled(), which means CUDA's, so that is answered for the CPU's."""
    import torch
    from attorch.conv_layer import Conv2dAutoGrad

    x = torch.rand(shape)
    if len(shape) == 3:
        x, kh, kw, sh, sw, ph, pw = x.unsqueeze(-1), k, 1, stride, 1, padding, 0
    else:
        kh, kw, sh, sw, ph, pw = k, k, stride, stride, padding, padding
    groups = groups or shape[1]
    w = torch.full((out_channels or shape[1], shape[1] // groups, kh, kw), 1.0 / (kh * kw))
    enabled = torch.is_autocast_enabled
    torch.is_autocast_enabled = lambda *a: amp
    try:
        with torch.autocast("cpu", dtype=torch.float16, enabled=amp):
            Conv2dAutoGrad.apply(x, w, None, sh, sw, ph, pw, groups)
    finally:
        torch.is_autocast_enabled = enabled


# ---------------------------------------------------------------------------------------------
# Collector child: which kernels a case compiles


def _triton_view(spec, options):
    """The recorded specialization as Triton's ASTSource wants it: signature, constexprs and divisibility by
    parameter name; None when an argument has no equivalent we can pass (tuples, callables)."""
    from kernellab.compiler.frontend import RuntimeArg
    from kernellab.compiler.types import TYPE_CANONICAL_NAMES, DType, PointerType

    def tname(t):
        if isinstance(t, PointerType):
            return "*" + tname(t.elem)
        return TYPE_CANONICAL_NAMES.get(t.name, t.ir)

    signature, constexprs, divisible = {}, {}, []
    for n, v in spec.items():
        if isinstance(v, RuntimeArg):
            if v.equal_to_1:
                signature[n], constexprs[n] = "constexpr", 1
                continue
            signature[n] = tname(v.type)
            if v.attrs.get("tt.divisibility") == 16:
                divisible.append(n)
        elif isinstance(v, DType):
            signature[n], constexprs[n] = "constexpr", {"dtype": tname(v)}
        elif v is None or isinstance(v, (bool, int, float, str)):
            signature[n], constexprs[n] = "constexpr", v
        else:
            return None
    opts = {k: options[k] for k in ("num_warps", "num_stages", "maxnreg", "enable_fp_fusion") if k in options}
    opts.setdefault("num_warps", 4)
    opts.setdefault("num_stages", 3)
    return {"signature": signature, "constexprs": constexprs, "divisible": divisible, "options": opts}


# Kernels a case must really run (on the CPU interpreter) for its host code to go on: fused_moe sizes its buffers
# and grids from the routing kernels' outputs (a garbage tile count makes a negative dimension).
RUN_KERNELS = {"fused_moe": ("_moe_router_",)}


def _record_every_config():
    """The autotuner asks for every config's compile (the GPU path's tuning does), not only the first (the CPU
    path's): each is recorded by the hook; the first config is then launched (recorded, not run)."""
    from kernellab.runtime.autotuner import Autotuner

    def choose(self, configs, args, kwargs, grid):
        named = self._named(args, kwargs)
        for cfg in configs:
            if cfg.pre_hook:
                cfg.pre_hook({**named, **cfg.all_kwargs()})
            self.fn.warmup(*args, **{**kwargs, **cfg.all_kwargs()})
        self.best_config_reason = "compile_time.py --all-configs: first config"
        return configs[0]

    Autotuner._choose = choose


def collect(case: str) -> list[dict]:
    """Run `case` with every compile recorded instead of done; one dict per distinct specialization."""
    all_configs = os.environ.get("COMPILE_TIME_ALL_CONFIGS", "0") not in ("", "0")
    os.environ.setdefault("LIGER_FUSED_MOE_AUTOTUNE", "1" if all_configs else "0")
    import kernellab.compat
    from kernellab.runtime import jit

    kernellab.compat.install()
    if all_configs:
        _record_every_config()
    seen, kernels = set(), []
    run_prefixes = RUN_KERNELS.get(case, ())

    def hook(fn, specialization, warmup):
        spec, key, runtime_names, options = specialization
        pyfn = fn.fn
        ident = (pyfn.__module__, pyfn.__qualname__, repr(key), repr(sorted(options.items(), key=str)))
        if ident not in seen:
            seen.add(ident)
            kernels.append({"case": case, "kernel": fn.__name__, "module": pyfn.__module__,
                            "qualname": pyfn.__qualname__, "options": {k: v for k, v in options.items()
                                                                      if isinstance(v, (int, float, str, bool))},
                            "kl_spec": fn.specialization_data(specialization),
                            "triton": _triton_view(spec, options)})
        # a kernel of RUN_KERNELS is recorded and also compiled and run: the host code needs its outputs
        return not fn.__name__.startswith(run_prefixes)  # else taken over: nothing compiles, nothing runs

    jit.compile_hook = hook
    error = None
    try:
        if case.startswith("attorch_"):
            _run_attorch(case)
        elif _texts_module() and case in _texts_module().CASES:
            _texts_module().run(case)
        else:
            _run_liger(case)
    except Exception as e:  # the host code may trip over outputs no kernel wrote; what was recorded stands
        error = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        jit.compile_hook = None
    for k in kernels:
        k["collect_error"] = error
    if not kernels and error:
        raise RuntimeError(error)
    return kernels


# ---------------------------------------------------------------------------------------------
# Build workers (one job per stdin line, one MARK line per result)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (ptxas): the machine is shared, wall time is not
    only ours."""
    import resource

    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def _lines(text) -> int:
    return text.count("\n") + 1 if text else 0


def _resolve(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _module_attr(module, qualname, is_jit):
    """The @jit function named `qualname` in `module`, under any autotune/heuristics wrappers; kernels defined
    inside functions are found among the module's attributes by their function's qualname."""
    if module.split(".")[0] == "attorch":
        _attorch_on_cpu()
    m = importlib.import_module(module)
    try:
        obj = _resolve(module, qualname)
    except AttributeError:
        # kernels defined inside functions: among the attributes of their module, or of the --texts module (which
        # may hold another module's local kernels as its attributes: heldout_texts2's idioms workloads)
        mods = [m] + ([_texts_module()] if os.environ.get("COMPILE_TIME_TEXTS") else [])
        obj = next(v for mod in mods for v in vars(mod).values()
                   if getattr(getattr(v, "fn", None), "__qualname__", None) == qualname)
    while not is_jit(obj) and hasattr(obj, "fn"):
        obj = obj.fn
    return obj


def build_kernellab(job: dict) -> dict:
    import kernellab.compat

    kernellab.compat.install()
    from kernellab.runtime.jit import JITFunction

    fn = _module_attr(job["module"], job["qualname"], lambda o: isinstance(o, JITFunction))
    fn.cache.clear()  # another case may have compiled the same specialization in this worker
    os.environ["KERNELLAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="compile_time_kl_")  # and the disk cache
    t0, c0 = time.perf_counter(), _cpu()
    ck = fn.preload(job["kl_spec"])
    ck.build_gpu()
    total, cpu = time.perf_counter() - t0, _cpu() - c0
    shutil.rmtree(os.environ["KERNELLAB_CACHE_DIR"], ignore_errors=True)
    stages, lines, llvm = {}, {}, {}
    for rec in ck.trace.passes:
        stage = "frontend" if rec.name == "frontend" else rec.stage or "tile"
        stages[stage] = stages.get(stage, 0.0) + rec.seconds
        lines[stage] = _lines(rec.ir)
        if stage == "ptx":
            llvm = {k[:-2]: v for k, v in rec.stats.items() if k.endswith("_s")}
    slow = sorted(((r.seconds, r.name) for r in ck.trace.passes if r.stage in ("tile", "gpu")), reverse=True)[:3]
    return {"total_s": total, "cpu_s": cpu, "stages_s": stages, "ir_lines": lines, "llvm_s": llvm,
            "slowest_passes": [[n, round(s, 3)] for s, n in slow if s > 0.05],
            "n_regs": ck.n_regs, "n_spills": ck.n_spills, "num_warps": ck.num_warps, "shared": ck.shared,
            **_sass_counts(ck.asm.get("cubin"), _dump(job, "kernellab", {"ptx": ck.asm.get("ptx"),
                                                                          "gpuir": ck.asm.get("gpu"),
                                                                          "ll": ck.asm.get("llir")})),
            "notes": [n for n in ck.trace.notes if "disk cache" not in n]}


def _dump(job: dict, side: str, texts: dict):
    """--dump DIR: write a kernel's texts as DIR/<tag>.<side>.<ext>; returns the prefix for the SASS, or None."""
    tag = job.get("dump")
    if not tag:
        return None
    prefix = f"{tag}.{side}"
    for ext, text in texts.items():
        if text:
            Path(f"{prefix}.{ext}").write_text(text)
    return prefix


def _sass_counts(cubin: bytes, dump: str | None = None) -> dict:
    """SASS instructions in all and in the innermost loops (a label up to a branch back to it), by nvdisasm;
    {} where nvdisasm is missing."""
    import re

    from benchmarks.tools.attention_bwd_compile import _loops, _nvdisasm

    dis = os.environ.get("COMPILE_TIME_NVDISASM") or _nvdisasm()
    if not dis or not cubin:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([dis, "-c", f.name], capture_output=True, text=True).stdout
    if dump:
        Path(dump + ".sass").write_text(sass)
    ins = [ln for ln in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+\S", ln)]
    return {"sass": len(ins), "sass_loops": [n for n, *_ in _loops(sass)]}


def _parse_ptxas(log: str) -> dict:
    import re

    regs = re.findall(r"Used (\d+) registers", log)
    st = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {"n_regs": int(regs[-1]) if regs else None,
            "n_spills": sum(int(a) + int(b) for a, b in st[-1:]) if st else None}


def build_triton(job: dict) -> dict:
    import contextlib
    import io

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    fn = _module_attr(job["module"], job["qualname"], lambda o: isinstance(o, JITFunction))
    view = job["triton"]
    names = list(fn.arg_names)
    sig = {n: view["signature"].get(n, "constexpr") for n in names}

    def value(v):
        if not isinstance(v, dict):
            return v
        d = v["dtype"]  # kernellab's canonical names: i32, u8, u1, fp32, bf16 ...
        return tl.dtype("int1" if d == "u1" else {"i": "int", "u": "uint"}[d[0]] + d[1:] if d[0] in "iu" else d)

    consts = {(names.index(n),): value(v) for n, v in view["constexprs"].items()}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in view["divisible"]}
    times: dict = {}
    orig = CUDABackend.add_stages

    def add_stages(self, stages, options, language):
        orig(self, stages, options, language)
        for name, f in list(stages.items()):
            def timed(src, metadata, f=f, name=name):
                t = time.perf_counter()
                try:
                    return f(src, metadata)
                finally:
                    times[name] = times.get(name, 0.0) + time.perf_counter() - t
            stages[name] = timed

    CUDABackend.add_stages = add_stages
    triton.knobs.nvidia.dump_ptxas_log = True
    out = io.StringIO()
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="compile_time_triton_")  # a cold compile each time
    t0, c0 = time.perf_counter(), _cpu()
    with contextlib.redirect_stdout(out):
        c = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                           options=view["options"])
    total, cpu = time.perf_counter() - t0, _cpu() - c0
    CUDABackend.add_stages = orig
    shutil.rmtree(os.environ["TRITON_CACHE_DIR"], ignore_errors=True)
    res = {"total_s": total, "cpu_s": cpu, "stages_s": times,
           "ir_lines": {k: _lines(c.asm[k]) for k in ("ttir", "ttgir", "llir", "ptx") if k in c.asm}}
    res.update(_parse_ptxas(out.getvalue()))
    res["shared"] = getattr(c.metadata, "shared", None)
    res.update(_sass_counts(c.asm.get("cubin"), _dump(job, "triton", {"ptx": c.asm.get("ptx"),
                                                                        "ttgir": c.asm.get("ttgir"),
                                                                        "ll": c.asm.get("llir")})))
    return res


def worker(side: str):
    """Read jobs (JSON lines) and answer each with one MARK line."""
    if side == "triton":
        sys.path.insert(0, os.environ["COMPILE_TIME_LIBS"])
        sys.path.append(str(ROOT))  # benchmarks.tools (SASS counts), after the libraries
    else:
        sys.path.insert(0, str(ROOT))
        _texts_module()  # its folder on the path, compat installed
    build = build_kernellab if side == "kernellab" else build_triton
    for line in sys.stdin:
        job = json.loads(line)
        try:
            res = build(job)
        except BaseException as e:  # noqa: BLE001 - a failed compile is a result
            res = {"error": f"{type(e).__name__}: {str(e).strip()[:800]}", "traceback": traceback.format_exc()[-3000:]}
        print(MARK + json.dumps(res), flush=True)


class Worker:
    """A worker child of one side; `run(job, timeout)` answers or kills it (a fresh one starts on the next job)."""

    def __init__(self, side: str, python: str, env: dict):
        self.side, self.python, self.env, self.proc = side, python, env, None

    def _start(self):
        self.proc = subprocess.Popen([self.python, __file__, "--worker", self.side], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self.env,
                                     cwd=str(ROOT), start_new_session=True)
        self.q: queue.Queue = queue.Queue()

        def read(proc=self.proc, q=self.q):
            for line in proc.stdout:
                if line.startswith(MARK):
                    q.put(json.loads(line[len(MARK):]))
            q.put(None)

        threading.Thread(target=read, daemon=True).start()

    def run(self, job: dict, timeout: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        t0 = time.perf_counter()
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        try:
            res = self.q.get(timeout=timeout)
        except queue.Empty:
            self.close()
            return {"timeout": timeout, "error": f"no result after {timeout:.0f} s"}
        if res is None:
            self.proc = None
            return {"error": "the worker died (out of memory or a crash)", "wall_s": time.perf_counter() - t0}
        return res

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        self.proc = None


# ---------------------------------------------------------------------------------------------
# Parent


def _collect(case: str, timeout: float) -> tuple[list, str | None]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        p = subprocess.run([sys.executable, __file__, "--collect", case], capture_output=True, text=True,
                           timeout=timeout, env=env, cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        return [], f"collector timed out after {timeout:.0f} s"
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):]), None
    return [], (p.stderr.strip().splitlines() or ["no output"])[-1][:400]


def _libs_dir() -> str:
    """A folder with liger_kernel (from this interpreter's site-packages) and attorch, for the Triton side."""
    d = tempfile.mkdtemp(prefix="compile_time_libs_")
    spec = importlib.util.find_spec("liger_kernel")
    if spec and spec.origin:
        os.symlink(Path(spec.origin).parent, Path(d) / "liger_kernel")
    if _attorch_path():
        os.symlink(Path(importlib.util.find_spec("attorch").origin).parent, Path(d) / "attorch")
    texts = os.environ.get("COMPILE_TIME_TEXTS")
    if texts:
        os.symlink(os.path.abspath(texts), Path(d) / os.path.basename(texts))
    return d


def _config_label(k: dict) -> str:
    """num_warps / num_stages and the BLOCK constexprs of a recorded kernel, e.g. "8w3s 64x128x32"."""
    o = k.get("options", {})
    blocks = [str(v) for n, v in ((k.get("triton") or {}).get("constexprs") or {}).items()
              if n.startswith("BLOCK") and isinstance(v, int)]
    return f"{o.get('num_warps', 4)}w{o.get('num_stages', 3)}s" + (" " + "x".join(blocks) if blocks else "")


def _fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def table(rows: list[dict]) -> str:
    """One line per kernel: kernellab's total wall and CPU seconds, seconds per stage (llvm = LLVM O3 + NVPTX code
    generator, ptxas), registers and spilled bytes; then Triton's wall and CPU seconds, its LLVM stages (llir + ptx),
    ptxas, registers and spilled bytes."""
    head = (f"{'case':<24} {'kernel':<32} {'config':<16} | {'kl s':>6} {'cpu':>6} {'front':>5} {'tile':>5} {'gpu':>5} "
            f"{'llir':>5} {'llvm':>6} {'ptxas':>6} {'regs':>4} {'spill':>6} | {'tri s':>6} {'cpu':>6} {'llvm':>6} "
            f"{'ptxas':>6} {'regs':>4} {'spill':>6}")
    out = [head, "-" * len(head)]
    for r in rows:
        k, t = r.get("kernellab", {}), r.get("triton", {})
        st, tt = k.get("stages_s", {}), t.get("stages_s", {})

        def side(d, n):
            if "timeout" in d:
                return f"{'>' + str(int(d['timeout'])):>{n}}"
            if "error" in d:
                return f"{'err':>{n}}"
            return f"{_fmt(d.get('total_s')):>{n}}"
        tri_llvm = tt["llir"] + tt.get("ptx", 0.0) if "llir" in tt else None
        cfg = r.get("config") or f"{r['options'].get('num_warps', 4)}w"
        out.append(f"{r['case'][:24]:<24} {r['kernel'][:32]:<32} {cfg[:16]:<16} | "
                   f"{side(k, 6)} {_fmt(k.get('cpu_s')):>6} {_fmt(st.get('frontend')):>5} {_fmt(st.get('tile')):>5} "
                   f"{_fmt(st.get('gpu')):>5} "
                   f"{_fmt(st.get('llir')):>5} {_fmt(st.get('ptx')):>6} {_fmt(st.get('cubin')):>6} "
                   f"{_fmt(k.get('n_regs')):>4} {_fmt(k.get('n_spills')):>6} | {side(t, 6)} {_fmt(t.get('cpu_s')):>6} "
                   f"{_fmt(tri_llvm):>6} "
                   f"{_fmt(tt.get('cubin')):>6} {_fmt(t.get('n_regs')):>4} {_fmt(t.get('n_spills')):>6}")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*", help="case names (default: all); --list shows them")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per kernel and side (default 120)")
    ap.add_argument("--collect-timeout", type=float, default=300.0)
    ap.add_argument("--triton-python", default=DEFAULT_TRITON_PYTHON)
    ap.add_argument("--triton-own-ptxas", action="store_true", help="Triton uses its bundled ptxas")
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out", help="write the JSON here instead of benchmarks/results/")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--texts", help="a .py file of one's own kernel texts: CASES and run(name) (see _texts_module)")
    ap.add_argument("--dump", help="write each kernel's PTX, GPU IR and SASS of both sides into this folder")
    ap.add_argument("--all-configs", action="store_true",
                    help="every autotune config (as the GPU path tunes), not only the first (the CPU path's)")
    ap.add_argument("--kernel", help="only kernels whose name contains this")
    ap.add_argument("--collect", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.texts:
        os.environ["COMPILE_TIME_TEXTS"] = os.path.abspath(a.texts)  # the children read it too
    if a.all_configs:
        os.environ["COMPILE_TIME_ALL_CONFIGS"] = "1"
    if a.collect:
        sys.path.insert(0, str(ROOT))
        print(MARK + json.dumps(collect(a.collect)), flush=True)
        return
    if a.worker:
        worker(a.worker)
        return
    if a.list:
        print("\n".join(case_names()))
        return
    cases = a.cases or case_names()
    unknown = [c for c in cases if c not in case_names()]
    if unknown:
        ap.error(f"unknown cases {unknown}; --list shows them")

    sys.path.insert(0, str(ROOT))
    from kernellab.compiler.codegen.ptx_to_cubin import find_ptxas, ptxas_version

    ptxas = find_ptxas()
    cache = tempfile.mkdtemp(prefix="compile_time_cache_")
    kl_env = dict(os.environ, KERNELLAB_CACHE_DIR=cache,
                  PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    triton = None
    if not a.no_triton and os.path.exists(a.triton_python):
        tri_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        tri_env.update(TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="compile_time_triton_"), COMPILE_TIME_LIBS=_libs_dir())
        if not a.triton_own_ptxas:
            tri_env["TRITON_PTXAS_PATH"] = ptxas
        from benchmarks.tools.attention_bwd_compile import _nvdisasm

        tri_env["COMPILE_TIME_NVDISASM"] = _nvdisasm() or ""
        triton = Worker("triton", a.triton_python, tri_env)
    kl = Worker("kernellab", sys.executable, kl_env)

    rows, meta = [], {"date": datetime.date.today().isoformat(), "host": platform.node(),
                      "python": sys.version.split()[0], "ptxas": ptxas_version(ptxas),
                      "triton_ptxas": "bundled" if a.triton_own_ptxas else "same as kernellab",
                      "timeout_s": a.timeout, "target": "sm_90a"}
    collect_errors = {}
    try:
        for case in cases:
            kernels, err = _collect(case, a.collect_timeout)
            if err and not kernels:
                collect_errors[case] = err
                print(f"[{case}] collect failed: {err}", flush=True)
                continue
            for i, k in enumerate(kernels):
                if a.kernel and a.kernel not in k["kernel"]:
                    continue
                job = {key: k[key] for key in ("module", "qualname", "kl_spec")}
                if a.dump:
                    os.makedirs(a.dump, exist_ok=True)
                    job["dump"] = os.path.join(os.path.abspath(a.dump), f"{case}-{i}-{k['kernel']}")
                row = {key: k[key] for key in ("case", "kernel", "module", "qualname", "options", "collect_error")}
                row["config"] = _config_label(k)
                if a.dump:
                    row["dump"] = os.path.basename(job["dump"])  # benchmarks/tools/sass_compare.py reads it
                row["kernellab"] = kl.run(job, a.timeout)
                if triton is not None:
                    row["triton"] = (triton.run({**job, "triton": k["triton"]}, a.timeout) if k["triton"]
                                     else {"error": "no Triton equivalent of an argument (tuple or callable)"})
                rows.append(row)
                print(table([row]).splitlines()[-1], flush=True)
    finally:
        kl.close()
        if triton is not None:
            triton.close()
        shutil.rmtree(cache, ignore_errors=True)
    print()
    print(table(rows))
    result = {**meta, "collect_errors": collect_errors, "kernels": rows}
    if not a.no_write:
        out = Path(a.out) if a.out else ROOT / "benchmarks" / "results" / f"{meta['date']}-cpu-compile_time.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
