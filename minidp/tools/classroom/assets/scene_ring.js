// Scene "ring": a real ring all-reduce, step by step — every chunk's values on every rank
// (copies of the real messages' payloads), the ring with this step's chunks travelling,
// and the timeline of each rank's steps beside the α-β model of a step.
(() => {
  const { el } = Classroom;
  const { byName, ranks, bytes, micros, maxOf, minOf, textWidth, smallPx } = Draw;
  const COLOUR = { "reduce-scatter": "#d95f02", "all-gather": "#1b9e77" };

  function digitsText(world, d) {
    if (!d) return "Rank r's element i is r·100 + i + 1 (values too wide for digit groups).";
    const base = d === 1 ? "10" : `10^${d} = ${10 ** d}`;
    return `Rank r's element i is (i+1)·${d === 1 ? "10^r" : `(${base})^r`}: in any sum, ` +
      `digit group r (${d} digit${d > 1 ? "s" : ""}) reads i+1 if rank r's piece is in it, else 0.`;
  }

  Classroom.scene("ring", (events, ctx) => {
    const inputs = byName(events, "ring inputs");
    const steps = byName(events, "ring step");
    if (!inputs.length || !steps.length) return null;
    const { world, chunks, digits } = inputs[0].args;
    const input = {}, result = {}, at = {};
    for (const e of inputs) input[e.pid] = e.args.holds;
    for (const e of byName(events, "ring result")) result[e.pid] = e.args;
    for (const e of steps) at[`${e.args.step}/${e.pid}`] = e;
    const count = 2 * (world - 1) + 1;
    const starts = [];
    for (let k = 1; k < count; k++) starts.push(minOf(steps.filter((e) => e.args.step === k), (e) => e.ts));
    const L = Model.link(ctx);
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    const who = ranks(inputs);

    function grid(k, now) {
      const head = el("tr", {}, el("th", { text: "" }));
      chunks.forEach(([lo, hi], c) => head.append(el("th", { text: `chunk ${c} [${lo}:${hi}]` })));
      const table = el("table", { class: "grid", id: "ring-grid" }, head);
      for (const r of who) {
        const holds = k === 0 ? input[r] : at[`${k}/${r}`].args.holds;
        const tr = el("tr", {}, el("th", { text: `rank ${r}` }));
        holds.forEach((vals, c) => {
          const td = el("td", { "data-rank": r, "data-chunk": c, "data-values": JSON.stringify(vals),
                                text: vals.join(" ") });
          const sent = now.find((e) => e.pid === r);
          if (sent && sent.args.chunk === c) td.classList.add("sent");
          if (now.some((e) => e.args.to === r && e.args.chunk === c)) td.classList.add("changed");
          const fin = result[r] && result[r].result.slice(chunks[c][0], chunks[c][1]);
          if (fin && same(fin, vals)) td.classList.add("done");
          tr.append(td);
        });
        table.append(tr);
      }
      return table;
    }

    function picture(now, room, used) {
      const px = smallPx(), r = textWidth(`rank ${world - 1}`, px) / 2 + 12;
      const moves = now.map((e) => ({ src: e.pid, dst: e.args.to, colour: COLOUR[e.args.phase],
        text: `c${e.args.chunk}: ${e.args.values.join(", ")}`, attrs: { "data-chunk": e.args.chunk } }));
      if (!moves.length) {  // before the first step: the ring itself, faint
        who.forEach((s, i) => moves.push({ src: s, dst: who[(i + 1) % who.length], colour: "#bbb", still: true }));
      }
      const label = maxOf(moves, (m) => (m.text ? textWidth(m.text, px) : 0)) + 16;
      const byW = (room.w - used - 2 * label - 2 * r - 40) / 2, byH = (room.h - 2 * r - 3 * px) / 2;
      const R = Math.max(2.2 * r, Math.min(byW, byH, 210));
      return Topology.draw({ nodes: Topology.circle(who, R).map((n) => ({ ...n, label: `rank ${n.id}` })),
                             moves, r, title: "the ring: each rank sends to the next" });
    }

    return {
      count,
      render(k, stage, caption, room) {
        const now = who.map((r) => at[`${k}/${r}`]).filter(Boolean);
        if (k === 0) caption.textContent = `Inputs: ${world} ranks, ${chunks.length} chunks each`;
        else {
          const ph = now[0].args.phase, i = k <= world - 1 ? k : k - (world - 1);
          caption.append(el("span", { class: `phase-${ph}`, "data-phase": ph,
                                      text: `step ${k}: ${ph} ${i} of ${world - 1}` }));
        }
        const left = el("div", {}, grid(k, now));
        const moves = el("div", { class: "moves" });
        for (const e of now) {
          moves.append(el("div", { "data-src": e.pid, "data-dst": e.args.to,
            text: `rank ${e.pid} → rank ${e.args.to}: chunk ${e.args.chunk} [${e.args.values.join(", ")}]` }));
        }
        if (k === count - 1 && result[0]) {
          moves.append(el("div", { text: `every rank holds the sum; torch.distributed.all_reduce ` +
                                         `on the same inputs equal: ${result[0].torch_equal}` }));
        }
        if (k === 0) moves.append(el("div", { class: "note", text: digitsText(world, digits) }));
        left.append(moves);
        const main = Draw.main(el("div", { class: "row" }, left));
        stage.append(main);
        main.firstChild.append(picture(now, room, left.offsetWidth + 16));

        const chunkBytes = steps[0].args.bytes;
        const model = L && L.beta ? { label: "model α+n/β", bars: starts.map((_, i) => ({
          step: i + 1, us: Model.message(L, chunkBytes), text: micros(Model.message(L, chunkBytes)) })) } : null;
        stage.append(Timeline.draw({
          id: "ring", events: steps, width: room.w, step: k, starts,
          rows: who.map((r) => ({ pid: r, lanes: ["classroom"], label: `rank ${r}` })),
          colour: (e) => COLOUR[e.args.phase],
          label: (e) => [`c${e.args.chunk}→${e.args.to} ${micros(e.dur)}`, `c${e.args.chunk}→${e.args.to}`],
          current: new Set(now.map((e) => e.id)), pick: (e) => e.args.step, model,
          rowStarts: (i) => starts.map((_, j) => (at[`${j + 1}/${who[i]}`] || {}).ts),
          legend: [[COLOUR["reduce-scatter"], "reduce-scatter step"], [COLOUR["all-gather"], "all-gather step"],
                   ...(model ? [["#e8e8e8", "model: one message's α + n/β"]] : [])],
        }));
        const end = maxOf(steps, (e) => e.ts + e.dur);
        stage.append(el("p", { class: "formula", id: "ring-model",
          text: `Model (lessons 6, 8): ${2 * (world - 1)} steps, each one message of N/W = ` +
            `${bytes(chunkBytes)} per rank: ${Model.FORMULA.ring} = ` +
            (model ? micros(2 * (world - 1) * Model.message(L, chunkBytes)) : "–") +
            `; measured: ${micros(end - starts[0])} from the first step to the last's end. ` +
            Model.describe(L) }));
      },
    };
  });
})();
