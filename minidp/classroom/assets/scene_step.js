// Scenes "dp" (one DataParallel step, each device's real tensors, stage by stage) and
// "ddp" (one DDP backward on rank 0: hooks firing, buckets filling and launching, the
// all-reduces overlapping backward on every rank's timeline).
(() => {
  const { el, fmt, byName, ranks, bytes } = Classroom;
  const STAGES = ["scatter", "replicate", "parallel_apply", "gather", "backward", "sum grads"];
  const FIELD = { scatter: "input", replicate: "weight", parallel_apply: "output",
                  gather: "gathered", backward: "grad", "sum grads": "summed" };
  const LABEL = { input: "input rows", weight: "replica: layer 0 weight", output: "output",
                  gathered: "gathered output (main device)", grad: "replica: d loss / d bias",
                  summed: "summed into the model's .grad" };
  const VALUE = { input: "input", weight: "weight", output: "output", gathered: "output",
                  grad: "grad", summed: "grad" };
  const COLOUR = { scatter: "#e6ab02", replicate: "#c44e52", parallel_apply: "#3a6ea5",
                   gather: "#8172b2", backward: "#2a9d8f", "sum grads": "#d95f02" };
  const text = (v) => (Array.isArray(v[0]) ? v.map((row) => row.map(fmt).join("  ")).join("\n")
                                           : v.map(fmt).join("  "));

  Classroom.scene("dp", (events) => {
    const mine = events.filter((e) => e.lane === "classroom" && e.name.startsWith("dp "));
    if (!mine.length) return null;
    const at = (stage, dev) => mine.find((e) => e.args.stage === stage && e.pid === dev);
    const devices = ranks(byName(mine, "dp scatter"));
    return {
      count: STAGES.length + 1,
      render(k, stage, caption) {
        const current = STAGES[k - 1];
        caption.textContent = k === 0 ? `One DataParallel step on ${devices.length} devices` :
          `${k}. ${current}`;
        const strip = el("p", { class: "stages" });
        STAGES.forEach((s, i) => strip.append(el("span", {
          class: i + 1 === k ? "current" : i + 1 < k ? "past" : "", text: s })));
        stage.append(strip);
        const cards = el("div", { class: "cards" });
        for (const d of devices) {
          const card = el("div", { class: "card", "data-device": d },
            el("h3", { text: `device ${d}${d === 0 ? " (main)" : ""}` }));
          STAGES.slice(0, k).forEach((s, i) => {
            const e = at(s, d);
            if (!e) return;
            const f = FIELD[s], v = e.args[VALUE[f]];
            let label = LABEL[f];
            if (f === "input") label += ` ${e.args.rows[0]}..${e.args.rows[1]}`;
            if (f === "weight") label += e.args.shares_storage ? " (IS the model)" : " (a copy)";
            card.append(el("div", { class: `field${i + 1 === k ? " current" : ""}`,
                                    "data-field": f, "data-values": JSON.stringify(v) },
              el("b", { text: label }), el("div", { class: "mat", text: text(v) })));
          });
          cards.append(card);
        }
        stage.append(cards);
        if (k >= 5) stage.append(el("p", { text: `loss ${at("backward", 0).args.loss.toFixed(5)}` }));
        const cursor = k === 0 ? mine[0].ts : Math.min(...mine.filter((e) => e.args.stage === current).map((e) => e.ts));
        const rows = devices.map((d) => ({ pid: d, lanes: ["classroom"], label: `device ${d}` }));
        stage.append(Timeline.draw(mine, rows, cursor, (e) => COLOUR[e.args.stage], (e) => e.args.stage));
      },
    };
  });

  const DDP = ["forward", "grad ready", "bucket launch", "bucket finish", "wait for buckets"];
  const isDdp = (e) => DDP.includes(e.name) || e.name.startsWith("all-reduce bucket ");

  function describe(e) {
    if (e.name === "grad ready") return `hook: gradient of ${e.args.param} is ready`;
    if (e.name === "bucket launch") return `bucket ${e.args.bucket} full: launched (${bytes(e.args.bytes)})`;
    if (e.name.startsWith("all-reduce")) return `comm thread: ${e.name} starts`;
    if (e.name === "bucket finish") return `comm thread: bucket ${e.args.bucket} all-reduced`;
    if (e.name === "wait for buckets") return "last bucket launched: backward waits for the all-reduces";
    return "forward";
  }

  Classroom.scene("ddp", (events) => {
    const ready = byName(events, "grad ready");
    if (!ready.length) return null;
    const rank = Math.min(...ready.map((e) => e.pid));
    const seq = events.filter((e) => e.pid === rank && isDdp(e));
    const layoutEv = events.find((e) => e.name === "ddp buckets" && e.pid === rank);
    const layout = layoutEv ? layoutEv.args.buckets :
      [...new Set(byName(seq, "bucket launch").map((e) => e.args.bucket))]
        .map((b) => ({ bucket: b, params: [] }));
    const all = events.filter((e) => isDdp(e) || e.name === "backward");
    const wait = seq.find((e) => e.name === "wait for buckets");
    return {
      count: seq.length + 1,
      render(k, stage, caption) {
        const done = seq.slice(0, k);
        const cur = seq[k - 1];
        caption.append(el("span", { "data-event": cur ? cur.name : "",
          text: cur ? `rank ${rank}: ${describe(cur)}` : `rank ${rank}, one step after the bucket rebuild` }));
        const readyNow = new Set(byName(done, "grad ready").map((e) => e.args.param));
        const launched = new Set(byName(done, "bucket launch").map((e) => e.args.bucket));
        const finished = new Set(byName(done, "bucket finish").map((e) => e.args.bucket));
        const panel = el("div", {});
        for (const b of layout) {
          const st = finished.has(b.bucket) ? "reduced" : launched.has(b.bucket) ? "launched" : "filling";
          const n = b.params.filter((p) => readyNow.has(p)).length;
          const div = el("div", { class: "bucket", "data-bucket": b.bucket, "data-state": st },
            el("b", { text: `bucket ${b.bucket}: ${st}` + (b.params.length ? ` — ${n}/${b.params.length} gradients` : "") }), " ");
          for (const p of b.params) {
            div.append(el("span", { class: "chip", "data-param": p, "data-ready": readyNow.has(p) ? "1" : "0", text: p }));
          }
          panel.append(div);
        }
        stage.append(panel);
        if (wait) {
          const end = wait.ts;
          let during = 0, total = 0;
          for (const e of seq.filter((e) => e.name.startsWith("all-reduce"))) {
            total += e.dur;
            during += Math.max(0, Math.min(e.ts + e.dur, end) - e.ts);
          }
          stage.append(el("p", { text: `rank ${rank}: ${(during / 1000).toFixed(1)} of ${(total / 1000).toFixed(1)} ms of all-reduce ran while backward was still running` }));
        }
        const rows = [];
        for (const r of ranks(all)) {
          rows.push({ pid: r, lanes: ["compute", "backward"], label: `rank ${r} compute/hooks` });
          rows.push({ pid: r, lanes: ["comm"], label: `rank ${r} all-reduce` });
        }
        const colour = (e) => (e.name === "forward" ? "#3a6ea5" : e.name === "grad ready" ? "#2a9d8f" :
          e.name === "wait for buckets" ? "#bbbbbb" : e.name.startsWith("all-reduce") ? "#e07a1f" :
          e.name === "bucket launch" ? "#c00" : null);
        const cursor = cur ? cur.ts : seq[0].ts;
        stage.append(Timeline.draw(all, rows, cursor, colour, (e) => e.name.replace("all-reduce bucket ", "b")));
      },
    };
  });
})();
