"""The activation estimate (``minidp/tools/planner/activations.py``) against what torch keeps.

Measured with ``torch.autograd.graph.saved_tensors_hooks``: every tensor an op saves for
backward passes through ``pack``; the bytes of the distinct storages behind them, minus the
parameters' (a Linear saves its weight too, which is a model state, not an activation), are
the activations. The model is a small GPT-style layer stack written the way the formula
counts it (separate q/k/v projections, explicit softmax, optional dropout), and a
Llama/Qwen-style one (SwiGLU MLP, torch's fused attention).

Exact, up to one term the formula leaves out (the paper does too): each LayerNorm keeps
its per-token mean and 1/std, 2·s·b values in the activation dtype on CPU (4·s·b per layer,
:func:`norm_stats`). Anything else missing or extra (a kernel keeping one more tensor) fails.
Grouped-query attention (``kv_heads``): a Qwen-style layer with fewer k/v heads through
``scaled_dot_product_attention(..., enable_gqa=True)``, which keeps k and v at their own size
(torch 2.8's CPU kernel keeps copies at every query head instead: those cases skip there).

Test: ``pytest tests/test_activations.py``
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from minidp.tools.planner.activations import layer_bytes, logits_bytes, stack_bytes

SEQ, BATCH, HIDDEN, HEADS, LAYERS = 32, 2, 64, 4, 3


def _native_gqa() -> str:
    """Why the grouped-query cases cannot run on this torch, or "" if they can: the formula
    counts k and v at their own size, as a native GQA kernel keeps them; torch 2.8's CPU
    ``scaled_dot_product_attention(..., enable_gqa=True)`` copies them to every query head
    first and keeps the copies (seen by the same hooks the test measures with)."""
    if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 5):
        return "enable_gqa needs torch >= 2.5"
    q = torch.randn(1, 4, 8, 16, requires_grad=True)  # 4 query heads
    k, v = (torch.randn(1, 1, 8, 16, requires_grad=True) for _ in "kv")  # 1 k/v head
    kept: list[int] = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: kept.append(t.numel()) or t, lambda t: t
    ):
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    if k.numel() not in kept:
        return (
            f"torch {torch.__version__}'s CPU attention keeps k and v copied to every query "
            "head under enable_gqa, not at their own size as the formula (native GQA) counts"
        )
    return ""


NO_GQA = _native_gqa()


def norm_stats(dtype: torch.dtype) -> int:
    """Bytes of the LayerNorm statistics the formula leaves out: per layer 2 norms x (mean,
    1/std) x s·b values, kept in the activation dtype by torch's CPU kernel (measured)."""
    return LAYERS * 2 * 2 * SEQ * BATCH * (torch.finfo(dtype).bits // 8)


class GPTLayer(nn.Module):
    """Korthikanti et al.'s layer: LayerNorm, attention (dropout on the scores), GELU MLP."""

    def __init__(
        self, p: float, flash: bool = False, mlp: str = "gelu", kv_heads: int = HEADS
    ) -> None:
        super().__init__()
        h, kv = HIDDEN, HIDDEN // HEADS * kv_heads  # kv: the width of k and v
        self.p, self.flash, self.mlp, self.kv_heads = p, flash, mlp, kv_heads
        self.norm1, self.norm2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.q, self.o = nn.Linear(h, h), nn.Linear(h, h)
        self.k, self.v = nn.Linear(h, kv), nn.Linear(h, kv)
        if mlp == "swiglu":
            self.gate, self.up = nn.Linear(h, 4 * h), nn.Linear(h, 4 * h)
        else:
            self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x):  # (b, s, h)
        b, s, h = x.shape
        hd = h // HEADS
        y = self.norm1(x)
        q = self.q(y).view(b, s, HEADS, hd).transpose(1, 2)  # (b, a, s, hd)
        k, v = (m(y).view(b, s, self.kv_heads, hd).transpose(1, 2) for m in (self.k, self.v))
        if self.kv_heads != HEADS:  # grouped-query attention, k and v kept at their own size
            att = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        elif self.flash:
            att = F.scaled_dot_product_attention(q, k, v)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)  # (b, a, s, s)
            att = F.dropout(scores.softmax(-1), self.p, self.training) @ v
        x = x + F.dropout(self.o(att.transpose(1, 2).reshape(b, s, h)), self.p, self.training)
        m = self.norm2(x)
        inner = F.silu(self.gate(m)) * self.up(m) if self.mlp == "swiglu" else F.gelu(self.fc1(m))
        return x + F.dropout(self.fc2(inner), self.p, self.training)


def measured_bytes(layers: nn.ModuleList, x: torch.Tensor, ckpt: bool = False) -> int:
    """Bytes of the distinct non-parameter storages saved for backward by one forward."""
    params = {p.untyped_storage().data_ptr() for p in layers.parameters()}
    kept: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        h = x
        for layer in layers:
            h = checkpoint(layer, h, use_reentrant=False) if ckpt else layer(h)
    return sum(kept.values())


def stack(dtype, **kw) -> tuple[nn.ModuleList, torch.Tensor]:
    torch.manual_seed(0)
    layers = nn.ModuleList(GPTLayer(**kw) for _ in range(LAYERS)).to(dtype)
    x = torch.randn(BATCH, SEQ, HIDDEN, dtype=dtype, requires_grad=True)  # the layers' input
    return layers, x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "kw",
    [
        {"p": 0.0},
        {"p": 0.1},
        {"p": 0.0, "flash": True},
        {"p": 0.0, "flash": True, "mlp": "swiglu"},
        pytest.param(
            {"p": 0.0, "flash": True, "mlp": "swiglu", "kv_heads": 2},
            marks=pytest.mark.skipif(bool(NO_GQA), reason=NO_GQA),
        ),
        pytest.param(
            {"p": 0.0, "flash": True, "kv_heads": 1},
            marks=pytest.mark.skipif(bool(NO_GQA), reason=NO_GQA),
        ),
    ],
    ids=["eager", "dropout", "flash", "flash-swiglu", "gqa-swiglu", "gqa-one-kv-head"],
)
def test_estimate_matches_saved_tensors(dtype, kw):
    layers, x = stack(dtype, **kw)
    measured = measured_bytes(layers, x)
    d = torch.finfo(dtype).bits // 8
    estimate = stack_bytes(
        LAYERS,
        SEQ,
        BATCH,
        HIDDEN,
        HEADS,
        bytes_per_value=d,
        dropout=kw["p"] > 0,
        mask_bytes=d,  # torch on CPU keeps the dropout mask in the activation dtype
        flash=kw.get("flash", False),
        mlp=kw.get("mlp", "gelu"),
        kv_heads=kw.get("kv_heads"),
    ).kept
    assert measured == estimate + norm_stats(dtype), (measured, estimate, norm_stats(dtype))


@pytest.mark.skipif(bool(NO_GQA), reason=NO_GQA)
def test_gqa_keeps_less_than_multi_head():
    # the same layer with 2 k/v heads instead of 4: k and v each shrink to half
    full, gqa = (
        measured_bytes(*stack(torch.float32, p=0.0, flash=True, kv_heads=n)) for n in (4, 2)
    )
    assert full - gqa == LAYERS * 2 * 4 * SEQ * BATCH * HIDDEN // 2  # k and v, half each
    assert full - gqa == (
        stack_bytes(LAYERS, SEQ, BATCH, HIDDEN, HEADS, bytes_per_value=4, flash=True).kept
        - stack_bytes(
            LAYERS, SEQ, BATCH, HIDDEN, HEADS, bytes_per_value=4, flash=True, kv_heads=2
        ).kept
    )


def test_full_checkpointing_keeps_each_layer_input():
    layers, x = stack(torch.float32, p=0.0)
    measured = measured_bytes(layers, x, ckpt=True)
    est = stack_bytes(LAYERS, SEQ, BATCH, HIDDEN, HEADS, bytes_per_value=4, checkpointing="full")
    assert measured == est.kept == LAYERS * 4 * SEQ * BATCH * HIDDEN
    assert est.peak == est.kept + est.per_layer


def test_paper_formula():
    # s·b·h·(34 + 5·a·s/h) with 2-byte values, 1-byte masks, dropout, f = 4h (GPT-3 175B's layer)
    s, b, h, a = 2048, 1, 12288, 96
    assert layer_bytes(s, b, h, a, dropout=True) == s * b * h * (34 + 5 * a * s // h)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_bytes_are_the_logits_and_the_losss_log_probabilities(dtype):
    # the output head's logits, then the loss as Hugging Face's causal LMs compute it (fp32)
    vocab = 50
    head = nn.Linear(HIDDEN, vocab).to(dtype)
    x = torch.randn(BATCH, SEQ, HIDDEN, dtype=dtype, requires_grad=True)
    target = torch.randint(0, vocab, (BATCH, SEQ))
    logits = head(x)  # (b, s, V), alive at the loss
    kept: dict[int, torch.Tensor] = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        F.cross_entropy(logits.float().flatten(0, 1), target.flatten())
    # what the loss keeps: fp32 log-probabilities (b·s, V), the target, a 0-d weight
    big = [t for t in kept.values() if t.numel() == BATCH * SEQ * vocab]
    assert [(t.dtype, t.shape) for t in big] == [(torch.float32, (BATCH * SEQ, vocab))]
    assert sorted(t.numel() for t in kept.values()) == [1, BATCH * SEQ, BATCH * SEQ * vocab]
    measured = logits.untyped_storage().nbytes() + big[0].untyped_storage().nbytes()
    d = torch.finfo(dtype).bits // 8
    assert measured == logits_bytes(SEQ, BATCH, vocab, bytes_per_value=d)


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: layer_bytes(0, 1, 64, 4), r"expected seq to be an integer >= 1, got 0"),
        (lambda: layer_bytes(8, 1, 65, 4), r"hidden \(65\) must be a multiple of heads \(4\)"),
        (lambda: layer_bytes(8, 1, 64, 4, flash=True, dropout=True), r"got dropout=True too"),
        (lambda: layer_bytes(8, 1, 64, 4, mlp="relu"), r"expected mlp 'gelu' or 'swiglu'"),
        (
            lambda: layer_bytes(8, 1, 64, 4, flash=True, kv_heads=3),
            r"kv_heads to be an integer >= 1 that divides heads \(4\), got 3\. Hint",
        ),
        (lambda: layer_bytes(8, 1, 64, 4, flash=True, kv_heads=0), r"divides heads .*got 0"),
        (  # unfused: k and v repeated to every head
            lambda: layer_bytes(8, 1, 64, 4, kv_heads=2),
            r"kv_heads=2 < heads=4 .*got flash=False\. Hint: .*kv_heads=None",
        ),
        (lambda: stack_bytes(0, 8, 1, 64, 4), r"expected layers to be an integer >= 1, got 0"),
        (lambda: logits_bytes(8, 1, 0), r"expected vocab to be an integer >= 1, got 0"),
        (
            lambda: stack_bytes(2, 8, 1, 64, 4, checkpointing="selective"),
            r"expected checkpointing in .*got 'selective'",
        ),
    ],
)
def test_bad_arguments_raise(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
