"""The linked view: kernel source beside any stage of its compile (tile IR after each pass, GPU IR, LLVM IR, PTX,
SASS), every line coloured by the source line it came from, as Compiler Explorer does; hovering or clicking a line
highlights it and its counterparts in every pane and scrolls them into view, a search box marks matches everywhere.

The interaction runs in the browser (linked.js, an anywidget front-end module: no Python round trip, no build step,
no CDN). Without anywidget, and in a notebook reopened without its kernel, the same panes come as static HTML with
the colours (the widget's `text/html`).

The line maps come from the CompileTrace's `Positions` (tile and GPU IR from the printer, LLVM IR and PTX from
codegen's line info); the SASS map from the cubin's line table (ptxas -lineinfo), read with `nvdisasm -g` here,
since the compiler does not disassemble.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

from . import data as D
from . import html as H
from .fallback import WithStaticCopy

try:  # the live widget needs anywidget (the lab extra); the static HTML does not
    import anywidget
    import traitlets
except ImportError:  # pragma: no cover - exercised where anywidget is missing
    anywidget = None

_JS = Path(__file__).with_name("linked.js")
_GROUPS = {"frontend": "tile IR", "tile": "tile IR", "gpu": "GPU IR", "llir": "LLVM IR", "ptx": "PTX", "sass": "SASS"}


def color(line: int, alpha: float = 0.22) -> str:
    """The colour of source line `line`: hues a golden angle apart, so neighbouring lines differ (linked.js has
    the same formula)."""
    return f"hsla({round(line * 137.508) % 360},75%,55%,{alpha})"


# --------------------------------------------------------------------------- SASS with source lines

_SASS_CACHE: dict = {}
_SASS_LINE = re.compile(r'^\s*//## File "([^"]*)", line (\d+)')
_SASS_INSTR = re.compile(r"^\s*(/\*[0-9a-f]{4,}\*/)\s+")


def sass_lines(cubin: bytes | None, kernel_file: str | None = None) -> tuple[list, list, str]:
    """(SASS lines, source line per line or None, why there are none): nvdisasm -g's listing, tidied as the code
    view's (encodings and ELF directives dropped, indentation shortened), its `//## File ..., line N` comments
    turned into the per-line map. A cubin built without line info gives the SASS with an empty map. With
    `kernel_file`, a line of another file (an inlined @jit helper's module) is mapped to (file, line)."""
    if not cubin:
        return [], [], "no cubin: call compiled.build_gpu() first"
    key = (hashlib.sha256(cubin).hexdigest(), kernel_file)
    if key in _SASS_CACHE:
        return _SASS_CACHE[key]
    found = D.find_nvdisasm()
    if found is None:
        text, why = D.sass(cubin)  # cuobjdump, perhaps: the SASS without its source lines
        if text is None:
            return [], [], why
        lines = [_SASS_INSTR.sub(r"\1  ", x) for x in text.splitlines()]
        return lines, [None] * len(lines), "no source lines for SASS: nvdisasm was not found"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.cubin")
        Path(path).write_bytes(cubin)
        try:
            r = subprocess.run([found, "-c", "-g", path], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return [], [], f"nvdisasm failed: {e}"
    if r.returncode != 0:
        return [], [], f"nvdisasm failed: {(r.stderr or r.stdout).strip()}"
    lines, src, current = [], [], None
    for x in D._tidy_nvdisasm(r.stdout).splitlines():
        m = _SASS_LINE.match(x)
        if m:
            current = int(m.group(2))
            if kernel_file is not None and m.group(1) != kernel_file:
                current = (m.group(1), current)
            continue
        x = re.sub(r"\s*/\* 0x[0-9a-f]{16} \*/\s*$", "", x)
        if not x.strip():
            continue
        instr = _SASS_INSTR.match(x)
        if instr is None and not x.lstrip().startswith(("Function", ".L_", ".target")):
            continue
        lines.append(_SASS_INSTR.sub(r"\1  ", x).replace("\t\tFunction", "Function"))
        src.append(current if instr else None)
    out = (lines, src, "" if any(s is not None for s in src) else "no source lines in the cubin (built without "
                                                                     "line info)")
    _SASS_CACHE[key] = out
    return out


# --------------------------------------------------------------------------- the data the view draws


def _stage(sid, title, group, text_lines, src, dim=None, note=""):
    n = len(text_lines)
    src = list(src) if src is not None and len(src) == n else [None] * n
    dim = [list(s) if s else None for s in dim] if dim is not None and len(dim) == n else None
    return {"id": sid, "title": title, "group": group, "lines": text_lines, "src": src, "dim": dim,
            "note": note or ("" if any(s is not None for s in src) else "no source lines recorded for this stage"),
            "count": sum(s is not None for s in src)}


def linked_data(compiled, with_sass: bool = True) -> dict:
    """What the view draws, as JSON-ready data: the kernel's source lines and one entry per stage — every tile or
    GPU pass that changed the IR (and the first, and the last of each: ids "tile" and "gpu"), LLVM IR, PTX and
    SASS — with its text lines, the source line of
    each (None where none) and the character span of each line's location text (dimmed). `panes`: the stages
    the two stage panes open on."""
    trace = compiled.trace
    source_lines = _source_text(compiled)
    stages = []
    passes = list(trace.passes)
    others: dict = {}  # file of an inlined helper from another module -> its number (1, 2, ...)

    def keyed(pos):
        """Source keys per line: the line in the kernel's file; OTHER * k + line in the k-th other file."""
        files = getattr(pos, "files", ()) or ()
        if not files:
            return pos.source
        return [None if x is None else (OTHER * others.setdefault(f, len(others) + 1) + x if f else x)
                for x, f in zip(pos.source, files)]

    for i, p in enumerate(passes):
        if p.stage not in ("frontend", "tile", "gpu", "llir", "ptx"):
            continue
        last_of_stage = all(q.stage != p.stage for q in passes[i + 1:])
        if p.stage in ("tile", "gpu") and i > 0 and not p.changed and not last_of_stage:
            continue
        group = _GROUPS.get(p.stage, p.stage)
        if p.stage in ("llir", "ptx"):
            title, sid = group, p.stage
        else:
            title = f"{group} · {i}. {p.name}" + (" (final)" if last_of_stage else "")
            sid = p.stage if (p.stage in ("tile", "gpu") and last_of_stage) else f"p{i}"
        pos = p.positions
        lines = p.ir.splitlines()
        stages.append(_stage(sid, title, group, lines, keyed(pos) if pos else None, pos.loc if pos else None,
                             "" if pos else "no line info in this stage (built with line_info off, or an older "
                                            "cache entry)"))
    if with_sass and "cubin" in (getattr(compiled, "asm", {}) or {}):
        lines, src, why = sass_lines(compiled.asm["cubin"], _kernel_file(trace))
        src = [(OTHER * others.setdefault(x[0], len(others) + 1) + x[1]) if isinstance(x, tuple) else x for x in src]
        if lines:
            stages.append(_stage("sass", "SASS", "SASS", lines, src, note=why))
        else:
            stages.append(_stage("sass", "SASS", "SASS", [why], [None], note=why))
    ids = [s["id"] for s in stages]
    # the kernel's lines, and those of the @jit functions inlined into it (same file, above it perhaps)
    used = sorted({x for s in stages for x in s["src"] if x is not None and x < OTHER})
    rng = D.kernel_source_range(trace.passes[0]) if trace.passes else None
    first = min(used + ([rng[0]] if rng else [])) if used or rng else 1
    last = max(used + ([rng[1]] if rng else [])) if used or rng else len(source_lines)
    # `used`: some stage has a line from it (the view colours only those: a blank or a signature line made nothing)
    made = {x for s in stages for x in s["src"] if x is not None}
    src = [{"n": n, "text": source_lines[n - 1].rstrip("\n") if 0 < n <= len(source_lines) else "",
            "used": n in made} for n in range(first, last + 1)]
    for f, k in others.items():  # the lines of helpers from other files, under their file's name
        import linecache

        mine = sorted({x - OTHER * k for st in stages for x in st["src"] if x is not None and x // OTHER == k})
        text = linecache.getlines(f)
        src.append({"n": None, "head": True, "text": f"── {os.path.basename(f)} ({f}) ──"})
        src += [{"n": OTHER * k + n, "line": n, "label": f"{os.path.basename(f)} line {n}",
                 "used": OTHER * k + n in made,
                 "text": text[n - 1].rstrip("\n") if 0 < n <= len(text) else ""} for n in range(mine[0], mine[-1] + 1)]
    panes = [x for x in ("ptx", "sass") if x in ids]
    if len(panes) < 2:
        panes = [x for x in ("gpu", "ptx", "llir") if x in ids][:2] or ids[-2:]
    return {"kernel": getattr(compiled, "name", ""), "source": src, "stages": stages, "panes": panes}


def _kernel_file(trace) -> str | None:
    snap = trace.snapshot("tile") if trace.passes else None
    return snap.functions[0].source_file if snap is not None and snap.functions else None


def _source_text(compiled) -> list:
    """The lines of the kernel's file (or notebook cell): the kernel's own `source_lines` hold only its function,
    not the @jit helpers inlined into it."""
    return D.file_lines(compiled)


OTHER = 1_000_000  # source keys of an inlined helper's lines from another file: OTHER * (its number) + line


def lazy_data(data: dict) -> dict:
    """`data` as the widget first sends it: the text of the stages its panes open on, only the titles of the
    others (their lines come when the user picks one: linked.js asks, `LinkedView` answers). The LLVM IR alone
    is two thirds of a real kernel's data (6,500 lines), and few open it."""
    out = dict(data)
    out["stages"] = [s if s["id"] in data["panes"] else {**s, "lines": None, "src": None, "dim": None,
                                                          "n": len(s["lines"])} for s in data["stages"]]
    return out


def search_counts(data: dict, query: str) -> dict:
    """{stage id: lines matching `query`} over every stage (a regex, case-insensitive; as text if it is not
    one), for the stage menus of the linked view: "search everywhere", though most stages are not in the browser.
    The source counts as the stage "source"."""
    if not query:
        return {}
    try:
        rx = re.compile(query, re.I)
    except re.error:
        rx = re.compile(re.escape(query), re.I)
    out = {s["id"]: sum(1 for line in s["lines"] if rx.search(line)) for s in data["stages"]}
    out["source"] = sum(1 for x in data["source"] if rx.search(x["text"]))
    return out


def counterparts(data: dict, stage_id: str, source_line: int) -> list[int]:
    """The 0-based lines of stage `stage_id` that came from `source_line` (what the view highlights)."""
    st = next(s for s in data["stages"] if s["id"] == stage_id)
    return [i for i, s in enumerate(st["src"]) if s == source_line]


# --------------------------------------------------------------------------- static HTML (no JavaScript)

# scoped to the static copy (.kl-lk-static): its stylesheet stays in the page under the live view, whose lines
# carry their own numbers (a second counter would number every line twice)
STATIC_CSS = """
.kl-lk.kl-lk-static{font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:13px;color:inherit}
.kl-lk.kl-lk-static .kl-lk-panes{display:flex;gap:8px;align-items:stretch;width:100%}
.kl-lk.kl-lk-static .kl-lk-pane{flex:1 1 0;min-width:0;display:flex;flex-direction:column;
 border:1px solid rgba(127,127,127,.35);border-radius:3px}
.kl-lk.kl-lk-static .kl-lk-pane.kl-lk-src{flex:0.9 1 0}
.kl-lk.kl-lk-static .kl-lk-head{padding:3px 6px;border-bottom:1px solid rgba(127,127,127,.35);font-weight:600;
 white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.kl-lk.kl-lk-static .kl-lk-body{overflow:auto;max-height:520px;
 font-family:var(--jp-code-font-family,ui-monospace,Menlo,monospace);font-size:12px;line-height:17px;tab-size:4;
 position:relative;counter-reset:kl-n var(--n0,0)}
.kl-lk.kl-lk-static .kl-lk-body>div{white-space:pre;padding-right:8px;min-width:max-content}
.kl-lk.kl-lk-static .kl-lk-body>div::before{counter-increment:kl-n;content:counter(kl-n);display:inline-block;
 width:4.2em;text-align:right;padding-right:8px;opacity:.55;user-select:none}
.kl-lk.kl-lk-static .kl-lk-body i{font-style:normal;opacity:.45}
.kl-lk.kl-lk-static .kl-lk-body>div.h{font-weight:600;opacity:.8}
.kl-lk.kl-lk-static .kl-lk-body>div.h::before{content:"";counter-increment:none}
.kl-lk.kl-lk-static .kl-lk-note{opacity:.7;padding:4px 6px;font-style:italic}
"""


def _line_html(text, src, dim=None, reset=None) -> str:
    """One line, small: its colour is a class per source line (`s27`), its number a CSS counter (`reset`: the
    number to show, for a helper's line from another file)."""
    cls = f' class="s{src}"' if src is not None else ""
    if reset is not None:
        cls += f' style="counter-set:kl-n {reset - 1}"'
    if dim:
        s, e = dim
        body = H.esc_text(text[:s]) + f"<i>{H.esc_text(text[s:e])}</i>" + H.esc_text(text[e:])
    else:
        body = H.esc_text(text)
    return f"<div{cls}>{body}</div>"


def linked_html(data: dict, panes=None) -> str:
    """The view without JavaScript (a notebook reopened without its kernel): the source and the stage panes
    (`panes`, default PTX alone: this copy is saved into the notebook with every cell), coloured."""
    stages = {s["id"]: s for s in data["stages"]}
    if panes is None:
        panes = [x for x in ("ptx",) if x in stages] or data["panes"][:1]
    used = {x["n"] for x in data["source"] if x["n"] is not None and x.get("used", True)}
    first = data["source"][0]["n"] if data["source"] else 1
    cols = ['<div class="kl-lk-pane kl-lk-src"><div class="kl-lk-head">kernel source</div>'
            f'<div class="kl-lk-body" style="--n0:{first - 1}">'
            + "".join(f'<div class="h">{H.esc_text(x["text"])}</div>' if x.get("head") else
                      _line_html(x["text"], x["n"] if x.get("used", True) else None, reset=x.get("line"))
                      for x in data["source"]) + "</div></div>"]
    for sid in panes:
        st = stages[sid]
        if st["lines"] is None:
            continue
        used |= {x for x in st["src"] if x is not None}
        dims = st["dim"] or [None] * len(st["lines"])
        note = f'<div class="kl-lk-note">{H.esc(st["note"])}</div>' if st["note"] else ""
        cols.append(f'<div class="kl-lk-pane"><div class="kl-lk-head">{H.esc(st["title"])}</div>{note}'
                    '<div class="kl-lk-body">'
                    + "".join(_line_html(t, s, d) for t, s, d in zip(st["lines"], st["src"], dims))
                    + "</div></div>")
    colours = "".join(f".kl-lk.kl-lk-static .s{n}{{background:{color(n)}}}" for n in sorted(used))
    return (f'<div class="kl-lk kl-lk-static"><style>{STATIC_CSS}{colours}</style>'
            '<div class="kl-lk-head" style="border:0">'
            f'{H.esc(data["kernel"])}: each line coloured by the source line it came from '
            '<span style="font-weight:400;opacity:.7">(static copy: run the cell for hover, click, search and the '
            'other stages)</span>'
            f'</div><div class="kl-lk-panes">{"".join(cols)}</div></div>')


# --------------------------------------------------------------------------- the view


def _prepare(compiled):
    from .stages import ensure_gpu_stages

    ensure_gpu_stages(compiled)
    return linked_data(compiled)


if anywidget is not None:

    class LinkedView(WithStaticCopy, anywidget.AnyWidget):
        """Kernel source | two stage panes (each: any tile/GPU pass, LLVM IR, PTX or SASS), lines coloured by
        source line; hover or click a line to highlight its counterparts everywhere, search across all panes."""

        title = "linked"
        needs_gpu = True
        _esm = _JS.read_text()
        data = traitlets.Dict().tag(sync=True)

        def __init__(self, compiled, **kwargs):
            full = _prepare(compiled)
            super().__init__(data=lazy_data(full), **kwargs)
            self.compiled = compiled
            self.full_data = full
            self.on_msg(self._on_msg)

        def _on_msg(self, _widget, content, _buffers):
            """linked.js asks for a stage's lines when the user picks a stage it was not sent, and for the number
            of lines matching the search in every stage."""
            if isinstance(content, dict) and content.get("type") == "stage":
                st = next((s for s in self.full_data["stages"] if s["id"] == content.get("id")), None)
                if st is not None:
                    self.send({"type": "stage", "stage": st})
            elif isinstance(content, dict) and content.get("type") == "search":
                q = str(content.get("q", ""))
                self.send({"type": "search", "q": q, "counts": search_counts(self.full_data, q)})

        def static_html(self) -> str:
            return linked_html(self.full_data)

        def _repr_mimebundle_(self, **kwargs):
            out = super()._repr_mimebundle_(**kwargs)
            data, meta = out if isinstance(out, tuple) else (out, {})
            data = dict(data or {})
            data["text/html"] = self.static_html()  # a saved notebook reopened without its kernel shows this
            return data, meta

else:
    LinkedView = None


def linked_view(compiled):
    """The live view where anywidget is installed; else the static one (in an ipywidgets HTML when ipywidgets is
    there, so it still fits in the lab's tab; else an object with `_repr_html_`)."""
    if LinkedView is not None:
        return LinkedView(compiled)
    html = linked_html(_prepare(compiled))
    try:
        import ipywidgets as W
    except ImportError:
        return StaticHTML(html)
    box = W.HTML(value=html)
    box.title = "linked"
    box.static_html = lambda: html
    return box


linked_view.title = "linked"
linked_view.needs_gpu = True


class StaticHTML:
    """HTML shown as is (the linked view where neither anywidget nor ipywidgets is installed)."""

    title = "linked"

    def __init__(self, html: str):
        self.html = html

    def static_html(self) -> str:
        return self.html

    def _repr_html_(self) -> str:
        return self.html
