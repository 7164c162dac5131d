// Pictures of who sends to whom, that move: ranks as circles (on a ring, or a star around
// the server), this step's messages as curved arrows, each with a dot travelling from
// sender to receiver when the step is shown, and a label (the chunk, its values or bytes)
// placed beside its arrow where it overlaps no rank and no other label.
// draw({nodes: [{id, label, x, y}], moves: [{src, dst, text, colour, attrs, still, box}], r, frame})
// -> svg (still: a link drawn faint for orientation, no dot; box: where its label goes;
// frame: the picture's extent — a scene passes the same frame and boxes at every step, so
// the picture never moves or resizes between steps: see choose)
const Topology = (() => {
  const { svg, textWidth, smallPx } = Draw;
  let uid = 0;  // marker ids, unique on the page

  // On a circle (an ellipse when Ry is given: a wide box holds a flatter ring), clockwise
  // from the top, equally far apart along it.
  function circle(ids, R, Ry = R) {
    const from = ids.length === 2 ? Math.PI : -Math.PI / 2;  // two ranks side by side, else from the top
    const N = 720, at = (t) => ({ x: R * Math.cos(from + t), y: Ry * Math.sin(from + t) });
    const arc = [0];  // length along the ellipse at N equal steps of the angle
    for (let i = 1; i <= N; i++) {
      const a = at((2 * Math.PI * (i - 1)) / N), b = at((2 * Math.PI * i) / N);
      arc.push(arc[i - 1] + Math.hypot(b.x - a.x, b.y - a.y));
    }
    let j = 0;
    return ids.map((id, i) => {
      const want = (arc[N] * i) / ids.length;
      while (arc[j + 1] < want) j++;
      return { id, ...at((2 * Math.PI * j) / N) };
    });
  }
  function star(root, others, R, Ry = R) {
    return [{ id: root, x: 0, y: 0 }, ...circle(others, R, Ry)];
  }

  const overlaps = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;

  // Each move's arrow (a quadratic curve bowing away from the picture's middle) and label
  // box (given, or pushed along the arrow's normal until it is free); the extent of it all.
  function place(nodes, moves, r, px) {
    const at = Object.fromEntries(nodes.map((n) => [n.id, n]));
    const cx = nodes.reduce((s, n) => s + n.x, 0) / nodes.length;
    const cy = nodes.reduce((s, n) => s + n.y, 0) / nodes.length;
    const boxes = nodes.map((n) => ({ x: n.x - r, y: n.y - r, w: 2 * r, h: 2 * r }));
    const parts = [];
    for (const m of moves) {
      const a = at[m.src], b = at[m.dst];
      if (!a || !b) continue;
      const dx = b.x - a.x, dy = b.y - a.y, d = Math.hypot(dx, dy) || 1;
      let nx = -dy / d, ny = dx / d;  // the right-hand normal ...
      const mx = (a.x + b.x) / 2, my = (a.y + b.y) / 2;
      if (Math.hypot(mx - cx, my - cy) > d * 1e-3 && (mx - cx) * nx + (my - cy) * ny < 0) { nx = -nx; ny = -ny; }
      const c = { x: mx + nx * d * 0.16, y: my + ny * d * 0.16 };  // ... or away from the middle
      const p0 = { x: a.x + (dx / d) * r, y: a.y + (dy / d) * r };
      const p1 = { x: b.x - (dx / d) * (r + 4), y: b.y - (dy / d) * (r + 4) };
      const path = `M${p0.x},${p0.y} Q${c.x},${c.y} ${p1.x},${p1.y}`;
      const peak = { x: 0.25 * p0.x + 0.5 * c.x + 0.25 * p1.x, y: 0.25 * p0.y + 0.5 * c.y + 0.25 * p1.y };
      let box = m.box || null;
      if (!box && m.text) {
        const w = (m.width || textWidth(m.text, px)) + 8, h = px * 1.3;
        for (let push = px * 1.25; push < px * 12; push += px * 0.3) {  // along the normal until free
          box = { x: peak.x + nx * push - w / 2, y: peak.y + ny * push - h / 2, w, h };
          if (!boxes.some((q) => overlaps(q, box))) break;
        }
      }
      if (box) boxes.push(box);
      parts.push({ m, path, box, peak });
    }
    const x = Math.min(...boxes.map((q) => q.x)) - 4, y = Math.min(...boxes.map((q) => q.y)) - 4;
    const frame = { x, y, w: Math.ceil(Math.max(...boxes.map((q) => q.x + q.w)) + 4 - x),
                    h: Math.ceil(Math.max(...boxes.map((q) => q.y + q.h)) + 4 - y) };
    return { parts, frame };
  }

  // A picture that holds for every step: the ranks on an ellipse filling w x h (a star:
  // `root` in the middle), one arrow per link in `links` ([src, dst]), each label in a fixed
  // box sized for the widest text it will show (`widths[i]`, 0: no label). The scale is the
  // largest whose picture fits, at least enough for every arrow to be longer than its head;
  // null when even that does not fit (the scene then tries shorter labels or smaller ranks).
  function fitted(ids, r, links, widths, w, h, root) {
    const px = smallPx(), outer = root === undefined ? ids : ids.filter((i) => i !== root);
    const moves = links.map(([src, dst], i) => ({ src, dst, text: widths[i] ? "x" : "", width: widths[i] }));
    // (a box per link even when unlabelled: its place is kept, so the moves find one)
    const at = (s) => {
      const aspect = Number.isFinite(w / h) ? w / h : 1;
      const [R, Ry] = [s * Math.max(1, aspect), s * Math.max(1, 1 / aspect) * (outer.length === 2 ? 0.5 : 1)];
      const nodes = root === undefined ? circle(ids, R, Ry) : star(root, outer, R, Ry);
      const { parts, frame } = place(nodes, moves, r, px);
      const byId = Object.fromEntries(nodes.map((n) => [n.id, n]));
      const short = Math.min(...links.map(([a, b]) => Math.hypot(byId[a].x - byId[b].x, byId[a].y - byId[b].y)));
      return { nodes, frame, boxes: parts.map((p) => p.box), short };
    };
    const ok = (L) => L.short >= 2 * r + 2.5 * px;  // an arrow longer than its head
    const fits = (L) => L.frame.w <= w && L.frame.h <= h;
    let lo = r, hi = Math.max(w, h);
    while (!ok(at(lo)) && lo < hi) lo *= 1.05;
    let best = at(lo);
    if (!Number.isFinite(w)) return best;  // no box: the smallest that is readable
    if (!fits(best)) return null;
    for (let i = 0; i < 24; i++) {
      const mid = (lo + hi) / 2, L = at(mid);
      if (fits(L) && ok(L)) { best = L; lo = mid; } else hi = mid;
    }
    return best;
  }

  // The first of (rank names, label variants) whose picture fits w x h: full names and the
  // longest labels first; `variants[v][i]`: the widest text link i shows in variant v.
  // Returns the layout with r, name(id) for the ranks' circles, and v.
  function choose(ids, links, variants, w, h, root) {
    const px = smallPx(), last = ids[ids.length - 1];
    const names = [(id) => `rank ${id}`, (id) => String(id)];
    for (const name of names) {
      const r = textWidth(name(last), px) / 2 + 12;
      for (let v = 0; v < variants.length; v++) {
        const L = fitted(ids, r, links, variants[v], w, h, root);
        if (L) return { ...L, r, name, v };
      }
    }
    const r = textWidth(String(last), px) / 2 + 12;  // nothing fits: the smallest, unlabelled
    return { ...fitted(ids, r, links, links.map(() => 0), Infinity, Infinity, root), r, name: names[1], v: variants.length };
  }

  function draw({ nodes, moves, r, title, frame }) {
    const px = smallPx();
    const { parts, frame: own } = place(nodes, moves, r, px);
    const f = frame || own;
    const root = svg("svg", { class: "topo", width: Math.ceil(f.w), height: Math.ceil(f.h),
                              viewBox: `${f.x} ${f.y} ${Math.ceil(f.w)} ${Math.ceil(f.h)}` });
    if (title) root.append(svg("title", {}, title));
    const defs = svg("defs", {});
    const colours = [...new Set(moves.map((m) => m.colour || "#333"))], me = ++uid;
    colours.forEach((col, i) => {
      const mk = svg("marker", { id: `topo-arrow-${me}-${i}`, viewBox: "0 0 10 10", refX: 8, refY: 5,
        markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse" });
      mk.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: col }));
      defs.append(mk);
    });
    root.append(defs);
    for (const n of nodes) {
      const g = svg("g", { class: `node ${n.cls || ""}`, "data-node": n.id });
      g.append(svg("circle", { cx: n.x, cy: n.y, r, fill: n.fill || "#fff", stroke: "#4c78a8", "stroke-width": 2.5 }));
      g.append(svg("text", { x: n.x, y: n.y + px * 0.35, "font-size": px, "text-anchor": "middle" }, n.label));
      root.append(g);
    }
    for (const { m, path, box } of parts) {
      const col = m.colour || "#333", mk = `topo-arrow-${me}-${colours.indexOf(col)}`;
      const g = svg("g", { class: "move", "data-src": m.src, "data-dst": m.dst, ...(m.attrs || {}) });
      g.append(svg("path", { d: path, fill: "none", stroke: col, "stroke-width": 3,
                             "marker-end": `url(#${mk})` }));
      if (!m.still) {  // a message of this step: a dot travels the arrow, then fades
        const dot = svg("circle", { r: px * 0.42, fill: col, class: "token" });
        dot.append(svg("animateMotion", { dur: "0.9s", fill: "freeze", path }));
        dot.append(svg("animate", { attributeName: "opacity", values: "1;1;0", keyTimes: "0;0.75;1",
                                    dur: "1.2s", fill: "freeze" }));
        g.append(dot);
      }
      if (box && m.text) {
        g.append(svg("text", { x: box.x + box.w / 2, y: box.y + box.h / 2 + px * 0.35, "font-size": px,
                               "text-anchor": "middle", fill: col, class: "move-label" }, m.text));
      }
      root.append(g);
    }
    return root;
  }

  return { draw, circle, star, choose };
})();
