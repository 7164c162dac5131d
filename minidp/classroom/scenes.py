"""What each classroom scene is called, what it explains, and which lesson it belongs to.

The page shows these texts beside each scene; ``page.py`` embeds them as JSON.
Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

SCENES = {
    "ring": {
        "title": "Ring all-reduce",
        "lesson": "08_ring_all_reduce.py",
        "text": "Each rank's tensor is cut into one chunk per rank. Reduce-scatter (n-1 steps): "
        "every rank sends one chunk to its neighbour, which adds its own piece. Afterwards each "
        "rank owns one fully summed chunk. All-gather (n-1 steps): the finished chunks travel "
        "round the ring and are copied. Rank r's inputs are multiples of 10^r, so each digit of a "
        "sum says whose piece is in it. Values: copies of the real messages' payloads.",
    },
    "traffic": {
        "title": "Parameter server vs ring",
        "lesson": "07_parameter_server.py",
        "text": "Bytes per link, counted from every real send (rank, peer, bytes; headers "
        "included). The server's links all end at rank 0: it receives and sends (n-1)*S. "
        "The ring spreads the same total evenly: every rank sends 2(n-1)/n*S.",
    },
    "dp": {
        "title": "DataParallel step",
        "lesson": "03_data_parallel.py",
        "text": "One process, one model on the main device. scatter cuts the batch into rows per "
        "device; replicate copies the weights to every device (replica 0 is the model "
        "itself); parallel_apply runs one thread per replica; gather brings the outputs back "
        "to device 0. Backward flows through the copies, and the gradients are summed into the "
        "one real model. Shown: each device's real tensors (last layer's bias gradient).",
    },
    "ddp": {
        "title": "DDP backward: hooks and buckets",
        "lesson": "11_buckets_overlap.py",
        "text": "One process per rank. During backward, each parameter's hook fires as its "
        "gradient is ready (last layer first). The gradient is copied into its bucket; a full "
        "bucket is launched at once and all-reduced on the communication thread while "
        "backward continues: communication overlaps compute. At the end, backward waits for "
        "the last buckets.",
    },
    "memory": {
        "title": "ZeRO-1/2 and FSDP: memory per rank",
        "lesson": "18_memory_wall.py",
        "text": "Bytes each rank holds, measured from the real tensors at four points of one "
        "AdamW step. DDP keeps everything on every rank; ZeRO-1 shards the optimizer state; "
        "ZeRO-2 also the gradients; FSDP also the parameters (gathered only while a unit "
        "computes). Below: all four stages at the same point, side by side, on one scale.",
    },
    "fsdp": {
        "title": "FSDP: units gathered and freed",
        "lesson": "21_fsdp.py",
        "text": "Each layer is a unit holding 1/n of its parameters. Before a unit computes, its "
        "all-gather brings the full parameters; after, they are freed. The next unit's "
        "all-gather is issued early (prefetch) so it travels while this one computes. "
        "Backward re-gathers in reverse and reduce-scatters each unit's gradients.",
    },
    "hsdp": {
        "title": "HSDP: shard in a node, replicate across",
        "lesson": "37_hsdp.py",
        "text": "Real rank processes on a 2-D mesh (replicate x shard). Each row plays a node: "
        "its ranks shard every unit, so all-gathers and reduce-scatters stay on the fast "
        "links inside the node. Each column holds the same shard on every node; after the "
        "reduce-scatter, only that shard's gradient (1/S of the unit's) is all-reduced "
        "across nodes, over the slow link. Bytes: every real message each rank sent "
        "(headers included), to whom, in which collective.",
    },
}
