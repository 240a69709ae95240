"""GPU builds of an autotuner's configs in parallel worker processes.

The autotuner's GPU path compiles every config before timing any (Autotuner._split_by_shared builds each one's GPU
stages). Those builds are independent and cost seconds each (the GPU passes, LLVM, ptxas: Liger's fused MoE asks
for 240 of them in its first forward and backward), so they are done here first, several at a time, each in a
worker process, and filed in the disk cache under the very key the sequential build looks up
(jit._gpu_cache_key), and hands each build back (pickled) to the sequential build that follows, which takes it as
it would have made it. Nothing else changes: a config a worker
could not build (an error, over the shared memory, a worker that died) is simply not in the cache, and the
sequential build compiles it as before, raising what it raises. A worker builds from the same tile-IR module (sent
pickled), under the same environment (sent with each job) and the same compiler source (the key it computes must
equal the parent's, else it files nothing), so an entry is what the parent would have built.

Workers: `python -c` children (never a fork of a process holding a CUDA context, never a re-import of the user's
__main__), started on first need and kept for the process's life. KERNELLAB_COMPILE_WORKERS: the number of
workers (`auto`, the default when unset: the CPUs this process may use, less one, at most MAX_WORKERS; 0 or 1:
off). On an H200 host (16 CPUs) fused MoE's first call took 88 s with them and 183 s without (benchmarks/NOTES.md,
twelfth session). Triton's autotuner compiles its configs one after another; this changes only when the work is
done, not what is built. Never more workers than configs to build, and none for fewer than two.
"""
from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import threading
from pathlib import Path

KNOB = "KERNELLAB_COMPILE_WORKERS"
MAX_WORKERS = 16
# Pickling a module walks its use lists recursively (depth grows with the op count): a large recursion limit, in
# threads with a large stack
_RECURSION_LIMIT = 200_000
_STACK_BYTES = 512 << 20

_POOL: list = []  # live _Worker objects
_POOL_LOCK = threading.Lock()
stats = {"jobs": 0, "built": 0, "skipped": 0}  # totals of this process (tests, curiosity)


def n_workers() -> int:
    """Workers to use: KERNELLAB_COMPILE_WORKERS (a count, or `auto`: the usable CPUs less one, capped); `auto` when
    unset."""
    v = os.environ.get(KNOB, "").strip() or "auto"
    if v != "auto":
        try:
            return max(0, int(v))
        except ValueError:
            return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:  # under pytest-xdist each of its processes gets its share (not every one all the CPUs)
        cpus //= max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        pass
    return min(MAX_WORKERS, cpus - 1)


def _send(stream, obj) -> None:
    """One message: a length, then `obj` pickled (bytes are sent as they are)."""
    data = obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _recv(stream) -> bytes:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("worker closed its pipe")
    (n,) = struct.unpack("<Q", head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("worker closed its pipe")
    return data


class _Worker:
    """One child process building GPU stages; `build(job)` sends one job and waits for its answer."""

    def __init__(self):
        import kernellab

        root = str(Path(kernellab.__file__).resolve().parent.parent)  # the same kernellab as ours, first
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        self.proc = subprocess.Popen([sys.executable, "-c", "from kernellab.runtime.compile_pool import worker_main;"
                                      " worker_main()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=root)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def build(self, job) -> dict:
        _send(self.proc.stdin, job)
        return pickle.loads(_recv(self.proc.stdout))

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except Exception:
                self.proc.kill()
                self.proc.wait()


def _close_all():
    with _POOL_LOCK:
        for w in _POOL:
            w.close()
        _POOL.clear()


atexit.register(_close_all)


def _take_worker() -> _Worker:
    with _POOL_LOCK:
        while _POOL:
            w = _POOL.pop()
            if w.alive():
                return w
            w.close()
    return _Worker()


def _give_back(w: _Worker):
    with _POOL_LOCK:
        _POOL.append(w)


def _with_big_stack(fn, *args):
    """fn(*args) in a thread with a large stack and recursion limit (pickling IR recurses deeply)."""
    out: list = []

    def run():
        try:
            out.append((True, fn(*args)))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            out.append((False, e))

    old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(max(old_limit, _RECURSION_LIMIT))
    threading.stack_size(_STACK_BYTES)
    try:
        t = threading.Thread(target=run, name="kernellab-pickle")
        t.start()
    finally:
        threading.stack_size(old_stack)
    t.join()
    sys.setrecursionlimit(old_limit)
    ok, value = out[0]
    if not ok:
        raise value
    return value


def prebuild(cks, target) -> int:
    """Build the GPU stages of compiled kernels `cks` (CompiledKernel, options as their build_gpu(target,
    ladder=False) would take them) in worker processes into the disk cache, where their own build then finds them.
    Returns how many were filed. Does nothing (0) with fewer than two workers or jobs, or when the disk cache
    cannot be written."""
    from . import jit as _jit
    from .cache import DiskCache

    workers = n_workers()
    if workers < 2 or not _jit._can_assemble():  # (a build that stops at PTX is not cached: nothing to share)
        return 0
    cache = DiskCache()
    jobs = []
    for ck in cks:
        if ck is None or ("ptx" in ck.asm and ck._built_for == target.cpu) or "tile" not in ck.asm:
            continue
        try:
            ck._check_register_budget(ck.options.get("num_warps", 4))
        except Exception:
            continue  # the sequential build raises it
        opts = ck.gpu_options(target)
        key = _jit._gpu_cache_key(ck.asm["tile"], opts, target)
        if any(key == j[1] for j in jobs) or cache.path_for(key).exists():
            continue
        jobs.append((ck, key, opts))
    if len(jobs) < 2 or not _writable(cache.root):
        return 0
    env = dict(os.environ)
    limit = _jit._max_shared(target.arch)

    def payloads():
        out = []
        for ck, key, opts in jobs:
            try:
                out.append((ck, key, pickle.dumps({"module": ck.module, "tile": ck.asm["tile"], "key": key,
                                                    "options": opts, "target": target, "shared_limit": limit,
                                                    "env": env,
                                                    "name": ck.trace.kernel}, protocol=pickle.HIGHEST_PROTOCOL)))
            except Exception:  # not picklable: the sequential build compiles it
                pass
        return out

    pending = _with_big_stack(payloads)
    lock = threading.Lock()
    filed = [0]

    def serve():
        w = None
        try:
            while True:
                with lock:
                    if not pending:
                        return
                    ck, key, data = pending.pop(0)
                if w is None:
                    w = _take_worker()
                try:
                    res = w.build(data)
                except Exception:  # the worker died: the sequential build compiles this one
                    w.close()
                    w = None
                    continue
                if res.get("filed"):
                    with lock:
                        filed[0] += 1
                    if "out" in res:  # what ck's build then takes (CompiledKernel._build_for), else the cache's copy
                        ck.__dict__.setdefault("_prebuilt", {})[key] = (res["out"], res["passes"])
                elif res.get("over_shared"):  # its build (ladder=False) raises SharedBudgetExceeded without the passes
                    ck.__dict__.setdefault("_shared_probes", {})[key] = res["over_shared"]
        finally:
            if w is not None:
                _give_back(w)

    threads = [threading.Thread(target=serve, name="kernellab-compile", daemon=True)
               for _ in range(min(workers, len(pending)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats["jobs"] += len(jobs)
    stats["built"] += filed[0]
    stats["skipped"] += len(jobs) - filed[0]
    return filed[0]


def _writable(root: Path) -> bool:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(root, os.W_OK | os.X_OK)


# ---------------------------------------------------------------------------------------------- the worker side


def _build_one(job: dict) -> dict:
    """Build one job's GPU stages and file them in the disk cache (as CompiledKernel._compile_and_store does)."""
    from ..compiler.backend import compile_to_cubin, paused_gc
    from ..compiler.pipeline import CompileTrace
    from . import jit as _jit

    env = job["env"]
    for k in [k for k in os.environ if k not in env]:
        del os.environ[k]
    for k, v in env.items():
        if os.environ.get(k) != v:
            os.environ[k] = v
    key = _jit._gpu_cache_key(job["tile"], job["options"], job["target"])
    if key != job["key"]:  # another compiler source or toolchain here: file nothing
        return {"filed": False, "why": "key mismatch"}
    if not _jit._can_assemble():
        return {"filed": False, "why": "cannot assemble"}
    module = job["module"]
    trace = CompileTrace(job["name"])
    with paused_gc():
        out = compile_to_cubin(module, trace, job["options"], job["target"], assemble=True,
                               shared_limit=job["shared_limit"])
    if out.get("over_shared"):
        fused = any(r.name == "flatten_loops" and r.stats.get("flattened") for r in trace.passes)
        probe = None if fused else {"shared": out["shared"], "launch_warps": out.get("launch_warps")}
        # (a fused nest is rebuilt unfused by build_gpu before it gives up: that rung is the parent's to build)
        return {"filed": False, "why": "over the shared memory", "over_shared": probe}
    _jit._store_cached(key, out, trace.passes)
    # the build itself too: the parent takes it from the answer (pickled) rather than decoding the cache's JSON
    return {"filed": True, "out": out, "passes": trace.passes}


def worker_main():
    """A worker's loop: one pickled job in, one answer out, until stdin closes. The answers go out on a copy of
    file descriptor 1; fd 1 itself then points at stderr, so nothing a compile prints (Python or C) mixes in."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def loop():
        stdin, stdout = sys.stdin.buffer, answers
        while True:
            try:
                data = _recv(stdin)
            except EOFError:
                return
            try:
                res = _build_one(pickle.loads(data))
            except BaseException as e:  # noqa: BLE001 - the parent compiles it again and reports
                res = {"filed": False, "why": f"{type(e).__name__}: {str(e)[:300]}"}
            _send(stdout, res)

    _with_big_stack(loop)
