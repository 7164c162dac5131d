"""What each classroom scene is called, what it explains, and which lesson it belongs to.

The page shows these texts beside each scene; ``page.py`` embeds them as JSON, and each
lesson's source with them (its link opens it in the page). ``ranks`` says what the ranks
of the recording are: what a timeline of thread-ranks can and cannot show is said on the
page, next to the timeline. ``recognised`` tells a trace with classroom scenes from any
other Chrome trace (which opens on the generic timeline).

Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

SCENES = {
    "ring": {
        "title": "Ring all-reduce",
        "short": "Ring",
        "lesson": "08_ring_all_reduce.py",
        "ranks": "processes",
        "text": "The book's ring (lesson 8's page). Each rank's tensor is cut into one chunk per "
        "rank. Reduce-scatter (n-1 steps): every rank sends one chunk to the rank before it "
        "(r to r-1), which adds its own piece. Afterwards each rank owns one fully summed chunk. "
        "All-gather (n-1 steps): the finished chunks travel on round the ring and are copied. "
        "Values: copies of the real messages' payloads.",
    },
    "traffic": {
        "title": "Parameter server vs ring",
        "short": "Server vs ring",
        "lesson": "07_parameter_server.py",
        "ranks": "processes",
        "text": "Bytes per link, counted from every real message (rank, peer, bytes). The "
        "server's links all end at rank 0: it receives and sends (n-1)·S. The ring spreads "
        "the same work evenly: every rank sends 2(n-1)/n·S. minidp's check before each "
        "collective (a small header to every peer, lesson 36) is counted apart: it belongs "
        "to neither algorithm.",
    },
    "dp": {
        "title": "DataParallel step",
        "short": "DataParallel",
        "lesson": "03_data_parallel.py",
        "ranks": "threads",
        "text": "One process, one model on the main device. scatter cuts the batch into rows per "
        "device; replicate copies the weights to every device (replica 0 is the model "
        "itself); parallel_apply runs one thread per replica; gather brings the outputs back "
        "to device 0. Backward flows through the copies, and the gradients are summed into the "
        "one real model. Shown: each device's real tensors (last layer's bias gradient).",
    },
    "ddp": {
        "title": "DDP backward: hooks and buckets",
        "short": "DDP",
        "lesson": "11_buckets_overlap.py",
        "ranks": "processes",
        "text": "One process per rank. During backward, each parameter's hook fires as its "
        "gradient is ready (last layer first). The gradient is copied into its bucket; a full "
        "bucket is launched at once and all-reduced on the communication thread while "
        "backward continues: communication overlaps compute. At the end, backward waits for "
        "the last buckets. The timeline opens on the wall clock (each rank: compute above, its "
        "communication thread below); how much of the all-reduce hid behind backward is "
        "measured under it.",
    },
    "memory": {
        "title": "DDP, ZeRO-1/2, FSDP: memory per rank over a step",
        "short": "Memory",
        "lesson": "18_memory_wall.py",
        "ranks": "threads",
        "text": "Bytes each rank holds during an AdamW step after the first (the optimizer "
        "state is there from the start, as in training), measured from the real tensors "
        "(parameters, gradients, optimizer state, DDP's buckets) at the step's start, after "
        "forward, as each gradient lands in backward, after backward and after the step; under "
        "FSDP, also its all-gather buffers, gathered units, unsharded gradients and their "
        "reduce-scatter input, at every change. DDP keeps everything on every rank; ZeRO-1 "
        "shards the optimizer state; ZeRO-2 also the gradients; FSDP also the parameters.",
    },
    "fsdp": {
        "title": "FSDP: units gathered and freed",
        "short": "FSDP",
        "lesson": "21_fsdp.py",
        "ranks": "processes",
        "text": "Each hidden layer is a unit holding 1/n of its parameters; the root keeps the "
        "last layer. Before a unit computes, its all-gather brings the full parameters; after, "
        "they are freed. The next unit's all-gather is issued early (prefetch) so it travels "
        "while this one computes — and its buffer is held from then on: the memory cost of "
        "prefetch. Backward re-gathers in reverse and reduce-scatters each unit's gradients.",
    },
    "hsdp": {
        "title": "HSDP: shard in a node, replicate across",
        "short": "HSDP",
        "lesson": "37_hsdp.py",
        "ranks": "processes",
        "text": "Real rank processes on a 2-D mesh (replicate x shard). Each row plays a node: "
        "its ranks shard every unit, so all-gathers and reduce-scatters stay on the fast "
        "links inside the node. Each column holds the same shard on every node; after the "
        "reduce-scatter, only that shard's gradient (1/S of the unit's) is all-reduced "
        "across nodes, over the slow link. Bytes: every real message each rank sent "
        "(headers included), to whom, in which collective.",
    },
    "whatif": {
        "title": "What if: a real model on many GPUs",
        "short": "What if",
        "lesson": "23_planning_a_real_model.py",
        "ranks": "model",
        "text": "The formulas the lessons measure, and the planner's numbers, for any model, "
        "world and cluster: bytes each rank sends per step (ring, server, HSDP across nodes), "
        "the α-β time of the gradient all-reduce beside the compute it can hide behind, and "
        "memory per GPU for DDP, ZeRO-1, ZeRO-2 and FSDP (gathered units and activations for a "
        "published model). Slide or type; the curves show time and memory against W, the "
        "model's size or the bandwidth. Every figure is a model, labelled with its formula; "
        "the measured lines show the same formula against this recording. The address keeps "
        "the inputs: a reload or a shared link shows the same case.",
    },
    "trace": {
        "title": "Timeline of the whole trace",
        "short": "Trace",
        "lesson": "",
        "ranks": "any",
        "text": "Every event of the trace, one row per process and thread, as recorded; a slice "
        "inside another one track down; arrows from each send to its receive; search by name "
        "(Enter: the next match). Ctrl+wheel or +/− to zoom, drag to pan, click a bar to step to "
        "it. Opens any Chrome trace: minidp's tracer, torch.profiler, others.",
    },
}

# An event name that only a scene's own recording (or minidp's library) writes.
SIGNS = {"ring": "ring step", "traffic": "traffic message", "dp": "dp scatter", "ddp": "grad ready",
         "memory": "memory", "fsdp": "unit gathered", "hsdp": "hsdp send"}  # fmt: skip


def recognised(data: dict) -> list[str]:
    """The classroom scenes whose events are in the trace ``data`` (may be none)."""
    names = {e.get("name") for e in data.get("traceEvents", []) if isinstance(e, dict)}
    found = [key for key, sign in SIGNS.items() if sign in names]
    if "fsdp" not in found and any(str(n).startswith("forward unit") for n in names):
        found.append("fsdp")
    return found
