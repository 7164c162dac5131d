// Scene "hsdp": one HSDP step on an R x S mesh of real rank processes. Row r of the mesh
// plays node r: its ranks shard every unit (all-gather, reduce-scatter within the node);
// each column holds the same shard on every node, and only that shard's gradient is
// all-reduced across nodes. Step k = the k-th collective (all ranks run the same ones in
// the same order), forward or backward; shown: who sent how many bytes to whom.
(() => {
  const { el } = Classroom;
  const { byName, ranks, bytes, svg, textWidth, smallPx, maxOf, minOf } = Draw;
  const ORDER = { "all-gather": 0, "reduce-scatter": 1, "all-reduce": 2 };
  const COLOUR = { "all-gather": "#1b9e77", "reduce-scatter": "#d95f02", "all-reduce": "#c0392b" };

  // The mesh at 1:1 (text at the page's size): ranks in one box per node, this step's
  // messages as arrows with their bytes, red and thick when they cross nodes.
  function meshPicture(mesh, nodeOf, links) {
    const px = smallPx(), R = mesh.length, S = mesh[0].length, lh = px * 1.3;
    const colText = (c) => `replicate group [${mesh.map((row) => row[c]).join(", ")}]`;
    const bw = textWidth("rank 00", px) + 24, bh = px * 2.2;
    const lab = maxOf(links, (l) => textWidth(bytes(l.bytes), px), textWidth("00.0 KiB", px)) + 12;
    const colW = maxOf(mesh[0].map((_, c) => c), (c) => textWidth(colText(c), px));
    const gx = Math.max(2 * lab + 40, colW - bw + 24);  // room for both arrows' labels, and the columns'
    // each node's name on its left, where no arrow runs
    const title = maxOf(mesh, (row) => textWidth(`shard group [${row.join(", ")}]`, px)) + 20;
    const x0 = 10 + title + Math.max(lab + 20, colW / 2 - bw / 2 + 14);
    const gy = Math.max(lh * 2, 2 * px);
    const nodeH = Math.max(lh + 10 + bh + lh + 10, 2 * lh + 20);  // labels above arrows, ranks, below
    const W = x0 + S * bw + (S - 1) * gx + Math.max(lab + 20, colW / 2 - bw / 2 + 14);
    const H = R * nodeH + (R - 1) * gy + lh + 16;
    const gapMid = (y) => {  // the middle of the gap between two nodes nearest to y
      let best = 8 + nodeH + gy / 2;
      for (let r = 1; r < R; r++) { const m = 8 + r * nodeH + (r - 1) * gy + gy / 2; if (Math.abs(m - y) < Math.abs(best - y)) best = m; }
      return best;
    };
    const root = svg("svg", { class: "mesh", width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    const defs = svg("defs", {});
    for (const [id, c] of [["hsdp-in", "#555"], ["hsdp-out", COLOUR["all-reduce"]]]) {
      const m = svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 6, markerHeight: 6,
                                orient: "auto-start-reverse" });
      m.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: c }));
      defs.append(m);
    }
    root.append(defs);
    const pos = {};
    mesh.forEach((row, r) => {
      const y = 8 + r * (nodeH + gy);
      root.append(svg("rect", { x: 10, y, width: W - 20, height: nodeH, rx: 10, fill: "#f1f4f8", stroke: "#9aa7b8" }));
      root.append(svg("text", { x: 22, y: y + nodeH / 2 - lh * 0.2, "font-size": px, class: "node-label" }, `node ${r}`));
      root.append(svg("text", { x: 22, y: y + nodeH / 2 + lh * 0.8, "font-size": px, class: "node-label" },
                      `shard group [${row.join(", ")}]`));
      row.forEach((rank, s) => {
        const x = x0 + s * (bw + gx);
        pos[rank] = { x, y: y + (nodeH - bh) / 2 };
        const g = svg("g", { "data-mesh-rank": rank });
        g.append(svg("rect", { x, y: pos[rank].y, width: bw, height: bh, rx: 6, fill: "#fff", stroke: "#4c78a8", "stroke-width": 2 }));
        g.append(svg("text", { x: x + bw / 2, y: pos[rank].y + bh / 2 + px * 0.35, "font-size": px, "text-anchor": "middle" }, `rank ${rank}`));
        root.append(g);
      });
    });
    mesh[0].forEach((_, c) => {  // the columns: the same shard on every node
      const x = x0 + c * (bw + gx) + bw / 2, col = mesh.map((row) => row[c]);
      root.append(svg("line", { x1: x, x2: x, y1: pos[col[0]].y + bh, y2: pos[col[col.length - 1]].y, stroke: "#bbb", "stroke-dasharray": "4 4" }));
      root.append(svg("text", { x, y: H - 6, "font-size": px,
                                "text-anchor": "middle", class: "node-label" }, colText(c)));
    });
    for (const l of links) {
      const a = pos[l.src], b = pos[l.dst], across = nodeOf[l.src] !== nodeOf[l.dst];
      const up = l.src < l.dst ? -1 : 1;  // the two directions of a pair side by side
      let x1, y1, x2, y2, tx, ty, anchor;
      if (across) {  // vertical, between the rows; label beside its own arrow
        x1 = x2 = a.x + bw / 2 + up * 12;
        y1 = a.y < b.y ? a.y + bh : a.y; y2 = a.y < b.y ? b.y : b.y + bh;
        tx = x1 + up * 8; ty = gapMid((y1 + y2) / 2) + px * 0.35; anchor = up < 0 ? "end" : "start";
      } else {  // horizontal, within the node; label above (one way) or below (the other)
        y1 = y2 = a.y + bh / 2 + up * (bh / 4);
        x1 = a.x < b.x ? a.x + bw : a.x; x2 = a.x < b.x ? b.x : b.x + bw;
        tx = (x1 + x2) / 2; ty = up < 0 ? a.y - 4 : a.y + bh + px; anchor = "middle";
      }
      const g = svg("g", { class: "link", "data-src": l.src, "data-dst": l.dst, "data-bytes": l.bytes,
                           "data-scope": across ? "inter" : "intra" });
      g.append(svg("line", { x1, y1, x2, y2, stroke: across ? COLOUR["all-reduce"] : "#555",
        "stroke-width": across ? 4 : 2.5, "marker-end": `url(#${across ? "hsdp-out" : "hsdp-in"})` }));
      g.append(svg("text", { x: tx, y: ty, "font-size": px, "text-anchor": anchor,
                             fill: across ? COLOUR["all-reduce"] : "#333" }, bytes(l.bytes)));
      root.append(g);
    }
    return root;
  }

  Classroom.scene("hsdp", (events) => {
    const sends = byName(events, "hsdp send");
    const meshEv = byName(events, "hsdp mesh");
    if (!sends.length || !meshEv.length) return null;
    const mesh = meshEv[0].args.mesh, nodeOf = {};
    mesh.forEach((row, r) => row.forEach((rank) => { nodeOf[rank] = r; }));
    const groups = Object.fromEntries(meshEv.map((e) => [e.pid, e.args]));
    const all = ranks(meshEv);
    const keyOf = (e) => `${e.args.call}/${e.args.collective}`;
    const keys = [...new Set(sends.map(keyOf))].sort((a, b) => {
      const [ca, na] = a.split("/"), [cb, nb] = b.split("/");
      return Number(ca) - Number(cb) || ORDER[na] - ORDER[nb];
    });
    const stepOf = Object.fromEntries(keys.map((key, i) => [key, i + 1]));
    const unitEv = byName(events, "hsdp unit").filter((e) => e.pid === all[0]);
    const units = unitEv.map((e) => e.args.unit), size = Object.fromEntries(unitEv.map((e) => [e.args.unit, e.args]));
    const spans = events.filter((e) => e.ph === "X" && e.lane === "comm" && /^hsdp (all-gather|reduce-scatter) /.test(e.name));
    const starts = keys.map((key) => minOf(sends.filter((e) => keyOf(e) === key), (e) => e.ts));
    const holder = (e) => spans.find((s) => s.pid === e.pid && s.ts <= e.ts && e.ts <= s.ts + s.dur);

    function rankTable(now, done) {
      const table = el("table", { class: "grid", id: "hsdp-ranks" }, el("tr", {},
        ...["bytes sent by", "this step", "so far: in node", "across"].map((t) => el("th", { text: t }))));
      for (const r of all) {
        const sum = (list, f) => list.filter((e) => e.pid === r && f(e)).reduce((s, e) => s + e.args.bytes, 0);
        const step = sum(now, () => true);
        const intra = sum(done, (e) => nodeOf[e.args.to] === nodeOf[r]), inter = sum(done, (e) => nodeOf[e.args.to] !== nodeOf[r]);
        table.append(el("tr", { "data-rank": r, "data-node": nodeOf[r], "data-shard": JSON.stringify(groups[r].shard),
            "data-replicate": JSON.stringify(groups[r].replicate), "data-step-bytes": step, "data-intra": intra, "data-inter": inter },
          el("th", { text: `rank ${r} (node ${nodeOf[r]})` }), el("td", { text: step ? bytes(step) : "" }),
          el("td", { text: bytes(intra) }), el("td", { class: inter ? "sent" : "", text: bytes(inter) })));
      }
      return table;
    }

    function unitTable(cur, done) {
      const ut = el("table", { class: "grid", id: "hsdp-units" }, el("tr", {},
        ...["unit", "full", "shard (1/S)", "all-gather (node)", "reduce-scatter (node)", "all-reduce (across)"]
          .map((t) => el("th", { text: t }))));
      for (const u of units) {
        const tr = el("tr", {}, el("th", { text: u === "root" ? "root (last layer)" : u }),
                      el("td", { text: bytes(size[u].full) }), el("td", { text: bytes(size[u].shard) }));
        for (const c of Object.keys(ORDER)) {
          const per = all.map((r) => done.filter((e) => e.pid === r && e.args.unit === u && e.args.collective === c)
            .reduce((s, e) => s + e.args.bytes, 0));
          const same = per.every((b) => b === per[0]);
          const td = el("td", { "data-unit": u, "data-collective": c, "data-bytes": JSON.stringify(per),
            text: per[0] || !same ? (same ? `${bytes(per[0])} each` : per.map(bytes).join(" / ")) : "" });
          if (cur && cur.args.unit === u && cur.args.collective === c) td.classList.add("changed");
          tr.append(td);
        }
        ut.append(tr);
      }
      return ut;
    }

    return {
      count: keys.length + 1,
      render(k, stage, caption, room) {
        const done = sends.filter((e) => stepOf[keyOf(e)] <= k), now = sends.filter((e) => stepOf[keyOf(e)] === k);
        const cur = now[0];
        if (!cur) {
          caption.append(el("span", { "data-collective": "", "data-unit": "",
            text: `${mesh.length} nodes x ${mesh[0].length} ranks: one HSDP step (after a first one)` }));
        } else {
          const where = cur.args.group === "shard" ? "within each node" : "across nodes";
          const again = cur.args.phase === "backward" && cur.args.collective === "all-gather" ? " (re-gathered for backward)" : "";
          caption.append(el("span", { class: `phase-${cur.args.collective}`, "data-collective": cur.args.collective,
            "data-unit": cur.args.unit, "data-group": cur.args.group, "data-phase": cur.args.phase || "",
            text: `${k}. ${cur.args.phase || ""}: ${cur.args.collective} ${cur.args.unit}${again}, ${where}` }));
        }
        const perLink = {};
        for (const e of now) {
          const key = `${e.pid}>${e.args.to}`;
          perLink[key] = perLink[key] || { src: e.pid, dst: e.args.to, bytes: 0 };
          perLink[key].bytes += e.args.bytes;
        }
        stage.append(Draw.main(el("div", { class: "row" }, meshPicture(mesh, nodeOf, Object.values(perLink)), rankTable(now, done))));
        const current = new Set(now.map((e) => e.id));
        for (const e of now) { const s = holder(e); if (s) current.add(s.id); }
        stage.append(Timeline.draw({
          id: "hsdp", events: [...spans, ...sends], width: room.w, step: k, starts, current,
          rowStarts: (i) => keys.map((key) => { const m = sends.filter((e) => e.pid === all[i] && keyOf(e) === key);
                                                return m.length ? minOf(m, (e) => e.ts) : undefined; }),
          rows: all.map((r) => ({ pid: r, lanes: ["comm", "classroom"], label: `rank ${r} comm` })),
          colour: (e) => (e.name === "hsdp send" ? (e.args.group === "shard" ? "#555" : COLOUR["all-reduce"]) :
            e.name.startsWith("hsdp all-gather") ? COLOUR["all-gather"] : COLOUR["reduce-scatter"]),
          label: (e) => (e.name === "hsdp send" ? "" : [e.name.replace("hsdp ", "").replace("reduce-scatter", "reduce-scatter + all-reduce"),
            e.name.replace("hsdp all-gather ", "AG ").replace("hsdp reduce-scatter ", "RS+AR ").replace("unit ", "")]),
          pick: (e) => (e.name === "hsdp send" ? stepOf[keyOf(e)] : null),
          legend: [[COLOUR["all-gather"], "all-gather (in the node)"], [COLOUR["reduce-scatter"], "reduce-scatter, then all-reduce"],
                   ["#555", "a message in the node", true], [COLOUR["all-reduce"], "a message across nodes", true]],
        }));
        stage.append(unitTable(cur, done));
      },
    };
  });
})();
