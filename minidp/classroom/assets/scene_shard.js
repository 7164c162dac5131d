// Scenes "memory" (bytes each rank holds under DDP, ZeRO-1, ZeRO-2, FSDP, measured at four
// points of a step: one stage's points so far, then all four stages side by side) and "fsdp" (one FSDP step: units gathered, freed, prefetched).
(() => {
  const { el, byName, ranks, bytes } = Classroom;
  const PARTS = ["params", "grads", "optimizer", "buckets"];
  const NAMES = { ddp: "DDP", zero1: "ZeRO-1", zero2: "ZeRO-2", fsdp: "FSDP" };

  function stacked(args, scale, attrs) {
    const bar = el("div", { class: "bar" });
    for (const p of PARTS) {
      bar.append(el("span", { class: `part-${p}`, title: `${p} ${bytes(args[p])}`,
        style: `width:${(100 * args[p]) / scale}%`, ...(attrs ? { ...attrs, "data-part": p, "data-bytes": args[p] } : {}) }));
    }
    return bar;
  }

  Classroom.scene("memory", (events) => {
    const mem = byName(events, "memory");
    if (!mem.length) return null;
    const keys = [];
    for (const e of mem) {
      const key = `${e.args.stage}/${e.args.point}`;
      if (!keys.includes(key)) keys.push(key);
    }
    const stages = [...new Set(mem.map((e) => e.args.stage))];
    const total = (a) => PARTS.reduce((s, p) => s + a[p], 0);
    const scale = Math.max(...mem.map((e) => total(e.args)));
    return {
      count: keys.length,
      render(k, stage, caption) {
        const [st, point] = keys[k].split("/");
        caption.append(el("span", { "data-stage": st, "data-point": point, text: `${st}: ${point}` }));
        const legend = el("p", { class: "legend" });
        for (const p of PARTS) legend.append(el("span", { class: `part-${p}` }), p);
        stage.append(legend);
        const points = keys.filter((key) => key.startsWith(`${st}/`));
        const steps = el("div", { class: "cards", id: "memory-steps" });
        for (const r of ranks(mem)) {
          const card = el("div", { class: "card", "data-rank": r }, el("h3", { text: `rank ${r}` }));
          for (const key of points.slice(0, points.indexOf(keys[k]) + 1)) {
            const e = mem.find((m) => m.pid === r && `${m.args.stage}/${m.args.point}` === key);
            const now = key === keys[k];
            card.append(el("div", { class: now ? "field current" : "field" },
              el("b", { text: `${key.split("/")[1]}: ${bytes(total(e.args))}` }),
              stacked(e.args, scale, now ? { "data-rank": r } : null)));
          }
          steps.append(card);
        }
        stage.append(steps);
        // The same point of the step under every stage, side by side: one column per
        // stage, one bar per rank, on one scale, so the stages compare at a glance.
        stage.append(el("h3", { text: `All four stages at the same point: ${point}` }));
        const compare = el("div", { class: "compare", id: "memory-compare", "data-point": point });
        for (const s of stages) {
          const col = el("div", { class: s === st ? "card current" : "card", "data-stage": s },
            el("h3", { text: NAMES[s] || s }));
          for (const r of ranks(mem)) {
            const e = mem.find((m) => m.pid === r && m.args.stage === s && m.args.point === point);
            if (!e) continue;
            col.append(el("div", { class: "field" }, el("b", { text: `rank ${r}: ${bytes(total(e.args))}` }),
              stacked(e.args, scale, { "data-rank": r })));
          }
          compare.append(col);
        }
        stage.append(compare);
      },
    };
  });

  // FSDP's own event names (minidp/fsdp/root.py) and the two observed here; "unit N" or
  // "root" after them, so DDP's plain "forward" in the same trace is not mistaken for one.
  const UNIT = "(unit \\d+|root)$";
  const FSDP = new RegExp(`^((issue all-gather|all-gather|forward|backward|reduce-scatter) ${UNIT}|unit gathered|unit freed|wait reduce-scatters)`);
  const WAIT = new RegExp(`^wait (all-gather ${UNIT}|reduce-scatters)`);

  Classroom.scene("fsdp", (events) => {
    const fwd = events.filter((e) => e.name.startsWith("forward unit"));
    if (!fwd.length) return null;
    const rank = Math.min(...fwd.map((e) => e.pid));
    const seq = events.filter((e) => e.pid === rank && FSDP.test(e.name));
    const unitOf = (e) => e.args.unit || e.name.replace(/^(issue all-gather|all-gather|forward|backward|reduce-scatter) /, "");
    const units = [...new Set(seq.filter((e) => e.name !== "wait reduce-scatters").map(unitOf))];
    const sizes = {};
    for (const e of byName(seq, "unit gathered")) sizes[e.args.unit] = e.args.bytes;
    const shardEv = events.find((e) => e.name === "fsdp shards" && e.pid === rank);
    const observed = byName(seq, "unit gathered").length > 0;
    const spans = events.filter((e) => e.ph === "X" && FSDP.test(e.name));
    return {
      count: seq.length + 1,
      render(k, stage, caption) {
        const cur = seq[k - 1];
        caption.append(el("span", { "data-event": cur ? cur.name : "",
          text: cur ? `rank ${rank}: ${cur.name}` : `rank ${rank}: one FSDP step (after a first one)` }));
        const state = Object.fromEntries(units.map((u) => [u, "sharded"]));
        let held = 0, peak = 0;
        for (const e of seq.slice(0, k)) {
          const u = unitOf(e);
          if (e.name.startsWith("issue all-gather") && state[u] !== "gathered") state[u] = "issued";
          if (e.name === "unit gathered") { state[u] = "gathered"; held += e.args.bytes; }
          if (e.name === "unit freed") { state[u] = "sharded"; held -= e.args.bytes; }
          peak = Math.max(peak, held);
        }
        const panel = el("div", { class: "cards" });
        for (const u of units) {
          panel.append(el("div", { class: "card", "data-unit": u, "data-state": observed ? state[u] : "unknown" },
            el("h3", { text: u }), el("div", { text: observed ? state[u] : "(not observed in this trace)" }),
            el("div", { class: "note", text: sizes[u] !== undefined ? `full: ${bytes(sizes[u])}` : "" })));
        }
        stage.append(panel);
        if (observed) {
          const shards = shardEv ? shardEv.args.bytes : 0;
          const max = shards + Math.max(...Object.values(sizes)) * 2;
          stage.append(el("p", { id: "fsdp-memory", "data-bytes": held, "data-peak": peak,
            text: `rank ${rank} holds ${bytes(shards)} of shards + ${bytes(held)} of gathered full parameters (peak so far ${bytes(peak)})` }),
            el("div", { class: "bar" }, el("span", { class: "part-params", style: `width:${(100 * shards) / max}%` }),
              el("span", { class: "part-full", style: `width:${(100 * held) / max}%` })));
        }
        const rows = [];
        for (const r of ranks(spans)) {
          rows.push({ pid: r, lanes: ["compute"], label: `rank ${r} compute` });
          rows.push({ pid: r, lanes: ["comm", "hooks"], label: `rank ${r} comm` });
        }
        const colour = (e) => (e.name.endsWith(" root") ? null : e.name.startsWith("forward") ? "#3a6ea5" :
          e.name.startsWith("backward") ? "#2a9d8f" : e.name.startsWith("all-gather") ? "#1b9e77" :
          e.name.startsWith("reduce-scatter") ? "#d95f02" : e.name.startsWith("issue") ? "#c00" :
          e.name.startsWith("wait") ? "#bbbbbb" : null);
        const label = (e) => e.name.replace("all-gather unit ", "AG").replace("reduce-scatter unit ", "RS")
          .replace("forward unit ", "F").replace("backward unit ", "B");
        const all = events.filter((e) => FSDP.test(e.name) || WAIT.test(e.name));
        stage.append(Timeline.draw(all, rows, cur ? cur.ts : seq[0].ts, colour, label));
      },
    };
  });
})();
