"""`kl.testing`: timing and comparison helpers with Triton's names."""
from __future__ import annotations

import statistics
import time


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="median"):
    """Time `fn` in milliseconds: CUDA events with an L2 flush on a GPU, wall clock on the CPU."""
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if cuda:
        return _do_bench_cuda(fn, warmup, rep, quantiles, return_mode)
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


def _do_bench_cuda(fn, warmup, rep, quantiles, return_mode):
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
    n_warm, n_rep = max(1, int(warmup / estimate)), max(3, int(rep / estimate))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for _ in range(n_warm):
        fn()
    for i in range(n_rep):
        cache.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return _summarize([s.elapsed_time(e) for s, e in zip(starts, ends)], quantiles, return_mode)


def assert_close(x, y, atol=None, rtol=None, err_msg=""):
    import torch

    torch.testing.assert_close(torch.as_tensor(x), torch.as_tensor(y), atol=atol, rtol=rtol, msg=err_msg or None)
