"""Optimizer state accounting (chapter 4): theory from shapes, measured from optimizer.state, on modules with
known shapes; the comparison's input checks; the path where bitsandbytes cannot be imported."""

import math
import sys

import pytest
import torch

from effitrain_helpers.measure import optimizer_memory as om
from effitrain_helpers.training.optimizer_compare import (bitsandbytes_status, check_betas, check_learning_rate,
                                                 learning_rates, make_optimizer)


def _stepped(name, module, **kwargs):
    torch.manual_seed(0)
    optimizer = make_optimizer(name, module.parameters(), lr=1e-3, **kwargs)
    x = torch.randn(4, module.in_features if hasattr(module, "in_features") else 64)
    module(x).pow(2).sum().backward()
    optimizer.step()
    return optimizer


def test_adamw_keeps_two_float32_moments_and_a_step_per_tensor():
    layer = torch.nn.Linear(64, 128)  # weight 128x64 = 8192, bias 128
    n = 64 * 128 + 128
    assert om.adamw_state_bytes(layer) == 8 * n + 2 * 4
    optimizer = _stepped("adamw", layer)
    assert om.state_bytes(optimizer) == 8 * n + 2 * 4
    assert om.state_bytes_by_key(optimizer) == {"exp_avg": 4 * n, "exp_avg_sq": 4 * n, "step": 8}
    assert om.state_dtypes(optimizer)["exp_avg"] == "float32"


def test_state_is_empty_before_the_first_step():
    layer = torch.nn.Linear(8, 8)
    assert om.state_bytes(torch.optim.AdamW(layer.parameters())) == 0


def test_adafactor_factors_matrices_and_keeps_vectors_whole():
    assert om.adafactor_second_moment_numel((128, 64)) == 128 + 64
    assert om.adafactor_second_moment_numel((128,)) == 128
    assert om.adafactor_second_moment_numel((4, 8, 16)) == 4 * 8 + 4 * 16  # rows (4, 8), columns (4, 16)
    layer = torch.nn.Linear(64, 128)
    want = 4 * (128 + 64) + 4 * 128 + 2 * 4  # row + col for the weight, full for the bias, one RMS each
    assert om.adafactor_state_bytes(layer) == want
    optimizer = _stepped("adafactor", layer)
    assert om.state_bytes(optimizer) == want
    assert set(om.state_bytes_by_key(optimizer)) == {"exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq", "RMS"}


def test_adafactor_with_beta1_adds_a_full_first_moment():
    from transformers import Adafactor

    layer = torch.nn.Linear(64, 128)
    optimizer = Adafactor(layer.parameters(), lr=1e-3, beta1=0.9, relative_step=False, scale_parameter=False)
    layer(torch.randn(2, 64)).sum().backward()
    optimizer.step()
    assert om.state_bytes(optimizer) == om.adafactor_state_bytes(layer, beta1=0.9)
    assert om.adafactor_state_bytes(layer, beta1=0.9) - om.adafactor_state_bytes(layer) == 4 * (64 * 128 + 128)


@pytest.mark.parametrize("numel, want", [
    (4095, 8 * 4095),  # under min_8bit_size: two float32 states
    (4096, 2 * 4096 + 8 * 16),  # 8-bit: 2 bytes per value + 2 float32 absmax per block of 256
    (5000, 2 * 5000 + 8 * 20),  # 5000 / 256 = 19.5: 20 blocks, the last one partial
])
def test_8bit_bytes_of_one_tensor(numel, want):
    assert om.adamw8bit_tensor_bytes(numel) == want


def test_8bit_measured_equals_theory_with_small_tensors_in_32_bit():
    pytest.importorskip("bitsandbytes")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 10))  # 8192, 128, 1280, 10
    optimizer = make_optimizer("adamw8bit", model.parameters(), lr=1e-3)
    model(torch.randn(4, 64)).sum().backward()
    optimizer.step()
    want = (2 * 8192 + 8 * 32) + 8 * (128 + 1280 + 10) + om.BNB_QMAP_BYTES
    assert om.adamw8bit_state_bytes(model) == want
    assert om.state_bytes(optimizer) == want  # the shared maps counted once, not once per tensor
    rows = {r["name"]: r for r in om.state_table(optimizer, model)}
    assert rows["0.weight"]["param_dtype"] == "float32" and rows["0.weight"]["state"]["state1"] == "uint8"
    assert rows["1.weight"]["state"]["state1"] == "float32"  # 1280 values < 4096: 32-bit state


def test_8bit_keep_32bit_matches_trainer_embedding_override():
    emb = torch.nn.Embedding(100, 64)  # 6400 values: 8-bit by default
    assert om.adamw8bit_state_bytes(emb) == 2 * 6400 + 8 * 25 + om.BNB_QMAP_BYTES
    assert om.adamw8bit_state_bytes(emb, keep_32bit=[emb.weight]) == 8 * 6400  # no 8-bit tensor: no maps


def test_tied_and_frozen_parameters_count_once_or_not_at_all():
    layer = torch.nn.Linear(10, 10)
    layer.bias.requires_grad_(False)
    assert om.n_parameters([layer.weight, layer.weight, layer.bias]) == 100
    assert om.adamw_state_bytes(layer) == 8 * 100 + 4


@pytest.mark.parametrize("bad, words", [("adam", "optimizer 'adam' is not known; allowed: adamw, adafactor, adamw8bit"),
                                        ("", "optimizer '' is not known"), (3, "optimizer 3 is not known")])
def test_unknown_optimizer_name(bad, words):
    with pytest.raises(ValueError, match=words):
        make_optimizer(bad, torch.nn.Linear(2, 2).parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="allowed"):
        om.expected_state_bytes(bad, torch.nn.Linear(2, 2))


@pytest.mark.parametrize("bad", [0, -1e-3, float("nan"), float("inf"), "1e-3", True, None])
def test_learning_rate_must_be_positive(bad):
    with pytest.raises(ValueError, match="learning_rate=.* must be a positive number"):
        check_learning_rate(bad)
    with pytest.raises(ValueError, match="learning_rate=.* must be a positive number"):
        make_optimizer("adamw", torch.nn.Linear(2, 2).parameters(), lr=bad)


@pytest.mark.parametrize("bad, words", [((0.9, 1.0), r"betas\[1\]=1.0"), ((-0.1, 0.999), r"betas\[0\]=-0.1"),
                                        ((0.9,), "give two numbers"), (0.9, "give two numbers"),
                                        ((0.9, "x"), r"betas\[1\]='x'")])
def test_betas_in_zero_one(bad, words):
    with pytest.raises(ValueError, match=words):
        check_betas(bad)
    assert check_betas((0.0, 0.999)) == (0.0, 0.999)


def test_learning_rates_by_name_and_defaults():
    assert learning_rates(["adamw", "adafactor"], 2e-3) == {"adamw": 2e-3, "adafactor": 2e-3}
    assert learning_rates(["adamw"], {"adamw": 3e-4}) == {"adamw": 3e-4}
    with pytest.raises(ValueError, match="'sgd' is not known"):
        learning_rates(["adamw"], {"sgd": 1e-3})
    with pytest.raises(ValueError, match=r"learning_rate\['adamw'\]=0"):
        learning_rates(["adamw"], {"adamw": 0})


def test_without_bitsandbytes_the_8bit_optimizer_is_reported_not_crashed(monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # `import bitsandbytes` now raises ImportError
    ok, why = bitsandbytes_status()
    assert not ok and "cannot be imported" in why and "pip install" in why
    with pytest.raises(RuntimeError, match="cannot be imported"):
        make_optimizer("adamw8bit", torch.nn.Linear(2, 2).parameters(), lr=1e-3)
    assert om.adamw8bit_state_bytes(torch.nn.Linear(64, 64)) > 0  # the theory needs no bitsandbytes


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match=r"shape=\(\) must have at least one dimension"):
        om.adafactor_second_moment_numel(())
    with pytest.raises(TypeError, match="shape=5 must be a tuple"):
        om.adafactor_second_moment_numel(5)
    with pytest.raises(ValueError, match="numel=-1"):
        om.adamw8bit_tensor_bytes(-1)
    assert math.isclose(om.adamw8bit_tensor_bytes(256 * 1000) / (8 * 256 * 1000), (2 + 8 / 256) / 8)


def test_bitsandbytes_kernels_hint_is_dropped_and_nothing_else(caplog):
    """bitsandbytes/backends/cpu/ops.py logs an invitation to `pip install kernels` at import on AVX512-BF16
    CPUs; the lessons' first import (bitsandbytes_status) silences exactly that line on that logger."""
    import logging

    bitsandbytes_status()
    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please make sure you "
                       "already `pip install kernels` and the kernels >= 0.11.1", "no network")
        logger.warning("some other bitsandbytes warning")
    assert [r.getMessage() for r in caplog.records] == ["some other bitsandbytes warning"]


def test_adamw_implementation_follows_torchs_choice():
    from effitrain_helpers.training.optimizer_compare import adamw_implementation

    params = [torch.nn.Parameter(torch.zeros(3))]
    assert adamw_implementation(torch.optim.AdamW(params)) == "for-loop"  # CPU tensors: torch's default
    assert adamw_implementation(torch.optim.AdamW(params, fused=True)) == "fused"
    assert adamw_implementation(torch.optim.AdamW(params, foreach=True)) == "foreach"
    with pytest.raises(TypeError, match="torch.optim.Adam or AdamW"):
        adamw_implementation(torch.optim.SGD(params, lr=0.1))


@pytest.mark.slow  # trains the lesson model a few steps per optimizer
def test_the_lessons_loop_and_compare_optimizers_are_the_same_comparison():
    """Lesson 4.3 writes the loop over the optimizers with comparison_setup and builds each optimizer itself;
    compare_optimizers (command line, widget) is that loop with make_optimizer: same runs, step for step."""
    from transformers import Adafactor

    from effitrain_helpers.training.optimizer_compare import compare_optimizers, comparison_setup

    names = ["adamw", "adafactor"]
    setup = comparison_setup(names, steps=4, seed=0)
    runs = []
    for name in setup.names:
        net = setup.fresh_model()
        optimizer = (torch.optim.AdamW(net.parameters(), lr=setup.rates[name], weight_decay=0.01)
                     if name == "adamw" else
                     Adafactor(net.parameters(), lr=setup.rates[name], scale_parameter=False,
                               relative_step=False, warmup_init=False, weight_decay=0.01))
        runs.append(setup.train(name, net, optimizer))
    mine, helpers = setup.comparison(runs), compare_optimizers(names, steps=4, seed=0)
    assert [r.name for r in mine.runs] == names and mine.device == helpers.device
    for a, b in zip(mine.runs, helpers.runs):
        assert a.losses == b.losses and a.state_bytes == b.state_bytes == b.expected_state_bytes
        assert a.learning_rate == b.learning_rate == setup.rates[a.name] and a.optimizer_class == b.optimizer_class
