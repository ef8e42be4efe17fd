"""Every checker of chapter 2, with known right and known wrong answers."""

from fractions import Fraction

import numpy as np
import pytest
import torch
from transformers import TrainingArguments
from transformers.trainer_utils import IntervalStrategy

from effitrain_helpers.teach.checks import lesson_2_1 as l21
from effitrain_helpers.teach.checks import lesson_2_2 as l22
from effitrain_helpers.teach.checks import lesson_2_3 as l23
from effitrain_helpers.teach.exercises import Spy, ____
from verdicts import mistake, right, speak


EXHAUSTIVE = (pytest.mark.slow, pytest.mark.exhaustive)


def _make_trainer(collator=True, metrics=True, **changes):
    """A q1 answer; ``collator=False`` / ``metrics=False`` and changed arguments make known mistakes."""
    from transformers import DataCollatorWithPadding, Trainer

    from effitrain_helpers.measure.metrics import trainer_metrics

    def make_trainer(model, tokenizer, train_data, eval_data, output_dir):
        base = dict(output_dir=output_dir, num_train_epochs=2, learning_rate=1e-3, per_device_train_batch_size=8,
                    eval_strategy="epoch", logging_strategy="epoch", save_strategy="no", use_cpu=True,
                    report_to="none", disable_tqdm=True)
        args = {**base, **changes}
        if args["output_dir"] is None:  # another folder than the one given (inside it, so nothing is left behind)
            args["output_dir"] = f"{output_dir}/elsewhere"
        args = TrainingArguments(**args)
        return Trainer(model=model, args=args, train_dataset=train_data, eval_dataset=eval_data,
                       data_collator=DataCollatorWithPadding(tokenizer) if collator else None,
                       compute_metrics=trainer_metrics if metrics else None)

    return make_trainer


def _trainer_from_its_processing_class(model, tokenizer, train_data, eval_data, output_dir):
    """Right, written another way: the arguments by position, no data_collator (given the tokenizer as its
    processing_class, Trainer pads with DataCollatorWithPadding itself), the metrics written by hand."""
    from transformers import Trainer

    def accuracy(eval_pred):
        return {"accuracy": float((eval_pred.predictions.argmax(-1) == eval_pred.label_ids).mean())}

    args = TrainingArguments(output_dir, num_train_epochs=2.0, learning_rate=0.001, per_device_train_batch_size=8,
                             eval_strategy="epoch", logging_strategy="epoch", save_strategy="no", use_cpu=True,
                             report_to="none", disable_tqdm=True)
    return Trainer(model, args, train_dataset=train_data, eval_dataset=eval_data, processing_class=tokenizer,
                   compute_metrics=accuracy)


@pytest.mark.parametrize("answer, words", [
    (_make_trainer(), ""),
    mistake("2.1 q1", _make_trainer(collator=False), "cannot batch pairs"),
    mistake("2.1 q1", _make_trainer(metrics=False), "give the Trainer a compute_metrics function"),
    mistake("2.1 q1", _make_trainer(per_device_train_batch_size=16), "took 4 optimizer steps"),
    # each accepted before (mutants of the solution, issue 41); a Trainer trains for seconds: most in test-all
    pytest.param(_make_trainer(per_device_train_batch_size=9), "up to 9 rows", marks=pytest.mark.slow),
    pytest.param(_make_trainer(learning_rate=2e-3), "learning rate 0.002", marks=pytest.mark.slow),
    pytest.param(_make_trainer(logging_strategy="steps"), "logged the training loss 0 time(s)", marks=EXHAUSTIVE),
    pytest.param(_make_trainer(save_strategy="steps"), "saves checkpoints", marks=EXHAUSTIVE),
    pytest.param(_make_trainer(use_cpu=False), "use_cpu", marks=EXHAUSTIVE),
    pytest.param(_make_trainer(output_dir=None), "not the output_dir", marks=EXHAUSTIVE),
    right("2.1 q1", _make_trainer(report_to=[], eval_strategy=IntervalStrategy.EPOCH), "", marks=EXHAUSTIVE),
    right("2.1 q1", _trainer_from_its_processing_class, "", marks=EXHAUSTIVE),
])
def test_2_1_q1_trains_the_learners_trainer(answer, words):
    result = l21.q1.evaluate(answer)
    assert (result.status == "correct") == (words == "") and words in result.message, result


def test_2_1_q1_refuses_what_is_not_a_trainer():
    assert "pass your function itself" in l21.q1.evaluate("Trainer").message
    assert "returned dict" in l21.q1.evaluate(lambda *args: {}).message


def _metrics_answers():
    """2.1 q2's answers by name."""

    def solution(eval_pred):
        logits, labels = eval_pred
        return {"accuracy": float((logits.argmax(-1) == labels).mean())}

    def attributes_and_numpy(eval_pred):  # right, another way: EvalPrediction's attributes, a NumPy float
        return {"accuracy": np.mean(np.argmax(eval_pred.predictions, axis=1) == eval_pred.label_ids)}

    def a_loop(eval_pred):  # right, another way: rows counted one by one
        logits, labels = eval_pred[0], eval_pred[1]
        right = 0
        for row, label in zip(logits, labels):
            right += int(row.argmax() == label)
        return {"accuracy": right / len(labels)}

    def count(eval_pred):
        logits, labels = eval_pred
        return {"accuracy": int((logits.argmax(-1) == labels).sum())}

    def argmin(eval_pred):
        logits, labels = eval_pred
        return {"accuracy": float((logits.argmin(-1) == labels).mean())}

    def wrong_axis(eval_pred):  # the class of each column, not of each row
        logits, labels = eval_pred
        return {"accuracy": float((logits.argmax(0) == labels).mean())}

    def bare_number(eval_pred):
        logits, labels = eval_pred
        return float((logits.argmax(-1) == labels).mean())

    def hard_coded(eval_pred):
        return {"accuracy": 0.75}

    return {f.__name__: f for f in (solution, attributes_and_numpy, a_loop, count, argmin, wrong_axis, bare_number,
                                    hard_coded)}


@pytest.mark.parametrize("name, words", [
    ("solution", ""),
    right("2.1 q2", "attributes_and_numpy", ""),
    right("2.1 q2", "a_loop", ""),
    mistake("2.1 q2", "count", "that is the number of correct rows; divide"),
    mistake("2.1 q2", "argmin", "take argmax(-1), the highest"),
    mistake("2.1 q2", "bare_number", "return a dict with an 'accuracy' key"),
    ("hard_coded", "first test case only"),
])
def test_2_1_q2(name, words):
    result = l21.q2.evaluate(_metrics_answers()[name])
    assert (result.status == "correct") == (words == "") and words in result.message, (name, result)


@pytest.mark.judges("2.1 q2", "mistake")
def test_2_1_q2_names_the_argmax_over_the_wrong_axis_in_both_languages(monkeypatch):
    """Before, NumPy's own error alone ("operands could not be broadcast together")."""
    for lang, words in (("en", "argmax over the last axis, argmax(-1)"), ("pt-BR", "argmax no último eixo")):
        speak(monkeypatch, lang)
        result = l21.q2.evaluate(_metrics_answers()["wrong_axis"])
        assert result.status == "incorrect" and words in result.message, (lang, result)


LABELS_2_1_Q3 = torch.tensor([1] * 6 + [0] * 4)  # as the notebook gives them: a tensor


def _positive_as_a_tensor():
    positive = LABELS_2_1_Q3.float().mean()  # left a 0-d tensor, no float()
    return positive, 2 * positive / (positive + 1)


@pytest.mark.parametrize("answer, words", [
    ((0.6, 0.75), ""),
    right("2.1 q3", _positive_as_a_tensor(), ""),
    right("2.1 q3", [Fraction(6, 10), Fraction(2 * 6, 6 + 10)], ""),  # fractions
    mistake("2.1 q3", (0.6, 0.6), "that is the precision; recall is 1"),
    mistake("2.1 q3", (0.4, 0.75), "always saying 1 is right exactly on the rows labelled 1"),  # the share of 0s
    ((0.6, 0.5), "F1"),
])
def test_2_1_q3(answer, words):
    result = l21.q3.evaluate(answer, LABELS_2_1_Q3)
    assert (result.status == "correct") == (words == "") and words in result.message


@pytest.mark.judges("2.1 q3", "mistake")
def test_2_1_q3_names_the_arithmetic_mean_in_both_languages(monkeypatch):
    for lang, words in (("en", "the arithmetic mean of precision and recall; F1 is their harmonic mean"),
                        ("pt-BR", "a média aritmética da precisão e do recall")):
        speak(monkeypatch, lang)
        result = l21.q3.evaluate((0.6, (0.6 + 1) / 2), LABELS_2_1_Q3)
        assert result.status == "incorrect" and words in result.message, (lang, result)


def _training(prepare_loader=True, prepare_scheduler=True, accelerate_backward=True, scheduler_per_epoch=False,
              train_mode=True):
    """A q1 answer; each flag set to False makes one known mistake."""
    from accelerate import Accelerator

    def my_training(model, optimizer, train_loader, scheduler, epochs):
        accelerator = Accelerator()
        model, optimizer = accelerator.prepare(model, optimizer)
        if prepare_loader:
            train_loader = accelerator.prepare(train_loader)
        if prepare_scheduler:
            scheduler = accelerator.prepare(scheduler)
        if train_mode:
            model.train()
        for _ in range(epochs):
            for batch in train_loader:
                loss = model(**batch).loss
                accelerator.backward(loss) if accelerate_backward else loss.backward()
                optimizer.step()
                if not scheduler_per_epoch:
                    scheduler.step()
                optimizer.zero_grad()
            if scheduler_per_epoch:
                scheduler.step()
        return model

    return my_training


def _make_arguments(**changes):
    """A q4 answer: TrainingArguments for 2 processes with micro-batches of 4; changed arguments make the known
    mistakes."""
    def make_arguments(output_dir):
        base = dict(output_dir=output_dir, per_device_train_batch_size=4, gradient_accumulation_steps=2,
                    use_cpu=True, report_to="none")
        return TrainingArguments(**{**base, **changes})

    return make_arguments


@pytest.mark.slow
@pytest.mark.parametrize("changes, words", [
    ({}, ""),
    # 16 // 4: the processes forgotten
    mistake("2.1 q4", {"gradient_accumulation_steps": 4}, "Divide by the number of processes"),
    mistake("2.1 q4", {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 1},
            "per_device_train_batch_size is per process"),
    mistake("2.1 q4", {"gradient_accumulation_steps": 1}, "no accumulation"),
    ({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}, "fixes the per-device batch at 4"),
    ({"gradient_accumulation_steps": 3}, "(3 micro-batches of 4 x 2 processes), not 16"),
    right("2.1 q4", {"gradient_accumulation_steps": 16 // 4 // 2, "per_device_eval_batch_size": 1}, "",
          marks=pytest.mark.exhaustive),  # the division in another order
    right("2.1 q4", "by position", "", marks=pytest.mark.exhaustive),
])
def test_2_1_q4_trains_the_learners_arguments_in_2_real_processes(changes, words):
    result = l21.q4.evaluate(_make_arguments(**changes) if isinstance(changes, dict) else _arguments_by_position)
    assert (result.status == "correct") == (words == "") and words in result.message, result


def _arguments_by_position(output_dir):
    """Right, written another way: output_dir by position, the accumulation read from a global batch of 16 and
    the world size TrainingArguments does not know yet."""
    per_device, processes = 4, 2
    return TrainingArguments(output_dir, use_cpu=True, per_device_train_batch_size=per_device,
                             gradient_accumulation_steps=16 // (per_device * processes), report_to=[])


@pytest.mark.judges("2.1 q4", "mistake")
def test_2_1_q4_names_use_cpu_left_out_before_it_trains():
    result = l21.q4.evaluate(_make_arguments(use_cpu=False))
    assert result.status == "incorrect" and "use_cpu is left False" in result.message, result


@pytest.mark.judges("2.1 q4", "mistake")
def test_2_1_q4_names_the_output_dir_left_out_before_it_trains():
    def no_output_dir(output_dir):  # the Trainer would write into ./trainer_output
        return TrainingArguments(per_device_train_batch_size=4, gradient_accumulation_steps=2, use_cpu=True)

    result = l21.q4.evaluate(no_output_dir)
    assert result.status == "incorrect" and "not the output_dir your function was given" in result.message, result


def test_2_1_q4_refuses_what_is_not_training_arguments():
    assert "pass your function itself" in l21.q4.evaluate({"per_device_train_batch_size": 4}).message
    result = l21.q4.evaluate(lambda output_dir: {"output_dir": output_dir, "per_device_train_batch_size": 4})
    assert result.status == "incorrect" and "returned dict" in result.message, result


def _training_another_way(model, optimizer, train_loader, scheduler, epochs):
    """A right q1 answer written another way: training mode set before prepare, the loss read by key, gradients
    cleared before each forward, the batches counted with enumerate."""
    from accelerate import Accelerator

    model.train()
    accelerator = Accelerator()
    prepared = accelerator.prepare(model, optimizer, train_loader, scheduler)
    model, optimizer, train_loader, scheduler = prepared
    for _epoch in range(epochs):
        for _step, batch in enumerate(train_loader):
            optimizer.zero_grad(set_to_none=True)
            outputs = model(**batch)
            accelerator.backward(outputs["loss"])
            optimizer.step()
            scheduler.step()
    return model


def _training_prepare_discarded(model, optimizer, train_loader, scheduler, epochs):
    """A q1 mistake: prepare called, what it returned thrown away (the model and loader trained are the originals)."""
    from accelerate import Accelerator

    accelerator = Accelerator()
    accelerator.prepare(model, optimizer, train_loader, scheduler)
    model.train()
    for _ in range(epochs):
        for batch in train_loader:
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return model


@pytest.mark.slow
@pytest.mark.parametrize("flags, words", [
    right("2.2 q1", {}, ""),  # another way: prepare called three times, not once
    mistake("2.2 q1", {"prepare_loader": False}, "each rank should train on its own half; pass the data loader to "
            "accelerator.prepare"),
    mistake("2.2 q1", {"prepare_scheduler": False}, "learning rate ended at 0.25"),
    mistake("2.2 q1", {"accelerate_backward": False}, "never went through accelerator.backward(loss)"),
    mistake("2.2 q1", {"scheduler_per_epoch": True}, "stepped once per epoch"),
    mistake("2.2 q1", {"train_mode": False}, "call model.train()"),
    right("2.2 q1", "another way", "", marks=pytest.mark.exhaustive),
    mistake("2.2 q1", "prepare discarded", "not the model wrapped for DDP: pass the model to accelerator.prepare and "
            "return what prepare gave back", marks=pytest.mark.exhaustive),
])
def test_2_2_q1_runs_the_training_in_2_real_processes(flags, words):
    answer = {"another way": _training_another_way, "prepare discarded": _training_prepare_discarded}
    result = l22.q1.evaluate(_training(**flags) if isinstance(flags, dict) else answer[flags])
    assert (result.status == "correct") == (words == "") and words in result.message, result


def test_2_2_q1_reference_and_plain_mistakes_without_processes():
    """The one-process reference is what a correct DDP run gives (checked above); a non-function is refused."""
    assert "pass your function itself" in l22.q1.evaluate(42).message
    weights = l22._reference_weights()
    assert len(weights) == 2 and weights[0].shape == (2, 6)


def _warmup_training(all_processes=True, warmup_all_processes=True, prepare=True, per_epoch=False, swap=False,
                     step=True, backward=True, zero_grad=True, literal=False):
    """A q2 answer; each flag changed makes one known mistake (``swap``: warm-up and length swapped; ``literal``:
    the number of processes written as 2)."""
    from transformers import get_linear_schedule_with_warmup

    def train_with_warmup(accelerator, model, optimizer, train_loader, epochs):
        per_process = epochs * len(train_loader)
        processes = 2 if literal else accelerator.num_processes
        total = per_process * processes if all_processes else per_process
        warmup = (total if warmup_all_processes else per_process) // 4
        if swap:
            warmup, total = total, warmup
        scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=warmup, num_training_steps=total)
        if prepare:
            scheduler = accelerator.prepare(scheduler)
        for _ in range(epochs):
            for batch in train_loader:
                if backward:
                    accelerator.backward(model(**batch).loss)
                optimizer.step()
                if step and not per_epoch:
                    scheduler.step()
                if zero_grad:
                    optimizer.zero_grad()
            if step and per_epoch:
                scheduler.step()

    return train_with_warmup


@pytest.mark.slow
@pytest.mark.parametrize("flags, words", [
    ({}, ""),
    mistake("2.2 q2", {"all_processes": False, "warmup_all_processes": False},
            "reached 0 after 8 of 16 optimizer steps"),
    mistake("2.2 q2", {"per_epoch": True}, "stepped once per epoch"),
    mistake("2.2 q2", {"prepare": False}, "ended at 0.0667, too high (67% of its peak instead of 0): the scheduler was "
            "not passed"),
    ({"swap": True}, "the warm-up is longer than the run"),
    ({"warmup_all_processes": False}, "the warm-up lasted 2 optimizer step(s), not 4"),
    ({"prepare": False, "all_processes": False, "warmup_all_processes": False}, "reaches 0 on time, but only"),
    ({"step": False}, "never changed"),
    ({"backward": False}, "the weights never changed"),  # a mutant of the solution accepted before (issue 41)
    ({"zero_grad": False}, "began with the gradients of earlier batches"),  # mutants accepted before (issue 41)
    mistake("2.2 q2", {"literal": True}, "right in 2 processes, wrong in 3: the learning rate reached 0 after 8 of 12"),
    right("2.2 q2", "another way", "", marks=pytest.mark.exhaustive),
    right("2.2 q2", "get_scheduler", "", marks=pytest.mark.exhaustive),
])
def test_2_2_q2_reads_the_prepared_schedule_in_2_and_3_real_processes(flags, words):
    answer = {"another way": _warmup_another_way, "get_scheduler": _warmup_by_name}
    result = l22.q2.evaluate(_warmup_training(**flags) if isinstance(flags, dict) else answer[flags])
    assert (result.status == "correct") == (words == "") and words in result.message, result


def _warmup_another_way(accelerator, model, optimizer, train_loader, epochs):
    """A right q2 answer written another way: the lambda schedule by hand, gradients cleared before each forward."""
    from torch.optim.lr_scheduler import LambdaLR

    steps = len(train_loader) * epochs * accelerator.state.num_processes
    warm = int(0.25 * steps)
    schedule = LambdaLR(optimizer, lambda s: s / warm if s < warm else (steps - s) / (steps - warm))
    scheduler = accelerator.prepare(schedule)
    for _ in range(epochs):
        for batch in train_loader:
            optimizer.zero_grad()
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()


def _warmup_by_name(accelerator, model, optimizer, train_loader, epochs):
    """A right q2 answer written another way: transformers' get_scheduler by name, the steps counted in a loop."""
    from transformers import get_scheduler

    total = 0
    for _ in range(epochs * accelerator.num_processes):
        total += len(train_loader)
    scheduler = accelerator.prepare(get_scheduler("linear", optimizer, num_warmup_steps=total // 4,
                                                  num_training_steps=total))
    for _ in range(epochs):
        for batch in train_loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()


def test_2_2_q2_refuses_what_is_not_a_function():
    assert "pass your function itself" in l22.q2.evaluate(564).message
    assert l22.q2.evaluate(____).status == "not attempted"


@pytest.mark.parametrize("answer, words", [
    ({"gradient_aggregation", "parameter_synchronization"}, ""),
    right("2.2 q3", ["parameter_synchronization", "gradient_aggregation"], ""),
    right("2.2 q3", tuple(l22.CHECKS[2:]), ""),  # read from CHECKS
    mistake("2.2 q3", {"gradient_aggregation"}, "one more: if each process steps with its own gradient"),
    mistake("2.2 q3", {"data_sharding", "gradient_aggregation"}, "sharding and replication happen before any gradient"),
    mistake("2.2 q3", set(l22.CHECKS), "sharding and replication happen before any gradient"),  # everything breaks
    ({"speed"}, "not check names"),
])
def test_2_2_q3(answer, words):
    result = l22.q3.evaluate(answer)
    assert (result.status == "correct") == (words == "") and words in result.message


def _predictions(gather="gather_for_metrics", evaluation_mode=True):
    """A q1 answer; ``gather`` names the Accelerator method used (None: no gathering)."""

    def my_predictions(model, loader, accelerator):
        if evaluation_mode:
            model.eval()
        predictions = []
        with torch.no_grad():
            for batch in loader:
                predicted = model(**batch).logits.argmax(-1)
                predictions.append(getattr(accelerator, gather)(predicted) if gather else predicted)
        return torch.cat(predictions)

    return my_predictions


def _predictions_cut_to_the_dataset(model, loader, accelerator):
    """A right q1 answer written another way: a plain gather of each batch, the evened-out repeats cut off at the
    dataset's length (as before gather_for_metrics existed), inference mode, model.train(False)."""
    model.train(False)
    gathered = []
    with torch.inference_mode():
        for batch in loader:
            gathered.append(accelerator.gather(model(**batch).logits).argmax(dim=1))
    return torch.cat(gathered)[:len(loader.dataset)]


def _predictions_as_a_list(model, loader, accelerator):
    """A right q1 answer written another way: a list of ints, extended batch after batch."""
    model.eval()
    classes = []
    for batch in loader:
        with torch.no_grad():
            logits = model(**batch).logits
        classes.extend(int(c) for c in accelerator.gather_for_metrics(logits.argmax(-1)))
    return classes


@pytest.mark.slow
@pytest.mark.parametrize("answer, words", [
    (_predictions(), ""),
    mistake("2.3 q1", _predictions(gather="gather"), "predictions for 37 samples: the processes' last batches were "
            "evened out"),
    mistake("2.3 q1", _predictions(gather=None), "only its own share"),
    mistake("2.3 q1", _predictions(evaluation_mode=False), "switch it to evaluation mode with model.eval()"),
    right("2.3 q1", _predictions_cut_to_the_dataset, "", marks=pytest.mark.exhaustive),
    right("2.3 q1", _predictions_as_a_list, "", marks=pytest.mark.exhaustive),
])
def test_2_3_q1_counts_what_2_real_processes_gathered(answer, words):
    result = l23.q1.evaluate(answer)
    assert (result.status == "correct") == (words == "") and words in result.message, result


def test_2_3_q1_plain_mistakes_and_the_truth():
    assert "pass your function itself" in l23.q1.evaluate("gather").message
    assert len(l23._true_predictions()) == l23.SAMPLES


def _time_steps_with_a_barrier(accelerator, step, n):
    """A right q2 answer written another way: torch.distributed's barrier, time.monotonic, a while loop."""
    import time

    import torch.distributed as dist

    dist.barrier()
    began = time.monotonic()
    done = 0
    while done < n:
        step()
        done += 1
    dist.barrier()
    return (time.monotonic() - began) / done


def _time_steps(wait_at_start=True, wait_at_end=True, per_step=True, clock="perf_counter", calls=0):
    """A q2 answer; ``calls`` adds (or removes) calls of step() to the n asked for."""
    import time

    def my_time_steps(accelerator, step, n):
        if wait_at_start:
            accelerator.wait_for_everyone()
        start = getattr(time, clock)()
        for _ in range(n + calls):
            step()
        if wait_at_end:
            accelerator.wait_for_everyone()
        seconds = getattr(time, clock)() - start
        return seconds / n if per_step else seconds

    return my_time_steps


@pytest.mark.slow
@pytest.mark.parametrize("answer, words", [
    (_time_steps(), ""),
    right("2.3 q2", _time_steps(clock="time"), ""),  # time.time, not perf_counter
    mistake("2.3 q2", _time_steps(wait_at_end=False), "Call accelerator.wait_for_everyone() before stopping the clock"),
    mistake("2.3 q2", _time_steps(wait_at_start=False),
            "Call accelerator.wait_for_everyone() before starting the clock"),
    (_time_steps(wait_at_start=False, wait_at_end=False), "before stopping the clock"),
    mistake("2.3 q2", _time_steps(per_step=False), "that is the total time of the 4 steps; divide it by n"),
    (_time_steps(calls=-1), "called step() 3 time(s) for n=4"),
    right("2.3 q2", _time_steps_with_a_barrier, "", marks=pytest.mark.exhaustive),
])
def test_2_3_q2_times_a_slow_rank_in_2_real_processes(answer, words):
    result = l23.q2.evaluate(answer)
    assert (result.status == "correct") == (words == "") and words in result.message, result


@pytest.mark.parametrize("reported, words", [
    ((0.1, 0.1), ""), ((0.12, 0.11), ""), ((0.005, 0.1), "before stopping the clock"),
    ((0.25, 0.1), "before starting the clock"), ((0.4, 0.4), "divide it by n"),
    ((0.1, 0.05), "both should report"), (("0.1", 0.1), "as a number"),
])
def test_2_3_q2_judges_what_each_rank_reported(reported, words):
    runs = [{"rank": r, "calls": l23.STEPS, "returned": t} for r, t in enumerate(reported)]
    try:
        l23._judge_timings(runs)
        message = ""
    except l23.Incorrect as err:
        message = str(err)
    assert (message == "") == (words == "") and words in message, message


def test_2_3_q2_plain_mistakes():
    assert "pass your function itself" in l23.q2.evaluate(0.1).message


@pytest.mark.parametrize("answer, words", [
    (4.5, ""),
    right("2.3 q3", torch.tensor(3.0) * 2 * 3 / 4, ""),  # a 0-d tensor
    right("2.3 q3", np.float32(9) / 2, ""),  # a NumPy float32
    mistake("2.3 q3", 9.0, "that is sending the whole gradient to every other process"),
    mistake("2.3 q3", 2.25, "that is one of the two phases (reduce-scatter)"),
    (1.0, "2 (N-1)/N"), (3.0, "2 (N-1)/N"),
])
def test_2_3_q3(answer, words):
    result = l23.q3.evaluate(answer, 3.0)
    assert (result.status == "correct") == (words == "") and words in result.message


@pytest.mark.judges("2.3 q3", "mistake")
def test_2_3_q3_names_whole_gradients_sent_2_n_minus_1_times_in_both_languages(monkeypatch):
    for lang, words in (("en", "counts a whole gradient at each of the 2 (N-1) sends"),
                        ("pt-BR", "conta um gradiente inteiro em cada um dos 2 (N-1) envios")):
        speak(monkeypatch, lang)
        result = l23.q3.evaluate(2 * 3 * 3.0, 3.0)
        assert result.status == "incorrect" and words in result.message, (lang, result)


def test_spy_records_only_watched_calls():
    class Target:
        def a(self):
            return 1

        def b(self):
            return 2

        value = 3

    spy = Spy(Target(), watch=("a",))
    assert (spy.a(), spy.b(), spy.value) == (1, 2, 3) and spy.calls == ["a"]
