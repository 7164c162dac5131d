// Scene "traffic": the parameter server vs the ring on the same tensor, step by step —
// the server as a star, the ring as a ring, this step's messages travelling; bytes each
// rank has sent so far, on one scale for both; minidp's header check counted apart.
(() => {
  const { el } = Classroom;
  const { byName, bytes, micros, maxOf, minOf, textWidth, smallPx } = Draw;
  const COLOUR = { "parameter server": "#e45756", ring: "#4c78a8" };
  const DATA = { "parameter server": "#8b1a1a", ring: "#163a5f" };  // a message: darker, on its span

  Classroom.scene("traffic", (events, ctx) => {
    const msgs = byName(events, "traffic message");
    const spans = events.filter((e) => e.lane === "classroom" && e.name.startsWith("all-reduce: "));
    if (!msgs.length || !spans.length) return null;
    const algos = [...new Set(spans.map((e) => e.args.algorithm))];
    const S = spans[0].args.bytes;
    const world = maxOf(msgs, (e) => Math.max(e.pid, e.args.to)) + 1;
    const who = [...Array(world).keys()];
    const data = msgs.filter((e) => !e.args.header);
    const order = [];  // (algorithm, step) in the order they ran
    for (const a of algos) {
      for (const s of [...new Set(data.filter((e) => e.args.algorithm === a).map((e) => e.args.step))].sort((x, y) => x - y)) {
        order.push({ a, s, msgs: data.filter((e) => e.args.algorithm === a && e.args.step === s) });
      }
    }
    const starts = order.map((o) => minOf(o.msgs, (e) => e.ts));
    const sentBy = (list, a, r) => list.filter((e) => e.args.algorithm === a && e.pid === r)
      .reduce((s, e) => s + e.args.bytes, 0);
    const final = maxOf(algos, (a) => maxOf(who, (r) => sentBy(data, a, r)));
    const L = Model.link(ctx);
    const formula = { "parameter server": [Model.FORMULA.serverBytes, Model.serverBytes(S, world), "rank 0 sends"],
                      ring: [Model.FORMULA.ringBytes, Model.ringBytes(S, world), "every rank sends"] };

    // Each algorithm's picture, laid out once for a w x h box (the same at every step):
    // the ring's links r -> r-1, the server's both ways along each spoke.
    const LINKS = {
      ring: who.map((s) => [s, (s - 1 + world) % world]),
      "parameter server": who.slice(1).flatMap((s) => [[s, 0], [0, s]]),
    };
    function layout(a, w, h) {
      const px = smallPx(), links = LINKS[a];
      const texts = links.map(([s, d]) => maxOf(data.filter((e) => e.args.algorithm === a && e.pid === s && e.args.to === d),
                                               (e) => textWidth(bytes(e.args.bytes), px)));
      return Topology.choose(who, links, [texts, links.map(() => 0)], w, h, a === "ring" ? undefined : 0);
    }
    function picture(a, now, lay) {
      const mine = now.filter((e) => e.args.algorithm === a);
      const box = (s, d) => lay.boxes[LINKS[a].findIndex(([x, y]) => x === s && y === d)];
      const moves = mine.map((e) => ({ src: e.pid, dst: e.args.to, colour: COLOUR[a], box: box(e.pid, e.args.to),
                                       text: lay.v === 0 ? bytes(e.args.bytes) : "" }));
      if (!moves.length) {  // not this algorithm's turn: its links, faint, the way data moves
        for (const [s, d] of LINKS[a]) if (a === "ring" || s !== 0) moves.push({ src: s, dst: d, colour: "#bbb", still: true });
      }
      return Topology.draw({ nodes: lay.nodes.map((n) => ({ ...n, label: lay.name(n.id) })), moves, r: lay.r,
        frame: lay.frame, title: a === "ring" ? "ring: each rank sends to the one before it (r → r−1)" :
                                                "parameter server: every link ends at rank 0" });
    }

    // The card of one algorithm: its picture, then bytes each rank sent so far on scale `sc`.
    function card(a, pic, done, now, sc, lw) {
      const [f, value, who_] = formula[a];
      const box = el("div", { class: `card${now.some((e) => e.args.algorithm === a) ? " current" : ""}`, "data-algo": a },
        el("h3", {}, `${a} `, el("span", { class: "formula", text: `${who_} ${f} = ${bytes(value)}` })));
      const bars = el("div", {});
      const sent = who.map((s) => sentBy(done, a, s));
      for (const s of who) {
        bars.append(el("div", { class: "mrow" }, el("b", { style: `width:${lw}px`, text: `rank ${s}: ${bytes(sent[s])}` }),
          Draw.bar([{ cls: "part-sent", bytes: sent[s], attrs: { "data-rank": s, "data-algo": a } }], sc)));
      }
      box.append(el("div", { class: "split" }, pic, bars));
      return box;
    }

    function links(a, done, cur) {
      const head = el("tr", {}, el("th", { text: `${a}: from \\ to` }));
      for (const d of who) head.append(el("th", { text: `rank ${d}` }));
      const table = el("table", { class: "grid" }, head);
      for (const s of who) {
        const tr = el("tr", {}, el("th", { text: `rank ${s}` }));
        for (const d of who) {
          const n = done.filter((e) => e.args.algorithm === a && e.pid === s && e.args.to === d)
            .reduce((x, e) => x + e.args.bytes, 0);
          const td = el("td", { "data-algo": a, "data-src": s, "data-dst": d, "data-bytes": n,
                                text: s === d ? "" : bytes(n) });
          if (cur.some((e) => e.args.algorithm === a && e.pid === s && e.args.to === d)) td.classList.add("sent");
          tr.append(td);
        }
        table.append(tr);
      }
      return table;
    }

    return {
      count: order.length + 1,
      render(k, stage, caption, room) {
        const cur = order[k - 1];
        const now = cur ? cur.msgs : [];
        const done = data.filter((e) => order.findIndex((o) => o.a === e.args.algorithm && o.s === e.args.step) < k);
        caption.textContent = !cur ? `${bytes(S)} all-reduced by ${world} ranks: ${data.length} data messages, ` +
          `${msgs.length - data.length} header messages` :
          `${cur.a}, step ${cur.s}: ${now.length} message${now.length > 1 ? "s" : ""} of ${bytes(now[0].args.bytes)}`;
        const px = smallPx(), cardW = (room.w - 16) / algos.length - 20;
        const lw = textWidth(`rank ${world - 1}: 000.0 KiB`, px, true) + 8;
        const barW = Math.min(120, cardW * 0.2), picW = cardW - lw - barW - 24;
        const sc = Draw.scale(final, barW);  // one scale, both cards
        // the pictures take what the timeline (its rows at their smallest, bar, ticks) leaves
        const rowsH = world * px * 1.45, spare = room.h - (world + 1) * px * 1.1 - px * 13;
        const picH = Math.max(rowsH, Math.min(spare, picW * 0.8, px * 15));
        const lays = Object.fromEntries(algos.map((a) => [a, layout(a, picW, picH)]));
        const main = Draw.main(el("div", { class: "compare", style: `grid-template-columns:repeat(${algos.length},1fr)` },
          ...algos.map((a) => card(a, picture(a, now, lays[a]), done, now, sc, lw))));
        stage.append(main);
        const model = L && L.beta ? { label: "model α+n/β", bars: order.map((o, i) => {
          const n = o.msgs[0].args.bytes, us = o.a === "ring" ? Model.message(L, n) : (world - 1) * Model.message(L, n);
          return { step: i + 1, us, text: micros(us) };
        }) } : null;
        main.append(Timeline.draw({
          id: "traffic", events: [...spans, ...msgs], width: room.w, step: k, starts, model,
          height: room.h - main.offsetHeight - px,
          rows: who.map((r) => ({ pid: r, lanes: ["classroom"], label: `rank ${r}` })),
          colour: (e) => (e.name !== "traffic message" ? COLOUR[e.args.algorithm] : e.args.header ? "#999" :
            DATA[e.args.algorithm]),
          label: (e) => (e.name.startsWith("all-reduce") ? e.args.algorithm : ""),
          current: new Set(now.map((e) => e.id)),
          rowStarts: (i) => order.map((o) => { const m = o.msgs.filter((e) => e.pid === who[i]);
                                              return m.length ? minOf(m, (e) => e.ts) : undefined; }),
          pick: (e) => (e.name === "traffic message" && !e.args.header ?
            order.findIndex((o) => o.a === e.args.algorithm && o.s === e.args.step) + 1 : null),
          legend: [[COLOUR["parameter server"], "server all-reduce"], [COLOUR.ring, "ring all-reduce"],
                   [DATA["parameter server"], "server message", true], [DATA.ring, "ring message", true],
                   ["#999", "header (the check)", true], ...(model ? [["#e8e8e8", "model of a step"]] : [])],
        }));
        const heads = msgs.filter((e) => e.args.header);
        stage.append(el("p", { class: "note", id: "traffic-headers", "data-bytes": heads.reduce((s, e) => s + e.args.bytes, 0),
          text: `Not counted above: minidp's check before each collective — every rank sent a ` +
            `${bytes(heads.length ? heads[0].args.bytes : 0)} header to each of the other ${world - 1} ` +
            `ranks, ${heads.length} messages in all (lesson 36). It belongs to neither algorithm.` }));
        stage.append(el("p", { class: "formula", text: `Model: server ${Model.FORMULA.server}, ring ` +
          `${Model.FORMULA.ring}; a server step is W−1 messages in a row on rank 0's link. ${Model.describe(L)}` }));
        const ring = spans.filter((e) => e.args.algorithm === "ring");
        if (model && ring.length) stage.append(Model.gap(L, Model.ringTime(L, S, world), maxOf(ring, (e) => e.dur), world));
        stage.append(el("div", { class: "row" }, ...algos.map((a) => links(a, done, now))));
      },
    };
  });
})();
