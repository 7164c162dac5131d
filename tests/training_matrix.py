"""The training-loop matrix: every wrapper x every ordinary move, and the test that shows it.

Each cell names the test that trains minidp's wrapper and torch's equivalent side by side
with that move over several steps and compares them with ``torch.equal`` ("equal"), or that
checks minidp refuses the move the way torch does ("refused"), or says it is not verified
yet ("open", with why). ``tests/test_training_matrix.py`` checks that every named test
exists and that docs/verification.md's table is this one:

    python tests/training_matrix.py        # print the table for docs/verification.md

The DDP and ZeRO rows are in ``matrix_cells_ddp_zero.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

ROWS = ["DDP", "ZeRO-1 + DDP", "ZeRO-2", "FSDP", "FSDP + MixedPrecisionPolicy"]
COLUMNS = [
    "accumulation",
    "no_sync / set_requires_gradient_sync",
    "clip_grad_norm_",
    "LR scheduler",
    "state dict round trip",
    "W→W′ resharding",
    "tied weights",
    "frozen before wrapping",
    "frozen after wrapping",
    "param groups",
    "activation checkpointing",
    "eval / no_grad between steps",
    "meta init",
    "dtype moves",
    "non-tensor outputs",
]


@dataclass(frozen=True)
class Cell:
    kind: str  # "equal" (torch.equal to torch), "refused" (like torch), "open" (not yet)
    test: str = ""  # the pytest node id that shows it ("" for open cells)
    note: str = ""  # what is compared, the refusal, or why a cell is open

    def mark(self) -> str:
        return {"equal": "✓", "refused": "refused", "open": "open"}[self.kind]


def _fsdp2(scenario: str) -> str:
    return f"tests/test_fsdp.py::test_bit_identical_to_fsdp2_at_two_ranks[{scenario}]"


def _resumes_at_three(dtype: str) -> str:
    test = "test_full_state_dict_saved_at_two_ranks_resumes_at_three_like_fsdp2"
    return f"tests/test_fsdp.py::{test}[{dtype}]"


FSDP = {
    "accumulation": Cell("equal", _fsdp2("accumulate"), "two backwards, then step"),
    "no_sync / set_requires_gradient_sync": Cell("equal", _fsdp2("no_sync_accumulate")),
    "clip_grad_norm_": Cell("equal", _fsdp2("clip"), "the global norm; also inf + accumulation"),
    "LR scheduler": Cell("equal", _fsdp2("lr_scheduler"), "StepLR"),
    "state dict round trip": Cell(
        "equal",
        _fsdp2("state_dict_resumed"),
        "model + optimizer + scheduler state into fresh objects after step 0 == FSDP2 that "
        "never stopped; sharded and full: test_state_dicts_round_trip",
    ),
    "W→W′ resharding": Cell("equal", _resumes_at_three("fp32"), "saved at 2 ranks, resumed at 3"),
    "tied weights": Cell(
        "equal",
        _fsdp2("adamw"),
        "within a unit (every scenario ties emb/head); across two units refused with FSDP2's "
        "ValueError (test_fsdp_wrapping.py)",
    ),
    "frozen before wrapping": Cell("equal", _fsdp2("frozen_norms"), "mixed frozen/trainable unit"),
    "frozen after wrapping": Cell("equal", _fsdp2("freeze_after_wrap"), "frozen, then unfrozen"),
    "param groups": Cell("equal", _fsdp2("param_groups"), "other lr, no decay on norms"),
    "activation checkpointing": Cell("equal", _fsdp2("activation_checkpointing")),
    "eval / no_grad between steps": Cell("equal", _fsdp2("eval_between_steps")),
    "meta init": Cell("equal", _fsdp2("meta_init"), "meta -> fully_shard -> to_empty -> load"),
    "dtype moves": Cell("equal", _fsdp2("float64_after_wrap"), "model.to(float64) after wrap"),
    "non-tensor outputs": Cell("equal", _fsdp2("dataclass_outputs"), "blocks return a dataclass"),
}

FSDP_MIXED = {
    "accumulation": Cell("equal", _fsdp2("bf16_accumulate")),
    "state dict round trip": Cell(
        "equal",
        _fsdp2("bf16_state_dict_resumed"),
        "resumed after step 0, with no_sync accumulation, clip, param groups, StepLR",
    ),
    "W→W′ resharding": Cell(
        "equal", _resumes_at_three("bf16"), "fp32 shards saved at 2 ranks, resumed at 3"
    ),
    "no_sync / set_requires_gradient_sync": Cell(
        "equal", _fsdp2("bf16_no_sync_accumulate"), "also fp32 reduce_dtype"
    ),
    "dtype moves": Cell("equal", _fsdp2("bf16_blocks_only"), "fp32 inputs cast, output_dtype"),
    "tied weights": Cell("equal", _fsdp2("bf16"), "emb/head tied within the root unit"),
    "meta init": Cell("equal", _fsdp2("bf16_meta_accumulate_clip"), "with no_sync and clip"),
    **dict.fromkeys(
        [
            "clip_grad_norm_",
            "LR scheduler",
            "param groups",
            "frozen before wrapping",
            "frozen after wrapping",
            "eval / no_grad between steps",
            "non-tensor outputs",
        ],
        Cell("equal", _fsdp2("bf16_combined"), "all seven in one loop"),
    ),
    "activation checkpointing": Cell(
        "equal", _fsdp2("bf16_activation_checkpointing"), "the whole block recomputed"
    ),
}


def cells() -> dict[tuple[str, str], Cell]:
    """Every (row, column) cell."""
    from matrix_cells_ddp_zero import CELLS as DDP_ZERO

    out = {(row, col): cell for row, table in DDP_ZERO.items() for col, cell in table.items()}
    for row, table in (("FSDP", FSDP), ("FSDP + MixedPrecisionPolicy", FSDP_MIXED)):
        out.update({(row, col): cell for col, cell in table.items()})
    return out


def table() -> str:
    """docs/verification.md's Markdown table: rows are wrappers, columns moves."""
    every = cells()
    lines = ["| | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for row in ROWS:
        marks = [every[row, col].mark() if (row, col) in every else "?" for col in COLUMNS]
        lines.append(f"| {row} | " + " | ".join(marks) + " |")
    lines.append("")
    for row in ROWS:  # what is not ✓, and why
        for col in COLUMNS:
            cell = every.get((row, col))
            if cell is not None and cell.kind != "equal":
                lines.append(f"- {row} / {col}: {cell.mark()} — {cell.note}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
