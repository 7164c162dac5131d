// A timeline's horizontal axis, in one of two modes:
//   "wall"  — the trace's own microseconds (what really happened, thread noise and all);
//   "steps" — logical steps: every step of the scene gets the same width, and time inside
//             a step is stretched to fill it, so a 0.05 ms compute bar is as visible as a
//             5 ms all-gather and the steps' order (ring optimality, overlap) reads at once.
// make(mode, t0, t1, starts) -> {u(t), lo, hi, ticks(v0, v1, px, labelPx), title};
// row(...) the same columns for one row that reaches each step at its own times.
const Axis = (() => {
  // 1, 2, 5 x 10^k: the tick spacing nearest above `raw`.
  function nice(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }
  function timeText(us, spacing) {
    if (spacing >= 1000) return `${+(us / 1000).toFixed(Math.max(0, 3 - Math.round(Math.log10(spacing))))} ms`;
    return `${+us.toFixed(spacing >= 1 ? 0 : 2)} µs`;
  }

  function wall(t0, t1) {
    return {
      u: (t) => t, lo: t0, hi: Math.max(t1, t0 + 1),
      title: "axis: wall clock", about: "time since the trace's first event, as recorded",
      ticks(v0, v1, px, labelPx) {
        const room = Math.max(2, Math.floor(px / (labelPx * 5.5)));  // labels never touch
        const spacing = nice((v1 - v0) / room);
        const out = [];
        for (let n = Math.ceil((v0 - t0) / spacing); t0 + n * spacing <= v1; n++) {
          out.push({ u: t0 + n * spacing, text: timeText(n * spacing, spacing) });
        }
        return out;
      },
    };
  }

  // starts: the time each step k = 1..K begins. Breakpoints b_0 = t0 (column 0: before
  // step 1, always there, so every row's step k is column k), b_k = starts, b_last = t1;
  // u(b_j) = j, linear in between. A start not after the one before still gets a column.
  function steps(t0, t1, starts) {
    const b = [Math.min(t0, starts[0] - 1e-3)], name = ["before"];
    starts.forEach((s, i) => {
      const prev = b.length ? b[b.length - 1] : -Infinity;
      b.push(s > prev ? s : prev + 1e-6);  // equal starts: still one column each
      name.push(String(i + 1));
    });
    b.push(Math.max(t1, b[b.length - 1] + 1e-6));
    function u(t) {
      if (t <= b[0]) return 0;
      if (t >= b[b.length - 1]) return b.length - 1;
      let lo = 0, hi = b.length - 1;
      while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (b[mid] <= t) lo = mid; else hi = mid; }
      return lo + (t - b[lo]) / (b[lo + 1] - b[lo]);
    }
    return {
      u, lo: 0, hi: b.length - 1, first: 1,
      title: "axis: logical steps", about: "each step the same width, time stretched inside each",
      ticks(v0, v1, px, labelPx) {
        const every = Math.max(1, Math.ceil(((v1 - v0) * labelPx * 3.2) / px));
        const out = [];
        for (let j = Math.max(0, Math.ceil(v0)); j < Math.min(v1, name.length); j++) {
          if (j > 0 && (j - 1) % every === 0) out.push({ u: j + 0.5, text: name[j], mid: true });
        }
        return out;
      },
    };
  }

  function make(mode, t0, t1, starts) {
    return mode === "steps" && starts && starts.length ? steps(t0, t1, starts) : wall(t0, t1);
  }
  // A row's own steps (each rank reaches step k at its own time): its starts where it has
  // them, the scene's elsewhere, on the same columns as `main`.
  function row(main, mode, t0, t1, starts, own) {
    if (mode !== "steps" || !own || !starts.length) return main;
    return steps(t0, t1, starts.map((s, k) => (own[k] === undefined ? s : own[k])));
  }
  return { make, row, nice };
})();
