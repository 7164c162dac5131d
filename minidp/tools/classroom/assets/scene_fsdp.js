// Scene "fsdp": one FSDP step on one rank, event by event: each unit's state (sharded,
// prefetch issued, all-gather in flight, gathered), what the rank holds for parameters
// (shards + all-gather buffers + gathered units, with the peak so far), this collective's
// arrows between the ranks, and every rank's compute and communication on a timeline.
(() => {
  const { el } = Classroom;
  const { byName, ranks, bytes, maxOf, textWidth, smallPx } = Draw;
  const UNIT = "(unit \\d+|root)$";
  const LIB = new RegExp(`^(issue all-gather|all-gather|forward|backward|reduce-scatter) ${UNIT}`);
  const OURS = ["unit gathered", "unit freed", "wait reduce-scatters"];
  const WAIT = new RegExp(`^wait (all-gather ${UNIT}|reduce-scatters)`);
  const unitOf = (e) => e.args.unit || e.name.replace(/^(issue all-gather|all-gather|forward|backward|reduce-scatter|wait all-gather) /, "");
  const COLOUR = { forward: "#4c78a8", backward: "#54a24b", "all-gather": "#1b9e77", "reduce-scatter": "#d95f02",
                   issue: "#8c564b", wait: "#c9c9c9", gathered: "#e45756", freed: "#777" };
  function colour(e) {
    for (const [k, c] of Object.entries(COLOUR)) if (e.name.startsWith(k)) return c;
    if (e.name === "unit gathered") return COLOUR.gathered;
    if (e.name === "unit freed") return COLOUR.freed;
    return null;
  }
  const label = (e) => { const m = e.name.match(/^(all-gather|reduce-scatter|forward|backward|wait all-gather) (.*)$/);
    return m ? [e.name, `${{ "all-gather": "AG", "reduce-scatter": "RS", forward: "F", backward: "B",
      "wait all-gather": "wait" }[m[1]]} ${m[2].replace("unit ", "")}`] : []; };

  function peakBar(bar, x) {  // the peak so far: a mark on the same scale as the bar
    bar.style.position = "relative";
    bar.append(el("i", { class: "peak", style: `left:${x}px`, title: "peak so far" }));
    return bar;
  }

  Classroom.scene("fsdp", (events) => {
    const fwd = events.filter((e) => e.name.startsWith("forward unit"));
    if (!fwd.length) return null;
    const rank = Math.min(...new Set(fwd.map((e) => e.pid)));
    const seq = events.filter((e) => e.pid === rank && (LIB.test(e.name) || OURS.includes(e.name)));
    const starts_ = byName(events, "unit gather start").filter((e) => e.pid === rank);
    const units = [...new Set(seq.filter((e) => e.name !== "wait reduce-scatters").map(unitOf))];
    const size = {};
    for (const e of byName(seq, "unit gathered")) size[e.args.unit] = e.args;
    const shardEv = events.find((e) => e.name === "fsdp shards" && e.pid === rank);
    const shards = shardEv ? shardEv.args.bytes : 0, world = shardEv ? shardEv.args.world : 2;
    const observed = byName(seq, "unit gathered").length > 0;
    const all = events.filter((e) => LIB.test(e.name) || OURS.includes(e.name) || WAIT.test(e.name));
    const who = ranks(all);

    // What rank `rank` holds for parameters just after event `upto` (ts order), and the
    // peak so far: the momentary peak of a gather (buffer and full parameters) included.
    function held(t) {
      let buffer = 0, full = 0, peak = shards;
      const moves = [...starts_, ...byName(seq, "unit gathered"), ...byName(seq, "unit freed")]
        .filter((e) => e.ts <= t).sort((a, b) => a.ts - b.ts || a.id - b.id);
      for (const e of moves) {
        if (e.name === "unit gather start") buffer += e.args.buffer;
        else if (e.name === "unit gathered") { full += e.args.bytes; peak = Math.max(peak, shards + buffer + full); buffer -= e.args.buffer; }
        else full -= e.args.bytes;
        peak = Math.max(peak, shards + buffer + full);
      }
      return { buffer, full, peak };
    }
    const top = maxOf(seq, (e) => held(e.ts).peak, shards);

    function state(u, t) {
      let s = "sharded";
      for (const e of seq) {
        if (e.ts > t || unitOf(e) !== u) continue;
        if (e.name.startsWith("issue all-gather") && s === "sharded") s = "prefetch issued";
        if (e.name.startsWith("all-gather")) s = "all-gather in flight";
        if (e.name === "unit gathered") s = "gathered";
        if (e.name === "unit freed") s = "sharded";
      }
      return s;
    }

    function arrows(cur) {
      const px = smallPx(), r = textWidth(`rank ${world - 1}`, px) / 2 + 12;
      const kind = cur && (cur.name.startsWith("all-gather") ? "all-gather" : cur.name.startsWith("reduce-scatter") ? "reduce-scatter" : null);
      const u = cur && unitOf(cur), per = u && size[u] ? Math.ceil(size[u].buffer / world) : null;
      const moves = [];
      for (const s of who) for (const d of who) {
        if (s === d) continue;
        moves.push(kind ? { src: s, dst: d, colour: COLOUR[kind], text: per ? `${kind === "all-gather" ? "shard" : "grad shard"} ${bytes(per)}` : kind }
                        : { src: s, dst: d, colour: "#ccc", still: true });
      }
      const nodes = Topology.circle(who, Math.max(1.8 * r, 60)).map((n) => ({ ...n, label: `rank ${n.id}` }));
      return el("div", { class: "card", id: "fsdp-arrows" }, el("h3", { text: kind ? `${kind} ${u}` : "ranks" }),
        Topology.draw({ nodes, moves, r }));
    }

    return {
      count: seq.length + 1,
      render(k, stage, caption, room) {
        const cur = seq[k - 1], t = cur ? cur.ts : -Infinity;
        caption.append(el("span", { "data-event": cur ? cur.name : "",
          text: cur ? `rank ${rank}: ${cur.name}` : `rank ${rank}: one FSDP step (after a first one)` }));
        const cards = el("div", { class: "cards" });
        for (const u of units) {
          const s = observed ? state(u, t) : "unknown";
          cards.append(el("div", { class: `card${cur && unitOf(cur) === u ? " current" : ""}`, "data-unit": u, "data-state": s },
            el("h3", { text: u === "root" ? "root (last layer)" : u }), el("div", { text: observed ? s : "(not observed)" }),
            el("div", { class: "note", text: size[u] ? `full ${bytes(size[u].bytes)}` : "" })));
        }
        const parts = [el("div", { class: "row" }, cards, arrows(cur))];
        if (observed) {
          const h = held(t), sc = Draw.scale(top, Math.min(room.w - 40, 900));
          parts.push(el("p", { id: "fsdp-memory", "data-shards": shards, "data-buffer": h.buffer, "data-full": h.full,
            "data-peak": h.peak, text: `rank ${rank} holds ${bytes(shards)} of shards + ${bytes(h.buffer)} of ` +
            `all-gather buffers + ${bytes(h.full)} of gathered units = ${bytes(shards + h.buffer + h.full)}; ` +
            `peak so far ${bytes(h.peak)}` }),
          peakBar(Draw.bar([{ cls: "part-params", bytes: shards, title: "shards" }, { cls: "part-buffer", bytes: h.buffer,
            title: "all-gather buffers" }, { cls: "part-full", bytes: h.full, title: "gathered units" }], sc), sc.px(h.peak)),
          Draw.legend([["part-params", "this rank's shards"], ["part-buffer", "all-gather buffers (held from the moment a gather starts: prefetch costs memory)"],
                       ["part-full", "gathered full parameters"], ["#111", "peak so far", true]]));
        }
        const rows = [];
        for (const r of who) {
          rows.push({ label: `rank ${r} compute`, match: (e) => e.pid === r && e.lane === "compute" });
          rows.push({ label: `rank ${r} comm`, match: (e) => e.pid === r && e.lane !== "compute" });
        }
        const main = Draw.main(...parts);
        stage.append(main);
        main.append(Timeline.draw({
          id: "fsdp", events: all, rows, colour, label, width: room.w, step: k, starts: seq.map((e) => e.ts),
          height: room.h - main.offsetHeight - 8,
          rowStarts: (i) => events.filter((e) => e.pid === who[i >> 1] && (LIB.test(e.name) || OURS.includes(e.name)))
            .slice(0, seq.length).map((e) => e.ts),
          current: new Set(cur ? [cur.id] : []),
          pick: (e) => { const i = seq.indexOf(e); return i >= 0 ? i + 1 : null; },
          legend: [[COLOUR.forward, "forward"], [COLOUR.backward, "backward"], [COLOUR["all-gather"], "all-gather"],
                   [COLOUR["reduce-scatter"], "reduce-scatter"], [COLOUR.wait, "waiting"], [COLOUR.issue, "prefetch issued", true],
                   [COLOUR.gathered, "unit gathered", true], [COLOUR.freed, "unit freed", true]],
        }));
      },
    };
  });
})();
