"""GPU code generation: GPU IR -> LLVM IR (llvmlite.ir), libdevice linking, NVPTX -> PTX, PTX -> cubin.

Modules:
    target        the GPU being compiled for (architecture, PTX ISA version, LLVM triple/cpu/features)
    libdevice     where NVIDIA's libdevice bitcode (``__nv_*`` math functions) lives
    llvm_to_ptx   LLVM IR text -> PTX text (libdevice link, NVVMReflect, O3, NVPTX backend)
    ptx_to_cubin  PTX text -> cubin bytes plus the ptxas resource report (registers, spills, shared memory)
"""
