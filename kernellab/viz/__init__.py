"""The lab's views: they read a CompiledKernel's CompileTrace and never reach into the compiler."""


def load_ipython_extension(ipython):
    """`%load_ext kernellab` (or `%load_ext kernellab.viz`): registers the `%%kernel` cell magic."""
    from .magic import register

    register(ipython)
