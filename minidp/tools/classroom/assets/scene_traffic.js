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

    function picture(a, now, room) {
      const px = smallPx(), r = textWidth(`rank ${world - 1}`, px) / 2 + 12;
      const mine = now.filter((e) => e.args.algorithm === a);
      const moves = mine.map((e) => ({ src: e.pid, dst: e.args.to, colour: COLOUR[a], text: bytes(e.args.bytes) }));
      if (!moves.length) {  // not this algorithm's turn: its links, faint
        for (const s of who) {
          const to = a === "ring" ? [(s + 1) % world] : s === 0 ? [] : [0];
          for (const d of to) moves.push({ src: s, dst: d, colour: "#bbb", still: true });
        }
      }
      const R = Math.max(2.1 * r, Math.min((room.h - 9 * px - 2 * r) / 2, room.w / 10, 150));
      const nodes = (a === "ring" ? Topology.circle(who, R) : Topology.star(0, who.slice(1), R))
        .map((n) => ({ ...n, label: `rank ${n.id}` }));
      return Topology.draw({ nodes, moves, r, title: a === "ring" ? "ring: each rank sends to the next" :
                                                               "parameter server: every link ends at rank 0" });
    }

    // The card of one algorithm: its picture, then bytes each rank sent so far on scale `sc`.
    function card(a, pic, done, now, sc) {
      const box = el("div", { class: `card${now.some((e) => e.args.algorithm === a) ? " current" : ""}`, "data-algo": a },
        el("h3", { text: a }));
      const bars = el("div", {});
      const sent = who.map((s) => sentBy(done, a, s));
      for (const s of who) {
        bars.append(el("div", { class: "field" }, el("b", { text: `rank ${s} sent ${bytes(sent[s])}` }),
          Draw.bar([{ cls: "part-sent", bytes: sent[s], attrs: { "data-rank": s, "data-algo": a } }], sc)));
      }
      box.append(el("div", { class: "row" }, pic, bars));
      const [f, value, who_] = formula[a];
      box.append(el("p", { class: "formula", text: `${who_} ${f} = ${bytes(value)} (S = ${bytes(S)}, ` +
        `W = ${world}); measured so far: ${bytes(maxOf(sent, (x) => x))}` }));
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
        caption.textContent = !cur ? `${S} bytes all-reduced by ${world} ranks: ${data.length} data messages, ` +
          `${msgs.length - data.length} header messages` :
          `${cur.a}, step ${cur.s}: ${now.length} message${now.length > 1 ? "s" : ""} of ${bytes(now[0].args.bytes)}`;
        const pics = algos.map((a) => picture(a, now, room));
        const picW = maxOf(pics, (p) => Number(p.getAttribute("width")));
        const sc = Draw.scale(final, Math.max(80, (room.w - 24) / algos.length - picW - 50));  // one scale, both cards
        stage.append(Draw.main(el("div", { class: "compare", style: `grid-template-columns:repeat(${algos.length},1fr)` },
          ...algos.map((a, i) => card(a, pics[i], done, now, sc)))));
        const heads = msgs.filter((e) => e.args.header);
        stage.append(el("p", { class: "note", id: "traffic-headers", "data-bytes": heads.reduce((s, e) => s + e.args.bytes, 0),
          text: `Not counted above: minidp's check before each collective — every rank sent a ` +
            `${bytes(heads.length ? heads[0].args.bytes : 0)} header to each of the other ${world - 1} ` +
            `ranks, ${heads.length} messages in all (lesson 36). It belongs to neither algorithm.` }));
        const model = L && L.beta ? { label: "model α+n/β", bars: order.map((o, i) => {
          const n = o.msgs[0].args.bytes, us = o.a === "ring" ? Model.message(L, n) : (world - 1) * Model.message(L, n);
          return { step: i + 1, us, text: micros(us) };
        }) } : null;
        stage.append(Timeline.draw({
          id: "traffic", events: [...spans, ...msgs], width: room.w, step: k, starts, model,
          rows: who.map((r) => ({ pid: r, lanes: ["classroom"], label: `rank ${r}` })),
          colour: (e) => (e.name !== "traffic message" ? COLOUR[e.args.algorithm] : e.args.header ? "#999" :
            DATA[e.args.algorithm]),
          label: (e) => (e.name.startsWith("all-reduce") ? e.args.algorithm : ""),
          current: new Set(now.map((e) => e.id)),
          rowStarts: (i) => order.map((o) => { const m = o.msgs.filter((e) => e.pid === who[i]);
                                              return m.length ? minOf(m, (e) => e.ts) : undefined; }),
          pick: (e) => (e.name === "traffic message" && !e.args.header ?
            order.findIndex((o) => o.a === e.args.algorithm && o.s === e.args.step) + 1 : null),
          legend: [[COLOUR["parameter server"], "parameter server all-reduce"], [COLOUR.ring, "ring all-reduce"],
                   [DATA["parameter server"], "a server message", true], [DATA.ring, "a ring message", true],
                   ["#999", "a header message (the check)", true],
                   ...(model ? [["#e8e8e8", "model of the step (root's link: W−1 messages in a row)"]] : [])],
        }));
        stage.append(el("p", { class: "formula", text: `Model: server ${Model.FORMULA.server}, ring ` +
          `${Model.FORMULA.ring}. ${Model.describe(L)}` }));
        stage.append(el("div", { class: "row" }, ...algos.map((a) => links(a, done, now))));
      },
    };
  });
})();
