"""``traffic.png``: bytes per rank, parameter server vs ring, as the world grows.

Every message of the engine's parameter server and ring on thread-ranks, recorded
(``minidp.tools.recorder.ring.traffic_events``: the classroom's traffic scene), the header
check apart: the server's link grows with n, the ring's levels off below 2·S, and the
total is the same.

    python -m minidp diagrams --only traffic

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

from pathlib import Path

from minidp.tools.diagrams.common import AG_ARROW, pyplot, save_figure
from minidp.tools.recorder import Threads
from minidp.tools.recorder.ring import traffic_events


def _sent(world: int, numel: int) -> list[dict]:
    """Per rank, the data bytes it sent (headers apart) under each algorithm, recorded."""
    sent = [{"ring": 0, "server": 0} for _ in range(world)]
    for e in traffic_events(Threads(world), numel):
        if e["name"] == "traffic message" and not e["args"]["header"]:
            algorithm = "ring" if e["args"]["algorithm"] == "ring" else "server"
            sent[e["pid"]][algorithm] += e["args"]["bytes"]
    return sent


def draw(out: Path, quick: bool = False) -> Path:
    """Bytes sent per rank (and in total) as the world grows: server vs ring; ``quick``:
    three world sizes."""
    plt = pyplot()
    numel = 256 * 1024  # S = 1 MiB of float32
    s = numel * 4
    worlds = [2, 4, 8] if quick else [2, 3, 4, 6, 8, 12, 16]
    server0, server_other, ring_max, totals = [], [], [], {"ring": [], "server": []}
    for n in worlds:
        res = _sent(n, numel)
        server0.append(res[0]["server"] / s)
        server_other.append(max(r["server"] for r in res[1:]) / s)
        ring_max.append(max(r["ring"] for r in res) / s)
        for k in totals:
            totals[k].append(sum(r[k] for r in res) / s)

    fig, (a, b) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    a.plot(worlds, server0, "o-", color="#c44e52", label="parameter server: rank 0 (the server)")
    a.plot(worlds, server_other, "s-", color="#e8a0a2", label="parameter server: any other rank")
    a.plot(worlds, ring_max, "o-", color=AG_ARROW, label="ring: every rank")
    # theory drawn ON TOP of the measurements (black, dotted): where they agree, the dots
    # run along the coloured line, so the legend's entries are all visible
    theory = {"color": "#111", "lw": 1.3, "zorder": 4}
    a.plot(worlds, [n - 1 for n in worlds], ":", label="theory: (n-1)·S", **theory)
    a.plot(worlds, [2 * (n - 1) / n for n in worlds], "--", label="theory: 2(n-1)/n·S", **theory)
    a.set_xlabel("ranks n")
    a.set_ylabel("bytes one rank sends (and receives), in units of S")
    a.set_title("The busiest link: the server's grows with n,\nthe ring's levels off below 2·S")
    a.legend(fontsize=8.5)
    a.grid(alpha=0.3)
    b.plot(worlds, totals["server"], "o-", color="#c44e52", label="parameter server")
    b.plot(worlds, totals["ring"], "x--", color=AG_ARROW, label="ring (on top: same totals)", ms=9)
    b.set_xlabel("ranks n")
    b.set_ylabel("bytes sent by all ranks together, in units of S")
    b.set_title("Total traffic is the same, 2(n-1)·S:\nthe ring spreads it evenly over the links")
    b.legend(fontsize=9)
    b.grid(alpha=0.3)
    fig.suptitle(
        f"All-reduce of S = {s // 2**20} MiB, every message recorded through a tapped group "
        "(ranks as threads, real gloo send/recv; headers apart)",
        fontsize=11,
    )
    return save_figure(fig, out / "traffic.png", rect=(0, 0, 1, 0.94))
