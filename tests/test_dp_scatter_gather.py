"""scatter / scatter_kwargs / gather against ``torch.nn.parallel.scatter_gather``.

Run: ``pytest tests/test_dp_scatter_gather.py``

torch's functions walk the containers in Python and hand each tensor to the autograd
Functions ``Scatter`` / ``Gather``, which need CUDA. On CPU we run torch's *real* container
code with those two swapped for their documented CPU meaning (read from
``torch/nn/parallel/_functions.py`` and ``comm.py``): Scatter = ``tensor.chunk(n, dim)``,
Gather = ``torch.cat`` after turning all-0-dim inputs into 1-element vectors with a
warning. Hypothesis then compares structures, types, identities and bits — except where
torch silently drops rows (tensors that split into different chunk counts): there the
test checks that torch did drop them and that ours refuses.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict, namedtuple
from unittest import mock

import pytest
import torch
import torch.nn.parallel.scatter_gather as torch_sg
from hypothesis import given, settings
from hypothesis import strategies as st

import minidp
from minidp.dp import gather, scatter, scatter_kwargs
from minidp.dp.devices import as_device, as_devices

Point = namedtuple("Point", ["x", "y"])


class CpuScatter:
    """torch's Scatter with chunk_sizes=None: ``comm.scatter`` -> ``tensor.chunk(n, dim)``."""

    @staticmethod
    def apply(target_gpus, chunk_sizes, dim, tensor):
        assert chunk_sizes is None
        return tuple(tensor.chunk(len(target_gpus), dim))


class CpuGather:
    """torch's Gather: all 0-dim and dim 0 -> ``view(1)`` + warning; ``comm.gather`` = cat."""

    @staticmethod
    def apply(target_device, dim, *inputs):
        if all(t.dim() == 0 for t in inputs) and dim == 0:
            warnings.warn("torch: scalars unsqueezed", UserWarning, stacklevel=2)
            inputs = tuple(t.view(1) for t in inputs)
        return torch.cat(inputs, dim)


def torch_functions():
    """torch's scatter / scatter_kwargs / gather with the CUDA-only leaves swapped out."""
    return mock.patch.multiple(torch_sg, Scatter=CpuScatter, Gather=CpuGather)


def same(a, b) -> bool:
    """Same structure and types; tensors bit-equal; other leaves the *same object*."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and (a or b):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a is b or a == b


# ---- strategies: nested inputs whose tensors have a batch dim ------------------------

leaf_values = st.sampled_from([None, 3, "tag", 2.5, (), [], {}])


@st.composite
def batch_tensor(draw):
    rows, cols = draw(st.integers(1, 9)), draw(st.integers(1, 4))
    return torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols) + draw(
        st.integers(0, 100)
    )


def nested(leaves):
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, min_size=1, max_size=3),
            st.lists(inner, min_size=1, max_size=3).map(tuple),
            st.dictionaries(st.sampled_from("abc"), inner, min_size=1, max_size=3),
            st.dictionaries(st.sampled_from("abc"), inner, min_size=1, max_size=2).map(OrderedDict),
            st.tuples(inner, inner).map(lambda p: Point(*p)),
        ),
        max_leaves=6,
    )


inputs_strategy = nested(st.one_of(batch_tensor(), leaf_values))


@settings(max_examples=60, deadline=None)
@given(obj=inputs_strategy, n=st.integers(1, 5), dim=st.sampled_from([0, 1, -1]))
def test_scatter_matches_torch(obj, n, dim):
    devices = ["cpu"] * n
    with torch_functions():
        want = torch_sg.scatter(obj, devices, dim)
    if torch_drops_rows(obj, n, dim, want):
        with pytest.raises(ValueError, match="split into different numbers of chunks"):
            scatter(obj, devices, dim)
        return
    got = scatter(obj, devices, dim)
    assert same(got, want)


def torch_drops_rows(obj, n: int, dim: int, torch_result) -> bool:
    """True when torch's scatter of ``obj`` lost rows: some tensor made more chunks than
    torch's result has replicas (asserted here, so the claim is checked, not assumed)."""
    counts = [len(t.chunk(n, dim)) for t in _leaves(obj) if isinstance(t, torch.Tensor)]
    if len(set(counts)) <= 1:
        return False
    assert len(torch_result) == min(counts) < max(counts)  # torch kept the shortest
    return True


@settings(max_examples=40, deadline=None)
@given(
    args=st.lists(st.one_of(batch_tensor(), leaf_values), max_size=3).map(tuple),
    kwargs=st.dictionaries(st.sampled_from("pqr"), st.one_of(batch_tensor(), leaf_values)),
    n=st.integers(1, 5),
)
def test_scatter_kwargs_matches_torch(args, kwargs, n):
    """Ours = torch's scatter of the ``(args, kwargs)`` pair, always; and = torch's own
    scatter_kwargs whenever its padding is sound: one side empty, or both sides split into
    the same count. (Otherwise torch pads by the *unscattered* length: with a batch
    smaller than the device count and a non-tensor kwarg it hands replicas no input.)"""
    devices = ["cpu"] * n
    with torch_functions():
        want_in, want_kw = torch_sg.scatter_kwargs(args, kwargs, devices, 0)
        pairs = torch_sg.scatter((args, kwargs), devices, 0) if args or kwargs else []
        separate = [len(torch_sg.scatter(side, devices, 0)) for side in (args, kwargs) if side]
    if torch_drops_rows((args, kwargs), n, 0, pairs):
        with pytest.raises(ValueError, match="split into different numbers of chunks"):
            scatter_kwargs(args, kwargs, devices, 0)
        return
    got_in, got_kw = scatter_kwargs(args, kwargs, devices, 0)
    assert len(got_in) == len(got_kw)  # one (args, kwargs) pair per replica
    assert same(got_in, tuple(a for a, _ in pairs))
    assert same(got_kw, tuple(k for _, k in pairs))
    if len(set(separate)) <= 1:
        assert same(got_in, want_in) and same(got_kw, want_kw)


@st.composite
def gather_case(draw):
    """``n`` replica outputs of one structure; tensors differ in size only along ``dim``."""
    n = draw(st.integers(1, 5))
    dim = draw(st.sampled_from([0, 1, -1]))
    template = draw(nested(st.sampled_from(["tensor", "scalar", "none"])))
    counter = iter(range(10_000))

    def build(node, replica):
        if node == "tensor":
            size = [2, 3]
            size[dim] = 1 + (replica + next(counter)) % 3
            return torch.randn(size)
        if node == "scalar":
            return torch.tensor(float(replica + next(counter)))
        if node == "none":
            return None
        if isinstance(node, dict):
            return type(node)((k, build(v, replica)) for k, v in node.items())
        members = [build(v, replica) for v in node]
        return type(node)(*members) if isinstance(node, Point) else type(node)(members)

    return [build(template, r) for r in range(n)], dim


def only_dim0_scalars(outputs, dim):
    """torch's Gather handles 0-dim tensors only along dim 0 (else cat fails)."""
    has_scalar = any(isinstance(t, torch.Tensor) and t.dim() == 0 for t in _leaves(outputs[0]))
    return dim == 0 or not has_scalar


def _leaves(obj):
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _leaves(v)]
    if isinstance(obj, list | tuple):
        return [x for v in obj for x in _leaves(v)]
    return [obj]


@settings(max_examples=60, deadline=None)
@given(case=gather_case())
def test_gather_matches_torch(case):
    outputs, dim = case
    if not only_dim0_scalars(outputs, dim):
        with pytest.raises(ValueError, match="cannot gather"):
            gather(outputs, "cpu", dim)
        return
    with warnings.catch_warnings(record=True) as theirs, torch_functions():
        warnings.simplefilter("always")
        want = torch_sg.gather(outputs, "cpu", dim)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        got = gather(outputs, "cpu", dim)
    assert same(got, want)
    assert len(ours) == len(theirs)  # one warning per gathered 0-dim group, like torch


@pytest.mark.parametrize(
    ("batch", "sizes"), [(5, [2, 2, 1]), (7, [2, 2, 2, 1]), (10, [3, 3, 3, 1]), (3, [1, 1, 1])]
)
def test_chunk_sizes_on_four_devices(batch, sizes):
    chunks = scatter(torch.zeros(batch, 2), ["cpu"] * 4)
    assert isinstance(chunks, tuple) and [c.shape[0] for c in chunks] == sizes


def test_scatter_then_gather_is_identity_with_gradient():
    x = torch.randn(7, 3, requires_grad=True)
    y = gather(list(scatter(x, ["cpu"] * 3)), "cpu")
    assert torch.equal(y, x)
    (y * torch.arange(7.0)[:, None]).sum().backward()
    assert torch.equal(x.grad, torch.arange(7.0)[:, None].expand(7, 3))


def test_scalars_gather_along_dim_0_only_like_torch():
    """torch turns 0-dim outputs into vectors only for dim 0; along -1, cat refuses them."""
    parts = [torch.tensor(1.0), torch.tensor(2.0)]
    with torch_functions(), pytest.raises(RuntimeError, match="zero-dimensional tensor"):
        torch_sg.gather(parts, "cpu", -1)
    with pytest.raises(
        ValueError, match=r"cannot gather outputs of shapes \[\(\), \(\)\] along dim=-1"
    ):
        gather(parts, "cpu", -1)


def test_data_parallel_refuses_inputs_torch_would_drop_rows_of():
    """6 rows and 2 rows on 3 devices: torch runs 2 replicas and loses rows 4-5 of x."""
    x, y = torch.arange(12.0).view(6, 2), torch.ones(2, 2)
    with torch_functions():
        (torch_x0, _), (torch_x1, _) = torch_sg.scatter_kwargs((x, y), {}, ["cpu"] * 3, 0)[0]
    assert torch.equal(torch.cat([torch_x0, torch_x1]), x[:4])  # torch: rows 4-5 are gone
    dp = minidp.DataParallel(torch.nn.Bilinear(2, 2, 1), device_ids=["cpu"] * 3)
    with pytest.raises(
        ValueError,
        match=r"^DataParallel: input tensors split into different numbers of chunks on 3 "
        r"devices \(shape -> chunks along dim 0: \(6, 2\) -> 3, \(2, 2\) -> 2\); only 2 "
        r"replicas could run and the input of shape \(6, 2\) would lose its last 2 of 6 rows",
    ):
        dp(x, y)
    assert dp(x, torch.ones(6, 2)).shape == (6, 1)  # equal batch sizes: every row is used


def test_gather_is_differentiable_for_scalars():
    parts = [torch.tensor(float(i), requires_grad=True) for i in range(3)]
    with pytest.warns(UserWarning, match="vector with one entry per replica"):
        out = gather(parts, "cpu")
    (out * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert [p.grad.item() for p in parts] == [1.0, 2.0, 3.0]


# ---- errors ------------------------------------------------------------------------


def test_error_scatter_zero_dim_tensor():
    with pytest.raises(ValueError, match=r"cannot split a 0-dim tensor \(value 2.0\) along dim 0"):
        scatter((torch.tensor(2.0),), ["cpu"] * 2)


def test_error_scatter_dim_out_of_range():
    with pytest.raises(ValueError, match=r"shape \(4,\) along dim=1; expected dim in -1..0"):
        scatter(torch.zeros(4), ["cpu"] * 2, dim=1)


def test_error_scatter_empty_batch():
    with pytest.raises(ValueError, match=r"empty batch \(input shape \(2, 0\), size 0 along dim 1"):
        scatter_kwargs((torch.zeros(2, 0),), {}, ["cpu"] * 2, dim=1)


def test_error_gather_shapes_differ_outside_dim():
    outs = [torch.zeros(2, 3), torch.zeros(2, 4)]
    with pytest.raises(ValueError, match=r"expected equal sizes in every other dim but replica 1"):
        gather(outs, "cpu")


def test_error_gather_dims_differ():
    with pytest.raises(ValueError, match=r"shapes \[\(2, 3\), \(2,\)\] along dim=0; expected"):
        gather([torch.zeros(2, 3), torch.zeros(2)], "cpu")


def test_error_gather_lengths_differ():
    with pytest.raises(ValueError, match=r"tuples of lengths \[2, 1\]; expected every replica"):
        gather([(torch.zeros(1), torch.zeros(1)), (torch.zeros(1),)], "cpu")


def test_error_gather_tensor_and_not_tensor():
    with pytest.raises(ValueError, match=r"types \['Tensor', 'NoneType'\]; expected a tensor"):
        gather([torch.zeros(1), None], "cpu")


def test_error_gather_strings():
    with pytest.raises(ValueError, match=r"type str \(replica 0 returned 'a'\); expected tensors"):
        gather(["a", "b"], "cpu")


def test_error_gather_dict_same_count_other_keys():
    # torch only checks the key count and would fail later with a bare KeyError
    with pytest.raises(ValueError, match=r"keys \['a', 'b'\] but replica 1 returned \['a', 'c'\]"):
        gather([{"a": torch.zeros(1), "b": None}, {"a": torch.zeros(1), "c": None}], "cpu")


def test_devices_normalised():
    assert as_device("cpu:3") == torch.device("cpu")
    assert as_devices(["cpu", torch.device("cpu")]) == [torch.device("cpu")] * 2
