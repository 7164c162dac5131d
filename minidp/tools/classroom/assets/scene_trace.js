// Scene "trace": any Chrome trace as a timeline — one row per process and thread, named
// from the trace's own metadata, colours by category (or name). Step k is the k-th event
// in time order; the caption shows it whole (track, time, duration, args); clicking a bar
// steps to it. Also the names that took the most time. Works on minidp's tracer output,
// torch.profiler's export_chrome_trace, and large traces (crowded pixels drawn as one).
(() => {
  const { el } = Classroom;
  const { micros } = Draw;
  const PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b",
                   "#ff9da6", "#9d755d", "#bab0ac"];
  const MAX_ROWS = 40;

  function hash(s) { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return Math.abs(h); }

  Classroom.scene("trace", (events, ctx) => {
    if (!events.length) return null;
    const tracks = new Map();
    for (const e of events) {
      const key = `${e.pid}/${e.tid}`;
      if (!tracks.has(key)) tracks.set(key, { key, pid: e.pid, lane: e.lane, n: 0 });
      tracks.get(key).n++;
    }
    const cmp = (a, b) => (typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b)));
    let list = [...tracks.values()].sort((a, b) => cmp(a.pid, b.pid) || String(a.lane).localeCompare(String(b.lane)));
    const hidden = list.length > MAX_ROWS ? list.length - MAX_ROWS : 0;
    if (hidden) list = [...list].sort((a, b) => b.n - a.n).slice(0, MAX_ROWS).sort((a, b) => cmp(a.pid, b.pid));
    const rowIndex = new Map(list.map((t, i) => [t.key, i]));
    const proc = (pid) => ctx.procs[pid] || `pid ${pid}`;
    const rows = list.map((t) => ({ label: `${proc(t.pid)} / ${t.lane}`.slice(0, 48) }));
    const t0 = events[0].ts;
    const groupOf = (e) => (typeof e.cat === "string" && e.cat ? e.cat : e.name.split(/[ :]/)[0]);
    const colour = (e) => PALETTE[hash(groupOf(e)) % PALETTE.length];
    const starts = events.map((e) => e.ts);
    const top = new Map();
    for (const e of events) if (e.ph === "X") {
      const t = top.get(e.name) || { name: e.name, total: 0, n: 0 };
      t.total += e.dur; t.n++; top.set(e.name, t);
    }
    const busiest = [...top.values()].sort((a, b) => b.total - a.total).slice(0, 8);
    const groups = [...new Set(events.slice(0, 20000).map(groupOf))].slice(0, 10);

    return {
      count: events.length + 1,
      render(k, stage, caption, room) {
        const cur = events[k - 1];
        if (!cur) caption.textContent = `${events.length} events on ${tracks.size} tracks; step through them, or click a bar`;
        else {
          const args = JSON.stringify(cur.args);
          caption.append(el("span", { "data-event": cur.name, text: `${cur.name} — ${proc(cur.pid)} / ${cur.lane}, at ` +
            `${micros(cur.ts - t0)}${cur.ph === "X" ? `, lasting ${micros(cur.dur)}` : ""}` +
            (args !== "{}" ? `; args ${args.length > 70 ? args.slice(0, 70) + "…" : args}` : ""),
            title: args }));
        }
        stage.append(Draw.main(Timeline.draw({
          id: "trace", axis: "wall", events, rows, width: room.w, step: k, starts, height: room.h - 8,
          rowOf: (e) => { const i = rowIndex.get(`${e.pid}/${e.tid}`); return i === undefined ? -1 : i; },
          colour, label: (e) => e.name, current: new Set(cur ? [cur.id] : []), pick: (e) => e.id + 1,
          legend: groups.map((g) => [PALETTE[hash(g) % PALETTE.length], g]),
          note: hidden ? `${hidden} tracks with the fewest events are not drawn (${MAX_ROWS} shown).` : "",
        })));
        stage.append(el("p", { class: "note", text: "Most time, by name: " +
          busiest.map((b) => `${b.name} ${micros(b.total)} (${b.n}×)`).join(", ") }));
      },
    };
  });
})();
