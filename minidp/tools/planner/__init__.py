"""The memory planner: bytes per GPU for DDP, ZeRO-1/2 and FSDP, measured and planned.

* ``plan.py`` / ``plan_cli.py`` — the ZeRO paper's formulas for a real model
  (``python -m minidp memory --model qwen2.5-14b --gpus 2``);
* ``activations.py`` — activation bytes per layer (Korthikanti et al.), GQA and logits;
* ``units.py`` — what FSDP gathers while a step runs (root, layers, gradients, copies);
* ``memory.py`` — the bytes a rank really holds, read from the tensors, per stage;
* ``stages.py`` — one step of each stage, measured (memory and bytes sent);
* ``dp_memory.py`` — DataParallel's bytes per device.

Test: ``pytest tests/test_memory.py tests/test_activations.py tests/test_dp_memory.py``
"""
