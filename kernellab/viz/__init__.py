"""The lab's views: they read a CompiledKernel's CompileTrace and never reach into the compiler.

    import kernellab.viz as kv
    kv.show(compiled)                      # a Tab of every view
    kv.PassesView(compiled)                # or one view: LayoutView, SharedMemoryView, CodeView, GraphView
    kv.compare(kernel, *args, a=dict(BLOCK=64), b=dict(BLOCK=128), grid=...)   # two compiles side by side
    kv.linked_view(compiled)               # source <-> any IR stage, PTX, SASS (anywidget; static without)

Pure data in `kernellab.viz.data`, static HTML/SVG in `kernellab.viz.html`. The widget classes need
ipywidgets; they are imported on first use, so the data and HTML parts work without it.
"""

_WIDGETS = ("show", "PassesView", "LayoutView", "SharedMemoryView", "CodeView", "GraphView")

__all__ = list(_WIDGETS) + ["LinkedView", "linked_view", "PerformanceView", "compare", "CompareView",
                            "load_ipython_extension"]


def __getattr__(name):
    if name in _WIDGETS:
        from . import widgets

        return getattr(widgets, name)
    if name in ("LinkedView", "linked_view"):  # anywidget's; LinkedView is None without it
        from . import linked

        return getattr(linked, name)
    if name == "PerformanceView":  # matplotlib, imported on first use
        from .roofline import PerformanceView

        return PerformanceView
    if name in ("compare", "CompareView"):  # two compiles side by side (static HTML, no ipywidgets needed)
        from . import compare_view

        return getattr(compare_view, name)
    raise AttributeError(f"module 'kernellab.viz' has no attribute {name!r}")


def load_ipython_extension(ipython):
    """`%load_ext kernellab` (or `%load_ext kernellab.viz`): registers the `%%kernel` cell magic."""
    from .magic import register

    register(ipython)
