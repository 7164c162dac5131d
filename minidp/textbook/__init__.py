"""The book: each idea of data parallelism as one short page, read in order.

Every page is the smallest version that is still right, built from send/recv and the
pages before it; each says what the engine (the torch-faithful packages beside this one)
adds, and the engine's docstrings say what they add to the page. The lessons print these
pages; the exercises ask you to write them.

* ``fsdp.py`` — FSDP: every parameter cut on dim 0, gathered for the forward,
  reduce-scattered after backward.
* ``hsdp.py`` — HSDP: the FSDP page within a node, one all-reduce across nodes.

Test: ``pytest tests/test_textbook_shard.py``
"""
