"""Render DOT text (the tile IR's dataflow graph, `data.dataflow_dot`) to SVG with graphviz's `dot`.

The SVG is made theme-neutral: its white page background is dropped and black strokes and text
take the surrounding text color (`currentColor`), so it reads on light and dark notebooks.
"""
from __future__ import annotations

import re
import shutil
import subprocess

INSTALL_HINT = ("graphviz's `dot` is not installed: `apt-get install graphviz` (Debian/Ubuntu), "
                "`brew install graphviz` (macOS) or `conda install graphviz`; the DOT text is below")


def find_dot() -> str | None:
    return shutil.which("dot")


def render_dot(dot_text: str, timeout: float = 60) -> str | None:
    """SVG markup (no XML prolog, ready to inline in HTML) or None when `dot` is missing or fails."""
    dot = find_dot()
    if dot is None:
        return None
    try:
        r = subprocess.run([dot, "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0 or "<svg" not in r.stdout:
        return None
    return theme_neutral(r.stdout[r.stdout.index("<svg"):])


def theme_neutral(svg: str) -> str:
    """Transparent page, black -> currentColor, text in currentColor, scales to the pane width."""
    svg = re.sub(r'(<g id="graph0"[^>]*>\s*(?:<title>.*?</title>\s*)?<polygon[^>]*?)fill="white"',
                 r'\1fill="none"', svg, count=1, flags=re.S)
    svg = svg.replace('stroke="black"', 'stroke="currentColor"').replace('fill="black"', 'fill="currentColor"')
    svg = re.sub(r"<text(?![^>]*\bfill=)", '<text fill="currentColor"', svg)
    svg = re.sub(r"<svg\b", '<svg style="max-width:100%;height:auto"', svg, count=1)
    return svg
