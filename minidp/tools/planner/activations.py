"""Activation memory: the bytes backward keeps from the forward, per transformer layer.

Every op whose backward needs its input (or output) keeps it until backward has used it:
for a stack of transformer layers this grows with the micro-batch and the sequence, not
with the number of GPUs — DDP, ZeRO and FSDP shard the model states (``plan.py``), never
the activations. The formula is Korthikanti et al., 2022, "Reducing Activation
Recomputation in Large Transformer Models" (section 4.1): per layer, with ``s`` tokens per
sequence, ``b`` sequences, hidden size ``h``, ``a`` heads and 2-byte values,
``s·b·h·(34 + 5·a·s/h)`` bytes. Term by term (``d`` bytes per value, ``f`` the MLP's hidden
size, 4h there): the two norms' inputs (2d·sbh), the q/k/v projections' shared input
(d·sbh), q and k for ``q @ kᵀ`` (2d·sbh), v (d·sbh), the output projection's input (d·sbh),
the MLP's input (d·sbh), the activation function's input and output (2d·sbf), the
softmax output (d·a·s²·b); with dropout, each dropout's mask (``mask_bytes`` per value) and
the dropped-out scores (d·a·s²·b). Generalised here from the paper's d = 2, f = 4h:

* ``mlp="swiglu"`` (Llama, Qwen): ``down(silu(gate(x)) * up(x))`` keeps gate's, silu's and
  up's outputs and the product: 4d·sbf instead of 2d·sbf;
* ``flash=True``: a fused kernel keeps no ``a·s²·b`` scores, only its output (counted
  already) and an fp32 log-sum-exp per head and token (4·a·s·b); no dropout inside it;
* ``mask_bytes``: CUDA's fused dropout keeps a 1-byte mask (the paper's); torch on CPU keeps
  it in the activation dtype (measured: ``tests/test_activations.py``);
* ``kv_heads`` (grouped-query attention: Llama 3, Qwen2.5): k and v are ``kv_heads/a`` of an
  activation each, where a fused kernel keeps them at their own size (native GQA:
  flash-attn, ``scaled_dot_product_attention(..., enable_gqa=True)``), so it needs
  ``flash=True``; an unfused path or ``repeat_kv`` keeps full-size copies (the default
  ``kv_heads=None``). Qwen2.5-14B (40 heads, 8 k/v, flash): 8.5% less.

Not counted (nor by the paper): the norms' per-token statistics, the embedding, the final
norm, the logits and the loss — the logits are :func:`logits_bytes` (with Qwen2.5's 152,064
words and 4,096 tokens they outweigh a checkpointed layer stack). Full checkpointing keeps
each layer's input (d·sbh) and recomputes one layer at a time in backward.

Test: ``pytest tests/test_activations.py``;
see it: ``python lessons/33_activation_checkpointing.py``
"""

from __future__ import annotations

import dataclasses

CHECKPOINTING = ("none", "full")


def layer_bytes(
    seq: int,
    batch: int,
    hidden: int,
    heads: int,
    *,
    ffn: int | None = None,
    bytes_per_value: int = 2,
    dropout: bool = False,
    mask_bytes: int = 1,
    flash: bool = False,
    mlp: str = "gelu",
    kv_heads: int | None = None,
) -> int:
    """Bytes one transformer layer keeps for backward (no checkpointing); see the module doc."""
    _check(seq, batch, hidden, heads, bytes_per_value, mask_bytes, ffn, kv_heads)
    if mlp not in ("gelu", "swiglu"):
        raise ValueError(f"layer_bytes: expected mlp 'gelu' or 'swiglu', got {mlp!r}")
    if flash and dropout:
        raise ValueError(
            "layer_bytes: flash=True counts a fused attention kernel without dropout inside it; "
            "got dropout=True too. Hint: count it with flash=False (the kernel falls back to "
            "the unfused path, which keeps the scores)"
        )
    if kv_heads not in (None, heads) and not flash:
        raise ValueError(
            f"layer_bytes: kv_heads={kv_heads} < heads={heads} counts k and v at their own size, "
            "as a fused kernel with native grouped-query attention keeps them (flash=True); got "
            "flash=False. Hint: the unfused path repeats k and v to every head and keeps the "
            "copies: count it with kv_heads=None"
        )
    s, b, h, a, d = seq, batch, hidden, heads, bytes_per_value
    f = 4 * h if ffn is None else ffn
    kv = a if kv_heads is None else kv_heads
    sbh, sbf = s * b * h, s * b * f
    sbkv = sbh * kv // a  # one of k, v: kv heads of h / a values per token
    norms = 2 * d * sbh  # each norm's input
    attention = d * sbh + d * sbh + 2 * d * sbkv + d * sbh  # q/k/v's input; q; k, v; o's input
    if flash:
        scores = 4 * a * s * b  # fp32 log-sum-exp per head and token
    else:
        scores = d * a * s * s * b  # softmax output
        if dropout:
            scores += mask_bytes * a * s * s * b + d * a * s * s * b  # its mask, dropped scores
    act = (4 if mlp == "swiglu" else 2) * d * sbf  # gelu: in, out; swiglu: gate, silu, up, product
    mlp_bytes = d * sbh + act  # the MLP's input (the 2nd norm's output), the activation
    masks = 2 * mask_bytes * sbh if dropout else 0  # after attention, after the MLP
    return norms + attention + scores + mlp_bytes + masks


@dataclasses.dataclass
class Activations:
    """Activation bytes of a layer stack: ``kept`` between forward and backward, and the
    ``peak`` during backward (checkpointing recomputes one layer's activations at a time)."""

    per_layer: int  # one layer's activations, as kept without checkpointing
    kept: int
    peak: int


def stack_bytes(
    layers: int,
    seq: int,
    batch: int,
    hidden: int,
    heads: int,
    *,
    checkpointing: str = "none",
    **layer_kwargs,
) -> Activations:
    """Activations of ``layers`` identical layers (``layer_kwargs``: as :func:`layer_bytes`).

    ``checkpointing="full"``: each layer wrapped in ``torch.utils.checkpoint`` keeps only its
    input (``bytes_per_value·s·b·h``); backward recomputes one layer at a time on top of that.
    """
    if checkpointing not in CHECKPOINTING:
        raise ValueError(
            f"stack_bytes: expected checkpointing in {CHECKPOINTING}, got {checkpointing!r}"
        )
    if not (isinstance(layers, int) and layers >= 1):
        raise ValueError(f"stack_bytes: expected layers to be an integer >= 1, got {layers!r}")
    one = layer_bytes(seq, batch, hidden, heads, **layer_kwargs)
    if checkpointing == "none":
        return Activations(one, layers * one, layers * one)
    kept = layers * layer_kwargs.get("bytes_per_value", 2) * seq * batch * hidden
    return Activations(one, kept, kept + one)


def logits_bytes(seq: int, batch: int, vocab: int, *, bytes_per_value: int = 2) -> int:
    """Bytes of the logits at the loss: the output head's ``(b, s, V)`` logits in the
    activation dtype, and the fp32 log-probabilities ``cross_entropy(logits.float(), ...)``
    keeps for backward (Hugging Face's causal-LM loss upcasts: ``(d + 4)·s·b·V``).

    A lower bound at the loss itself: for a moment torch also holds the fp32 copy that
    log-softmax reads, and in backward the gradients of both; a fused or chunked
    cross-entropy avoids most of it.
    """
    for name, value in (("seq", seq), ("batch", batch), ("vocab", vocab),
                        ("bytes_per_value", bytes_per_value)):  # fmt: skip
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"logits_bytes: expected {name} to be an integer >= 1, got {value!r}")
    return (bytes_per_value + 4) * seq * batch * vocab


def _check(seq, batch, hidden, heads, bytes_per_value, mask_bytes, ffn, kv_heads) -> None:
    for name, value in (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads),
                        ("bytes_per_value", bytes_per_value)):  # fmt: skip
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"layer_bytes: expected {name} to be an integer >= 1, got {value!r}")
    if hidden % heads:
        raise ValueError(f"layer_bytes: hidden ({hidden}) must be a multiple of heads ({heads})")
    if not (isinstance(mask_bytes, int) and mask_bytes >= 0):
        raise ValueError(f"layer_bytes: expected mask_bytes >= 0, got {mask_bytes!r}")
    if ffn is not None and not (isinstance(ffn, int) and ffn >= 1):
        raise ValueError(f"layer_bytes: expected ffn to be an integer >= 1, got {ffn!r}")
    if kv_heads is not None and not (
        isinstance(kv_heads, int) and kv_heads >= 1 and heads % kv_heads == 0
    ):
        raise ValueError(
            f"layer_bytes: expected kv_heads to be an integer >= 1 that divides heads ({heads}), "
            f"got {kv_heads!r}. Hint: grouped-query attention shares each k/v head among "
            "heads // kv_heads query heads (Qwen2.5-14B: heads=40, kv_heads=8)"
        )
