"""``WorkerError``: what ``spawn`` and ``run_threads`` raise when a rank fails."""

from __future__ import annotations

import dataclasses
import signal


@dataclasses.dataclass
class Failure:
    """One rank's failure as seen by the launcher."""

    rank: int
    exc_type: str = ""  # exception class name, "" for a process that died
    message: str = ""
    traceback: str = ""
    exitcode: int | None = None  # set when the process died (negative: killed by signal)
    bystander: bool = False  # failed only because a peer failed (lost connection)
    order: int = 0  # arrival order at the launcher
    stuck: bool = False  # raised nothing: still running at the launcher's deadline

    def headline(self) -> str:
        if self.stuck:
            return f"rank {self.rank} was still running at the {self.message} deadline"
        if self.exitcode is not None:
            if self.exitcode < 0:
                try:
                    name = signal.Signals(-self.exitcode).name
                except ValueError:
                    name = str(-self.exitcode)
                return f"rank {self.rank} was killed by signal {name} (exit code {self.exitcode})"
            return f"rank {self.rank} exited with code {self.exitcode} without returning"
        return f"rank {self.rank} raised {self.exc_type}: {self.message}"


def pick_primary(failures: list[Failure]) -> Failure:
    """The root cause: a rank's own exception, else a death, else a bystander's error."""

    def priority(f: Failure) -> tuple[int, int]:
        if f.exitcode is None and not f.bystander and not f.stuck:
            return (0, f.order)
        if f.exitcode is not None:
            return (1, f.order)
        return (2 if f.bystander else 3, f.order)

    return min(failures, key=priority)


class WorkerError(RuntimeError):
    """A rank failed; ``rank``, ``exc_type``, ``exitcode``, ``traceback``: the root cause's."""

    def __init__(self, failures: list[Failure], launcher: str, note: str = "") -> None:
        primary = pick_primary(failures)
        others = [f for f in failures if f is not primary]
        self.rank = primary.rank
        self.exc_type = primary.exc_type
        self.exitcode = primary.exitcode
        self.traceback = primary.traceback
        self.failures = [primary, *others]
        text = f"{launcher}: {primary.headline()}"
        if note:
            text += f"\n{note}"
        if primary.traceback:
            text += f"\n\n--- rank {primary.rank} traceback ---\n{primary.traceback.rstrip()}"
        for f in others:
            text += f"\n(also: {f.headline().splitlines()[0][:300]})"
        super().__init__(text)
