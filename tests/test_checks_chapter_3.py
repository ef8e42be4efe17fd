"""Every checker of chapter 3, with known right and known wrong answers."""

import re

import numpy as np
import pytest
import torch
from transformers import DistilBertConfig

from effitrain_helpers.teach.checks import lesson_3_1 as l31
from effitrain_helpers.teach.checks import lesson_3_2 as l32
from effitrain_helpers.teach.checks import lesson_3_3 as l33
from verdicts import mistake, right


def _by_hand(no_sync="all but the k-th", divide="loss", step="k-th", counted_from=1):
    """A learner's ``train_by_hand`` for 3.1 q1, right by default and written unlike the solution (one ``with``
    whose context manager is chosen per micro-batch, ``nullcontext()`` for the k-th; the forward and the backward
    in two blocks); each argument turns one part into a usual mistake: ``no_sync`` "never", "always" or "backward
    only" (the forward outside it), ``divide=None`` (the loss not divided by k), ``step="every"``,
    ``counted_from=0`` (the k-th taken as ``i % k == 0``: off by one). ``divide="gradients"`` is right another
    way: the summed gradients divided by k before the step instead of each loss."""

    def train_by_hand(model, optimizer, dataset, k):
        from contextlib import nullcontext

        from torch.utils.data import DataLoader

        for i, batch in enumerate(DataLoader(dataset, batch_size=4)):
            last = (i + counted_from) % k == 0
            quiet = no_sync == "always" or (no_sync == "all but the k-th" and not last)
            backward_only = no_sync == "backward only" and not last
            with model.no_sync() if quiet and not backward_only else nullcontext():
                loss = model(**batch).loss
            with model.no_sync() if quiet or backward_only else nullcontext():
                (loss / k if divide == "loss" else loss).backward()
            if last or step == "every":
                if divide == "gradients":
                    for p in model.parameters():
                        p.grad /= k
                optimizer.step()
                optimizer.zero_grad()

    return train_by_hand


@pytest.mark.slow
@pytest.mark.judges("3.1 q1", "right")
def test_3_1_q1_no_sync_by_hand_in_two_processes():
    result = l31.q1.evaluate(_by_hand())
    assert result.status == "correct", result.message


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.judges("3.1 q1", "right")
def test_3_1_q1_accepts_the_gradients_divided_by_k_before_the_step():
    result = l31.q1.evaluate(_by_hand(divide="gradients"))
    assert result.status == "correct", result.message


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.judges("3.1 q1", "mistake")
def test_3_1_q1_names_the_k_th_micro_batch_counted_from_0():
    message = l31.q1.evaluate(_by_hand(counted_from=0)).message
    assert "the first of every 4, not the 4-th" in message and "(i + 1)" in message, message


@pytest.mark.slow
@pytest.mark.judges("3.1 q1", "mistake")
def test_3_1_q1_names_a_missing_no_sync():
    assert "times the communication" in l31.q1.evaluate(_by_hand(no_sync="never")).message


@pytest.mark.slow
@pytest.mark.judges("3.1 q1", "mistake")
def test_3_1_q1_names_no_sync_around_the_backward_only():
    message = l31.q1.evaluate(_by_hand(no_sync="backward only")).message
    assert "times the communication" in message and "forward" in message


@pytest.mark.slow
@pytest.mark.judges("3.1 q1", "mistake")
def test_3_1_q1_names_no_sync_on_every_micro_batch():
    assert "drifted apart" in l31.q1.evaluate(_by_hand(no_sync="always")).message


@pytest.mark.slow
@pytest.mark.judges("3.1 q1", "mistake")
def test_3_1_q1_names_a_loss_not_divided_by_k():
    assert "times too large" in l31.q1.evaluate(_by_hand(divide=None)).message


@pytest.mark.slow
@pytest.mark.judges("3.1 q1", "mistake")
def test_3_1_q1_names_a_step_at_every_micro_batch():
    assert "stepped at every micro-batch" in l31.q1.evaluate(_by_hand(step="every")).message


def test_3_1_q1_wants_a_function():
    assert "function itself" in l31.q1.evaluate(4).message


def _q2_right(model, optimizer, dataset, k):
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator(gradient_accumulation_steps=k)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()


def _q2_plain_backward(model, optimizer, dataset, k):  # the loss is not divided by k
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator(gradient_accumulation_steps=k)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
    for batch in loader:
        with accelerator.accumulate(model):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()


def _q2_loader_not_prepared(model, optimizer, dataset, k):  # every process trains on all the data
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator(gradient_accumulation_steps=k)
    model, optimizer = accelerator.prepare(model, optimizer)
    for batch in DataLoader(dataset, batch_size=4):
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()


def _q2_no_k(model, optimizer, dataset, k):  # Accelerator() without gradient_accumulation_steps
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()


@pytest.mark.slow
def test_3_1_q2_runs_the_learners_loop_in_two_processes():
    assert l31.q2.evaluate(_q2_right).status == "correct", l31.q2.evaluate(_q2_right).message
    assert "function itself" in l31.q2.evaluate(42).message


@pytest.mark.slow
@pytest.mark.parametrize("answer, words", [
    mistake("3.1 q2", _q2_plain_backward, "accelerator.backward"),
    mistake("3.1 q2", _q2_loader_not_prepared, "pass the DataLoader to accelerator.prepare"),
    mistake("3.1 q2", _q2_no_k, "gradient_accumulation_steps=k"),
], ids=["loss-backward", "loader-not-prepared", "no-k"])
def test_3_1_q2_names_each_mistake(answer, words):
    result = l31.q2.evaluate(answer)
    assert result.status == "incorrect" and words in result.message, result


@pytest.mark.slow
def test_3_1_q2_reports_a_failing_function_in_one_line():
    def broken(model, optimizer, dataset, k):
        raise RuntimeError("my bug")

    result = l31.q2.evaluate(broken)
    assert result.status == "incorrect" and re.search(r"rank [01] raised RuntimeError: my bug", result.message)
    assert "\n" not in result.message, "one line"


@pytest.mark.parametrize("answer", [
    pytest.param((16, 4), id="the-solutions-values"),
    right("3.1 q3", (16.0, 4.0), id="floats"),
    right("3.1 q3", [np.int64(16), torch.tensor(4)], id="a-list-numpy-and-torch"),
])
def test_3_1_q3_right(answer):
    per = 1000.0
    result = l31.q3.evaluate(answer, per, 20 * per)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("answer, words", [
    mistake("3.1 q3", (32, 2), "more than the"),
    mistake("3.1 q3", (8, 8), "a larger micro-batch that divides 64 fits too"),
    mistake("3.1 q3", (20, 3), "does not divide 64"),
    mistake("3.1 q3", (16, 3), "3 micro-batches of 16 make 48 samples, not 64"),  # k off by one
    (16, "pair"),
], ids=["over-the-budget", "not-the-largest", "not-a-divisor", "k-off-by-one", "no-pair"])
def test_3_1_q3_names_each_mistake(answer, words):
    per = 1000.0
    result = l31.q3.evaluate(answer, per, 20 * per)
    assert result.status == "incorrect" and words in result.message, result


def test_3_2_q1_checkpointing_a_transformers_model():
    assert l32.q1.evaluate(lambda model: model.activation_checkpointing_enable()).status == "correct"
    assert "function itself" in l32.q1.evaluate(True).message


def _old_name(model):  # the deprecated alias transformers still keeps (a FutureWarning)
    model.gradient_checkpointing_enable()


def _non_reentrant(model):  # the checkpoint function's options passed on, by keyword
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})


@pytest.mark.parametrize("turn_on", [
    right("3.2 q1", _old_name),
    right("3.2 q1", _non_reentrant),
], ids=["gradient-checkpointing-enable", "non-reentrant-kwargs"])
def test_3_2_q1_right_another_way(turn_on):
    result = l32.q1.evaluate(turn_on)
    assert result.status == "correct", result.message


def _config_flag(model):
    model.config.gradient_checkpointing = True


def _model_attribute(model):
    model.gradient_checkpointing = True


def _layer_flags(model):
    for module in model.modules():
        if hasattr(module, "gradient_checkpointing"):
            module.gradient_checkpointing = True


@pytest.mark.parametrize("turn_on, words", [
    mistake("3.2 q1", lambda model: None, "still keeps every activation"),
    mistake("3.2 q1", lambda model: model.eval(), "eval mode"),
    mistake("3.2 q1", _config_flag, "model already built changes nothing"),
    mistake("3.2 q1", _model_attribute, "attribute no layer reads"),
    mistake("3.2 q1", _layer_flags, "set by hand"),
], ids=["nothing", "eval-mode", "config-flag", "model-attribute", "layer-flags"])
def test_3_2_q1_names_each_mistake(turn_on, words):
    result = l32.q1.evaluate(turn_on)
    assert result.status == "incorrect" and words in result.message, result


_Q2_CONFIG = DistilBertConfig(n_layers=2, dim=128, n_heads=4, hidden_dim=512)


@pytest.mark.parametrize("answer", [
    pytest.param(2 * 8 * 64 * 128 * 4, id="an-int"),
    right("3.2 q2", 2 * 8 * 64 * 128 * 4.0, id="a-float"),
    right("3.2 q2", np.int64(524_288), id="numpy"),
])
def test_3_2_q2_right(answer):
    result = l32.q2.evaluate(answer, _Q2_CONFIG)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("answer, words", [
    mistake("3.2 q2", 2 * 8 * 64 * 128, "numbers, not bytes"),
    mistake("3.2 q2", 8 * 64 * 128 * 4, "one layer's input"),
], ids=["values-not-bytes", "one-layer"])
def test_3_2_q2_names_each_mistake(answer, words):
    result = l32.q2.evaluate(answer, _Q2_CONFIG)
    assert result.status == "incorrect" and words in result.message, result


def test_3_2_q2_wants_the_config():
    assert "config" in l32.q2.evaluate(1, {"n_layers": 2}).message


def _checkpointed(blocks, x):
    from torch.utils.checkpoint import checkpoint

    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return x


def _by_reduce(blocks, x):  # right, another way: functools.reduce, the block's forward, keywords for the options
    import functools

    from torch.utils import checkpoint

    return functools.reduce(lambda h, block: checkpoint.checkpoint(block.forward, h, use_reentrant=False,
                                                                   preserve_rng_state=False), blocks, x)


def _by_index(blocks, x):  # right, another way: a while loop over indices, each block through a lambda
    from torch.utils.checkpoint import checkpoint

    i = 0
    while i < len(blocks):
        x = checkpoint(lambda h, block=blocks[i]: block(h), x, use_reentrant=False)
        i += 1
    return x


@pytest.mark.parametrize("forward", [
    pytest.param(_checkpointed, id="the-solutions-form"),
    right("3.2 q3", _by_reduce, id="reduce"),
    right("3.2 q3", _by_index, id="while-loop"),
])
def test_3_2_q3_checkpointing_a_plain_module_right(forward):
    result = l32.q3.evaluate(forward)
    assert result.status == "correct", result.message


def _plain(blocks, x):
    for block in blocks:
        x = block(x)
    return x


def _half(blocks, x):  # only the first two blocks checkpointed
    from torch.utils.checkpoint import checkpoint

    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i < 2 else block(x)
    return x


def _no_grad(blocks, x):
    with torch.no_grad():
        return _plain(blocks, x)


def _skips_a_block(blocks, x):
    return _checkpointed(blocks[:-1], x)


def _reentrant(blocks, x):  # torch's default when use_reentrant is not passed
    from torch.utils.checkpoint import checkpoint

    for block in blocks:
        x = checkpoint(block, x, use_reentrant=True)
    return x


def _use_reentrant_left_out(blocks, x):
    from torch.utils.checkpoint import checkpoint

    for block in blocks:
        x = checkpoint(block, x)
    return x


@pytest.mark.parametrize("forward, words", [
    mistake("3.2 q3", _plain, "as without checkpointing"),
    mistake("3.2 q3", _half, "checkpoint every block"),
    mistake("3.2 q3", _no_grad, "do not run the blocks under torch.no_grad()"),
    mistake("3.2 q3", _skips_a_block, "output differs"),
    mistake("3.2 q3", _reentrant, "the reentrant checkpoint"),
    mistake("3.2 q3", _use_reentrant_left_out, "when use_reentrant is not passed"),
], ids=["no-checkpoint", "half-checkpointed", "no-grad", "skips-a-block", "reentrant", "use-reentrant-left-out"])
def test_3_2_q3_names_each_mistake(forward, words):
    result = l32.q3.evaluate(forward)
    assert result.status == "incorrect" and words in result.message, result


def _accumulation(model_given=True, another_way=False):
    """A 3.1 q2 answer: ``model_given=False`` calls accelerator.accumulate() with no model (DDP then all-reduces
    every micro-batch); ``another_way`` is right written another way (step and zero_grad only when Accelerate
    synchronises, the batch read by its keys)."""
    def train_accumulated(model, optimizer, dataset, k):
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        accelerator = Accelerator(gradient_accumulation_steps=k)
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
        for batch in loader:
            with accelerator.accumulate(*([model] if model_given else [])):
                if another_way:
                    outputs = model(inputs=batch["inputs"], labels=batch["labels"])
                    accelerator.backward(outputs.loss)
                    if accelerator.sync_gradients:
                        optimizer.step()
                        optimizer.zero_grad()
                else:
                    accelerator.backward(model(**batch).loss)
                    optimizer.step()
                    optimizer.zero_grad()

    return train_accumulated


@pytest.mark.slow
@pytest.mark.judges("3.1 q2", "mistake")
def test_3_1_q2_names_accumulate_without_the_model():  # a mutant of the solution accepted before (issue 41)
    result = l31.q2.evaluate(_accumulation(model_given=False))
    assert result.status == "incorrect" and "give it the prepared model" in result.message, result


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.judges("3.1 q2", "right")
def test_3_1_q2_accepts_a_right_loop_written_another_way():
    result = l31.q2.evaluate(_accumulation(another_way=True))
    assert result.status == "correct", result.message


def _accumulation_plugin(model, optimizer, dataset, k):
    """Right, another API spelling: k given through a GradientAccumulationPlugin, the loader prepared on its own,
    the loss divided by k by hand and backward() called on it (what accelerator.backward does)."""
    from accelerate import Accelerator
    from accelerate.utils import GradientAccumulationPlugin
    from torch.utils.data import DataLoader

    accelerator = Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=k))
    model, optimizer = accelerator.prepare(model, optimizer)
    loader = accelerator.prepare(DataLoader(dataset, batch_size=4))
    for batch in loader:
        with accelerator.accumulate(model):
            (model(**batch).loss / accelerator.gradient_accumulation_steps).backward()
            optimizer.step()
            optimizer.zero_grad()


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.judges("3.1 q2", "right")
def test_3_1_q2_accepts_k_through_a_plugin():
    result = l31.q2.evaluate(_accumulation_plugin)
    assert result.status == "correct", result.message


def _local_sgd(batch_size=4, zero_grad=True, another_way=False):
    """A 3.2 q4 answer; ``batch_size``/``zero_grad`` changed make mutants accepted before (issue 41);
    ``another_way`` is right: gradients cleared before the forward, LocalSGD's arguments by position."""
    def train_local_sgd(model, optimizer, dataset, k):
        from accelerate import Accelerator
        from accelerate.local_sgd import LocalSGD
        from torch.utils.data import DataLoader

        accelerator = Accelerator()
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=batch_size))
        with LocalSGD(accelerator, model, k) as local_sgd:
            for batch in loader:
                if another_way:
                    optimizer.zero_grad()
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                if zero_grad and not another_way:
                    optimizer.zero_grad()
                local_sgd.step()

    return train_local_sgd


def _local_sgd_prepared_one_by_one(model, optimizer, dataset, k):
    """Right, another API spelling: Accelerate's prepare_model, prepare_optimizer and prepare_data_loader, the
    batch's loss computed from the logits by hand, LocalSGD's step before zero_grad."""
    from accelerate import Accelerator
    from accelerate.local_sgd import LocalSGD
    from torch.utils.data import DataLoader

    accelerator = Accelerator()
    model = accelerator.prepare_model(model)
    optimizer = accelerator.prepare_optimizer(optimizer)
    loader = accelerator.prepare_data_loader(DataLoader(dataset, batch_size=4))
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=k, enabled=True) as local_sgd:
        for batch in loader:
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            local_sgd.step()
            optimizer.zero_grad()


@pytest.mark.slow
@pytest.mark.parametrize("answer, words", [
    mistake("3.2 q4",
            _local_sgd(batch_size=5),
            "the steps took batches of [5] rows; the exercise's batches are 4",
            marks=pytest.mark.exhaustive),
    mistake("3.2 q4", _local_sgd(zero_grad=False), "began with the gradients of earlier batches"),
    right("3.2 q4", _local_sgd(another_way=True), "", marks=pytest.mark.exhaustive),
    right("3.2 q4", _local_sgd_prepared_one_by_one, "", marks=pytest.mark.exhaustive),
], ids=["batches-of-5", "no-zero-grad", "right-another-way", "right-prepared-one-by-one"])
def test_3_2_q4_names_the_batch_and_zero_grad(answer, words):
    result = l32.q4.evaluate(answer)
    assert (result.status == "correct") == (words == "") and words in result.message, result


def _local_sgd_right(model, optimizer, dataset, k):
    from accelerate import Accelerator
    from accelerate.local_sgd import LocalSGD
    from torch.utils.data import DataLoader

    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=k) as local_sgd:
        for batch in loader:
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()
            local_sgd.step()


def _local_sgd_plain_ddp(model, optimizer, dataset, k):
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
    for batch in loader:
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        optimizer.zero_grad()


def _local_sgd_no_step(model, optimizer, dataset, k):
    from accelerate import Accelerator
    from accelerate.local_sgd import LocalSGD
    from torch.utils.data import DataLoader

    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=k):
        for batch in loader:
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()


@pytest.mark.slow
def test_3_2_q4_counts_the_averages_of_a_local_sgd_loop_in_two_processes():
    assert l32.q4.evaluate(_local_sgd_right).status == "correct", l32.q4.evaluate(_local_sgd_right).message


@pytest.mark.slow
@pytest.mark.parametrize("answer, words", [
    mistake("3.2 q4", _local_sgd_plain_ddp, "plain data parallelism"),
    mistake("3.2 q4", _local_sgd_no_step, "local_sgd.step()"),
], ids=["plain-ddp", "no-local-sgd-step"])
def test_3_2_q4_names_plain_ddp_and_a_missing_step(answer, words):
    result = l32.q4.evaluate(answer)
    assert result.status == "incorrect" and words in result.message, result


def _bf16_next_after_one():  # right, another way: measured, the next bfloat16 after 1, minus 1 (a 0-d tensor)
    one = torch.tensor(1.0, dtype=torch.bfloat16)
    return torch.nextafter(one, torch.tensor(2.0, dtype=torch.bfloat16)) - one


@pytest.mark.parametrize("answer", [
    pytest.param(torch.finfo(torch.bfloat16).eps, id="the-solutions-value"),
    pytest.param(2**-7, id="a-power-of-two"),
    right("3.3 q1", np.float32(2**-7), id="numpy-float32"),
    right("3.3 q1", _bf16_next_after_one(), id="nextafter"),
])
def test_3_3_q1_right(answer):
    result = l33.q1.evaluate(answer)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("answer, words", [
    mistake("3.3 q1", torch.finfo(torch.float16).eps, "float16's gap"),
    mistake("3.3 q1", torch.finfo(torch.float32).eps, "float32's gap"),
    mistake("3.3 q1", torch.finfo(torch.bfloat16).resolution, "finfo's resolution"),
    mistake("3.3 q1", 2**-8, "the leading 1 is implicit"),
], ids=["float16-eps", "float32-eps", "resolution", "implicit-bit-counted"])
def test_3_3_q1_names_each_mistake(answer, words):
    result = l33.q1.evaluate(answer)
    assert result.status == "incorrect" and words in result.message, result


def test_3_3_q2_the_smallest_surviving_scale():
    assert l33.smallest_surviving_scale() == 4


@pytest.mark.parametrize("answer", [
    pytest.param(4, id="an-int"),
    right("3.3 q2", 2.0**2, id="a-float-power"),
    right("3.3 q2", torch.tensor(4), id="a-tensor"),
    right("3.3 q2", np.int64(4), id="numpy"),
])
def test_3_3_q2_right(answer):
    result = l33.q2.evaluate(answer)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("answer, words", [
    mistake("3.3 q2", 2**16, "smaller power"),  # GradScaler's default
    mistake("3.3 q2", 2, "still rounds to 0"),
    mistake("3.3 q2", 3, "power of two"),
], ids=["gradscalers-default", "too-small", "not-a-power-of-two"])
def test_3_3_q2_names_each_mistake(answer, words):
    result = l33.q2.evaluate(answer)
    assert result.status == "incorrect" and words in result.message, result


_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _low():
    """This hardware's 16-bit type (what q3 asks for) and the other one."""
    from effitrain_helpers.training.precision import TORCH_NAME, low_precision

    low = getattr(torch, TORCH_NAME[low_precision()])
    return low, (torch.float16 if low == torch.bfloat16 else torch.bfloat16)


def _q3_right(model, batch):
    with torch.autocast(device_type=_DEVICE, dtype=_low()[0]):
        return model(**batch).logits


def _q3_device_module(model, batch):  # right, another way: torch.amp.autocast, the device by position
    with torch.amp.autocast(_DEVICE, dtype=_low()[0]):
        return model(**batch).logits


def _q3_positional(model, batch):  # right, another way: every argument by position, the output kept first
    with torch.autocast(_DEVICE, _low()[0], True):
        outputs = model(inputs=batch["inputs"])
    return outputs.logits


@pytest.mark.parametrize("fn", [
    pytest.param(_q3_right, id="the-solutions-form"),
    right("3.3 q3", _q3_device_module, id="torch-amp-autocast"),
    right("3.3 q3", _q3_positional, id="positional"),
])
def test_3_3_q3_a_forward_pass_in_the_hardwares_16_bit_type(fn):
    result = l33.q3.evaluate(fn)
    assert result.status == "correct", result.message


def _q3_no_autocast(model, batch):
    return model(**batch).logits


def _q3_other_type(model, batch):
    with torch.autocast(device_type=_DEVICE, dtype=_low()[1]):
        return model(**batch).logits


def _q3_converted_model(model, batch):
    low = _low()[0]
    return model.to(low)(**{k: v.to(low) for k, v in batch.items()}).logits


def _q3_argmax(model, batch):
    with torch.autocast(device_type=_DEVICE, dtype=_low()[0]):
        return model(**batch).logits.argmax(-1)


def _q3_model_converted_only(model, batch):  # the case: model.to(torch.bfloat16), the inputs left float32
    return model.to(_low()[0])(**batch).logits


def _q3_dtype_as_a_string(model, batch):  # the case: the dtype's name, not the torch object
    with torch.autocast(device_type=_DEVICE, dtype=str(_low()[0]).split(".")[-1]):
        return model(**batch).logits


def _q3_model_to_a_string(model, batch):
    return model.to(str(_low()[0]).split(".")[-1])(**batch).logits


_OTHER_TYPE_SAID = "GradScaler" if _DEVICE == "cpu" and _low()[1] == torch.float16 else "this hardware"


@pytest.mark.parametrize("fn, words", [
    mistake("3.3 q3", _q3_model_converted_only, "mixed precision keeps float32 weights"),
    mistake("3.3 q3", _q3_dtype_as_a_string, "not its name in a string"),
    mistake("3.3 q3", _q3_model_to_a_string, "not its name in a string"),
    mistake("3.3 q3", _q3_no_autocast, "inside torch.autocast"),
    mistake("3.3 q3", _q3_other_type, _OTHER_TYPE_SAID),
    mistake("3.3 q3", _q3_converted_model, "mixed precision keeps float32 weights"),
    mistake("3.3 q3", _q3_argmax, "return model(**batch).logits"),
], ids=["model-to-bfloat16", "dtype-as-a-string", "model-to-a-string", "no-autocast", "other-16-bit-type",
        "model-and-inputs-converted", "argmax"])
def test_3_3_q3_names_each_mistake(fn, words):
    result = l33.q3.evaluate(fn)
    assert result.status == "incorrect" and words in result.message, result


def _fp16_step(backward="scaled", step="scaler", update=True, autocast=True, zero=True):
    """A learner's ``fp16_step``, right by default; each argument turns one part into a usual mistake."""

    def fp16_step(model, optimizer, scaler, x):
        with torch.autocast(device_type=x.device.type, dtype=torch.float16, enabled=autocast):
            loss = model(x).sum()
        (scaler.scale(loss) if backward == "scaled" else loss).backward()
        scaler.step(optimizer) if step == "scaler" else optimizer.step()
        if update:
            scaler.update()
        if zero:
            optimizer.zero_grad()

    return fp16_step


def test_3_3_q4_a_float16_step_with_loss_scaling():
    right = l33.q4.evaluate(_fp16_step())
    assert right.status == "correct", right.message
    assert "scale halved" in right.message


def _fp16_step_cleared_first(model, optimizer, scaler, x):
    """Right, another way: the gradients cleared before the forward (set to None), torch.amp.autocast with its
    arguments by position, the scaled loss kept in a name."""
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast(x.device.type, torch.float16):
        loss = model(x).sum()
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()


def _fp16_step_unscaled_first(model, optimizer, scaler, x):
    """Right, another way: the gradients unscaled explicitly before the step (PyTorch's "working with unscaled
    gradients" recipe, where clipping would go), the loss a mean times the batch size."""
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        loss = model(x).mean() * x.shape[0]
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()


@pytest.mark.parametrize("fn", [
    right("3.3 q4", _fp16_step_cleared_first),
    right("3.3 q4", _fp16_step_unscaled_first),
], ids=["zero-grad-first", "unscale-first"])
def test_3_3_q4_right_another_way(fn):
    result = l33.q4.evaluate(fn)
    assert result.status == "correct", result.message


@pytest.mark.judges("3.3 q4", "mistake")
def test_3_3_q4_names_an_unscaled_backward():
    assert "unscaled loss" in l33.q4.evaluate(_fp16_step(backward="plain")).message


@pytest.mark.judges("3.3 q4", "mistake")
def test_3_3_q4_names_optimizer_step_instead_of_the_scalers():
    assert "not optimizer.step()" in l33.q4.evaluate(_fp16_step(step="optimizer")).message
    assert "inf batch reached the weights" in l33.q4.evaluate(_fp16_step(step="optimizer", update=False)).message


@pytest.mark.judges("3.3 q4", "mistake")
def test_3_3_q4_names_a_forgotten_update():
    assert "call scaler.update()" in l33.q4.evaluate(_fp16_step(update=False)).message


@pytest.mark.judges("3.3 q4", "mistake")
def test_3_3_q4_names_float16_without_a_scaler():
    assert "never used the scaler" in l33.q4.evaluate(_fp16_step(backward="plain", step="optimizer",
                                                                  update=False)).message


@pytest.mark.judges("3.3 q4", "mistake")
def test_3_3_q4_names_a_forward_outside_autocast():
    assert "torch.autocast" in l33.q4.evaluate(_fp16_step(autocast=False)).message


@pytest.mark.judges("3.3 q4", "mistake")
def test_3_3_q4_names_gradients_never_cleared():
    assert "zero the gradients" in l33.q4.evaluate(_fp16_step(zero=False)).message


def test_3_3_q4_wants_a_function():
    assert "function itself" in l33.q4.evaluate(3).message


def _bf16_training(precision="bf16", accelerator=True, prepare=("model", "optimizer", "loader"),
                   backward="accelerator", zero=True):
    """A learner's ``bf16_training`` for 3.3 q5, right by default; each argument turns one part into a usual
    mistake: another ``precision`` (None: no argument), no ``accelerator`` at all, a part left out of
    ``prepare`` (its unprepared version used), ``backward="loss"`` (``loss.backward()``), ``zero=False``."""

    def bf16_training(model, optimizer, loader):
        from accelerate import Accelerator

        if accelerator:
            acc = Accelerator(**({} if precision is None else {"mixed_precision": precision}))
            parts = {"model": model, "optimizer": optimizer, "loader": loader}
            chosen = [name for name in parts if name in prepare]
            parts.update(zip(chosen, acc.prepare(*(parts[name] for name in chosen))))
            model, optimizer, loader = parts["model"], parts["optimizer"], parts["loader"]
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            acc.backward(loss) if accelerator and backward == "accelerator" else loss.backward()
            optimizer.step()
            if zero:
                optimizer.zero_grad()

    return bf16_training


def test_3_3_q5_a_bf16_training_loop_with_accelerate():
    from accelerate.state import AcceleratorState

    before = dict(AcceleratorState._shared_state)
    right = l33.q5.evaluate(_bf16_training())
    assert right.status == "correct", right.message
    assert dict(AcceleratorState._shared_state) == before, "the notebook's Accelerate state is put back"


def _bf16_prepared_one_by_one(model, optimizer, loader):
    """Right, another way: the precision as Accelerate's enum, each part prepared by its own call, the gradients
    cleared at the top of the loop, the squared error written out."""
    from accelerate import Accelerator
    from accelerate.utils import PrecisionType

    accelerator = Accelerator(mixed_precision=PrecisionType.BF16)
    model = accelerator.prepare(model)
    optimizer = accelerator.prepare(optimizer)
    loader = accelerator.prepare(loader)
    for x, y in loader:
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        accelerator.backward(loss)
        optimizer.step()


def _bf16_by_index(model, optimizer, loader):
    """Right, another way: the parts prepared as a tuple and taken by index, the batch by index, the loss through
    the nn.MSELoss module."""
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="bf16")
    prepared = accelerator.prepare(model, optimizer, loader)
    criterion = torch.nn.MSELoss()
    for batch in prepared[2]:
        accelerator.backward(criterion(prepared[0](batch[0]), batch[1]))
        prepared[1].step()
        prepared[1].zero_grad(set_to_none=True)


@pytest.mark.parametrize("fn", [
    right("3.3 q5", _bf16_prepared_one_by_one),
    right("3.3 q5", _bf16_by_index),
], ids=["prepared-one-by-one", "by-index"])
def test_3_3_q5_right_another_way(fn):
    result = l33.q5.evaluate(fn)
    assert result.status == "correct", result.message


@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 turns autocast on with a GPU")
@pytest.mark.judges("3.3 q5", "mistake")
def test_3_3_q5_names_fp16_on_a_cpu():
    assert "'fp16' on a CPU" in l33.q5.evaluate(_bf16_training(precision="fp16")).message


@pytest.mark.judges("3.3 q5", "mistake")
def test_3_3_q5_names_no_mixed_precision():
    assert "mixed precision is 'no'" in l33.q5.evaluate(_bf16_training(precision=None)).message
    assert "never created an Accelerator" in l33.q5.evaluate(_bf16_training(accelerator=False)).message


@pytest.mark.judges("3.3 q5", "mistake")
def test_3_3_q5_names_the_unprepared_model():
    assert "through accelerator.prepare(model" in l33.q5.evaluate(
        _bf16_training(prepare=("optimizer", "loader"))).message


@pytest.mark.judges("3.3 q5", "mistake")
def test_3_3_q5_names_the_unprepared_loader():
    assert "loader you were given" in l33.q5.evaluate(_bf16_training(prepare=("model", "optimizer"))).message


@pytest.mark.judges("3.3 q5", "mistake")
def test_3_3_q5_names_loss_backward():
    assert "accelerator.backward(loss)" in l33.q5.evaluate(_bf16_training(backward="loss")).message


@pytest.mark.judges("3.3 q5", "mistake")
def test_3_3_q5_names_gradients_left_to_pile_up():
    assert "optimizer.zero_grad() per batch" in l33.q5.evaluate(_bf16_training(zero=False)).message
    assert "function itself" in l33.q5.evaluate(3).message
