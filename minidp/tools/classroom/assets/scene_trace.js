// Scene "trace": any Chrome trace as a timeline — one row per process and thread, named
// from the trace's own metadata, nested slices one level per track (as Perfetto draws
// them), colours by category (or name) with the busiest groups each their own, a send's
// arrow to its receive (minidp's tracer writes both), and a search over names. Step k is
// the k-th event in time order; the caption shows it (track, time, duration, args);
// clicking a bar steps to it. Works on minidp's tracer output, torch.profiler's
// export_chrome_trace, and large traces (crowded pixels drawn as one).
(() => {
  const { el } = Classroom;
  const { micros } = Draw;
  const PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b",
                   "#ff9da6", "#9d755d"];
  const OTHER = "#bdbdbd";
  const MAX_ROWS = 40;
  let query = "";  // the search box's text, kept across steps

  // Each send paired with its receive: the k-th message from a to b with b's k-th receive
  // from a (minidp's tracer: "send"/"recv" instants with their peer). A pair of ranks whose
  // counts differ (a group whose ranks are not the trace's) is left out, not guessed.
  function flows(events) {
    const sends = new Map(), recvs = new Map();
    for (const e of events) {
      if ((e.name !== "send" && e.name !== "recv") || typeof e.args.peer !== "number") continue;
      const [map, key] = e.name === "send" ? [sends, `${e.pid}>${e.args.peer}`] : [recvs, `${e.args.peer}>${e.pid}`];
      (map.get(key) || map.set(key, []).get(key)).push(e);
    }
    const out = [];
    for (const [key, s] of sends) {
      const r = recvs.get(key);
      if (r && r.length === s.length) s.forEach((e, i) => out.push([e, r[i]]));
    }
    return out;
  }

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
    const rows = list.map((t) => ({ label: `${proc(t.pid)} / ${t.lane}` }));
    const t0 = events[0].ts;
    const groupOf = (e) => (typeof e.cat === "string" && e.cat ? e.cat : e.name.split(/[ :]/)[0]);
    const time = new Map(), top = new Map();
    for (const e of events) {
      const g = groupOf(e);
      time.set(g, (time.get(g) || 0) + (e.dur || 0) + 1e-9);
      if (e.ph !== "X") continue;
      const t = top.get(e.name) || { name: e.name, total: 0, n: 0 };
      t.total += e.dur; t.n++; top.set(e.name, t);
    }
    // the busiest groups each get their own colour; the rest share one, and say so
    const groups = [...time.keys()].sort((a, b) => time.get(b) - time.get(a));
    const colourOf = new Map(groups.slice(0, PALETTE.length).map((g, i) => [g, PALETTE[i]]));
    const colour = (e) => colourOf.get(groupOf(e)) || OTHER;
    const legend = groups.slice(0, PALETTE.length).map((g) => [colourOf.get(g), g.length > 24 ? `${g.slice(0, 23)}…` : g]);
    if (groups.length > PALETTE.length) legend.push([OTHER, `${groups.length - PALETTE.length} other groups`]);
    const starts = events.map((e) => e.ts);
    const busiest = [...top.values()].sort((a, b) => b.total - a.total).slice(0, 8);
    const pairs = flows(events);

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
            title: `${cur.name} ${args}` }));
        }
        query = Classroom.param("find") ?? query;
        const q = query.toLowerCase();
        const found = q ? events.filter((e) => e.name.toLowerCase().includes(q)) : [];
        const box = el("input", { type: "search", id: "trace-find", value: query, placeholder: "search names",
                                  "aria-label": "search event names" });
        const count = el("span", { class: "note", id: "trace-found", "data-count": found.length,
          text: q ? `${found.length} match${found.length === 1 ? "" : "es"}${found.length ? " (Enter: the next)" : ""}` : "" });
        const again = (step) => {  // redraw at `step`, the typing going on in the new box
          Classroom.go(step);
          const b = document.getElementById("trace-find");
          b.focus();
          b.setSelectionRange(b.value.length, b.value.length);
        };
        box.oninput = () => { query = box.value; Classroom.setParams({ find: query }); again(k); };
        box.onkeydown = (ev) => {
          if (ev.key !== "Enter" || !found.length) return;
          const next = found.find((e) => e.id + 1 > k) || found[0];  // after this step, else the first
          again(next.id + 1);
        };
        const search = el("div", { class: "tl-search" }, box, count);
        const main = Draw.main(search);
        stage.append(main);
        main.append(Timeline.draw({
          id: "trace", axis: "wall", events, rows, width: room.w, step: k, starts, depth: true, scroll: true,
          height: room.h - main.offsetHeight - 8, flows: pairs, match: new Set(found.map((e) => e.id)),
          rowOf: (e) => { const i = rowIndex.get(`${e.pid}/${e.tid}`); return i === undefined ? -1 : i; },
          colour, label: (e) => e.name, current: new Set(cur ? [cur.id] : []), pick: (e) => e.id + 1, legend,
          note: hidden ? `${hidden} tracks with the fewest events are not drawn (${MAX_ROWS} shown).` : "",
        }));
        stage.append(el("p", { class: "note", text: "Most time, by name: " +
          busiest.map((b) => `${b.name} ${micros(b.total)} (${b.n}×)`).join(", ") +
          (pairs.length ? `. Arrows: ${pairs.length} messages, each send to its receive.` : "") }));
      },
    };
  });
})();
