"""How far a Liger op's float64 reference moves when every matrix product in it (forward and backward) takes its
operands rounded to TF32, as `tl.dot` does on float32 tiles by default (input_precision "tf32") in both compilers.
Runs the op's reference at libraries.py's GPU size on the CPU, in float64, twice (exact, and with TF32 operands),
and prints each output's and gradient's max abs error and error over the op's GPU tolerance: a value near what
the GPU run reports, on both compilers, says the miss is TF32's and not a kernel's.

    PYTHONPATH=. python benchmarks/tools/tf32_model.py fused_moe [--size 4096,2048,1024,8,2]

2026-11-27, fused_moe at 4096,2048,1024,8,2 against its old GPU tolerance 2e-2: out0 0.06, dx 0.09, dgu 2.47,
ddown 1.32, dw 1.34 (err/tol); the H200 gave dgu 2.05 (kernellab) and 2.26 (Triton).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import libraries  # noqa: E402  (benchmarks/libraries.py)


def tf32(x):
    """x rounded to TF32's 10 mantissa bits (to nearest, ties away, as cvt.rna.tf32.f32), kept in x's dtype."""
    b = x.float().view(torch.int32)
    return ((b + 0x1000) & ~0x1FFF).view(torch.float32).to(x.dtype)


class _TF32MatMul(torch.autograd.Function):
    """a @ b with both operands TF32-rounded; its backward's two products round theirs too."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return torch.matmul(tf32(a), tf32(b))

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        g = tf32(g)
        ga = torch.matmul(g, tf32(b).transpose(-1, -2)) if ctx.needs_input_grad[0] else None
        gb = torch.matmul(tf32(a).transpose(-1, -2), g) if ctx.needs_input_grad[1] else None
        return ga, gb


_PRODUCTS = (torch.Tensor.__matmul__, torch.Tensor.matmul, torch._C.TensorBase.matmul, torch.matmul, torch.mm,
             torch.Tensor.mm)


class TF32Products(TorchFunctionMode):
    """Every 2-D `@` / torch.matmul / torch.mm / F.linear in its scope goes through _TF32MatMul."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _PRODUCTS and len(args) == 2 and not kwargs:
            return _TF32MatMul.apply(*args)
        if func is torch.nn.functional.linear:
            x, w = args[0], args[1]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            y = _TF32MatMul.apply(x, w.t())
            return y if bias is None else y + bias
        return func(*args, **kwargs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op")
    ap.add_argument("--size", help="comma-separated (default: the op's GPU size)")
    a = ap.parse_args(argv)
    torch.manual_seed(libraries.SEED)
    op = {o.name: o for o in libraries._ops()}[a.op]
    size = tuple(int(v) for v in a.size.split(",")) if a.size else op.sizes["gpu"]
    base = op.build(size)  # as libraries.child builds it (same seed, same order)
    with torch.no_grad():
        probe = op.ref(libraries._to(base, torch.float64, "cpu"))
    gouts = [torch.full_like(probe[i], 0.75) if probe[i].dim() == 0 else libraries._rand(probe[i].shape, 1.0)
             for i in op.backprop]
    del probe
    runs = {}
    for name in ("exact", "tf32"):
        x = libraries._to(base, torch.float64, "cpu", op.grads)
        if name == "tf32":
            with TF32Products():
                runs[name] = libraries._outs_and_grads(op, op.ref, x, [g.double() for g in gouts])
        else:
            runs[name] = libraries._outs_and_grads(op, op.ref, x, [g.double() for g in gouts])
    atol, rtol = op.gpu_atol or op.atol, op.gpu_rtol or op.rtol
    (ref_o, ref_g), (got_o, got_g) = runs["exact"], runs["tf32"]
    pairs = [(f"out{i}", g, r) for i, (g, r) in enumerate(zip(got_o, ref_o))]
    pairs += [(f"d{k}", got_g[k], ref_g[k]) for k in op.grads]
    print(f"{a.op} {list(size)}: TF32 products against exact, tolerance atol {atol} rtol {rtol}")
    for name, g, r in pairs:
        err, over = libraries._compare(g, r, atol, rtol)
        print(f"  {name:6} max abs err {err:.4g}  err/tol {over:.2f}")


if __name__ == "__main__":
    main()
