// The linked view's front end (an anywidget module: export default { render }). Everything happens here, in the
// browser: hovering or clicking a line highlights it and the lines of every pane that came from the same source
// line, and scrolls those panes (never the page) to them; the search box marks matches in every pane and counts them
// in every stage (Python counts: most stages are not in the browser). The model's
// `data` (kernellab/viz/linked.py: linked_data) holds the source lines and, per stage, its text lines and the
// source line of each. Only the stages the panes open on come with their lines; picking another asks Python for it
// (model.send, answered by a custom message), so a %%kernel cell does not carry its 6,500-line LLVM IR.

const CSS = `
.kl-lk{font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:13px;color:var(--jp-content-font-color1,inherit)}
.kl-lk .kl-lk-bar{display:flex;flex-wrap:wrap;gap:6px 12px;align-items:center;margin:0 0 6px 0}
.kl-lk .kl-lk-bar input[type=search]{width:240px;padding:2px 6px;font:inherit;color:inherit;
 background:var(--jp-layout-color1,transparent);border:1px solid rgba(127,127,127,.5);border-radius:3px}
.kl-lk .kl-lk-bar label{display:flex;gap:4px;align-items:center;white-space:nowrap}
.kl-lk .kl-lk-status{opacity:.8;font-size:12px;min-height:17px;flex:1 1 300px}
.kl-lk .kl-lk-panes{display:flex;gap:8px;align-items:stretch;width:100%}
.kl-lk .kl-lk-pane{flex:1 1 0;min-width:0;display:flex;flex-direction:column;border:1px solid rgba(127,127,127,.35);border-radius:3px}
.kl-lk .kl-lk-pane.kl-lk-src{flex:1.3 1 0}
.kl-lk .kl-lk-head{display:flex;gap:6px;align-items:center;padding:3px 6px;border-bottom:1px solid rgba(127,127,127,.35);
 font-weight:600;white-space:nowrap;overflow:hidden;min-height:24px}
.kl-lk .kl-lk-head select{flex:1 1 auto;min-width:0;font:inherit;font-weight:400;color:inherit;
 background:var(--jp-layout-color1,transparent);border:1px solid rgba(127,127,127,.5);border-radius:3px}
.kl-lk .kl-lk-count{font-weight:400;opacity:.75;font-size:12px;flex:0 0 auto}
.kl-lk .kl-lk-note{opacity:.75;padding:3px 6px;font-style:italic;font-size:12px;border-bottom:1px solid rgba(127,127,127,.2)}
.kl-lk .kl-lk-body{overflow:auto;height:520px;font-family:var(--jp-code-font-family,ui-monospace,Menlo,monospace);
 font-size:12px;line-height:17px;tab-size:4;position:relative}
.kl-lk .kl-lk-l{white-space:pre;padding-right:8px;min-width:max-content;cursor:default;border-left:3px solid transparent}
.kl-lk .kl-lk-l[data-s]{background:var(--c)}
.kl-lk .kl-lk-n{display:inline-block;width:3.3em;text-align:right;padding-right:8px;opacity:.5;user-select:none}
.kl-lk .kl-lk-d{opacity:.4}
.kl-lk.kl-lk-focus .kl-lk-l[data-s]:not(.kl-lk-on){background:var(--cf)}
.kl-lk .kl-lk-l.kl-lk-on{background:var(--ca);border-left-color:var(--cb)}
.kl-lk .kl-lk-l.kl-lk-me{outline:1px solid var(--cb);outline-offset:-1px}
.kl-lk .kl-lk-l.kl-lk-hide{display:none}
.kl-lk mark{background:#ffd54f;color:#111;border-radius:2px;padding:0}
.kl-lk .kl-lk-cur mark{background:#ff9800;outline:1px solid #e65100}
.kl-lk .kl-lk-pin{font-size:11px;padding:0 5px;border-radius:8px;border:1px solid rgba(127,127,127,.6);margin-left:4px}
`;

function hue(line) { return Math.round(line * 137.508) % 360; }  // as linked.py's color()
function col(line, a) { return `hsla(${hue(line)},75%,55%,${a})`; }
function esc(s) { return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); }
function lineStyle(s) {
  return s == null ? "" : ` data-s="${s}" style="--c:${col(s, 0.22)};--cf:${col(s, 0.08)};--ca:${col(s, 0.55)};--cb:${col(s, 1)}"`;
}

function matcher(q) {
  if (!q) return null;
  try { return new RegExp(q, "gi"); } catch (e) {
    return new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "gi");
  }
}

// A line's HTML: the text with its location part dimmed and the search matches marked.
function body(text, dim, rx) {
  const parts = dim ? [[text.slice(0, dim[0]), false], [text.slice(dim[0], dim[1]), true], [text.slice(dim[1]), false]]
                    : [[text, false]];
  let hit = false;
  const html = parts.map(([t, d]) => {
    let h;
    if (rx && t) {
      let out = "", last = 0;
      rx.lastIndex = 0;
      for (let m; (m = rx.exec(t)) !== null;) {
        if (m[0] === "") { rx.lastIndex++; continue; }
        out += esc(t.slice(last, m.index)) + "<mark>" + esc(m[0]) + "</mark>";
        last = m.index + m[0].length; hit = true;
      }
      h = out + esc(t.slice(last));
    } else h = esc(t);
    return d ? `<span class="kl-lk-d">${h}</span>` : h;
  }).join("");
  return [html, hit];
}

function render({ model, el }) {
  const data = model.get("data");
  const stages = Object.fromEntries(data.stages.map(s => [s.id, s]));
  const root = document.createElement("div");
  root.className = "kl-lk";
  const style = document.createElement("style");
  style.textContent = CSS;
  root.appendChild(style);

  const bar = document.createElement("div");
  bar.className = "kl-lk-bar";
  const search = document.createElement("input");
  search.type = "search";
  search.placeholder = "search all panes (regex)";
  search.title = "marks matches in every pane; Enter: the next match";
  search.className = "kl-lk-search";
  const onlyLabel = document.createElement("label");
  const only = document.createElement("input");
  only.type = "checkbox";
  only.className = "kl-lk-only";
  onlyLabel.append(only, "only matching lines");
  const status = document.createElement("div");
  status.className = "kl-lk-status";
  bar.append(search, onlyLabel, status);
  root.appendChild(bar);

  const panesEl = document.createElement("div");
  panesEl.className = "kl-lk-panes";
  root.appendChild(panesEl);

  // pane = {el, bodyEl, countEl, noteEl, kind: "source" | "stage", stage, lines: [div], bySrc: Map, hits}
  const panes = [];
  function makePane(kind, stageId) {
    const p = { kind, stage: stageId, lines: [], bySrc: new Map(), hits: 0 };
    p.el = document.createElement("div");
    p.el.className = "kl-lk-pane" + (kind === "source" ? " kl-lk-src" : "");
    const head = document.createElement("div");
    head.className = "kl-lk-head";
    if (kind === "source") head.append(`${data.kernel}: source`);
    else {
      const sel = document.createElement("select");
      sel.className = "kl-lk-stage";
      let group = null, og = null;
      for (const s of data.stages) {
        if (s.group !== group) { og = document.createElement("optgroup"); og.label = group = s.group; sel.appendChild(og); }
        const o = document.createElement("option");
        o.value = s.id; o.textContent = s.title;
        og.appendChild(o);
      }
      p.select = sel;
      sel.value = stageId;
      sel.addEventListener("change", () => { p.stage = sel.value; want(p.stage); fill(p); refresh(); });
      head.appendChild(sel);
    }
    p.countEl = document.createElement("span");
    p.countEl.className = "kl-lk-count";
    head.appendChild(p.countEl);
    p.noteEl = document.createElement("div");
    p.noteEl.className = "kl-lk-note";
    p.bodyEl = document.createElement("div");
    p.bodyEl.className = "kl-lk-body";
    p.bodyEl.addEventListener("mouseover", e => { const l = e.target.closest(".kl-lk-l"); if (l) hover(p, l); });
    p.bodyEl.addEventListener("mouseleave", () => { if (pinned == null) select(null, null); });
    p.bodyEl.addEventListener("click", e => { const l = e.target.closest(".kl-lk-l"); if (l) click(p, l); });
    p.el.append(head, p.noteEl, p.bodyEl);
    panesEl.appendChild(p.el);
    panes.push(p);
    fill(p);
    return p;
  }

  let rx = null;
  function fill(p) {
    let texts, srcs, dims, nums;
    if (p.kind === "source") {
      // a helper from another file: a heading row, then its lines (key OTHER * k + line, shown as `line`)
      // a line no stage has code from (blank, a signature's continuation) is not coloured: nothing came from it
      texts = data.source.map(x => x.text); srcs = data.source.map(x => x.used === false ? null : x.n);
      nums = data.source.map(x => x.head ? "" : (x.line ?? x.n)); dims = null;
      p.noteEl.style.display = "none";
    } else {
      const s = stages[p.stage];
      const loading = s.lines == null;
      texts = loading ? [] : s.lines; srcs = s.src || []; dims = s.dim; nums = null;
      const note = loading ? `loading ${s.n ?? ""} lines…` : s.note;
      p.noteEl.textContent = note || "";
      p.noteEl.style.display = note ? "" : "none";
    }
    let hits = 0;
    const html = texts.map((t, i) => {
      const [b, hit] = body(t, dims && dims[i], rx);
      if (hit) hits++;
      const n = nums ? nums[i] : i + 1;
      return `<div class="kl-lk-l${hit ? " kl-lk-hit" : ""}" data-i="${i}"${lineStyle(srcs[i])}><span class="kl-lk-n">${n}</span>${b}</div>`;
    }).join("");
    p.bodyEl.innerHTML = html;
    p.lines = Array.from(p.bodyEl.children);
    p.bySrc = new Map();
    p.lines.forEach((l, i) => {
      const s = srcs[i];
      if (s != null) { if (!p.bySrc.has(s)) p.bySrc.set(s, []); p.bySrc.get(s).push(l); }
    });
    p.hits = hits;
    p.texts = texts;
    applyOnly(p);
    p.on = [];
    counts(p);
  }

  function applyOnly(p) {
    const on = rx && only.checked;
    for (const l of p.lines) l.classList.toggle("kl-lk-hide", !!on && !l.classList.contains("kl-lk-hit")
                                                               && !l.classList.contains("kl-lk-on"));
  }

  function counts(p) {
    const parts = [];
    if (current != null) parts.push(`${(p.bySrc.get(current) || []).length} from this line`);
    if (rx) parts.push(`${p.hits} match${p.hits === 1 ? "" : "es"}`);
    p.countEl.textContent = parts.length ? "· " + parts.join(" · ") : "";
  }

  let current = null, pinned = null, origin = null;
  function srcOf(l) { return l.dataset.s != null ? Number(l.dataset.s) : null; }

  function select(line, from, fromEl, noScroll) {
    current = line;
    if (origin) origin.classList.remove("kl-lk-me");
    root.classList.toggle("kl-lk-focus", line != null);
    for (const p of panes) {
      for (const l of p.on) l.classList.remove("kl-lk-on", "kl-lk-me");
      p.on = line == null ? [] : (p.bySrc.get(line) || []);
      for (const l of p.on) l.classList.add("kl-lk-on");
      if (rx && only.checked) applyOnly(p);
      counts(p);
      if (p !== from && p.on.length && !noScroll) scrollTo(p, p.on[0]);
    }
    if (fromEl) fromEl.classList.add("kl-lk-me");
    origin = fromEl || null;
    say();
  }

  // scroll the pane itself (not the page: scrollIntoView would move the notebook too) when `l` is out of sight
  function scrollTo(p, l, always) {
    const b = p.bodyEl, top = l.offsetTop, h = l.offsetHeight;
    if (always || top < b.scrollTop || top + h > b.scrollTop + b.clientHeight) {
      b.scrollTop = Math.max(0, top - b.clientHeight / 3);
    }
  }

  function hover(p, l) {
    if (pinned != null) return;
    const s = srcOf(l);
    if (s !== current) select(s, p, l);
  }

  function click(p, l) {
    const s = srcOf(l);
    if (pinned != null && s === pinned) { pinned = null; select(s, p, l); return; }
    pinned = s;
    select(s, p, l);
  }

  function say() {
    const parts = [];
    if (current != null) {
      const src = data.source.find(x => x.n === current);
      const text = src ? src.text.trim() : "";
      const where = src && src.label ? src.label : `line ${current}`;
      parts.push(`${where}${text ? ": " + (text.length > 60 ? text.slice(0, 59) + "…" : text) : ""}`);
      if (pinned != null) parts.push("pinned (click it again or press Esc to release)");
    } else parts.push("hover a line to see where it went; click to pin");
    if (rx) {
      const total = panes.reduce((a, p) => a + p.hits, 0);
      parts.push(`${total} matching line${total === 1 ? "" : "s"}`);
      if (elsewhere) parts.push(elsewhere);
    }
    status.textContent = parts.join(" · ");
  }

  // search everywhere: Python counts the matching lines of every stage (most are not in the browser) and the
  // stage menus say how many each has; the status names the stages not on screen that have some
  let elsewhere = "";
  function showCounts(counts) {
    const shown = new Set(panes.filter(p => p.kind === "stage").map(p => p.stage));
    for (const p of panes) {
      if (!p.select) continue;
      for (const o of p.select.querySelectorAll("option")) {
        const n = counts ? counts[o.value] : null;
        o.textContent = stages[o.value].title + (n ? ` — ${n} matching` : "");
      }
    }
    const other = counts ? data.stages.filter(s => counts[s.id] && !shown.has(s.id)) : [];
    elsewhere = other.length ? "also in " + other.slice(0, 4).map(s => `${s.title} (${counts[s.id]})`).join(", ")
      + (other.length > 4 ? ` and ${other.length - 4} more stages (see the menus)` : "") : "";
    say();
  }

  // the search: every pane re-drawn with its matches marked, and scrolled to its first one; Enter steps each pane
  // to its next match
  let timer = null;
  function hitsOf(p) { return p.lines.filter(l => l.classList.contains("kl-lk-hit")); }
  function toMatch(step) {
    for (const p of panes) {
      const hits = hitsOf(p);
      if (!hits.length) continue;
      p.at = step ? ((p.at ?? -1) + 1) % hits.length : 0;
      for (const l of p.lines) l.classList.remove("kl-lk-cur");
      hits[p.at].classList.add("kl-lk-cur");
      scrollTo(p, hits[p.at], true);
    }
  }
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      rx = matcher(search.value);
      for (const p of panes) fill(p);
      select(current, null, null, true);
      if (rx) toMatch(false);
      if (rx) model.send({ type: "search", q: search.value }); else showCounts(null);
    }, 80);
  });
  search.addEventListener("keydown", e => { if (e.key === "Enter" && rx) { e.preventDefault(); toMatch(true); } });
  only.addEventListener("change", () => { for (const p of panes) applyOnly(p); });
  root.tabIndex = -1;
  root.addEventListener("keydown", e => {
    if (e.key === "Escape") { pinned = null; select(null, null); }
  });

  // a stage sent without its lines: ask for them once; they arrive as {type: "stage", stage}
  const asked = new Set();
  function want(id) {
    if (stages[id] && stages[id].lines == null && !asked.has(id)) { asked.add(id); model.send({ type: "stage", id }); }
  }
  function onMsg(msg) {
    if (msg && msg.type === "search") { if (msg.q === search.value) showCounts(msg.counts); return; }
    if (!msg || msg.type !== "stage" || !msg.stage) return;
    stages[msg.stage.id] = msg.stage;
    for (const p of panes) if (p.kind === "stage" && p.stage === msg.stage.id) fill(p);
    refresh();
  }
  model.on("msg:custom", onMsg);

  makePane("source", null);
  for (const id of data.panes) { want(id); makePane("stage", id); }
  function refresh() { select(current, null); }
  say();
  el.appendChild(root);
  return () => { clearTimeout(timer); model.off("msg:custom", onMsg); };
}

export default { render };
