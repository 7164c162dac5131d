// minidp classroom: the player. Reads the embedded Chrome trace, lets each scene turn it
// into steps, and drives them: play/pause, step, scrub, speed, keyboard, projector mode,
// the address (#scene/step?key=value&..., also when edited by hand: projector=1 and the
// what-if's inputs live after the "?", so a shared or reloaded address keeps them). Scenes register with
// Classroom.scene(key, build); build(events, ctx) returns null when the trace has nothing
// for that scene, else {count, render(k, stage, caption, room)}.
"use strict";
const Classroom = (() => {
  const builders = {};
  const $ = (id) => document.getElementById(id);
  const PH = ["X", "i", "I", "B", "E"];

  // What the page can draw (page.py's `usable` is the same rule): a name and a finite
  // time, and for "X" a finite duration; anything else is left out, and counted.
  function usable(e) {
    if (!e || typeof e !== "object" || !PH.includes(e.ph)) return false;
    if (typeof e.ts !== "number" || !Number.isFinite(e.ts)) return false;
    if (e.ph !== "E" && !(typeof e.name === "string" && e.name)) return false;
    if (e.ph === "X") return typeof e.dur === "number" && Number.isFinite(e.dur) && e.dur >= 0;
    return true;
  }
  const byPid = (a, b) => (typeof a === "number" && typeof b === "number" ? a - b
    : String(a).localeCompare(String(b)));

  // Events with their lane name: to_chrome numbers lanes per trace and names them in
  // "thread_name" metadata; scenes match on names ("comm", "classroom"), not numbers.
  // "B"/"E" pairs become one "X". Each event gets an id: its place in time order.
  function readTrace() {
    const data = JSON.parse($("trace").textContent);
    const all = Array.isArray(data) ? data : data.traceEvents;
    const lanes = {}, procs = {};
    let skipped = 0;
    for (const e of all) {
      if (!e || e.ph !== "M" || !e.args) continue;
      if (e.name === "thread_name") lanes[e.pid + "/" + e.tid] = String(e.args.name);
      if (e.name === "process_name") procs[e.pid] = String(e.args.name);
    }
    const events = [], open = {};
    const recorder = data && !Array.isArray(data) && data.otherData ? data.otherData.recorded_by : null;
    for (const e of all) {
      if (!usable(e)) { if (e && PH.includes(e.ph)) skipped++; continue; }
      const key = e.pid + "/" + e.tid;
      if (e.ph === "B") { (open[key] = open[key] || []).push(e); continue; }
      let ev = e;
      if (e.ph === "E") {
        const b = (open[key] || []).pop();
        if (!b) { skipped++; continue; }
        ev = { ...b, ph: "X", dur: Math.max(0, e.ts - b.ts), args: { ...(b.args || {}), ...(e.args || {}) } };
      }
      const args = ev.args && typeof ev.args === "object" ? ev.args : { value: ev.args };
      events.push({ ...ev, lane: lanes[key] ?? String(ev.tid), args });
    }
    events.sort((a, b) => a.ts - b.ts || byPid(a.pid, b.pid));  // stable: ties keep file order
    events.forEach((e, i) => { e.id = i; });
    return { data, events, procs, skipped, ours: recorder === "python -m minidp classroom" };
  }

  const state = { key: null, scene: null, step: 0, timer: null, built: {}, ctx: null,
                  params: new URLSearchParams() };

  // The address: #scene/step?params. Every change is written back with replaceState (no
  // history entry per step), so a reload or a shared link opens the same view.
  function address() {
    const q = state.params.toString();
    return `#${state.key}/${state.step}${q ? `?${q}` : ""}`;
  }
  function writeAddress() {
    if (state.key && decodeURIComponent(location.hash) !== decodeURIComponent(address())) {
      history.replaceState(null, "", address());
    }
  }
  function param(key) { return state.params.get(key); }
  function setParams(obj) {
    for (const [k, v] of Object.entries(obj)) {
      if (v === null || v === undefined || v === "") state.params.delete(k); else state.params.set(k, String(v));
    }
    writeAddress();
  }

  // Room left for the scene below its caption: the stage's width, and the height down to
  // the controls (a scene sizes its main panel to fit it). Read when asked: after the
  // scene has written its caption, however many lines that took.
  function room(stage, caption) {
    return {
      get w() { return stage.clientWidth; },
      get h() {
        const top = caption.getBoundingClientRect().bottom + window.scrollY;
        const foot = $("controls").getBoundingClientRect().height;
        return Math.max(240, window.innerHeight - foot - top - 14);
      },
    };
  }

  function show(k) {
    const s = state.scene;
    if (!s) return;
    k = Math.max(0, Math.min(s.count - 1, k));
    state.step = k;
    const stage = $("stage");
    stage.replaceChildren();
    const caption = el("p", { class: "caption", id: "caption" });
    stage.append(caption);
    s.render(k, stage, caption, room(stage, caption));
    $("axis").disabled = !stage.querySelector(".tl");  // no timeline here: nothing to toggle
    const counter = $("step");
    counter.dataset.step = String(k);
    counter.textContent = `step ${k} / ${s.count - 1}`;
    $("scrub").max = String(s.count - 1);
    $("scrub").value = String(k);
    writeAddress();
  }

  function select(key, step) {
    pause();
    state.key = key;
    state.scene = state.built[key];
    for (const b of document.querySelectorAll("nav [data-scene]")) {
      b.classList.toggle("active", b.dataset.scene === key);
    }
    const info = Classroom.info[key] || {};
    $("scene-title").textContent = info.title || key;
    $("scene-text").textContent = info.text || "";
    $("scene-ranks").textContent = (state.ctx.ours ? RANKS[info.ranks] : RANKS_ANY[info.ranks]) || "";
    Lesson.link($("scene-lesson"), $("lesson-line"), info.lesson);
    $("scene-note").textContent = state.ctx.skipped ?
      `${state.ctx.skipped} events of this trace have no name, time or duration: not drawn.` : "";
    if (!state.scene) {
      $("stage").replaceChildren(el("p", { class: "absent-msg",
        text: "Not in this trace. Record it: python -m minidp classroom" }));
      $("step").dataset.step = "0";
      $("step").textContent = "step 0 / 0";
      return;
    }
    show(step || 0);
  }

  const RANKS = {
    processes: "Ranks: one process each (gloo over loopback TCP on this machine), so the " +
      "timeline is what each rank really did and when.",
    threads: "Ranks here are threads of one Python process taking turns on one interpreter: " +
      "the values are real, but a bar's length includes waiting for the others — read the " +
      "timeline for order, not for speed.",
    model: "Modelled values, from the lessons' formulas; the measured column is this recording.",
  };
  const RANKS_ANY = {  // a trace the classroom did not record: say only what the trace says
    processes: "Ranks: as this trace recorded them, one track per process: read the timeline " +
      "for what each did and when (how they were connected is not in the trace).",
    threads: "Ranks: as this trace recorded them; if they were threads of one process, a bar's " +
      "length includes waiting for the others.",
    model: RANKS.model,
  };

  function pause() {
    clearInterval(state.timer);
    state.timer = null;
    $("play").textContent = "play";
  }

  function play() {
    if (!state.scene) return;
    if (state.step >= state.scene.count - 1) show(0);
    $("play").textContent = "pause";
    state.timer = setInterval(() => {
      if (state.step >= state.scene.count - 1) pause(); else show(state.step + 1);
    }, Number($("speed").value));
  }

  function fromHash() {
    const text = decodeURIComponent(location.hash.slice(1));
    const cut = text.indexOf("?");
    const [key, step] = (cut < 0 ? text : text.slice(0, cut)).split("/");
    const before = state.params.toString();
    if (cut >= 0) {  // "#dp/3" alone keeps the view's settings; "#dp/3?..." sets them
      state.params = new URLSearchParams(text.slice(cut + 1));
      projector(state.params.get("projector") === "1", false);
    }
    if (!state.built[key]) return false;
    if (key !== state.key) select(key, Number(step) || 0);
    else if ((Number(step) || 0) !== state.step || before !== state.params.toString()) show(Number(step) || 0);
    return true;
  }

  function projector(on, redraw = true) {
    if (document.body.classList.contains("projector") === on) return;
    document.body.classList.toggle("projector", on);
    state.params[on ? "set" : "delete"]("projector", "1");
    if (redraw) show(state.step);
  }
  const toggleProjector = () => projector(!document.body.classList.contains("projector"));

  // Keys work wherever the focus is after a click (a button, the speed menu, the scrubber),
  // except in a field being typed in (the what-if's) and while the lesson is open.
  function typing(t) {
    return (t.tagName === "INPUT" && t.id !== "scrub") || t.tagName === "TEXTAREA" || t.isContentEditable;
  }
  function keydown(e) {
    if (typing(e.target) || $("lesson-box").open || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.target.tagName === "SELECT" && ["ArrowUp", "ArrowDown", "Enter"].includes(e.key)) return;
    const keys = Object.keys(builders);
    if (e.key === "ArrowRight") { pause(); show(state.step + 1); }
    else if (e.key === "ArrowLeft") { pause(); show(state.step - 1); }
    else if (e.key === "Home") { pause(); show(0); }
    else if (e.key === "End") { pause(); show(state.scene ? state.scene.count - 1 : 0); }
    else if (e.key === " ") { state.timer ? pause() : play(); }
    else if (e.key === "p" || e.key === "P") toggleProjector();
    else if (e.key === "l" || e.key === "L") { Timeline.toggleAxis(); show(state.step); }
    else if (["+", "=", "-", "0"].includes(e.key)) { Timeline.key(e.key); show(state.step); }
    else if (/^[1-9]$/.test(e.key) && state.built[keys[Number(e.key) - 1]]) select(keys[Number(e.key) - 1]);
    else return;
    e.preventDefault();  // space must not scroll, arrows must not move the range twice
  }

  function start() {
    Classroom.info = JSON.parse($("scenes").textContent);
    const { events, procs, skipped, ours } = readTrace();
    state.ctx = { procs, skipped, ours, link: events.find((e) => e.name === "link alpha-beta") };
    const nav = $("scenes-nav");
    const keys = Object.keys(builders);
    let first = null;
    keys.forEach((key, i) => {
      state.built[key] = builders[key](events, state.ctx);
      const info = Classroom.info[key] || {};
      const b = el("button", { "data-scene": key, title: `${info.title || key} (key ${i + 1})` },
        el("kbd", { text: String(i + 1) }), el("span", { class: "long", text: info.title || key }),
        el("span", { class: "short", text: info.short || key }));
      if (!state.built[key]) b.classList.add("absent");
      else if (!first && key !== "whatif" && key !== "trace") first = key;
      b.addEventListener("click", () => select(key));
      nav.append(b);
    });
    $("prev").onclick = () => { pause(); show(state.step - 1); };
    $("next").onclick = () => { pause(); show(state.step + 1); };
    $("play").onclick = () => (state.timer ? pause() : play());
    $("scrub").oninput = (e) => { pause(); show(Number(e.target.value)); };
    $("speed").onchange = () => { $("speed").blur(); if (state.timer) { pause(); play(); } };
    $("projector").onclick = toggleProjector;
    $("axis").onclick = () => { Timeline.toggleAxis(); show(state.step); };
    document.addEventListener("keydown", keydown);
    window.addEventListener("hashchange", fromHash);
    let resize = null;
    window.addEventListener("resize", () => {
      clearTimeout(resize);
      resize = setTimeout(() => show(state.step), 120);
    });
    if (!fromHash()) select(first || (state.built.trace ? "trace" : keys[0]));
  }

  function go(k) { pause(); show(k); }
  function scene(key, build) { builders[key] = build; }
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
      else if (v !== undefined && v !== null) e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k);
    return e;
  }

  return { scene, start, go, el, info: {}, state, param, setParams };
})();
