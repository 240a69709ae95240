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


# --------------------------------------------------------------------------- the graph view (graph_model -> SVG)

FONT = "DejaVu Sans Mono"
FONT_SIZE = 13  # px at 100 %: graphviz points are drawn as CSS pixels (width/height come from the viewBox)
CHAR_W = 0.62  # em: DejaVu Sans Mono, Menlo are 0.602 em wide, Consolas 0.55; the box is sized for the widest
_EDGE_STYLE = {
    "data": 'color="#8a8a8a"',
    "shape": 'color="#8a8a8a", fontcolor="#8a8a8a", fontsize=10',
    "back": 'color="#f28e2b", style=dashed, penwidth=1.6, constraint=false, fontcolor="#f28e2b", fontsize=10',
    "init": 'color="#8a8a8a", style=dotted, fontsize=10',
    "invis": "style=invis, weight=4",
    "sync": 'color="#76b7b2", style=dotted, weight=0',
    "region": 'color="#b07aa1", style=dotted, arrowhead=none, fontcolor="#b07aa1", fontsize=10',
}
_CLUSTER_COLOR = {"loop": "#f28e2b", "if": "#f28e2b", "reduce": "#b07aa1", "region": "#9a9a9a", "op": "#9a9a9a"}


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(lines: list, left: bool) -> str:
    end = "\\l" if left else "\\n"
    body = end.join(x.replace("\\", "\\\\").replace('"', '\\"') for x in lines) + (end if left else "")
    return '"' + body + '"'


def graph_dot(g, prefix: str = "") -> str:
    """DOT text of a graph_model.Graph: boxes sized to their text (graphviz's font metrics may differ from the
    browser's), colours by op class, clusters for loops and regions, dashed back edges for loop-carried values."""
    from .graph_model import COLORS

    out = ["digraph dataflow {",
           f'  graph [rankdir=TB, newrank=true, nodesep=0.25, ranksep=0.3, bgcolor="transparent", '
           f'fontname={_q(FONT)}, fontsize=11, labeljust=l];',
           f'  node [shape=box, style="rounded,filled", fontname={_q(FONT)}, fontsize={FONT_SIZE}, '
           f'margin="0.1,0.05", penwidth=1.2];',
           '  edge [arrowsize=0.7, color="#8a8a8a", fontname=' + _q(FONT) + "];"]
    kids: dict = {}
    for c in g.clusters.values():
        kids.setdefault(c.parent, []).append(c.id)
    members: dict = {}
    for n in g.nodes.values():
        members.setdefault(n.cluster, []).append(n)

    def node_line(n, indent):
        col = COLORS.get(n.cls, "#bab0ac")
        chars = max((len(x) for x in n.lines), default=1)
        width = (chars * CHAR_W * FONT_SIZE + 18) / 72
        height = (len(n.lines) * FONT_SIZE * 1.25 + 10) / 72
        left = n.kind == "expr"
        pen = ', penwidth=2' if n.kind == "header" else ""
        # kl-gn, not kl-n: html.py's line-number class (dimmed to 45 %) would dim every box of a view in .kl-lab
        return (f"{indent}{n.id} [id={_q(prefix + n.id)}, class={_q('kl-gn kl-' + n.cls)}, "
                f"label={_label(n.lines, left)}, width={width:.2f}, height={height:.2f}, "
                f'fillcolor="{col}38", color="{col}"{pen}];')

    def emit(cid, depth):
        ind = "  " * depth
        for n in members.get(cid, []):
            out.append(node_line(n, ind))
        for sub in kids.get(cid, []):
            c = g.clusters[sub]
            col = _CLUSTER_COLOR.get(c.kind, "#9a9a9a")
            out.append(f"{ind}subgraph cluster_{sub} {{")
            out.append(f'{ind}  id={_q(prefix + sub)}; label={_q(c.label)}; style="rounded,dashed"; color="{col}"; '
                       f'fontcolor="{col}"; penwidth=1.4; margin=10;')
            emit(sub, depth + 1)
            carried = [n.id for n in members.get(sub, []) if n.kind == "arg"]
            if c.kind == "loop" and len(carried) > 1:  # the loop-carried values side by side under the header
                out.append(f"{ind}  {{rank=same; {'; '.join(carried)};}}")
            out.append(f"{ind}}}")

    emit(None, 1)
    for e in g.edges:
        lab = f", label={_q(' ' + e.label)}" if e.label and e.kind in ("back", "init", "region", "shape") else ""
        out.append(f"  {e.src} -> {e.dst} [{_EDGE_STYLE.get(e.kind, '')}{lab}];")
    out.append("}")
    return "\n".join(out) + "\n"


def render_graph_svg(dot_text: str) -> str | None:
    """`render_dot`, then sized in CSS pixels by its viewBox (points drawn as pixels) and without graphviz's
    <title> tooltips (they would show node ids)."""
    svg = render_dot(dot_text)
    if svg is None:
        return None
    svg = re.sub(r"<title>[^<]*</title>\s*", "", svg)
    svg = re.sub(r'\s(width|height)="[\d.]+pt"', "", svg, count=2)
    svg = svg.replace('style="max-width:100%;height:auto"', "", 1)
    return svg


def svg_size(svg: str) -> tuple[float, float]:
    m = re.search(r'viewBox="[\d.\-]+ [\d.\-]+ ([\d.]+) ([\d.]+)"', svg)
    return (float(m.group(1)), float(m.group(2))) if m else (800.0, 600.0)
