# %% [markdown]
# # Lesson 16 — DP vs DDP, measured on this machine
#
# Run: `python lessons/16_dp_vs_ddp.py`
#
# The articles disagree. One says "experiments show DDP is 5+ times faster than DP";
# another that "DDP is typically slower than DP on a single node"; another that "DP uses
# more memory than DDP because the model is replicated on each GPU" (DDP replicates it
# too: one full copy per process). The one published single-machine measurement we know
# of (2 GPUs, GPT-2) found DDP about 10% faster than DP.
#
# Claims like these depend on the hardware, the model and the batch. So we measure ours:
# the same model, the same global batch, the same SGD step, the methods taking turns step
# by step, and say exactly what machine it ran on. What this machine *cannot* show:
# GPU effects (kernel launch from threads, NVLink vs PCIe, NCCL). On CPU, "devices" share
# the same 2 cores, so no method can be faster than the cores allow — what differs is the
# overhead each design adds.

# %%
import statistics

import kit
import torch
import torch.distributed as dist
from torch import nn

import minidp
from minidp.dp.devices import official_data_parallel
from minidp.tools.bench.verdict import compare, interleave
from minidp.tools.planner.dp_memory import memory_report

WIDTH, DEPTH = kit.pick((512, 4), (64, 2))
BATCH = kit.pick(512, 64)  # global batch
ROUNDS = kit.pick(7, 5)  # DP rows and DDP rows take turns round by round
STEPS = kit.pick(3, 2)  # steps of each method per round (they take turns step by step)
WORLD = 2  # two devices / ranks
THREADS = torch.get_num_threads()


class Trainer:
    """One method under test: a model, its SGD optimizer and its own stream of batches."""

    def __init__(self, model: nn.Module, data: list, threads: int = 1, sync=None) -> None:
        self.model, self.data, self.threads, self.sync = model, iter(data), threads, sync
        self.opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(self) -> None:
        torch.set_num_threads(self.threads)
        xb, yb = next(self.data)
        self.opt.zero_grad()
        nn.functional.cross_entropy(self.model(xb), yb).backward()
        self.opt.step()


def global_batches():
    x, y = kit.make_data((ROUNDS * STEPS + 1) * BATCH)  # + 1 warm-up step
    return kit.batches(x, y, BATCH)


_ranks: dict[str, Trainer] = {}  # rank-local: this rank's two DDPs, kept between rounds


def ddp_round(rank: int, world: int, steps: int) -> dict[str, list[float]]:
    """Step minidp DDP and torch DDP in turn on this rank; seconds per step (barrier first)."""
    if not _ranks:
        torch.set_num_threads(1)  # one core per rank
        data = [(xb.chunk(world)[rank], yb.chunk(world)[rank]) for xb, yb in global_batches()]
        for name, wrapper in (
            ("minidp DDP", minidp.DistributedDataParallel),
            ("torch DDP", nn.parallel.DistributedDataParallel),
        ):
            net = wrapper(kit.make_model(seed=0, width=WIDTH, depth=DEPTH))
            _ranks[name] = Trainer(net, data)
            _ranks[name].step()  # warm-up: the first iteration and the bucket rebuild
    # barrier before each step: the ranks start together, so rank 0's clock means something
    methods = {name: lambda t=t: (dist.barrier(), t.step()) for name, t in _ranks.items()}
    return interleave(methods, steps, warmup=0)


def ddp_models(rank: int, world: int) -> dict[str, nn.Module]:
    return {name: t.model.module for name, t in _ranks.items()}


# %%
if __name__ == "__main__":
    kit.title("Lesson 16: DP vs DDP, measured on this machine")
    print(f"machine: {kit.machine()}")
    model = kit.make_model(seed=0, width=WIDTH, depth=DEPTH)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: MLP {DEPTH} x {WIDTH}, {n_params:,} parameters; global batch {BATCH}; SGD step")
    data = global_batches()

    def fresh() -> nn.Module:
        return kit.make_model(seed=0, width=WIDTH, depth=DEPTH)

    trainers = {
        "one process, all cores": Trainer(fresh(), data, threads=THREADS),
        "one process, 1 thread": Trainer(fresh(), data),
        "torch.nn.DataParallel (CPU: plain module)": Trainer(
            official_data_parallel(fresh(), ["cpu"] * WORLD), data
        ),
        "minidp.DataParallel, 2 simulated devices": Trainer(
            minidp.DataParallel(fresh(), device_ids=["cpu"] * WORLD), data
        ),
    }
    steps = {name: [] for name in [*trainers, "minidp DDP", "torch DDP"]}  # seconds per step
    rounds = {name: [] for name in steps}  # median step of each round, per method
    world = kit.world(ddp_round, WORLD)
    for r in range(ROUNDS):
        in_process = interleave(
            {name: t.step for name, t in trainers.items()}, STEPS, warmup=1 if r == 0 else 0
        )
        ddp = world.run(ddp_round, STEPS)[0]  # rank 0's clock
        for name, times in {**in_process, **ddp}.items():
            steps[name] += times
            rounds[name].append(statistics.median(times))
        print(f"  [round {r + 1}/{ROUNDS}] done", flush=True)
    torch.set_num_threads(THREADS)
    trained = {name: t.model for name, t in trainers.items()}
    trained.update(world.run(ddp_models)[0])
    world.close()

    base = statistics.median(steps["one process, 1 thread"])
    print(f"\n{'method':<44} {'ms/step':>8} {'middle half':>13} {'vs 1 thread':>12}")
    for name, times in steps.items():
        q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
        ms = statistics.median(times)
        spread = f"{q1 * 1e3:.1f}-{q3 * 1e3:.1f}"
        print(f"{name:<44} {ms * 1e3:>8.2f} {spread:>13} {base / ms:>11.2f}x")
    print(
        f"({ROUNDS} rounds x {STEPS} steps per method, taking turns. The reference is one\n"
        " process on one core; 2 ranks or 2 devices could at best reach 2x. 'All cores' runs\n"
        " each op on several OpenMP threads: when other processes also want the cores (see\n"
        " the load average), an op waits for its slowest thread.)"
    )
# %% [markdown]
# ## Memory: who holds what
# DP: per simulated device, from `minidp.tools.planner.dp_memory.memory_report`. DDP: every rank holds the
# whole model, its gradients and the flat bucket buffers (one more gradient-sized copy,
# unless `gradient_as_bucket_view=True`), for its half of the batch.

# %%
if __name__ == "__main__":
    dp = minidp.DataParallel(
        kit.make_model(seed=0, width=WIDTH, depth=DEPTH), device_ids=["cpu"] * WORLD
    )
    xb, yb = data[0]
    report = memory_report(dp, xb, loss_fn=lambda out: nn.functional.cross_entropy(out, yb))
    print(report)
    p_bytes = n_params * 4
    print(
        f"DDP, every rank: parameters {p_bytes:,} + gradients {p_bytes:,} + buckets {p_bytes:,} bytes"
        f" = {3 * p_bytes:,} (+ activations of {BATCH // WORLD} samples)"
    )

# %% [markdown]
# ## What the numbers say about the claims
# A claim gets a verdict only when the difference is bigger than the run-to-run noise: the
# methods took turns, each pair of turns gives one ratio, and a winner is named only when
# the middle half of those ratios lies on one side of 1.0 (`minidp.tools.bench.verdict`).
# Otherwise the honest answer is "inconclusive on this machine".

# %%
if __name__ == "__main__":
    dp, ddp = "minidp.DataParallel, 2 simulated devices", "torch DDP"
    dp_vs_ddp = compare(rounds[dp], rounds[ddp], "DP", "torch DDP")  # one pair per round
    print(f"* DP vs DDP, round by round: {dp_vs_ddp.sentence()}")
    if dp_vs_ddp.high <= 0.2:
        five_x = "holds here"
    elif dp_vs_ddp.low > 0.2 and dp_vs_ddp.pairs >= 5:
        five_x = "does not hold here"
    else:
        five_x = "inconclusive on this machine"
    print(
        f"* 'DDP is 5x faster than DP' needs DDP/DP <= 0.20x over the whole middle half: {five_x}."
    )
    slower = {"slower": "yes", "faster": "no"}.get(dp_vs_ddp.verdict, "inconclusive")
    print(f"* 'DDP is slower than DP on one node': {slower}, here.")
    mine = compare(steps["torch DDP"], steps["minidp DDP"], "torch DDP", "minidp DDP")
    print(f"* minidp DDP vs torch DDP, step by step on rank 0: {mine.sentence()}")
    print(
        f"* 'DP uses more memory because the model is replicated': both replicate; DP's main "
        f"device holds {report.rows[0].total:,} bytes, each DDP rank about {3 * p_bytes:,} + activations."
    )
    print(
        "* On GPUs each device adds its own compute, and the differences the articles describe\n"
        "  come from DP's per-step replicate, its main device and Python threads; 2 shared CPU\n"
        "  cores cannot show those."
    )


# %% [markdown]
# ## Checks
# Timings are measurements, not assertions; what must hold is that every method trained
# the same model (compared after all the timed steps).

# %%
if __name__ == "__main__":
    single = trained["one process, 1 thread"]
    kit.check(
        "torch.nn.DataParallel vs one process, after all steps",
        trained["torch.nn.DataParallel (CPU: plain module)"],
        single,
    )
    kit.check(
        "minidp.DataParallel (2 devices) vs one process, after all steps",
        trained["minidp.DataParallel, 2 simulated devices"].module,
        single,
        exact=False,
        rtol=1e-4,
        atol=1e-5,
    )
    kit.check(
        "minidp DDP vs torch DDP (rank 0), after all steps",
        trained["minidp DDP"],
        trained["torch DDP"],
    )
    kit.check(
        "torch DDP vs one process, after all steps",
        trained["torch DDP"],
        single,
        exact=False,
        rtol=1e-4,
        atol=1e-5,
    )
    kit.check_true(
        "every method timed every step",
        all(len(t) == ROUNDS * STEPS and min(t) > 0 for t in steps.values()),
    )
    kit.done()
