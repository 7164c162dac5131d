// Scene "dp": one DataParallel step, stage by stage: what each device holds after the
// stage (its real tensors), and the stages on a timeline of the devices' threads.
(() => {
  const { el } = Classroom;
  const { byName, ranks, fmt, minOf } = Draw;
  const STAGES = ["scatter", "replicate", "parallel_apply", "gather", "backward", "sum grads"];
  const FIELD = { scatter: "input", replicate: "weight", parallel_apply: "output",
                  gather: "gathered", backward: "grad", "sum grads": "summed" };
  const LABEL = { input: "input rows", weight: "replica: layer 0 weight", output: "output",
                  gathered: "gathered output (main device)", grad: "replica: d loss / d bias",
                  summed: "summed into the model's .grad" };
  const VALUE = { input: "input", weight: "weight", output: "output", gathered: "output",
                  grad: "grad", summed: "grad" };
  const COLOUR = { scatter: "#e6ab02", replicate: "#e45756", parallel_apply: "#4c78a8",
                   gather: "#b279a2", backward: "#54a24b", "sum grads": "#f58518" };
  const text = (v) => (Array.isArray(v[0]) ? v.map((row) => row.map(fmt).join("  ")).join("\n")
                                           : v.map(fmt).join("  "));

  Classroom.scene("dp", (events) => {
    const mine = events.filter((e) => e.lane === "classroom" && e.name.startsWith("dp "));
    if (!mine.length) return null;
    const at = (stage, dev) => mine.find((e) => e.args.stage === stage && e.pid === dev);
    const devices = ranks(byName(mine, "dp scatter"));
    const starts = STAGES.map((s) => minOf(mine.filter((e) => e.args.stage === s), (e) => e.ts));
    return {
      count: STAGES.length + 1,
      render(k, stage, caption, room) {
        const current = STAGES[k - 1];
        caption.textContent = k === 0 ? `One DataParallel step on ${devices.length} devices (threads of one process)` :
          `${k}. ${current}`;
        const strip = el("p", { class: "stages" });
        STAGES.forEach((s, i) => strip.append(el("span", {
          class: i + 1 === k ? "current" : i + 1 < k ? "past" : "", text: `${i + 1} ${s}` })));
        const cards = el("div", { class: "cards" });
        const w = Math.floor(room.w / devices.length) - 14;
        for (const d of devices) {
          const card = el("div", { class: "card", "data-device": d, style: `width:${w}px` },
            el("h3", { text: `device ${d}${d === 0 ? " (main)" : ""}` }));
          const e = current && at(current, d);
          if (e) {
            const f = FIELD[current], v = e.args[VALUE[f]];
            let label = LABEL[f];
            if (f === "input") label += ` ${e.args.rows[0]}..${e.args.rows[1]}`;
            if (f === "weight") label += e.args.shares_storage ? " (IS the model)" : " (a copy)";
            card.append(el("div", { class: "field current", "data-field": f, "data-values": JSON.stringify(v) },
              el("b", { text: label }), el("div", { class: "mat", text: text(v) })));
          } else {
            card.append(el("div", { class: "note", text: k === 0 ? "waiting for the step" : `nothing in ${current}` }));
          }
          cards.append(card);
        }
        stage.append(Draw.main(strip, cards));
        if (k >= 5) stage.append(el("p", { text: `loss ${at("backward", 0).args.loss.toFixed(5)}` }));
        stage.append(Timeline.draw({
          id: "dp", events: mine, width: room.w, step: k, starts,
          rows: devices.map((d) => ({ pid: d, lanes: ["classroom"], label: `device ${d}` })),
          colour: (e) => COLOUR[e.args.stage], label: (e) => e.args.stage,
          current: new Set(mine.filter((e) => e.args.stage === current).map((e) => e.id)),
          pick: (e) => STAGES.indexOf(e.args.stage) + 1,
          rowStarts: (i) => STAGES.map((s) => (at(s, devices[i]) || {}).ts),
          legend: STAGES.map((s) => [COLOUR[s], s]),
          note: "Devices are threads of one process (DataParallel's design): the bars give the order; " +
            "their lengths include the threads waiting for one interpreter.",
        }));
      },
    };
  });
})();
