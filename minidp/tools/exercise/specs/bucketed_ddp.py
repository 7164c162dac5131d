"""``bucketed_ddp`` (lesson 11) vs torch DDP's gradients and bucket sizes, two backwards (hooks
re-arm); ``start_all_reduce`` notes when each bucket leaves and is waited for (overlap)."""

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from torch import nn

from minidp.comm import all_reduce
from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.specs import ddp
from minidp.tools.exercise.specs.bucket_assignment import torch_buckets

FLAGS = ("bucket sizes launched (elements)", "a bucket started before the last gradient",
         "no wait before the last gradient")  # fmt: skip


class Launcher:
    """``start_all_reduce`` for the learner: sums on a comm thread, notes the timeline."""

    def __init__(self, group) -> None:
        self.group, self.pool = group, ThreadPoolExecutor(1)
        self.events: list[tuple[str, int]] = []  # ("ready" | "launch" | "wait", numel)

    def note(self, what: str, value: int = 0) -> None:
        self.events.append((what, value))  # (list.append is atomic: threads may note)

    def __call__(self, flat):  # returns a handle like torch's Work: wait() gives the sum
        self.note("launch", flat.numel())
        future = self.pool.submit(all_reduce, flat, "sum", self.group)
        wait = lambda: self.note("wait") or future.result()
        return SimpleNamespace(wait=wait, result=wait)

    def summary(self) -> list:
        """[launch sizes, some launch before the last gradient, no wait before it]."""
        last = max(i for i, (what, _) in enumerate(self.events) if what == "ready")
        launches = [(i, n) for i, (what, n) in enumerate(self.events) if what == "launch"]
        waits = [i for i, (what, _) in enumerate(self.events) if what == "wait"]
        early = any(i < last for i, _ in launches)
        return [[n for _, n in launches], early, all(i > last for i in waits)]


def learn(fn, case, rank, world, group):
    mine, launcher = ddp.model(case), Launcher(group)
    for p in mine.parameters():  # registered first: they run before the learner's hooks
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda p: launcher.note("ready"))
    fn(mine, group, case["cap"], launcher)
    got = []
    for step in range(2):  # twice: the hooks must re-arm for the next backward
        launcher.events.clear()
        mine.zero_grad(set_to_none=True)
        ddp.loss(mine, ddp.data(case, rank, step)).backward()
        got += [*ddp.grads(mine), *launcher.summary()]
    launcher.pool.shutdown()
    return got


def expect(case, rank, world, group):
    theirs = ddp.model(case)
    wrapped = nn.parallel.DistributedDataParallel(theirs, process_group=group)
    numels = [p.numel() for p in theirs.parameters() if p.requires_grad]
    buckets = torch_buckets(numels, ["float64"] * len(numels), [case["cap"]])
    sizes, expected, labels = [sum(numels[i] for i in b) for b in buckets], [], []
    for step in range(2):
        wrapped.zero_grad(set_to_none=True)
        ddp.loss(wrapped, ddp.data(case, rank, step)).backward()
        # overlap needs a second bucket: a single one can leave only with the last gradient
        expected += [*ddp.grads(theirs), sizes, len(sizes) > 1, True]
        labels += [f"step {step + 1}: {what}" for what in (*ddp.names(theirs), *FLAGS)]
    return Expected(expected, labels)


EXERCISE = Exercise(
    reference="torch.nn.parallel.DistributedDataParallel's gradients (gloo), float64, rtol 1e-12",
    learn=learn, expect=expect,
    # the MLP's gradients, last first: 24, 192, 64, 512, 64, 320 bytes; cap 216: the first
    # bucket reaches the cap exactly (closes at >=)
    cases=({"world": 2, "seed": 0, "cap": 216},
           {"world": 3, "seed": 1, "cap": 200, "model": "branchy"},
           {"world": 1, "seed": 2, "cap": 200},
           {"world": 2, "seed": 3, "cap": 400, "model": "branchy", "spare": 1}),
    draw=lambda rng: ddp.draw(rng, cap=lambda r: r.choice([1, 100, 200, 216, 400, 2**20]),
                              model=lambda r: r.choice(["mlp", "branchy"])),
    generated=4, tolerance=lambda case: ddp.TOL, reference_processes=True, prepare=ddp.warm,
    answers=ddp.DDP_ANSWERS)  # fmt: skip
