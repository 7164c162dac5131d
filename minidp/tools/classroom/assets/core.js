// minidp classroom: the player. Reads the embedded Chrome trace, lets each scene turn it
// into steps, and drives them: play/pause, step, scrub, speed, keyboard, projector mode,
// the address (#scene/step, also when edited by hand). Scenes register with
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
    return { data, events, procs, skipped };
  }

  const state = { key: null, scene: null, step: 0, timer: null, built: {}, ctx: null };

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
    if (location.hash !== `#${state.key}/${k}`) history.replaceState(null, "", `#${state.key}/${k}`);
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
    $("scene-ranks").textContent = RANKS[info.ranks] || "";
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
    const [key, step] = decodeURIComponent(location.hash.slice(1)).split("/");
    if (!state.built[key]) return false;
    if (key !== state.key) select(key, Number(step) || 0);
    else if ((Number(step) || 0) !== state.step) show(Number(step) || 0);
    return true;
  }

  function toggleProjector() {
    document.body.classList.toggle("projector");
    show(state.step);
  }

  function keydown(e) {
    if (["SELECT", "INPUT"].includes(e.target.tagName) || $("lesson-box").open) return;
    const keys = Object.keys(builders);
    if (e.key === "ArrowRight") { pause(); show(state.step + 1); }
    else if (e.key === "ArrowLeft") { pause(); show(state.step - 1); }
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
    const { events, procs, skipped } = readTrace();
    state.ctx = { procs, skipped, link: events.find((e) => e.name === "link alpha-beta") };
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
    $("speed").onchange = () => { if (state.timer) { pause(); play(); } };
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

  return { scene, start, go, el, info: {}, state };
})();
