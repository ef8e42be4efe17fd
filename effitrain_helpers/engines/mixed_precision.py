"""Mixed precision across ranks: FSDP with a compute dtype, and DDP's gradients sent in bfloat16 (lesson 7.1).

The two mechanisms lesson 7.1 has the learner write, as the workbook's reference:

- :func:`shard_in_precision`: ``fully_shard`` with a ``MixedPrecisionPolicy`` on each block, then on the root.
  The sharded parameters stay in their own dtype (float32: the *master weights* the optimizer updates); before
  a group's forward FSDP casts its shard to ``param_dtype`` and all-gathers that (half the bytes for bfloat16),
  computes in it, and casts the gradients to ``reduce_dtype`` before the reduce-scatter
  (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``: ``foreach_all_gather``, ``foreach_reduce``).
  With ``reduce_dtype=None`` the reduction runs in ``param_dtype``.
- :func:`bf16_compress`: DDP's ``bf16_compress_hook``
  (``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``) called from a hook of another name.
  ``DistributedDataParallel.register_comm_hook`` refuses a hook *named* ``bf16_compress_hook`` unless CUDA with
  NCCL 2.10+ (or XPU with XCCL) is there (``_check_comm_hook`` in ``torch/nn/parallel/distributed.py``, torch
  2.13), although gloo all-reduces bfloat16 tensors on a CPU: the same function under this name runs there.
"""

from __future__ import annotations

BF16_REFUSED = "bf16_compress_hook"  # the name DDP's _check_comm_hook refuses without CUDA and NCCL


def shard_in_precision(model, policy):
    """Shard ``model`` with ``fully_shard(..., mp_policy=policy)``: each block of ``model.blocks`` first (one
    group each, gathered only while it runs), then the root (the embedding and the head, and the cast of the
    model's inputs). Returns ``model``, sharded in place."""
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def bf16_compress(state, bucket):
    """A DDP communication hook: each gradient bucket cast to bfloat16, divided by the world size, all-reduced
    and cast back into the float32 bucket: torch's own ``bf16_compress_hook``, under a name DDP accepts on a
    CPU (see the module's docstring)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

    return bf16_compress_hook(state, bucket)
