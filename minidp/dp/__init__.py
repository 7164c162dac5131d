"""DataParallel from scratch: scatter, replicate, parallel_apply, gather — one file each.

Run it: ``python -m minidp demo dp --devices 4 --batch 8``
Test it: ``pytest tests/test_dp*.py``
Bench it: ``python -m minidp bench dp``

Read ``scatter``, ``replicate``, ``parallel_apply``, ``gather``, then ``data_parallel``,
which chains them. ``device_ids=["cpu"] * n`` simulates ``n`` devices with ``n`` threads.
"""

from minidp.dp.data_parallel import DataParallel
from minidp.dp.gather import gather
from minidp.dp.parallel_apply import parallel_apply
from minidp.dp.replicate import Broadcast, replicate
from minidp.dp.scatter import scatter, scatter_kwargs

__all__ = [
    "Broadcast",
    "DataParallel",
    "gather",
    "parallel_apply",
    "replicate",
    "scatter",
    "scatter_kwargs",
]
