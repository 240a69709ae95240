"""The graph view: the dataflow of the IR after any tile or GPU pass, folded (graph_model) and drawn by
graphviz (graph.py), in a zoomable, pannable box with a legend and a side panel that shows a clicked node's
source line and its op's full text.

The interaction is plain HTML with inline event handlers (no script element, no CDN, no server): buttons and
ctrl+wheel zoom, drag pans, a click fills the side panel from hidden per-node details. It works in a live
ipywidgets HTML pane and in a trusted notebook's HTML output; a sanitized (untrusted) output still shows the
picture. Which pass and whether address arithmetic is folded are the live view's dropdown and toggle.
"""
from __future__ import annotations

import itertools
import linecache

import ipywidgets as W

from . import data as D
from . import graph as G
from . import html as H
from .fallback import WithStaticCopy
from .graph_model import CLASSES, COLORS, build_graph, main_loop

_IDS = itertools.count()
_STAGES = ("tile", "gpu")
_CLASS_TEXT = {c: t for c, t, _ in CLASSES}

CSS = """
.kl-graph .kl-gbar{display:flex;flex-wrap:wrap;align-items:center;gap:4px 10px;margin:4px 0}
.kl-graph .kl-gbar button{font:inherit;padding:1px 8px;border:1px solid rgba(127,127,127,.5);border-radius:3px;
 background:transparent;color:inherit;cursor:pointer;min-width:2.2em}
.kl-graph .kl-gz{display:inline-block;min-width:3.2em;text-align:center;font-variant-numeric:tabular-nums}
.kl-graph .kl-legend{display:flex;flex-wrap:wrap;gap:2px 12px;font-size:12px;margin:2px 0 6px}
.kl-graph .kl-sw{display:inline-block;width:12px;height:12px;border:1.5px solid;border-radius:3px;
 vertical-align:-2px;margin-right:4px}
.kl-graph{width:100%;min-width:0;max-width:100%;box-sizing:border-box}
.kl-graphview .widget-html,.kl-graphview .widget-html-content{min-width:0;width:100%;height:auto;
 line-height:normal;overflow:visible;white-space:normal}
.kl-graph .kl-gbody{display:flex;gap:8px;align-items:stretch;width:100%;min-width:0}
.kl-graph .kl-gvpw{position:relative;flex:1 1 0;width:0;min-width:0}
.kl-graph .kl-gvp{width:100%;box-sizing:border-box;height:700px;overflow:auto;border:1px solid rgba(127,127,127,.3);
 border-radius:3px;cursor:grab}
.kl-graph .kl-gmini{position:absolute;right:16px;bottom:16px;border:1px solid rgba(127,127,127,.6);border-radius:3px;
 background:var(--jp-layout-color1,#fff);opacity:.93;cursor:pointer;overflow:hidden;
 box-shadow:0 1px 4px rgba(0,0,0,.25)}
.kl-graph .kl-gmini svg{display:block;width:100%;height:100%;pointer-events:none}
.kl-graph .kl-gmr{position:absolute;border:2px solid #ff8c00;background:rgba(255,140,0,.12);pointer-events:none;
 box-sizing:border-box}
.kl-graph .kl-gvp svg{display:block;margin:0 auto}
.kl-graph .kl-gvp svg text{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace !important}
.kl-graph .kl-gvp g.node text{stroke:currentColor;stroke-width:.35px;paint-order:stroke}
.kl-graph .kl-gvp g.node text:first-of-type{font-weight:bold}
.kl-graph .kl-gside{flex:0 0 280px;max-width:280px;height:700px;overflow:auto;box-sizing:border-box;
 border:1px solid rgba(127,127,127,.3);border-radius:3px;padding:6px 8px;font-size:12px}
.kl-graph .kl-gside pre{white-space:pre-wrap;word-break:break-all;margin:2px 0 6px;font-size:11.5px;
 font-family:var(--jp-code-font-family,ui-monospace,Menlo,monospace)}
.kl-graph .kl-gside .kl-src{border-left:3px solid rgba(255,140,0,.8);padding-left:6px}
.kl-graph g.node{cursor:pointer}
.kl-graph g.node.kl-on>path,.kl-graph g.node.kl-on>polygon{stroke-width:3.5;stroke:#ff8c00}
"""

# The zoom: the SVG keeps its viewBox, its CSS size is the graph's size times the zoom, and the box scrolls.
_JS_DEFS = ("var Z=function(R,z){z=Math.max(0.1,Math.min(4,z));var s=R.querySelector('.kl-gvp svg');if(!s)return;"
            "s.style.width=R.dataset.w*z+'px';s.style.height=R.dataset.h*z+'px';s.style.maxWidth='none';"
            "s.style.minWidth='0';R.dataset.zoom=z;var t=R.querySelector('.kl-gz');"
            "if(t)t.textContent=Math.round(z*100)+'%';if(R._klm)R._klm();};"
            "var C=function(R){var s=R.querySelector('.kl-gvp svg');"
            "return s?s.getBoundingClientRect().width/R.dataset.w:1;};")
_JS_CLICK = (_JS_DEFS + "var R=this,t=event.target,b=t.closest('[data-kz]');"
             "if(b){var v=R.querySelector('.kl-gvp'),k=b.dataset.kz,z=C(R);"
             "z=k=='in'?z*1.25:k=='out'?z/1.25:k=='fit'?Math.min((v.clientWidth-6)/R.dataset.w,"
             "(v.clientHeight-6)/R.dataset.h):k=='map'?(R._klmap&&R._klmap(),z):k=='loop'?(R._klfocus&&R._klfocus(),0):1;"
             "if(z)Z(R,z);return;}"
             "if(R.dataset.moved=='1'){R.dataset.moved='0';return;}"
             "var n=t.closest('g.node');if(!n)return;"
             "R.querySelectorAll('g.node.kl-on').forEach(function(e){e.classList.remove('kl-on');});"
             "n.classList.add('kl-on');var d=R.querySelector('[data-kn=\"'+n.id+'\"]'),"
             "p=R.querySelector('.kl-gside');if(d&&p){p.innerHTML=d.innerHTML;p.scrollTop=0;}")
_JS_WHEEL = (_JS_DEFS + "if(!(event.ctrlKey||event.metaKey))return;event.preventDefault();"
             "var v=this,R=v.closest('.kl-graph'),r=v.getBoundingClientRect(),mx=event.clientX-r.left,"
             "my=event.clientY-r.top,z0=C(R),x=(v.scrollLeft+mx)/z0,y=(v.scrollTop+my)/z0;"
             "Z(R,z0*(event.deltaY<0?1.15:1/1.15));var z1=C(R);v.scrollLeft=x*z1-mx;v.scrollTop=y*z1-my;")
# Runs once the view is in the page (an image's load event: no script element, so it works in an ipywidgets HTML
# pane and a trusted output; a sanitized output keeps the CSS-sized picture): when the viewport has a size,
# zoom so the main loop fills its width (70-100 %) and scroll it into the middle, and build the overview
# (a text-less copy of the drawing with the visible part outlined; click or drag it to move there).
_JS_INIT = (_JS_DEFS + "var R=this.closest('.kl-graph'),v=R.querySelector('.kl-gvp'),s=v.querySelector('svg');"
            "if(!s||R._klm)return;"
            "R._klfocus=function(){var f=R.dataset.focus&&R.querySelector('[id=\"'+R.dataset.focus+'\"]');"
            "if(!f)return false;Z(R,1);var a=s.getBoundingClientRect(),b=f.getBoundingClientRect(),"
            "x=b.left-a.left,y=b.top-a.top,w=b.width,W=v.clientWidth-16,"
            "z=Math.max(0.7,Math.min(1,W/w));Z(R,z);"
            "v.scrollLeft=w*z>W?x*z-8:(x+w/2)*z-v.clientWidth/2;v.scrollTop=y*z-8;return true;};"
            "var m=document.createElement('div');m.className='kl-gmini';var c=s.cloneNode(true);"
            "c.removeAttribute('style');c.querySelectorAll('text,[id]').forEach(function(e){"
            "if(e.tagName=='text')e.remove();else e.removeAttribute('id');});"
            "c.querySelectorAll('g.node').forEach(function(e){e.setAttribute('class','kl-mn');});"
            "var r=document.createElement('div');r.className='kl-gmr';m.appendChild(c);m.appendChild(r);"
            "var gw=+R.dataset.w,gh=+R.dataset.h,k=Math.min(200/gw,150/gh);"
            "m.style.width=gw*k+'px';m.style.height=gh*k+'px';v.parentNode.appendChild(m);"
            "R._klm=function(){var sw=s.getBoundingClientRect().width,z=sw/gw,"
            "big=sw>v.clientWidth+2||gh*z>v.clientHeight+2;m.style.display=big&&!R._klhide?'':'none';"
            "r.style.left=v.scrollLeft/z*k+'px';r.style.top=v.scrollTop/z*k+'px';"
            "r.style.width=Math.min(gw,v.clientWidth/z)*k+'px';r.style.height=Math.min(gh,v.clientHeight/z)*k+'px';};"
            "R._klmap=function(){R._klhide=!R._klhide;R._klm();};"
            "var go=function(e){var b=m.getBoundingClientRect(),z=s.getBoundingClientRect().width/gw;"
            "v.scrollLeft=(e.clientX-b.left)/k*z-v.clientWidth/2;v.scrollTop=(e.clientY-b.top)/k*z-v.clientHeight/2;};"
            "m.addEventListener('mousedown',function(e){e.preventDefault();e.stopPropagation();go(e);"
            "var mv=function(e){go(e);},up=function(){window.removeEventListener('mousemove',mv);"
            "window.removeEventListener('mouseup',up);};window.addEventListener('mousemove',mv);"
            "window.addEventListener('mouseup',up);});m.addEventListener('click',function(e){e.stopPropagation();});"
            "v.addEventListener('scroll',R._klm);"
            "var start=function(){if(v.clientWidth<50)return false;R._klfocus();R._klm();return true;};"
            "if(!start()&&window.ResizeObserver){var o=new ResizeObserver(function(){if(start())o.disconnect();});"
            "o.observe(v);}")
# a 1x1 GIF: its load event runs _JS_INIT
_GIF = "data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"

_JS_DRAG = ("if(event.button!==0)return;var v=this,R=v.closest('.kl-graph'),x0=event.clientX,y0=event.clientY,"
            "l0=v.scrollLeft,t0=v.scrollTop;R.dataset.moved='0';"
            "var mv=function(e){var dx=e.clientX-x0,dy=e.clientY-y0;if(Math.abs(dx)+Math.abs(dy)>4)"
            "R.dataset.moved='1';v.scrollLeft=l0-dx;v.scrollTop=t0-dy;};"
            "var up=function(){window.removeEventListener('mousemove',mv);window.removeEventListener('mouseup',up);};"
            "window.addEventListener('mousemove',mv);window.addEventListener('mouseup',up);event.preventDefault();")


def graph_passes(trace) -> list[tuple[int, str]]:
    """(pass index, dropdown text) for every tile and GPU pass whose IR the trace can draw: a pass that
    changed the IR keeps a snapshot; an unchanged one shows the snapshot before it."""
    out = []
    for i, p in enumerate(trace.passes):
        if p.stage in _STAGES and snapshot_at(trace, i)[0] is not None:
            stage = "GPU IR" if p.stage == "gpu" else "tile IR"
            out.append((i, f"{'●' if p.changed else '○'} {i:>2} {p.name} ({stage})"
                           + ("" if p.changed or i == 0 else " — unchanged")))
    return out


def snapshot_at(trace, i: int):
    """(Snapshot, the record holding it) of the IR after pass `i`: its own or, for an unchanged pass, the
    latest one before it; (None, None) when the trace kept none (an old disk-cache entry)."""
    for k in range(i, -1, -1):
        p = trace.passes[k]
        if p.stage not in _STAGES:
            return None, None
        if p.snapshot is not None:
            return p.snapshot, p
        if p.changed and k > 0:
            return None, None  # a changed pass without its snapshot: drawing an older one would mislead
    return None, None


def default_pass(trace) -> int | None:
    """The graph opens on the final tile IR (loads -> dot -> store, before the GPU's pipelining), else the
    last pass it can draw."""
    passes = graph_passes(trace)
    if not passes:
        return None
    tile = [i for i, _ in passes if trace.passes[i].stage == "tile"]
    return tile[-1] if tile else passes[-1][0]


def _source_lines(compiled, snap) -> list:
    lines = list(getattr(compiled, "source_lines", []) or [])
    if not lines and snap.functions:
        lines = [x.rstrip("\n") for x in linecache.getlines(snap.functions[0].source_file)]
    return lines


def _details(g, snap, rec, source_lines, prefix: str, gpu: bool) -> str:
    """The hidden per-node blocks the side panel shows: op, source line, the op's full text, types."""
    ir = D.ir_lines_with_locs(rec)
    files = list(dict.fromkeys(f.source_file for f in snap.functions if f.source_file))
    ops = snap.ops
    layouts = dict(snap.layouts)
    out = []

    def src(line, file=None):
        if not line:
            return '<div class="kl-dim">no source line</div>'
        if file:  # an @jit helper from another module, inlined: its own file's line
            text = linecache.getline(file, line).strip()
            return (f'<div>source line <b>{line}</b> of {H.esc(file.rsplit("/", 1)[-1])}:</div>'
                    f'<pre class="kl-src">{H.esc_text(text) or "(not available)"}</pre>')
        text = source_lines[line - 1].strip() if 0 < line <= len(source_lines) else ""
        for f in files if not text else ():  # a line of an inlined @jit function (the compile keeps only the kernel's)
            text = linecache.getline(f, line).strip()
            if text:
                break
        return (f'<div>source line <b>{line}</b>:</div><pre class="kl-src">{H.esc_text(text) or "(not available)"}'
                "</pre>")

    def ir_text(i):
        op = ops[i]
        return ir[op.ir_line][0].strip() if op.ir_line < len(ir) else op.name

    def file_of(n):
        k = n.op if n.op is not None else (int(n.id[1:]) if n.kind == "expr" and n.id[1:].isdigit() else None)
        return getattr(ops[k], "file", None) if k is not None and k < len(ops) else None

    for n in g.nodes.values():
        parts = []
        if n.kind == "expr":
            parts.append(f"<b>{H.esc(n.lines[0])}</b> <span class='kl-dim'>— {len(n.folded)} ops folded</span>")
            parts.append(src(n.line, file_of(n)))
            parts.append("<div>the expression:</div><pre>" + H.esc_text("\n".join(n.detail)) + "</pre>")
            parts.append("<div>folded ops (IR):</div><pre>"
                         + H.esc_text("\n".join(ir_text(i) for i in n.folded)) + "</pre>")
        else:
            head = ops[n.op].name if n.op is not None else n.lines[0]
            parts.append(f"<b>{H.esc(head)}</b> <span class='kl-dim'>— {H.esc(_CLASS_TEXT.get(n.cls, n.cls))}</span>")
            parts.append(src(n.line, file_of(n)))
            if n.op is not None:
                parts.append(f"<div>the op (after {H.esc(rec.name)}):</div><pre>{H.esc_text(ir_text(n.op))}</pre>")
                op = ops[n.op]
                if op.defined_by:
                    parts.append(f"<div class='kl-dim'>made by: {H.esc(op.defined_by)}</div>")
                if n.folded:
                    parts.append("<div>folded into it:</div><pre>"
                                 + H.esc_text("\n".join(n.detail + [ir_text(i) for i in n.folded if i != n.op]))
                                 + "</pre>")
            else:
                parts.append("<pre>" + H.esc_text("\n".join(x for x in n.detail if x)) + "</pre>")
            for name in n.values:
                v = snap.value_by_name.get(name)
                if v is None:
                    continue
                t = f"{name} : {v.type}"
                if gpu and v.alias and v.alias in layouts:
                    t += f"\n  {v.alias} = {layouts[v.alias]}"
                parts.append(f"<pre>{H.esc_text(t)}</pre>")
        out.append(f'<div data-kn="{H.esc(prefix + n.id)}">{"".join(parts)}</div>')
    return "".join(out)


def _legend(g) -> str:
    present = {n.cls for n in g.nodes.values()}
    items = [f'<span><span class="kl-sw" style="background:{col}38;border-color:{col}"></span>{H.esc(text)}</span>'
             for cls, text, col in CLASSES if cls in present]
    if any(e.kind == "back" for e in g.edges):
        items.append(f'<span><b style="color:{COLORS["control"]}">⇠ dashed</b> loop-carried value '
                     "(next iteration)</span>")
    if g.clusters:
        items.append("<span>dashed box: loop, if or reduce region</span>")
    if any(n.kind == "expr" for n in g.nodes.values()):
        items.append("<span>grey boxes: the address / mask arithmetic of the op below them, folded</span>")
    return '<div class="kl-legend">' + "".join(items) + "</div>"


def graph_page(compiled, index: int | None = None, fold: bool = True, source_lines=None) -> str:
    """The graph view's HTML for the IR after pass `index` (default: `default_pass`): toolbar, legend, the
    zoomable SVG, the side panel and the per-node details; the install hint and the DOT text without `dot`."""
    trace = getattr(compiled, "trace", compiled)
    if index is None:
        index = default_pass(trace)
    snap, rec = snapshot_at(trace, index) if index is not None else (None, None)
    if snap is None:
        return H.page('<p class="kl-dim">no IR snapshot to draw for this pass (a trace from an older disk cache '
                      "keeps only the final tile and GPU IR)</p>")
    gpu = rec.stage == "gpu"
    g = build_graph(snap, fold=fold, gpu=gpu)
    uid = f"kg{next(_IDS)}_"
    dot = G.graph_dot(g, uid)
    p = trace.passes[index]
    n_ops = len(snap.ops)
    n_folded = sum(1 for o in g.owner.values() if o is not None and not o.startswith(("o", "p")))
    same = "" if rec is p else f"; unchanged, the IR after {H.esc(rec.name)}"
    title = (f"<h4>dataflow after {index}. {H.esc(p.name)} ({'GPU IR, with layouts' if p.stage == 'gpu' else 'tile IR'}"
             f"{same})"
             f" <span class='kl-dim' style='font-weight:normal'>— {len(g.nodes)} boxes for {n_ops} ops"
             f"{f'; {n_folded} folded into address and mask boxes' if fold else '; unfolded'}</span></h4>")
    svg = G.render_graph_svg(dot)
    if svg is None:
        return H.page(title + f'<p class="kl-warn">{H.esc(G.INSTALL_HINT)}</p>'
                      + H.code_block(dot.splitlines(), plain=True))
    w, h = G.svg_size(svg)
    # opens as wide as the box, between 75 % and 100 % (text 10-13 px; "fit" shows the whole graph): a wider
    # graph scrolls and drags
    svg = svg.replace("<svg", f'<svg style="width:100%;max-width:{w:.0f}px;min-width:{0.75 * w:.0f}px;'
                              f'height:auto"', 1)
    lines = source_lines if source_lines is not None else _source_lines(compiled, snap)
    focus = main_loop(g, snap)
    bar = ('<div class="kl-gbar"><button data-kz="out" title="zoom out">−</button><span class="kl-gz">auto</span>'
           '<button data-kz="in" title="zoom in">+</button><button data-kz="fit" title="whole graph">fit</button>'
           '<button data-kz="1" title="actual size">100%</button>'
           + ('<button data-kz="loop" title="zoom to the main loop">loop</button>' if focus else "")
           + '<button data-kz="map" title="show or hide the overview">overview</button>'
           '<span class="kl-dim">ctrl+wheel zooms · drag pans · click a box for its source line and op · '
           'the overview (bottom right) moves the view</span></div>')
    focus_attr = f' data-focus="{uid}{focus}"' if focus else ""
    body = (f'<div class="kl-graph" data-w="{w:.0f}" data-h="{h:.0f}"{focus_attr} onclick="{H.esc(_JS_CLICK)}">'
            f"<style>{CSS}</style>{title}{bar}{_legend(g)}"
            f'<div class="kl-gbody"><div class="kl-gvpw"><div class="kl-gvp" onwheel="{H.esc(_JS_WHEEL)}" '
            f'onmousedown="{H.esc(_JS_DRAG)}">{svg}</div>'
            f'<img alt="" src="{_GIF}" style="display:none" onload="{H.esc(_JS_INIT)}"></div>'
            '<div class="kl-gside"><span class="kl-dim">click a box to see its source line, the op\'s full text '
            "and its types</span></div></div>"
            f'<div hidden style="display:none">{_details(g, snap, rec, lines, uid, gpu)}</div></div>')
    return H.page(body)


class GraphView(WithStaticCopy, W.VBox):
    """Pick a pass (tile or GPU IR) and see its dataflow; fold or unfold the address arithmetic."""

    title = "graph"
    needs_gpu = True  # lists the GPU passes too: built on first show (no GPU needed)

    def __init__(self, compiled, **kwargs):
        super().__init__(**kwargs)
        from .stages import ensure_gpu_stages

        ensure_gpu_stages(compiled)
        self.compiled = compiled
        self.trace = compiled.trace
        self.options = graph_passes(self.trace)
        self._cache: dict = {}
        start = default_pass(self.trace)
        self.pass_select = W.Dropdown(options=[(t, i) for i, t in self.options], value=start,
                                      layout=W.Layout(flex="1 1 auto", width="auto", min_width="0"))
        self.prev_button = W.Button(description="previous", icon="arrow-left", layout=W.Layout(width="auto"))
        self.next_button = W.Button(description="next", icon="arrow-right", layout=W.Layout(width="auto"))
        self.fold_toggle = W.ToggleButton(value=True, description="fold address arithmetic", icon="compress",
                                          tooltip="collapse the pointer and mask arithmetic into one box per access",
                                          layout=W.Layout(width="auto"))
        self.prev_button.on_click(lambda _: self.step(-1))
        self.next_button.on_click(lambda _: self.step(1))
        self.pane = W.HTML(layout=W.Layout(width="auto"))
        self.pass_select.observe(lambda _: self.refresh(), names="value")
        self.fold_toggle.observe(lambda _: self.refresh(), names="value")
        bar = W.HBox([self.prev_button, self.pass_select, self.next_button, self.fold_toggle],
                     layout=W.Layout(width="auto", flex_flow="row nowrap", align_items="center"))
        self.children = [bar, self.pane]
        self.add_class("kl-graphview")
        self.refresh()

    def step(self, delta: int):
        keys = [i for i, _ in self.options]
        if self.pass_select.value in keys:
            k = min(max(keys.index(self.pass_select.value) + delta, 0), len(keys) - 1)
            self.pass_select.value = keys[k]

    def html_for(self, index, fold) -> str:
        key = (index, fold)
        if key not in self._cache:
            self._cache[key] = graph_page(self.compiled, index, fold)
        return self._cache[key]

    def refresh(self):
        keys = [i for i, _ in self.options]
        i = self.pass_select.value
        self.prev_button.disabled = not keys or i == keys[0]
        self.next_button.disabled = not keys or i == keys[-1]
        self.pane.value = self.html_for(i, self.fold_toggle.value)

    def static_html(self) -> str:
        return self.pane.value

    def _repr_mimebundle_(self, **kwargs):
        data = dict(super()._repr_mimebundle_(**kwargs) or {})
        data["text/html"] = self.static_html()
        data.setdefault("text/plain", f"GraphView({getattr(self.compiled, 'name', '')})")
        return data
