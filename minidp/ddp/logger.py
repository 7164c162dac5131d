"""What DDP reports about itself: torch's ``ddp._get_ddp_logging_data()``, field for field.

    ddp._set_ddp_runtime_logging_sample_rate(2)   # after iteration 10: every 2nd one
    ...train...
    print(ddp._get_ddp_logging_data())            # the config, the buckets, the timings

Three kinds of fields, as torch's ``Logger``: the construction's (arguments, parameter
sizes and dtypes, initial bucket sizes, backend and environment variables); the buckets
after the one rebuild and the last backward's gradient-ready order; and the timings of one
iteration in nanoseconds — forward (its start to the start of backward), backward compute
(to the last gradient), backward communication (first bucket launched to last bucket
done) and their overlap (first launch to last gradient), each with a running average.

When: a grad-enabled synchronized forward records the *previous* iteration's numbers if
it is sampled (iterations 1-10, then every ``sample_rate``-th; 100 by default), so
``iteration`` is the last sampled one. Times are host clocks (``time.time_ns()``), on a
GPU too (torch times a GPU module with CUDA events). Errors DDP raises are kept in
``error`` (``has_error=1``).

Test: ``pytest tests/test_ddp_save.py``; torch's own check of these fields,
``distributed_test.py``'s ``test_ddp_logging_data_cpu``, passes on minidp's DDP.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from minidp.nn import SyncBatchNorm

DEFAULT_SAMPLE_RATE = 100  # torch's kDDPRuntimeLoggingSampleRate
_ALWAYS_SAMPLED = 10  # the first iterations are always timed
_TIMINGS = ("forward_compute", "backward_compute", "backward_comm", "backward_compute_comm_overlap")
_ENV = ("master_port", "master_addr", "torch_distributed_debug", "cuda_visible_devices")
_GLOO_ENV = ("gloo_socket_ifname", "gloo_device_transport")
_C10_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half"}
_C10_NAMES[torch.bfloat16] = "c10::BFloat16"


def _env(name: str) -> str:
    return os.environ.get(name.upper(), "N/A")


def _joined(values, sep: str = ", ") -> str:
    return sep.join(str(v) for v in values)


class Logger:
    """The logging data of one DDP; the reducer stamps the events, ``ddp`` the iterations."""

    def __init__(self, ddp, params: list[torch.Tensor], bucket_bytes: list[int]) -> None:
        group = ddp.process_group
        backend = str(dist.get_backend(group)) if isinstance(group, dist.ProcessGroup) else "minidp"
        dtypes = list(dict.fromkeys(_C10_NAMES.get(p.dtype, str(p.dtype)) for p in params))
        self.data: dict = {
            "module_name": type(ddp.module).__name__,
            "device_ids": _joined(ddp.device_ids or []),
            "output_device": -1 if ddp.output_device is None else ddp.output_device,
            "broadcast_buffers": int(ddp.forward_sync_buffers),
            "bucket_cap_bytes": ddp.bucket_bytes_cap,
            "find_unused_parameters": int(ddp.find_unused_parameters),
            "gradient_as_bucket_view": int(ddp.gradient_as_bucket_view),
            "has_sync_bn": int(_has_sync_bn(ddp.module)),
            "is_multi_device_module": 0,
            "backend_name": backend,
            "dtypes": _joined(dtypes),
            "total_parameter_size_bytes": sum(p.numel() * p.element_size() for p in params),
            "num_parameter_tensors": len(params),
            "bucket_sizes": _joined(bucket_bytes),
            "rank": group.rank(),
            "world_size": group.size(),
            "iteration": 0,
            **{name: _env(name) for name in _ENV},
        }
        if backend == "gloo":  # (torch's NCCL fields are left out: not checked here)
            self.data.update({name: _env(name) for name in _GLOO_ENV}, gloo_num_threads=2)
        self.sample_rate = DEFAULT_SAMPLE_RATE
        self.iterations = 0  # grad-enabled synchronized forwards so far
        self.recorded = 0  # of them, how many were timed
        self.events: dict[str, int] = {}  # this iteration's host times (ns)

    def stamp(self, event: str, first_only: bool = False) -> None:
        """Record ``event`` now (if this iteration is timed; ``first_only``: keep the first)."""
        if self.sampled() and not (first_only and event in self.events):
            self.events[event] = time.time_ns()

    def sampled(self) -> bool:
        n = self.iterations
        return n > 0 and (n <= _ALWAYS_SAMPLED or n % self.sample_rate == 0)

    def next_iteration(self, reducer) -> None:
        """At a grad-enabled synchronized forward: log the last iteration, start the next."""
        if self.sampled():
            self._record(reducer)
        self.iterations += 1
        self.events = {}
        self.stamp("forward_compute_start")

    def _record(self, reducer) -> None:
        self.recorded += 1
        d = self.data
        d["iteration"] = self.iterations
        d["num_buckets_reduced"] = len(reducer.buckets)
        d["unused_parameter_size"] = sum(
            reducer.params[i].numel() * reducer.params[i].element_size() for i in reducer.unused
        )
        if reducer.has_rebuilt and not d.get("has_rebuilt_buckets"):  # once: they never change
            d["has_rebuilt_buckets"] = 1
            d["rebuilt_bucket_sizes"] = _joined(reducer.bucket_bytes())
            d["rebuilt_per_bucket_param_indices"] = _joined(
                _joined(b, " ") for b in reducer.assignment
            )
        if reducer.last_ready_order:
            d["prev_iteration_grad_ready_order_indices"] = _joined(reducer.last_ready_order)
        e = self.events
        spans = {  # (start, end) of each timing
            "forward_compute": ("forward_compute_start", "backward_compute_start"),
            "backward_compute": ("backward_compute_start", "backward_compute_end"),
            "backward_comm": ("backward_comm_start", "backward_comm_end"),
            "backward_compute_comm_overlap": ("backward_comm_start", "backward_compute_end"),
        }
        for name in _TIMINGS:
            d[f"{name}_time"] = 0
        for name, (start, end) in spans.items():
            if start in e and end in e:
                took = max(e[end] - e[start], 0)
                d[f"{name}_time"] = took
                avg = d.get(f"avg_{name}_time", 0)
                d[f"avg_{name}_time"] = (took + avg * (self.recorded - 1)) // self.recorded
        for event in ("forward_compute_start", "backward_compute_start", "backward_comm_start"):
            d[event.replace("_start", "_time_start")] = e.get(event, 0)
        for event in ("backward_compute_end", "backward_comm_end"):
            d[event.replace("_end", "_time_end")] = e.get(event, 0)

    def set_sample_rate(self, sample_rate: int) -> None:
        if sample_rate < 1:
            raise self.error(
                ValueError, "DDP runtime logging sample rate should be equal or greater than 1"
            )
        self.sample_rate = sample_rate

    def error(self, kind: type, message: str) -> Exception:
        """The exception to raise, kept in the logging data first (torch's ``_log_and_throw``)."""
        self.data["has_error"] = 1
        self.data["error"] = f"{kind}: {message}"
        return kind(message)


def _has_sync_bn(module: torch.nn.Module) -> bool:
    return any(isinstance(m, (torch.nn.SyncBatchNorm, SyncBatchNorm)) for m in module.modules())
