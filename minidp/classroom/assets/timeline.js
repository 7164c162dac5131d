// A timeline of real spans: one row per (rank, lane), a bar per "X" event, a tick per
// instant, and a cursor at the current step's time. Times are the trace's microseconds.
const Timeline = (() => {
  const NS = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // rows: [{pid, lanes: [lane names], label}]; colour(e) -> CSS colour or null (skip);
  // label(e) -> short text drawn on wide bars.
  function draw(events, rows, cursor, colour, label) {
    const W = 900, left = 150, rowH = 26;
    const shown = events.filter((e) => rows.some((r) => r.pid === e.pid && r.lanes.includes(e.lane))
                                       && colour(e));
    const t0 = Math.min(...shown.map((e) => e.ts));
    const t1 = Math.max(...shown.map((e) => e.ts + (e.dur || 0)));
    const x = (t) => left + ((t - t0) / Math.max(t1 - t0, 1)) * (W - left - 10);
    const root = svg("svg", { class: "timeline", viewBox: `0 0 ${W} ${rows.length * rowH + 24}` });
    rows.forEach((r, i) => {
      const y = i * rowH + 4;
      root.append(svg("text", { x: 4, y: y + 16 }, r.label));
      const mine = shown.filter((e) => e.pid === r.pid && r.lanes.includes(e.lane))
        .sort((a, b) => (b.dur || 0) - (a.dur || 0));  // long bars first, short ones on top
      for (const e of mine) {
        if (e.ph === "X") {
          const w = Math.max(x(e.ts + e.dur) - x(e.ts), 1.5);
          const bar = svg("rect", { x: x(e.ts), y, width: w, height: rowH - 6, fill: colour(e),
                                    opacity: e.ts <= cursor ? 1 : 0.35 });
          bar.append(svg("title", {}, `${e.name} ${(e.dur / 1000).toFixed(2)} ms`));
          root.append(bar);
          const text = label ? label(e) : "";
          if (text && w > text.length * 6.5) {
            root.append(svg("text", { x: x(e.ts) + 2, y: y + 15, fill: "#fff" }, text));
          }
        } else {
          root.append(svg("line", { x1: x(e.ts), x2: x(e.ts), y1: y, y2: y + rowH - 6,
                                    stroke: colour(e), "stroke-width": 2,
                                    opacity: e.ts <= cursor ? 1 : 0.35 }));
        }
      }
    });
    const cx = x(Math.min(Math.max(cursor, t0), t1));
    root.append(svg("line", { x1: cx, x2: cx, y1: 0, y2: rows.length * rowH + 4,
                              stroke: "#c00", "stroke-width": 2, class: "cursor" }));
    const ms = ((t1 - t0) / 1000).toFixed(1);
    root.append(svg("text", { x: left, y: rows.length * rowH + 20 }, `0 ms`));
    root.append(svg("text", { x: W - 80, y: rows.length * rowH + 20 }, `${ms} ms`));
    return root;
  }
  return { draw };
})();
