"""Every checker of chapter 4, with known right and known wrong answers."""

import math
import tempfile

import pytest
import torch
from transformers import Adafactor, TrainingArguments

from effitrain_helpers.teach.checks import lesson_4_1 as l41
from effitrain_helpers.teach.checks import lesson_4_2 as l42
from effitrain_helpers.teach.checks import lesson_4_3 as l43
from effitrain_helpers.teach.exercises import ____


def _status(exercise, *answers):
    return exercise.evaluate(*answers)


def _state_bytes(model, keys=("exp_avg", "exp_avg_sq"), trainable_only=True, step=True):
    params = [p for p in model.parameters() if p.requires_grad or not trainable_only]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer = torch.optim.AdamW(params)
    if step:
        optimizer.step()
    return sum(s[k].numel() * s[k].element_size() for s in optimizer.state.values() for k in keys)


def test_4_1_q1_state_bytes_right():
    assert _status(l41.q1, _state_bytes).status == "correct"
    assert "frozen part" in _status(l41.q1, _state_bytes).message
    assert _status(l41.q1, ____).status == "not attempted"


def test_4_1_q1_counts_step():
    message = _status(l41.q1, lambda m: _state_bytes(m, keys=("exp_avg", "exp_avg_sq", "step"))).message
    assert "`step` counters" in message


def test_4_1_q1_one_copy():
    assert "one copy" in _status(l41.q1, lambda m: 4 * sum(p.numel() for p in m.parameters())).message


def test_4_1_q1_counts_frozen_parameters():
    assert "frozen" in _status(l41.q1, lambda m: _state_bytes(m, trainable_only=False)).message
    assert "frozen" in _status(l41.q1, lambda m: 8 * sum(p.numel() for p in m.parameters())).message


def test_4_1_q1_values_not_bytes():
    values = lambda m: sum(p.numel() for p in m.parameters() if p.requires_grad)  # noqa: E731
    assert "bytes, not values" in _status(l41.q1, lambda m: 2 * values(m)).message
    assert "bytes, not values" in _status(l41.q1, values).message


def test_4_1_q1_no_step_taken():
    assert "first optimizer.step()" in _status(l41.q1, lambda m: _state_bytes(m, step=False)).message


def test_4_1_q1_hard_coded():
    right = _state_bytes(l41.q1_model())
    assert "not be written in" in _status(l41.q1, lambda m: right).message
    assert "not be written in" in _status(l41.q1, lambda m: 530_720).message  # near miss, still the same number


def test_4_1_q1_float32_assumed():
    message = _status(l41.q1, lambda m: 8 * sum(p.numel() for p in m.parameters() if p.requires_grad)).message
    assert "float64" in message


def test_4_1_q1_not_a_function_or_not_a_number():
    assert "function itself" in _status(l41.q1, 528_640).message
    assert _status(l41.q1, lambda m: "lots").status == "incorrect"


def _by_hand(p, grads, bias_correction=True, coupled=False):
    b1, b2 = l41.BETAS
    m = v = 0.0
    out = []
    for t, g in enumerate(grads, start=1):
        if coupled:
            g = g + l41.WEIGHT_DECAY * p
        else:
            p = p * (1 - l41.LR * l41.WEIGHT_DECAY)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mh, vh = (m / (1 - b1**t), v / (1 - b2**t)) if bias_correction else (m, v)
        p = p - l41.LR * mh / (math.sqrt(vh) + l41.EPS)
        out.append(p)
    return out


def test_4_1_q2_adamw_by_hand():
    assert _status(l41.q2, _by_hand).status == "correct"
    assert "bias correction" in _status(l41.q2, lambda p, g: _by_hand(p, g, bias_correction=False)).message
    assert "L2" in _status(l41.q2, lambda p, g: _by_hand(p, g, coupled=True)).message
    assert "one parameter value per step" in _status(l41.q2, lambda p, g: 0.0).message
    assert "torch.optim.AdamW gives" in _status(l41.q2, lambda p, g: [p] * len(g)).message
    assert "function itself" in _status(l41.q2, 3.0).message


def test_4_1_q2_right_written_another_way_and_eps_on_the_wrong_side():
    def with_torch(p, grads):  # right, another way: torch's own AdamW on a one-value tensor
        w = torch.tensor([p], dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.AdamW([w], lr=l41.LR, betas=l41.BETAS, eps=l41.EPS, weight_decay=l41.WEIGHT_DECAY)
        values = []
        for g in grads:
            w.grad = torch.tensor([g], dtype=torch.float64)
            optimizer.step()
            values.append(w.item())
        return values

    def eps_subtracted(p, grads):  # a mutant accepted before (issue 41): the checker's gradients were all >> eps
        b1, b2 = l41.BETAS
        m = v = 0.0
        out = []
        for t, g in enumerate(grads, start=1):
            p = p * (1 - l41.LR * l41.WEIGHT_DECAY)
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            p = p - l41.LR * (m / (1 - b1**t)) / (math.sqrt(v / (1 - b2**t)) - l41.EPS)
            out.append(p)
        return out

    assert _status(l41.q2, with_torch).status == "correct"
    assert "torch.optim.AdamW gives" in _status(l41.q2, eps_subtracted).message


def _groups(model, weight_decay=l41.Q3_WEIGHT_DECAY, no_decay=lambda n: n.endswith("bias") or "norm" in n, cls=None,
            lr=l41.Q3_LR):
    decay = [p for n, p in model.named_parameters() if not no_decay(n)]
    rest = [p for n, p in model.named_parameters() if no_decay(n)]
    return (cls or torch.optim.AdamW)([{"params": decay, "weight_decay": weight_decay},
                                       {"params": rest, "weight_decay": 0.0}], lr=lr)


def test_4_1_q3_parameter_groups_judged_by_one_real_step():
    assert _status(l41.q3, _groups).status == "correct"
    assert _status(l41.q3, lambda m: _groups(m, cls=lambda groups, lr: torch.optim.AdamW(  # right, another way
        [{**g, "lr": lr} for g in groups]))).status == "correct"  # the learning rate in each group
    everything = _status(l41.q3, lambda m: torch.optim.AdamW(m.parameters(), lr=l41.Q3_LR, weight_decay=0.05))
    assert "linear.bias was decayed" in everything.message
    only_bias = _status(l41.q3, lambda m: _groups(m, no_decay=lambda n: n.endswith("bias")))
    assert "norm.weight was decayed" in only_bias.message
    assert "was not decayed" in _status(l41.q3, lambda m: _groups(m, weight_decay=0.0)).message
    assert "0.1" in _status(l41.q3, lambda m: _groups(m, weight_decay=0.1)).message
    assert "lr=0.002" in _status(l41.q3, lambda m: _groups(m, lr=1e-2)).message
    no_lr = _status(l41.q3, lambda m: _groups(m, cls=lambda groups, lr: torch.optim.AdamW(groups)))  # issue 41:
    assert "use lr=0.002" in no_lr.message  # the default (1e-3) was the exercise's rate, and this passed
    default_decay = _status(l41.q3, lambda m: _groups(m, weight_decay=0.01))  # torch's default: passed before
    assert "decayed with weight_decay 0.01" in default_decay.message
    assert "L2" in _status(l41.q3, lambda m: _groups(m, cls=torch.optim.Adam)).message
    assert "SGD" in _status(l41.q3, lambda m: torch.optim.SGD(m.parameters(), lr=l41.Q3_LR)).message
    missing = _status(l41.q3, lambda m: torch.optim.AdamW([p for n, p in m.named_parameters() if "norm" not in n]))
    assert "did not move" in missing.message and "norm.weight" in missing.message
    assert "function itself" in _status(l41.q3, 3).message
    assert "torch optimizer" in _status(l41.q3, lambda m: None).message

    def starter(model):
        return ____

    assert _status(l41.q3, starter).status == "not attempted"


def test_4_2_q1_second_moment_numel():
    def right(shape):
        return shape[0] if len(shape) < 2 else math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1]

    assert _status(l42.q1, right).status == "correct"
    assert "what Adam keeps" in _status(l42.q1, lambda s: math.prod(s)).message
    assert "rows and" in _status(l42.q1, lambda s: s[0] if len(s) < 2 else s[0] * 2).message
    assert "leading dimensions" in _status(l42.q1, lambda s: s[0] if len(s) < 2 else s[-2] + s[-1]).message
    assert "cannot be factored" in _status(l42.q1, lambda s: 1 if len(s) < 2 else right(s)).message


def test_4_2_q2_adafactor_judged_by_three_real_steps():
    def build(**options):
        settings = dict(lr=1e-3, scale_parameter=False, relative_step=False, warmup_init=False) | options
        return lambda params: Adafactor(params, **settings)

    assert _status(l42.q2, build()).status == "correct"
    assert "chose itself" in _status(l42.q2, lambda params: Adafactor(params)).message
    assert "refused a learning rate" in _status(l42.q2, lambda params: Adafactor(params, lr=1e-3)).message
    assert "chose itself" in _status(l42.q2, build(scale_parameter=True)).message
    assert "lr=0.01" in _status(l42.q2, build(lr=1e-2)).message
    assert "first moment" in _status(l42.q2, build(beta1=0.9)).message
    assert "differ" in _status(l42.q2, build(weight_decay=0.1)).message
    assert "transformers.Adafactor" in _status(l42.q2, lambda params: torch.optim.AdamW(params)).message
    assert "function itself" in _status(l42.q2, build()(torch.nn.Linear(2, 2).parameters())).message


def _adafactor_bytes(model, beta1=l42.Q3_BETA1, trainable_only=True, step=True, count=None):
    """A learner's adafactor_state_bytes: right by default, each keyword one slip."""
    params = [p for p in model.parameters() if p.requires_grad or not trainable_only]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer = Adafactor(params, lr=l42.Q3_LR, beta1=beta1, scale_parameter=False, relative_step=False,
                          warmup_init=False)
    if step:
        optimizer.step()
    count = count or (lambda t: t.numel() * t.element_size())
    return sum(count(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))


def test_4_2_q3_state_bytes_right():
    result = _status(l42.q3, _adafactor_bytes)
    assert result.status == "correct" and "3-D weight" in result.message
    assert _status(l42.q3, ____).status == "not attempted"

    def starter(model):
        return ____

    assert _status(l42.q3, starter).status == "not attempted"


def test_4_2_q3_agrees_with_the_theory_from_shapes():
    from effitrain_helpers.measure.optimizer_memory import adafactor_state_bytes

    for make in l42.CHECK_MODELS:
        assert _adafactor_bytes(make()) == adafactor_state_bytes(make(), beta1=l42.Q3_BETA1)


def test_4_2_q3_no_step_taken():
    assert "first optimizer.step()" in _status(l42.q3, lambda m: _adafactor_bytes(m, step=False)).message


def test_4_2_q3_adamw_count():
    trainable = lambda m: [p for p in m.parameters() if p.requires_grad]  # noqa: E731
    assert "AdamW's count" in _status(l42.q3, lambda m: 8 * sum(p.numel() for p in trainable(m))).message
    from effitrain_helpers.measure.optimizer_memory import state_bytes

    def real_adamw(model):
        for p in trainable(model):
            p.grad = torch.zeros_like(p)
        optimizer = torch.optim.AdamW(trainable(model))
        optimizer.step()
        return state_bytes(optimizer)  # step tensors included

    assert "AdamW's count" in _status(l42.q3, real_adamw).message


def test_4_2_q3_beta1_not_set():
    assert "no exp_avg" in _status(l42.q3, lambda m: _adafactor_bytes(m, beta1=None)).message


def test_4_2_q3_values_not_bytes():
    assert "bytes, not values" in _status(l42.q3, lambda m: _adafactor_bytes(m, count=torch.numel)).message


def test_4_2_q3_counts_frozen_parameters():
    assert "frozen" in _status(l42.q3, lambda m: _adafactor_bytes(m, trainable_only=False)).message


def test_4_2_q3_rms_left_out():
    no_rms = lambda m: _adafactor_bytes(m) - 4 * sum(1 for p in m.parameters() if p.requires_grad)  # noqa: E731
    assert "RMS is in the state too" in _status(l42.q3, no_rms).message


def test_4_2_q3_step_is_not_a_tensor():
    def every_value(model):
        for p in model.parameters():
            p.grad = torch.zeros_like(p) if p.requires_grad else None
        optimizer = Adafactor([p for p in model.parameters() if p.requires_grad], lr=1e-3, beta1=0.9,
                              relative_step=False)
        optimizer.step()
        return sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values())

    assert "Python int" in _status(l42.q3, every_value).message


def test_4_2_q3_hard_coded_and_not_a_function():
    assert "not be written in" in _status(l42.q3, lambda m: 67_336).message
    assert "function itself" in _status(l42.q3, 67_336).message
    assert "not it for" in _status(l42.q3, lambda m: 1 + _adafactor_bytes(m)).message
    assert _status(l42.q3, lambda m: "lots").status == "incorrect"


def test_4_3_q2_8bit_bytes():
    def right(n):
        return 8 * n if n < 4096 else 2 * n + 8 * math.ceil(n / 256)

    assert _status(l43.q2, right).status == "correct"
    assert "absmax" in _status(l43.q2, lambda n: 8 * n if n < 4096 else 2 * n).message
    assert "round the number" in _status(l43.q2, lambda n: 8 * n if n < 4096 else 2 * n + 8 * (n // 256)).message
    assert "under min_8bit_size" in _status(l43.q2, lambda n: 2 * n + 8 * math.ceil(n / 256)).message


def test_4_3_q2_agrees_with_bitsandbytes():
    pytest.importorskip("bitsandbytes")
    from effitrain_helpers.training.optimizer_compare import make_optimizer
    from effitrain_helpers.measure.optimizer_memory import BNB_QMAP_BYTES, state_bytes

    for n in (4095, 5000):
        p = torch.nn.Parameter(torch.randn(n))
        optimizer = make_optimizer("adamw8bit", [p], lr=1e-3)
        p.grad = torch.randn(n)
        optimizer.step()
        maps = BNB_QMAP_BYTES if n >= 4096 else 0
        assert state_bytes(optimizer) == l43.adamw8bit_tensor_bytes(n) + maps


def test_4_3_q3_names_in_32_bit():
    assert _status(l43.q3, {"0.bias", "1.weight", "1.bias"}).status == "correct"
    assert "4096 values" in _status(l43.q3, {"0.weight", "0.bias", "1.weight", "1.bias"}).message
    assert "not the length" in _status(l43.q3, {"0.bias", "1.weight", "1.bias", "2.weight"}).message
    assert "missing" in _status(l43.q3, {"0.bias"}).message
    assert "not parameter names" in _status(l43.q3, {"fc.bias"}).message
    assert "set of parameter names" in _status(l43.q3, "0.bias").message


def _adamw8bit_state(layer, cls=None, step=True, count=None, lr=1e-3, **options):
    import bitsandbytes as bnb

    from effitrain_helpers.measure.optimizer_memory import state_bytes

    optimizer = (cls or bnb.optim.AdamW8bit)(layer.parameters(), lr=lr, **options)
    if step:
        layer(torch.randn(4, 256)).sum().backward()
        optimizer.step()
    return optimizer, state_bytes(optimizer) if count is None else count


def test_4_3_q4_adamw8bit_judged_by_its_state():
    pytest.importorskip("bitsandbytes")
    import bitsandbytes as bnb

    assert _status(l43.q4, _adamw8bit_state).status == "correct"
    assert "state is empty" in _status(l43.q4, lambda layer: _adamw8bit_state(layer, step=False)).message
    assert "not uint8" in _status(l43.q4, lambda layer: _adamw8bit_state(layer, cls=torch.optim.AdamW)).message
    assert "not uint8" in _status(l43.q4, lambda layer: _adamw8bit_state(layer, cls=bnb.optim.AdamW,
                                                                          optim_bits=32)).message
    assert "bias" in _status(l43.q4, lambda layer: _adamw8bit_state(layer, min_8bit_size=16)).message
    assert "measured_bytes=32,768" in _status(l43.q4, lambda layer: _adamw8bit_state(layer, count=32768)).message
    assert "two things" in _status(l43.q4, lambda layer: _adamw8bit_state(layer)[0]).message
    assert "function itself" in _status(l43.q4, 3).message
    assert "asks for 1e-3" in _status(l43.q4, lambda layer: _adamw8bit_state(layer, lr=2e-3)).message  # issue 41

    def counted_by_hand(layer):  # right, another way: its own batch, the state's bytes added up by hand
        optimizer = bnb.optim.AdamW8bit(list(layer.parameters()), 1e-3)
        torch.nn.functional.mse_loss(layer(torch.ones(8, 256)), torch.zeros(8, 64)).backward()
        optimizer.step()
        return optimizer, sum(t.numel() * t.element_size() for state in optimizer.state.values()
                              for t in state.values() if torch.is_tensor(t) and t.dim() > 0)

    assert _status(l43.q4, counted_by_hand).status == "correct", _status(l43.q4, counted_by_hand).message


def test_4_3_q4_without_bitsandbytes_is_skipped_with_the_reason(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # `import bitsandbytes` raises ImportError
    result = _status(l43.q4, _adamw8bit_state)
    assert result.status == "not attempted" and "not checked here" in result.message
    assert "cannot be imported" in result.message

    def starter(layer):
        return ____

    assert "still contains ____" in _status(l43.q4, starter).message


def test_4_3_q5_trainer_args():
    base = dict(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to="none", learning_rate=1e-3)
    assert _status(l43.q5, TrainingArguments(optim="adamw_bnb_8bit", weight_decay=0.01, **base)).status == "correct"
    assert "adamw_bnb_8bit" in _status(l43.q5, TrainingArguments(optim="adamw_torch", weight_decay=0.01, **base)).message
    assert "weight_decay" in _status(l43.q5, TrainingArguments(optim="adamw_bnb_8bit", **base)).message
    assert "TrainingArguments object" in _status(l43.q5, {"optim": "adamw_bnb_8bit"}).message
    right = dict(optim="adamw_bnb_8bit", weight_decay=0.01, learning_rate=1e-3)
    another_way = TrainingArguments(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], optim="adamw_8bit",
                                    weight_decay=1e-2, learning_rate=0.001)  # right, written another way
    assert _status(l43.q5, another_way).status == "correct"
    on_gpu = TrainingArguments(output_dir=tempfile.mkdtemp(), report_to="none", **right)  # issue 41: passed
    assert "use_cpu is left False" in _status(l43.q5, on_gpu).message
    tracked = TrainingArguments(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to="none_", **right)
    assert "reports to no tracker" in _status(l43.q5, tracked).message


def _builder(adamw=None, adafactor=None, adamw8bit=None, unknown=None):
    """A learner's build_optimizer: the right one (the notebook's solution) unless a branch is replaced."""
    def build(name, params, lr):
        if name == "adamw":
            return adamw(params, lr) if adamw else torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
        if name == "adafactor":
            return (adafactor(params, lr) if adafactor else
                    Adafactor(params, lr=lr, scale_parameter=False, relative_step=False, weight_decay=0.01))
        if name == "adamw8bit":
            import bitsandbytes as bnb

            return adamw8bit(params, lr) if adamw8bit else bnb.optim.AdamW8bit(params, lr=lr, weight_decay=0.01)
        if unknown:
            return unknown(name)
        raise ValueError(f"unknown optimizer {name!r}: choose adamw, adafactor or adamw8bit")

    return build


def test_4_3_q1_build_optimizer_right_and_starter():
    assert _status(l43.q1, _builder()).status == "correct"
    assert "3 steps" in _status(l43.q1, _builder()).message

    def starter(name, params, lr):
        if name == "adamw":
            return ____
        raise ____

    assert _status(l43.q1, starter).status == "not attempted"
    assert "function itself" in _status(l43.q1, _builder()("adamw", [torch.nn.Parameter(torch.ones(1))], 1e-3)).message


@pytest.mark.parametrize("mistake, wrong, said", [
    ("Adafactor given lr with relative_step at its default",
     dict(adafactor=lambda ps, lr: Adafactor(ps, lr=lr, scale_parameter=False, weight_decay=0.01)), "relative_step"),
    ("Adafactor's parameter scaling left on",
     dict(adafactor=lambda ps, lr: Adafactor(ps, lr=lr, relative_step=False, weight_decay=0.01)), "scale_parameter"),
    ("Adafactor's weight decay left at its default",
     dict(adafactor=lambda ps, lr: Adafactor(ps, lr=lr, scale_parameter=False, relative_step=False)),
     "Adafactor's default is 0.0"),
    ("Adam with coupled weight decay",
     dict(adamw=lambda ps, lr: torch.optim.Adam(ps, lr=lr, weight_decay=0.01)), "torch.optim.Adam"),
    ("a fixed learning rate", dict(adamw=lambda ps, lr: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01)),
     "use the lr argument"),
    ("the rate the checker named, hard-coded",
     dict(adamw=lambda ps, lr: torch.optim.AdamW(ps, lr=l43.Q1_RATES[0], weight_decay=0.01)), "use the lr argument"),
    ("other settings changed", dict(adamw=lambda ps, lr: torch.optim.AdamW(ps, lr=lr, betas=(0.8, 0.99))),
     "differs from the lesson's"),
    ("AdamW without weight decay", dict(adamw=lambda ps, lr: torch.optim.AdamW(ps, lr=lr, weight_decay=0.0)),
     "all three use 0.01"),
    ("Adafactor's warmup_init without its own step size",
     dict(adafactor=lambda ps, lr: Adafactor(ps, lr=lr, scale_parameter=False, relative_step=False,
                                             warmup_init=True, weight_decay=0.01)), "leave warmup_init"),
    ("Adam with decoupled weight decay",
     dict(adamw=lambda ps, lr: torch.optim.Adam(ps, lr=lr, weight_decay=0.01, decoupled_weight_decay=True)),
     "decoupled_weight_decay=True does AdamW's update"),
    ("Adafactor with a first moment",
     dict(adafactor=lambda ps, lr: Adafactor(ps, lr=lr, scale_parameter=False, relative_step=False, beta1=0.0,
                                             weight_decay=0.01)), "leave beta1 at None"),
    ("every optimizer built at once on one generator", dict(adafactor=lambda ps, lr: {
        "adamw": torch.optim.AdamW(ps, lr=lr), "adafactor": Adafactor(ps, lr=lr, scale_parameter=False,
                                                                       relative_step=False)}["adafactor"]),
     "used it up"),
    ("torch's Adafactor", dict(adafactor=lambda ps, lr: torch.optim.Adafactor(ps, lr=lr, weight_decay=0.01)),
     "transformers.Adafactor"),
    ("the wrong class", dict(adafactor=lambda ps, lr: torch.optim.AdamW(ps, lr=lr, weight_decay=0.01)),
     "the comparison's is transformers"),
    ("no optimizer returned", dict(adamw=lambda ps, lr: None), "not an optimizer"),
    ("an unknown name returns None", dict(unknown=lambda name: None), "should raise ValueError"),
    ("an unknown name raises a bare KeyError", dict(unknown=lambda name: {}[name]), "KeyError"),
    ("an unknown name's error does not name it", dict(unknown=lambda name: (_ for _ in ()).throw(ValueError("bad"))),
     "does not name 'sgd'"),
])
def test_4_3_q1_build_optimizer_names_each_mistake(mistake, wrong, said):
    result = _status(l43.q1, _builder(**wrong))
    assert result.status == "incorrect" and said in result.message, (mistake, result.message)


def test_4_3_q1_weight_decay_message_names_adafactor_only_for_adafactor():
    adamw = _status(l43.q1, _builder(adamw=lambda ps, lr: torch.optim.AdamW(ps, lr=lr, weight_decay=0.0))).message
    adafactor = _status(l43.q1, _builder(
        adafactor=lambda ps, lr: Adafactor(ps, lr=lr, scale_parameter=False, relative_step=False))).message
    assert "Adafactor" not in adamw and "transformers.Adafactor's default is 0.0" in adafactor


def test_4_3_q1_the_lessons_own_builder_is_not_an_answer():
    from effitrain_helpers.training.optimizer_compare import make_optimizer

    def build_optimizer(name, params, lr):
        return make_optimizer(name, params, lr)

    assert "write the three constructors yourself" in _status(l43.q1, build_optimizer).message


def test_4_3_q1_a_32bit_adamw_for_8bit_is_named():
    bnb = pytest.importorskip("bitsandbytes")
    wrong = _builder(adamw8bit=lambda ps, lr: bnb.optim.AdamW(ps, lr=lr, weight_decay=0.01))
    assert "32-bit" in _status(l43.q1, wrong).message
    assert "32-bit" in _status(l43.q1, _builder(adamw8bit=lambda ps, lr: torch.optim.AdamW(ps, lr=lr))).message
    eight_bits = _builder(adamw8bit=lambda ps, lr: bnb.optim.AdamW(ps, lr=lr, optim_bits=8, weight_decay=0.01))
    assert _status(l43.q1, eight_bits).status == "correct"  # the same optimizer by another name
    paged = _builder(adamw8bit=lambda ps, lr: bnb.optim.PagedAdamW8bit(ps, lr=lr, weight_decay=0.01))
    assert _status(l43.q1, paged).status == "correct"


def test_4_3_q1_another_8bit_optimizer_is_named():
    bnb = pytest.importorskip("bitsandbytes")
    adam8 = _status(l43.q1, _builder(adamw8bit=lambda ps, lr: bnb.optim.Adam8bit(ps, lr=lr, weight_decay=0.01)))
    assert "bitsandbytes.optim.AdamW8bit" in adam8.message and "Adam8bit defaults to weight_decay=0" in adam8.message
    lion = _status(l43.q1, _builder(adamw8bit=lambda ps, lr: bnb.optim.Lion8bit(ps, lr=lr, weight_decay=0.01)))
    assert "the comparison's is bitsandbytes.optim.AdamW8bit" in lion.message


def test_answer_or_hands_on_the_answer_only_once_it_is_correct(capsys):
    from effitrain_helpers.training.optimizer_compare import make_optimizer

    right = _builder()
    assert l43.q1.answer_or(right, make_optimizer) is right
    assert "Correct (4.3 q1" in capsys.readouterr().out

    def starter(name, params, lr):
        return ____

    assert l43.q1.answer_or(starter, make_optimizer) is make_optimizer
    said = capsys.readouterr().out
    assert "Not attempted (4.3 q1" in said and "the lesson's own make_optimizer until" in said
    assert l43.q1.answer_or(_builder(adamw=lambda ps, lr: None), make_optimizer) is make_optimizer
    assert "Incorrect" in capsys.readouterr().out


def test_4_3_q1_without_bitsandbytes_checks_the_other_two(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # `import bitsandbytes` raises ImportError
    assert _status(l43.q1, _builder()).status == "correct"
    assert "Adafactor's default" in _status(l43.q1, _builder(
        adafactor=lambda ps, lr: Adafactor(ps, lr=lr, scale_parameter=False, relative_step=False))).message
