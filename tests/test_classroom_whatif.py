"""The what-if panel in a real browser: its figures are the lessons' formulas and the
planner's numbers, a value out of range is refused on its field, the inputs live in the
address, and the sliders move the figures and the curves.

    pytest tests/test_classroom_whatif.py

One page (projector mode, 1366x768) of the shared recording (tests/test_classroom.py),
its inputs driven as a teacher drives them: typed, slid, chosen. Every expected figure is
computed here from ``minidp.tools.planner`` (plan, units, activations) and the lessons'
formulas, independently of the page's JavaScript.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_classroom_browser import open_page, recorded, select

from minidp.tools.classroom.page import write_page
from minidp.tools.planner import activations, plan
from minidp.tools.planner.units import DTYPES, units

__all__ = ["recorded"]
LESSONS = Path(__file__).resolve().parents[1] / "lessons"
OUTS = "els => els.map(e => [e.dataset.out, Number(e.dataset.value)])"
MARKS = "els => els.map(e => [e.dataset.now, Number(e.dataset.value)])"
FIELDS = ("gpus", "bucket", "alpha", "beta", "node", "bnode", "bnet", "seq", "batch", "tflops")


@pytest.fixture(scope="module")
def whatif(request, recorded):
    page, problems = open_page(request, recorded[1].as_uri() + "#whatif/0?projector=1",
                               {"width": 1366, "height": 768})  # fmt: skip
    yield page, problems
    page.close()


def figures(page) -> dict[str, float]:
    return dict(page.eval_on_selector_all("[data-out]", OUTS))


def slide(page, key: str, position: float) -> None:
    """Move field ``key``'s slider to ``position``, as a drag does (an input event)."""
    page.eval_on_selector(f"#whatif-{key}-slider",
                          "(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }",
                          position)  # fmt: skip


def test_the_lessons_state_the_formulas_checked_here():
    # if a lesson's formula changes, so must the panel (and this test)
    assert "2(n-1)/n · S" in (LESSONS / "08_ring_all_reduce.py").read_text()  # ring bytes
    assert "2(n-1) steps" in (LESSONS / "08_ring_all_reduce.py").read_text()  # its latencies
    assert "`(n-1)·S`" in (LESSONS / "07_parameter_server.py").read_text()  # server bytes
    assert "latency + bytes / bandwidth" in (LESSONS / "06_send_recv.py").read_text()  # α-β
    assert "plan.stage_bytes" in (LESSONS / "18_memory_wall.py").read_text()  # memory


def expected(c: dict) -> dict:
    """Every figure for the inputs ``c``, from the lessons' formulas and the planner."""
    p, g = plan.PRECISIONS[c["precision"]][:2]
    k = plan.optimizer_k(c["optimizer"], c["precision"])
    P, W, S = c["params"], c["gpus"], c["node"]
    n, b = g * P, c["bucket"] * 2**20

    def msg(nbytes, beta=c["beta"]):  # lesson 6: one message, latency + bytes / bandwidth
        return c["alpha"] + nbytes / (beta * 1000)

    def ring(nbytes, w, beta=c["beta"]):  # lesson 8: 2(n-1) steps of S/n
        return 2 * (w - 1) * msg(nbytes / w, beta)

    def gather(nbytes, w, beta):  # half a ring: all-gather or reduce-scatter
        return (w - 1) * msg(nbytes / w, beta)

    sizes = [b] * math.floor(n / b) + ([n - math.floor(n / b) * b] if n % b else [])
    tokens, flops = c["seq"] * c["batch"], c["tflops"] * 1e12
    fwd, bwd = 2 * P * tokens / flops * 1e6, 4 * P * tokens / flops * 1e6  # 6 FLOPs/param/token
    all_reduce = sum(ring(s, W) for s in sizes)
    out = {
        "grad": n,
        "ring-bytes": 2 * (W - 1) / W * n,  # lesson 8
        "server-bytes": (W - 1) * n,  # lesson 7
        "buckets": math.ceil(n / b),
        "ring-time": all_reduce,
        "server-time": sum(2 * (W - 1) * msg(s) for s in sizes),  # rank 0's link, in turn
        "forward": fwd,
        "backward": bwd,
        "step": fwd + max(bwd, all_reduce - ring(sizes[-1], W)) + ring(sizes[-1], W),
        "fsdp-across": 2 * gather(p * P, W, c["bnet"]) + gather(n, W, c["bnet"]),
        "fsdp-across-bytes": (2 * p * P + n) * (W - 1) / W,
    }
    if W % S == 0:  # lesson 37: the shard's gradient is all that crosses nodes
        R = W // S
        out["hsdp-inside"] = 2 * gather(p * P, S, c["bnode"]) + gather(n, S, c["bnode"])
        out["hsdp-across"] = ring(n / S, R, c["bnet"]) if R > 1 else 0
        out["hsdp-across-bytes"] = 2 * (R - 1) / R * n / S if R > 1 else 0
    for stage in plan.STAGES:
        out[f"mem-{stage}"] = sum(plan.stage_bytes(stage, P, W, p, g, k))  # the ZeRO paper's
        if plan.bucket_bytes(stage, P, g):
            out[f"buckets-{stage}"] = plan.bucket_bytes(stage, P, g)
    if c["model"] in plan.LAYERS:
        layers, hidden, heads, kv, ffn, mlp, _ = plan.LAYERS[c["model"]]
        out["fsdp-units"] = units(c["model"], c["precision"]).peak
        one = activations.stack_bytes(layers, c["seq"], c["batch"], hidden, heads, ffn=ffn,
                                      mlp=mlp, flash=True, kv_heads=kv,
                                      bytes_per_value=DTYPES[c["precision"]][0])  # fmt: skip
        out["activations"] = one.kept
    return out


CASES = [
    dict(model="qwen2.5-7b", params=None, gpus=64, precision="bf16-mixed", optimizer="adamw",
         bucket=25, alpha=5, beta=100, node=8, bnode=450, bnet=50, seq=4096, batch=1,
         tflops=400),
    dict(model="custom", params=1.3e9, gpus=12, precision="fp32", optimizer="sgd-momentum",
         bucket=100, alpha=50, beta=1.5, node=8, bnode=300, bnet=25, seq=1024, batch=4,
         tflops=100),
    dict(model="llama-3-70b", params=None, gpus=512, precision="bf16", optimizer="adam",
         bucket=4, alpha=20, beta=25, node=8, bnode=900, bnet=100, seq=8192, batch=2,
         tflops=600),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c["model"] for c in CASES])
def test_whatif_equals_the_formulas(whatif, case):
    page, problems = whatif
    select(page, "whatif")
    page.select_option("#whatif-model", case["model"])
    c = dict(case)
    if c["params"] is None:
        c["params"] = plan.MODELS[c["model"]]
        assert float(page.input_value("#whatif-params")) == c["params"]
    else:
        page.fill("#whatif-params", str(c["params"]))
    for key in (
        "gpus",
        "bucket",
        "alpha",
        "beta",
        "node",
        "bnode",
        "bnet",
        "seq",
        "batch",
        "tflops",
    ):
        page.fill(f"#whatif-{key}", str(c[key]))
    page.select_option("#whatif-precision", c["precision"])
    page.select_option("#whatif-optimizer", c["optimizer"])
    shown, want = figures(page), expected(c)
    assert shown.keys() == want.keys()
    for key, value in want.items():
        assert shown[key] == pytest.approx(value, rel=1e-12), key
    assert problems == []


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("gpus", "0"),
        ("gpus", "-4"),
        ("gpus", "2.5"),
        ("beta", "0"),
        ("params", "lots"),
        ("seq", ""),
    ],
)
def test_an_invalid_input_is_refused_on_its_field(whatif, key, text):
    page, problems = whatif
    select(page, "whatif")
    page.fill(f"#whatif-{key}", "64" if key != "params" else "7e9")
    before, address = figures(page), page.evaluate("location.hash")
    page.fill(f"#whatif-{key}", text)
    assert page.get_attribute(f"#whatif-{key}", "aria-invalid") == "true"
    why = page.text_content(f"#whatif-{key}-why")
    assert why.startswith("refused: expected") and "got" in why, why
    assert page.is_visible("#whatif-stale") and "Not updated" in page.text_content("#whatif-stale")
    assert figures(page) == before and page.evaluate("location.hash") == address  # nothing taken
    page.fill(f"#whatif-{key}", "128" if key != "params" else "8e9")
    assert page.get_attribute(f"#whatif-{key}", "aria-invalid") == "false"
    assert page.text_content("#whatif-stale") == "" and figures(page) != before
    assert problems == []


def test_the_inputs_live_in_the_address(request, whatif):
    page, _ = whatif
    select(page, "whatif")
    page.select_option("#whatif-model", "llama-3-8b")
    page.eval_on_selector(
        "#whatif-gpus-slider", "s => { s.value = 7; s.dispatchEvent(new Event('input')); }"
    )
    assert page.input_value("#whatif-gpus") == "128"  # the slider: powers of two
    address = page.evaluate("location.hash")
    assert "gpus=128" in address and "model=llama-3-8b" in address and "projector=1" in address
    before = figures(page)
    page.reload()
    assert page.input_value("#whatif-gpus") == "128" and figures(page) == before
    # a link someone shared opens on its case; a bad value in it falls back to the default
    shared = "#whatif/3?model=qwen2.5-14b&gpus=256&precision=fp32&beta=-1"
    fresh, problems = open_page(request, page.url.split("#")[0] + shared)
    assert fresh.input_value("#whatif-gpus") == "256" and fresh.input_value("#whatif-beta") == "50"
    assert fresh.input_value("#whatif-model") == "qwen2.5-14b"
    assert figures(fresh)["mem-ddp"] == sum(plan.stage_bytes("ddp", plan.MODELS["qwen2.5-14b"],
                                                             256, 4, 4, 8))  # fmt: skip
    fresh.close()
    assert problems == []


def test_the_curves_follow_the_inputs(whatif):
    page, _ = whatif
    select(page, "whatif")
    page.select_option("#whatif-model", "qwen2.5-7b")
    page.fill("#whatif-gpus", "64")

    def marks() -> dict[str, float]:
        return dict(page.eval_on_selector_all("svg.chart [data-now]", MARKS))

    shown = figures(page)
    for key in ("step", "backward"):  # each curve's mark at the current W is the figure
        assert marks()[key] == pytest.approx(shown[key], rel=1e-12)
    assert marks()["allreduce"] == pytest.approx(shown["ring-time"], rel=1e-12)
    assert marks()["mem-fsdp"] == pytest.approx(shown["mem-fsdp"], rel=1e-12)
    series = page.eval_on_selector_all(
        "svg.chart polyline", "els => els.map(e => e.dataset.series)"
    )
    assert {"compute", "backward", "allreduce", "step", "mem-ddp", "mem-fsdp"} <= set(series)
    before = marks()["allreduce"]
    page.eval_on_selector(
        "#whatif-beta-slider", "s => { s.value = 2.5; s.dispatchEvent(new Event('input')); }"
    )
    assert float(page.input_value("#whatif-beta")) == pytest.approx(10**2.5, rel=1e-3)
    assert marks()["allreduce"] < before  # a faster link: a shorter all-reduce, drawn
    page.select_option("#whatif-x", "params")
    assert "parameters Ψ" in page.text_content('svg.chart[data-chart="time"] .axis-label')


def test_the_recordings_link_is_one_choice(whatif, recorded):
    page, _ = whatif
    link = next(e for e in recorded[0]["traceEvents"] if e.get("name") == "link alpha-beta")["args"]
    select(page, "whatif")
    if link["beta_bytes_per_us"] is None:  # a run too noisy to read a bandwidth (see below)
        return
    page.select_option("#whatif-links", "recording")
    assert float(page.input_value("#whatif-alpha")) == round(link["alpha_us"], 1)
    assert float(page.input_value("#whatif-beta")) == round(link["beta_bytes_per_us"] / 1000, 2)
    page.select_option("#whatif-links", "cluster")  # NVLink in a node, InfiniBand across
    assert [page.input_value(f"#whatif-{k}") for k in ("alpha", "beta", "bnode", "bnet")] == [
        "5", "50", "450", "50"]  # fmt: skip


def test_a_link_with_no_bandwidth_to_read_models_nothing(request, recorded, tmp_path):
    # lesson 6's fit gives no β when the biggest ping-pong was no slower than the smallest
    # (a busy machine): the page says so and models nothing with it, on every scene that would
    data = json.loads(json.dumps(recorded[0]))
    link = next(e for e in data["traceEvents"] if e.get("name") == "link alpha-beta")["args"]
    link["beta_bytes_per_us"] = None
    page, problems = open_page(request, write_page(data, tmp_path).as_uri() + "#ring/0")
    try:
        assert "β not measurable in this run" in page.text_content("#ring-model")
        assert page.locator(".gap").count() == 0
        assert "model α+n/β" not in page.text_content("#stage")
        select(page, "whatif")
        values = page.eval_on_selector_all("#whatif-links option", "os => os.map(o => o.value)")
        assert values == ["cluster", "typed"]
        text = page.text_content("#stage")
        assert "β not measurable in this run" in text and "this recording's\")" not in text
        assert problems == []
    finally:
        page.close()
