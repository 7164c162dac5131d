// minidp classroom: the player. Reads the embedded Chrome trace, lets each scene turn it
// into steps, and drives them: play/pause, step, scrub, speed, keyboard, projector mode.
// Scenes register with Classroom.scene(key, build); build(events) returns null when the
// trace has nothing for that scene, else {count, render(k, stage, caption)}.
"use strict";
const Classroom = (() => {
  const builders = {};
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k);
    return e;
  }

  // Events with their lane name: to_chrome numbers lanes per trace and names them in
  // "thread_name" metadata; scenes match on names ("comm", "classroom"), not numbers.
  function readTrace() {
    const data = JSON.parse($("trace").textContent);
    const all = Array.isArray(data) ? data : data.traceEvents;
    const names = {};
    for (const e of all) {
      if (e.ph === "M" && e.name === "thread_name") names[e.pid + "/" + e.tid] = e.args.name;
    }
    const events = all.filter((e) => e.ph === "X" || e.ph === "i" || e.ph === "I")
      .map((e) => ({ ...e, lane: names[e.pid + "/" + e.tid] ?? String(e.tid),
                     args: e.args || {} }));
    events.sort((a, b) => a.ts - b.ts || a.pid - b.pid);  // stable: ties keep file order
    return { data, events };
  }

  const state = { key: null, scene: null, step: 0, timer: null, built: {} };

  function show(k) {
    const s = state.scene;
    if (!s) return;
    k = Math.max(0, Math.min(s.count - 1, k));
    state.step = k;
    const stage = $("stage");
    stage.replaceChildren();
    const caption = el("p", { class: "caption", id: "caption" });
    stage.append(caption);
    s.render(k, stage, caption);
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
    const a = $("scene-lesson");
    a.textContent = info.lesson || "";
    if (info.href) a.href = info.href; else a.removeAttribute("href");
    $("scene-note").textContent = state.scene ? "" :
      "This trace has no events for this scene. Record one: python -m minidp classroom";
    if (!state.scene) {
      $("stage").replaceChildren(el("p", { class: "absent-msg", text: "not in this trace" }));
      $("step").dataset.step = "0";
      $("step").textContent = "step 0 / 0";
      return;
    }
    show(step || 0);
  }

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

  function start() {
    Classroom.info = JSON.parse($("scenes").textContent);
    const { events } = readTrace();
    const nav = $("scenes-nav");
    let first = null;
    for (const key of Object.keys(builders)) {
      state.built[key] = builders[key](events);
      const title = (Classroom.info[key] || {}).title || key;
      const b = el("button", { "data-scene": key, text: title });
      if (!state.built[key]) b.classList.add("absent");
      else if (!first) first = key;
      b.addEventListener("click", () => select(key));
      nav.append(b);
    }
    $("prev").onclick = () => { pause(); show(state.step - 1); };
    $("next").onclick = () => { pause(); show(state.step + 1); };
    $("play").onclick = () => (state.timer ? pause() : play());
    $("scrub").oninput = (e) => { pause(); show(Number(e.target.value)); };
    $("speed").onchange = () => { if (state.timer) { pause(); play(); } };
    $("projector").onclick = () => document.body.classList.toggle("projector");
    document.addEventListener("keydown", (e) => {
      if (e.target.tagName === "SELECT") return;
      const keys = Object.keys(builders);
      if (e.key === "ArrowRight") { pause(); show(state.step + 1); }
      else if (e.key === "ArrowLeft") { pause(); show(state.step - 1); }
      else if (e.key === " ") { state.timer ? pause() : play(); }
      else if (e.key === "p" || e.key === "P") document.body.classList.toggle("projector");
      else if (/^[1-9]$/.test(e.key) && keys[Number(e.key) - 1]) select(keys[Number(e.key) - 1]);
      else return;
      e.preventDefault();  // space must not scroll, arrows must not move the range twice
    });
    const [hashKey, hashStep] = location.hash.slice(1).split("/");
    if (builders[hashKey]) select(hashKey, Number(hashStep) || 0);
    else select(first || Object.keys(builders)[0]);
  }

  // Shared helpers for scenes.
  const fmt = (v) => (Number.isInteger(v) ? String(v) : v.toFixed(3));
  const byName = (events, name) => events.filter((e) => e.name === name);
  const ranks = (events) => [...new Set(events.map((e) => e.pid))].sort((a, b) => a - b);
  function bytes(n) {
    if (n < 1024) return `${n} B`;
    return n < 1048576 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1048576).toFixed(2)} MiB`;
  }
  function scene(key, build) { builders[key] = build; }

  return { scene, start, el, fmt, byName, ranks, bytes, info: {} };
})();
