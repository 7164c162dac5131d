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
          // every stage's content in one place, this one shown: the card is as tall at every step
          const stack = el("div", { class: "stack" });
          for (const stg of [null, ...STAGES]) {
            const e = stg && at(stg, d), on = stg === (current || null);
            if (e) {
              const f = FIELD[stg], v = e.args[VALUE[f]];
              let label = LABEL[f];
              if (f === "input") label += ` ${e.args.rows[0]}..${e.args.rows[1]}`;
              if (f === "weight") label += e.args.shares_storage ? " (IS the model)" : " (a copy)";
              stack.append(el("div", { class: on ? "field current" : "off", ...(on ? { "data-field": f, "data-values": JSON.stringify(v) } : {}) },
                el("b", { text: label }), el("div", { class: "mat", text: text(v) })));
            } else {
              stack.append(el("div", { class: on ? "note" : "off", text: stg ? `nothing in ${stg}` : "waiting for the step" }));
            }
          }
          card.append(stack);
          cards.append(card);
        }
        const loss = el("p", { class: k >= 5 ? "" : "off", text: `loss ${at("backward", 0).args.loss.toFixed(5)}` });
        const main = Draw.main(strip, cards, loss);
        stage.append(main);
        main.append(Timeline.draw({ height: room.h - main.offsetHeight - 8,
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
