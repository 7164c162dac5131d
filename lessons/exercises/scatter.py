"""Exercise (lesson 2): scatter — one chunk of the batch per device.

Task: ``inputs`` is the tuple of arguments for the model, e.g. ``(x, y, "train")``. Return
one tuple of arguments per device, like ``torch.nn.parallel.scatter``:

* every tensor is cut along dim 0 with **torch's rule**, ``tensor.chunk(n)``: chunks of
  ``ceil(B / n)`` rows, the last one what is left (batch 10 on 4 devices: 3, 3, 3, 1), and
  chunk ``i`` goes to ``devices[i]`` (``chunk.to(devices[i])``);
* anything that is not a tensor (the string) is passed to every device as it is;
* a small batch makes *fewer* chunks than devices (batch 5 on 4 devices: 2, 2, 1): then
  return only that many tuples — those devices sit idle.

Example: ``scatter((x, y, "train"), ["cpu"] * 4)`` with 10 rows ->
``[(x[0:3], y[0:3], "train"), (x[3:6], ...), (x[6:9], ...), (x[9:10], ...)]``.

Tools: ``tensor.chunk(n)``, ``tensor.to(device)``, ``zip``, ``isinstance(obj, torch.Tensor)``.

Hints:
* ``tensor_split`` is *not* the same: it makes 3, 3, 2, 2.
* ``zip(*per_argument_chunks)`` turns "chunks per argument" into "arguments per device",
  and stops at the shortest list — the count of chunks decides the count of devices.

Check: ``python -m minidp exercise check scatter``
"""

import torch  # noqa: F401  (you will need it)


def scatter(inputs: tuple, devices: list) -> list[tuple]:
    """One tuple of arguments per used device: tensors chunked on dim 0, the rest repeated."""
    raise NotImplementedError("not implemented yet: chunk every tensor, repeat the rest")
