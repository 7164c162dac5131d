// Scenes "ring" (a real ring all-reduce, step by step, with every chunk's values) and
// "traffic" (parameter server vs ring: bytes per link, message by message).
(() => {
  const { el, byName, ranks, bytes } = Classroom;

  Classroom.scene("ring", (events) => {
    const inputs = byName(events, "ring inputs");
    const steps = byName(events, "ring step");
    if (!inputs.length || !steps.length) return null;
    const world = inputs[0].args.world, chunks = inputs[0].args.chunks;
    const input = {}, result = {}, at = {};
    for (const e of inputs) input[e.pid] = e.args.holds;
    for (const e of byName(events, "ring result")) result[e.pid] = e.args;
    for (const e of steps) at[`${e.args.step}/${e.pid}`] = e;
    const count = 2 * (world - 1) + 1;
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    return {
      count,
      render(k, stage, caption) {
        const now = ranks(inputs).map((r) => at[`${k}/${r}`]).filter(Boolean);
        if (k === 0) caption.textContent = `Inputs: ${world} ranks, ${chunks.length} chunks each`;
        else {
          const ph = now[0].args.phase, i = k <= world - 1 ? k : k - (world - 1);
          caption.append(el("span", { class: `phase-${ph}`, "data-phase": ph,
                                      text: `step ${k}: ${ph} ${i} of ${world - 1}` }));
        }
        const head = el("tr", {}, el("th", { text: "" }));
        chunks.forEach(([lo, hi], c) => head.append(el("th", { text: `chunk ${c} [${lo}:${hi}]` })));
        const table = el("table", { class: "grid", id: "ring-grid" }, head);
        for (const r of ranks(inputs)) {
          const holds = k === 0 ? input[r] : at[`${k}/${r}`].args.holds;
          const tr = el("tr", {}, el("th", { text: `rank ${r}` }));
          holds.forEach((vals, c) => {
            const td = el("td", { "data-rank": r, "data-chunk": c,
                                  "data-values": JSON.stringify(vals), text: vals.join(" ") });
            const sent = now.find((e) => e.pid === r);
            if (sent && sent.args.chunk === c) td.classList.add("sent");
            if (now.some((e) => e.args.to === r && e.args.chunk === c)) td.classList.add("changed");
            const fin = result[r] && result[r].result.slice(chunks[c][0], chunks[c][1]);
            if (fin && same(fin, vals)) td.classList.add("done");
            tr.append(td);
          });
          table.append(tr);
        }
        stage.append(table);
        const moves = el("div", { class: "moves" });
        for (const e of now) {
          moves.append(el("div", { "data-src": e.pid, "data-dst": e.args.to,
            text: `rank ${e.pid} -> rank ${e.args.to}: chunk ${e.args.chunk} [${e.args.values.join(", ")}]` }));
        }
        if (k === count - 1 && result[0]) {
          moves.append(el("div", { text: `every rank holds the sum; torch.distributed.all_reduce ` +
                                           `on the same inputs equal: ${result[0].torch_equal}` }));
        }
        stage.append(moves);
        const cursor = now.length ? Math.min(...now.map((e) => e.ts)) : inputs[0].ts;
        const rows = ranks(inputs).map((r) => ({ pid: r, lanes: ["classroom"], label: `rank ${r}` }));
        stage.append(Timeline.draw(steps, rows, cursor,
          (e) => (e.args.phase === "reduce-scatter" ? "#d95f02" : "#1b9e77"),
          (e) => `c${e.args.chunk}`));
      },
    };
  });

  Classroom.scene("traffic", (events) => {
    const spans = events.filter((e) => e.lane === "classroom" && e.name.startsWith("all-reduce: "));
    const algo = (e) => {
      if (!spans.length) return "all sends";  // a user's trace: every send, one table
      const s = spans.find((s) => s.pid === e.pid && s.ts <= e.ts && e.ts <= s.ts + s.dur);
      return s ? s.args.algorithm : null;
    };
    const sends = byName(events, "send").filter((e) => e.args.peer !== undefined)
      .map((e) => ({ e, algo: algo(e) })).filter((m) => m.algo);
    if (!sends.length) return null;
    const algos = [...new Set(sends.map((m) => m.algo))];
    const world = Math.max(...sends.map((m) => Math.max(m.e.pid, m.e.args.peer))) + 1;
    return {
      count: sends.length + 1,
      render(k, stage, caption) {
        const cur = sends[k - 1];
        caption.textContent = k === 0 ? `${sends.length} messages recorded` :
          `${cur.algo}: rank ${cur.e.pid} -> rank ${cur.e.args.peer}, ${bytes(cur.e.args.bytes)}`;
        const cards = el("div", { class: "cards" });
        for (const a of algos) {
          const link = {};
          for (const m of sends.slice(0, k)) {
            if (m.algo !== a) continue;
            const key = `${m.e.pid}/${m.e.args.peer}`;
            link[key] = (link[key] || 0) + m.e.args.bytes;
          }
          const head = el("tr", {}, el("th", { text: "from \\ to" }));
          for (let d = 0; d < world; d++) head.append(el("th", { text: `rank ${d}` }));
          const table = el("table", { class: "grid" }, head);
          const sent = [];
          for (let s = 0; s < world; s++) {
            const tr = el("tr", {}, el("th", { text: `rank ${s}` }));
            sent.push(0);
            for (let d = 0; d < world; d++) {
              const n = link[`${s}/${d}`] || 0;
              sent[s] += n;
              const td = el("td", { "data-algo": a, "data-src": s, "data-dst": d,
                                    "data-bytes": n, text: s === d ? "" : bytes(n) });
              if (cur && cur.algo === a && cur.e.pid === s && cur.e.args.peer === d) {
                td.classList.add("sent");
              }
              tr.append(td);
            }
            table.append(tr);
          }
          const max = Math.max(...sent, 1), total = sent.reduce((x, y) => x + y, 0);
          const bars = el("div", {});
          sent.forEach((n, s) => bars.append(el("div", {}, `rank ${s} sent ${bytes(n)}`,
            el("div", { class: "bar" }, el("span", { class: "part-full",
              style: `width:${(100 * n) / max}%` })))));
          cards.append(el("div", { class: "card", "data-algo": a }, el("h3", { text: a }), table,
            el("p", { text: `busiest rank: ${bytes(max === 1 ? 0 : max)}, total ${bytes(total)}` }),
            bars));
        }
        stage.append(cards);
      },
    };
  });
})();
