"""The activation estimate (``minidp/zero/activations.py``) against what torch keeps.

Measured with ``torch.autograd.graph.saved_tensors_hooks``: every tensor an op saves for
backward passes through ``pack``; the bytes of the distinct storages behind them, minus the
parameters' (a Linear saves its weight too, which is a model state, not an activation), are
the activations. The model is a small GPT-style layer stack written the way the formula
counts it (separate q/k/v projections, explicit softmax, optional dropout), and a
Llama/Qwen-style one (SwiGLU MLP, torch's fused attention).

Tolerance: 1% of the measured bytes. The formula leaves out the norms' per-token
statistics (LayerNorm keeps its mean and 1/std: 4·s·b values per layer, at most
16·s·b bytes), which at hidden size h is at most 1/(2h) of the 16·d·s·b·h bytes a layer
keeps at least — 0.8% at h = 64. Anything else missing or extra (a kernel keeping one more
tensor) is at least an s·b·h-sized tensor, 1/16 of the total, and fails.

Test: ``pytest tests/test_activations.py``
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from minidp.zero.activations import layer_bytes, stack_bytes

SEQ, BATCH, HIDDEN, HEADS, LAYERS = 32, 2, 64, 4, 3
TOLERANCE = 0.01


class GPTLayer(nn.Module):
    """Korthikanti et al.'s layer: LayerNorm, attention (dropout on the scores), GELU MLP."""

    def __init__(self, p: float, flash: bool = False, mlp: str = "gelu") -> None:
        super().__init__()
        h = HIDDEN
        self.p, self.flash, self.mlp = p, flash, mlp
        self.norm1, self.norm2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        if mlp == "swiglu":
            self.gate, self.up = nn.Linear(h, 4 * h), nn.Linear(h, 4 * h)
        else:
            self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x):  # (b, s, h)
        b, s, h = x.shape
        hd = h // HEADS
        y = self.norm1(x)
        q, k, v = (m(y).view(b, s, HEADS, hd).transpose(1, 2) for m in (self.q, self.k, self.v))
        if self.flash:
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
    ],
    ids=["eager", "dropout", "flash", "flash-swiglu"],
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
    ).kept
    assert abs(measured - estimate) <= TOLERANCE * measured, (measured, estimate)


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


@pytest.mark.parametrize(
    "call",
    [
        lambda: layer_bytes(0, 1, 64, 4),
        lambda: layer_bytes(8, 1, 65, 4),
        lambda: layer_bytes(8, 1, 64, 4, flash=True, dropout=True),
        lambda: layer_bytes(8, 1, 64, 4, mlp="relu"),
        lambda: stack_bytes(0, 8, 1, 64, 4),
        lambda: stack_bytes(2, 8, 1, 64, 4, checkpointing="selective"),
    ],
)
def test_bad_arguments_raise(call):
    with pytest.raises(ValueError):
        call()
