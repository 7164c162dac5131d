"""The memory planner: bytes per GPU for DDP, ZeRO-1/2 and FSDP, planned (``plan.py``,
``activations.py``, ``units.py``; the command ``plan_cli.py``: ``python -m minidp memory``)
and measured (``memory.py``, ``stages.py``; DataParallel's: ``dp_memory.py``).

Test: ``pytest tests/test_memory.py tests/test_activations.py tests/test_dp_memory.py``
"""
