"""How many bytes does autograd keep for the backward pass? (lessons 3.1, 3.2; ``effitrain efficiency``)

Every tensor an operation saves for backward passes through ``torch.autograd.graph.saved_tensors_hooks``.
:class:`SavedTensors` counts them during a forward pass, each *storage* once (a tensor saved by two operations,
or two views of one buffer, occupy memory once), and splits the total into

- ``parameter_bytes``: the model's own weights, saved by reference (they exist anyway, batch or not);
- ``activation_bytes``: everything else, the memory that grows with the batch and the sequence length.

With activation checkpointing, a checkpointed layer keeps only its *inputs* (to recompute its activations
during backward); everything saved inside it is dropped. Pass ``model`` and the part of ``activation_bytes``
that is such layer inputs is also reported as ``recompute_input_bytes``, and the bytes saved *inside* those
layers as ``inside_layer_bytes`` (what checkpointing would drop). ``saved`` lists the activations one by one, in the
order they were saved: ``(shape, dtype, bytes)`` (lesson 8.2 traces each to a term of its formula).

This is an exact count of what backward will need, independent of the allocator, the device and other
processes, unlike process RSS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from effitrain_helpers.core.language import tr


@dataclass
class SavedTensors:
    """Context manager: counts the bytes of tensors saved for backward inside its ``with`` block.

    ``parameters``: the tensors to count apart as ``parameter_bytes`` (usually ``model.parameters()``).
    """

    parameters: Iterable[Any] = ()
    model: Any = None
    activation_bytes: int = 0
    recompute_input_bytes: int = 0
    inside_layer_bytes: int = 0
    _depth: int = 0
    parameter_bytes: int = 0
    count: int = 0
    saved: list = field(default_factory=list)
    _seen: set = field(default_factory=set)
    _hooks: Any = None
    _handles: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self._parameter_storages = {p.untyped_storage().data_ptr() for p in self.parameters}

    @property
    def total_bytes(self) -> int:
        return self.activation_bytes + self.parameter_bytes

    def _pack(self, tensor):
        self._count(tensor)
        return tensor

    def _count(self, tensor, recompute: bool = False) -> None:
        storage = tensor.untyped_storage()
        key = (storage.device.type, storage.data_ptr())
        if key in self._seen:
            return
        self._seen.add(key)
        self.count += 1
        if storage.data_ptr() in self._parameter_storages:
            self.parameter_bytes += storage.nbytes()
        else:
            self.activation_bytes += storage.nbytes()
            self.saved.append((tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), storage.nbytes()))
            self.recompute_input_bytes += storage.nbytes() if recompute else 0
            self.inside_layer_bytes += storage.nbytes() if self._depth and not recompute else 0

    def _enter_layer(self, module, args, kwargs) -> None:
        self._checkpoint_inputs(module, args, kwargs)
        self._depth += 1

    def _leave_layer(self, module, args, output) -> None:
        self._depth -= 1

    def _checkpoint_inputs(self, module, args, kwargs) -> None:
        import torch

        if getattr(module, "gradient_checkpointing", False) and module.training and torch.is_grad_enabled():
            for value in (*args, *kwargs.values()):
                if isinstance(value, torch.Tensor):
                    self._count(value, recompute=True)

    def __enter__(self) -> "SavedTensors":
        import torch

        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)
        self._hooks.__enter__()
        if self.model is not None:
            layers = checkpointable_layers(self.model)
            self._handles = [m.register_forward_pre_hook(self._enter_layer, with_kwargs=True) for m in layers]
            self._handles += [m.register_forward_hook(self._leave_layer) for m in layers]
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        for handle in self._handles:
            handle.remove()


def checkpointable_layers(model) -> list:
    """The model's layers that activation checkpointing wraps (transformers' ``GradientCheckpointingLayer``)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def saved_bytes(model, batch: dict, forward: Callable | None = None) -> SavedTensors:
    """Run ``model(**batch).loss`` (or ``forward(model, batch)``) in training mode and return the
    :class:`SavedTensors` count of what autograd kept for backward. The graph is freed afterwards."""
    if not isinstance(batch, dict):
        raise TypeError(tr("batch must be a dict of tensors (as a DataLoader gives); got {kind}.",
                           kind=type(batch).__name__))
    model.train()
    with SavedTensors(model.parameters(), model) as counter:
        loss = forward(model, batch) if forward else model(**batch).loss
    del loss
    return counter
