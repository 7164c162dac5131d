"""The page as a hall sees it, at every world size, in a real browser.

    pytest tests/test_classroom_layout.py

Projector mode at 1920x1080 and 1366x768, for recordings at W = 2 (ring, traffic), 4 (the
shared recording: every scene) and 8 (ring, traffic, DDP, memory and FSDP; its rank threads
are one real gloo group each — 8 processes would cost the suite half a minute; HSDP on 2x3
and 2x4 meshes of processes runs under -m slow),
every scene at its first, second, middle and last steps: no horizontal overflow, the
scene's main panel and its timeline inside the window above the controls, no text under
18 px, no two labels overlapping, one scale for bytes (two bars of equal bytes equally
long, across cards), and nothing moving between steps (the main panel and the timeline
keep their place and size). ``LAYOUT`` is the check, run in the page; a page built to break
each rule is caught by it (test_the_layout_check_can_fail). The what-if panel:
tests/test_classroom_whatif.py.
"""

from __future__ import annotations

import pytest
from test_classroom_browser import _SHARED, SCENES, open_page, shared

from minidp.launch import run_threads
from minidp.tools.classroom import Options, record, write_page

SIZES = ({"width": 1920, "height": 1080}, {"width": 1366, "height": 768})
WORLDS = {2: Options(world_size=2, numel=4, only=("ring", "traffic")),
          8: Options(world_size=8, numel=8, ddp_world=8, width=16,
                     only=("ring", "traffic", "ddp", "memory", "fsdp"))}  # fmt: skip

# Every rule, checked on the page as it is now; returns what breaks (empty: all hold).
LAYOUT = r"""() => {
  const out = [];
  if (document.documentElement.scrollWidth > innerWidth)
    out.push(`overflow: scrollWidth ${document.documentElement.scrollWidth} > ${innerWidth}`);
  const foot = document.getElementById("controls").getBoundingClientRect();
  for (const t of document.querySelectorAll("#stage .tl")) {  // the timeline is on screen too
    const r = t.getBoundingClientRect();
    if (r.bottom > foot.top + 0.5)
      out.push(`timeline ends at ${r.bottom | 0}, below the controls (at ${foot.top | 0})`);
  }
  const mains = document.querySelectorAll("#stage [data-main]");
  if (mains.length !== 1) out.push(`expected one main panel, found ${mains.length}`);
  for (const m of mains) {
    const r = m.getBoundingClientRect();
    if (r.left < -0.5 || r.top < -0.5 || r.right > innerWidth + 0.5 || r.bottom > foot.top + 0.5)
      out.push(`main panel [${r.left | 0}, ${r.top | 0} .. ${r.right | 0}, ${r.bottom | 0}] ` +
               `outside the window above the controls (at ${foot.top | 0})`);
    if (m.scrollWidth > m.clientWidth + 1)
      out.push(`main panel holds ${m.scrollWidth} px in ${m.clientWidth}`);
  }
  const texts = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const n = walk.currentNode, text = n.textContent.trim(), p = n.parentElement;
    if (!text || !p || p.closest("script, style, title, option, dialog:not([open])")) continue;
    if (getComputedStyle(p).visibility === "hidden") continue;
    let size = parseFloat(getComputedStyle(p).fontSize), rects;
    if (p instanceof SVGElement) {  // drawn size: the font's size times the SVG's scale
      const m = p.getScreenCTM();
      size *= m ? Math.hypot(m.a, m.b) : 1;
      rects = [p.getBoundingClientRect()];
    } else {
      const range = document.createRange();
      range.selectNodeContents(n);
      rects = [...range.getClientRects()];
    }
    const box = p.closest(".tl-body");  // a scrolled box shows only what is inside it
    if (box) {
      const b = box.getBoundingClientRect();
      rects = rects.filter((r) => r.bottom > b.top + 1 && r.top < b.bottom - 1);
    }
    rects = rects.filter((r) => r.width > 0.5 && r.height > 0.5);
    if (!rects.length) continue;
    if (size < 17.99) out.push(`text of ${size.toFixed(1)} px: "${text.slice(0, 40)}"`);
    texts.push({ rects, text, region: p.closest("header, footer, #stage, #explain, dialog") });
  }
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
    const a = texts[i], b = texts[j];
    if (a.region !== b.region) continue;  // the sticky controls may cover the page's text
    for (const r of a.rects) for (const q of b.rects) {
      const w = Math.min(r.right, q.right) - Math.max(r.left, q.left);
      const h = Math.min(r.bottom, q.bottom) - Math.max(r.top, q.top);
      if (w > 1 && h > 1)
        out.push(`labels overlap: "${a.text.slice(0, 30)}" and "${b.text.slice(0, 30)}"`);
    }
  }
  const bars = [...document.querySelectorAll("#stage [data-bar-bytes]")]
    .map((e) => [Number(e.dataset.barBytes), e.getBoundingClientRect().width])
    .filter(([b]) => b > 0);
  const per = bars.length ? bars[0][1] / bars[0][0] : 0;  // px per byte of the first bar
  for (const [b, w] of bars)
    if (Math.abs(w - b * per) > 1.5)
      out.push(`one scale: ${b} B is ${w.toFixed(1)} px, not ${(b * per).toFixed(1)}`);
  return [...new Set(out)];
}"""

# Where the main panel and the timeline are: the same at every step.
PLACES = """() => [...document.querySelectorAll('#stage [data-main], #stage .tl')].map((e) => {
  const r = e.getBoundingClientRect();
  return [r.left, r.top, r.width, r.height].map(Math.round); })"""


class ThreadWorld:
    """``size`` thread-ranks, each with a real gloo group, run the way a ProcessWorld runs."""

    def __init__(self, size: int) -> None:
        self.world_size = size

    def run(self, fn, *args, timeout: float = 60.0) -> list:
        return run_threads(fn, self.world_size, *args, timeout=timeout)


def page_at(request, world: int):
    """The page of a recording at ``world`` ranks (made once per session)."""
    if world == 4:
        return shared(request)[0][1]
    if world not in _SHARED:
        where = request.getfixturevalue("process_world") if world == 2 else ThreadWorld
        data = record(WORLDS[world], progress=lambda _: None, world=where)
        folder = request.getfixturevalue("tmp_path_factory").mktemp(f"classroom{world}")
        _SHARED[world] = write_page(data, folder)
    return _SHARED[world]


def steps_to_check(last: int, world: int) -> list[int]:
    """The first, second, middle and last steps (at W = 2 and 8, whose pictures are sized
    for every step's labels at once, the second adds nothing: left out)."""
    return sorted({0, last // 2, last} | ({1} if world == 4 else set()))


@pytest.fixture(scope="module", params=SIZES, ids=lambda s: f"{s['width']}x{s['height']}")
def size(request):
    return request.param


@pytest.mark.parametrize("world", (2, 4, 8))
def test_projector_layout(request, size, world):
    page, problems = open_page(
        request, page_at(request, world).as_uri() + "#ring/0?projector=1", size
    )
    assert page.evaluate("document.body.classList.contains('projector')")
    present = [s for (s,) in page.eval_on_selector_all(
        "nav [data-scene]:not(.absent)", "els => els.map(e => [e.dataset.scene])")]  # fmt: skip
    assert set(present) >= {"ring", "traffic", "whatif", "trace"}
    for scene in [s for s in SCENES if s in present]:
        page.evaluate(f"location.hash = '#{scene}/0'")
        last = int(page.get_attribute("#scrub", "max"))
        places = {}
        for k in steps_to_check(last, world):
            page.evaluate(f"location.hash = '#{scene}/{k}'")
            page.wait_for_function(f"document.getElementById('step').dataset.step === '{k}'")
            assert page.evaluate(LAYOUT) == [], f"W={world}: {scene} step {k}"
            places[k] = page.evaluate(PLACES)
        assert len({str(p) for p in places.values()}) == 1, f"W={world}: {scene} moves: {places}"
    page.close()
    assert problems == []


@pytest.mark.slow  # 6 and 8 rank processes: half a minute each on 2 cores
@pytest.mark.parametrize("nodes_x_ranks", [(2, 3), (2, 4)], ids=["2x3", "2x4"])
def test_hsdp_layout_on_wider_meshes(request, size, nodes_x_ranks, process_world):
    r, s = nodes_x_ranks
    data = record(Options(hsdp_mesh=(r, s), width=16, only=("hsdp",)), progress=lambda _: None,
                  world=process_world)  # fmt: skip
    folder = request.getfixturevalue("tmp_path_factory").mktemp(f"hsdp{r}x{s}")
    url = write_page(data, folder).as_uri() + "#hsdp/0?projector=1"
    page, problems = open_page(request, url, size)
    last, places = int(page.get_attribute("#scrub", "max")), set()
    for k in range(last + 1):
        page.evaluate(f"location.hash = '#hsdp/{k}'")
        page.wait_for_function(f"document.getElementById('step').dataset.step === '{k}'")
        assert page.evaluate(LAYOUT) == [], f"{r}x{s}: hsdp step {k}"
        places.add(str(page.evaluate(PLACES)))
    assert len(places) == 1, f"{r}x{s}: the scene moves between steps"
    page.close()
    assert problems == []


def test_the_layout_check_can_fail(request):
    page, _ = open_page(request, page_at(request, 4).as_uri() + "#traffic/8?projector=1", SIZES[1])
    broken = page.evaluate("""() => {
      const stage = document.getElementById('stage');
      const bar = stage.querySelector('[data-bar-bytes]');
      bar.style.width = (bar.getBoundingClientRect().width + 9) + 'px';    // another scale
      const a = document.createElement('p'); a.textContent = 'tiny'; a.style.fontSize = '12px';
      const b = document.createElement('p'); b.textContent = 'tiny too';
      b.style.cssText = 'margin-top:-1.6em;font-size:12px';                 // on top of a
      const wide = document.createElement('div');
      wide.style.cssText = `width:${innerWidth + 50}px;height:9px`;
      stage.querySelector('[data-main]').append(a, b, wide);                // too wide
      stage.querySelector('.tl').style.marginTop = '400px';                 // below the fold
      return true; }""")
    assert broken
    found = " | ".join(page.evaluate(LAYOUT))
    for rule in ("overflow", "main panel", "text of 12.0 px", "labels overlap", "one scale",
                 "timeline ends"):  # fmt: skip
        assert rule in found, f"{rule!r} not caught in: {found}"
    page.close()
