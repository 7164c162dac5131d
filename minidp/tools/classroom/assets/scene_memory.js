// Scene "memory": bytes each rank holds over one AdamW step under DDP, ZeRO-1, ZeRO-2 and
// FSDP, overlaid on one chart (x: the step's phases, logically spaced; y: bytes), and at
// the current point every stage side by side on one scale. Measured: the model states at
// four points (built, after forward, after backward, after step); FSDP's all-gather
// buffers and gathered units at each gather and free in between (the other stages hold
// their last measurement there, and say so).
(() => {
  const { el } = Classroom;
  const { byName, ranks, bytes, maxOf, smallPx } = Draw;
  const PARTS = ["params", "grads", "optimizer", "buckets", "buffer", "full"];
  const PART_TEXT = { params: "parameters", grads: "gradients", optimizer: "optimizer state",
                      buckets: "DDP buckets", buffer: "all-gather buffers", full: "gathered units" };
  const NAMES = { ddp: "DDP", zero1: "ZeRO-1", zero2: "ZeRO-2", fsdp: "FSDP" };
  const COLOUR = { ddp: "#e45756", zero1: "#f58518", zero2: "#4c78a8", fsdp: "#54a24b" };
  const POINTS = ["built", "after forward", "after backward", "after step"];
  const SEG = ["forward", "backward", "step"];

  // One stage on one rank, in time order: measured points and FSDP's transient changes.
  function history(mem, trans, stage, r) {
    const pts = mem.filter((e) => e.args.stage === stage && e.pid === r);
    const subs = trans.filter((e) => e.args.stage === stage && e.pid === r);
    const seq = [...pts.map((e) => ({ e, point: e.args.point })), ...subs.map((e) => ({ e }))]
      .sort((a, b) => a.e.ts - b.e.ts || a.e.id - b.e.id);
    const out = [[], [], [], []];  // entries after point i (before point i+1)
    const held = { buffer: 0, full: 0 };
    let base = null, seg = -1;
    const snap = (what) => ({ ...base, ...held, what });
    const points = [];
    for (const { e, point } of seq) {
      if (point) {
        base = Object.fromEntries(PARTS.slice(0, 4).map((p) => [p, e.args[p]]));
        seg = POINTS.indexOf(point);
        points[seg] = { ...snap(`${point} (measured)`), e };
        continue;
      }
      if (!base) continue;
      const u = e.args.unit;
      if (e.name === "memory gather start") { held.buffer += e.args.buffer; out[seg].push(snap(`${u}: all-gather buffer allocated`)); }
      else if (e.name === "memory gathered") {
        held.full += e.args.bytes;
        out[seg].push(snap(`${u}: gathered — buffer and full parameters both held`));
        held.buffer -= e.args.buffer;
        out[seg].push(snap(`${u}: buffer released`));
      } else if (e.name === "memory freed") { held.full -= e.args.bytes; out[seg].push(snap(`${u}: freed`)); }
    }
    return { points, subs: out };
  }

  Classroom.scene("memory", (events) => {
    const mem = byName(events, "memory");
    if (!mem.length) return null;
    const trans = events.filter((e) => e.name.startsWith("memory ") && e.args && e.args.stage);
    const stages = [...new Set(mem.map((e) => e.args.stage))];
    const who = ranks(mem);
    const hist = {};
    for (const s of stages) for (const r of who) hist[`${s}/${r}`] = history(mem, trans, s, r);
    const width = [0, 1, 2].map((i) => maxOf(Object.values(hist), (h) => h.subs[i].length));
    const pos = [];  // [{seg or point}]
    POINTS.forEach((p, i) => {
      pos.push({ point: i });
      if (i < 3) for (let j = 0; j < width[i]; j++) pos.push({ seg: i, j });
    });
    function value(s, r, k) {  // what rank r holds under stage s at position k
      const h = hist[`${s}/${r}`], p = pos[k];
      if (p.point !== undefined) return h.points[p.point];
      const list = h.subs[p.seg];
      if (list.length) return list[Math.min(p.j, list.length - 1)];
      return { ...h.points[p.seg], what: `${POINTS[p.seg]} (measured; nothing changes here for ${NAMES[s] || s})` };
    }
    const total = (v) => PARTS.reduce((t, p) => t + (v[p] || 0), 0);
    const slot = [];  // x of each position: every phase at least 3 slots wide, even with nothing in it
    let at = 0, last = 0;
    pos.forEach((p) => {
      if (p.point > 0) at = Math.max(at, last + 3);
      slot.push(at);
      if (p.point !== undefined) last = at;
      at += 1;
    });
    const top = maxOf(pos.map((_, k) => k), (k) => maxOf(stages, (s) => maxOf(who, (r) => total(value(s, r, k)))));

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
        const at = pos.findIndex((p) => p.point === i);
        s.append(Draw.svg("line", { x1: x(at), x2: x(at), y1: 8, y2: 8 + ph, stroke: "#ccc", "stroke-dasharray": "3 3" }));
        if (i > 0) s.append(Draw.svg("text", { x: (x(from) + x(at)) / 2, y: h - px * 0.5, "font-size": px,
                                              "text-anchor": "middle" }, SEG[i - 1]));
        from = at;
      });
      s.append(Draw.svg("text", { x: x(0), y: h - px * 0.5, "font-size": px }, "built"));
      stages.forEach((st, si) => {  // earlier stages wider: a line under an equal one still shows
        who.forEach((r, ri) => {
          // steps, not slopes: a value holds until the next point where it was measured
          const pts = pos.map((_, i) => `${i ? `${x(i)},${y(total(value(st, r, i - 1)))} ` : ""}` +
                                        `${x(i)},${y(total(value(st, r, i)))}`).join(" ");
          s.append(Draw.svg("polyline", { points: pts, fill: "none", stroke: COLOUR[st] || "#333",
            "stroke-width": 2.5 + 2 * (stages.length - 1 - si),
            "stroke-dasharray": ri ? `${8 - 2 * ri} 5` : null, "data-stage": st, "data-rank": r }));
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
        const p = pos[k], fsdp = stages.includes("fsdp") ? value("fsdp", who[0], k) : null;
        const what = p.point !== undefined ? `${POINTS[p.point]}: measured on every stage` :
          `${SEG[p.seg]} — FSDP rank ${who[0]}: ${fsdp ? fsdp.what : ""}`;
        caption.append(el("span", { "data-point": p.point !== undefined ? POINTS[p.point] : SEG[p.seg], text: what }));
        const chartW = Math.floor(room.w * 0.56), sideW = room.w - chartW - 24;
        const px = smallPx(), lw = Draw.textWidth(`rank ${who[who.length - 1]}: 000.0 KiB`, px, true) + 12;
        const sc = Draw.scale(top, sideW - lw - 40);
        const compare = el("div", { class: "compare", id: "memory-compare", "data-position": k });
        for (const s of stages) {
          const col = el("div", { class: "card", "data-stage": s },
            el("h3", { style: `color:${COLOUR[s]}`, text: NAMES[s] || s }));
          for (const r of who) {
            const v = value(s, r, k);
            col.append(el("div", { class: "mrow" }, el("b", { style: `width:${lw}px`, text: `rank ${r}: ${bytes(total(v))}` }),
              Draw.bar(PARTS.filter((q) => v[q]).map((q) => ({ cls: `part-${q}`, bytes: v[q],
                title: `${PART_TEXT[q]} ${bytes(v[q])}`, attrs: { "data-part": q, "data-rank": r, "data-bytes": v[q] } })), sc)));
          }
          compare.append(col);
        }
        const ch = Math.max(220, Math.min(room.h - smallPx() * 4, chartW * 0.7));
        const lg = Draw.legend([...stages.map((s) => [COLOUR[s], NAMES[s] || s]),
          ...who.slice(1).map((r) => ["#777", `rank ${r}: dashed`])]);
        stage.append(Draw.main(el("div", { class: "row" }, el("div", {}, chart(k, chartW, ch), lg), compare)));
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
