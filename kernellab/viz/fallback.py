"""A live view shown with its static copy: what a notebook reopened without its kernel shows.

JupyterLab draws a widget output from its model, and a saved notebook reopened without a kernel has none: the
output says "Error displaying widget: model not found" and never falls back to the `text/html` the same output
carries. So a view is displayed as two outputs: first its static copy (`text/html`), then the widget itself
(without the copy). The copy's stylesheet hides it while JupyterLab's widget renderer draws the next output (or is
still loading it), and hides that renderer's "model not found" instead when the model is missing. Where widgets
are not drawn at all (nbconvert's HTML, GitHub), the copy simply shows. No JavaScript, no server side.
"""
from __future__ import annotations

# JupyterLab's widget renderer is an lm-Panel `.jp-OutputArea-output`; it takes the class `jupyter-widgets` itself
# only when it gives up (its drawn view carries that class one level down). Other renderers are no lm-Panel.
_CHILD = ".jp-OutputArea-child"
_RENDERER = f"{_CHILD} > .jp-OutputArea-output.lm-Panel"
CSS = (f"{_CHILD}:has(.kl-static-copy):has(+ {_RENDERER}:not(.jupyter-widgets)){{display:none}}"
       f"{_CHILD}:has(.kl-static-copy) + {_CHILD}:has(> .jp-OutputArea-output.lm-Panel.jupyter-widgets)"
       "{display:none}")
NOTE = ('<div class="kl-static-note" style="font-size:12px;opacity:.7;margin:2px 0 6px">static copy of the views '
        "(saved with the notebook): run the cell for the live ones</div>")


class StaticCopy:
    """The static copy of a live view as its own output (see the module docstring)."""

    def __init__(self, html: str):
        self.html = html

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": f'<div class="kl-static-copy"><style>{CSS}</style>{NOTE}{self.html}</div>',
                "text/plain": "(static copy of the views: run the cell for the live ones)"}


def display_with_copy(view) -> None:
    """Display `view` (a widget with `static_html()`) as its static copy, then the live widget; the widget's own
    bundle goes without its `text/html` (the copy above holds it)."""
    from IPython.display import display

    display(StaticCopy(view.static_html()))
    data = view._repr_mimebundle_()
    data, meta = data if isinstance(data, tuple) else (data, {})
    data = {k: v for k, v in dict(data or {}).items() if k != "text/html"}
    display(data, metadata=meta or None, raw=True)


class WithStaticCopy:
    """Mixin for the live views: `display(view)` and a cell ending in `view` show the static copy, then the view."""

    def _ipython_display_(self):
        display_with_copy(self)
