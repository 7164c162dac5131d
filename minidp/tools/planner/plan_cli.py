"""``python -m minidp memory``: the planner's command line (the arithmetic is ``plan.py``).

    python -m minidp memory --model qwen2.5-14b --gpus 2 --gpu-gib 80
    python -m minidp memory --model qwen2.5-14b --gpus 16 --shard-size 8 --seq 4096
    python -m minidp memory --params 14.7e9 --gpus 8 --activations-gib 30

``--shard-size S`` adds an HSDP row; a ``--model`` preset's FSDP and HSDP rows count the
units FSDP gathers (``units.py``). Activations, two ways, never both: ``--activations-gib``
(measured), or ``--seq`` (with ``--micro-batch``, ``--checkpointing``, ``--attention``):
``activations.py``'s estimate for the preset's layer shape in the precision's activation
dtype, plus the logits and the loss (a ``--params`` count has no layer shape: refused).
Every number is checked as it is parsed (``bench.args.number``: "inf" and "nan" too).

Test: ``pytest tests/test_memory.py -k planner``
"""

from __future__ import annotations

import argparse

from minidp.tools.bench.args import POSITIVE, number
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minidp memory",
        description="Model-state memory per GPU for DDP, ZeRO-1, ZeRO-2, FSDP and HSDP "
        "(ZeRO paper), with activations if given or estimated.",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--params",
        type=number(
            "a finite parameter count > 0 (e.g. 14.7e9)",
            float,
            POSITIVE,
            hint="pass the model's total parameter count, or --model NAME for a preset.",
        ),
        help="number of parameters, e.g. 14.7e9",
    )
    what.add_argument("--model", choices=sorted(MODELS), help="a preset (published counts)")
    parser.add_argument("--gpus", type=int, default=1, help="data-parallel GPUs (default 1)")
    parser.add_argument(
        "--gpu-gib",
        type=number(
            "a finite memory per GPU in GiB > 0 (e.g. 80)",
            float,
            POSITIVE,
            hint="pass one GPU's memory, e.g. --gpu-gib 80 for an 80 GiB H100.",
        ),
        default=80.0,
        help="memory per GPU (default 80)",
    )
    parser.add_argument("--optimizer", choices=sorted(MOMENTS), default="adamw")
    parser.add_argument("--precision", choices=sorted(PRECISIONS), default="bf16-mixed")
    parser.add_argument(
        "--trainable",
        type=number(
            "a finite fraction in [0, 1]",
            float,
            0,
            1,
            "1 trains every parameter, 0 freezes them all, 0.1 trains a tenth.",
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
        type=number(
            "a finite activation memory per GPU in GiB >= 0 (e.g. 3.5)",
            float,
            0,
            hint="pass a measured peak (torch.cuda.max_memory_allocated() minus the "
            "model states), or leave the flag out to plan the model states alone.",
        ),
        help="per GPU, measured (not with --seq)",
    )
    parser.add_argument(
        "--seq",
        type=number("a sequence length (an integer >= 1)"),
        help="estimate activations (needs --model)",
    )
    parser.add_argument(
        "--micro-batch",
        type=number("a micro-batch size (an integer >= 1)"),
        help="sequences per GPU (default 1)",
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
