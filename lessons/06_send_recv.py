# %% [markdown]
# # Lesson 6 — point-to-point: send and recv
#
# Run: `python lessons/06_send_recv.py`
#
# Every collective in minidp (and, underneath, in gloo and NCCL) is a pattern of
# point-to-point messages. Three things to learn here:
#
# 1. a message needs **both** sides: a `send` on one rank and a matching `recv` on the
#    other (same peer, same tag, same size);
# 2. a blocking `send` on gloo waits until the peer has posted its `recv` — so "everyone
#    sends first, then receives" **deadlocks**. The fix is to post non-blocking
#    `isend`/`irecv` and then wait for both;
# 3. a message costs roughly `latency + bytes / bandwidth` — we measure both on this
#    machine; lesson 8 uses them.
#
# Real processes (4 ranks started by `minidp.launch.spawn`; 2 in fast mode), gloo over
# loopback TCP.

# %%
import datetime
import inspect
import time

import kit
import torch
import torch.distributed as dist

import minidp
from minidp.comm import p2p
from minidp.textbook import collectives as textbook

WORLD = kit.pick(4, 2)
SIZES = kit.pick([2**k for k in range(2, 25, 2)], [4, 4096, 2**20])  # bytes
REPEATS = kit.pick(20, 3)
DEADLOCK_TIMEOUT_S = kit.pick(2.0, 1.0)


def p2p_lesson(rank: int, world: int) -> dict:
    g = minidp.comm.group.resolve()  # the default group torch.distributed built
    out: dict = {}

    # 1. one message, rank 0 -> rank 1, with minidp's p2p and with torch.distributed
    msg = torch.tensor([1.5, -2.0, 3.25, 1e-8])
    if rank == 0:
        p2p.send(msg, 1, g)
        dist.send(msg, dst=1)
    elif rank == 1:
        ours, theirs = torch.zeros(4), torch.zeros(4)
        p2p.recv(ours, 0, g)
        dist.recv(theirs, src=0)
        kit.say(rank, f"received {ours.tolist()} (minidp p2p) and {theirs.tolist()} (dist.recv)")
        out["one"] = (ours, theirs, msg)

    # 2. broken: everybody sends to the left first, then receives from the right (the
    # direction of every ring in minidp, gloo's)
    left, right = (rank - 1) % world, (rank + 1) % world
    short = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=DEADLOCK_TIMEOUT_S))
    mine = torch.full((3,), float(rank))
    got = torch.empty(3)
    t0 = time.perf_counter()
    try:
        p2p.send(mine, left, short)  # blocks until `left` posts a recv ... which it never does
        p2p.recv(got, right, short)
        out["deadlock"] = "no error"
    except (minidp.comm.CollectiveTimeout, minidp.comm.PeerError) as exc:
        # the first rank to time out closes its links: its peer may see that (PeerError)
        # a moment before its own timeout — either way the exchange never completed
        out["deadlock"] = f"{type(exc).__name__} after {time.perf_counter() - t0:.1f}s"
        kit.say0(rank, f"broken exchange -> {type(exc).__name__}: {str(exc)[:150]}...")

    # 3. fixed: post both, then wait (what every minidp collective does)
    with minidp.comm.count_traffic() as traffic:
        pending = [p2p.irecv(got, right, g), p2p.isend(mine, left, g)]
        p2p.wait_all(pending)
    kit.say(rank, f"isend/irecv exchange: got {got.tolist()} from rank {right}")
    out["exchange"] = (got.clone(), float(right), traffic.sent_bytes, traffic.recv_bytes)

    # 4. ping-pong between ranks 0 and 1: round-trip time per size
    times = {}
    for nbytes in SIZES:
        buf = torch.zeros(nbytes // 4)
        dist.barrier()
        if rank in (0, 1):
            peer = 1 - rank
            best = float("inf")
            for _ in range(REPEATS):
                t0 = time.perf_counter()
                if rank == 0:
                    p2p.send(buf, peer, g)
                    p2p.recv(buf, peer, g)
                else:
                    p2p.recv(buf, peer, g)
                    p2p.send(buf, peer, g)
                best = min(best, time.perf_counter() - t0)
            times[nbytes] = best / 2  # one way
    out["times"] = times
    dist.barrier()
    return out


# %%
if __name__ == "__main__":
    kit.title("Lesson 6: point-to-point send/recv, deadlock, latency and bandwidth")
    print(f"{WORLD} rank processes; broken exchange times out after {DEADLOCK_TIMEOUT_S:g}s")
    res = kit.spawn(p2p_lesson, WORLD)

# %% [markdown]
# ## Latency and bandwidth (ranks 0 <-> 1, one way, best of several round trips)
# Small messages cost a fixed latency α; large ones approach `bytes / β`. The fit below
# is the α-β model every collective's cost is reasoned with.

# %%
if __name__ == "__main__":
    times = res[0]["times"]
    print(f"{'bytes':>10} {'one-way time':>14} {'bandwidth':>12}")
    for n, t in times.items():
        print(f"{n:>10} {t * 1e6:>11.1f} us {n / t / 1e9:>8.3f} GB/s")
    small, big = min(times), max(times)
    alpha = times[small]
    extra = times[big] - alpha  # what the bytes cost on top of the latency
    if extra > 0:
        beta = (big - small) / extra
        print(f"alpha (latency) ~ {alpha * 1e6:.0f} us, beta (bandwidth) ~ {beta / 1e9:.2f} GB/s")
    else:  # a stalled small message (few repeats, a busy machine): no bandwidth to read
        print(
            f"alpha (latency) ~ {alpha * 1e6:.0f} us; beta not measurable in this run: the "
            f"{big}-byte message took no longer than the {small}-byte one (noise)"
        )
    print(f"measured on: {kit.machine()}")

# %% [markdown]
# ## The ring pass in code
# The non-blocking exchange above, as every ring collective in lesson 8 uses it: send to
# the left, receive from the right, at the same time. Printed from `minidp/textbook/collectives.py`
# (the real function, not a copy). The faithful ring (`minidp/comm/ring.py`) does the same
# step per *segment*, with receives posted a few segments ahead.

# %%
SHOWN = (textbook._exchange,)  # what this lesson prints

if __name__ == "__main__":
    for fn in SHOWN:
        print(inspect.getsource(fn))


# %% [markdown]
# ## Checks
# * minidp's `p2p.recv` and `torch.distributed.recv` deliver the same bits;
# * the blocking exchange deadlocked (a timeout, not a hang, thanks to the group timeout;
#   the first rank to time out closes its links, so a peer may report the lost link instead);
# * the non-blocking exchange delivered the right neighbour's tensor, and the traffic
#   counters saw exactly one 12-byte message out and one in per rank.

# %%
if __name__ == "__main__":
    ours, theirs, sent = res[1]["one"]
    kit.check("minidp p2p.recv vs torch.distributed.recv", ours, theirs, exact=True)
    kit.check("what rank 1 received vs what rank 0 sent", ours, sent, exact=True)
    kit.check_true(
        "blocking send-then-recv on every rank deadlocks (a rank timed out; every rank failed:"
        " its own timeout, or its peer's timeout closing the link)",
        any(r["deadlock"].startswith("CollectiveTimeout") for r in res)
        and all(r["deadlock"].startswith(("CollectiveTimeout", "PeerError")) for r in res),
        ", ".join(r["deadlock"] for r in res),
    )
    for r, rr in enumerate(res):
        got, right, sent_b, recv_b = rr["exchange"]
        kit.check(f"rank {r} got rank {int(right)}'s tensor", got, torch.full((3,), right))
        kit.check_true(f"rank {r} traffic: 12 bytes out, 12 in", (sent_b, recv_b) == (12, 12))
    kit.done()

# %% [markdown]
# ## Your turn
# Write the ring pass — every rank sends to its left neighbour and receives
# from its right at the same time, without the deadlock above: edit `lessons/exercises/ring_pass.py`, then check it against
# torch.distributed: `python -m minidp exercise check ring_pass`

# %%
if __name__ == "__main__":
    print("\nExercise: edit lessons/exercises/ring_pass.py, then check it against torch:")
    print("  python -m minidp exercise check ring_pass")
