"""kernellab's compiler: frontend, IR, passes, pipeline and (later) GPU codegen."""
