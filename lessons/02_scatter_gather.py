# %% [markdown]
# # Lesson 2 — scatter and gather
#
# Run: `python lessons/02_scatter_gather.py`
#
# `nn.DataParallel` (lesson 3) wraps lesson 1's loop in four steps; this lesson is the
# first and the last:
#
# * **scatter** cuts the batch into one chunk per device — with `tensor.chunk`, which
#   rounds the chunk size *up*, so a small batch can leave devices idle;
# * **gather** concatenates the devices' outputs on the main device.
#
# and what they do in the backward pass. One article says DP "scatters the *loss* back to
# the GPUs"; what actually travels back is the gradient of the gathered output, cut into
# the same chunks (gather's backward is a scatter).
#
# Devices are simulated: `["cpu"] * 4` (four "devices" that share this machine's memory).
# On a CPU tensor `torch.nn.parallel.scatter` refuses to run ("Expected a non cpu
# device"), so the official comparison runs torch's **own** scatter/gather code with its
# two CUDA-only leaves replaced by their documented CPU meaning (`Tensor.chunk`,
# `torch.cat`).

# %%
import inspect
import warnings
from unittest import mock

import kit
import torch
import torch.nn.parallel.scatter_gather as torch_sg

from minidp.dp import gather, scatter, scatter_kwargs
from minidp.textbook import dp as textbook

kit.title("Lesson 2: scatter and gather")
DEVICES = ["cpu"] * 4

# %% [markdown]
# ## 1. Scatter a batch: chunk sizes
# `tensor.chunk(4)` makes chunks of `ceil(B/4)` rows: batch 10 -> 3,3,3,1 and batch 5 ->
# 2,2,1: **three** chunks, so only three devices work.

# %%
sizes = {}
for batch in (8, 10, 5, 3):
    x = torch.arange(batch * 2, dtype=torch.float32).view(batch, 2)
    chunks = scatter(x, DEVICES)
    sizes[batch] = [len(c) for c in chunks]
    print(f"batch {batch:>2} on 4 devices -> chunk sizes {sizes[batch]}")

# %% [markdown]
# ## 2. Scatter a structure
# Tuples, lists, dicts and namedtuples are rebuilt once per device around their chunked
# tensors; anything else (a string, a number, None) is handed to every device as is —
# the *same object*, not a copy.

# %%
batch = torch.arange(20.0).view(10, 2)
mask = torch.arange(10) % 2 == 0
args, kwargs = scatter_kwargs((batch, "mode=train"), {"mask": mask, "scale": 0.5}, DEVICES)
for i, (a, kw) in enumerate(zip(args, kwargs)):
    print(
        f"device {i}: args = (x[{len(a[0])} rows], {a[1]!r}), "
        f"kwargs = {{mask: {kw['mask'].tolist()}, scale: {kw['scale']}}}"
    )
print(f"the string is one object on every device: {all(a[1] is args[0][1] for a in args)}")

# %% [markdown]
# ## 3. Gather, and its backward
# Each device returns its rows; gather concatenates them on the main device. Backward:
# the gradient of the gathered output is cut back into the same row blocks — each
# replica receives exactly the slice that belongs to its rows.

# %%
w = torch.randn(2, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)
x = torch.randn(10, 2, generator=torch.Generator().manual_seed(1))
chunks = scatter(x, DEVICES)
outs = [c @ w for c in chunks]  # what each device would compute
for o in outs:
    o.retain_grad()
out = gather(outs, "cpu")
out.retain_grad()
loss = (out**2).mean()
loss.backward()
print(f"outputs {[tuple(o.shape) for o in outs]} -> gathered {tuple(out.shape)}")
print("per-device gradient blocks:", [tuple(o.grad.shape) for o in outs])
print("what goes back is d loss / d out (one block per device), not the loss")

# %% [markdown]
# ## 4. The pitfall: a model that returns a scalar
# If the model inside DataParallel returns its loss (0-dim), gather gets one scalar per
# device and returns a **vector** of them, with a warning. Reduce it (`.mean()`) —
# and remember a plain mean of per-device means is only right if chunks are equal
# (lesson 1: batch 10 on 4 devices gives 3,3,3,1).

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    losses = gather([c.sum() for c in scatter(x, DEVICES)], "cpu")
print(f"gathered 4 scalars -> {tuple(losses.shape)}; warning: {caught[0].message}")


# %% [markdown]
# ## 5. The textbook lines, and what minidp.dp adds
# In the one-function DataParallel step (`minidp.textbook.dp`, lesson 3) scatter and gather
# are one line each. Printed from minidp's own source (`inspect.getsource`):

# %%
source = inspect.getsource(textbook.data_parallel_step).splitlines()
start = next(i for i, line in enumerate(source) if "# 1. scatter" in line)
gather_at = next(i for i, line in enumerate(source) if "# 4. gather" in line)
shown = ["\n".join(source[start : start + 4]), "\n".join(source[gather_at : gather_at + 2])]
print("\n".join(shown))

# %% [markdown]
# The faithful `minidp.dp.scatter` / `gather` (sections 1-4) add: any structure of
# arguments (tuples, lists, dicts, namedtuples, kwargs — rebuilt per device, non-tensors
# repeated by reference), a chosen `dim`, the 0-dim-outputs rule with its warning, and
# clear errors for an empty batch, a 0-dim input, or outputs whose shapes or keys do not
# match. On a plain batch tensor they cut and join exactly like the two lines above.

# %% [markdown]
# ## 6. Check against torch's own scatter/gather code
# torch's `scatter`/`scatter_kwargs`/`gather` walk the containers in Python and call the
# autograd functions `Scatter`/`Gather` for tensors, which on CUDA call
# `comm.scatter` (= `tensor.chunk`) and `comm.gather` (= `torch.cat`). We run torch's
# container code with those two leaves swapped for their CPU meaning and compare.


# %%
class ChunkLeaf:  # torch's Scatter.apply(target_gpus, chunk_sizes, dim, tensor) on CPU
    apply = staticmethod(lambda devices, sizes, dim, t: t.chunk(len(devices), dim))


class CatLeaf:  # torch's Gather.apply(target_device, dim, *tensors) on CPU
    @staticmethod
    def apply(device, dim, *ts):
        if dim == 0 and all(t.dim() == 0 for t in ts):
            ts = [t.view(1) for t in ts]  # torch warns and unsqueezes, like minidp
        return torch.cat(ts, dim)


def same_structure(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_structure(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_structure(p, q) for p, q in zip(a, b))
    # == not `is`: a notebook compiles each cell apart, so equal literals are not one object
    return a == b


with mock.patch.multiple(torch_sg, Scatter=ChunkLeaf, Gather=CatLeaf):
    theirs_sc = torch_sg.scatter_kwargs(
        (batch, "mode=train"), {"mask": mask, "scale": 0.5}, [0, 1, 2, 3]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs_g = torch_sg.gather([c.detach() @ w.detach() for c in chunks], "cpu")
        theirs_s = torch_sg.gather([c.sum() for c in scatter(x, DEVICES)], "cpu")

for batch, got in sizes.items():
    kit.check_true(
        f"batch {batch}: chunk sizes = Tensor.chunk's {got}",
        got == [len(c) for c in torch.arange(batch).chunk(4)],
    )
kit.check_true(
    "scatter_kwargs: same per-device structures, tensors and objects as torch's code",
    same_structure(tuple(args), tuple(theirs_sc[0])) and same_structure(kwargs, theirs_sc[1]),
)
kit.check("gather vs torch's gather", out.detach(), theirs_g)
kit.check("gather of 4 scalars vs torch's (a 4-vector)", losses, theirs_s)
d_out = out.grad
kit.check(
    "gather's backward: device i's gradient == rows of d loss/d out it produced",
    [o.grad for o in outs],
    list(d_out.split([len(c) for c in chunks])),
)
kit.check_true(
    "the lines shown in section 5 are minidp.textbook.dp's own source, not a copy",
    all(block in inspect.getsource(textbook) for block in shown) and "inputs.chunk(" in shown[0],
)
kit.done()

# %% [markdown]
# ## Your turn
# Write them yourself; the checker compares with torch's own scatter/gather code:
# `python -m minidp exercise check scatter` and `python -m minidp exercise check gather`
# (stubs in `lessons/exercises/`).

# %%
print("Exercises: python -m minidp exercise check scatter | gather")
