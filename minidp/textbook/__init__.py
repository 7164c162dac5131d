"""The book: each idea of data parallelism as one short page, read in order.

Every page is the smallest version that is still right, built from send/recv and the
pages before it (its collectives are ``collectives.py``'s, its padding rule the ZeRO
page's), and ends by saying what the engine (the torch-faithful packages beside this one)
adds; the engine's docstrings say what they add to the page. The lessons print these
pages from here; the exercises ask you to write them; the demo and the classroom run the
same ring.

1. ``collectives.py`` — the parameter server, the ring all-reduce (reduce-scatter +
   all-gather, to the left, gloo's order), all-gather, reduce-scatter, a tree broadcast;
2. ``dp.py`` — one DataParallel step: scatter, replicate, parallel_apply, gather;
3. ``ddp.py`` — DDP with gradient hooks and buckets, launched in order during backward;
4. ``sampler.py`` — DistributedSampler: every rank its own share, a new shuffle per epoch;
5. ``zero.py`` — ZeRO-1 and ZeRO-2 after backward, one collective per parameter;
6. ``fsdp.py`` — FSDP: every parameter cut on dim 0, gathered for the forward,
   reduce-scattered after backward (``fully_shard``'s layout);
7. ``hsdp.py`` — HSDP: the FSDP page within a node, one all-reduce across nodes.

Test: ``pytest tests/test_textbook_pages.py tests/test_textbook_comm.py
tests/test_textbook_dp_ddp.py tests/test_textbook_shard.py``
"""
