// Scene "hsdp": one HSDP step on an R x S mesh of real rank processes. Row r of the mesh
// plays node r: its ranks shard every unit (all-gather, reduce-scatter within the node);
// each column holds the same shard on every node, and only that shard's gradient is
// all-reduced across nodes. Step k = the k-th collective (all ranks run the same ones in
// the same order); shown: who sent how many bytes to whom, within vs across nodes.
(() => {
  const { el, byName, ranks, bytes } = Classroom;
  const NS = "http://www.w3.org/2000/svg";
  const ORDER = { "all-gather": 0, "reduce-scatter": 1, "all-reduce": 2 };
  const COLOUR = { "all-gather": "#1b9e77", "reduce-scatter": "#d95f02", "all-reduce": "#c00" };
  const svg = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // The mesh: boxes for ranks inside one box per node; this step's messages as arrows
  // (one per sender and receiver, its bytes written on it), red when they cross nodes.
  function meshPicture(mesh, nodeOf, links) {
    const R = mesh.length, S = mesh[0].length, bw = 120, bh = 44, gx = 150, gy = 80;
    const W = 60 + S * bw + (S - 1) * gx + 40, H = 50 + R * (bh + 48) + (R - 1) * gy;
    const pos = {};
    const root = svg("svg", { class: "mesh", viewBox: `0 0 ${W} ${H}`, width: W, height: H });
    const defs = svg("defs", {});
    for (const [id, c] of [["hsdp-in", "#555"], ["hsdp-out", "#c00"]]) {
      const m = svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
                                markerHeight: 7, orient: "auto-start-reverse" });
      m.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: c }));
      defs.append(m);
    }
    root.append(defs);
    mesh.forEach((row, r) => {
      const y = 20 + r * (bh + 48 + gy);
      root.append(svg("rect", { x: 10, y, width: W - 20, height: bh + 40, rx: 10,
                                fill: "#f1f4f8", stroke: "#9aa7b8" }));
      // between the first two columns: arrows across nodes run down the columns
      root.append(svg("text", { x: 60 + bw + gx / 2, y: y + 16, "text-anchor": "middle",
                                class: "node-label" },
                      `node ${r}: shard group [${row.join(", ")}]`));
      row.forEach((rank, s) => {
        const x = 60 + s * (bw + gx);
        pos[rank] = { x, y: y + 32 };
        const g = svg("g", { "data-mesh-rank": rank });
        g.append(svg("rect", { x, y: y + 32, width: bw, height: bh, rx: 6, fill: "#fff",
                               stroke: "#4c72b0", "stroke-width": 2 }));
        g.append(svg("text", { x: x + bw / 2, y: y + 59, "text-anchor": "middle" }, `rank ${rank}`));
        root.append(g);
      });
    });
    mesh[0].forEach((_, s) => {  // the columns: the same shard on every node
      const x = 60 + s * (bw + gx) + bw / 2, col = mesh.map((row) => row[s]);
      const y1 = pos[col[0]].y + bh, y2 = pos[col[col.length - 1]].y;
      root.append(svg("line", { x1: x, x2: x, y1, y2, stroke: "#bbb", "stroke-dasharray": "4 4" }));
      root.append(svg("text", { x, y: H - 6, "text-anchor": "middle", class: "node-label" },
                      `column: replicate group [${col.join(", ")}]`));
    });
    for (const l of links) {
      const a = pos[l.src], b = pos[l.dst];
      const across = nodeOf[l.src] !== nodeOf[l.dst];
      const up = l.src < l.dst ? -1 : 1;  // the two directions of a pair side by side
      let x1, y1, x2, y2;
      if (across) {  // vertical, between the rows
        const off = up * 14;
        x1 = x2 = a.x + bw / 2 + off;
        y1 = a.y < b.y ? a.y + bh : a.y; y2 = a.y < b.y ? b.y : b.y + bh;
      } else {
        const off = up * 9;
        y1 = y2 = a.y + bh / 2 + off;
        x1 = a.x < b.x ? a.x + bw : a.x; x2 = a.x < b.x ? b.x : b.x + bw;
      }
      const g = svg("g", { class: "link", "data-src": l.src, "data-dst": l.dst,
                           "data-bytes": l.bytes, "data-scope": across ? "inter" : "intra" });
      g.append(svg("line", { x1, y1, x2, y2, stroke: across ? "#c00" : "#555",
                             "stroke-width": across ? 3 : 2,
                             "marker-end": `url(#${across ? "hsdp-out" : "hsdp-in"})` }));
      const tx = (x1 + x2) / 2 + (across ? up * -6 + (up < 0 ? -70 : 8) : -30);
      const ty = (y1 + y2) / 2 + (across ? 4 : up * 8 + (up < 0 ? -2 : 10));
      g.append(svg("text", { x: tx, y: ty, fill: across ? "#c00" : "#333" }, bytes(l.bytes)));
      root.append(g);
    }
    return root;
  }

  Classroom.scene("hsdp", (events) => {
    const sends = byName(events, "hsdp send");
    const meshEv = byName(events, "hsdp mesh");
    if (!sends.length || !meshEv.length) return null;
    const mesh = meshEv[0].args.mesh;
    const nodeOf = {};
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
    const units = unitEv.map((e) => e.args.unit);
    const size = Object.fromEntries(unitEv.map((e) => [e.args.unit, e.args]));
    const spans = events.filter((e) => e.ph === "X" && e.lane === "comm" &&
                                       /^hsdp (all-gather|reduce-scatter) /.test(e.name));
    return {
      count: keys.length + 1,
      render(k, stage, caption) {
        const done = sends.filter((e) => stepOf[keyOf(e)] <= k);
        const now = sends.filter((e) => stepOf[keyOf(e)] === k);
        const cur = now[0];
        if (!cur) {
          caption.append(el("span", { "data-collective": "", "data-unit": "",
            text: `${mesh.length} nodes x ${mesh[0].length} ranks: one HSDP step (after a first one)` }));
        } else {
          const where = cur.args.group === "shard" ? "within each node (shard group)" :
            "across nodes (replicate group)";
          caption.append(el("span", { class: `phase-${cur.args.collective}`,
            "data-collective": cur.args.collective, "data-unit": cur.args.unit,
            "data-group": cur.args.group, text: `${k}. ${cur.args.collective} ${cur.args.unit} ${where}` }));
        }
        const perLink = {};
        for (const e of now) {
          const key = `${e.pid}>${e.args.to}`;
          perLink[key] = perLink[key] || { src: e.pid, dst: e.args.to, bytes: 0 };
          perLink[key].bytes += e.args.bytes;
        }
        stage.append(meshPicture(mesh, nodeOf, Object.values(perLink)));

        // bytes each rank sent: in this collective, and so far within / across nodes
        const table = el("table", { class: "grid", id: "hsdp-ranks" }, el("tr", {},
          ...["rank", "shards with", "replicates with", "this step",
              "so far: within node", "so far: across nodes"].map((t) => el("th", { text: t }))));
        for (const r of all) {
          const sum = (list, f) => list.filter((e) => e.pid === r && f(e))
            .reduce((s, e) => s + e.args.bytes, 0);
          const step = sum(now, () => true);
          const intra = sum(done, (e) => nodeOf[e.args.to] === nodeOf[r]);
          const inter = sum(done, (e) => nodeOf[e.args.to] !== nodeOf[r]);
          table.append(el("tr", { "data-rank": r, "data-node": nodeOf[r],
              "data-shard": JSON.stringify(groups[r].shard),
              "data-replicate": JSON.stringify(groups[r].replicate),
              "data-step-bytes": step, "data-intra": intra, "data-inter": inter },
            el("th", { text: `rank ${r} (node ${nodeOf[r]})` }),
            el("td", { text: groups[r].shard.join(", ") }),
            el("td", { text: groups[r].replicate.join(", ") }),
            el("td", { text: step ? bytes(step) : "" }),
            el("td", { text: bytes(intra) }), el("td", { class: inter ? "sent" : "", text: bytes(inter) })));
        }
        stage.append(table);

        // per unit: what it holds, and what each of its collectives sent so far (per rank)
        const ut = el("table", { class: "grid", id: "hsdp-units" }, el("tr", {},
          ...["unit", "full", "shard (1/S)", "all-gather (node)", "reduce-scatter (node)",
              "all-reduce (across)"].map((t) => el("th", { text: t }))));
        for (const u of units) {
          const tr = el("tr", {}, el("th", { text: u }), el("td", { text: bytes(size[u].full) }),
                        el("td", { text: bytes(size[u].shard) }));
          for (const c of Object.keys(ORDER)) {
            const per = all.map((r) => done.filter((e) => e.pid === r && e.args.unit === u &&
              e.args.collective === c).reduce((s, e) => s + e.args.bytes, 0));
            const same = per.every((b) => b === per[0]);
            const td = el("td", { "data-unit": u, "data-collective": c, "data-bytes": JSON.stringify(per),
              text: per[0] || !same ? (same ? `${bytes(per[0])} each` : per.map(bytes).join(" / ")) : "" });
            if (cur && cur.args.unit === u && cur.args.collective === c) td.classList.add("changed");
            tr.append(td);
          }
          ut.append(tr);
        }
        stage.append(ut);

        const rows = all.map((r) => ({ pid: r, lanes: ["comm", "classroom"], label: `rank ${r} comm` }));
        const colour = (e) => (e.name === "hsdp send" ? (e.args.group === "shard" ? "#888" : "#c00") :
          e.name.startsWith("hsdp all-gather") ? COLOUR["all-gather"] :
          e.name.startsWith("hsdp reduce-scatter") ? COLOUR["reduce-scatter"] : null);
        const label = (e) => e.name.replace("hsdp all-gather ", "AG ").replace("hsdp reduce-scatter ", "RS+AR ");
        const cursor = cur ? Math.min(...now.map((e) => e.ts)) : Math.min(...sends.map((e) => e.ts));
        stage.append(Timeline.draw([...spans, ...sends], rows, cursor, colour, label));
      },
    };
  });
})();
