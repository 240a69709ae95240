"""The sanitizer's access map: which program last wrote (or only read) each element of each argument, with
the elements a finding names outlined; then, per program, the elements it read and wrote and where its masked-off
lanes pointed (those outside the argument are what the mask keeps from faulting). It reads a `SanitizerReport`
(plain data from the interpreter's `sanitize=True` launch), so a learner sees a race as two colours meeting where
one was expected, and a mask doing its job at the ragged edge."""
from __future__ import annotations

import itertools

import numpy as np

from .html import PALETTE, esc, page

CELL = 14  # px
COLUMNS = 64  # elements per row when the argument is drawn flat
MAX_ROWS = 48


def program_color(flat: int) -> str:
    return PALETTE[flat % len(PALETTE)]


_GRIDS = itertools.count()


def _runs(kinds, columns: int, first: int = 0):
    """(row, column, length, kind) of the runs of equal kinds along each drawn row: one rectangle per run keeps the
    drawing small (a 64 x 48 map of a row-per-program kernel is a few dozen rectangles, not 3072)."""
    run = None
    for i, k in enumerate(kinds):
        r, c = divmod(i, columns)
        if run and run[3] == k and run[0] == r:
            run[2] += 1
            continue
        if run and run[3] is not None:
            yield tuple(run)
        run = [r, c, 1, k]
    if run and run[3] is not None:
        yield tuple(run)


def _run_rect(r, c, n, fill, title, extra="", cls="e") -> str:
    return (f'<rect class="{cls}" x="{c * CELL}" y="{r * CELL}" width="{n * CELL}" height="{CELL}" fill="{fill}"'
            f'{extra}><title>{esc(title)}</title></rect>')


def _span(first: int, n: int) -> str:
    return f"element {first}" if n == 1 else f"elements {first}..{first + n - 1}"


def _grid(width: int, height: int) -> str:
    """Cell edges over the runs (a pattern: one element, not one per cell)."""
    gid = f"klamg{next(_GRIDS)}"
    return (f'<defs><pattern id="{gid}" width="{CELL}" height="{CELL}" patternUnits="userSpaceOnUse"><path '
            f'd="M{CELL} 0V{CELL}H0" fill="none" stroke="#fff" stroke-width="1"/></pattern></defs>'
            f'<rect width="{width}" height="{height}" fill="url(#{gid})" pointer-events="none"/>')


def _cells(m, findings: set, columns: int, rows: int, step: int = 1) -> str:
    """The whole map: runs of elements last written by one program (its colour), only read (its colour, pale),
    atomically updated (its colour, hatched) or untouched (grey); then an outline on each element a finding names.
    With `step` > 1 a cell stands for `step` elements and takes the colour of its first."""
    w, rd, at = m.writer[::step], m.reader[::step], m.atomic[::step]
    n = min(len(w), columns * rows)
    w, rd, at = w[:n], rd[:n], at[:n]
    kinds = [("w", int(a)) if a >= 0 else ("a", int(c)) if c >= 0 else ("r", int(b)) if b >= 0 else ("-", -1)
             for a, b, c in zip(w.tolist(), rd.tolist(), at.tolist())]
    out = []
    for r, c, k, (what, prog) in _runs(kinds, columns):
        first = m.offset + (r * columns + c) * step
        sp = _span(first, min(k * step, m.offset + len(m.writer) - first))
        if what == "w":
            out.append(_run_rect(r, c, k, program_color(prog), f"{sp}: written by program {prog}"))
        elif what == "a":
            out.append(_run_rect(r, c, k, program_color(prog),
                                 f"{sp}: atomically updated, last by program {prog}"))
            out += [f'<line x1="{(c + j) * CELL + 2}" y1="{r * CELL + CELL - 2}" x2="{(c + j) * CELL + CELL - 2}" '
                    f'y2="{r * CELL + 2}" stroke="#333" stroke-width="1"/>' for j in range(k)]
        elif what == "r":
            out.append(_run_rect(r, c, k, program_color(prog), f"{sp}: only read, last by program "
                                 f"{prog}", ' fill-opacity="0.35"'))
        else:
            out.append(_run_rect(r, c, k, "#e8e8e8", f"{sp}: not touched"))
    out.append(_grid(columns * CELL, -(-n // columns) * CELL))
    for i in sorted({i // step for i in findings}):
        if i < n:
            r, c = divmod(i, columns)
            out.append(f'<rect x="{c * CELL}" y="{r * CELL}" width="{CELL}" height="{CELL}" fill="none" '
                       f'stroke="#d62728" stroke-width="2"><title>{_span(m.offset + i * step, step)}: named by a '
                       "finding</title></rect>")
    return "".join(out)


def access_map_html(report, columns: int = COLUMNS, max_rows: int = MAX_ROWS) -> str:
    """One panel per argument the launch touched: element i at row i // columns, column i % columns, filled
    with the colour of the program that last wrote it (pale: only read, by that program; hatched: atomics; grey:
    untouched); a red outline on every element a finding names. A large argument is drawn whole in at most max_rows
    rows, a cell standing for a power of two of elements."""
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
        step = 1  # a large argument is drawn whole, a cell standing for `step` elements
        while -(-n // step) > cols * max_rows:
            step *= 2
        rows = -(-(-(-n // step)) // cols)
        written = int((m.writer >= 0).sum())
        programs = sorted({int(p) for p in m.writer if p >= 0} | {int(p) for p in m.atomic if p >= 0}
                          | {int(p) for p in m.reader if p >= 0})
        marks = {e - m.offset for e in flagged.get(name, ()) if 0 <= e - m.offset < n}
        shown = f" ({cols} a row)" if step == 1 else \
            f" (a cell per {step} elements, coloured as the first of them; {cols * step} elements a row)"
        pale = "" if (m.writer >= 0).any() or (m.atomic >= 0).any() else ";opacity:.35"  # an input: as drawn
        legend = "".join(f'<span class="kl-am-key"><i style="background:{program_color(p)}{pale}"></i>program {p}'
                         "</span>" for p in programs[:8]) + (f" and {len(programs) - 8} more" if len(programs) > 8
                                                             else "")
        svg = (f'<svg width="{cols * CELL}" height="{rows * CELL}" role="img" '
               f'aria-label="access map of {esc(name)}">{_cells(m, marks, cols, rows, step)}</svg>')
        writers = {int(p) for p in m.writer if p >= 0} | {int(p) for p in m.atomic if p >= 0}
        did = (f"{written} written by {len(writers)} program{'s' if len(writers) != 1 else ''}" if writers else
               f"only read, by {len(programs)} program{'s' if len(programs) != 1 else ''}")
        panels.append(f'<div class="kl-am-panel"><div><b>{esc(name)}</b>: {n} elements{shown}, {did}'
                      f'{f", {len(marks)} flagged" if marks else ""}</div>{svg}<div class="kl-am-legend">{legend}'
                      '<span class="kl-am-key"><i style="background:#4e79a7;opacity:.35"></i>pale: only read (by '
                      'that program)</span>'
                      '<span class="kl-am-key"><i style="background:#e8e8e8"></i>untouched</span>'
                      '<span class="kl-am-key"><i style="border:2px solid #d62728"></i>named by a finding</span>'
                      '</div></div>')
    style = ("<style>.kl-am-panel{margin:8px 0}.kl-am-legend{font-size:12px;margin-top:4px}"
             ".kl-am-key{margin-right:12px;white-space:nowrap}.kl-am-key i{display:inline-block;width:12px;"
             "height:12px;margin-right:4px;vertical-align:middle}</style>")
    return page(style + head + "".join(panels))


# --------------------------------------------------------------------------- per program
READ, WRITTEN, BOTH, ATOMIC = "#4e79a7", "#f28e2b", "#b07aa1", "#59a14f"
MAX_PROGRAMS_SHOWN = 32
_PROG_IDS = itertools.count()


def _program_cells(pa, m, columns: int, max_rows: int) -> tuple[str, int, int, str]:
    """(svg cells, rows, first drawn element offset, note) of one program's accesses to one argument: the rows that
    hold what it touched (its masked-off lanes too), at most `max_rows` of them from the first."""
    lo_ok, hi_ok = m.offset, m.offset + len(m.writer)  # the argument's elements (offsets from its pointer)
    touched = np.concatenate([pa.read, pa.written, pa.atomic, pa.masked])
    if touched.size == 0:
        return "", 0, lo_ok, ""
    first = int(touched.min()) - (int(touched.min()) - lo_ok) % columns  # rows aligned as in the whole map
    last = int(touched.max())
    rows = (last - first) // columns + 1
    note = ""
    if rows > max_rows:
        note = f" (the first {max_rows} rows: elements {first}..{first + max_rows * columns - 1})"
        rows = max_rows
    span = np.arange(first, first + rows * columns)
    rd, wr = np.isin(span, pa.read), np.isin(span, pa.written)
    at, mk = np.isin(span, pa.atomic), np.isin(span, pa.masked)
    inside = (span >= lo_ok) & (span < hi_ok)
    kinds = np.select([rd & wr, wr, rd, at, mk & ~inside, mk, inside], [1, 2, 3, 4, 5, 6, 7], 0).tolist()
    fills = {1: (BOTH, "read and written"), 2: (WRITTEN, "written"), 3: (READ, "read"),
             4: (ATOMIC, "accessed atomically"), 7: ("#f2f2f2", "not touched by this program")}
    out, dashed = [], []
    for r, c, k, kind in _runs([kd or None for kd in kinds], columns):
        e = first + r * columns + c
        if kind in fills:
            fill, what = fills[kind]
            if kind != 7 and mk[r * columns + c:r * columns + c + k].any():
                what += "; a masked-off lane points at some of them too"
            out.append(_run_rect(r, c, k, fill, f"{_span(e, k)}: {what}"))
            continue
        outside = kind == 5
        what = (f"a masked-off lane points here, outside the argument (elements {lo_ok}..{hi_ok - 1}): the mask "
                "keeps it from faulting" if outside else "a masked-off lane points here (nothing read or written)")
        stroke = "#d62728" if outside else "#888"
        dashed.append(f'<rect class="m" x="{c * CELL + 1}" y="{r * CELL + 1}" width="{k * CELL - 2}" '
                      f'height="{CELL - 2}" fill="none" stroke="{stroke}" stroke-width="1.5" stroke-dasharray="3,2">'
                      f"<title>{esc(_span(e, k))}: {esc(what)}</title></rect>")
    out.append(_grid(columns * CELL, rows * CELL))
    out += dashed
    return "".join(out), rows, first, note


def program_map_html(report, program: int, columns: int = COLUMNS, max_rows: int = 16) -> str:
    """What program `program` (its flat id) did to each argument: the elements it read, wrote (both: purple) or
    accessed atomically, and where its masked-off lanes pointed (dashed; red dashed when outside the argument,
    the lanes the mask keeps from faulting). Only the rows it touched are drawn."""
    args = report.programs.get(program, {})
    pid = report.program(program)
    panels = []
    for name, pa in args.items():
        m = report.maps.get(name)
        if m is None:
            continue
        cells, rows, first, note = _program_cells(pa, m, columns, max_rows)
        if not rows:
            continue
        n_out = int(((pa.masked < m.offset) | (pa.masked >= m.offset + len(m.writer))).sum())
        what = [f"{len(pa.read)} read", f"{len(pa.written)} written"] + \
            ([f"{len(pa.atomic)} atomic"] if len(pa.atomic) else []) + \
            ([f"{len(pa.masked)} masked-off lanes"] if len(pa.masked) else []) + \
            ([f'<span style="color:#d62728">{n_out} of them outside the argument</span>'] if n_out else [])
        panels.append(f'<div class="kl-am-panel"><div><b>{esc(name)}</b>: {", ".join(what)}; rows from element '
                      f'{first}{esc(note)}</div><svg width="{columns * CELL}" height="{rows * CELL}" role="img" '
                      f'aria-label="program {program}: {esc(name)}">{cells}</svg></div>')
    if not panels:
        return f'<p class="kl-dim">program {pid} touched no argument</p>'
    return "".join(panels)


def _legend_programs() -> str:
    keys = [(READ, "read"), (WRITTEN, "written"), (BOTH, "read and written"), (ATOMIC, "atomic"),
            ("#f2f2f2", "not touched by this program")]
    out = "".join(f'<span class="kl-am-key"><i style="background:{c}"></i>{t}</span>' for c, t in keys)
    return (out + '<span class="kl-am-key"><i style="border:1.5px dashed #888"></i>masked-off lane</span>'
            '<span class="kl-am-key"><i style="border:1.5px dashed #d62728"></i>masked-off lane outside the '
            'argument</span>')


def programs_html(report, columns: int = COLUMNS, limit: int = MAX_PROGRAMS_SHOWN) -> str:
    """Per program, what it read and wrote, with its masked-off lanes: one panel per program, a row of buttons
    to pick one (plain HTML and CSS: it works in a saved notebook too). Opens on the first program with masked
    lanes outside an argument, else with masked lanes, else the first."""
    progs = sorted(report.programs)
    if not progs:
        return ""
    shown = progs[:limit]

    def score(p):
        pas = [(pa, report.maps.get(n)) for n, pa in report.programs[p].items()]
        out = any(m is not None and ((pa.masked < m.offset) | (pa.masked >= m.offset + len(m.writer))).any()
                  for pa, m in pas)
        return 2 if out else 1 if any(len(pa.masked) for pa, _ in pas) else 0

    start = max(shown, key=lambda p: (score(p), -p))
    uid = f"klam{next(_PROG_IDS)}"
    radios, labels, panels, css = [], [], [], []
    for p in shown:
        rid = f"{uid}p{p}"
        radios.append(f'<input type="radio" name="{uid}" id="{rid}" class="kl-am-radio"'
                      f'{" checked" if p == start else ""}>')
        tag = " ⚠" if score(p) == 2 else ""
        labels.append(f'<label for="{rid}" class="kl-am-pick" title="program {report.program(p)}">'
                      f'{", ".join(map(str, report.program(p)[:2 if report.grid[2] == 1 else 3]))}{tag}</label>')
        panels.append(f'<div class="kl-am-prog {rid}"><div class="kl-am-which">program {report.program(p)}</div>'
                      f"{program_map_html(report, p, columns)}</div>")
        css.append(f"#{rid}:checked~.kl-am-progs .{rid}{{display:block}}"
                   f"#{rid}:checked~.kl-am-picks label[for={rid}]{{background:rgba(127,127,127,.3);font-weight:600}}")
    more = (f'<span class="kl-dim"> … the first {len(shown)} of {len(progs)} programs</span>'
            if len(progs) > len(shown) else "")
    style = ("<style>.kl-am-radio{position:absolute;opacity:0;pointer-events:none}.kl-am-prog{display:none}"
             ".kl-am-pick{display:inline-block;padding:1px 7px;margin:2px 3px 2px 0;border:1px solid "
             "rgba(127,127,127,.5);border-radius:3px;cursor:pointer;font-size:12px}.kl-am-which{font-weight:600;"
             f"margin:4px 0}}{''.join(css)}</style>")
    return (f'<div class="kl-am-programs">{style}<h4 style="margin:.8em 0 .2em">per program: what it read and '
            'wrote, and where its masked-off lanes pointed</h4>' + "".join(radios)
            + f'<div class="kl-am-picks">program (⚠: masked-off lanes outside an argument): {"".join(labels)}{more}'
            f'</div><div class="kl-am-progs">{"".join(panels)}</div>'
            f'<div class="kl-am-legend">{_legend_programs()}</div></div>')


class AccessMapView:
    """`display(AccessMapView(report))`: the map as HTML, with a one-line text form for plain front ends.
    `columns`: elements per row of the drawing (a 2-D argument's row length draws it as its matrix)."""

    def __init__(self, report, columns: int = COLUMNS):
        self.report, self.columns = report, columns

    def _repr_mimebundle_(self, include=None, exclude=None):
        r = self.report
        text = (f"access map of {r.kernel} over {len(r.maps)} argument(s): "
                + (f"{len(r.findings)} finding(s)" if r.findings else "no findings"))
        return {"text/plain": text, "text/html": access_map_html(r, columns=self.columns)
                + page(programs_html(r, columns=self.columns))}
