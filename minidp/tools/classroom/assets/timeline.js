// A timeline of real spans: one row per (rank, lanes), a bar per "X" event, a tick per
// instant; the current step's events outlined (exactly those: the scene says which), a
// dashed cursor where the step starts, axis ticks, a legend, an optional α-β model row.
// Zoom: +/− buttons or keys, ctrl+wheel at the pointer; drag to pan; "fit" resets; click a
// bar to step to it. The axis is logical steps (the default) or wall clock (axis.js; L
// toggles it for the timeline on screen; o.axis: "wall" starts there instead).
// draw({id, events, rows: [{label, pid, lanes} | {label, match}], colour(e), label(e),
//       current: Set(ids), starts: [time step k begins], step, legend, pick(e) -> step,
//       (label(e): a text, or several from long to short: the first that fits is drawn)
//       model: {label, bars: [{step, us, text}]}, width, height (most px for it all), note,
//       rowStarts(i): row i's own step start times (logical axis: its step k in column k)})
// -> element
const Timeline = (() => {
  const { el } = Classroom;
  const { svg, textWidth, smallPx, maxOf, micros } = Draw;
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

  function draw(o) {
    const px = smallPx();
    const mode = modes[o.id] || (modes[o.id] = o.axis || "steps");
    focusId = o.id;
    button(mode);
    const rows = o.rows.map((r) => ({ ...r, match: r.match || ((e) => e.pid === r.pid && r.lanes.includes(e.lane)) }));
    const rowOf = o.rowOf || ((e) => rows.findIndex((r) => r.match(e)));
    const per = rows.map(() => []);
    let t0 = Infinity, t1 = -Infinity;
    for (const e of o.events) {
      if (!o.colour(e)) continue;
      const i = rowOf(e);
      if (i < 0) continue;
      per[i].push(e);
      if (e.ts < t0) t0 = e.ts;
      if (e.ts + (e.dur || 0) > t1) t1 = e.ts + (e.dur || 0);
    }
    const starts = o.starts || [];
    if (starts.length) { t0 = Math.min(t0, starts[0]); t1 = Math.max(t1, starts[starts.length - 1]); }
    if (!Number.isFinite(t0)) return el("p", { class: "note", text: "(no events to draw)" });
    const ax = Axis.make(mode, t0, t1, starts);
    const axes = rows.map((r, i) => Axis.row(ax, mode, t0, t1, starts, o.rowStarts && o.rowStarts(i)));
    const vkey = `${o.id}/${mode}`;
    let [v0, v1] = views[vkey] || [ax.lo, ax.hi];
    const current = o.current || new Set();
    const nRows = rows.length + (o.model ? 1 : 0);
    const legend = [...(o.legend || []), ["outline", "outlined: this step's events"],
                    ["#333", "dashed: where this step starts", true]];
    // o.height holds the whole box: the bar of buttons, the rows, the axis, the note and
    // the legend (its lines estimated from its text), so the rows shrink to what is left
    const lines = (texts, extra) => Math.ceil(texts.reduce((s, t) => s + textWidth(t, px) + extra, 0) / (o.width - 20));
    const around = px * 1.35 * (2 + lines(legend.map((l) => l[1]), px * 2.4) + (o.note ? lines([o.note], 0) : 0));
    const fit = o.height ? Math.floor((o.height - around - px * 2) / nRows) : Infinity;
    const rowH = Math.max(Math.round(px * 1.3), Math.min(Math.round(px * 1.8), fit));
    const labels = [...rows.map((r) => r.label), o.model ? o.model.label : ""];
    const left = Math.ceil(maxOf(labels, (t) => textWidth(t, px)) + 16);
    const W = Math.max(360, Math.floor(o.width) - 2), plotW = W - left - 12;  // - 2: the border
    const H = nRows * rowH + Math.round(px * 2);
    const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "timeline" });
    const clip = `tl-clip-${++clipId}`;
    const x = (u) => left + ((u - v0) / (v1 - v0)) * plotW;
    const region = (k) => (ax.first || 0) + k - 1;  // steps axis: column of step k

    function bars(list, y, h, ax) {
      const out = [], texts = [];
      const lod = list.length > 1500;  // big traces: one grey bar per crowded pixel
      let lump = null;
      const order = lod ? list : [...list].sort((a, b) => (b.dur || 0) - (a.dur || 0));
      for (const e of order) {
        const a = x(ax.u(e.ts)), b = x(ax.u(e.ts + (e.dur || 0)));
        if (b < left - 4 || a > left + plotW + 4) continue;
        const hl = current.has(e.id), dim = current.size && !hl ? " dim" : "";
        if (lod && b - a < 1.5 && !hl) {
          if (lump && a <= lump.b + 1) { lump.b = Math.max(lump.b, b); lump.n++; continue; }
          lump = { a, b, n: 1, u0: ax.u(e.ts) };
          out.push(lump);
          continue;
        }
        if (e.ph !== "X") {
          out.push(svg("line", { class: `ev${hl ? " hl" : dim}`, "data-ev": e.id, x1: a, x2: a, y1: y,
            y2: y + h, stroke: o.colour(e), "stroke-width": hl ? 5 : 3 }, undefined));
          out[out.length - 1].append(svg("title", {}, e.name));
          continue;
        }
        const r = svg("rect", { class: `ev${hl ? " hl" : dim}`, "data-ev": e.id, x: a, y,
          width: Math.max(b - a, 2), height: h, fill: o.colour(e) });
        r.append(svg("title", {}, `${e.name} — ${micros(e.dur)}`));
        out.push(r);
        const va = Math.max(a, left), vb = Math.min(b, left + plotW);
        const text = [].concat(o.label ? o.label(e) : []).find((t) => t && textWidth(t, px) + 8 <= vb - va);
        if (text) texts.push({ at: va + 4, text, w: textWidth(text, px) });
      }
      texts.sort((p, q) => p.at - q.at);
      let end = -Infinity;  // labels in one row never overlap: a later one that would, is left out
      const shown = [];
      for (const t of texts) if (t.at >= end) { shown.push(t); end = t.at + t.w + 6; }
      return [out.map((b) => (b instanceof Element ? b : lumpRect(b, y, h))),
              shown.map((t) => svg("text", { x: t.at, y: y + h / 2 + px * 0.35, "font-size": px,
                                             class: "on-bar" }, t.text))];
    }
    function lumpRect(l, y, h) {
      const r = svg("rect", { class: "lump", "data-count": l.n, x: l.a, y, width: Math.max(l.b - l.a, 1),
                              height: h, fill: "#888" });
      r.append(svg("title", {}, `${l.n} events: zoom in to see them`));
      return r;
    }

    function paint() {
      root.replaceChildren();
      const defs = svg("defs", {});
      const cp = svg("clipPath", { id: clip });
      cp.append(svg("rect", { x: left, y: 0, width: plotW, height: nRows * rowH }));
      defs.append(cp);
      root.append(defs);
      const plot = svg("g", { "clip-path": `url(#${clip})` }), top = svg("g", { "clip-path": `url(#${clip})` });
      rows.forEach((r, i) => {
        const y = i * rowH;
        root.append(svg("text", { x: 6, y: y + rowH / 2 + px * 0.35, "font-size": px, class: "row-label" }, r.label));
        root.append(svg("line", { x1: left, x2: W - 12, y1: y + rowH, y2: y + rowH, stroke: "#eee" }));
        const [shapes, texts] = bars(per[i], y + 3, rowH - 6, axes[i]);
        plot.append(...shapes);
        top.append(...texts);
      });
      if (o.model) paintModel(plot, top, rows.length * rowH + 3, rowH - 6);
      const k = o.step || 0;
      if (k >= 1 && starts[k - 1] !== undefined) {
        const cx = x(mode === "steps" ? region(k) : ax.u(starts[k - 1]));
        plot.append(svg("line", { class: "cursor", x1: cx, x2: cx, y1: 0, y2: nRows * rowH,
                                  stroke: "#333", "stroke-width": 2, "stroke-dasharray": "6 4" }));
      }
      root.append(plot, top);
      const base = nRows * rowH;
      root.append(svg("line", { x1: left, x2: left + plotW, y1: base, y2: base, stroke: "#999" }));
      for (const t of ax.ticks(v0, v1, plotW, px)) {
        const tx = x(t.u), w = textWidth(t.text, px);
        if (tx - w / 2 < left - 2 || tx + w / 2 > W - 2) continue;  // a label never leaves the plot
        root.append(svg("line", { x1: tx, x2: tx, y1: base, y2: base + 5, stroke: "#999" }));
        root.append(svg("text", { x: tx, y: base + px * 1.35, "font-size": px, "text-anchor": "middle",
                                  class: "tick" }, t.text));
      }
    }

    function paintModel(plot, top, y, h) {
      root.append(svg("text", { x: 6, y: y - 3 + rowH / 2 + px * 0.35, "font-size": px, class: "row-label" },
                      o.model.label));
      for (const m of o.model.bars) {
        if (starts[m.step - 1] === undefined) continue;
        const a = mode === "steps" ? x(region(m.step)) : x(ax.u(starts[m.step - 1]));
        const b = mode === "steps" ? x(region(m.step) + 1) : x(ax.u(starts[m.step - 1] + m.us));
        plot.append(svg("rect", { class: `model${m.step === o.step ? " hl" : ""}`, "data-model-step": m.step,
          x: a, y, width: Math.max(b - a, 2), height: h, fill: "#e8e8e8", stroke: "#666",
          "stroke-dasharray": "4 3" }));
        const w = textWidth(m.text, px), va = Math.max(a, left), vb = Math.min(b, left + plotW);
        if (w + 8 <= vb - va) top.append(svg("text", { x: va + 4, y: y + h / 2 + px * 0.35, "font-size": px,
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

    const btn = (text, title, f) => { const b = el("button", { title, text }); b.onclick = f; return b; };
    const head = el("div", { class: "tl-bar" },
      btn("−", "zoom out (−)", () => zoomKey("-")), btn("+", "zoom in (+)", () => zoomKey("+")),
      btn("fit", "whole timeline (0)", () => zoomKey("0")),
      el("span", { text: ax.title + (o.pick ? "; click a bar to step to it" : "") }));
    const box = el("div", { class: "tl", "data-timeline": o.id, "data-axis": mode }, head, root);
    if (o.note) box.append(el("p", { class: "note", text: o.note }));
    box.append(Draw.legend(legend));
    return box;
  }

  return { draw, toggleAxis, key };
})();
