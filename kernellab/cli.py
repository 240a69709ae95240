"""`kernellab` command line: `kernellab demo` compiles and runs a kernel and prints its passes;
`kernellab info` prints the machine and versions."""
from __future__ import annotations

import argparse
import platform
import sys


def demo() -> int:
    import torch

    import kernellab as kl
    import kernellab.language as tl

    @kl.jit
    def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        y = num / tl.sum(num, axis=0)
        tl.store(out_ptr + row * n_cols + cols, y, mask=mask)

    x = torch.randn(64, 100, generator=torch.Generator().manual_seed(0))
    y = torch.full_like(x, float("nan"))
    compiled = softmax_kernel[(x.shape[0],)](y, x, x.shape[1], BLOCK=128)
    ref = torch.softmax(x.double(), dim=1)
    err = (y.double() - ref).abs().max().item()
    print("kernellab demo: a fused softmax, compiled by kernellab and run on the CPU interpreter\n")
    print(compiled.trace.summary())
    print("\nfinal tile IR:\n")
    print(compiled.asm["tile"])
    print(f"max |kernellab - torch(float64)| = {err:.2e} over {x.numel()} elements")
    return 0 if err < 1e-5 else 1


def info() -> int:
    import kernellab

    print(f"kernellab {kernellab.__version__} on Python {platform.python_version()} ({sys.platform})")
    try:
        import torch

        print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}")
        if torch.cuda.is_available():
            print(f"GPU: {torch.cuda.get_device_name()}")
    except ImportError:
        print("torch: not installed")
    try:
        import llvmlite

        print(f"llvmlite {llvmlite.__version__}")
    except ImportError:
        print("llvmlite: not installed")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="kernellab")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help="compile and run a kernel on this machine and print its passes")
    sub.add_parser("info", help="print the GPU, versions and peaks")
    args = p.parse_args(argv)
    return {"demo": demo, "info": info}[args.cmd]()


if __name__ == "__main__":
    sys.exit(main())
