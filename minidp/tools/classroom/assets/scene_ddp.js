// Scene "ddp": one DDP backward on one rank, event by event — hooks firing, buckets filling
// and launching — and every rank's forward, backward and all-reduces on one timeline, so
// the all-reduces running under backward (the overlap) show. Reads only what minidp's DDP
// writes (and a "backward" span, which the classroom's recording and a user's script add),
// so a user's own DDP trace gives the same scene.
(() => {
  const { el } = Classroom;
  const { byName, ranks, bytes, micros } = Draw;
  const DDP = ["forward", "ddp buckets", "grad ready", "bucket launch", "bucket finish", "wait for buckets"];
  const isDdp = (e) => DDP.includes(e.name) || e.name.startsWith("all-reduce bucket ");
  const COLOUR = { forward: "#4c78a8", backward: "#9ecf8f", "grad ready": "#1e7b34",
                   "wait for buckets": "#c9c9c9", "all-reduce": "#e6a23c", "bucket launch": "#8c564b",
                   "bucket finish": "#7570b3" };
  const colour = (e) => (e.name.startsWith("all-reduce bucket ") ? COLOUR["all-reduce"] : COLOUR[e.name] || null);

  function describe(e) {
    if (e.name === "grad ready") return `hook: gradient of ${e.args.param} is ready`;
    if (e.name === "bucket launch") return `bucket ${e.args.bucket} full: launched (${bytes(e.args.bytes)})`;
    if (e.name.startsWith("all-reduce")) return `comm thread: ${e.name} starts`;
    if (e.name === "bucket finish") return `comm thread: bucket ${e.args.bucket} all-reduced`;
    if (e.name === "wait for buckets") return "last bucket launched: backward waits for the all-reduces";
    if (e.name === "ddp buckets") return `forward done: ${e.args.buckets.length} buckets armed for backward`;
    return "forward";
  }

  Classroom.scene("ddp", (events) => {
    const ready = byName(events, "grad ready");
    if (!ready.length) return null;
    const rank = Math.min(...new Set(ready.map((e) => e.pid)));
    const seq = events.filter((e) => e.pid === rank && isDdp(e) && e.ph !== "M");
    const layouts = byName(seq, "ddp buckets");
    const all = events.filter((e) => (isDdp(e) && e.name !== "ddp buckets") || (e.name === "backward" && e.ph === "X"));
    const who = ranks(all);
    const comm = (e) => e.name.startsWith("all-reduce") || e.name.startsWith("bucket ");
    return {
      count: seq.length + 1,
      render(k, stage, caption, room) {
        const cur = seq[k - 1];
        const t = cur ? cur.ts : -Infinity;
        const since = layouts.filter((e) => e.ts <= t).pop();  // this backward's layout
        const done = seq.slice(0, k).filter((e) => !since || e.ts >= since.ts);
        caption.append(el("span", { "data-event": cur ? cur.name : "",
          text: cur ? `rank ${rank}: ${describe(cur)}` : `rank ${rank}, one step after the bucket rebuild` }));
        const readyNow = new Set(byName(done, "grad ready").map((e) => e.args.param));
        const launched = new Set(byName(done, "bucket launch").map((e) => e.args.bucket));
        const finished = new Set(byName(done, "bucket finish").map((e) => e.args.bucket));
        const layout = (since || layouts[0] || { args: { buckets: [] } }).args.buckets;
        const panel = el("div", {});
        for (const b of layout) {
          const st = finished.has(b.bucket) ? "reduced" : launched.has(b.bucket) ? "launched" : "filling";
          const n = b.params.filter((p) => readyNow.has(p)).length;
          const div = el("div", { class: "bucket", "data-bucket": b.bucket, "data-state": st },
            el("b", { text: `bucket ${b.bucket} (${bytes(b.bytes)}): ${st} — ${n}/${b.params.length} gradients` }), " ");
          for (const p of b.params) {
            div.append(el("span", { class: "chip", "data-param": p, "data-ready": readyNow.has(p) ? "1" : "0", text: p }));
          }
          panel.append(div);
        }
        if (!layout.length) panel.append(el("p", { class: "note", text: "(no bucket layout in this trace)" }));
        // one row per rank: its compute above, its communication thread below
        const rows = who.map((r) => ({ label: `rank ${r}`, match: (e) => e.pid === r }));
        const starts = seq.map((e) => e.ts);
        const own = (r) => events.filter((e) => e.pid === r && isDdp(e)).slice(0, seq.length).map((e) => e.ts);
        const main = Draw.main(panel);
        stage.append(main);
        main.append(Timeline.draw({
          id: "ddp", axis: "wall", events: all, width: room.w, rows, colour, step: k, starts,
          track: (e) => (comm(e) ? 1 : 0),
          stepsNote: "Logical steps: one column per event of rank 0, not per unit of time — a bar across " +
            "many columns may have spent most of its time in one (the wall clock says how long; L).",
          height: room.h - main.offsetHeight - 8, rowStarts: (i) => own(who[i]),
          label: (e) => e.name.replace("all-reduce bucket ", "bucket ").replace("wait for buckets", "wait"),
          current: new Set(cur && cur.name !== "ddp buckets" ? [cur.id] : []),
          pick: (e) => { const i = seq.indexOf(e); return i >= 0 ? i + 1 : null; },
          legend: [[COLOUR.forward, "forward"], [COLOUR.backward, "backward"], [COLOUR["grad ready"], "gradient ready (hook)", true],
                   [COLOUR["bucket launch"], "bucket launched", true], [COLOUR["all-reduce"], "bucket all-reduce (comm thread, lower track)"],
                   [COLOUR["bucket finish"], "bucket done", true], [COLOUR["wait for buckets"], "backward waits for buckets"]],
        }));
        stage.append(overlap());
      },
    };

    // Compute vs communication on each rank: how much of the all-reduce hid behind
    // backward (ran before backward began to wait), and how long backward computed.
    function overlap() {
      const per = who.map((r) => {
        const mine = all.filter((e) => e.pid === r);
        const wait = mine.find((e) => e.name === "wait for buckets"), back = mine.find((e) => e.name === "backward");
        let during = 0, total = 0;
        for (const e of mine.filter((q) => q.name.startsWith("all-reduce"))) {
          total += e.dur;
          during += wait ? Math.max(0, Math.min(e.ts + e.dur, wait.ts) - e.ts) : 0;
        }
        return { r, during, total, compute: back && wait ? wait.ts - back.ts : null };
      });
      const p0 = per[0];
      const others = per.length > 1 ? ` (every rank: ${per.map((p) => `${Math.round((100 * p.during) / (p.total || 1))}%`).join(", ")} hidden)` : "";
      return el("p", { id: "ddp-overlap", "data-during": p0.during, "data-total": p0.total,
        text: `Compute vs communication, rank ${p0.r}: backward computed for ${p0.compute === null ? "–" : micros(p0.compute)}; ` +
          `${micros(p0.during)} of ${micros(p0.total)} of all-reduce ran while it still computed (hidden), the ` +
          `rest after (exposed: backward waits for it)${others}.` });
    }
  });
})();
