// Each scene's lesson, opened inside the page: page.py embeds the lesson files' text, so
// the link works from file:// and when served alike (no path to this machine's disk).
const Lesson = (() => {
  const $ = (id) => document.getElementById(id);
  let texts = null;

  function open(name) {
    texts = texts || JSON.parse($("lessons").textContent);
    $("lesson-name").textContent = `lessons/${name}`;
    $("lesson-text").textContent = texts[name];
    $("lesson-box").showModal();
  }

  // Point the explanation's link at the scene's lesson (or say where it lives).
  function link(a, line, name) {
    texts = texts || JSON.parse($("lessons").textContent);
    line.hidden = !name;
    a.textContent = name ? `lessons/${name}` : "";
    a.dataset.lesson = name || "";
    if (name && texts[name] !== undefined) {
      a.setAttribute("href", `#lesson:${name}`);
      a.onclick = (e) => { e.preventDefault(); open(name); };
      a.title = "open the lesson's source here";
    } else {
      a.removeAttribute("href");
      a.onclick = null;
      a.title = "in the minidp source repository (not in this page)";
    }
  }
  return { link, open };
})();
