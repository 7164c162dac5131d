// Shared drawing helpers: elements, SVG, text sizes, numbers, and bars on ONE scale.
// A scene makes one scale (Draw.scale(maxBytes, px)) and draws every byte bar with it, so
// two bars of equal bytes have equal length wherever they are on the page.
const Draw = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const { el } = Classroom;

  function svg(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Pixel sizes of the page's text right now (projector mode changes them).
  const fontPx = () => parseFloat(getComputedStyle(document.body).fontSize);
  const smallPx = () => (document.body.classList.contains("projector") ?
    Math.max(18, 0.9 * fontPx()) : 0.88 * fontPx());
  const canvas = document.createElement("canvas").getContext("2d");
  function textWidth(text, px, bold) {
    canvas.font = `${bold ? "bold " : ""}${px}px system-ui, sans-serif`;
    return canvas.measureText(String(text)).width;
  }

  // `text` cut to `w` px (an ellipsis says so: put the whole text in a title).
  function fitText(text, w, px) {
    if (textWidth(text, px) <= w) return text;
    let n = text.length;
    while (n > 1 && textWidth(text.slice(0, n) + "…", px) > w) n--;
    return text.slice(0, n) + "…";
  }

  // Loops, not Math.max(...list): a trace may hold hundreds of thousands of events.
  function maxOf(list, f = (x) => x, empty = 0) {
    let m = -Infinity;
    for (const x of list) { const v = f(x); if (v > m) m = v; }
    return m === -Infinity ? empty : m;
  }
  function minOf(list, f = (x) => x, empty = 0) {
    let m = Infinity;
    for (const x of list) { const v = f(x); if (v < m) m = v; }
    return m === Infinity ? empty : m;
  }
  const byName = (events, name) => events.filter((e) => e.name === name);
  const ranks = (events) => [...new Set(events.map((e) => e.pid))].sort((a, b) => a - b);
  const fmt = (v) => (Number.isInteger(v) ? String(v) : v.toFixed(3));

  function bytes(n) {
    if (n === null || n === undefined || !Number.isFinite(n)) return "–";
    const a = Math.abs(n);
    if (a < 1024) return `${n} B`;
    if (a < 1048576) return `${(n / 1024).toFixed(1)} KiB`;
    if (a < 1073741824) return `${(n / 1048576).toFixed(2)} MiB`;
    return `${(n / 1073741824).toFixed(2)} GiB`;
  }
  function micros(us) {
    if (!Number.isFinite(us)) return "–";
    const a = Math.abs(us);
    if (a > 0 && a < 0.1) return `${+(us * 1000).toPrecision(2)} ns`;
    if (a < 1000) return `${us.toFixed(a < 10 ? 1 : 0)} µs`;
    if (a < 1e6) return `${(us / 1000).toFixed(a < 1e4 ? 2 : 1)} ms`;
    return `${(us / 1e6).toFixed(2)} s`;
  }

  // One scale: px per byte fixed for a whole scene (not per card, not per step).
  function scale(maxBytes, px) {
    const per = px / Math.max(maxBytes, 1);
    return { per, px: (b) => Math.max(0, b) * per };
  }
  // A bar of stacked parts [{cls, bytes, title}] on scale `s`; each part carries its bytes.
  function bar(parts, s, attrs) {
    const b = el("div", { class: "bar", ...(attrs || {}) });
    for (const p of parts) {
      b.append(el("span", { class: p.cls, title: p.title || `${bytes(p.bytes)}`,
        "data-bar-bytes": p.bytes, ...(p.attrs || {}), style: `width:${s.px(p.bytes)}px` }));
    }
    return b;
  }
  function legend(items) {
    const box = el("div", { class: "legend" });
    for (const [colourOrClass, text, tick] of items) {
      const sw = el("span", { class: `sw${tick ? " tick" : ""}` });
      if (colourOrClass.startsWith("part-") || colourOrClass === "outline") sw.classList.add(colourOrClass);
      else sw.style.background = colourOrClass;
      box.append(el("span", {}, sw, text));
    }
    return box;
  }
  // A block the projector test keeps inside the viewport: the scene's main panel.
  const main = (...kids) => el("div", { class: "main-panel", "data-main": "1" }, ...kids);

  return { svg, fontPx, smallPx, textWidth, fitText, maxOf, minOf, byName, ranks, fmt, bytes, micros,
           scale, bar, legend, main };
})();
