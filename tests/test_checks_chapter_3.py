"""Every checker of chapter 3, with known right and known wrong answers."""

import re

import pytest
import torch
from transformers import DistilBertConfig

from effitrain_helpers.teach.checks import lesson_3_1 as l31
from effitrain_helpers.teach.checks import lesson_3_2 as l32
from effitrain_helpers.teach.checks import lesson_3_3 as l33


def _by_hand(no_sync="all but the k-th", divide=True, step="k-th"):
    """A learner's ``train_by_hand`` for 3.1 q1, right by default; each argument turns one part into a usual
    mistake: ``no_sync`` "never", "always" or "backward only" (the forward outside it), ``divide=False`` (the
    loss not divided by k), ``step="every"``."""

    def train_by_hand(model, optimizer, dataset, k):
        from contextlib import nullcontext

        from torch.utils.data import DataLoader

        for i, batch in enumerate(DataLoader(dataset, batch_size=4)):
            last = (i + 1) % k == 0
            quiet = no_sync == "always" or (no_sync == "all but the k-th" and not last)
            backward_only = no_sync == "backward only" and not last
            with model.no_sync() if quiet and not backward_only else nullcontext():
                loss = model(**batch).loss
            with model.no_sync() if quiet or backward_only else nullcontext():
                (loss / k if divide else loss).backward()
            if last or step == "every":
                optimizer.step()
                optimizer.zero_grad()

    return train_by_hand


@pytest.mark.slow
def test_3_1_q1_no_sync_by_hand_in_two_processes():
    result = l31.q1.evaluate(_by_hand())
    assert result.status == "correct", result.message


@pytest.mark.slow
def test_3_1_q1_names_a_missing_no_sync():
    assert "times the communication" in l31.q1.evaluate(_by_hand(no_sync="never")).message


@pytest.mark.slow
def test_3_1_q1_names_no_sync_around_the_backward_only():
    message = l31.q1.evaluate(_by_hand(no_sync="backward only")).message
    assert "times the communication" in message and "forward" in message


@pytest.mark.slow
def test_3_1_q1_names_no_sync_on_every_micro_batch():
    assert "drifted apart" in l31.q1.evaluate(_by_hand(no_sync="always")).message


@pytest.mark.slow
def test_3_1_q1_names_a_loss_not_divided_by_k():
    assert "times too large" in l31.q1.evaluate(_by_hand(divide=False)).message


@pytest.mark.slow
def test_3_1_q1_names_a_step_at_every_micro_batch():
    assert "stepped at every micro-batch" in l31.q1.evaluate(_by_hand(step="every")).message


def test_3_1_q1_wants_a_function():
    assert "function itself" in l31.q1.evaluate(4).message


@pytest.mark.slow
def test_3_1_q2_runs_the_learners_loop_in_two_processes():
    def right(model, optimizer, dataset, k):
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        accelerator = Accelerator(gradient_accumulation_steps=k)
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
        for batch in loader:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()

    def plain_backward(model, optimizer, dataset, k):  # the loss is not divided by k
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        accelerator = Accelerator(gradient_accumulation_steps=k)
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
        for batch in loader:
            with accelerator.accumulate(model):
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()

    def loader_not_prepared(model, optimizer, dataset, k):  # every process trains on all the data
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        accelerator = Accelerator(gradient_accumulation_steps=k)
        model, optimizer = accelerator.prepare(model, optimizer)
        for batch in DataLoader(dataset, batch_size=4):
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()

    def no_k(model, optimizer, dataset, k):  # Accelerator() without gradient_accumulation_steps
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        accelerator = Accelerator()
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
        for batch in loader:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()

    assert l31.q2.evaluate(right).status == "correct", l31.q2.evaluate(right).message
    assert "accelerator.backward" in l31.q2.evaluate(plain_backward).message
    assert "prepare" in l31.q2.evaluate(loader_not_prepared).message
    assert "gradient_accumulation_steps" in l31.q2.evaluate(no_k).message
    assert "function itself" in l31.q2.evaluate(42).message


@pytest.mark.slow
def test_3_1_q2_reports_a_failing_function_in_one_line():
    def broken(model, optimizer, dataset, k):
        raise RuntimeError("my bug")

    result = l31.q2.evaluate(broken)
    assert result.status == "incorrect" and re.search(r"rank [01] raised RuntimeError: my bug", result.message)
    assert "\n" not in result.message, "one line"


def test_3_1_q3():
    per, budget = 1000.0, 20 * 1000.0
    assert l31.q3.evaluate((16, 4), per, budget).status == "correct"
    assert "more than" in l31.q3.evaluate((32, 2), per, budget).message
    assert "larger micro-batch" in l31.q3.evaluate((8, 8), per, budget).message
    assert "does not divide 64" in l31.q3.evaluate((20, 3), per, budget).message
    assert "not 64" in l31.q3.evaluate((16, 2), per, budget).message
    assert "pair" in l31.q3.evaluate(16, per, budget).message


def test_3_2_q1_checkpointing_a_transformers_model():
    assert l32.q1.evaluate(lambda model: model.activation_checkpointing_enable()).status == "correct"
    assert "still keeps every activation" in l32.q1.evaluate(lambda model: None).message
    assert "eval mode" in l32.q1.evaluate(lambda model: model.eval()).message
    assert "function itself" in l32.q1.evaluate(True).message


def test_3_2_q1_names_checkpointing_flags_set_by_hand():
    def config_flag(model):
        model.config.gradient_checkpointing = True

    def model_attribute(model):
        model.gradient_checkpointing = True

    def layer_flags(model):
        for module in model.modules():
            if hasattr(module, "gradient_checkpointing"):
                module.gradient_checkpointing = True

    assert "model already built changes nothing" in l32.q1.evaluate(config_flag).message
    assert "attribute no layer reads" in l32.q1.evaluate(model_attribute).message
    assert "set by hand" in l32.q1.evaluate(layer_flags).message


def test_3_2_q2():
    config = DistilBertConfig(n_layers=2, dim=128, n_heads=4, hidden_dim=512)
    assert l32.q2.evaluate(2 * 8 * 64 * 128 * 4, config).status == "correct"
    assert "bytes" in l32.q2.evaluate(2 * 8 * 64 * 128, config).message
    assert "one layer" in l32.q2.evaluate(8 * 64 * 128 * 4, config).message
    assert "config" in l32.q2.evaluate(1, {"n_layers": 2}).message


def test_3_2_q3_checkpointing_a_plain_module():
    from torch.utils.checkpoint import checkpoint

    def right(blocks, x):
        for block in blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x

    def plain(blocks, x):
        for block in blocks:
            x = block(x)
        return x

    def half(blocks, x):  # only the first two blocks checkpointed
        for i, block in enumerate(blocks):
            x = checkpoint(block, x, use_reentrant=False) if i < 2 else block(x)
        return x

    def no_grad(blocks, x):
        with torch.no_grad():
            return plain(blocks, x)

    def skips_a_block(blocks, x):
        return right(blocks[:-1], x)

    assert l32.q3.evaluate(right).status == "correct"
    assert "use_reentrant=False" in l32.q3.evaluate(plain).message
    assert "checkpoint every block" in l32.q3.evaluate(half).message
    assert "no gradient" in l32.q3.evaluate(no_grad).message
    assert "output differs" in l32.q3.evaluate(skips_a_block).message


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
def test_3_1_q2_names_accumulate_without_the_model():  # a mutant of the solution accepted before (issue 41)
    result = l31.q2.evaluate(_accumulation(model_given=False))
    assert result.status == "incorrect" and "give it the prepared model" in result.message, result


@pytest.mark.slow
@pytest.mark.exhaustive
def test_3_1_q2_accepts_a_right_loop_written_another_way():
    result = l31.q2.evaluate(_accumulation(another_way=True))
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


@pytest.mark.slow
@pytest.mark.parametrize("answer, words", [
    pytest.param(_local_sgd(batch_size=5), "the steps took batches of [5] rows; the exercise's batches are 4",
                 marks=pytest.mark.exhaustive),
    (_local_sgd(zero_grad=False), "began with the gradients of earlier batches"),
    pytest.param(_local_sgd(another_way=True), "", marks=pytest.mark.exhaustive),
], ids=["batches-of-5", "no-zero-grad", "right-another-way"])
def test_3_2_q4_names_the_batch_and_zero_grad(answer, words):
    result = l32.q4.evaluate(answer)
    assert (result.status == "correct") == (words == "") and words in result.message, result


@pytest.mark.slow
def test_3_2_q4_counts_the_averages_of_a_local_sgd_loop_in_two_processes():
    def right(model, optimizer, dataset, k):
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

    def plain_ddp(model, optimizer, dataset, k):
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        accelerator = Accelerator()
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(dataset, batch_size=4))
        for batch in loader:
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()

    def no_step(model, optimizer, dataset, k):
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

    assert l32.q4.evaluate(right).status == "correct", l32.q4.evaluate(right).message
    assert "plain data parallelism" in l32.q4.evaluate(plain_ddp).message
    assert "local_sgd.step()" in l32.q4.evaluate(no_step).message


def test_3_3_q1():
    assert l33.q1.evaluate(2**-7).status == "correct"
    assert "float16's gap" in l33.q1.evaluate(torch.finfo(torch.float16).eps).message
    assert "float32's gap" in l33.q1.evaluate(torch.finfo(torch.float32).eps).message


def test_3_3_q2():
    assert l33.smallest_surviving_scale() == 4
    assert l33.q2.evaluate(4).status == "correct"
    assert "smaller power" in l33.q2.evaluate(1024).message
    assert "still rounds to 0" in l33.q2.evaluate(2).message
    assert "power of two" in l33.q2.evaluate(3).message


def test_3_3_q3_a_forward_pass_in_the_hardwares_16_bit_type():
    from effitrain_helpers.training.precision import TORCH_NAME, low_precision

    device = "cuda" if torch.cuda.is_available() else "cpu"
    low = getattr(torch, TORCH_NAME[low_precision()])
    other = torch.float16 if low == torch.bfloat16 else torch.bfloat16

    def right(model, batch):
        with torch.autocast(device_type=device, dtype=low):
            return model(**batch).logits

    def no_autocast(model, batch):
        return model(**batch).logits

    def other_type(model, batch):
        with torch.autocast(device_type=device, dtype=other):
            return model(**batch).logits

    def converted_model(model, batch):
        return model.to(low)(**{k: v.to(low) for k, v in batch.items()}).logits

    def argmax(model, batch):
        with torch.autocast(device_type=device, dtype=low):
            return model(**batch).logits.argmax(-1)

    def model_converted_only(model, batch):  # the case: the model to 16 bits, the inputs left float32
        return model.to(low)(**batch).logits

    def dtype_as_a_string(model, batch):  # the case: the dtype's name, not the torch object
        with torch.autocast(device_type=device, dtype=str(low).split(".")[-1]):
            return model(**batch).logits

    def model_to_a_string(model, batch):
        return model.to(str(low).split(".")[-1])(**batch).logits

    def autocast_by_its_device_module(model, batch):  # right, written another way: torch.autocast's device twin
        with torch.amp.autocast(device, dtype=low):
            return model(**batch).logits

    assert l33.q3.evaluate(right).status == "correct"
    assert l33.q3.evaluate(autocast_by_its_device_module).status == "correct"
    assert "float32 weights" in l33.q3.evaluate(model_converted_only).message
    for as_a_string in (dtype_as_a_string, model_to_a_string):
        result = l33.q3.evaluate(as_a_string)
        assert "not its name in a string" in result.message, result.message
    assert "torch.autocast" in l33.q3.evaluate(no_autocast).message
    wrong_type = l33.q3.evaluate(other_type).message
    assert ("GradScaler" if device == "cpu" and other == torch.float16 else "this hardware") in wrong_type
    assert "float32 weights" in l33.q3.evaluate(converted_model).message
    assert l33.q3.evaluate(argmax).status == "incorrect"


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


def test_3_3_q4_names_an_unscaled_backward():
    assert "unscaled loss" in l33.q4.evaluate(_fp16_step(backward="plain")).message


def test_3_3_q4_names_optimizer_step_instead_of_the_scalers():
    assert "not optimizer.step()" in l33.q4.evaluate(_fp16_step(step="optimizer")).message
    assert "inf batch reached the weights" in l33.q4.evaluate(_fp16_step(step="optimizer", update=False)).message


def test_3_3_q4_names_a_forgotten_update():
    assert "call scaler.update()" in l33.q4.evaluate(_fp16_step(update=False)).message


def test_3_3_q4_names_float16_without_a_scaler():
    assert "never used the scaler" in l33.q4.evaluate(_fp16_step(backward="plain", step="optimizer",
                                                                  update=False)).message


def test_3_3_q4_names_other_mistakes():
    assert "torch.autocast" in l33.q4.evaluate(_fp16_step(autocast=False)).message
    assert "zero the gradients" in l33.q4.evaluate(_fp16_step(zero=False)).message
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


@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 turns autocast on with a GPU")
def test_3_3_q5_names_fp16_on_a_cpu():
    assert "'fp16' on a CPU" in l33.q5.evaluate(_bf16_training(precision="fp16")).message


def test_3_3_q5_names_no_mixed_precision():
    assert "mixed precision is 'no'" in l33.q5.evaluate(_bf16_training(precision=None)).message
    assert "never created an Accelerator" in l33.q5.evaluate(_bf16_training(accelerator=False)).message


def test_3_3_q5_names_the_unprepared_model():
    assert "through accelerator.prepare(model" in l33.q5.evaluate(
        _bf16_training(prepare=("optimizer", "loader"))).message


def test_3_3_q5_names_the_unprepared_loader():
    assert "loader you were given" in l33.q5.evaluate(_bf16_training(prepare=("model", "optimizer"))).message


def test_3_3_q5_names_loss_backward():
    assert "accelerator.backward(loss)" in l33.q5.evaluate(_bf16_training(backward="loss")).message


def test_3_3_q5_names_gradients_left_to_pile_up():
    assert "optimizer.zero_grad() per batch" in l33.q5.evaluate(_bf16_training(zero=False)).message
    assert "function itself" in l33.q5.evaluate(3).message
