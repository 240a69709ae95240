"""Options the GPU passes and codegen share: warps per program, target architecture."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuOptions:
    num_warps: int = 4
    num_stages: int = 3
    arch: int = 90
    fp_fusion: bool = True  # let a*b+c become one fma (Triton's enable_fp_fusion); False keeps IEEE mul+add
    wgmma: bool = True  # sm_90: Hopper's warpgroup MMA where a dot allows it (`enable_wgmma=False`: mma.sync)
    tma: bool = True  # sm_90: TMA copies for block-pointer tiles where the access allows it (`enable_tma=False`)
    # libdevice's functions flush subnormals (its "ftz" variants), as Triton's default enable_reflect_ftz does:
    # fewer instructions and registers (e.g. logf); `enable_reflect_ftz=False` keeps subnormals exact
    reflect_ftz: bool = True
    # sm_90: loops marked `tl.range(..., warp_specialize=True)` (or all TMA dot loops under
    # KERNELLAB_WARP_SPECIALIZE=1) get a producer warpgroup; False: none (a build whose stages then no longer fit)
    warp_specialize: bool = True
    maxnreg: int | None = None  # a cap on registers per thread (Triton's maxnreg), given to ptxas
    # fuse `tl.range(..., flatten=True)` nests (passes/flatten_loops.py); the build turns it off when the fused
    # loop's shared memory (its stages live through the epilogue) is over the GPU's, before it drops stages
    flatten: bool = True
    # source lines through LLVM IR (!dbg), PTX (.loc) and SASS (ptxas -lineinfo) for the lab's linked view; they
    # do not change the code (tests/test_line_info.py). Off: KERNELLAB_DISABLE_LINE_INFO=1, as Triton's knob
    line_info: bool = True

    @property
    def num_threads(self):
        return self.num_warps * 32
