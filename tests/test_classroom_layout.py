"""The page as a hall sees it, and the what-if panel's arithmetic, in a real browser.

    pytest tests/test_classroom_layout.py

Projector mode at 1920x1080 and 1366x768, every scene at its first, middle and last
steps: no horizontal overflow, the scene's main panel inside the window above the
controls, no text under 18 px, no two labels overlapping, one scale for bytes (two bars
of equal bytes equally long, across cards). ``LAYOUT`` is the check, run in the page; a
page built to break each rule is caught by it (test_the_layout_check_can_fail). The
what-if panel's figures, typed in through its inputs, equal the lessons' formulas and
``minidp.tools.planner.plan``'s, computed here.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from test_classroom_browser import SCENES, open_page, recorded, select

from minidp.tools.planner import plan

__all__ = ["recorded"]
LESSONS = Path(__file__).resolve().parents[1] / "lessons"
SIZES = ({"width": 1920, "height": 1080}, {"width": 1366, "height": 768})

# Every rule, checked on the page as it is now; returns what breaks (empty: all hold).
LAYOUT = r"""() => {
  const out = [];
  if (document.documentElement.scrollWidth > innerWidth)
    out.push(`overflow: scrollWidth ${document.documentElement.scrollWidth} > ${innerWidth}`);
  const foot = document.getElementById("controls").getBoundingClientRect();
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


def steps_to_check(last: int) -> list[int]:
    return sorted({0, 1, last // 2, last})


@pytest.fixture(scope="module", params=SIZES, ids=lambda s: f"{s['width']}x{s['height']}")
def projector(request, recorded):
    page, problems = open_page(request, recorded[1].as_uri(), viewport=request.param)
    page.keyboard.press("p")
    assert page.evaluate("document.body.classList.contains('projector')")
    yield page, problems
    page.close()


@pytest.mark.parametrize("scene", SCENES)
def test_projector_layout(projector, scene):
    page, problems = projector
    select(page, scene)
    last = int(page.get_attribute("#scrub", "max"))
    for k in steps_to_check(last):
        page.evaluate(f"location.hash = '#{scene}/{k}'")
        page.wait_for_function(f"document.getElementById('step').dataset.step === '{k}'")
        assert page.evaluate(LAYOUT) == [], f"{scene} step {k}"
    assert problems == []


def test_the_layout_check_can_fail(projector):
    page, _ = projector
    select(page, "traffic")
    page.evaluate("location.hash = '#traffic/8'")  # every bar drawn
    page.wait_for_function("document.getElementById('step').dataset.step === '8'")
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
      return true; }""")
    assert broken
    found = " | ".join(page.evaluate(LAYOUT))
    for rule in ("overflow", "main panel", "text of 12.0 px", "labels overlap", "one scale"):
        assert rule in found, f"{rule!r} not caught in: {found}"
    select(page, "ring")  # a fresh render for the next test


# ---- the what-if panel against the lessons' formulas and minidp.tools.planner.plan ----


def test_the_lessons_state_the_formulas_checked_here():
    # if a lesson's formula changes, so must the panel (and this test)
    assert "2(n-1)/n · S" in (LESSONS / "08_ring_all_reduce.py").read_text()  # ring bytes
    assert "2(n-1) steps" in (LESSONS / "08_ring_all_reduce.py").read_text()  # its latencies
    assert "`(n-1)·S`" in (LESSONS / "07_parameter_server.py").read_text()  # server bytes
    assert "latency + bytes / bandwidth" in (LESSONS / "06_send_recv.py").read_text()  # α-β
    assert "plan.stage_bytes" in (LESSONS / "18_memory_wall.py").read_text()  # memory


def expected(params, gpus, precision, optimizer, bucket_mib, alpha_us, beta_gbs) -> dict:
    """Every figure, from the lessons' formulas and the library's plan."""
    p, g = plan.PRECISIONS[precision][:2]
    k = plan.optimizer_k(optimizer, precision)
    n, b, w = g * params, bucket_mib * 2**20, gpus
    beta = beta_gbs * 1000  # bytes per µs

    def msg(nbytes):  # lesson 6: one message, latency + bytes / bandwidth
        return alpha_us + nbytes / beta

    sizes = [b] * math.floor(n / b) + ([n - math.floor(n / b) * b] if n % b else [])
    out = {
        "grad": n,
        "ring-bytes": 2 * (w - 1) / w * n,  # lesson 8
        "server-bytes": (w - 1) * n,  # lesson 7
        "buckets": math.ceil(n / b),
        "ring-time": sum(2 * (w - 1) * msg(s / w) for s in sizes),  # 2(n-1) steps of S/n
        "server-time": sum(2 * (w - 1) * msg(s) for s in sizes),  # rank 0's link, in turn
    }
    for stage in plan.STAGES:
        out[f"mem-{stage}"] = sum(plan.stage_bytes(stage, params, w, p, g, k)) + plan.bucket_bytes(
            stage, params, g
        )
    return out


CASES = [
    ("qwen2.5-7b", None, 64, "bf16-mixed", "adamw", 25, 5, 100),
    ("custom", 1.3e9, 8, "fp32", "sgd-momentum", 100, 50, 1.5),
    ("llama-3-70b", None, 512, "bf16", "adam", 4, 20, 25),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_whatif_equals_the_formulas(projector, case):
    page, problems = projector
    model, params, gpus, precision, optimizer, bucket, alpha, beta = case
    select(page, "whatif")
    page.select_option("#whatif-model", model)
    if params is None:
        params = plan.MODELS[model]
        assert float(page.input_value("#whatif-params")) == params
    else:
        page.fill("#whatif-params", str(params))
    for key, value in (("gpus", gpus), ("bucket", bucket), ("alpha", alpha), ("beta", beta)):
        page.fill(f"#whatif-{key}", str(value))
    page.select_option("#whatif-precision", precision)
    page.select_option("#whatif-optimizer", optimizer)
    pairs = "els => els.map(e => [e.dataset.out, e.dataset.value])"
    shown = {k: float(v) for k, v in page.eval_on_selector_all("[data-out]", pairs)}
    want = expected(params, gpus, precision, optimizer, bucket, alpha, beta)
    assert shown.keys() == want.keys()
    for key, value in want.items():
        assert shown[key] == pytest.approx(value, rel=1e-12), key
    assert page.evaluate(LAYOUT) == [] and problems == []


def test_whatif_starts_from_the_measured_link(projector, recorded):
    page, _ = projector
    link = next(e for e in recorded[0]["traceEvents"] if e.get("name") == "link alpha-beta")["args"]
    page.reload()  # the panel's first values, before any test typed in it
    page.keyboard.press("p")
    select(page, "whatif")
    assert float(page.input_value("#whatif-alpha")) == round(link["alpha_us"], 1)
    assert float(page.input_value("#whatif-beta")) == round(link["beta_bytes_per_us"] / 1000, 2)
    assert re.search(r"α = [\d.]+ µs, β = [\d.]+ GB/s \(ping-pong", page.text_content("#stage"))
