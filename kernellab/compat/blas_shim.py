"""`triton._C.libtriton.nvidia.cublas.CublasLt`: the vendor-BLAS reference that Triton's tutorials (09) and
tests (test_warp_specialization) compare against. kernellab has no C++ binding of its own; this one runs
torch's matmul, which calls cuBLAS(Lt) itself, with Triton's argument convention: `matmul(a, b, c)` writes
c = a @ b.T for row-major a [M, K] and b [N, K]."""
from __future__ import annotations

import types


class CublasLt:
    def __init__(self, workspace):
        self.workspace = workspace  # kept for the caller's sake; torch manages cuBLAS's own workspace

    def matmul(self, a, b, c):
        import torch

        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or tuple(c.shape) != (a.shape[0], b.shape[0]):
            raise ValueError(f"CublasLt.matmul(a, b, c) computes c = a @ b.T: got a {tuple(a.shape)}, "
                             f"b {tuple(b.shape)}, c {tuple(c.shape)}")
        if a.element_size() == 1 and a.is_floating_point():  # fp8: torch's scaled matmul with unit scales
            one = torch.ones((), device=a.device, dtype=torch.float32)
            c.copy_(torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=c.dtype))
        else:
            torch.matmul(a, b.t(), out=c)
        return c

    def _unserved(self, name):
        raise NotImplementedError(f"CublasLt.{name} (Blackwell block-scaled matmul) is not served by "
                                  "kernellab.compat; compare against a torch reference instead")

    def block_scaled_matmul_mxfp8(self, *args):
        self._unserved("block_scaled_matmul_mxfp8")

    def block_scaled_matmul_nvfp4(self, *args):
        self._unserved("block_scaled_matmul_nvfp4")


def modules(make) -> dict[str, types.ModuleType]:
    """`triton._C` and `triton._C.libtriton` with `nvidia.cublas` (AMD's hipblas is not served)."""
    cublas = types.SimpleNamespace(CublasLt=CublasLt)
    nvidia = types.SimpleNamespace(cublas=cublas)
    return {"triton._C": make("triton._C", "Triton's C++ bindings: only the cuBLAS reference is served."),
            "triton._C.libtriton": make("triton._C.libtriton", "Triton's C++ bindings (served part).",
                                        package=False, nvidia=nvidia)}
