// A timeline of real spans: one row per (rank, lanes), a bar per "X" event, a tick per
// instant; the current step's events outlined (exactly those: the scene says which), a
// dashed cursor where the step starts, axis ticks, a legend, an optional α-β model row.
// A row may hold several tracks (o.track(e): compute above, communication below; o.depth:
// nested slices one level per track, as Perfetto draws them). Flows (o.flows: [[from, to]],
// a send and its receive) are arrows between their bars; o.match (a Set of ids) rings the
// events a search found. Zoom: +/− buttons or keys, ctrl+wheel at the pointer; drag to pan;
// "fit" resets; click a bar to step to it. The axis is logical steps (the default) or wall
// clock (axis.js; L toggles it for the timeline on screen; o.axis: "wall" starts there).
// draw({id, events, rows: [{label, pid, lanes} | {label, match}], colour(e), label(e),
//       current: Set(ids), starts: [time step k begins], step, legend, pick(e) -> step,
//       (label(e): a text, or several from long to short: the first that fits is drawn)
//       model: {label, bars: [{step, us, text}]}, width, height (most px for it all), note,
//       rowStarts(i): row i's own step start times (logical axis: its step k in column k),
//       track(e) | depth, flows, match, stepsNote (said under a logical axis), scroll})
// -> element
const Timeline = (() => {
  const { el } = Classroom;
  const { svg, textWidth, smallPx, maxOf, micros, fitText } = Draw;
  const MAX_DEPTH = 8;  // nested slices deeper than this share the last track
  let focus = null, focusId = null, clipId = 0;
  const views = {};  // `${id}/${mode}` -> [v0, v1]: each timeline keeps its zoom
  const modes = {};  // id -> "steps" | "wall": each timeline keeps its axis (L toggles the last drawn)

  function button(mode) {
    const b = document.getElementById("axis");
    if (b) b.textContent = mode === "wall" ? "axis: wall clock" : "axis: logical steps";
  }
  function toggleAxis() {
    if (focusId !== null) modes[focusId] = modes[focusId] === "wall" ? "steps" : "wall";
  }
  function key(k) { if (focus) focus(k); }

  // Nesting depth of each "X" event within its row (a slice inside another goes one track
  // down); instants stay on track 0 and are drawn the row's full height.
  function depths(list) {
    const out = new Map(), open = [];
    const spans = list.filter((e) => e.ph === "X").sort((a, b) => a.ts - b.ts || b.dur - a.dur);
    for (const e of spans) {
      while (open.length && open[open.length - 1] <= e.ts) open.pop();
      out.set(e.id, Math.min(open.length, MAX_DEPTH - 1));
      open.push(e.ts + e.dur);
    }
    return out;
  }

  // Row heights that fit `avail` px: a row of n tracks is n·t px, at least a label's height.
  function heights(tracks, avail, px) {
    const minRow = Math.round(px * 1.1), most = Math.round(px * 1.8);
    const total = (t) => tracks.reduce((s, n) => s + Math.max(minRow, n * t), 0);
    let lo = 4, hi = most;
    if (total(hi) <= avail) lo = hi;
    else for (let i = 0; i < 20; i++) { const mid = (lo + hi) / 2; if (total(mid) <= avail) lo = mid; else hi = mid; }
    return tracks.map((n) => Math.round(Math.max(minRow, n * lo)));
  }

  function draw(o) {
    const px = smallPx();
    const mode = modes[o.id] || (modes[o.id] = o.axis || "steps");
    focusId = o.id;
    button(mode);
    const rows = o.rows.map((r) => ({ ...r, match: r.match || ((e) => e.pid === r.pid && r.lanes.includes(e.lane)) }));
    const rowOf = o.rowOf || ((e) => rows.findIndex((r) => r.match(e)));
    const per = rows.map(() => []), where = new Map();
    let t0 = Infinity, t1 = -Infinity;
    for (const e of o.events) {
      if (!o.colour(e)) continue;
      const i = rowOf(e);
      if (i < 0) continue;
      per[i].push(e);
      where.set(e.id, i);
      if (e.ts < t0) t0 = e.ts;
      if (e.ts + (e.dur || 0) > t1) t1 = e.ts + (e.dur || 0);
    }
    const starts = o.starts || [];
    if (starts.length) { t0 = Math.min(t0, starts[0]); t1 = Math.max(t1, starts[starts.length - 1]); }
    if (!Number.isFinite(t0)) return el("p", { class: "note", text: "(no events to draw)" });
    const track = new Map();
    const tracks = per.map((list) => {
      const d = o.depth ? depths(list) : null;
      let n = 1;
      for (const e of list) {
        const t = o.track ? o.track(e) : d ? d.get(e.id) || 0 : 0;
        track.set(e.id, t);
        n = Math.max(n, t + 1);
      }
      return n;
    });
    const ax = Axis.make(mode, t0, t1, starts);
    const axes = rows.map((r, i) => Axis.row(ax, mode, t0, t1, starts, o.rowStarts && o.rowStarts(i)));
    const vkey = `${o.id}/${mode}`;
    let [v0, v1] = views[vkey] || [ax.lo, ax.hi];
    const current = o.current || new Set(), found = o.match || new Set();
    const legend = [...(o.legend || []), ["outline", "this step's events"]];
    const bar = el("div", { class: "tl-bar" });
    const note = [o.note, mode === "steps" ? o.stepsNote : ""].filter(Boolean).join(" ");
    // o.height holds the whole box: the bar (buttons, axis, legend), the rows, the axis's
    // ticks and the note — the bar and the note measured off-screen at this width — so the
    // rows shrink to what is left
    const btn = (text, title, f) => { const b = el("button", { title, text }); b.onclick = f; return b; };
    bar.append(btn("−", "zoom out (−)", () => zoomKey("-")), btn("+", "zoom in (+)", () => zoomKey("+")),
      btn("fit", "whole timeline (0)", () => zoomKey("0")),
      el("span", { class: "axis-name", text: ax.title, title: `${ax.about}; ` + (o.pick ? "click a bar to step to it; " : "") +
        "the dashed line: where this step starts; ctrl+wheel or +/− zoom, drag pans, L switches the axis" }), Draw.legend(legend));
    const noteEl = note ? el("p", { class: "note", text: note }) : null;
    const probe = el("div", { class: "tl", style: `position:absolute;visibility:hidden;left:0;top:0;width:${o.width}px` },
                     bar, ...(noteEl ? [noteEl] : []));
    document.body.append(probe);
    const around = probe.offsetHeight + (noteEl ? 8 : 0) + px * 2.2 + 4;
    probe.remove();
    const withModel = [...tracks, ...(o.model ? [1] : [])];
    const avail = o.height ? o.height - around : Infinity;
    const rowH = heights(withModel, avail, px);
    const top = [0];
    for (const h of rowH) top.push(top[top.length - 1] + h);
    const plotH = top[top.length - 1];
    const labels = [...rows.map((r) => r.label), o.model ? o.model.label : ""];
    const left = Math.ceil(Math.min(maxOf(labels, (t) => textWidth(t, px)), o.width * 0.3) + 16);
    const W = Math.max(360, Math.floor(o.width) - 2), plotW = W - left - 12;  // - 2: the border
    const H = plotH + Math.round(px * 2);
    const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "timeline" });
    const clip = `tl-clip-${++clipId}`;
    const x = (u) => left + ((u - v0) / (v1 - v0)) * plotW;
    const region = (k) => (ax.first || 0) + k - 1;  // steps axis: column of step k
    const trackY = (i, e) => {  // the y and height of event e's track in row i
      const n = tracks[i], th = (rowH[i] - 6) / n;
      return e.ph === "X" ? [top[i] + 3 + track.get(e.id) * th, Math.max(th - (n > 1 ? 1 : 0), 2)] : [top[i] + 3, rowH[i] - 6];
    };

    function bars(i) {
      const list = per[i], out = [], texts = [], ax_ = axes[i];
      const lod = list.length > 1500;  // big traces: one grey bar per crowded pixel
      let lump = null;
      const order = lod ? list : [...list].sort((a, b) => (b.dur || 0) - (a.dur || 0));
      for (const e of order) {
        const a = x(ax_.u(e.ts)), b = x(ax_.u(e.ts + (e.dur || 0)));
        if (b < left - 4 || a > left + plotW + 4) continue;
        const hl = current.has(e.id), dim = current.size && !hl ? " dim" : "", hit = found.has(e.id) ? " match" : "";
        const [y, h] = trackY(i, e);
        if (lod && b - a < 1.5 && !hl && !hit) {
          if (lump && a <= lump.b + 1 && lump.y === y) { lump.b = Math.max(lump.b, b); lump.n++; continue; }
          lump = { a, b, n: 1, y, h };
          out.push(lump);
          continue;
        }
        if (e.ph !== "X") {
          out.push(svg("line", { class: `ev${hl ? " hl" : dim}${hit}`, "data-ev": e.id, x1: a, x2: a, y1: y,
            y2: y + h, stroke: o.colour(e), "stroke-width": hl ? 5 : 3 }, undefined));
          out[out.length - 1].append(svg("title", {}, e.name));
          continue;
        }
        const r = svg("rect", { class: `ev${hl ? " hl" : dim}${hit}`, "data-ev": e.id, x: a, y,
          width: Math.max(b - a, 2), height: h, fill: o.colour(e) });
        r.append(svg("title", {}, `${e.name} — ${micros(e.dur)}`));
        out.push(r);
        if (h < px * 1.15) continue;  // a thin track: no room for text
        const va = Math.max(a, left), vb = Math.min(b, left + plotW);
        const text = [].concat(o.label ? o.label(e) : []).find((t) => t && textWidth(t, px) + 8 <= vb - va);
        if (text) texts.push({ at: va + 4, y: y + h / 2 + px * 0.35, text, w: textWidth(text, px) });
      }
      texts.sort((p, q) => p.y - q.y || p.at - q.at);
      let end = -Infinity, lastY = null;  // labels in one track never overlap: a later one that would, is left out
      const shown = [];
      for (const t of texts) {
        if (t.y !== lastY) { end = -Infinity; lastY = t.y; }
        if (t.at >= end) { shown.push(t); end = t.at + t.w + 6; }
      }
      return [out.map((b) => (b instanceof Element ? b : lumpRect(b))),
              shown.map((t) => svg("text", { x: t.at, y: t.y, "font-size": px, class: "on-bar" }, t.text))];
    }
    function lumpRect(l) {
      const r = svg("rect", { class: "lump", "data-count": l.n, x: l.a, y: l.y, width: Math.max(l.b - l.a, 1),
                              height: l.h, fill: "#888" });
      r.append(svg("title", {}, `${l.n} events: zoom in to see them`));
      return r;
    }

    // A send's arrow to its receive, from the send's time to the receive's end: those in
    // view, or (where more than 40, or a few within pixels of each other, would crowd it)
    // only the current step's.
    function flows(plot) {
      const shown = [];
      for (const [a, b] of o.flows || []) {
        const i = where.get(a.id), j = where.get(b.id);
        if (i === undefined || j === undefined) continue;
        const xa = x(axes[i].u(a.ts)), xb = x(axes[j].u(b.ts + (b.dur || 0)));
        if (Math.max(xa, xb) < left || Math.min(xa, xb) > left + plotW) continue;
        shown.push([a, b, i, j, xa, xb]);
      }
      const bins = {};  // arrows within a few pixels of each other draw one thick bar: too many
      for (const f of shown) bins[Math.round(f[4] / 6)] = (bins[Math.round(f[4] / 6)] || 0) + 1;
      const crowded = shown.length > 40 || Object.values(bins).some((n) => n > 3);
      for (const [a, b, i, j, xa, xb] of shown) {
        const hl = current.has(a.id) || current.has(b.id);
        if (crowded && !hl) continue;
        const [ya, ha] = trackY(i, a), [yb, hb] = trackY(j, b);
        plot.append(svg("line", { class: `flow${hl ? " hl-flow" : ""}`, "data-flow": `${a.id}>${b.id}`,
          x1: xa, y1: ya + ha / 2, x2: xb, y2: yb + hb / 2, stroke: hl ? "#111" : "#777",
          "stroke-width": hl ? 2.5 : 1.2, "marker-end": `url(#${clip}-arrow)` }));
      }
    }

    function paint() {
      root.replaceChildren();
      const defs = svg("defs", {});
      const cp = svg("clipPath", { id: clip });
      cp.append(svg("rect", { x: left, y: 0, width: plotW, height: plotH }));
      const mk = svg("marker", { id: `${clip}-arrow`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
                                 markerHeight: 7, orient: "auto" });
      mk.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#555" }));
      defs.append(cp, mk);
      root.append(defs);
      const plot = svg("g", { "clip-path": `url(#${clip})` }), above = svg("g", { "clip-path": `url(#${clip})` });
      rows.forEach((r, i) => {
        const y = top[i];
        const t = svg("text", { x: 6, y: y + Math.min(rowH[i], px * 1.8) / 2 + px * 0.35, "font-size": px, class: "row-label" },
                      fitText(r.label, left - 12, px));
        if (t.textContent !== r.label) t.append(svg("title", {}, r.label));
        root.append(t);
        root.append(svg("line", { x1: left, x2: W - 12, y1: y + rowH[i], y2: y + rowH[i], stroke: "#e4e4e4" }));
        const [shapes, texts] = bars(i);
        plot.append(...shapes);
        above.append(...texts);
      });
      if (o.model) paintModel(plot, above, top[rows.length] + 3, rowH[rows.length] - 6);
      flows(plot);
      const k = o.step || 0;
      if (k >= 1 && starts[k - 1] !== undefined) {
        const cx = x(mode === "steps" ? region(k) : ax.u(starts[k - 1]));
        plot.append(svg("line", { class: "cursor", x1: cx, x2: cx, y1: 0, y2: plotH,
                                  stroke: "#333", "stroke-width": 2, "stroke-dasharray": "6 4" }));
      }
      root.append(plot, above);
      root.append(svg("line", { x1: left, x2: left + plotW, y1: plotH, y2: plotH, stroke: "#999" }));
      for (const t of ax.ticks(v0, v1, plotW, px)) {
        const tx = x(t.u), w = textWidth(t.text, px);
        if (tx - w / 2 < left - 2 || tx + w / 2 > W - 2) continue;  // a label never leaves the plot
        root.append(svg("line", { x1: tx, x2: tx, y1: plotH, y2: plotH + 5, stroke: "#999" }));
        root.append(svg("text", { x: tx, y: plotH + px * 1.35, "font-size": px, "text-anchor": "middle",
                                  class: "tick" }, t.text));
      }
    }

    function paintModel(plot, above, y, h) {
      root.append(svg("text", { x: 6, y: y - 3 + rowH[rows.length] / 2 + px * 0.35, "font-size": px, class: "row-label" },
                      o.model.label));
      for (const m of o.model.bars) {
        if (starts[m.step - 1] === undefined) continue;
        const a = mode === "steps" ? x(region(m.step)) : x(ax.u(starts[m.step - 1]));
        const b = mode === "steps" ? x(region(m.step) + 1) : x(ax.u(starts[m.step - 1] + m.us));
        plot.append(svg("rect", { class: `model${m.step === o.step ? " hl" : ""}`, "data-model-step": m.step,
          x: a, y, width: Math.max(b - a, 2), height: h, fill: "#e8e8e8", stroke: "#666",
          "stroke-dasharray": "4 3" }));
        const w = textWidth(m.text, px), va = Math.max(a, left), vb = Math.min(b, left + plotW);
        if (w + 8 <= vb - va) above.append(svg("text", { x: va + 4, y: y + h / 2 + px * 0.35, "font-size": px,
                                                         class: "on-bar" }, m.text));
      }
    }

    function setView(a, b) {
      const span = Math.min(Math.max(b - a, (ax.hi - ax.lo) / 5000, 1e-3), (ax.hi - ax.lo) * 1.02);
      a = Math.min(Math.max(a, ax.lo - (ax.hi - ax.lo) * 0.01), ax.hi + (ax.hi - ax.lo) * 0.01 - span);
      [v0, v1] = [a, a + span];
      views[vkey] = [v0, v1];
      paint();
    }
    const zoomAt = (u, f) => setView(u - (u - v0) * f, u + (v1 - u) * f);
    function zoomKey(k) {
      if (k === "0") setView(ax.lo, ax.hi);
      else zoomAt((v0 + v1) / 2, k === "-" ? 2 : 0.5);
    }
    focus = zoomKey;
    let drag = null;
    const uAt = (ev) => v0 + ((ev.clientX - root.getBoundingClientRect().left - left) / plotW) * (v1 - v0);
    root.addEventListener("pointerdown", (ev) => { drag = { x: ev.clientX, v0, v1, moved: false }; });
    root.addEventListener("pointermove", (ev) => {
      if (!drag || !(ev.buttons & 1)) return;
      const dx = ev.clientX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (drag.moved) setView(drag.v0 - (dx / plotW) * (drag.v1 - drag.v0), drag.v1 - (dx / plotW) * (drag.v1 - drag.v0));
    });
    root.addEventListener("pointerup", (ev) => {
      const d = drag;
      drag = null;
      if (!d || d.moved) return;
      const t = ev.target;
      if (t.classList.contains("lump")) { const u = uAt(ev); zoomAt(u, 0.1); return; }
      const id = t.getAttribute && t.getAttribute("data-ev");
      const e = id !== null && o.events.find((q) => q.id === Number(id));
      const k = e && o.pick ? o.pick(e) : null;
      if (k !== null && k !== undefined) Classroom.go(k);
    });
    root.addEventListener("wheel", (ev) => {
      if (!(ev.ctrlKey || ev.metaKey || ev.shiftKey)) return;  // plain wheel scrolls the page
      ev.preventDefault();
      zoomAt(uAt(ev), ev.deltaY > 0 ? 1.25 : 0.8);
    }, { passive: false });
    paint();

    const body = el("div", { class: "tl-body" }, root);
    if (o.scroll && o.height && H > avail + px * 2) body.style.maxHeight = `${Math.max(px * 6, avail + px * 2)}px`;
    const box = el("div", { class: "tl", "data-timeline": o.id, "data-axis": mode,
                            "data-flows": (o.flows || []).length }, bar, body);
    if (noteEl) box.append(noteEl);
    return box;
  }

  return { draw, toggleAxis, key };
})();
