// Scene "memory": bytes each rank holds over one steady-state AdamW step (the optimizer
// state exists from the step before) under DDP, ZeRO-1, ZeRO-2 and FSDP, overlaid on one
// chart (x: the step's phases, logically spaced; y: bytes), and at the current point every
// stage side by side on one scale. Measured: the model states at four points (step start,
// after forward, after backward, after step) and, under DDP and ZeRO, each time a gradient
// lands in backward; FSDP's all-gather buffers, gathered units, unsharded gradients and
// reduce-scatter inputs at each change in between. Each stage's changes inside a phase are
// spread across it, so every stage reaches the phase's end together.
(() => {
  const { el } = Classroom;
  const { byName, ranks, bytes, maxOf, smallPx } = Draw;
  const MEASURED = ["params", "grads", "optimizer", "buckets"];
  const PARTS = [...MEASURED, "buffer", "full", "fullgrads", "rsbuf"];
  const PART_TEXT = { params: "parameters", grads: "gradients", optimizer: "optimizer state",
                      buckets: "DDP buckets", buffer: "all-gather buffers", full: "gathered units",
                      fullgrads: "unsharded gradients", rsbuf: "reduce-scatter inputs" };
  const NAMES = { ddp: "DDP", zero1: "ZeRO-1", zero2: "ZeRO-2", fsdp: "FSDP" };
  // the stages' lines in colours no part of a bar uses
  const COLOUR = { ddp: "#111111", zero1: "#17becf", zero2: "#a8a000", fsdp: "#c51b7d" };
  const POINTS = ["step start", "after forward", "after backward", "after step"];
  const SEG = ["forward", "backward", "step"];

  // One stage on one rank, in time order: measured points, and the changes between them.
  function history(list) {
    const out = [[], [], [], []];  // entries after point i (before point i+1)
    const held = { buffer: 0, full: 0, fullgrads: 0, rsbuf: 0 };
    const gradsOf = {}, inputOf = {};  // per unit: what its reduce-scatter will release
    let base = null, seg = -1;
    const snap = (what) => ({ ...base, ...held, what });
    const points = [];
    for (const e of list) {
      const a = e.args, u = a.unit;
      if (e.name === "memory" || e.name === "memory grad") {
        base = Object.fromEntries(MEASURED.map((p) => [p, a[p]]));
        if (e.name === "memory grad") { out[seg].push(snap(`gradient of ${a.param} landed (measured)`)); continue; }
        seg = POINTS.indexOf(a.point);
        points[seg] = snap(`${a.point} (measured)`);
        continue;
      }
      if (!base) continue;
      if (e.name === "memory gather start") {
        held.buffer += a.buffer; out[seg].push(snap(`${u}: all-gather buffer allocated`));
      } else if (e.name === "memory gathered") {
        held.full += a.bytes;
        out[seg].push(snap(`${u}: gathered — buffer and full parameters both held`));
        held.buffer -= a.buffer;
        out[seg].push(snap(`${u}: buffer released`));
      } else if (e.name === "memory freed") {
        held.full -= a.bytes; out[seg].push(snap(`${u}: full parameters freed`));
      } else if (e.name === "memory grads") {
        held.fullgrads += (gradsOf[u] = a.bytes); out[seg].push(snap(`${u}: its full gradients are out of backward`));
      } else if (e.name === "memory reduce start") {
        held.rsbuf += (inputOf[u] = a.buffer); out[seg].push(snap(`${u}: reduce-scatter input built`));
      } else if (e.name === "memory reduced") {
        held.fullgrads -= gradsOf[u] || 0; held.rsbuf -= inputOf[u] || 0;
        out[seg].push(snap(`${u}: reduce-scattered — its full gradients and input released`));
      }
    }
    return { points, subs: out };
  }

  Classroom.scene("memory", (events) => {
    const mem = byName(events, "memory");
    if (!mem.length) return null;
    const mine = events.filter((e) => e.name.startsWith("memory") && e.args && e.args.stage)
      .sort((a, b) => a.ts - b.ts || a.id - b.id);
    const stages = [...new Set(mem.map((e) => e.args.stage))];
    const who = ranks(mem);
    const hist = {};
    for (const s of stages) for (const r of who) hist[`${s}/${r}`] = history(mine.filter((e) => e.args.stage === s && e.pid === r));
    const width = [0, 1, 2].map((i) => maxOf(Object.values(hist), (h) => h.subs[i].length));
    const pos = [];  // [{point} | {seg, j}]
    POINTS.forEach((p, i) => {
      pos.push({ point: i });
      if (i < 3) for (let j = 0; j < width[i]; j++) pos.push({ seg: i, j });
    });
    function value(s, r, k) {  // what rank r holds under stage s at position k
      const h = hist[`${s}/${r}`], p = pos[k];
      if (p.point !== undefined) return h.points[p.point];
      const list = h.subs[p.seg], i = Math.floor(((p.j + 1) * list.length) / width[p.seg]) - 1;
      if (i >= 0) return list[i];
      return { ...h.points[p.seg], what: list.length ? `${SEG[p.seg]}: not yet changed` :
               `${POINTS[p.seg]} (measured; nothing changes in ${SEG[p.seg]})` };
    }
    const total = (v) => PARTS.reduce((t, p) => t + (v[p] || 0), 0);
    const peakOf = (s, r) => maxOf(pos.map((_, k) => k), (k) => total(value(s, r, k)));
    // Every rank's line would be 4 x W lines: rank who[0], and the rank holding the most
    // (its peak over the step) where that is another one.
    const most = Object.fromEntries(stages.map((s) => {
      const r = who.reduce((a, b) => (peakOf(s, b) > peakOf(s, a) ? b : a), who[0]);
      return [s, r];
    }));
    const shown = (s) => (most[s] === who[0] ? [who[0]] : [who[0], most[s]]);
    const slot = [];  // x of each position: every phase at least 3 slots wide, even with nothing in it
    let at = 0, last = 0;
    pos.forEach((p) => {
      if (p.point > 0) at = Math.max(at, last + 3);
      slot.push(at);
      if (p.point !== undefined) last = at;
      at += 1;
    });
    const top = maxOf(stages, (s) => maxOf(shown(s), (r) => peakOf(s, r)));

    function chart(k, w, h) {
      const px = smallPx(), left = Draw.textWidth(bytes(top), px) + 14, bottom = px * 2.2;
      const pw = w - left - 12, ph = h - bottom - 8;
      const x = (i) => left + (slot[i] / Math.max(1, slot[slot.length - 1])) * pw;
      const y = (b) => 8 + ph - (b / top) * ph;
      const s = Draw.svg("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, id: "memory-chart" });
      const unit = Math.pow(1024, Math.max(0, Math.floor(Math.log(top / 4) / Math.log(1024))));
      const nice = Axis.nice(top / 4 / unit) * unit;  // round numbers of B, KiB, MiB
      for (let b = 0; b <= top; b += nice) {
        s.append(Draw.svg("line", { x1: left, x2: left + pw, y1: y(b), y2: y(b), stroke: "#e3e3e3" }));
        s.append(Draw.svg("text", { x: left - 6, y: y(b) + px * 0.35, "font-size": px, "text-anchor": "end" }, bytes(b)));
      }
      let from = 0;
      POINTS.forEach((_, i) => {  // phase labels under their stretch of the axis
        const at_ = pos.findIndex((p) => p.point === i);
        s.append(Draw.svg("line", { x1: x(at_), x2: x(at_), y1: 8, y2: 8 + ph, stroke: "#ccc", "stroke-dasharray": "3 3" }));
        if (i > 0) s.append(Draw.svg("text", { x: (x(from) + x(at_)) / 2, y: h - px * 0.5, "font-size": px,
                                              "text-anchor": "middle" }, SEG[i - 1]));
        from = at_;
      });
      stages.forEach((st, si) => {  // earlier stages wider: a line under an equal one still shows
        shown(st).forEach((r, ri) => {
          // steps, not slopes: a value holds until the next point where it was measured
          const pts = pos.map((_, i) => `${i ? `${x(i)},${y(total(value(st, r, i - 1)))} ` : ""}` +
                                        `${x(i)},${y(total(value(st, r, i)))}`).join(" ");
          s.append(Draw.svg("polyline", { points: pts, fill: "none", stroke: COLOUR[st] || "#333",
            "stroke-width": 2.5 + 1.5 * (stages.length - 1 - si), "stroke-dasharray": ri ? "9 5" : null,
            "data-stage": st, "data-rank": r }));
          s.append(Draw.svg("circle", { cx: x(k), cy: y(total(value(st, r, k))), r: 6, fill: COLOUR[st], class: "hl" }));
        });
      });
      s.append(Draw.svg("line", { class: "cursor", x1: x(k), x2: x(k), y1: 8, y2: 8 + ph, stroke: "#333",
                                  "stroke-width": 2, "stroke-dasharray": "6 4" }));
      return s;
    }

    return {
      count: pos.length,
      render(k, stage, caption, room) {
        const p = pos[k];
        caption.append(el("span", { "data-point": p.point !== undefined ? POINTS[p.point] : SEG[p.seg],
          text: p.point !== undefined ? `${POINTS[p.point]}: measured on every stage` :
            `${SEG[p.seg]}, ${p.j + 1} of ${width[p.seg]}: what changed, stage by stage` }));
        const px = smallPx(), chartW = Math.floor(room.w * 0.5), sideW = room.w - chartW - 24;
        const lw = Draw.textWidth(`rank ${who[who.length - 1]} (most): 000.0 KiB`, px, true) + 12;
        const sc = Draw.scale(top, Math.max(60, sideW - lw - 30));
        const compare = el("div", { class: "compare", id: "memory-compare", "data-position": k });
        for (const s of stages) {
          const col = el("div", { class: "card", "data-stage": s },
            el("h3", { style: `color:${COLOUR[s]}`, text: NAMES[s] || s }));
          for (const r of shown(s)) {
            const v = value(s, r, k), name = r === who[0] ? `rank ${r}` : `rank ${r} (most)`;
            col.append(el("div", { class: "mrow" }, el("b", { style: `width:${lw}px`, text: `${name}: ${bytes(total(v))}` }),
              Draw.bar(PARTS.filter((q) => v[q]).map((q) => ({ cls: `part-${q}`, bytes: v[q],
                title: `${PART_TEXT[q]} ${bytes(v[q])}`, attrs: { "data-part": q, "data-rank": r, "data-bytes": v[q] } })), sc)));
          }
          col.append(el("div", { class: "note what", title: value(s, who[0], k).what, text: value(s, who[0], k).what }));
          compare.append(col);
        }
        const lg = Draw.legend([...stages.map((s) => [COLOUR[s], NAMES[s] || s]),
          ["#777", who.length > 1 ? "dashed: the rank holding the most, where not rank 0" : "one rank"]]);
        const left = el("div", { style: `width:${chartW}px` }, lg);
        const main = Draw.main(el("div", { class: "split" }, left, compare));
        stage.append(main);
        compare.style.width = `${sideW}px`;
        left.prepend(chart(k, chartW, Math.max(220, Math.min(room.h - lg.offsetHeight - 8, chartW * 0.75))));
        stage.append(Draw.legend(PARTS.map((q) => [`part-${q}`, PART_TEXT[q]])));
        const z1 = mem.filter((e) => e.args.stage === "zero1" && e.args.point === "after step" && e.args.owned);
        if (z1.length) {
          stage.append(el("p", { class: "note", id: "zero1-owners", text: "Why ZeRO-1's ranks differ: it gives " +
            "whole parameters to ranks (torch's rule: largest first, each to the rank owning the fewest " +
            "elements so far), and whole tensors do not split evenly — " + z1.map((e) => `rank ${e.pid} keeps ` +
            `the state of ${e.args.owned.map(([n]) => n).join(", ")} (${e.args.owned.reduce((t, [, m]) => t + m, 0)} ` +
            `elements, ${bytes(e.args.optimizer)})`).join("; ") + "." }));
        }
      },
    };
  });
})();
