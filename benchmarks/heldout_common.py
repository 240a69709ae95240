"""What the held-out kernel-text screens (heldout_texts3.py, heldout_texts4.py, heldout_texts5.py) share: the `Case`
record, the input maker (random with edge values, outputs poisoned), the float64 comparison, and the module glue
that benchmarks/compile_time.py (`CASES`, `run(name)`) and benchmarks/idioms.py `--texts` (`CASE_DEFS`,
`check(name, configs=, device=)`, `bench_inputs(name, device)`, `_maker(seed, device)`) read. A screen defines its
kernels and cases, then

    CASES, run, bench_inputs, check = screen(CASE_DEFS)
    _maker = maker

This module never imports `triton`: a screen is imported once with kernellab.compat serving `triton` and once more
with the real one, both sharing this module. The screens import it by their own (link-resolved) folder, as
compile_time.py links a texts module into another folder for its Triton side."""
from __future__ import annotations


def cdiv(a, b):
    return (a + b - 1) // b


class Case:
    """inputs(size, mk) -> dict of tensors (mk(shape, dtype, kind) makes one: random with edge values when checking,
    empty at GPU sizes, on mk.device); launch(x, cfg); reference(x) -> {output name: float64 or exact tensor} of the
    inputs on the CPU; check(x, ref) an optional replacement of the comparison (check_for(cfg) -> such a function
    when it depends on the config). moves(x): bytes a launch must move, or ("flop", n), for a figure beside the
    time."""

    def __init__(self, inputs, launch, reference, configs, gpu_size, test_size, tol=1e-2, check=None, moves=None,
                 check_for=None):
        self.inputs, self.launch, self.reference = inputs, launch, reference
        self.configs, self.gpu_size, self.test_size, self.tol, self.compare = configs, gpu_size, test_size, tol, check
        self.moves, self.check_for = moves, check_for


def split(cfg):
    """A config's kernel meta-parameters and its launch options (num_warps, num_stages)."""
    opts = {k: cfg[k] for k in ("num_warps", "num_stages") if k in cfg}
    return {k: v for k, v in cfg.items() if k not in opts}, opts


def nbytes(*names):
    return lambda x: sum(x[n].numel() * x[n].element_size() for n in names)


def mm_flop(a, b):
    def f(x):
        return ("flop", 2 * x[a].shape[-2] * x[a].shape[-1] * x[b].shape[-1 if x[b].shape[-2] == x[a].shape[-1] else -2]
                * (x[a].shape[0] if x[a].dim() == 3 else 1))
    return f


def close(what, got, want, tol):
    """`got` (any float dtype) within a relative (Frobenius) error `tol` of the float64 `want`, none of it poison."""
    import torch

    got = got.double()
    assert not torch.isnan(got).any(), f"{what} has unwritten (poisoned) elements"
    err = ((got - want).norm() / want.norm()).item()
    assert err < tol, f"{what} relative error {err:.2e}"


def close_nonfinite(what, got, want, tol):
    """As `close`, where `want` may hold NaN / ±inf: those places must match exactly (NaN for NaN, the same
    infinity), the finite ones are compared as `close` does. Poison is NaN, so a NaN where `want` is finite fails."""
    import torch

    got = got.double()
    fin = torch.isfinite(want)
    nan_w, nan_g = torch.isnan(want), torch.isnan(got)
    assert torch.equal(nan_w, nan_g), f"{what}: NaN in {(nan_w != nan_g).sum().item()} wrong places (poison?)"
    inf = torch.isinf(want)
    assert torch.equal(got[inf], want[inf]), f"{what}: infinities differ"
    close(what, got[fin], want[fin], tol)


def empty(shape, dtype, kind="in"):
    import torch

    return torch.empty(shape, dtype=dtype)


empty.device = "cpu"


def maker(seed, device="cpu"):
    """mk(shape, dtype, kind): the tensors a check or a timing launches on, made on `device`. Kinds:
    in (normal with edge values first), out (poison: NaN, or -99 / 99 for integers), zeros, small (normal / 2),
    unit ([0.25, 1.75]), scale ([0.005, 0.02]), decay ([0.8, 1)), near1 ([0.9, 1.1]), ties (integers in [-20, 20)),
    offset (normal + 3), logits (normal * 3), wide (normal * 300: some saturate fp8), logp (log-probabilities of
    rows), probs (probabilities of rows, some exactly 0), inv_freq (rope's 10000^(-2i/D)), cos_sin ([positions, D]:
    rope's cos | sin), sorted (ascending, with repeats), queries (sorted's range and beyond), nonfinite (normal with
    edge values first and a NaN, a +inf and a -inf further on), bytes (uint8 in [0, 256)), keep (0 / 1, 90 % ones),
    bits32 (any int32), fp16range (normal * 2e4, a quarter scaled to fp16's subnormals, a few beyond 65504),
    index:V (int in [0, V)), sortedint:S (sorted ints in [0, S), runs of any length), lens:S (ints in [1, S], one
    S), csr:NIDX (bag offsets 0..NIDX, some bags empty); int8 tensors of any other kind are uniform over
    [-128, 127] with both ends present."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)

    def rand(shape, dtype, kind="in"):
        if kind == "out":
            if dtype.is_floating_point and dtype.itemsize > 1:
                return torch.full(shape, float("nan"), dtype=dtype, device=device)
            return torch.full(shape, -99 if dtype != torch.uint8 else 99, dtype=dtype, device=device)
        if kind == "zeros":
            return torch.zeros(shape, dtype=dtype, device=device)
        if kind.startswith("index:"):
            return torch.randint(0, int(kind[6:]), shape, generator=g, dtype=torch.int32, device=device)
        if kind.startswith("csr:"):
            nidx, nb = int(kind[4:]), shape[0] - 1
            cuts = torch.randint(0, nidx + 1, (nb - 1,), generator=g, device=device).sort().values
            offs = torch.cat([torch.zeros(1, dtype=cuts.dtype, device=device), cuts,
                              torch.full((1,), nidx, dtype=cuts.dtype, device=device)])
            if nb > 3:
                offs[2] = offs[1]  # an empty bag
            return offs.to(torch.int32)
        if kind.startswith("sortedint:"):
            return torch.randint(0, int(kind[10:]), shape, generator=g, device=device).sort().values.to(dtype)
        if kind.startswith("lens:"):
            S = int(kind[5:])
            t = torch.randint(1, S + 1, shape, generator=g, device=device)
            t.view(-1)[0] = S
            return t.to(dtype)
        if kind == "bytes":
            return torch.randint(0, 256, shape, generator=g, device=device).to(dtype)
        if kind == "keep":
            return (torch.rand(shape, generator=g, device=device) < 0.9).to(dtype)
        if kind == "bits32":
            return torch.randint(-(1 << 31), (1 << 31) - 1, shape, generator=g, dtype=torch.int64,
                                 device=device).to(dtype)
        if dtype == torch.int8:
            t = torch.randint(-128, 128, shape, generator=g, dtype=torch.int32, device=device)
            t.view(-1)[:2] = torch.tensor([-128, 127], device=device)[: t.numel()]
            return t.to(dtype)
        if kind == "sorted":
            return (torch.randint(-1000, 1000, shape, generator=g, device=device).double() / 8).sort().values.to(dtype)
        if kind == "queries":
            return (torch.randint(-1100, 1100, shape, generator=g, device=device).double() / 8).to(dtype)
        if kind == "inv_freq":
            d = shape[0] * 2
            return (10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)).to(dtype)
        if kind == "cos_sin":
            half = shape[1] // 2
            ang = torch.arange(shape[0], dtype=torch.float64, device=device)[:, None] * \
                10000.0 ** (-torch.arange(half, dtype=torch.float64, device=device) / half)
            return torch.cat([ang.cos(), ang.sin()], 1).to(dtype)
        t = torch.randn(shape, generator=g, dtype=torch.float32 if device != "cpu" else torch.float64, device=device)
        if kind in ("unit", "decay", "near1", "scale"):
            lo, width = {"unit": (0.25, 1.5), "decay": (0.8, 0.2), "near1": (0.9, 0.2), "scale": (0.005, 0.015)}[kind]
            t = torch.rand(shape, generator=g, dtype=t.dtype, device=device) * width + lo
        elif kind == "small":
            t = t * 0.5
        elif kind == "ties":
            t = torch.randint(-20, 20, shape, generator=g, device=device).to(t.dtype)
        elif kind == "logp":
            t = torch.log_softmax(t * 2, dim=-1)
        elif kind == "probs":
            t = torch.softmax(t * 2, dim=-1)
            t.view(-1)[1:t.numel():7] = 0.0
            t = t / t.sum(-1, keepdim=True)
        elif kind == "offset":
            t = t + 3.0
        elif kind == "wide":
            t = t * 300.0
        elif kind == "logits":
            t = t * 3.0
        elif kind == "fp16range":
            t = t * 2e4
            flat = t.view(-1)
            flat[::4] *= 1e-9
            flat[:8] = torch.tensor([0.0, -0.0, 65504.0, 65519.0, 65520.0, -70000.0, 6e-8, -3e-8], device=device)
        flat = t.view(-1)
        if kind in ("in", "wide") and flat.numel() > 8:
            flat[:6] = torch.tensor([0.0, -0.0, 8.0, -8.0, 1e-3, -1e-3], device=device)
        if kind == "nonfinite" and flat.numel() > 8:  # NaN, +inf and -inf a third of the tensor apart (other rows)
            n = flat.numel()
            flat[:5] = torch.tensor([0.0, -0.0, 8.0, -8.0, 1e-3], device=device)
            flat[n // 3], flat[n // 2], flat[(5 * n) // 6] = float("nan"), float("inf"), float("-inf")
        return t.to(dtype)

    rand.device = device
    return rand


def screen(case_defs):
    """A screen's glue over its CASE_DEFS: (CASES, run, bench_inputs, check)."""

    def run(name):
        """Every config of a case launched on empty CPU tensors at its GPU size (compile_time.py records them)."""
        c = case_defs[name]
        x = c.inputs(c.gpu_size, empty)
        for cfg in c.configs:
            c.launch(x, dict(cfg))

    def bench_inputs(name, device="cuda", seed=0):
        """A case's tensors at its GPU size on `device` (random, outputs poisoned), for timing."""
        c = case_defs[name]
        return c.inputs(c.gpu_size, maker(seed, device))

    def check(name, seed=0, configs=None, device="cpu"):
        """Every config of a case on small random inputs against the float64 reference; raises on a mismatch. The
        inputs live on `device` (the CPU interpreter, or a GPU); the references run on CPU copies."""
        import torch

        c = case_defs[name]
        for i, cfg in enumerate(configs or c.configs):
            x = c.inputs(c.test_size, maker(seed + i, device))
            c.launch(x, dict(cfg))
            if device != "cpu":
                torch.cuda.synchronize()
            x = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in x.items()}
            ref = c.reference(x) if c.reference else None
            compare = c.check_for(cfg) if c.check_for else c.compare
            if compare:
                try:
                    compare(x, ref)
                except AssertionError as e:
                    raise AssertionError(f"{name} {cfg}: {e}") from None
                continue
            for k, want in ref.items():
                got = x[k]
                if not got.dtype.is_floating_point:
                    assert torch.equal(got.to(want.dtype), want), \
                        f"{name} {cfg}: {k} differs in {(got.to(want.dtype) != want).sum().item()} places"
                    continue
                close(f"{name} {cfg}: {k}", got, want, c.tol)

    return tuple(case_defs), run, bench_inputs, check


def main(case_defs, check, argv):
    """`python heldout_textsN.py [case ...]`: check each case on the CPU interpreter, one line each."""
    import time

    for n in argv or case_defs:
        t0 = time.time()
        try:
            check(n)
            print(f"ok {n} {time.time() - t0:.1f}s", flush=True)
        except Exception as e:  # report every case, not the first failure
            print(f"FAIL {n}: {type(e).__name__}: {str(e)[:400]}", flush=True)
