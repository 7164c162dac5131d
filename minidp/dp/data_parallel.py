"""DataParallel: one process, one thread per device, the main device as parameter server.

Run it: ``python -m minidp demo dp --devices 4 --batch 8``
Test it: ``pytest tests/test_dp_data_parallel.py``

Every forward does the whole pipeline again::

    scatter_kwargs   batch (B, ...) -> chunks (ceil(B/n), ...) on device_ids[0..n-1]
    replicate        model on device_ids[0] -> one replica per used device (broadcast)
    parallel_apply   replica i runs on chunk i, one thread each
    gather           outputs -> one output on output_device (concatenated along dim)

and ``loss.backward()`` runs it backwards, summing the replicas' gradients into
``module``'s ``.grad`` on device_ids[0]. ``device_ids``: CUDA devices, or ``["cpu"] * n``
to simulate n; ``None``: every visible GPU (with none, the plain module, as torch's). The
book's version in one function: ``minidp/textbook/dp.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from minidp.dp.devices import DeviceLike, as_device, as_devices, gpu_count
from minidp.dp.gather import gather
from minidp.dp.parallel_apply import parallel_apply
from minidp.dp.replicate import check_on_device, replicate
from minidp.dp.scatter import scatter_kwargs


class DataParallel(nn.Module):
    """Split the batch across devices, run a replica of ``module`` on each, gather outputs.

    On 4 simulated devices::

        model = minidp.DataParallel(nn.Linear(8, 2), device_ids=["cpu"] * 4)
        out = model(torch.randn(10, 8))   # chunks of 3, 3, 3, 1 rows on 4 replicas
        out.sum().backward()               # grads summed into model.module.weight.grad
    """

    def __init__(
        self,
        module: nn.Module,
        device_ids: Sequence[DeviceLike] | None = None,
        output_device: DeviceLike | None = None,
        dim: int = 0,
    ) -> None:
        super().__init__()
        self.module = module  # registered as a submodule: state_dict keys get 'module.'
        self.dim = dim
        if device_ids is None:
            if gpu_count() == 0:
                # Nothing to parallelise over: forward is the plain module (as in torch).
                self.device_ids: list[torch.device] = []
                self.output_device = None
                self.src_device_obj = None
                return
            device_ids = list(range(gpu_count()))
        self.device_ids = as_devices(device_ids)
        self.src_device_obj = self.device_ids[0]  # holds the real parameters and .grad
        default_out = self.src_device_obj if output_device is None else output_device
        self.output_device = as_device(default_out)
        if len(self.device_ids) == 1:
            self.module.to(self.src_device_obj)  # one device: torch moves the model there

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """scatter -> replicate -> parallel_apply -> gather; the output is on output_device."""
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        check_on_device(self.module, self.src_device_obj)
        inputs, module_kwargs = self.scatter(inputs, kwargs, self.device_ids)
        if not inputs and not module_kwargs:
            # A model called with no arguments still runs once, on the main device.
            inputs, module_kwargs = ((),), ({},)
        if len(self.device_ids) == 1:
            return self.module(*inputs[0], **module_kwargs[0])
        # A batch smaller than the device count gives fewer chunks: use that many devices.
        used = self.device_ids[: len(inputs)]
        replicas = self.replicate(self.module, used)
        outputs = self.parallel_apply(replicas, inputs, module_kwargs)
        return self.gather(outputs, self.output_device)

    # The four steps as methods, with torch's names, so a subclass can override one.

    def scatter(
        self, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None, device_ids: Sequence[Any]
    ) -> tuple[tuple[Any, ...], tuple[dict[str, Any], ...]]:
        return scatter_kwargs(inputs, kwargs, device_ids, dim=self.dim)

    def replicate(self, module: nn.Module, device_ids: Sequence[Any]) -> list[nn.Module]:
        # Under no_grad there is no backward, so the copies need no autograd history.
        return replicate(module, device_ids, detach=not torch.is_grad_enabled())

    def parallel_apply(
        self, replicas: Sequence[nn.Module], inputs: Sequence[Any], kwargs: Sequence[dict]
    ) -> list[Any]:
        return parallel_apply(replicas, inputs, kwargs, self.device_ids[: len(replicas)])

    def gather(self, outputs: list[Any], output_device: DeviceLike) -> Any:
        return gather(outputs, output_device, dim=self.dim)

    def extra_repr(self) -> str:
        devices = [str(d) for d in self.device_ids] or "none (plain module)"
        return f"device_ids={devices}, output_device={self.output_device}, dim={self.dim}"
