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
  const GRADS = ["unit grads", "unit reduce start", "unit reduced"];  // the gradients' bytes, observed
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

    // What rank `rank` holds just after time t beyond its shards — all-gather buffers, gathered
    // units, unsharded gradients, reduce-scatter inputs — and the peak so far: the moment of a
    // gather (buffer and full parameters both) included.
    const grads = events.filter((e) => e.pid === rank && GRADS.includes(e.name));
    function held(t) {
      const h = { buffer: 0, full: 0, grads: 0, input: 0 }, of = {};
      let peak = shards;
      const sum = () => shards + h.buffer + h.full + h.grads + h.input;
      const moves = [...starts_, ...byName(seq, "unit gathered"), ...byName(seq, "unit freed"), ...grads]
        .filter((e) => e.ts <= t).sort((a, b) => a.ts - b.ts || a.id - b.id);
      for (const e of moves) {
        const a = e.args, u = a.unit;
        if (e.name === "unit gather start") h.buffer += a.buffer;
        else if (e.name === "unit gathered") { h.full += a.bytes; peak = Math.max(peak, sum()); h.buffer -= a.buffer; }
        else if (e.name === "unit freed") h.full -= a.bytes;
        else if (e.name === "unit grads") h.grads += (of[`g${u}`] = a.bytes);
        else if (e.name === "unit reduce start") h.input += (of[`i${u}`] = a.buffer);
        else { h.grads -= of[`g${u}`] || 0; h.input -= of[`i${u}`] || 0; }
        peak = Math.max(peak, sum());
      }
      return { ...h, peak };
    }
    const top = held(Infinity).peak;  // the whole step's peak: one scale for every step

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

    // The ranks as a ring (r -> r-1: minidp's all-gather and reduce-scatter go round it, in
    // W-1 steps, so every rank ends with every shard), laid out once for every step.
    const links = who.length === 2 ? [[who[0], who[1]], [who[1], who[0]]] :
      who.map((s, i) => [s, who[(i - 1 + who.length) % who.length]]);
    function picture(cur, lay) {
      const kind = cur && (cur.name.startsWith("all-gather") ? "all-gather" : cur.name.startsWith("reduce-scatter") ? "reduce-scatter" : null);
      const u = cur && unitOf(cur), per = u && size[u] ? Math.ceil(size[u].buffer / world) : null;
      const moves = links.map(([s, d], i) => (kind ?
        { src: s, dst: d, colour: COLOUR[kind], box: lay.boxes[i], text: lay.v === 0 && per ? bytes(per) : "" } :
        { src: s, dst: d, colour: "#ccc", still: true }));
      const what = kind ? `${kind} ${u}${per ? `: shards of ${bytes(per)} round the ring` : ""}` : "the ranks' ring";
      return el("div", { class: "card", id: "fsdp-arrows" }, el("div", { class: "what", text: what, title: what }),
        Topology.draw({ nodes: lay.nodes.map((n) => ({ ...n, label: lay.name(n.id) })), moves, r: lay.r, frame: lay.frame }));
    }
    const STATES = ["sharded", "prefetch issued", "all-gather in flight", "gathered", "(not observed)"];

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
            el("h3", { text: u === "root" ? "root (last layer)" : u }),
            el("div", { class: "stack" }, ...STATES.map((q) => el("div", { class: q === s ? "" : "off", text: q }))),
            el("div", { class: "note", text: size[u] ? `full ${bytes(size[u].bytes)}` : "" })));
        }
        const parts = [cards];
        if (observed) {
          const h = held(t), sc = Draw.scale(top, Math.min(room.w * 0.68 - 40, 900));
          const now_ = shards + h.buffer + h.full + h.grads + h.input;
          parts.push(el("p", { id: "fsdp-memory", "data-shards": shards, "data-buffer": h.buffer, "data-full": h.full,
            "data-grads": h.grads, "data-input": h.input, "data-peak": h.peak,
            text: `rank ${rank} holds ${bytes(shards)} of shards (its own rows) + ${bytes(h.buffer)} all-gather buffers + ` +
            `${bytes(h.full)} gathered units + ${bytes(h.grads + h.input)} unsharded gradients and their reduce-scatter ` +
            `input = ${bytes(now_)}; peak so far ${bytes(h.peak)}` }),
          peakBar(Draw.bar([{ cls: "part-params", bytes: shards, title: "shards" }, { cls: "part-buffer", bytes: h.buffer,
            title: "all-gather buffers" }, { cls: "part-full", bytes: h.full, title: "gathered units" },
            { cls: "part-fullgrads", bytes: h.grads, title: "unsharded gradients" },
            { cls: "part-rsbuf", bytes: h.input, title: "reduce-scatter input" }], sc), sc.px(h.peak)),
          Draw.legend([["part-params", "this rank's shards"], ["part-buffer", "all-gather buffers (held from the moment a gather starts: prefetch costs memory)"],
                       ["part-full", "gathered full parameters"], ["part-fullgrads", "unsharded gradients"],
                       ["part-rsbuf", "reduce-scatter input"], ["#111", "peak so far", true]]));
        }
        // one row per rank: compute above, communication below
        const rows = who.map((r) => ({ label: `rank ${r}`, match: (e) => e.pid === r }));
        const left = el("div", {}, ...parts), right = el("div", { class: "ring-right" });
        const main = Draw.main(el("div", { class: "split" }, left, right));
        stage.append(main);
        left.style.width = `${Math.min(room.w * 0.68, 1100)}px`;
        const px = smallPx(), lay = Topology.choose(who, links, [links.map(() => textWidth("00.0 KiB", px)),
          links.map(() => 0)], room.w - left.offsetWidth - 40, Math.max(left.offsetHeight - px * 1.6, px * 8));
        right.append(picture(cur, lay));
        main.append(Timeline.draw({
          id: "fsdp", events: all, rows, colour, label, width: room.w, step: k, starts: seq.map((e) => e.ts),
          height: room.h - main.offsetHeight - 8, track: (e) => (e.lane === "compute" ? 0 : 1),
          rowStarts: (i) => events.filter((e) => e.pid === who[i] && (LIB.test(e.name) || OURS.includes(e.name)))
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
