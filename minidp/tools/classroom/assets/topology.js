// Pictures of who sends to whom, that move: ranks as circles (on a ring, or a star around
// the server), this step's messages as curved arrows, each with a dot travelling from
// sender to receiver when the step is shown, and a label (the chunk, its values or bytes)
// placed beside its arrow where it overlaps no rank and no other label.
// draw({nodes: [{id, label, x, y, cls}], moves: [{src, dst, text, colour, attrs, still}], r})
// -> svg (still: a link drawn faint for orientation, no dot)
const Topology = (() => {
  const { svg, textWidth, smallPx } = Draw;
  let uid = 0;  // marker ids, unique on the page

  function circle(ids, R) {
    const from = ids.length === 2 ? Math.PI : -Math.PI / 2;  // two ranks side by side, else from the top
    return ids.map((id, i) => {
      const a = from + (2 * Math.PI * i) / ids.length;
      return { id, x: R * Math.cos(a), y: R * Math.sin(a) };
    });
  }
  function star(root, others, R) {
    return [{ id: root, x: 0, y: 0 }, ...circle(others, R)];
  }

  const overlaps = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;

  function draw({ nodes, moves, r, title }) {
    const px = smallPx(), at = Object.fromEntries(nodes.map((n) => [n.id, n]));
    const cx = nodes.reduce((s, n) => s + n.x, 0) / nodes.length;
    const cy = nodes.reduce((s, n) => s + n.y, 0) / nodes.length;
    const boxes = nodes.map((n) => ({ x: n.x - r, y: n.y - r, w: 2 * r, h: 2 * r }));
    const parts = [];
    let id = 0;
    for (const m of moves) {
      const a = at[m.src], b = at[m.dst];
      if (!a || !b) continue;
      const dx = b.x - a.x, dy = b.y - a.y, d = Math.hypot(dx, dy) || 1;
      let nx = -dy / d, ny = dx / d;  // the right-hand normal ...
      const mx = (a.x + b.x) / 2, my = (a.y + b.y) / 2;
      if (Math.hypot(mx - cx, my - cy) > d * 1e-3 && (mx - cx) * nx + (my - cy) * ny < 0) { nx = -nx; ny = -ny; }
      const bend = d * 0.16;  // ... or away from the picture's middle: arrows bow outwards
      const c = { x: mx + nx * bend, y: my + ny * bend };
      const p0 = { x: a.x + (dx / d) * r, y: a.y + (dy / d) * r };
      const p1 = { x: b.x - (dx / d) * (r + 4), y: b.y - (dy / d) * (r + 4) };
      const path = `M${p0.x},${p0.y} Q${c.x},${c.y} ${p1.x},${p1.y}`;
      const peak = { x: 0.25 * p0.x + 0.5 * c.x + 0.25 * p1.x, y: 0.25 * p0.y + 0.5 * c.y + 0.25 * p1.y };
      let box = null;
      if (m.text) {
        const w = textWidth(m.text, px) + 8, h = px * 1.3;
        for (let push = px; push < px * 12; push += px * 0.6) {  // along the normal until free
          box = { x: peak.x + nx * push - w / 2, y: peak.y + ny * push - h / 2, w, h };
          if (!boxes.some((q) => overlaps(q, box))) break;
        }
        boxes.push(box);
      }
      parts.push({ m, path, box, id: ++id });
    }
    const minX = Math.min(...boxes.map((q) => q.x)) - 8, minY = Math.min(...boxes.map((q) => q.y)) - 8;
    const maxX = Math.max(...boxes.map((q) => q.x + q.w)) + 8, maxY = Math.max(...boxes.map((q) => q.y + q.h)) + 8;
    const W = Math.ceil(maxX - minX), H = Math.ceil(maxY - minY);
    const root = svg("svg", { class: "topo", width: W, height: H, viewBox: `${minX} ${minY} ${W} ${H}` });
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
      g.append(svg("path", { d: path, fill: "none", stroke: col, "stroke-width": m.width || 3,
                             "marker-end": `url(#${mk})` }));
      if (!m.still) {  // a message of this step: a dot travels the arrow, then fades
        const dot = svg("circle", { r: px * 0.42, fill: col, class: "token" });
        dot.append(svg("animateMotion", { dur: "0.9s", fill: "freeze", path }));
        dot.append(svg("animate", { attributeName: "opacity", values: "1;1;0", keyTimes: "0;0.75;1",
                                    dur: "1.2s", fill: "freeze" }));
        g.append(dot);
      }
      if (box) {
        g.append(svg("text", { x: box.x + box.w / 2, y: box.y + box.h / 2 + px * 0.35, "font-size": px,
                               "text-anchor": "middle", fill: col, class: "move-label" }, m.text));
      }
      root.append(g);
    }
    return root;
  }

  return { draw, circle, star };
})();
