"""Plan before you buy: model-state bytes per GPU for DDP, ZeRO-1, ZeRO-2, FSDP and HSDP.

    python -m minidp memory --model qwen2.5-14b --gpus 2 --gpu-gib 80
    python -m minidp memory --params 14.7e9 --gpus 32 --shard-size 8 --precision bf16-mixed

(the command line is ``plan_cli.py``; this file is the arithmetic.) The ZeRO paper's
formulas (Rajbhandari et al., 2020, table 1), with ``Ψ`` parameters on ``N`` GPUs, ``p``/``g``
bytes per weight/gradient element and ``K`` bytes of optimizer state per parameter:

    DDP (2+2+K)Ψ,  ZeRO-1 2Ψ + 2Ψ + KΨ/N,  ZeRO-2 2Ψ + (2+K)Ψ/N,  ZeRO-3 (2+2+K)Ψ/N

(``p = g = 2`` there). HSDP (``shard_size=S``: shard within groups of ``S`` GPUs, replicate
across the ``N/S`` groups) holds FSDP's bytes with ``N = S`` — more than FSDP over all
``N``, for traffic that crosses nodes once per step (lesson 37). DDP's flat gradient buckets,
which the paper leaves out (one more gradient copy in torch's DDP, so ZeRO-1's, unless
``gradient_as_bucket_view=True``): ``buckets=True`` (``--ddp-buckets``).

Which bytes sit in which dtype is the *layout* (``--precision``, named under the table):
the paper's ``bf16-mixed`` (bf16 weights and gradients, fp32 master and moments: 2+2+12)
and FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16)`` (``fsdp2-bf16``: fp32 shards,
gradients and moments, 4+4+8, plus bf16 copies of the gathered units: ``units.py``) hold the
same 16 bytes per AdamW parameter. Frozen parameters (``--trainable`` < 1) need no gradient
and no optimizer state. Activations are extra: ``--activations-gib`` (measured) or ``--seq``
(``activations.py``'s estimate), else "fits" means "the model states fit". ``memory.py``
checks these numbers against the real tensors.

Test: ``pytest tests/test_memory.py -k plan``
"""

from __future__ import annotations

import dataclasses
import math

GIB = 1024**3
STAGES = ("ddp", "zero1", "zero2", "fsdp")
STAGE_NAMES = {
    "ddp": "DDP (replicated)",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "fsdp": "FSDP / ZeRO-3",
    "hsdp": "HSDP",  # not in STAGES: a row only when plan(shard_size=...) asks for it
}
# bytes per element of (weights, gradients) and the optimizer state's bytes per parameter
# excluding a master copy, per element of the moments' dtype: Adam keeps two, SGD with
# momentum one, plain SGD none.
MOMENTS = {"adamw": 2, "adam": 2, "sgd-momentum": 1, "sgd": 0}
PRECISIONS = {
    # name: (weight bytes, grad bytes, fp32 master copy bytes, moment bytes)
    "fp32": (4, 4, 0, 4),
    "bf16-mixed": (2, 2, 4, 4),  # the ZeRO paper's mixed precision: fp32 master + moments
    "bf16": (2, 2, 0, 2),  # pure bf16: no master copy, bf16 moments
    # FSDP2's MixedPrecisionPolicy: the shards and their .grad stay fp32 (they are the master
    # weights); only the gathered copies are bf16, and those are temporary (units.py)
    "fsdp2-bf16": (4, 4, 0, 4),
}
# What each layout means, printed under the table: the same name means different bytes in
# different papers and libraries.
LAYOUTS = {
    "fp32": "fp32 weights, gradients and moments",
    "bf16-mixed": "the ZeRO paper's: bf16 weights and gradients, fp32 master copy and moments",
    "bf16": "pure bf16: weights, gradients and moments in bf16, no master copy",
    "fsdp2-bf16": "FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32): fp32 "
    "shards, gradients and moments; + bf16 copies of the units gathered at the moment",
}
# Published total parameter counts (model cards), embeddings included.
MODELS = {
    "gpt2": 124.4e6,
    "qwen2.5-0.5b": 0.49e9,
    "qwen2.5-1.5b": 1.54e9,
    "qwen2.5-7b": 7.61e9,
    "qwen2.5-14b": 14.7e9,
    "qwen2.5-32b": 32.5e9,
    "qwen2.5-72b": 72.7e9,
    "llama-3-8b": 8.03e9,
    "llama-3-70b": 70.6e9,
}
# Each preset's transformer layer (the models' published configs), for the activation
# estimate: (layers, hidden, heads, k/v heads, MLP hidden size, MLP kind, vocabulary).
# Qwen2.5 and Llama 3 use grouped-query attention (fewer k/v heads than query heads): their
# k and v are that much smaller (``activations.layer_bytes(kv_heads=...)``, flash attention).
LAYERS = {
    "gpt2": (12, 768, 12, 12, 3072, "gelu", 50257),
    "qwen2.5-0.5b": (24, 896, 14, 2, 4864, "swiglu", 151936),
    "qwen2.5-1.5b": (28, 1536, 12, 2, 8960, "swiglu", 151936),
    "qwen2.5-7b": (28, 3584, 28, 4, 18944, "swiglu", 152064),
    "qwen2.5-14b": (48, 5120, 40, 8, 13824, "swiglu", 152064),
    "qwen2.5-32b": (64, 5120, 40, 8, 27648, "swiglu", 152064),
    "qwen2.5-72b": (80, 8192, 64, 8, 29568, "swiglu", 152064),
    "llama-3-8b": (32, 4096, 32, 8, 14336, "swiglu", 128256),
    "llama-3-70b": (80, 8192, 64, 8, 28672, "swiglu", 128256),
}


def optimizer_k(optimizer: str, precision: str) -> int:
    """``K``: optimizer-state bytes per trainable parameter (master copy + moments)."""
    _, _, master, moment = PRECISIONS[precision]
    return master + MOMENTS[optimizer] * moment


def stage_bytes(
    stage: str,
    params: float,
    gpus: int,
    param_bytes: float,
    grad_bytes: float,
    k: float,
    trainable: float = 1.0,
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) bytes on one GPU for ``stage``."""
    n = gpus
    weights = param_bytes * params
    grads = grad_bytes * params * trainable
    state = k * params * trainable
    if stage == "ddp":
        return weights, grads, state
    if stage == "zero1":
        return weights, grads, state / n
    if stage == "zero2":
        return weights, grads / n, state / n
    if stage == "fsdp":
        return weights / n, grads / n, state / n
    raise ValueError(f"expected a stage in {list(STAGES)}, got {stage!r}")


def bucket_bytes(
    stage: str, params: float, grad_bytes: float, trainable: float = 1.0, as_view: bool = False
) -> float:
    """DDP's flat gradient buckets on one GPU: DDP and ZeRO-1 (which runs on DDP) keep a
    second copy of every gradient there, unless ``.grad`` is a view into them
    (``gradient_as_bucket_view=True``). ZeRO-2 and FSDP keep no full-size buckets."""
    if stage not in STAGES:
        raise ValueError(f"expected a stage in {list(STAGES)}, got {stage!r}")
    if stage in ("ddp", "zero1") and not as_view:
        return grad_bytes * params * trainable
    return 0.0


@dataclasses.dataclass
class Row:
    stage: str
    weights: float
    grads: float
    optimizer: float
    activations: float
    gpu_bytes: float
    buckets: float = 0.0  # DDP's flat gradient buckets (plan(buckets=True)), else 0
    shard_size: int = 0  # HSDP's shard group (the "hsdp" row), else 0
    units: float = 0.0  # FSDP's and HSDP's gathered units (plan(units_gib=...)), else 0

    @property
    def name(self) -> str:
        if self.stage == "hsdp":
            return f"HSDP ({self.shard_size}-GPU shard)"
        return STAGE_NAMES[self.stage]

    @property
    def total(self) -> float:
        parts = (self.weights, self.grads, self.buckets, self.optimizer, self.activations)
        return sum(parts) + self.units

    @property
    def fits(self) -> bool:
        return self.total <= self.gpu_bytes


def plan(
    params: float,
    gpus: int,
    gpu_gib: float,
    optimizer: str = "adamw",
    precision: str = "bf16-mixed",
    trainable: float = 1.0,
    activations_gib: float = 0.0,
    buckets: bool = False,
    shard_size: int | None = None,
    units_gib: float = 0.0,
) -> list[Row]:
    """One :class:`Row` per stage: bytes per GPU and whether it fits in ``gpu_gib``.

    ``buckets``: also count DDP's flat gradient buckets (torch's default,
    ``gradient_as_bucket_view=False``); the paper's formulas leave them out.
    ``shard_size``: add an "hsdp" row — shard within groups of ``shard_size`` GPUs, replicate
    across the ``gpus // shard_size`` groups: FSDP's bytes with ``N = shard_size``.
    ``units_gib``: FSDP's gathered units at their peak (``units.py``), on the FSDP and HSDP
    rows; the paper's formulas leave them out.
    """
    _check(params, gpus, gpu_gib, optimizer, precision, trainable, activations_gib, units_gib)
    _check_shard_size(shard_size, gpus)
    p, g, _, _ = PRECISIONS[precision]
    k = optimizer_k(optimizer, precision)
    rows = [
        Row(
            s,
            *stage_bytes(s, params, gpus, p, g, k, trainable),
            activations_gib * GIB,
            gpu_gib * GIB,
            bucket_bytes(s, params, g, trainable) if buckets else 0.0,
        )
        for s in STAGES
    ]
    rows[-1].units = units_gib * GIB
    if shard_size is not None:  # FSDP within a shard group; the replicas change nothing here
        fsdp = stage_bytes("fsdp", params, shard_size, p, g, k, trainable)
        rows.append(
            Row("hsdp", *fsdp, activations_gib * GIB, gpu_gib * GIB, 0, shard_size, units_gib * GIB)
        )
    return rows


def _check_shard_size(shard_size, gpus) -> None:
    if shard_size is None:
        return
    if not (isinstance(shard_size, int) and 1 <= shard_size <= gpus and gpus % shard_size == 0):
        raise ValueError(
            f"plan: expected shard_size to be an integer in [1, gpus] that divides gpus "
            f"({gpus}), got {shard_size!r}. Hint: HSDP shards within groups of shard_size GPUs "
            "(usually one node's, e.g. 8) and replicates across gpus // shard_size groups"
        )


def _check(params, gpus, gpu_gib, optimizer, precision, trainable, activations_gib, units_gib):
    # inf/nan first: they slip through the range checks below (inf > 0, nan < 0 is False)
    # and would print a table of inf/nan with a verdict on it.
    for name, value in (
        ("params", params),
        ("gpu_gib", gpu_gib),
        ("trainable", trainable),
        ("activations_gib", activations_gib),
        ("units_gib", units_gib),
    ):
        if not math.isfinite(value):
            raise ValueError(
                f"plan: expected {name} to be a finite number, got {value!r}. Hint: a memory "
                "plan needs real sizes; pass the figure itself (e.g. params=14.7e9, gpu_gib=80)."
            )
    if not params > 0:
        raise ValueError(f"plan: expected a positive parameter count, got {params!r}")
    if not (isinstance(gpus, int) and gpus >= 1):
        raise ValueError(f"plan: expected gpus to be an integer >= 1, got {gpus!r}")
    if not gpu_gib > 0 or min(activations_gib, units_gib) < 0:
        raise ValueError(
            f"plan: expected gpu_gib > 0 and activations_gib, units_gib >= 0, got {gpu_gib!r}, "
            f"{activations_gib!r} and {units_gib!r}"
        )
    if optimizer not in MOMENTS:
        raise ValueError(f"plan: expected an optimizer in {sorted(MOMENTS)}, got {optimizer!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"plan: expected a precision in {sorted(PRECISIONS)}, got {precision!r}")
    if not 0 <= trainable <= 1:
        raise ValueError(f"plan: expected trainable to be a fraction in [0, 1], got {trainable!r}")


def format_plan(
    rows: list[Row], params: float, gpus: int, label: str, extra: str, precision: str = ""
) -> str:
    """The planner's table as text (GiB per GPU); ``precision`` names the layout it used."""
    with_buckets, with_units = any(r.buckets for r in rows), any(r.units for r in rows)
    out = [
        f"{label}: {params / 1e9:.3g} B parameters on {gpus} GPU(s) of "
        f"{rows[0].gpu_bytes / GIB:g} GiB — model states per GPU, GiB ({extra})",
        f"{'stage':<22}{'weights':>9}{'grads':>9}"
        + (f"{'buckets':>9}" if with_buckets else "")
        + f"{'optimizer':>11}{'activ.':>8}"
        + (f"{'units':>8}" if with_units else "")
        + f"{'total':>9}  fits?",
    ]
    for r in rows:
        out.append(
            f"{r.name:<22}{r.weights / GIB:>9.1f}{r.grads / GIB:>9.1f}"
            + (f"{r.buckets / GIB:>9.1f}" if with_buckets else "")
            + f"{r.optimizer / GIB:>11.1f}{r.activations / GIB:>8.1f}"
            + (f"{r.units / GIB:>8.1f}" if with_units else "")
            + f"{r.total / GIB:>9.1f}  "
            + ("yes" if r.fits else "NO")
        )
    if precision:
        out.append(f"Layout: {LAYOUTS[precision]}.")
    if not with_buckets:
        out.append(
            "DDP's gradient buckets are not counted (the paper's formulas): with torch's default "
            "gradient_as_bucket_view=False, DDP and ZeRO-1 hold one more gradient copy "
            "(--ddp-buckets)."
        )
    if any(r.stage == "hsdp" for r in rows):
        hsdp = next(r for r in rows if r.stage == "hsdp")
        out.append(
            f"HSDP: FSDP within each group of {hsdp.shard_size} GPUs, replicated across "
            f"{gpus // hsdp.shard_size} groups (the gradient shards all-reduced between them)."
        )
    if rows[0].activations == 0:
        out.append(
            "Activations are extra (not included): pass --seq (an estimate for a --model "
            "preset) or --activations-gib to add them."
        )
    return "\n".join(out)
