// Scene "hsdp": one HSDP step on an R x S mesh of real rank processes. Row r of the mesh
// plays node r: its ranks shard every unit (all-gather, reduce-scatter within the node);
// each column holds the same shard on every node, and only that shard's gradient is
// all-reduced across nodes. Step k = the k-th collective (all ranks run the same ones in
// the same order), forward or backward; shown: who sent how many bytes to whom.
(() => {
  const { el } = Classroom;
  const { byName, ranks, bytes, micros, svg, textWidth, smallPx, maxOf, minOf } = Draw;
  const ORDER = { "all-gather": 0, "reduce-scatter": 1, "all-reduce": 2 };
  const COLOUR = { "all-gather": "#1b9e77", "reduce-scatter": "#d95f02", "all-reduce": "#c0392b" };
  const ARC = [1.9, 3.3];  // a wrap-around arc's depth in lines: under the labels below the ranks

  // The mesh at 1:1 (text at the page's size), laid out once for every step: ranks in one
  // box per node, the data links of any step as arrows (a ring's wrap-around as an arc
  // below the row, or beside the column), this step's drawn with their bytes, red and
  // thick when they cross nodes. minidp's header check (a small message to every peer) is
  // counted in the tables, not drawn.
  function meshLayout(mesh, links, lab) {
    const px = smallPx(), R = mesh.length, S = mesh[0].length, lh = px * 1.3;
    const colText = (c) => `replicate [${mesh.map((row) => row[c]).join(", ")}]`;
    const bw = textWidth(`rank ${Math.max(...mesh.flat())}`, px) + 20, bh = px * 1.7;
    const where = {};
    mesh.forEach((row, r) => row.forEach((rank, s) => { where[rank] = { r, s }; }));
    const has = (a, b) => links.some(([x, y]) => x === a && y === b);
    const wraps = links.filter(([a, b]) => where[a].r === where[b].r && Math.abs(where[a].s - where[b].s) > 1);
    const arcs = wraps.some(([a, b]) => has(b, a)) ? 2 : wraps.length ? 1 : 0;  // one arc per direction
    const wrapsAcross = links.some(([a, b]) => where[a].s === where[b].s && Math.abs(where[a].r - where[b].r) > 1);
    const colW = maxOf(mesh[0].map((_, c) => c), (c) => textWidth(colText(c), px)) + 16;
    const title = textWidth("node 0", px) + 20;
    const gx = Math.max(lab + 32, colW - bw, 3 * px);  // an in-node label, or one beside a column
    const pair = links.some(([a, b]) => where[a].s === where[b].s && has(b, a));  // across, both ways
    const side = wrapsAcross ? lab + 3 * px : 10;
    const x0 = 8 + Math.max(title, (colW - bw) / 2);
    // labels above, ranks, labels below — or the arcs (under the labels below) and theirs
    const nodeH = (lh + 4) + bh + (arcs ? 0.75 * ARC[arcs - 1] * lh + lh + 4 : lh + 4) + 4;
    const gy = Math.max(px * 2, 3 * px * (wrapsAcross ? 1 : 0.6), pair ? 2 * lh + 10 : 0);  // two labels
    const W = Math.ceil(x0 + S * bw + (S - 1) * gx + Math.max(0, (colW - bw) / 2) + side + 8);
    const H = Math.ceil(R * nodeH + (R - 1) * gy + lh + 12);
    const pos = {};
    mesh.forEach((row, r) => row.forEach((rank, s) => {
      pos[rank] = { x: x0 + s * (bw + gx), y: 6 + r * (nodeH + gy) + lh + 4 };
    }));
    return { px, R, S, lh, bw, bh, gx, gy, nodeH, W, H, pos, where, has, colText };
  }

  function meshPicture(mesh, L, links) {
    const { px, lh, bw, bh, nodeH, gy, W, H, pos, where, has, colText } = L;
    const root = svg("svg", { class: "mesh", width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    const defs = svg("defs", {});
    for (const [id, c] of [["hsdp-in", "#555"], ["hsdp-out", COLOUR["all-reduce"]]]) {
      const m = svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 6, markerHeight: 6,
                                orient: "auto-start-reverse" });
      m.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: c }));
      defs.append(m);
    }
    root.append(defs);
    mesh.forEach((row, r) => {
      const y = 6 + r * (nodeH + gy);
      root.append(svg("rect", { x: 4, y, width: W - 8, height: nodeH, rx: 10, fill: "#f1f4f8", stroke: "#9aa7b8" }));
      const name = svg("text", { x: 12, y: pos[row[0]].y + bh / 2 + px * 0.35, "font-size": px, class: "node-label" }, `node ${r}`);
      name.append(svg("title", {}, `node ${r}: shard group [${row.join(", ")}]`));
      root.append(name);
      for (const rank of row) {
        const g = svg("g", { "data-mesh-rank": rank }), p = pos[rank];
        g.append(svg("rect", { x: p.x, y: p.y, width: bw, height: bh, rx: 6, fill: "#fff", stroke: "#4c78a8", "stroke-width": 2 }));
        g.append(svg("text", { x: p.x + bw / 2, y: p.y + bh / 2 + px * 0.35, "font-size": px, "text-anchor": "middle" }, `rank ${rank}`));
        root.append(g);
      }
    });
    mesh[0].forEach((_, c) => {  // the columns: the same shard on every node
      const x = pos[mesh[0][c]].x + bw / 2, col = mesh.map((row) => row[c]);
      root.append(svg("line", { x1: x, x2: x, y1: pos[col[0]].y + bh, y2: pos[col[col.length - 1]].y, stroke: "#bbb", "stroke-dasharray": "4 4" }));
      root.append(svg("text", { x, y: H - 6, "font-size": px, "text-anchor": "middle", class: "node-label" }, colText(c)));
    });
    for (const l of links) {
      const a = pos[l.src], b = pos[l.dst], wa = where[l.src], wb = where[l.dst];
      const across = wa.r !== wb.r, both = has(l.dst, l.src);
      let d, tx, ty, anchor = "middle";
      if (!across && Math.abs(wa.s - wb.s) === 1) {  // neighbours in a node: straight; label above (or below)
        const up = both && l.src > l.dst ? 1 : -1, y = a.y + bh / 2 + (both ? up * bh / 4 : 0);
        const x1 = a.x < b.x ? a.x + bw : a.x, x2 = a.x < b.x ? b.x : b.x + bw;
        d = `M${x1},${y} L${x2},${y}`;
        tx = (x1 + x2) / 2; ty = both && up > 0 ? a.y + bh + px : a.y - 5;
      } else if (!across) {  // a ring's wrap-around in a node: an arc under the row (the other way: deeper)
        const y = a.y + bh, drop = lh * ARC[both && l.src < l.dst ? 1 : 0];  // deepest: 3/4 of it
        d = `M${a.x + bw / 2},${y} C${a.x + bw / 2},${y + drop} ${b.x + bw / 2},${y + drop} ${b.x + bw / 2},${y + 2}`;
        tx = (a.x + b.x + bw) / 2; ty = y + 0.75 * drop + px;
      } else if (Math.abs(wa.r - wb.r) === 1) {  // neighbouring nodes: vertical; labels to the right
        const down = a.y < b.y, x = a.x + bw / 2 + (both ? (down ? -12 : 12) : 0);
        const y1 = down ? a.y + bh : a.y, y2 = down ? b.y : b.y + bh;
        d = `M${x},${y1} L${x},${y2}`;
        tx = a.x + bw / 2 + (both ? 20 : 8);  // both ways: the down one's label above the other's
        ty = (y1 + y2) / 2 + px * 0.35 + (both ? (down ? -0.55 : 0.55) * lh : 0); anchor = "start";
      } else {  // a column's wrap-around: an arc beside the column
        const x = a.x + bw, out = bw * 0.6;
        d = `M${x},${a.y + bh / 2} C${x + out},${a.y + bh / 2} ${x + out},${b.y + bh / 2} ${x + 2},${b.y + bh / 2}`;
        tx = x + out * 0.8; ty = (a.y + b.y + bh) / 2 + px * 0.35; anchor = "start";
      }
      const g = svg("g", { class: "link", "data-src": l.src, "data-dst": l.dst, "data-bytes": l.bytes,
                           "data-scope": across ? "inter" : "intra" });
      g.append(svg("path", { d, fill: "none", stroke: across ? COLOUR["all-reduce"] : "#555",
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

    // Every step's data links (headers aside) and the widest byte label: one layout for all.
    const data = sends.filter((e) => !e.args.header);
    const dataLinks = [...new Set(data.map((e) => `${e.pid}>${e.args.to}`))].map((k) => k.split(">").map(Number));
    const perStep = {};
    for (const e of data) { const key = `${keyOf(e)}/${e.pid}>${e.args.to}`; perStep[key] = (perStep[key] || 0) + e.args.bytes; }
    const lab = (px) => maxOf(Object.values(perStep), (b) => textWidth(bytes(b), px), 0);

    // What these bytes would take on a cluster: NVLink-class links in a node, a network
    // card across nodes (the what-if's two bandwidths, which its sliders set).
    function bandwidths(done) {
      const inB = Number(Classroom.param("bnode")) || 450, outB = Number(Classroom.param("bnet")) || 50;
      const per = all.map((r) => done.filter((e) => e.pid === r));
      const intra = maxOf(per, (l) => l.filter((e) => nodeOf[e.args.to] === nodeOf[e.pid]).reduce((s, e) => s + e.args.bytes, 0));
      const inter = maxOf(per, (l) => l.filter((e) => nodeOf[e.args.to] !== nodeOf[e.pid]).reduce((s, e) => s + e.args.bytes, 0));
      return el("p", { class: "formula", id: "hsdp-bandwidth", "data-intra": intra, "data-inter": inter,
        text: `On a cluster (β in a node ${inB} GB/s, NVLink-class; across nodes ${outB} GB/s, a network card; set ` +
          `them in What if): the busiest rank's bytes so far take ${micros(intra / (inB * 1000))} in its node and ` +
          `${micros(inter / (outB * 1000))} across — each byte across costs ${(inB / outB).toFixed(0)}× one in the node, ` +
          "which is why HSDP keeps the all-gathers and reduce-scatters inside it." });
    }

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
        for (const e of now.filter((q) => !q.args.header)) {
          const key = `${e.pid}>${e.args.to}`;
          perLink[key] = perLink[key] || { src: e.pid, dst: e.args.to, bytes: 0 };
          perLink[key].bytes += e.args.bytes;
        }
        const px = smallPx(), L = meshLayout(mesh, dataLinks, lab(px));
        const main = Draw.main(el("div", { class: "split" }, meshPicture(mesh, L, Object.values(perLink)), rankTable(now, done)));
        stage.append(main);
        const current = new Set(now.map((e) => e.id));
        for (const e of now) { const s_ = holder(e); if (s_) current.add(s_.id); }
        main.append(Timeline.draw({
          id: "hsdp", events: [...spans, ...sends], width: room.w, step: k, starts, current,
          height: room.h - main.offsetHeight - px,
          rowStarts: (i) => keys.map((key) => { const m = sends.filter((e) => e.pid === all[i] && keyOf(e) === key);
                                                return m.length ? minOf(m, (e) => e.ts) : undefined; }),
          rows: all.map((r) => ({ pid: r, lanes: ["comm", "classroom"], label: `rank ${r}` })),
          colour: (e) => (e.name === "hsdp send" ? (e.args.group === "shard" ? "#555" : COLOUR["all-reduce"]) :
            e.name.startsWith("hsdp all-gather") ? COLOUR["all-gather"] : COLOUR["reduce-scatter"]),
          label: (e) => (e.name === "hsdp send" ? "" : [e.name.replace("hsdp ", "").replace("reduce-scatter", "reduce-scatter + all-reduce"),
            e.name.replace("hsdp all-gather ", "AG ").replace("hsdp reduce-scatter ", "RS+AR ").replace("unit ", "")]),
          pick: (e) => (e.name === "hsdp send" ? stepOf[keyOf(e)] : null),
          legend: [[COLOUR["all-gather"], "all-gather (in the node)"], [COLOUR["reduce-scatter"], "reduce-scatter, then all-reduce"],
                   ["#555", "a message in the node", true], [COLOUR["all-reduce"], "a message across nodes", true]],
        }));
        stage.append(bandwidths(done));
        stage.append(unitTable(cur, done));
      },
    };
  });
})();
