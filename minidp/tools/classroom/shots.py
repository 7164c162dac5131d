"""Screenshots of the classroom page, one per scene, in a real browser (playwright).

    python -m minidp classroom --no-serve --out /tmp/cls --screenshots diagrams

Each scene at a step worth showing, in projector mode (``#scene/step?projector=1``) at
1920x1080 (``size=``: another), a moment after the step is shown so its messages are caught
travelling: ``classroom_<scene>.png``. Debian's Chromium driven by playwright; the page
needs no network, so none is allowed.

Test: ``pytest tests/test_classroom_browser.py``
"""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
SIZE = {"width": 1920, "height": 1080}
# (scene, which step: a fraction of the way through, chosen to show the idea mid-flight)
# (hsdp: the all-reduce of unit 2, the shard crossing nodes)
SHOTS = {"ring": 0.34, "traffic": 0.75, "dp": 0.5, "ddp": 0.55, "memory": 1.0, "fsdp": 0.35,
         "hsdp": 0.87, "whatif": 0.0, "trace": 0.5}  # fmt: skip
MOVING_MS = 450  # into the step's animation: dots on their way


def browser_path() -> str | None:
    """Chromium's path, or None when this machine has none."""
    return CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")


def screenshots(page_path: str | Path, out: str | Path, size: dict = SIZE) -> list[Path]:
    """Save one PNG per scene present in the page; returns their paths."""
    from playwright.sync_api import sync_playwright

    chromium = browser_path()
    if chromium is None:
        raise RuntimeError("classroom screenshots: no chromium (apt-get install -y chromium)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    url = Path(page_path).resolve().as_uri()
    paths = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport=size)
        local = lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort()  # noqa: E731
        page.route("**/*", local)  # any other request refused: the page must need no network
        page.goto(f"{url}#trace/0?projector=1")
        for scene, where in SHOTS.items():
            button = page.locator(f'nav [data-scene="{scene}"]')
            if button.count() == 0 or "absent" in (button.get_attribute("class") or ""):
                continue
            button.click()
            last = int(page.locator("#scrub").get_attribute("max"))
            page.evaluate(f"location.hash = '#{scene}/{round(last * where)}'")
            page.wait_for_timeout(MOVING_MS)
            path = out / f"classroom_{scene}.png"
            page.screenshot(path=str(path))
            paths.append(path)
        browser.close()
    return paths
