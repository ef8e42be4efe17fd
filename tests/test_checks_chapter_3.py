"""Every checker of chapter 3, with known right and known wrong answers."""

import torch
from transformers import DistilBertConfig

from effitrain_helpers.teach.checks import lesson_3_1 as l31
from effitrain_helpers.teach.checks import lesson_3_2 as l32
from effitrain_helpers.teach.checks import lesson_3_3 as l33


def test_3_1_q1():
    assert l31.q1.evaluate(4).status == "correct"
    assert "ONE process" in l31.q1.evaluate(8).message
    assert "samples" in l31.q1.evaluate(2).message


def test_3_1_q2():
    def right(model, micro_batches, optimizer, accelerator):
        for batch in micro_batches:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()

    def plain_backward(model, micro_batches, optimizer, accelerator):
        for batch in micro_batches:
            with accelerator.accumulate(model):
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()

    def no_accumulate(model, micro_batches, optimizer, accelerator):
        for batch in micro_batches:
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            optimizer.zero_grad()

    def no_step(model, micro_batches, optimizer, accelerator):
        for batch in micro_batches:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)

    assert l31.q2.evaluate(right).status == "correct"
    assert "accelerator.backward" in l31.q2.evaluate(plain_backward).message
    assert "accumulate" in l31.q2.evaluate(no_accumulate).message
    assert "did not change" in l31.q2.evaluate(no_step).message
    assert "function itself" in l31.q2.evaluate(42).message


def test_3_1_q3():
    from effitrain_helpers.training.efficiency import lesson_batches, lesson_model
    from effitrain_helpers.measure.saved_memory import saved_bytes

    per = saved_bytes(lesson_model(), lesson_batches(1, 4, 64)[0]).activation_bytes / 4
    assert l31.q3.evaluate(32 * per, per).status == "correct"
    assert "one sample" in l31.q3.evaluate(per, per).message
    assert l31.q3.evaluate(16 * per, per).status == "incorrect"
    assert l31.q3.evaluate(32 * 1000.0, 1000.0).status == "incorrect"  # a wrong per-sample figure does not pass


def test_3_2_q1():
    config = DistilBertConfig(n_layers=2, dim=128, n_heads=4, hidden_dim=512)
    assert l32.q1.evaluate(2 * 8 * 64 * 128 * 4, config).status == "correct"
    assert "bytes" in l32.q1.evaluate(2 * 8 * 64 * 128, config).message
    assert "one layer" in l32.q1.evaluate(8 * 64 * 128 * 4, config).message
    assert "config" in l32.q1.evaluate(1, {"n_layers": 2}).message


def test_3_2_q2():
    assert l32.q2.evaluate(13).status == "correct"
    assert "__exit__" not in l32.q2.evaluate(12).message and "ends" in l32.q2.evaluate(12).message
    assert l32.q2.evaluate(100).status == "incorrect"


def test_3_2_q3():
    p = 1000
    assert l32.q3.evaluate(7 * p, p, 7 * p).status == "correct"
    assert "measured" in l32.q3.evaluate(7 * p, p, 6 * p).message
    assert "every step" in l32.q3.evaluate(24 * p, p, 7 * p).message
    assert "closing" in l32.q3.evaluate(6 * p, p, 7 * p).message


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


def test_3_3_q3():
    def right(model, batch):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            return model(**batch).logits

    def no_autocast(model, batch):
        return model(**batch).logits

    def cast_input(model, batch):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            return model(**batch).logits.argmax(-1)

    assert l33.q3.evaluate(right).status == "correct"
    assert "torch.autocast" in l33.q3.evaluate(no_autocast).message
    assert l33.q3.evaluate(cast_input).status == "incorrect"
