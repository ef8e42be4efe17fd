"""How many bytes does each dimension of a device mesh carry? (lesson 7.2)

:class:`GroupTraffic` counts, in one process, every collective it sees by the process group it runs on, so a run
over a 2-D mesh reports the bytes of its data-parallel dimension apart from those of its tensor-parallel one. It
is a ``TorchDispatchMode``, as ``torch.distributed.tensor.debug.CommDebugMode`` is, because the two halves of a
2-D run talk through different doors: DTensor (tensor parallelism) through the *functional* collectives
(``torch.ops._c10d_functional.all_reduce(tensor, op, group_name)``), ``fully_shard`` through the in-place c10d
ops (``torch.ops.c10d._allgather_base_(output, input, group, ...)``). Both reach the dispatcher, where this mode
reads the group and the payload. :class:`~effitrain_helpers.measure.communication.CommunicationCounter` patches
``torch.distributed``'s Python functions instead and cannot see DTensor's.

The bytes of a collective are its payload, as in ``communication.py``: the tensor of an all-reduce, the gathered
output of an all-gather, the input of a reduce-scatter. CPU autograd runs backward in the thread that called
``backward()``, so a mode entered around forward and backward sees both.
"""

from __future__ import annotations

from collections import defaultdict

from torch.utils._python_dispatch import TorchDispatchMode


def _payload(name: str, args: tuple) -> tuple[str, int, object] | None:
    """(collective, payload bytes, group or group name) of one dispatched collective, None for anything else."""
    def size(tensors) -> int:
        tensors = tensors if isinstance(tensors, (list, tuple)) else [tensors]
        return sum(t.numel() * t.element_size() for t in tensors)

    functional = {"all_reduce": (0, 1, 2), "all_gather_into_tensor": (0, 1, 2),
                  "reduce_scatter_tensor": (0, 2, 3)}  # tensor, group size (or op), group name
    if name in functional:
        t, n, g = functional[name]
        scale = args[n] if name == "all_gather_into_tensor" else 1
        return name, size(args[t]) * scale, args[g]
    c10d = {"allreduce_": ("all_reduce", 0, 1), "_allgather_base_": ("all_gather_into_tensor", 0, 2),
            "_reduce_scatter_base_": ("reduce_scatter_tensor", 1, 2)}  # payload argument, group argument
    if name in c10d:
        label, t, g = c10d[name]
        return label, size(args[t]), args[g]
    return None


def group_ranks(group) -> tuple[int, ...]:
    """The global ranks of ``group`` (a ``ProcessGroup``, its name, or the script object the dispatcher passes)."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    if isinstance(group, str):
        group = _resolve_process_group(group)
    elif not isinstance(group, dist.ProcessGroup):
        group = dist.ProcessGroup.unbox(group)
    return tuple(dist.get_process_group_ranks(group))


class GroupTraffic(TorchDispatchMode):
    """Counts collectives by process group: ``with GroupTraffic({"dp": dp_group, "tp": tp_group}) as t:`` then
    ``t.bytes["tp"]`` (payload bytes on that group), ``t.calls["tp"]["all_reduce"]`` (calls by collective).
    Groups are told apart by their ranks (DTensor may send a mesh's traffic through an equal mesh's group, made
    earlier with the same ranks); a group of other ranks is counted under ``"other"``."""

    def __init__(self, groups: dict):
        super().__init__()
        self._labels = {group_ranks(g): label for label, g in groups.items()}
        self.bytes: dict[str, int] = defaultdict(int)
        self.calls: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace in ("c10d", "_c10d_functional"):
            seen = _payload(func._opname, args)
            if seen is not None:
                collective, nbytes, group = seen
                label = self._labels.get(group_ranks(group), "other")
                self.bytes[label] += nbytes
                self.calls[label][collective] += 1
        return out

    def summary(self) -> dict:
        """``{label: {"bytes": ..., "calls": {collective: n}}}``, plain dicts (what a rank sends back)."""
        return {label: {"bytes": self.bytes[label], "calls": dict(self.calls[label])}
                for label in sorted(set(self.bytes) | set(self.calls))}
