"""``python -m minidp memory``: the planner's command line (the arithmetic is ``plan.py``).

    python -m minidp memory --model qwen2.5-14b --gpus 2 --gpu-gib 80
    python -m minidp memory --model qwen2.5-14b --gpus 16 --shard-size 8 --seq 4096
    python -m minidp memory --params 14.7e9 --gpus 8 --activations-gib 30

* ``--shard-size S`` adds an HSDP row: FSDP within each group of ``S`` GPUs (usually one
  node's), replicated across the ``gpus / S`` groups — FSDP's bytes with ``N = S``.
* For a ``--model`` preset the FSDP and HSDP rows also count the units FSDP gathers while a
  step runs (``units.py``: the root, two layers, gradients and reduce-scatter copies).
* Activations, two ways, never both: ``--activations-gib`` (a figure you measured), or
  ``--seq`` (with ``--micro-batch``, ``--checkpointing``, ``--attention``): the estimate of
  ``activations.py`` (Korthikanti et al.) for the ``--model`` preset's layer shape
  (``plan.LAYERS``), in the precision's activation dtype (fp32: 4 bytes, else 2), plus the
  logits and the loss's log-probabilities (``activations.logits_bytes``). A ``--params``
  count has no layer shape: ``--seq`` is refused for it.

Every number is checked as it is parsed: ``float()`` happily reads "inf" and "nan", which
would otherwise come out as a table of inf/nan with a fits/NO verdict on it.

Test: ``pytest tests/test_memory.py -k planner``
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from minidp.tools.planner.activations import CHECKPOINTING, Activations, logits_bytes, stack_bytes
from minidp.tools.planner.plan import (
    GIB,
    LAYERS,
    MODELS,
    MOMENTS,
    PRECISIONS,
    Row,
    format_plan,
    optimizer_k,
    plan,
)
from minidp.tools.planner.units import units

ATTENTION = ("flash", "eager")  # a fused kernel (no s x s scores kept), or softmax's output kept


def activation_estimate(
    model: str | None,
    seq: int,
    micro_batch: int = 1,
    precision: str = "bf16-mixed",
    checkpointing: str = "none",
    attention: str = "flash",
) -> Activations:
    """``stack_bytes`` for the preset ``model``'s layers (bytes per GPU: ``.peak``)."""
    if model not in LAYERS:
        known = "a --params count" if model is None else f"the preset {model!r}"
        raise ValueError(
            f"activations: expected a --model whose layer shape is known ({sorted(LAYERS)}), "
            f"got {known}. Hint: estimate your model's with "
            "minidp.tools.planner.activations.stack_bytes(...) and pass the peak as "
            "--activations-gib"
        )
    if attention not in ATTENTION:
        raise ValueError(f"activations: expected attention in {ATTENTION}, got {attention!r}")
    layers, hidden, heads, kv_heads, ffn, mlp, _ = LAYERS[model]
    return stack_bytes(
        layers,
        seq,
        micro_batch,
        hidden,
        heads,
        ffn=ffn,
        mlp=mlp,
        flash=attention == "flash",
        # grouped-query attention keeps k and v small in a fused kernel; the eager path
        # repeats them to every head (activations.py)
        kv_heads=kv_heads if attention == "flash" else None,
        bytes_per_value=_activation_bytes(precision),
        checkpointing=checkpointing,
    )


def _activation_bytes(precision: str) -> int:
    return 4 if precision == "fp32" else 2


def _number(
    what: str, hint: str, *, positive: bool = False, at_most: float | None = None
) -> Callable[[str], float]:
    """An argparse ``type``: a finite float >= 0 (> 0 if ``positive``, <= ``at_most`` if
    given), else an error saying what was expected, what was given, and how to fix it.

    argparse prefixes the flag ("argument --params: ...") and exits with status 2.
    """

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan  # refused below, with the same message
        ok = (
            math.isfinite(value)  # float() happily reads "inf", "nan" and "1e999" (-> inf)
            and (value > 0 if positive else value >= 0)
            and (at_most is None or value <= at_most)
        )
        if not ok:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}. Hint: {hint}")
        return value

    return parse


def _count(what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"expected {what} (an integer >= 1), got {text!r}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minidp memory",
        description="Model-state memory per GPU for DDP, ZeRO-1, ZeRO-2, FSDP and HSDP "
        "(ZeRO paper), with activations if given or estimated.",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--params",
        type=_number(
            "a finite parameter count > 0 (e.g. 14.7e9)",
            "pass the model's total parameter count, or --model NAME for a preset.",
            positive=True,
        ),
        help="number of parameters, e.g. 14.7e9",
    )
    what.add_argument("--model", choices=sorted(MODELS), help="a preset (published counts)")
    parser.add_argument("--gpus", type=int, default=1, help="data-parallel GPUs (default 1)")
    parser.add_argument(
        "--gpu-gib",
        type=_number(
            "a finite memory per GPU in GiB > 0 (e.g. 80)",
            "pass one GPU's memory, e.g. --gpu-gib 80 for an 80 GiB H100.",
            positive=True,
        ),
        default=80.0,
        help="memory per GPU (default 80)",
    )
    parser.add_argument("--optimizer", choices=sorted(MOMENTS), default="adamw")
    parser.add_argument("--precision", choices=sorted(PRECISIONS), default="bf16-mixed")
    parser.add_argument(
        "--trainable",
        type=_number(
            "a finite fraction in [0, 1]",
            "1 trains every parameter, 0 freezes them all, 0.1 trains a tenth.",
            at_most=1.0,
        ),
        default=1.0,
        help="fraction of parameters trained (0: frozen)",
    )
    parser.add_argument(
        "--shard-size",
        type=int,
        help="add an HSDP row: shard within groups of this many GPUs (usually the GPUs per "
        "node, e.g. 8), replicate across --gpus / --shard-size groups",
    )
    parser.add_argument(
        "--activations-gib",
        type=_number(
            "a finite activation memory per GPU in GiB >= 0 (e.g. 3.5)",
            "pass a measured peak (torch.cuda.max_memory_allocated() minus the model states), "
            "or leave the flag out to plan the model states alone.",
        ),
        help="per GPU, measured (not with --seq)",
    )
    parser.add_argument(
        "--seq", type=_count("a sequence length"), help="estimate activations (needs --model)"
    )
    parser.add_argument(
        "--micro-batch", type=_count("a micro-batch size"), help="sequences per GPU (default 1)"
    )
    parser.add_argument("--checkpointing", choices=CHECKPOINTING, help="default none")
    parser.add_argument("--attention", choices=ATTENTION, help="default flash (fused kernel)")
    parser.add_argument(
        "--ddp-buckets",
        action="store_true",
        help="count DDP's flat gradient buckets (torch's default gradient_as_bucket_view=False)",
    )
    return parser


def _activations(args) -> tuple[float, str]:
    """(GiB per GPU, a line saying where the figure came from) — or ValueError."""
    shape = {"--micro-batch": args.micro_batch, "--checkpointing": args.checkpointing,
             "--attention": args.attention}  # fmt: skip
    given = [flag for flag, value in shape.items() if value is not None]
    if args.seq is not None and args.activations_gib is not None:
        raise ValueError(
            "expected either --seq (estimate the activations) or --activations-gib (a figure "
            "you measured), got both. Hint: drop one of them"
        )
    if args.seq is None:
        if given:
            raise ValueError(
                f"expected --seq with {', '.join(given)} (they shape the activation estimate), "
                "got no --seq. Hint: add e.g. --seq 4096"
            )
        return args.activations_gib or 0.0, ""
    est = activation_estimate(
        args.model, args.seq, args.micro_batch or 1, args.precision,
        args.checkpointing or "none", args.attention or "flash",
    )  # fmt: skip
    layers, hidden, heads, kv_heads, ffn, mlp, vocab = LAYERS[args.model]
    micro_batch = args.micro_batch or 1
    logits = logits_bytes(
        args.seq, micro_batch, vocab, bytes_per_value=_activation_bytes(args.precision)
    )
    line = (
        f"Activations (estimated, the same under every stage): {layers} layers of hidden "
        f"{hidden}, {heads} heads ({kv_heads} k/v), {mlp} MLP {ffn}; seq {args.seq} x "
        f"micro-batch {micro_batch}, {args.attention or 'flash'} attention, checkpointing "
        f"{args.checkpointing or 'none'}: backward peak {est.peak / 2**30:.1f} GiB + logits "
        f"and loss {logits / 2**30:.1f} GiB (vocabulary {vocab:,}: the logits and the "
        "loss's fp32 log-probabilities; the embedding not counted)."
    )
    return (est.peak + logits) / 2**30, line


def planned(argv: list[str]) -> tuple[list[Row], str]:
    """The rows ``minidp memory ARGV`` plans and the text it prints (argparse exits with
    status 2 on bad input, as the command does)."""
    parser = _parser()
    args = parser.parse_args(argv)
    params = MODELS[args.model] if args.model else args.params
    units_gib = 0.0
    units_line = "FSDP's gathered units are not counted: they need a --model preset's layer shape."
    if args.model in LAYERS:
        u = units(args.model, args.precision, args.trainable)
        units_gib = u.peak / GIB
        units_line = f"FSDP's units (the paper's formulas leave them out): {u.describe()}."
    try:
        activations_gib, line = _activations(args)
        rows = plan(
            params,
            args.gpus,
            args.gpu_gib,
            args.optimizer,
            args.precision,
            args.trainable,
            activations_gib,
            args.ddp_buckets,
            args.shard_size,
            units_gib,
        )
    except ValueError as e:
        parser.error(str(e))
    p, g, _, _ = PRECISIONS[args.precision]
    k = optimizer_k(args.optimizer, args.precision)
    extra = f"{args.precision}, {args.optimizer}: {p}+{g}+{k} bytes/param"
    if args.trainable < 1:
        extra += f", {args.trainable:g} trainable"
    table = format_plan(rows, params, args.gpus, args.model or "model", extra, args.precision)
    return rows, "\n".join(t for t in (table, units_line, line) if t)


def main(argv: list[str] | None = None) -> int:
    print(planned(argv)[1])
    return 0
