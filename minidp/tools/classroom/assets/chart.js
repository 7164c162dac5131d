// Line charts for the what-if panel: y against x, both on log scales, every series on one
// pair of axes, the current x marked with each series' value at it. Text at the page's
// small size (18 px on a projector), tick labels never touching.
// Chart.lines({w, h, xs: [x...], x: {label, fmt}, y: {fmt}, at: x, series: [{key, name,
//   colour, dash, ys: [y per x], width}], hline: {y, text}}) -> svg
const Chart = (() => {
  const { svg, textWidth, smallPx } = Draw;

  // Ticks at powers of 10 between lo and hi, with 2 and 5 x 10^k where there are few;
  // bytes: 1, 10 and 100 of B, KiB, MiB, GiB, TiB (round numbers in the unit shown).
  function ticks(lo, hi, bytes) {
    const at = (ms) => {
      const out = [];
      for (let p = Math.floor(Math.log10(lo)) - 1; p <= Math.ceil(Math.log10(hi)); p++) {
        for (const m of ms) {
          const v = bytes ? 1024 ** Math.floor(p / 3) * 10 ** (((p % 3) + 3) % 3) * m : m * 10 ** p;
          if (v >= lo * 0.999 && v <= hi * 1.001) out.push(v);
        }
      }
      return [...new Set(out)].sort((a, b) => a - b);
    };
    const tens = at([1]);
    return tens.length >= 3 ? tens : at([1, 2, 5]);
  }

  function lines(o) {
    const px = smallPx(), finite = (v) => Number.isFinite(v) && v > 0;
    const all = o.series.flatMap((s) => s.ys).concat(o.hline ? [o.hline.y] : []).filter(finite);
    let ylo = Math.min(...all), yhi = Math.max(...all);
    if (!(ylo < yhi)) { ylo = ylo / 2 || 1; yhi = yhi * 2 || 2; }
    ylo = 10 ** Math.floor(Math.log10(ylo)); yhi = 10 ** Math.ceil(Math.log10(yhi));
    const xlo = Math.min(...o.xs), xhi = Math.max(...o.xs);
    const yticks = ticks(ylo, yhi, o.y.bytes);
    const left = Math.max(...yticks.map((v) => textWidth(o.y.fmt(v), px))) + 12, bottom = px * 2.8, top = px * 0.6;
    const pw = o.w - left - 14, ph = o.h - bottom - top;
    const X = (v) => left + ((Math.log(v) - Math.log(xlo)) / (Math.log(xhi) - Math.log(xlo) || 1)) * pw;
    const Y = (v) => top + ph - ((Math.log(v) - Math.log(ylo)) / (Math.log(yhi) - Math.log(ylo))) * ph;
    const root = svg("svg", { class: "chart", width: o.w, height: o.h, viewBox: `0 0 ${o.w} ${o.h}`, "data-chart": o.id });
    let below = Infinity;  // y labels at least a line apart
    for (const v of yticks) {
      if (below - Y(v) < px * 1.3) continue;
      below = Y(v);
      root.append(svg("line", { x1: left, x2: left + pw, y1: Y(v), y2: Y(v), stroke: "#e6e6e6" }));
      root.append(svg("text", { x: left - 6, y: Y(v) + px * 0.35, "font-size": px, "text-anchor": "end" }, o.y.fmt(v)));
    }
    let end = -Infinity;
    for (const v of ticks(xlo, xhi)) {
      const t = o.x.fmt(v), w = textWidth(t, px), x = X(v);
      if (x - w / 2 < end + px * 0.5 || x - w / 2 < left - 4 || x + w / 2 > o.w) continue;
      end = x + w / 2;
      root.append(svg("line", { x1: x, x2: x, y1: top, y2: top + ph, stroke: "#f0f0f0" }));
      root.append(svg("text", { x, y: top + ph + px * 1.2, "font-size": px, "text-anchor": "middle" }, t));
    }
    root.append(svg("text", { x: left + pw / 2, y: o.h - px * 0.3, "font-size": px, "text-anchor": "middle",
                              class: "axis-label" }, o.x.label));
    root.append(svg("rect", { x: left, y: top, width: pw, height: ph, fill: "none", stroke: "#999" }));
    if (o.hline && finite(o.hline.y)) {
      const y = Y(o.hline.y);
      root.append(svg("line", { x1: left, x2: left + pw, y1: y, y2: y, stroke: "#c00", "stroke-dasharray": "8 5", "stroke-width": 2 }));
    }
    for (const s of [...o.series].sort((a, b) => (b.width || 3) - (a.width || 3))) {  // wide lines first, under
      const pts = o.xs.map((x, i) => [x, s.ys[i]]).filter(([, y]) => finite(y));
      if (!pts.length) continue;
      root.append(svg("polyline", { points: pts.map(([x, y]) => `${X(x)},${Y(Math.max(y, ylo))}`).join(" "),
        fill: "none", stroke: s.colour, "stroke-width": s.width || 3, "stroke-dasharray": s.dash || null,
        "data-series": s.key }));
    }
    if (o.at !== undefined && o.at >= xlo && o.at <= xhi) {  // the current setting, and every series' value there
      const x = X(o.at);
      root.append(svg("line", { x1: x, x2: x, y1: top, y2: top + ph, stroke: "#333", "stroke-width": 2, "stroke-dasharray": "6 4" }));
      for (const s of o.series) {
        if (finite(s.now)) root.append(svg("circle", { cx: x, cy: Y(Math.max(s.now, ylo)), r: 6, fill: s.colour,
                                                       "data-now": s.key, "data-value": s.now }));
      }
    }
    return root;
  }

  return { lines };
})();
