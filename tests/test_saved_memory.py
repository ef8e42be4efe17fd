"""The saved-for-backward byte counter on modules whose answer is known by hand."""

import pytest
import torch

from effitrain_helpers.training.workload import lesson_batches, lesson_model
from effitrain_helpers.measure.saved_memory import SavedTensors, saved_bytes


def test_a_linear_layer_keeps_its_input_and_weight_only_when_the_input_needs_a_gradient():
    layer = torch.nn.Linear(8, 4)
    with SavedTensors(layer.parameters()) as counted:
        layer(torch.randn(5, 8)).sum()
    assert (counted.activation_bytes, counted.parameter_bytes) == (5 * 8 * 4, 0)  # weight grad needs x only
    with SavedTensors(layer.parameters()) as counted:
        layer(torch.randn(5, 8, requires_grad=True)).sum()
    assert (counted.activation_bytes, counted.parameter_bytes) == (5 * 8 * 4, 4 * 8 * 4)  # input grad needs W


def test_each_buffer_is_counted_once():
    x = torch.randn(6, 8, requires_grad=True)
    with SavedTensors() as counted:
        (x * x).sum()  # x saved twice
        (x[:2] * x[2:4]).sum()  # two views of x's buffer
    assert (counted.activation_bytes, counted.count) == (6 * 8 * 4, 1)


def test_activations_scale_with_the_batch_and_weights_do_not():
    model = lesson_model()
    small, large = (saved_bytes(model, lesson_batches(1, b, 16)[0]) for b in (2, 8))
    assert small.parameter_bytes == large.parameter_bytes > 0
    assert large.activation_bytes / small.activation_bytes == pytest.approx(4, rel=0.02)


def test_checkpointing_keeps_only_layer_inputs_inside_the_layers():
    model = lesson_model()
    batch = lesson_batches(1, 4, 16)[0]
    plain = saved_bytes(model, batch)
    model.activation_checkpointing_enable()
    checkpointed = saved_bytes(model, batch)
    layer_inputs = model.config.n_layers * 4 * 16 * model.config.dim * 4
    assert plain.recompute_input_bytes == 0 and plain.inside_layer_bytes > 0
    assert checkpointed.inside_layer_bytes == 0 and checkpointed.recompute_input_bytes >= layer_inputs
    expected = plain.activation_bytes - plain.inside_layer_bytes + layer_inputs
    assert checkpointed.activation_bytes == pytest.approx(expected, rel=0.05)


def test_hooks_are_removed_afterwards():
    model = lesson_model()
    saved_bytes(model, lesson_batches(1, 2, 16)[0])
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


def test_a_batch_that_is_not_a_dict_is_named():
    with pytest.raises(TypeError, match="dict of tensors"):
        saved_bytes(lesson_model(), [torch.zeros(2, 3)])
