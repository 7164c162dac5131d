"""FSDP's gathered units: what a rank holds beyond its shards while a step runs.

The ZeRO paper's ZeRO-3 row, ``(p+g+K)Ψ/N``, counts only the shards. While a step runs,
FSDP2 with its usual wrapping (each decoder layer a unit; the root holding the embedding,
the final norm and the output head) also holds, in the compute dtype (``param_dtype``,
``c`` bytes) and the reduce dtype (``reduce_dtype``, ``r`` bytes): the **root's weights**,
gathered from forward to backward (not resharded after its forward: lessons 21 and 34);
in backward **two layers' weights** (computing, prefetched); **unsharded gradients** (the
head's, first in backward and reduce-scattered with the root's at its end, and the current
layer's); and **reduce-scatter buffers** (each unit's gradients copied into one flat
``reduce_dtype`` input, ``world`` padded shards: a full copy; lesson 34 counts it). The
largest moments: mid-backward, ``c(root + head + 3 layer) + r layer``, and the root's own
reduce-scatter, ``root (c + max(c, r))``; :func:`units` takes the larger. The transient
output shard and the allocator's slack are not counted: to the nearest GiB, not measured.

Test: ``pytest tests/test_memory.py -k units``
"""

from __future__ import annotations

import dataclasses

from minidp.tools.planner.plan import GIB, LAYERS, MODELS

TIED = {"gpt2", "qwen2.5-0.5b", "qwen2.5-1.5b"}  # the head is the embedding (config: tied)
# (compute, reduce) bytes per element of each layout (plan.PRECISIONS); FSDP2's policy with
# reduce_dtype=float32, torch 2.15's meaning of an unset reduce_dtype (lesson 22)
DTYPES = {"fp32": (4, 4), "bf16-mixed": (2, 2), "bf16": (2, 2), "fsdp2-bf16": (2, 4)}


@dataclasses.dataclass
class Units:
    """A preset's units in parameters (root: embedding + head + final norm) and dtypes."""

    root: float
    head: float
    layer: float
    compute: int
    reduce: int
    trainable: float = 1.0  # the gradients' share (plan's ``trainable``): frozen ones have none

    @property
    def backward(self) -> float:
        """Bytes mid-backward: root weights, 2 layers; head and layer gradient, its copy."""
        c, r, t = self.compute, self.reduce, self.trainable
        return c * (self.root + 2 * self.layer) + t * (
            c * (self.head + self.layer) + r * self.layer
        )

    @property
    def root_reduce(self) -> float:
        """Bytes at the root's reduce-scatter: its weights and gradients, then gradients and
        their flat copy (the weights are resharded first)."""
        c, r, t = self.compute, self.reduce, self.trainable
        return self.root * max(c + t * c, t * (c + r))

    @property
    def peak(self) -> float:
        return max(self.backward, self.root_reduce)

    def describe(self) -> str:
        c, t, gib = self.compute, self.trainable, lambda n: f"{n / GIB:.1f}"
        layer_grad = t * (c + self.reduce) * self.layer
        return (
            f"mid-backward the root (embedding + head, {self.root / 1e9:.2f} B parameters, "
            f"gathered from forward to backward) {gib(c * self.root)} GiB + the head's "
            f"unsharded gradient {gib(t * c * self.head)} + two gathered layers "
            f"{gib(2 * c * self.layer)} + a layer's gradient and its reduce-scatter copy "
            f"{gib(layer_grad)} = {gib(self.backward)} GiB; at the root's reduce-scatter, its "
            f"weights or gradients and their copy ({self.reduce}-byte reduce_dtype) "
            f"{gib(self.root_reduce)} GiB: {gib(self.peak)} GiB at the peak"
        )


def units(model: str, precision: str, trainable: float = 1.0) -> Units:
    """The preset ``model``'s units (``plan.LAYERS``) in the layout ``precision``."""
    if model not in LAYERS:
        raise ValueError(
            f"units: expected a model whose layer shape is known ({sorted(LAYERS)}), got "
            f"{model!r}. Hint: FSDP's gathered units need the layer shape (--model)"
        )
    layers, hidden, *_, vocab = LAYERS[model]
    head = vocab * hidden
    root = head * (1 if model in TIED else 2) + hidden
    return Units(root, head, (MODELS[model] - root) / layers, *DTYPES[precision], trainable)
