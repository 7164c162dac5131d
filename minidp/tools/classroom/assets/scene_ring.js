// Scene "ring": the book's ring all-reduce (lesson 8's page), step by step — every chunk's
// values on every rank (copies of the real messages' payloads), the ring with this step's
// chunks travelling r -> r-1, and the timeline of each rank's steps beside the α-β model
// of a step. One layout for every step (table and timeline on the left, the ring on the
// right, sized once for the widest label any step shows): nothing moves while stepping.
(() => {
  const { el } = Classroom;
  const { byName, ranks, bytes, micros, maxOf, minOf, textWidth, smallPx } = Draw;
  const COLOUR = { "reduce-scatter": "#d95f02", "all-gather": "#1b9e77" };

  function digitsText(d) {
    if (!d) return "Rank r's element i is r·100 + i + 1 (values too wide for digit groups).";
    const base = d === 1 ? "10^r" : `(10^${d})^r`;
    return `Rank r's element i is (i+1)·${base}: in any sum, digit group r reads i+1 if rank r's ` +
      "piece is in it, else 0.";
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
    const long = (e) => `c${e.args.chunk}: ${e.args.values.join(", ")}`, short = (e) => `c${e.args.chunk}`;

    function grid(k, now, heads) {
      const head = el("tr", {}, el("th", { text: "" }));
      chunks.forEach(([lo, hi], c) => head.append(el("th", { text: heads(c, lo, hi) })));
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

    // The ring's layout for a w x h box, the same at every step: labels with values where
    // they fit, else the chunk's name only (its values are in the table, outlined).
    function layout(w, h) {
      const px = smallPx(), links = who.map((s, i) => [s, who[(i - 1 + who.length) % who.length]]);
      const widths = (text) => who.map((s) => maxOf(steps.filter((e) => e.pid === s), (e) => textWidth(text(e), px)));
      const lay = Topology.choose(who, links, [widths(long), widths(short)], w, h);
      return { ...lay, text: [long, short][lay.v] || (() => "") };
    }

    function picture(now, lay) {
      const boxes = Object.fromEntries(who.map((s, i) => [s, lay.boxes[i]]));
      const moves = now.map((e) => ({ src: e.pid, dst: e.args.to, colour: COLOUR[e.args.phase], text: lay.text(e),
        box: boxes[e.pid], attrs: { "data-chunk": e.args.chunk } }));
      if (!moves.length) {  // before the first step: the ring itself, faint, the way data will move
        who.forEach((s, i) => moves.push({ src: s, dst: who[(i - 1 + who.length) % who.length], colour: "#bbb",
                                           still: true, box: boxes[s] }));
      }
      return Topology.draw({ nodes: lay.nodes.map((n) => ({ ...n, label: lay.name(n.id) })), moves, r: lay.r,
                             frame: lay.frame, title: "the ring: each rank sends to the one before it (r → r−1)" });
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
          if (k === count - 1 && result[0]) {
            caption.append(` — every rank holds the sum; equal to torch.distributed.all_reduce: ${result[0].torch_equal}`);
          }
        }
        const px = smallPx();
        const long_ = (c, lo, hi) => `chunk ${c} [${lo}:${hi}]`, short_ = (c) => `c${c}`;
        const left = el("div", { class: "ring-left" });
        const main = Draw.main(el("div", { class: "split" }, left));
        stage.append(main);
        let table = grid(k, now, long_);
        left.append(table);
        if (table.offsetWidth > room.w * 0.6) { table.replaceWith(table = grid(k, now, short_)); }
        left.append(el("p", { class: "note", id: "ring-digits", text: digitsText(digits) }));
        const leftW = Math.min(Math.max(table.offsetWidth, room.w * 0.56), room.w * 0.66);
        left.style.width = `${leftW}px`;
        const rightW = room.w - leftW - 16;
        const lay = layout(rightW, room.h);
        main.firstChild.append(el("div", { class: "ring-right" }, picture(now, lay)));

        const chunkBytes = steps[0].args.bytes;
        const model = L && L.beta ? { label: "model α+n/β", bars: starts.map((_, i) => ({
          step: i + 1, us: Model.message(L, chunkBytes), text: micros(Model.message(L, chunkBytes)) })) } : null;
        left.append(Timeline.draw({
          id: "ring", events: steps, width: leftW, step: k, starts,
          height: room.h - left.offsetHeight - px,
          rows: who.map((r) => ({ pid: r, lanes: ["classroom"], label: `rank ${r}` })),
          colour: (e) => COLOUR[e.args.phase],
          label: (e) => [`c${e.args.chunk}→${e.args.to} ${micros(e.dur)}`, `c${e.args.chunk}→${e.args.to}`],
          current: new Set(now.map((e) => e.id)), pick: (e) => e.args.step, model,
          rowStarts: (i) => starts.map((_, j) => (at[`${j + 1}/${who[i]}`] || {}).ts),
          legend: [[COLOUR["reduce-scatter"], "reduce-scatter step"], [COLOUR["all-gather"], "all-gather step"],
                   ...(model ? [["#e8e8e8", "model: α + n/β"]] : [])],
        }));
        const end = maxOf(steps, (e) => e.ts + e.dur);
        const modelled = model ? 2 * (world - 1) * Model.message(L, chunkBytes) : NaN;
        stage.append(el("p", { class: "formula", id: "ring-model",
          text: `Model (lessons 6, 8): ${2 * (world - 1)} steps, each one message of N/W = ` +
            `${bytes(chunkBytes)} per rank: ${Model.FORMULA.ring} = ${model ? micros(modelled) : "–"}; ` +
            `measured: ${micros(end - starts[0])} from the first step to the last's end. ${Model.describe(L)}` }));
        stage.append(Model.gap(L, modelled, end - starts[0], world));
      },
    };
  });
})();
