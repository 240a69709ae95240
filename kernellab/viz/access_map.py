"""The sanitizer's access map: which program last wrote (or only read) each element of each argument, with
the elements a finding names outlined. It reads a `SanitizerReport` (plain data from the interpreter's
`sanitize=True` launch), so a learner sees a race as two colours meeting where one was expected."""
from __future__ import annotations

from .html import PALETTE, esc, page

CELL = 14  # px
COLUMNS = 64  # elements per row when the argument is drawn flat
MAX_ROWS = 48


def program_color(flat: int) -> str:
    return PALETTE[flat % len(PALETTE)]


def _cells(m, findings: set, columns: int, rows: int) -> str:
    out = []
    n = min(len(m.writer), columns * rows)
    for i in range(n):
        r, c = divmod(i, columns)
        w, rd, at = int(m.writer[i]), int(m.reader[i]), int(m.atomic[i])
        if w >= 0:
            fill, who = program_color(w), f"written by program {w}"
        elif at >= 0:
            fill, who = program_color(at), f"atomically updated, last by program {at}"
        elif rd >= 0:
            fill, who = "#ffffff", f"only read, last by program {rd}"
        else:
            fill, who = "#e8e8e8", "not touched"
        edge = "#bbbbbb" if fill == "#ffffff" else "#ffffff"  # white (only read) cells need a visible edge
        stroke = ' stroke="#d62728" stroke-width="2"' if i in findings else f' stroke="{edge}" stroke-width="0.5"'
        x, y = c * CELL, r * CELL
        hatch = (f'<line x1="{x + 2}" y1="{y + CELL - 2}" x2="{x + CELL - 2}" y2="{y + 2}" stroke="#333" '
                 'stroke-width="1"/>' if at >= 0 else "")
        out.append(f'<rect x="{c * CELL}" y="{r * CELL}" width="{CELL}" height="{CELL}" fill="{fill}"{stroke}>'
                   f'<title>element {m.offset + i}: {esc(who)}</title></rect>{hatch}')
    return "".join(out)


def access_map_html(report, columns: int = COLUMNS, max_rows: int = MAX_ROWS) -> str:
    """One panel per argument the launch touched: element i at row i // columns, column i % columns, filled
    with the colour of the program that last wrote it (white: only read; hatched: atomics; grey: untouched);
    a red outline on every element a finding names. Large arguments show their first columns x max_rows."""
    gx, gy, gz = report.grid
    flagged: dict = {}
    for f in report.findings:
        if f.element_offset is not None:
            flagged.setdefault(f.argument, set()).add(f.element_offset)
    head = (f'<div class="kl-am-head"><b>{esc(report.kernel)}</b> on grid ({gx}, {gy}, {gz}): '
            + (f'<span style="color:#d62728">{len(report.findings)} finding'
               f'{"s" if len(report.findings) != 1 else ""}</span>' if report.findings else "no findings")
            + "</div>")
    panels = []
    for name, m in report.maps.items():
        n = len(m.writer)
        if n == 0:
            continue
        cols = min(columns, n)
        rows = min(max_rows, -(-n // cols))
        written = int((m.writer >= 0).sum())
        programs = sorted({int(p) for p in m.writer if p >= 0} | {int(p) for p in m.atomic if p >= 0})
        marks = {e - m.offset for e in flagged.get(name, ()) if 0 <= e - m.offset < n}
        shown = "" if rows * cols >= n else f" (the first {rows * cols} of {n} elements)"
        legend = "".join(f'<span class="kl-am-key"><i style="background:{program_color(p)}"></i>program {p}</span>'
                         for p in programs[:8]) + (f" and {len(programs) - 8} more" if len(programs) > 8 else "")
        svg = (f'<svg width="{cols * CELL}" height="{rows * CELL}" role="img" '
               f'aria-label="access map of {esc(name)}">{_cells(m, marks, cols, rows)}</svg>')
        panels.append(f'<div class="kl-am-panel"><div><b>{esc(name)}</b>: {n} elements{shown}, {written} written by '
                      f'{len(programs)} program{"s" if len(programs) != 1 else ""}'
                      f'{f", {len(marks)} flagged" if marks else ""}</div>{svg}<div class="kl-am-legend">{legend}'
                      '<span class="kl-am-key"><i style="background:#fff;border:1px solid #999"></i>only read</span>'
                      '<span class="kl-am-key"><i style="background:#e8e8e8"></i>untouched</span>'
                      '<span class="kl-am-key"><i style="border:2px solid #d62728"></i>named by a finding</span>'
                      '</div></div>')
    style = ("<style>.kl-am-panel{margin:8px 0}.kl-am-legend{font-size:12px;margin-top:4px}"
             ".kl-am-key{margin-right:12px;white-space:nowrap}.kl-am-key i{display:inline-block;width:12px;"
             "height:12px;margin-right:4px;vertical-align:middle}</style>")
    return page(style + head + "".join(panels))


class AccessMapView:
    """`display(AccessMapView(report))`: the map as HTML, with a one-line text form for plain front ends.
    `columns`: elements per row of the drawing (a 2-D argument's row length draws it as its matrix)."""

    def __init__(self, report, columns: int = COLUMNS):
        self.report, self.columns = report, columns

    def _repr_mimebundle_(self, include=None, exclude=None):
        r = self.report
        text = (f"access map of {r.kernel} over {len(r.maps)} argument(s): "
                + (f"{len(r.findings)} finding(s)" if r.findings else "no findings"))
        return {"text/plain": text, "text/html": access_map_html(r, columns=self.columns)}
