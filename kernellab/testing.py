"""`kl.testing`: timing and comparison helpers with Triton's names."""
from __future__ import annotations

import statistics
import time


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="median", gpu_time=False):
    """Time `fn` in milliseconds: CUDA events with an L2 flush on a GPU, wall clock on the CPU.

    `gpu_time` (what the autotuner asks): each timed call starts behind a GPU sleep longer than the call's
    launch takes on the host, so the events hold the GPU's work only (a call whose start event has already
    completed when it returns, the sleep having run out, is taken again with twice the sleep, at most 3 times).
    Without it a launch-bound call (a small kernel, many arguments) times the host's launch path, which is the
    same for every config of a kernel: the autotuner would pick at random among configs whose GPU times differ
    severalfold."""
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if cuda:
        return _do_bench_cuda(fn, warmup, rep, quantiles, return_mode, gpu_time)
    fn()
    times = []
    t_end = time.perf_counter() + rep / 1e3
    while True:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if time.perf_counter() > t_end and len(times) >= 3:
            break
    return _summarize(times, quantiles, return_mode)


def _summarize(times, quantiles, return_mode):
    if quantiles:
        s = sorted(times)
        return [s[min(len(s) - 1, int(q * len(s)))] for q in quantiles]
    return {"median": statistics.median, "mean": statistics.fmean, "min": min, "max": max}[return_mode](times)


def _do_bench_cuda(fn, warmup, rep, quantiles, return_mode, gpu_time=False):
    import torch

    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        cache.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    sleep = 0
    if gpu_time:
        host = []
        for _ in range(3):  # the host's launch time of one call, the GPU idle
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e3)
            torch.cuda.synchronize()
        sleep_ms = 2 * sorted(host)[1] + 0.02
        sleep = int(_cycles_per_ms() * sleep_ms)
        estimate += sleep_ms  # each timed call now costs its sleep too: the same `rep` budget
    n_warm, n_rep = max(1, int(warmup / estimate)), max(3, int(rep / estimate))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for _ in range(n_warm):
        fn()
    i = retakes = 0
    while i < n_rep:
        cache.zero_()
        if sleep:
            torch.cuda._sleep(sleep)
        starts[i].record()
        fn()
        if sleep and retakes < 3 and starts[i].query():  # the sleep ran out before the launch: host time inside
            torch.cuda.synchronize()
            retakes += 1
            sleep = max(2 * sleep, int(_cycles_per_ms() * sleep_ms))
            continue
        ends[i].record()
        i += 1
    torch.cuda.synchronize()
    return _summarize([s.elapsed_time(e) for s, e in zip(starts, ends)], quantiles, return_mode)


_CYCLES: list = []


def _cycles_per_ms() -> float:
    """SM clock cycles per ms as `torch.cuda._sleep` counts them: the largest reading of this process (one taken
    while the clocks are still low reads low, and would make the sleeps too short)."""
    import torch

    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(2_000_000)
    b.record()
    b.synchronize()
    c = 2_000_000 / max(a.elapsed_time(b), 1e-6)
    _CYCLES[:] = [max(_CYCLES[0], c) if _CYCLES else c]
    return _CYCLES[0]


def assert_close(x, y, atol=None, rtol=None, err_msg=""):
    import torch

    torch.testing.assert_close(torch.as_tensor(x), torch.as_tensor(y), atol=atol, rtol=rtol, msg=err_msg or None)
