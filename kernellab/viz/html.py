"""Static HTML/SVG renderings of the lab's views: self-contained (inline CSS and SVG, no scripts, no
network), readable in light and dark themes (transparent backgrounds, `currentColor`, JupyterLab CSS
variables with fallbacks). Saved notebooks and nbconvert show these; the live widgets reuse them."""
from __future__ import annotations

import html as _html
import itertools
import os
import re

from ..compiler import layout_model as LM
from . import data as D

_IDS = itertools.count()

CSS = """
.kl-hp>.widget-html-content{min-width:0}
.kl-lab{font-family:var(--jp-ui-font-family,system-ui,-apple-system,sans-serif);font-size:13px;color:inherit;
 background:transparent;line-height:1.4}
.kl-lab h4{margin:.6em 0 .3em;font-size:14px}
.kl-lab table.kl-t{border-collapse:collapse;margin:.3em 0}
.kl-lab table.kl-t th,.kl-lab table.kl-t td{border-bottom:1px solid rgba(127,127,127,.3);padding:2px 8px;
 text-align:left;vertical-align:top}
.kl-lab table.kl-t td.kl-r{text-align:right;font-variant-numeric:tabular-nums}
.kl-lab table.kl-t tr>th:first-child{white-space:nowrap}
.kl-lab .kl-code{font-family:var(--jp-code-font-family,ui-monospace,SFMono-Regular,Menlo,Consolas,monospace);
 font-size:12px;white-space:pre;overflow:auto;max-height:36em;border:1px solid rgba(127,127,127,.3);
 border-radius:3px;padding:4px 0;background:transparent;margin:.3em 0}
.kl-lab .kl-l{display:block;padding:0 8px 0 0;min-height:1.35em}
.kl-lab .kl-n{display:inline-block;min-width:3.2em;padding-right:.8em;text-align:right;opacity:.45;
 user-select:none}
.kl-lab .kl-g{display:inline-block;width:1.2em;opacity:.7;user-select:none}
.kl-lab .ko{color:var(--jp-mirror-editor-keyword-color,#3b7fd0);font-weight:600}
.kl-lab .kv{color:var(--jp-mirror-editor-variable-2-color,#9b5fd0)}
.kl-lab .kt{color:var(--jp-mirror-editor-builtin-color,#14957a)}
.kl-lab .kL{color:var(--jp-mirror-editor-attribute-color,#c77614)}
.kl-lab .kn{color:var(--jp-mirror-editor-number-color,#d2603a)}
.kl-lab .ks{color:var(--jp-mirror-editor-string-color,#c0642b)}
.kl-lab .ky{color:var(--jp-mirror-editor-def-color,#2f8fd6)}
.kl-lab .kc{opacity:.5}
.kl-lab .kl-changed{background:rgba(255,190,0,.14);box-shadow:inset 3px 0 rgba(255,170,0,.8)}
.kl-lab .kl-add{background:rgba(46,160,67,.18)}
.kl-lab .kl-del{background:rgba(248,81,73,.18)}
.kl-lab .kl-wadd{background:rgba(46,160,67,.45);border-radius:2px}
.kl-lab .kl-wdel{background:rgba(248,81,73,.45);border-radius:2px;text-decoration:line-through}
.kl-lab .kl-changed .kl-wadd{background:rgba(255,170,0,.45)}
.kl-lab .kl-hit{background:rgba(70,150,255,.22)}
.kl-lab .kl-sel{background:rgba(255,140,0,.28);box-shadow:inset 3px 0 rgba(255,120,0,.9)}
.kl-lab .kl-dim{opacity:.6}
.kl-lab .kl-badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:11px;
 border:1px solid rgba(127,127,127,.45)}
.kl-lab .kl-yes{background:rgba(255,190,0,.22)}
.kl-lab .kl-warn{color:var(--jp-warn-color0,#d9822b)}
.kl-lab .kl-bad{color:var(--jp-error-color0,#e5534b)}
.kl-lab .kl-ok{color:var(--jp-success-color0,#3fa65a)}
.kl-lab details>summary{cursor:pointer;padding:2px 0}
.kl-lab svg text{font-family:var(--jp-code-font-family,ui-monospace,Menlo,monospace)}
.kl-lab table.kl-sbs{border-collapse:collapse;font-family:var(--jp-code-font-family,ui-monospace,Menlo,monospace);
 font-size:12px;width:100%;table-layout:fixed}
.kl-lab table.kl-sbs td{white-space:pre-wrap;overflow-wrap:anywhere;padding:0 8px 0 0;vertical-align:top;
 line-height:1.35}
.kl-lab table.kl-sbs td.kl-n{min-width:2.6em;text-align:right;opacity:.45;user-select:none;padding:0 .6em 0 .3em}
.kl-lab table.kl-sbs th{text-align:left;font-weight:600;font-family:var(--jp-ui-font-family,sans-serif);
 border-bottom:1px solid rgba(127,127,127,.3)}
.kl-lab table.kl-sbs td.kl-sbs-empty{background:rgba(127,127,127,.08)}
.kl-lab .kl-ls{display:flex;align-items:flex-start}
.kl-lab .kl-ls>div{white-space:pre;line-height:1.35;tab-size:4}
.kl-lab .kl-ls>.kl-lsn{flex:0 0 auto;text-align:right;opacity:.45;user-select:none;padding:0 .8em 0 .5em}
.kl-lab .kl-ls>.kl-lst{flex:1 0 auto;padding-right:8px}
.kl-lab .kl-lst b{color:var(--jp-mirror-editor-keyword-color,#3b7fd0);font-weight:600}
.kl-lab .kl-lst i,.kl-lab .kl-lst em,.kl-lab .kl-lst dfn,.kl-lab .kl-lst var{font-style:normal}
.kl-lab .kl-lst i{color:var(--jp-mirror-editor-variable-2-color,#9b5fd0)}
.kl-lab .kl-lst em{color:var(--jp-mirror-editor-builtin-color,#14957a)}
.kl-lab .kl-lst dfn{color:var(--jp-mirror-editor-attribute-color,#c77614)}
.kl-lab .kl-lst u{text-decoration:none;color:var(--jp-mirror-editor-number-color,#d2603a)}
.kl-lab .kl-lst q{quotes:none;color:var(--jp-mirror-editor-string-color,#c0642b)}
.kl-lab .kl-lst var{color:var(--jp-mirror-editor-def-color,#2f8fd6)}
.kl-lab .kl-lst s{text-decoration:none;opacity:.5}
.kl-lab .kl-lst mark{background:rgba(255,200,0,.55);color:inherit;border-radius:2px}
"""

# Tableau-10: mid tones that read on white and on near-black at half opacity
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")


def esc(s) -> str:
    """Escape for attributes and text."""
    return _html.escape(str(s), quote=True)


def esc_text(s) -> str:
    """Escape for element text (quotes stay as they are: shorter IR markup)."""
    return _html.escape(str(s), quote=False)


def page(body: str) -> str:
    """Wrap a fragment with the lab's stylesheet in a `.kl-lab` container."""
    return f'<div class="kl-lab"><style>{CSS}</style>{body}</div>'


# --------------------------------------------------------------------------- syntax highlighting

_NEST = r"<(?:[^<>]|<(?:[^<>]|<[^<>]*>)*>)*>"
_TOKENS = re.compile("|".join([
    r'(?P<loc>\bloc\((?:"(?:[^"\\]|\\.)*":)?\d+(?::\d+)?\))',
    r'(?P<cm>//.*$|^\s*;.*$)',
    r'(?P<str>"(?:[^"\\]|\\.)*")',
    r'(?P<lay>#[A-Za-z_]\w*(?:' + _NEST + r')?)',
    r'(?P<ty>\btensor' + _NEST + r'|!ptr<[^<>]*>|\b(?:i1|i8|i16|i32|i64|u8|u16|u32|u64|f16|bf16|f32|f64)\b)',
    r'(?P<val>%"[^"]*"|%[\w.$]+)',
    r'(?P<sym>@"[^"]*"|@[\w.$]+)',
    r'(?P<op>\b[a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+\b)',
    r'(?P<num>\b0x[0-9a-fA-F]+\b|(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?\b)',
]))
_CLASS = {"loc": "kc", "cm": "kc", "str": "ks", "lay": "kL", "ty": "kt", "val": "kv",
          "sym": "ky", "op": "ko", "num": "kn"}


def _marked(line: str, marks, mark_class: str, plain: bool = False) -> str:
    """`line` highlighted, the character ranges `marks` wrapped in `<span class=mark_class>` as well: the
    line is cut where a token class or the mark changes, and each piece gets both spans."""
    cls = [""] * len(line)
    if not plain:
        for m in _TOKENS.finditer(line):
            c = _CLASS[m.lastgroup]
            for k in range(m.start(), m.end()):
                cls[k] = c
            if m.lastgroup == "ty":
                for x in re.finditer(r"#L\d+", m.group()):
                    for k in range(m.start() + x.start(), m.start() + x.end()):
                        cls[k] = "kL"
    marked = [False] * len(line)
    for i, j in marks:
        for k in range(max(i, 0), min(j, len(line))):
            marked[k] = True
    out, k = [], 0
    while k < len(line):  # one run of marked (or unmarked) characters, then its token pieces
        e = k
        while e < len(line) and marked[e] == marked[k]:
            e += 1
        pieces, t = [], k
        while t < e:
            u = t
            while u < e and cls[u] == cls[t]:
                u += 1
            piece = esc_text(line[t:u])
            pieces.append(f'<span class="{cls[t]}">{piece}</span>' if cls[t] else piece)
            t = u
        run = "".join(pieces)
        out.append(f'<span class="{mark_class}">{run}</span>' if marked[k] else run)
        k = e
    return "".join(out)


def highlight(line: str, marks=None, mark_class: str = "kl-wadd") -> str:
    """One line of IR / LLVM IR / PTX / SASS as HTML with token spans (escaped); `marks`, character ranges,
    are wrapped in a `mark_class` span too (the words a pass changed)."""
    if marks:
        return _marked(line, marks, mark_class)
    out, pos = [], 0
    for m in _TOKENS.finditer(line):
        out.append(esc_text(line[pos:m.start()]))
        kind = m.lastgroup
        text = esc_text(m.group())
        if kind == "ty":
            text = re.sub(r"#L\d+", lambda x: f'<span class="kL">{x.group()}</span>', text)
        out.append(f'<span class="{_CLASS[kind]}">{text}</span>')
        pos = m.end()
    out.append(esc_text(line[pos:]))
    return "".join(out)


def code_block(lines, classes=None, numbers=None, gutters=None, plain=False, max_lines=None, marks=None) -> str:
    """A scrollable code box: `lines` (strings), optional per-line CSS classes, line numbers (None -> 1..n,
    False -> none) and gutter marks (+/-); `max_lines` truncates with a note. `marks`: per line, None or
    (css class, character ranges) of words to mark (a word-level diff)."""
    lines = list(lines)
    n = len(lines)
    if numbers is None:
        numbers = range(1, n + 1)
    rows = []
    for i, line in enumerate(lines):
        if max_lines is not None and i >= max_lines:
            rows.append(f'<span class="kl-l kl-dim">… {n - max_lines} more lines</span>')
            break
        cls = ("kl-l " + classes[i]) if classes and classes[i] else "kl-l"
        num = f'<span class="kl-n">{numbers[i]}</span>' if numbers is not False else ""
        gut = f'<span class="kl-g">{esc(gutters[i])}</span>' if gutters else ""
        mk = marks[i] if marks else None
        if mk and mk[1]:
            body = _marked(line, mk[1], mk[0], plain)
        else:
            body = esc_text(line) if plain else highlight(line)
        rows.append(f'<span class="{cls}">{num}{gut}{body}</span>')
    return '<div class="kl-code">' + "".join(rows) + "</div>"


# A long listing (PTX, SASS, LLVM IR: thousands of lines) in as little markup as reads the same: the line numbers
# in one column and the text in another (no element per line), each run of tokens of one kind, with only spaces
# and commas between them, in one short element (`%r1, %r2, %r3` is one <i>), not a span per token. The
# stylesheet above colours the tags as the spans of `highlight`.
_SHORT = {"ko": "b", "kv": "i", "kn": "u", "kc": "s", "kt": "em", "ks": "q", "kL": "dfn", "ky": "var"}
_GAP = re.compile(r"[ \t,]*")


def listing_line(line: str, rx=None) -> str:
    """One line of a listing: token runs in short tags; with `rx` (a compiled regex), its matches in <mark>
    (the tokens are not coloured on such a line: the mark is what the reader looks for)."""
    if rx is not None and rx.search(line):
        out, last = [], 0
        for m in rx.finditer(line):
            if m.end() == m.start():
                continue
            out.append(esc_text(line[last:m.start()]) + "<mark>" + esc_text(m.group()) + "</mark>")
            last = m.end()
        return "".join(out) + esc_text(line[last:])
    runs = []  # [start, end, tag]
    for m in _TOKENS.finditer(line):
        tag = _SHORT[_CLASS[m.lastgroup]]
        if runs and runs[-1][2] == tag and _GAP.fullmatch(line, runs[-1][1], m.start()):
            runs[-1][1] = m.end()
        else:
            runs.append([m.start(), m.end(), tag])
    out, pos = [], 0
    for a, e, tag in runs:
        out.append(f"{esc_text(line[pos:a])}<{tag}>{esc_text(line[a:e])}</{tag}>")
        pos = e
    out.append(esc_text(line[pos:]))
    return "".join(out)


def listing(lines, max_lines: int | None = None, rx=None) -> str:
    """A scrollable listing of `lines` (PTX, SASS, LLVM IR) with line numbers and token colours, about twice the
    plain text's size (code_block's span per line and per token is five times it); `rx` marks matches."""
    lines = list(lines)
    n = len(lines)
    more = ""
    if max_lines is not None and n > max_lines:
        lines = lines[:max_lines]
        more = f'<div class="kl-dim" style="padding-left:4.2em">… {n - max_lines} more lines</div>'
    nums = "\n".join(map(str, range(1, len(lines) + 1)))
    body = "\n".join(listing_line(x, rx) for x in lines)
    return (f'<div class="kl-code"><div class="kl-ls"><div class="kl-lsn">{nums}</div><div class="kl-lst">{body}'
            f"</div></div>{more}</div>")


# --------------------------------------------------------------------------- passes


def _trace(obj):
    return getattr(obj, "trace", obj)


def changed_lines(before: str | None, after: str) -> set[int]:
    """Indices of `after`'s lines that are new relative to `before` (all, if there is no before)."""
    if before is None:
        return set()
    out, j = set(), 0
    for tag, _ in D.ir_diff(before, after):
        if tag == "del":
            continue
        if tag == "add":
            out.add(j)
        j += 1
    return out


def changed_words(before: str | None, after: str) -> dict:
    """{index of a changed line of `after`: character ranges of its added words, or None when the whole line
    is new}."""
    if before is None:
        return {}
    out, j = {}, 0
    for tag, _, ranges in D.ir_diff_words(before, after):
        if tag == "del":
            continue
        if tag == "add":
            out[j] = ranges
        j += 1
    return out


def ir_html(ir: str, changed=(), hits=(), selected=(), max_lines=None) -> str:
    """IR text as a highlighted code box with changed / search-hit / selected lines marked. `changed` may be
    a dict {line: added word ranges} (`changed_words`): then only those words are marked within the line."""
    lines = ir.splitlines()
    words = changed if isinstance(changed, dict) else {}
    changed, hits, selected = set(changed), set(hits), set(selected)
    classes = [" ".join(c for c, s in (("kl-changed", changed), ("kl-hit", hits), ("kl-sel", selected)) if i in s)
               for i in range(len(lines))]
    marks = [("kl-wadd", words[i]) if words.get(i) else None for i in range(len(lines))] if words else None
    return code_block(lines, classes, max_lines=max_lines, marks=marks)


def pass_table(trace, current: int | None = None) -> str:
    rows = ["<tr><th>#</th><th>pass</th><th>changed</th><th>ms</th><th>what it found</th></tr>"]
    for r in D.pass_rows(trace):
        style = ' class="kl-sel"' if r["index"] == current else ""
        ch = '<span class="kl-badge kl-yes">changed</span>' if r["changed"] else '<span class="kl-dim">—</span>'
        rows.append(f'<tr{style}><td class="kl-r">{r["index"]}</td><td title="{esc(r["description"])}">'
                    f'<b>{esc(r["name"])}</b><br><span class="kl-dim">{esc(r["description"])}</span></td>'
                    f'<td>{ch}</td><td class="kl-r">{r["ms"]:.2f}</td><td>{esc(r["summary"])}</td></tr>')
    return '<table class="kl-t">' + "".join(rows) + "</table>"


LIVE_NOTE = ("the rest is loaded on demand in a live notebook: run the cell (with a kernel) to see it; "
             "a saved notebook keeps only this part, so it stays small")


def passes_html(compiled, max_lines: int = 3000, full: bool = False) -> str:
    """Table of the passes, then the IR (changed words marked) of the pass the live view opens on; `full`
    adds every pass's IR in collapsible sections (megabytes on a real kernel: not what a saved notebook keeps)."""
    trace = _trace(compiled)
    parts = [f"<h4>{esc(trace.kernel)}: {len(trace.passes)} passes</h4>", pass_table(trace)]
    if not trace.passes:
        return page("".join(parts))
    shown = range(len(trace.passes)) if full else [D.first_informative_pass(trace)]
    for i in shown:
        p = trace.passes[i]
        prev = trace.passes[i - 1].ir if i > 0 else None
        head = (f'<b>{i}. {esc(p.name)}</b> — {esc(p.description)}'
                f' <span class="kl-dim">({p.seconds * 1e3:.2f} ms)</span>')
        if full and prev is not None and p.ir == prev:  # say so instead of repeating
            parts.append(f'<p style="margin:2px 0 2px 1.1em">{head} <span class="kl-dim">— IR unchanged</span></p>')
            continue
        changed = changed_words(prev, p.ir) if p.changed else {}
        mark = f' <span class="kl-badge kl-yes">{len(changed)} lines changed</span>' if changed else ""
        parts.append(f'<details{"" if full else " open"}><summary>{head}{mark}</summary>'
                     f'{ir_html(p.ir, changed, max_lines=max_lines)}</details>')
    if not full:
        parts.append(f'<p class="kl-dim">IR after the other passes: {esc(LIVE_NOTE)}.</p>')
    return page("".join(parts))


def diff_block(before: str, after: str, context: int | None = None, hits=None) -> str:
    """The +/- code box of `ir_diff` (optionally only `context` lines around changes)."""
    wdiff = D.ir_diff_words(before, after)
    diff = [(t, line) for t, line, _ in wdiff]
    keep = range(len(diff))
    if context is not None:
        near = set()
        for i, (tag, _) in enumerate(diff):
            if tag != "same":
                near.update(range(max(0, i - context), min(len(diff), i + context + 1)))
        keep = sorted(near)
    lines, classes, gutters, numbers, marks = [], [], [], [], []
    a = b = 0
    last = -1
    counters = []
    for tag, _ in diff:
        counters.append((a, b))
        a += tag != "add"
        b += tag != "del"
    for i in keep:
        if last >= 0 and i != last + 1:
            lines.append(f"⋯ {i - last - 1} unchanged lines")
            classes.append("kl-dim")
            gutters.append(" ")
            numbers.append("")
            marks.append(None)
        tag, line = diff[i]
        lines.append(line)
        ranges = wdiff[i][2]
        marks.append(({"add": "kl-wadd", "del": "kl-wdel"}[tag], ranges) if ranges else None)
        cls = {"add": "kl-add", "del": "kl-del", "same": ""}[tag]
        if hits is not None and hits(line):
            cls += " kl-hit"
        classes.append(cls.strip())
        gutters.append({"add": "+", "del": "-", "same": " "}[tag])
        numbers.append(counters[i][1] + 1 if tag != "del" else "")
        last = i
    if not any(t != "same" for t, _ in diff):
        return '<p class="kl-dim">no changes</p>' + code_block([l for _, l in diff])
    return code_block(lines, classes, numbers=numbers, gutters=gutters, marks=marks)


def side_by_side(before: str, after: str, context: int | None = None) -> str:
    """The diff as two columns, the IR before the pass on the left and after it on the right: unchanged lines
    side by side, a changed block's removed and added lines row by row (changed words marked), a removed or added
    line alone on its side; `context`: only that many unchanged lines around each change."""
    wdiff = D.ir_diff_words(before, after)
    rows, k, a, b = [], 0, 0, 0  # rows: (left (num, line, marks) or None, right ... or None, changed)
    while k < len(wdiff):
        if wdiff[k][0] == "same":
            a, b = a + 1, b + 1
            rows.append(((a, wdiff[k][1], None), (b, wdiff[k][1], None), False))
            k += 1
            continue
        dels, adds = [], []
        while k < len(wdiff) and wdiff[k][0] != "same":
            tag, line, ranges = wdiff[k]
            if tag == "del":
                a += 1
                dels.append((a, line, ranges))
            else:
                b += 1
                adds.append((b, line, ranges))
            k += 1
        for i in range(max(len(dels), len(adds))):
            rows.append((dels[i] if i < len(dels) else None, adds[i] if i < len(adds) else None, True))
    if not any(ch for _, _, ch in rows):
        return '<p class="kl-dim">no changes</p>' + code_block(after.splitlines())
    keep = range(len(rows))
    if context is not None:
        near = set()
        for i, (_, _, ch) in enumerate(rows):
            if ch:
                near.update(range(max(0, i - context), min(len(rows), i + context + 1)))
        keep = sorted(near)

    def cell(side, cls, mark):
        if side is None:
            return '<td class="kl-n"></td><td class="kl-sbs-empty"></td>'
        num, line, ranges = side
        body = _marked(line, ranges, mark) if ranges else highlight(line)
        return f'<td class="kl-n">{num}</td><td class="{cls}">{body}</td>'

    out, last = [], -1
    for i in keep:
        if last >= 0 and i != last + 1:
            out.append(f'<tr><td></td><td class="kl-dim" colspan="3">⋯ {i - last - 1} unchanged lines</td></tr>')
        left, right, ch = rows[i]
        out.append("<tr>" + cell(left, "kl-del" if ch else "", "kl-wdel") + cell(right, "kl-add" if ch else "",
                                                                                   "kl-wadd") + "</tr>")
        last = i
    return ('<table class="kl-sbs"><colgroup><col style="width:3.6em"><col><col style="width:3.6em"><col></colgroup>'
            '<tr><th></th><th>before the pass</th><th></th><th>after the pass</th></tr>' + "".join(out) + "</table>")


def ir_diff_html(before: str, after: str, context: int | None = None) -> str:
    """Static diff of two IR texts: deleted lines red with '-', added lines green with '+'."""
    diff = D.ir_diff(before, after)
    n_add = sum(t == "add" for t, _ in diff)
    n_del = sum(t == "del" for t, _ in diff)
    head = f'<p><span class="kl-ok">+{n_add}</span> <span class="kl-bad">-{n_del}</span> lines</p>'
    return page(head + diff_block(before, after, context))


def source_html(source_lines, first: int, last: int, selected=()) -> str:
    """Kernel source lines first..last (1-based file line numbers), `selected` ones highlighted."""
    nums = list(range(first, last + 1))
    lines = [source_lines[n - 1] if 0 < n <= len(source_lines) else "" for n in nums]
    sel = set(selected)
    return code_block(lines, ["kl-sel" if n in sel else "" for n in nums], numbers=nums, plain=True)


# --------------------------------------------------------------------------- layouts


def warp_color(w: int) -> str:
    return PALETTE[w % len(PALETTE)]


WINDOW = (32, 32)  # rows x columns of a tile drawn cell by cell, labelled (about 1000 x 720 px)


def layout_period(layout_text, shape) -> tuple:
    """Per dimension, after how many elements the layout's thread pattern repeats (its footprint: elements per
    thread x lanes x warps along that dimension, at most the tile): beyond it the same threads hold the next
    registers."""
    lay = LM.as_layout(layout_text)
    return tuple(min(info.cta_extent, info.size) or info.size for info in lay.dims_info(tuple(shape)))


def _drawing_shape(shape):
    """(rows, cols) of the drawing: 2-D tiles as they are, 1-D tiles in rows of 32 elements."""
    if len(shape) == 1:
        cols = shape[0] if shape[0] <= 32 else 32
        return -(-shape[0] // cols), cols
    return shape


def layout_overview_svg(g, shape, window_rows, window_cols, origin=(0, 0), max_px=(560, 160)) -> str:
    """The whole tile small, one colour per warp (runs of a warp merged into one rectangle), with the drawn
    window outlined: where the labelled cells below sit in a tile too big to label."""
    rows, cols = _drawing_shape(shape)
    px = max(1.0, min(8.0, max_px[0] / cols, max_px[1] / rows))
    w, h = cols * px, rows * px

    def pos(idx):
        return divmod(idx[0], cols) if len(shape) == 1 else (idx[0], idx[1])

    warp_at = {pos(idx): wl[0] for idx, wl in g["elements"].items()}
    out = [f'<svg class="kl-overview" viewBox="0 0 {w + 2:.0f} {h + 2:.0f}" width="{w + 2:.0f}" height="{h + 2:.0f}" '
           f'role="img"><title>the whole {"x".join(map(str, shape))} tile, one colour per warp; the outlined part '
           f'is drawn below</title>']
    for r in range(rows):
        c = 0
        while c < cols:
            wr = warp_at.get((r, c))
            e = c + 1
            while e < cols and warp_at.get((r, e)) == wr:
                e += 1
            if wr is not None:
                out.append(f'<rect x="{1 + c * px:.1f}" y="{1 + r * px:.1f}" width="{(e - c) * px:.1f}" '
                           f'height="{px:.1f}" fill="{warp_color(wr)}" fill-opacity=".6"/>')
            c = e
    r0, c0 = origin
    out.append(f'<rect class="kl-window" x="{1 + c0 * px:.1f}" y="{1 + r0 * px:.1f}" width="{window_cols * px:.1f}" '
               f'height="{window_rows * px:.1f}" fill="none" stroke="currentColor" stroke-width="1.5"/></svg>')
    return "".join(out)


def layout_svg(layout_text, shape, num_warps: int, vec: int | None = None, elem_bytes: int = 4,
               max_labels: int = 2048, max_cells: int | None = None, title: str | None = None,
               origin=(0, 0), window=WINDOW) -> str:
    """SVG grid of a tile: each element colored by the warp of its representative copy and labeled
    `t<lane>` / `r<register>`; elements with copies in other threads hatched (hover lists them all);
    with `vec`, each thread's vectorized access outlined. A legend follows the grid.

    A tile bigger than `window` (rows x columns of the drawing; 1-D tiles are drawn in rows of 32) is drawn
    legibly in part — the window at `origin` (first row, first column), every cell labelled — under a small
    overview of the whole tile with the window outlined, and a note of where the pattern repeats."""
    g = D.layout_grid(layout_text, shape, num_warps, vec=vec, elem_bytes=elem_bytes)
    shape = tuple(shape)
    uid = next(_IDS)
    if len(shape) not in (1, 2):
        return f'<p class="kl-dim">layout view supports 1-D and 2-D tiles (got shape {shape})</p>'
    all_rows, all_cols = _drawing_shape(shape)
    win_rows, win_cols = window
    if max_cells is not None:  # the old knob: as many whole rows as fit
        win_rows = min(win_rows, max(1, max_cells // max(all_cols, 1)))
    win_rows, win_cols = min(win_rows, all_rows), min(win_cols, all_cols)
    r0 = max(0, min(origin[0], all_rows - win_rows))
    c0 = max(0, min(origin[1], all_cols - win_cols))

    def pos(idx):  # position in the window (may fall outside it)
        r, c = divmod(idx[0], all_cols) if len(shape) == 1 else (idx[0], idx[1])
        return r - r0, c - c0

    rows, cols = win_rows, win_cols
    labels = rows * cols <= max_labels
    cw, ch = (30, 22) if labels else (12, 10)
    left, top = 40, 18
    width, height = left + cols * cw + 4, top + rows * ch + 4
    sc = f"klg{uid}"
    warp_css = "".join(f".{sc} .w{w}{{fill:{warp_color(w)}}}" for w in range(num_warps))
    if not labels:  # colours only: the lane as the shade of its warp's colour, so each thread's cells still show
        warp_css += "".join(f".{sc} rect.c.q{k}{{fill-opacity:{0.2 + 0.75 * k / 31:.2f}}}" for k in range(32))
    out = [f'<svg class="{sc} kl-grid" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'style="{"max-width:none" if labels else "max-width:100%;height:auto"}" role="img" font-size="8">',
           f'<style>.{sc} rect.c,.{sc} rect.h{{width:{cw}px;height:{ch}px}}'
           f'.{sc} rect.h,.{sc} text{{pointer-events:none}}'
           f'.{sc} rect.c{{fill-opacity:.55;stroke:currentColor;stroke-opacity:.2}}'
           f'.{sc} text{{fill:currentColor;text-anchor:middle}}.{sc} text.r{{fill-opacity:.7}}'
           f'.{sc} text.a{{fill-opacity:.6}}{warp_css}</style>',
           f'<defs><pattern id="klh{uid}" width="5" height="5" patternUnits="userSpaceOnUse" '
           f'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="5" stroke="currentColor" '
           f'stroke-opacity=".45" stroke-width="1.5"/></pattern></defs>']
    if title:
        out.append(f"<title>{esc(title)}</title>")
    step = 8 if cols > 16 else 1
    for c in range(0, cols, step):
        out.append(f'<text class="a" x="{left + c * cw + cw // 2}" y="{top - 5}">{c0 + c}</text>')
    rstep = 1 if rows <= 40 else 8
    for r in range(0, rows, rstep):
        lab = r0 + r if len(shape) == 2 else (r0 + r) * all_cols
        out.append(f'<text class="a" x="{left - 4}" y="{top + r * ch + ch // 2 + 3}" style="text-anchor:end">'
                   f'{lab}</text>')
    # one group per row (its y in the transform): the cells' rects (size from the stylesheet) with their tooltip,
    # then the row's lane labels and register labels as one <text> each, a <tspan> per cell (small markup: a
    # real tile's window is 1024 cells)
    row_rects = [[] for _ in range(rows)]
    row_lanes = [[] for _ in range(rows)]
    row_regs = [[] for _ in range(rows)]
    for idx, (w, lane, reg) in sorted(g["elements"].items()):
        r, c = pos(idx)
        if not (0 <= r < rows and 0 <= c < cols):
            continue
        x = left + c * cw
        holders = g["copies"][idx]
        tip = f"[{','.join(map(str, idx))}] warp {w} lane {lane} reg {reg}"
        if len(holders) > 1:
            tip += f"; {len(holders)} copies: " + " ".join(f"w{a}/t{b}/r{c_}" for a, b, c_, _ in holders[:16])
            tip += " …" if len(holders) > 16 else ""
        tip = f"<title>{esc(tip)}</title>" if labels else ""  # big tiles: no per-cell tooltips (size)
        row_rects[r].append(f'<rect class="c w{w}{"" if labels else f" q{lane % 32}"}" x="{x}">{tip}</rect>')
        if len(holders) > 1:
            row_rects[r].append(f'<rect class="h" x="{x}" fill="url(#klh{uid})"/>')
        if labels:
            row_lanes[r].append(f'<tspan x="{x + cw // 2}">t{lane}</tspan>')
            row_regs[r].append(f'<tspan x="{x + cw // 2}">r{reg}</tspan>')
    for r in range(rows):
        if row_rects[r]:
            out.append(f'<g transform="translate(0,{top + r * ch})">{"".join(row_rects[r])}'
                       + (f'<text y="9">{"".join(row_lanes[r])}</text><text class="r" y="18">{"".join(row_regs[r])}'
                          "</text>" if row_lanes[r] else "") + "</g>")
    acc = g["access"]
    if acc and acc["vec"] > 1:
        v = acc["vec"]
        regs_of = {}
        for idx, w, lane, reg, rep in g["holders"]:
            if rep:
                regs_of.setdefault((w, lane, reg // v), []).append(pos(idx))
        for cells in regs_of.values():
            rs = [p[0] for p in cells]
            cs = [p[1] for p in cells]
            if (max(rs) - min(rs) + 1) * (max(cs) - min(cs) + 1) != len(cells):
                continue  # wrapped around a row of the drawing
            if min(rs) < 0 or min(cs) < 0 or max(rs) >= rows or max(cs) >= cols:
                continue  # not (wholly) in the window
            out.append(f'<rect x="{left + min(cs) * cw + 1}" y="{top + min(rs) * ch + 1}" '
                       f'width="{(max(cs) - min(cs) + 1) * cw - 2}" height="{(max(rs) - min(rs) + 1) * ch - 2}" '
                       f'fill="none" stroke="currentColor" stroke-width="1.4" rx="2"/>')
    out.append("</svg>")
    head = ""
    if rows < all_rows or cols < all_cols:
        period = layout_period(layout_text, shape)
        where = (f"rows {r0}–{r0 + rows - 1} of {all_rows}" if len(shape) == 2 or rows < all_rows else "") + \
            (f", columns {c0}–{c0 + cols - 1} of {all_cols}" if cols < all_cols else "")
        elems = f"elements {r0 * all_cols}–{(r0 + rows) * all_cols - 1} of {shape[0]}" if len(shape) == 1 else where
        head = (f'<p class="kl-note">showing {esc(elems.lstrip(", "))} ({rows * cols} of {all_rows * all_cols} '
                f'elements); each thread\'s pattern repeats every {" x ".join(map(str, period))} elements</p>'
                + '<div class="kl-overview-box" style="margin:.2em 0 .5em 40px">'
                + layout_overview_svg(g, shape, rows, cols, (r0, c0)) + "</div>")
    # labelled cells keep their size (legible): a window wider than the output scrolls sideways, not shrinks
    grid = f'<div class="kl-grid-box" style="overflow-x:auto">{"".join(out)}</div>' if labels else "".join(out)
    return head + grid + _layout_legend(g, uid, num_warps, vec, labels)


def _layout_legend(g, uid, num_warps, vec, labels: bool = True) -> str:
    items = []
    for w in range(num_warps):
        items.append(f'<span style="display:inline-block;margin-right:10px"><svg width="14" height="12">'
                     f'<rect width="14" height="12" fill="{warp_color(w)}" fill-opacity=".55"/></svg> warp {w}</span>')
    if g["replication"] > 1:
        items.append(f'<span style="display:inline-block;margin-right:10px"><svg width="14" height="12"><defs>'
                     f'<pattern id="klhl{uid}" width="5" height="5" patternUnits="userSpaceOnUse" '
                     f'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="5" stroke="currentColor" '
                     f'stroke-opacity=".45" stroke-width="1.5"/></pattern></defs><rect width="14" height="12" '
                     f'fill="url(#klhl{uid})" stroke="currentColor" stroke-opacity=".3"/></svg> '
                     f'replicated: up to {g["replication"]} threads hold a copy (color = representative)</span>')
    acc = g["access"]
    if acc and acc["vec"] > 1:
        items.append(f'<span style="display:inline-block;margin-right:10px"><svg width="14" height="12">'
                     f'<rect x="1" y="1" width="12" height="10" fill="none" stroke="currentColor" '
                     f'stroke-width="1.4" rx="2"/></svg> one {acc["bytes_per_access"]}-byte access '
                     f'({acc["vec"]} elements)</span>')
    items.append('<span class="kl-dim">labels: t = lane, r = register</span>' if labels else
                 '<span class="kl-dim">colour: warp; shade: lane (lane 0 lightest, lane 31 darkest)</span>')
    return '<div style="margin:.3em 0">' + "".join(items) + "</div>"


def layout_info_html(value: dict, num_warps: int, access: dict | None = None, role: str | None = None) -> str:
    """A table explaining a layout: sizes per thread / lanes / warps / order, registers, replication,
    and for a load/store its vector width and coalescing. `role` is the value's part in a tt.dot
    (`data.dot_roles`): an #mma value is said to feed a dot's A fragment only when a dot reads it as its A."""
    Blocked, Mma, Slice = LM.Blocked, LM.Mma, LM.Slice

    lay = LM.parse_layout(value["layout"])
    g = D.layout_grid(lay, value["shape"], num_warps)
    rows = [("value", f'{value["name"]} = {value["op"]}'), ("type", value["type"]), ("layout", value["layout"])]
    base = lay
    while isinstance(base, Slice):
        base = base.parent
    if isinstance(base, Blocked):
        rows += [("sizePerThread", list(base.spt)), ("threadsPerWarp", list(base.tpw)),
                 ("warpsPerCTA", list(base.wpc)), ("order (fastest first)", list(base.order))]
    if isinstance(base, Mma):
        rows += [("warpsPerCTA (M, N)", list(base.warps)),
                 ("mma fragment", "each warp owns 16-row x 8-column tiles; in a tile, lane t holds rows t/4 and "
                                  "t/4 + 8, columns 2·(t mod 4) and 2·(t mod 4) + 1, in 4 registers (r, r+1 on the "
                                  "first row, r+2, r+3 eight rows down)")]
    if role:
        rows.append(("in a dot", role))
    if isinstance(base, Mma) and role and role.startswith("A operand"):
        rows.append(("as a dot operand", "the wgmma / mma.sync A fragment reads these registers as they are (no "
                                         "shuffle); B comes from shared memory"))
    elif isinstance(base, Mma) and role and role.startswith(("accumulator", "result")):
        rows.append(("as the accumulator", "the tensor cores add into these registers in place: the dot's result "
                                           "has the accumulator's layout"))
    if isinstance(lay, Slice):
        rows.append(("slice", f"dimension {lay.dim} of the parent removed (reduced)"))
    if len(value["shape"]) in (1, 2):
        rows.append(("pattern repeats every", " x ".join(map(str, layout_period(lay, value["shape"])))
                     + " elements"))
    rows += [("registers per thread", g["registers"]),
             ("copies per element", g["replication"]),
             ("source line", value.get("line"))]
    if value.get("defined_by"):
        rows.append(("made by pass", value["defined_by"]))
    if access:
        c = access["coalescing"]
        verdict = ('<span class="kl-ok">coalesced</span>' if c["coalesced"]
                   else f'<span class="kl-warn">{c["efficiency"]:.0%} of fetched bytes used</span>')
        rows += [(f"{access['op']} vector width", f'{c["vec"]} × {c["elem_bytes"]} B = {c["bytes_per_access"]} B'),
                 ("lanes along the fastest dim", c["lanes_along_fast"]),
                 ("sectors per warp access", f'{c["sectors"]:.1f} (ideal {c["ideal_sectors"]:.1f})'),
                 ("consecutive lanes → consecutive addresses", "yes" if c["consecutive_lanes"] else "no")]
        body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
        body += f"<tr><th>coalescing</th><td>{verdict}</td></tr>"
    else:
        body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="kl-t">{body}</table>'


def layout_html(compiled, value: str | None = None) -> str:
    """Static layout view of one tensor value of the GPU IR (default: the first load's result)."""
    snap = _trace(compiled).snapshot("gpu")
    if snap is None:
        return page('<p class="kl-dim">no GPU IR: call compiled.build_gpu() (works without a GPU)</p>')
    values = D.tensor_values(snap)
    if not values:
        return page('<p class="kl-dim">no tensor values with layouts</p>')
    nw = getattr(compiled, "num_warps", None) or D.num_warps_of(snap)
    v = pick_value(values, value)
    acc = next((a for a in D.accesses(snap, nw) if a["name"] == v["name"]), None)
    svg = layout_svg(v["layout"], v["shape"], nw, vec=acc["vec"] if acc else None,
                     elem_bytes=v["elem_bytes"], title=f'{v["name"]}: {v["type"]}')
    role = D.dot_roles(snap).get(v["name"])
    return page(f'<h4>{esc(v["name"])} : {esc(v["type"])}</h4>' + layout_info_html(v, nw, acc, role) + svg)


def pick_value(values: list, value: str | None):
    if value is not None:
        want = value if value.startswith("%") else "%" + value
        for v in values:
            if v["name"] == want:
                return v
        raise KeyError(f"no tensor value {want} in the GPU IR; known: {', '.join(v['name'] for v in values)}")
    return next((v for v in values if v["op"] == "tt.load"), values[0])


# --------------------------------------------------------------------------- shared memory


def _fmt_bytes(n: int) -> str:
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


def smem_svg(plan, total: int, limit: int, barriers=(), points: int | None = None, highlight=None) -> str:
    """Memory map: program points across, byte offsets down; one rectangle per buffer over its live
    range; barriers as dashed vertical lines; a bar comparing the total with the device limit."""
    plan = list(plan)
    barriers = list(barriers)
    pts = [b["live"][1] for b in plan] + [b.get("point", b) if isinstance(b, dict) else b for b in barriers]
    n = max([points or 0] + [p + 1 for p in pts]) or 1
    W, H, left, top = 960, 240, 64, 14  # drawn at 960 px (text at its size), narrower where the output is
    plot_w, plot_h = W - left - 12, H - top - 56
    span = max(total, 1)

    def xp(p):
        return left + plot_w * p / n

    def yp(off):
        return top + plot_h * off / span

    out = [f'<svg class="kl-smem-map" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
           f'style="max-width:100%;height:auto" font-size="10" role="img">',
           f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="currentColor" '
           f'stroke-opacity=".35"/>']
    for off in sorted({0, total}):
        out.append(f'<text x="{left - 4}" y="{yp(off) + 3}" text-anchor="end" fill="currentColor" '
                   f'fill-opacity=".7">{_fmt_bytes(off)}</text>')
    for p in sorted({0, n - 1}):
        out.append(f'<text x="{xp(p + 0.5)}" y="{top + plot_h + 12}" text-anchor="middle" fill="currentColor" '
                   f'fill-opacity=".7">{p}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h + 24}" text-anchor="middle" fill="currentColor" '
               f'fill-opacity=".7">program point (op number)</text>')
    for k, b in enumerate(plan):
        x0, x1 = xp(b["live"][0]), xp(b["live"][1] + 1)
        w = max(x1 - x0, 6)
        y0, h = yp(b["offset"]), max(yp(b["offset"] + b["size"]) - yp(b["offset"]), 2)
        strong = highlight == k
        tip = (f'{b["op"]} (source {D.where(b.get("line"), b.get("file"))}): {b["size"]} B at offset {b["offset"]}, '
               f'live '
               f'{b["live"][0]}..{b["live"][1]}; {b.get("reason", "")}')
        out.append(f'<g><title>{esc(tip)}</title><rect x="{x0}" y="{y0}" width="{w}" height="{h}" '
                   f'fill="{PALETTE[k % len(PALETTE)]}" fill-opacity="{".8" if strong else ".55"}" '
                   f'stroke="currentColor" stroke-width="{2 if strong else 0.6}"/></g>')
        for s in range(1, b.get("stages") or 0):  # a pipelined buffer: one band per stage
            ys = yp(b["offset"] + s * b.get("stage_bytes", 0))
            out.append(f'<line x1="{x0}" y1="{ys}" x2="{x0 + w}" y2="{ys}" stroke="currentColor" '
                       f'stroke-opacity=".6" stroke-dasharray="2,2"/>')
        if h >= 12 and w >= 14:  # the buffer's number inside it; names are in the legend under the chart
            out.append(f'<text class="kl-buf" x="{x0 + w / 2}" y="{y0 + min(h, 24) / 2 + 4}" text-anchor="middle" '
                       f'fill="currentColor">{k}</text>')
    for b in barriers:  # no text on the chart (neighbouring barriers would collide): a tick, a tooltip, the legend
        p = b["point"] if isinstance(b, dict) else b
        x = xp(p)
        reason = b.get("reason", "barrier") if isinstance(b, dict) else "barrier"
        out.append(f'<g><title>bar.sync before op {p}: {esc(reason)}</title><line x1="{x}" y1="{top - 4}" x2="{x}" '
                   f'y2="{top + plot_h}" stroke="currentColor" stroke-dasharray="3,2" stroke-width="1.2"/>'
                   f'<path d="M{x - 3},{top - 6} L{x + 3},{top - 6} L{x},{top - 1} Z" fill="currentColor"/></g>')
    # usage bar: total vs device limit
    by = H - 22
    frac = min(total / limit, 1.0) if limit else 0
    color = PALETTE[3] if total > limit else PALETTE[2]
    out.append(f'<rect x="{left}" y="{by}" width="{plot_w}" height="8" fill="none" stroke="currentColor" '
               f'stroke-opacity=".4"/><rect x="{left}" y="{by}" width="{max(plot_w * frac, 1 if total else 0)}" '
               f'height="8" fill="{color}"/><text x="{left - 4}" y="{by + 8}" text-anchor="end" '
               f'fill="currentColor">used</text><text x="{left}" y="{by + 20}" fill="currentColor">'
               f'{_fmt_bytes(total)} of {_fmt_bytes(limit)} ({total / limit:.1%})'
               f'{" — over the limit!" if total > limit else ""}</text>' if limit else "")
    if not plan:
        out.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2}" text-anchor="middle" '
                   f'fill="currentColor" fill-opacity=".7">no shared memory</text>')
    out.append("</svg>")
    return "".join(out)


def smem_legend(plan, barriers=(), highlight=None) -> str:
    """The chart's key, one line per buffer (number, colour, op, size, stages, source line) and one for the
    barriers: names live here, not on the chart, so they never collide."""
    items = []
    for k, b in enumerate(plan):
        stages = f' · {b["stages"]} stage{"s" if b["stages"] != 1 else ""}' if b.get("stages") else ""
        strong = ' style="font-weight:600"' if highlight == k else ""
        items.append(f'<div class="kl-key"{strong}><svg width="14" height="12"><rect width="14" height="12" '
                     f'fill="{PALETTE[k % len(PALETTE)]}" fill-opacity=".7"/></svg> {k}: {esc(b["op"])} '
                     f'{_fmt_bytes(b["size"])}{stages} '
                     f'<span class="kl-dim">({esc(D.where(b.get("line"), b.get("file")))})</span></div>')
    if barriers:
        items.append(f'<div class="kl-key"><svg width="14" height="12"><line x1="7" y1="0" x2="7" y2="12" '
                     f'stroke="currentColor" stroke-dasharray="3,2" stroke-width="1.2"/></svg> '
                     f'{len(barriers)} barrier(s) between shared-memory ops</div>')
    return '<div class="kl-legend" style="margin:.2em 0 .6em 64px">' + "".join(items) + "</div>"


def ptx_barriers(ptx: str | None) -> list[str]:
    """The CTA barrier instructions of a PTX text (bar.sync, barrier.sync, bar.arrive, bar.red, ...; not the
    mbarrier ops of a pipeline), one string per instruction."""
    if not ptx:
        return []
    return re.findall(r"^\s*(?:@!?%\w+\s+)?((?:bar|barrier)\.[\w.]+)", ptx, re.M)


def _stages(b: dict) -> str:
    # non-breaking spaces: "3 × 8192 B" on one line of the table, not "B" alone on the next
    return f'{b["stages"]}\u00a0×\u00a0{b.get("stage_bytes", 0)}\u00a0B' if b.get("stages") else "—"


def smem_table(m: dict) -> str:
    rows = ["<tr><th>#</th><th>op</th><th>line</th><th>offset</th><th>size</th><th>stages</th><th>live</th>"
            "<th>reason</th><th>swizzle</th><th>bank conflicts</th></tr>"]
    for k, b in enumerate(m["buffers"]):
        bank = b.get("bank") or {}
        if bank.get("ways"):
            cls = "kl-ok" if bank["ways"] == 1 else "kl-warn"
            detail = "; ".join(f'{ph}: {v["ways"]}-way' for ph, v in bank["phases"].items())
            bk = f'<span class="{cls}">{bank["ways"]}-way</span> <span class="kl-dim">({esc(detail)})</span>'
        else:
            bk = f'<span class="kl-dim">{esc(bank.get("note", "—"))}</span>'
        line = f'{os.path.basename(b["file"])} {b.get("line")}' if b.get("file") else b.get("line")
        rows.append(f'<tr><td class="kl-r">{k}</td><td>{esc(b["op"])}</td><td class="kl-r">{esc(line)}</td>'
                    f'<td class="kl-r">{b["offset"]}</td><td class="kl-r">{b["size"]}</td>'
                    f'<td class="kl-r">{esc(_stages(b))}</td>'
                    f'<td>{b["live"][0]}..{b["live"][1]}</td><td>{esc(b.get("reason", ""))}</td>'
                    f'<td>{esc(b.get("swizzle", "—"))}</td><td>{bk}</td></tr>')
    out = ('<table class="kl-t">' + "".join(rows) + "</table>" if m["buffers"]
           else '<p class="kl-dim">this kernel uses no shared memory</p>')
    if m["barriers"]:
        out += "<h4>barriers</h4><ul>" + "".join(
            f'<li>before op {b["point"]} (IR line {b["ir_line"] + 1}, '
            f'source {esc(D.where(b["line"], b.get("file")))}): '
            f'{esc(b["reason"])}</li>' for b in m["barriers"]) + "</ul>"
    else:
        out += '<p class="kl-dim">no barriers inserted between shared-memory ops</p>'
    return out


def smem_headline(compiled, m: dict) -> str:
    """"shared memory: 48 KiB in 3 buffer(s), 4 barrier(s) in the PTX (3 between shared-memory ops, 1 from
    reductions and layout conversions)": the barrier count is the PTX's, where the kernel has been built."""
    ptx = (getattr(compiled, "asm", {}) or {}).get("ptx")
    placed = len(m["barriers"])
    if ptx is None:
        bars = f"{placed} barrier(s) between shared-memory ops"
    else:
        n = len(ptx_barriers(ptx))
        kinds = ", ".join(sorted(set(ptx_barriers(ptx))))
        rest = n - placed
        why = [f"{placed} between shared-memory ops"] if placed else []
        if rest > 0:
            why.append(f"{rest} from reductions and layout conversions in lowering")
        bars = f"{n} barrier(s) in the PTX" + (f" ({kinds}: {', '.join(why)})" if n else "")
    return f'<h4>shared memory: {_fmt_bytes(m["total"])} in {len(m["buffers"])} buffer(s), {bars}</h4>'


def smem_html(compiled, limit: int = D.SMEM_LIMIT_SM90, highlight=None, swizzles: bool = True) -> str:
    """Headline, memory map and its legend, buffer table; with `swizzles`, every pipelined buffer's encoding
    (the live view shows the selected buffer's instead)."""
    m = D.smem_map(_trace(compiled), limit=limit, num_warps=getattr(compiled, "num_warps", None))
    if not m["available"]:
        return page(f'<p class="kl-dim">{esc(m["note"])}</p>')
    return page(smem_headline(compiled, m)
                + smem_svg(m["buffers"], m["total"], m["limit"], m["barriers"], m["points"], highlight)
                + smem_legend(m["buffers"], m["barriers"], highlight)
                + smem_table(m) + '<p class="kl-dim">Bank model: 32 banks × 4 B, one register per warp access, '
                'elements at their row-major index; N-way = N shared-memory wavefronts.</p>'
                + ("".join(stage_encoding_html(b) for b in m["buffers"] if b["op"] == "ttg.local_alloc")
                   if swizzles else ""))


def stage_encoding_html(b: dict) -> str:
    """A pipelined buffer's encoding: where the 16-byte chunks of its first 8 rows land (bank groups)."""
    if not b.get("encoding"):
        return ""
    grid = D.swizzle_grid(b["encoding"])
    how = (f'{grid["swizzle"]}-byte swizzle: chunk c of row r is stored at c XOR (r mod 8)' if grid["swizzle"]
           else f'rows padded by {grid["pad"]} bytes: each row starts one bank group further')
    return (f'<h4>buffer at {esc(D.where(b.get("line"), b.get("file")))}: {esc(how)}</h4>' + swizzle_svg(grid)
            + '<p class="kl-dim">Cell = a 16-byte chunk (8 halves) of a row; colour and number = the group of 4 banks '
            'it lands in. A column is what the tensor cores read at once (8 rows of one chunk): 8 different groups '
            'means no bank conflict.</p>')


def swizzle_svg(grid: dict) -> str:
    cw, ch, left, top = 34, 20, 54, 18
    n_rows, n_cols = len(grid["rows"]), grid["chunks"]
    w, h = left + n_cols * cw + 8, top + n_rows * ch + 8
    out = [f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-size="10" role="img">']
    for c in range(n_cols):
        out.append(f'<text x="{left + c * cw + cw / 2}" y="{top - 5}" text-anchor="middle" fill="currentColor" '
                   f'fill-opacity=".7">c{c}</text>')
    for r, row in enumerate(grid["rows"]):
        y = top + r * ch
        out.append(f'<text x="{left - 6}" y="{y + ch / 2 + 4}" text-anchor="end" fill="currentColor" '
                   f'fill-opacity=".7">row {r}</text>')
        for c, g in enumerate(row):
            x = left + c * cw
            out.append(f'<g><title>row {r}, chunk {c}: bank group {g} (banks {4 * g}-{4 * g + 3})</title>'
                       f'<rect x="{x}" y="{y}" width="{cw - 2}" height="{ch - 2}" fill="{PALETTE[g % len(PALETTE)]}" '
                       f'fill-opacity=".6"/><text x="{x + cw / 2 - 1}" y="{y + ch / 2 + 3}" text-anchor="middle" '
                       f'fill="currentColor">{g}</text></g>')
    out.append("</svg>")
    return "".join(out)


# --------------------------------------------------------------------------- code


def report_html(summary: dict) -> str:
    occ = summary["occupancy"]
    spills = summary["spills"] or 0
    rows = [("registers / thread", summary["regs"]),
            ("spills (bytes)", f'<span class="{"kl-bad" if spills else "kl-ok"}">{spills}</span>'),
            ("shared memory / block", _fmt_bytes(summary["shared"] or 0)),
            ("local memory", summary["local"]), ("warps / block", summary["num_warps"]),
            ("PTX lines", summary["ptx_lines"]), ("LLVM IR lines", summary["llir_lines"]),
            ("occupancy (estimate)", f'{occ["warps_per_sm"]} warps/SM = {occ["occupancy"]:.0%} '
                                     f'({occ["blocks_per_sm"]} blocks; limited by {", ".join(occ["limiter"])})'),
            ("blocks/SM by resource", ", ".join(f"{k}: {v}" for k, v in occ["limits"].items()))]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v if isinstance(v, str) and v.startswith('<') else esc(v)}</td></tr>"
                   for k, v in rows)
    note = ('<p class="kl-dim">Occupancy model (sm_90): 65536 registers/SM allocated per warp in units of 256, '
            '228 KiB shared/SM with 1 KiB reserved per block, at most 64 warps and 32 blocks per SM.</p>')
    log = summary.get("log") or ""
    return (f'<table class="kl-t">{body}</table>{note}'
            + (f'<details><summary>{esc(summary.get("compiler") or "ptxas")} log</summary>'
               f'{code_block(log.splitlines(), plain=True)}</details>' if log else ""))


def code_html(compiled, summary: dict | None = None, max_lines: int = 4000, full: bool = False,
              head_lines: int = 200) -> str:
    """Resource report and occupancy, then the head of the PTX; `full` puts all of PTX, SASS and LLVM IR in
    collapsible sections instead (the LLVM IR alone is megabytes on a real kernel)."""
    s = summary or D.code_summary(compiled)
    asm = getattr(compiled, "asm", {}) or {}
    if not s["built"]:
        return page('<p class="kl-dim">no GPU code yet: call compiled.build_gpu() (works without a GPU)</p>')
    parts = [f"<h4>{esc(s['kernel'])}: generated code</h4>", report_html(s)]
    codes = (("PTX", asm.get("ptx"), "no PTX"), ("SASS", s["sass"], s["sass_reason"]),
             ("LLVM IR", asm.get("llir"), "no LLVM IR"))
    for name, text, why in codes if full else codes[:1]:
        if not text:
            parts.append(f'<p><b>{name}</b>: <span class="kl-dim">{esc(why)}</span></p>')
            continue
        lines = text.splitlines()
        if full:
            parts.append(f"<details><summary>{name} ({len(lines)} lines)</summary>"
                         f"{listing(lines, max_lines=max_lines)}</details>")
        else:
            parts.append(f"<details open><summary>{name} (first {min(head_lines, len(lines))} of {len(lines)} "
                         f"lines)</summary>{listing(lines[:head_lines])}</details>")
    if not full:
        parts.append(f'<p class="kl-dim">The whole PTX, the SASS and the LLVM IR: {esc(LIVE_NOTE)}.</p>')
    return page("".join(parts))
