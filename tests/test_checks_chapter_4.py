"""Every checker of chapter 4, with known right and known wrong answers."""

import functools
import math
import tempfile

import pytest
import torch
from transformers import Adafactor, TrainingArguments
from transformers.training_args import OptimizerNames

from effitrain_helpers.teach.checks import lesson_4_1 as l41
from effitrain_helpers.teach.checks import lesson_4_2 as l42
from effitrain_helpers.teach.checks import lesson_4_3 as l43
from effitrain_helpers.teach.exercises import ____
from verdicts import mistake, right


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


def _state_bytes_by_nbytes(model):
    """Right, another way: the trainable parameters through filter(), gradients of ones, an explicit loop adding
    each moment's nbytes."""
    trainable = list(filter(lambda p: p.requires_grad, model.parameters()))
    for p in trainable:
        p.grad = torch.ones_like(p)
    optimizer = torch.optim.AdamW(trainable, lr=0.5)
    optimizer.step()
    total = 0
    for p in trainable:
        total += optimizer.state[p]["exp_avg"].nbytes + optimizer.state[p]["exp_avg_sq"].nbytes
    return total


def _state_bytes_by_storage(model):
    """Right, another way: a real backward on a loss instead of gradients set by hand (the frozen part gets
    none), the bytes of each moment's storage."""
    params = dict(model.named_parameters())
    loss = sum(p.float().pow(2).sum() for p in params.values() if p.requires_grad)
    loss.backward()
    optimizer = torch.optim.AdamW([p for p in params.values() if p.grad is not None])
    optimizer.step()
    return sum(state[key].untyped_storage().nbytes() for state in optimizer.state.values()
               for key in ("exp_avg", "exp_avg_sq"))


@pytest.mark.parametrize("fn", [
    right("4.1 q1", _state_bytes_by_nbytes),
    right("4.1 q1", _state_bytes_by_storage),
], ids=["nbytes-loop", "real-backward-storage"])
def test_4_1_q1_state_bytes_right_another_way(fn):
    result = _status(l41.q1, fn)
    assert result.status == "correct", result.message


@pytest.mark.judges("4.1 q1", "mistake")
def test_4_1_q1_counts_step():
    message = _status(l41.q1, lambda m: _state_bytes(m, keys=("exp_avg", "exp_avg_sq", "step"))).message
    assert "`step` counters" in message


@pytest.mark.judges("4.1 q1", "mistake")
def test_4_1_q1_one_copy():
    assert "one copy" in _status(l41.q1, lambda m: 4 * sum(p.numel() for p in m.parameters())).message


@pytest.mark.judges("4.1 q1", "mistake")
def test_4_1_q1_counts_frozen_parameters():
    assert "frozen" in _status(l41.q1, lambda m: _state_bytes(m, trainable_only=False)).message
    assert "frozen" in _status(l41.q1, lambda m: 8 * sum(p.numel() for p in m.parameters())).message


@pytest.mark.judges("4.1 q1", "mistake")
def test_4_1_q1_values_not_bytes():
    values = lambda m: sum(p.numel() for p in m.parameters() if p.requires_grad)  # noqa: E731
    assert "bytes, not values" in _status(l41.q1, lambda m: 2 * values(m)).message
    assert "bytes, not values" in _status(l41.q1, values).message


@pytest.mark.judges("4.1 q1", "mistake")
def test_4_1_q1_no_step_taken():
    assert "first optimizer.step()" in _status(l41.q1, lambda m: _state_bytes(m, step=False)).message


def test_4_1_q1_hard_coded():
    right = _state_bytes(l41.q1_model())
    assert "not be written in" in _status(l41.q1, lambda m: right).message
    assert "not be written in" in _status(l41.q1, lambda m: 530_720).message  # near miss, still the same number


@pytest.mark.judges("4.1 q1", "mistake")
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
    assert "one parameter value per step" in _status(l41.q2, lambda p, g: 0.0).message
    assert "torch.optim.AdamW gives" in _status(l41.q2, lambda p, g: [p] * len(g)).message
    assert "function itself" in _status(l41.q2, 3.0).message


def _with_torch(p, grads):  # right, another way: torch's own AdamW on a one-value tensor
    w = torch.tensor([p], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.AdamW([w], lr=l41.LR, betas=l41.BETAS, eps=l41.EPS, weight_decay=l41.WEIGHT_DECAY)
    values = []
    for g in grads:
        w.grad = torch.tensor([g], dtype=torch.float64)
        optimizer.step()
        values.append(w.item())
    return values


def _as_torch_writes_it(p, grads):
    """Right, another way: the update as torch's single-tensor AdamW writes it (a step size with the first bias
    correction folded in, the second one's square root dividing sqrt(v)), a while loop with its own counter."""
    b1, b2 = l41.BETAS
    m = v = 0.0
    values, t = [], 0
    while t < len(grads):
        g = grads[t]
        t += 1
        p *= 1 - l41.LR * l41.WEIGHT_DECAY
        m += (g - m) * (1 - b1)
        v = v * b2 + g * g * (1 - b2)
        step_size = l41.LR / (1 - b1**t)
        denominator = math.sqrt(v) / math.sqrt(1 - b2**t) + l41.EPS
        p -= step_size * m / denominator
        values += [p]
    return values


@pytest.mark.parametrize("fn", [
    right("4.1 q2", _with_torch),
    right("4.1 q2", _as_torch_writes_it),
], ids=["torch-adamw", "torch-formula"])
def test_4_1_q2_right_another_way(fn):
    result = _status(l41.q2, fn)
    assert result.status == "correct", result.message


def _slip(p, grads, slip):
    """4.1 q2 by hand with one ``slip``: "t from 0" (enumerate without start=1), "no eps", "eps inside" the
    square root, "eps subtracted", "decay after" the Adam update."""
    b1, b2 = l41.BETAS
    m = v = 0.0
    out = []
    for t, g in enumerate(grads, start=0 if slip == "t from 0" else 1):
        if slip != "decay after":
            p = p * (1 - l41.LR * l41.WEIGHT_DECAY)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        denominator = {"no eps": math.sqrt(v_hat), "eps inside": math.sqrt(v_hat + l41.EPS),
                       "eps subtracted": math.sqrt(v_hat) - l41.EPS}.get(slip, math.sqrt(v_hat) + l41.EPS)
        p = p - l41.LR * m_hat / denominator
        if slip == "decay after":
            p = p - l41.LR * l41.WEIGHT_DECAY * p
        out.append(p)
    return out


@pytest.mark.parametrize("fn, words", [
    mistake("4.1 q2",
            lambda p, g: _by_hand(p, g, bias_correction=False),
            "skipped the bias correction",
            id="no-bias-correction"),
    mistake("4.1 q2", lambda p, g: _by_hand(p, g, coupled=True), "Adam with L2 regularisation", id="adam-l2-coupled"),
    mistake("4.1 q2",
            lambda p, g: _slip(p, g, "decay after"),
            "decay the parameter before the Adam update",
            id="decay-after"),
    mistake("4.1 q2", lambda p, g: _slip(p, g, "eps inside"), "not inside it", id="eps-inside-the-root"),
    mistake("4.1 q2", lambda p, g: _slip(p, g, "eps subtracted"), "not sqrt(v_hat) - eps", id="eps-subtracted"),
    mistake("4.1 q2", lambda p, g: _slip(p, g, "t from 0"), "count the steps from 1", id="t-from-0"),
    mistake("4.1 q2", lambda p, g: _slip(p, g, "no eps"), "eps is what keeps the step finite", id="no-eps"),
])
def test_4_1_q2_names_each_mistake(fn, words):
    result = _status(l41.q2, fn)
    assert result.status == "incorrect" and words in result.message, result.message


@pytest.mark.parametrize("lang, words", [("en", ["count the steps from 1", "not inside it"]),
                                         ("pt-BR", ["conte os passos a partir de 1", "e não dentro dela"])])
def test_4_1_q2_names_t_from_0_and_eps_in_each_language(monkeypatch, lang, words):
    from effitrain_helpers.core.settings import SETTINGS

    monkeypatch.setattr(SETTINGS, "lang", lang)
    said = [_status(l41.q2, lambda p, g: _slip(p, g, slip)).message for slip in ("t from 0", "eps inside")]
    assert all(w in m for w, m in zip(words, said)), said


def _groups(model, weight_decay=l41.Q3_WEIGHT_DECAY, no_decay=lambda n: n.endswith("bias") or "norm" in n, cls=None,
            lr=l41.Q3_LR):
    decay = [p for n, p in model.named_parameters() if not no_decay(n)]
    rest = [p for n, p in model.named_parameters() if no_decay(n)]
    return (cls or torch.optim.AdamW)([{"params": decay, "weight_decay": weight_decay},
                                       {"params": rest, "weight_decay": 0.0}], lr=lr)


def test_4_1_q3_parameter_groups_judged_by_one_real_step():
    assert _status(l41.q3, _groups).status == "correct"
    assert "function itself" in _status(l41.q3, 3).message
    assert "torch optimizer" in _status(l41.q3, lambda m: None).message

    def starter(model):
        return ____

    assert _status(l41.q3, starter).status == "not attempted"


def _groups_by_module_type(model):
    """Right, another way (as Trainer finds them): the weights of Linear and Embedding modules decay, everything
    else (biases, LayerNorm) does not; the decay and the rate set once as the optimizer's defaults."""
    decayed = {id(m.weight) for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))}
    params = list(model.parameters())
    return torch.optim.AdamW([{"params": [p for p in params if id(p) in decayed]},
                              {"params": [p for p in params if id(p) not in decayed], "weight_decay": 0}],
                             lr=2e-3, weight_decay=5e-2)


@pytest.mark.parametrize("make", [
    right("4.1 q3",
          lambda m: _groups(m, cls=lambda groups, lr: torch.optim.AdamW([{**g, "lr": lr} for g in groups])),
          id="the-rate-in-each-group"),
    right("4.1 q3", _groups_by_module_type, id="by-module-type"),
])
def test_4_1_q3_right_another_way(make):
    result = _status(l41.q3, make)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("make, words", [
    mistake("4.1 q3",
            lambda m: torch.optim.AdamW(m.parameters(), lr=l41.Q3_LR, weight_decay=0.05),
            "linear.bias was decayed",
            id="everything-decayed"),
    mistake("4.1 q3",
            lambda m: _groups(m, no_decay=lambda n: n.endswith("bias")),
            "norm.weight was decayed",
            id="layernorm-decayed"),
    pytest.param(lambda m: _groups(m, weight_decay=0.0), "was not decayed", id="no-decay"),
    pytest.param(lambda m: _groups(m, weight_decay=0.1), "0.1", id="another-decay"),
    pytest.param(lambda m: _groups(m, lr=1e-2), "lr=0.002", id="another-rate"),
    mistake("4.1 q3",
            lambda m: _groups(m, cls=lambda groups, lr: torch.optim.AdamW(groups)),
            "use lr=0.002",
            id="no-rate"),  # issue 41: the default was the rate
    mistake("4.1 q3",
            lambda m: _groups(m, weight_decay=0.01),
            "decayed with weight_decay 0.01",
            id="torchs-default-decay"),  # passed before
    mistake("4.1 q3", lambda m: _groups(m, cls=torch.optim.Adam), "L2", id="adam-coupled-decay"),
    pytest.param(lambda m: torch.optim.SGD(m.parameters(), lr=l41.Q3_LR), "SGD", id="sgd"),
    mistake("4.1 q3",
            lambda m: torch.optim.AdamW([p for n, p in m.named_parameters() if "norm" not in n]),
            "norm.weight",
            id="a-parameter-left-out"),
])
def test_4_1_q3_names_each_mistake(make, words):
    result = _status(l41.q3, make)
    assert result.status == "incorrect" and words in result.message, result.message


def _numel_right(shape):
    return shape[0] if len(shape) < 2 else math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1]


def _numel_by_means(shape):  # right, another way: the shapes of the two means, from a tensor of that shape
    full = torch.empty(shape, device="meta")
    if full.dim() == 1:
        return full.numel()
    return full.mean(dim=-1).numel() + full.mean(dim=-2).numel()


def _numel_by_division(shape):  # right, another way: the full size divided by one side, then by the other
    total = math.prod(shape)
    return total if len(shape) == 1 else total // shape[-1] + total // shape[-2]


def test_4_2_q1_second_moment_numel():
    assert _status(l42.q1, _numel_right).status == "correct"


@pytest.mark.parametrize("fn", [
    right("4.2 q1", _numel_by_means),
    right("4.2 q1", _numel_by_division),
], ids=["means-of-a-meta-tensor", "full-size-divided"])
def test_4_2_q1_right_another_way(fn):
    result = _status(l42.q1, fn)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("fn, words", [
    mistake("4.2 q1", lambda s: math.prod(s), "what Adam keeps", id="adams-full-size"),
    pytest.param(lambda s: s[0] if len(s) < 2 else s[0] * 2, "rows and", id="rows-twice"),
    mistake("4.2 q1",
            lambda s: s[0] if len(s) < 2 else s[-2] + s[-1],
            "leading dimensions",
            id="leading-dimensions-dropped"),
    mistake("4.2 q1", lambda s: 1 if len(s) < 2 else _numel_right(s), "cannot be factored", id="a-vector-factored"),
])
def test_4_2_q1_names_each_mistake(fn, words):
    result = _status(l42.q1, fn)
    assert result.status == "incorrect" and words in result.message, result.message


def _adafactor(**options):
    settings = dict(lr=1e-3, scale_parameter=False, relative_step=False, warmup_init=False) | options
    return lambda params: Adafactor(params, **settings)


def test_4_2_q2_adafactor_judged_by_three_real_steps():
    assert _status(l42.q2, _adafactor()).status == "correct"
    assert "function itself" in _status(l42.q2, _adafactor()(torch.nn.Linear(2, 2).parameters())).message


@pytest.mark.parametrize("make", [
    right("4.2 q2",
          lambda params: Adafactor(list(params), 0.001, relative_step=False, scale_parameter=False),
          id="lr-by-position-warmup-init-left-at-default"),
    right("4.2 q2",
          functools.partial(Adafactor, lr=1e-3, beta1=None, scale_parameter=False, relative_step=False,
                                   warmup_init=False, weight_decay=0.0),
          id="functools-partial-defaults-spelled-out"),
])
def test_4_2_q2_right_another_way(make):
    result = _status(l42.q2, make)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("make, words", [
    mistake("4.2 q2", lambda params: Adafactor(params), "chose itself", id="defaults"),
    mistake("4.2 q2",
            lambda params: Adafactor(params, lr=1e-3),
            "refused a learning rate",
            id="lr-with-relative-step"),
    mistake("4.2 q2", _adafactor(scale_parameter=True), "chose itself", id="scale-parameter-left-on"),
    pytest.param(_adafactor(lr=1e-2), "lr=0.01", id="another-rate"),
    mistake("4.2 q2", _adafactor(beta1=0.9), "first moment", id="a-first-moment"),
    pytest.param(_adafactor(weight_decay=0.1), "differ", id="weight-decay"),
    pytest.param(lambda params: torch.optim.AdamW(params), "transformers.Adafactor", id="adamw"),
])
def test_4_2_q2_names_each_mistake(make, words):
    result = _status(l42.q2, make)
    assert result.status == "incorrect" and words in result.message, result.message


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


def _adafactor_bytes_by_nbytes(model):
    """Right, another way: gradients of ones, the options by keyword in another order, isinstance and nbytes in
    an explicit loop."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    for p in trainable:
        p.grad = torch.ones_like(p)
    optimizer = Adafactor(trainable, relative_step=False, warmup_init=False, scale_parameter=False, beta1=0.9,
                          lr=1e-3)
    optimizer.step()
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                total += value.nbytes
    return total


def _adafactor_bytes_by_backward(model):
    """Right, another way: a real backward on a loss (the frozen part gets no gradient and stays out), the
    state's tensors gathered first, then their bytes added."""
    loss = sum(p.pow(2).sum() for p in model.parameters() if p.requires_grad)
    loss.backward()
    with_grad = [p for p in model.parameters() if p.grad is not None]
    optimizer = Adafactor(with_grad, lr=l42.Q3_LR, beta1=l42.Q3_BETA1, scale_parameter=False, relative_step=False)
    optimizer.step()
    tensors = [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("fn", [
    right("4.2 q3", _adafactor_bytes_by_nbytes),
    right("4.2 q3", _adafactor_bytes_by_backward),
], ids=["nbytes-loop", "real-backward"])
def test_4_2_q3_state_bytes_right_another_way(fn):
    result = _status(l42.q3, fn)
    assert result.status == "correct", result.message


def test_4_2_q3_agrees_with_the_theory_from_shapes():
    from effitrain_helpers.measure.optimizer_memory import adafactor_state_bytes

    for make in l42.CHECK_MODELS:
        assert _adafactor_bytes(make()) == adafactor_state_bytes(make(), beta1=l42.Q3_BETA1)


@pytest.mark.judges("4.2 q3", "mistake")
def test_4_2_q3_no_step_taken():
    assert "first optimizer.step()" in _status(l42.q3, lambda m: _adafactor_bytes(m, step=False)).message


@pytest.mark.judges("4.2 q3", "mistake")
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


@pytest.mark.judges("4.2 q3", "mistake")
def test_4_2_q3_beta1_not_set():
    assert "no exp_avg" in _status(l42.q3, lambda m: _adafactor_bytes(m, beta1=None)).message


@pytest.mark.judges("4.2 q3", "mistake")
def test_4_2_q3_values_not_bytes():
    assert "bytes, not values" in _status(l42.q3, lambda m: _adafactor_bytes(m, count=torch.numel)).message


@pytest.mark.judges("4.2 q3", "mistake")
def test_4_2_q3_counts_frozen_parameters():
    assert "frozen" in _status(l42.q3, lambda m: _adafactor_bytes(m, trainable_only=False)).message


@pytest.mark.judges("4.2 q3", "mistake")
def test_4_2_q3_rms_left_out():
    no_rms = lambda m: _adafactor_bytes(m) - 4 * sum(1 for p in m.parameters() if p.requires_grad)  # noqa: E731
    assert "RMS is in the state too" in _status(l42.q3, no_rms).message


@pytest.mark.judges("4.2 q3", "mistake")
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


def _8bit_right(n):
    return 8 * n if n < 4096 else 2 * n + 8 * math.ceil(n / 256)


def test_4_3_q2_8bit_bytes():
    assert _status(l43.q2, _8bit_right).status == "correct"


def _8bit_by_state(n):  # right, another way: state by state, the blocks rounded up by integer division
    if n >= 4096:
        blocks = (n + 255) // 256
        one_state = n * 1 + blocks * 4  # uint8 values and a float32 absmax per block
    else:
        one_state = n * 4
    return 2 * one_state


def _8bit_by_tensors(n):  # right, another way: the bytes of empty tensors shaped as bitsandbytes keeps them
    if n < 4096:
        states = [torch.empty(n, dtype=torch.float32, device="meta")] * 2
    else:
        states = [torch.empty(n, dtype=torch.uint8, device="meta"),
                  torch.empty(-(-n // 256), dtype=torch.float32, device="meta")] * 2
    return sum(t.nbytes for t in states)


@pytest.mark.parametrize("fn", [
    right("4.3 q2", _8bit_by_state),
    right("4.3 q2", _8bit_by_tensors),
], ids=["state-by-state", "meta-tensors"])
def test_4_3_q2_right_another_way(fn):
    result = _status(l43.q2, fn)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("fn, words", [
    mistake("4.3 q2", lambda n: 8 * n if n < 4096 else 2 * n, "add the float32 absmax", id="no-absmax"),
    mistake("4.3 q2",
            lambda n: 8 * n if n < 4096 else 2 * n + 8 * (n // 256),
            "round the number",
            id="blocks-rounded-down"),
    mistake("4.3 q2", lambda n: 2 * n + 8 * math.ceil(n / 256), "under min_8bit_size", id="small-tensors-8-bit"),
    mistake("4.3 q2",
            lambda n: 8 * n,
            "you counted two float32 states (8 bytes a value)",
            id="32-bit-for-every-tensor"),
    mistake("4.3 q2",
            lambda n: 8 * n if n <= 4096 else 2 * n + 8 * math.ceil(n / 256),
            "exactly 4096 values",
            id="boundary-off-by-one"),
    mistake("4.3 q2",
            lambda n: 8 * n if n < 4096 else n + 4 * math.ceil(n / 256),
            "you counted one state",
            id="one-state"),
])
def test_4_3_q2_names_each_mistake(fn, words):
    result = _status(l43.q2, fn)
    assert result.status == "incorrect" and words in result.message, result.message


@pytest.mark.parametrize("lang, words", [("en", "exactly 4096 values"), ("pt-BR", "exatamente 4096 valores")])
def test_4_3_q2_names_the_boundary_in_each_language(monkeypatch, lang, words):
    from effitrain_helpers.core.settings import SETTINGS

    monkeypatch.setattr(SETTINGS, "lang", lang)
    assert words in _status(l43.q2, lambda n: 8 * n if n <= 4096 else _8bit_right(n)).message


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


@pytest.mark.parametrize("answer", [
    right("4.3 q3", ["1.bias", "0.bias", "1.weight"], id="a-list"),
    right("4.3 q3",
          {name: shape for name, shape in l43.Q3_SHAPES.items() if math.prod(shape) <= 4095}.keys(),
          id="a-dicts-keys"),
    right("4.3 q3",
          frozenset(n for n, s in l43.Q3_SHAPES.items() if torch.empty(s, device="meta").numel() < 4096),
          id="a-frozenset"),
])
def test_4_3_q3_right_another_way(answer):
    result = _status(l43.q3, answer)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("answer, words", [
    mistake("4.3 q3", {"0.weight", "0.bias", "1.weight", "1.bias"}, "4096 values", id="exactly-4096-taken-as-under"),
    mistake("4.3 q3", {"0.bias", "1.weight", "1.bias", "2.weight"}, "not the length", id="one-side-under-4096"),
    pytest.param({"0.bias"}, "missing", id="missing"),
    pytest.param({"fc.bias"}, "not parameter names", id="unknown-name"),
    pytest.param("0.bias", "set of parameter names", id="a-string"),
])
def test_4_3_q3_names_each_mistake(answer, words):
    result = _status(l43.q3, answer)
    assert result.status == "incorrect" and words in result.message, result.message


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

    assert _status(l43.q4, _adamw8bit_state).status == "correct"
    assert "two things" in _status(l43.q4, lambda layer: _adamw8bit_state(layer)[0]).message
    assert "function itself" in _status(l43.q4, 3).message


def _counted_by_hand(layer):  # right, another way: its own batch, the state's bytes added up by hand
    import bitsandbytes as bnb

    optimizer = bnb.optim.AdamW8bit(list(layer.parameters()), 1e-3)
    torch.nn.functional.mse_loss(layer(torch.ones(8, 256)), torch.zeros(8, 64)).backward()
    optimizer.step()
    return optimizer, sum(t.numel() * t.element_size() for state in optimizer.state.values()
                          for t in state.values() if torch.is_tensor(t) and t.dim() > 0)


def _eight_bits_by_option(layer):  # right, another way: bitsandbytes' AdamW asked for 8-bit states by option
    import bitsandbytes as bnb

    from effitrain_helpers.measure.optimizer_memory import state_bytes

    optimizer = bnb.optim.AdamW(layer.parameters(), lr=0.001, optim_bits=8)
    layer(torch.randn(2, 256)).pow(2).mean().backward()
    optimizer.step()
    return optimizer, torch.tensor(state_bytes(optimizer))


@pytest.mark.parametrize("fn", [
    right("4.3 q4", _counted_by_hand),
    right("4.3 q4", _eight_bits_by_option),
], ids=["counted-by-hand", "adamw-optim-bits-8"])
def test_4_3_q4_right_another_way(fn):
    pytest.importorskip("bitsandbytes")
    result = _status(l43.q4, fn)
    assert result.status == "correct", result.message


def _bnb(name):
    import bitsandbytes as bnb

    return getattr(bnb.optim, name)


@pytest.mark.parametrize("fn, words", [
    mistake("4.3 q4", lambda layer: _adamw8bit_state(layer, step=False), "state is empty", id="no-step"),
    mistake("4.3 q4",
            lambda layer: _adamw8bit_state(layer, cls=torch.optim.AdamW),
            "not uint8",
            id="torchs-32-bit-adamw"),
    mistake("4.3 q4",
            lambda layer: _adamw8bit_state(layer, cls=_bnb("AdamW"), optim_bits=32),
            "not uint8",
            id="bitsandbytes-32-bit-adamw"),
    pytest.param(lambda layer: _adamw8bit_state(layer, min_8bit_size=16), "bias", id="min-8bit-size-changed"),
    mistake("4.3 q4",
            lambda layer: _adamw8bit_state(layer, count=32768),
            "measured_bytes=32,768",
            id="uint8-values-only"),
    pytest.param(lambda layer: _adamw8bit_state(layer, lr=2e-3), "asks for 1e-3", id="another-rate"),  # issue 41
])
def test_4_3_q4_names_each_mistake(fn, words):
    pytest.importorskip("bitsandbytes")
    result = _status(l43.q4, fn)
    assert result.status == "incorrect" and words in result.message, result.message


def test_4_3_q4_without_bitsandbytes_is_skipped_with_the_reason(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # `import bitsandbytes` raises ImportError
    result = _status(l43.q4, _adamw8bit_state)
    assert result.status == "not attempted" and "not checked here" in result.message
    assert "cannot be imported" in result.message

    def starter(layer):
        return ____

    assert "still contains ____" in _status(l43.q4, starter).message


def _args(**settings):
    return TrainingArguments(**{"output_dir": tempfile.mkdtemp(), "use_cpu": True, "report_to": "none",
                                "learning_rate": 1e-3, "optim": "adamw_bnb_8bit", "weight_decay": 0.01} | settings)


def test_4_3_q5_trainer_args():
    assert _status(l43.q5, _args()).status == "correct"
    assert "TrainingArguments object" in _status(l43.q5, {"optim": "adamw_bnb_8bit"}).message


@pytest.mark.parametrize("settings", [
    right("4.3 q5",
          dict(report_to=[], optim="adamw_8bit", weight_decay=1e-2, learning_rate=0.001),
          id="another-name-and-numbers"),
    right("4.3 q5", dict(optim="paged_adamw_8bit"), id="paged"),
    pytest.param(dict(optim=OptimizerNames.ADAMW_BNB, learning_rate=10**-3), id="the-enum"),
])
def test_4_3_q5_right_another_way(settings):
    result = _status(l43.q5, _args(**settings))
    assert result.status == "correct", result.message


@pytest.mark.parametrize("settings, words", [
    mistake("4.3 q5", dict(optim="adamw_torch"), "adamw_bnb_8bit", id="torchs-adamw"),
    mistake("4.3 q5",
            dict(optim="paged_adamw_32bit"),
            "does not ask Trainer for bitsandbytes' 8-bit AdamW",
            id="bitsandbytes-32-bit-adamw"),
    mistake("4.3 q5",
            dict(optim="adamw_torch_8bit"),
            "does not ask Trainer for bitsandbytes' 8-bit AdamW",
            id="torchaos-8-bit-adamw"),
    mistake("4.3 q5", dict(weight_decay=0.0), "weight_decay", id="trainers-default-decay"),
    mistake("4.3 q5", dict(use_cpu=False), "use_cpu is left False", id="not-on-the-cpu"),  # issue 41: passed before
    pytest.param(dict(report_to="none_"), "reports to no tracker", id="a-tracker"),
])
def test_4_3_q5_names_each_mistake(settings, words):
    result = _status(l43.q5, _args(**settings))
    assert result.status == "incorrect" and words in result.message, result.message


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
@pytest.mark.judges("4.3 q1", "mistake")
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


@pytest.mark.judges("4.3 q1", "mistake")
def test_4_3_q1_a_32bit_adamw_for_8bit_is_named():
    bnb = pytest.importorskip("bitsandbytes")
    wrong = _builder(adamw8bit=lambda ps, lr: bnb.optim.AdamW(ps, lr=lr, weight_decay=0.01))
    assert "32-bit" in _status(l43.q1, wrong).message
    assert "32-bit" in _status(l43.q1, _builder(adamw8bit=lambda ps, lr: torch.optim.AdamW(ps, lr=lr))).message


def _by_table(name, params, lr):
    """Right, another way: a table of constructors, looked up with .get; the 8-bit one by its option."""
    def adamw8bit(ps):
        import bitsandbytes as bnb

        return bnb.optim.AdamW(ps, lr, weight_decay=1e-2, optim_bits=8)

    table = {"adamw": lambda ps: torch.optim.AdamW(ps, lr, weight_decay=1e-2),
             "adafactor": lambda ps: Adafactor(ps, lr, relative_step=False, scale_parameter=False, weight_decay=1e-2),
             "adamw8bit": adamw8bit}
    make = table.get(name)
    if make is None:
        raise ValueError(f"{name!r} is not one of {sorted(table)}")
    return make(params)


def _paged(ps, lr):
    import bitsandbytes as bnb

    return bnb.optim.PagedAdamW8bit(ps, lr=lr, weight_decay=0.01)


@pytest.mark.parametrize("build", [
    right("4.3 q1", _by_table, id="a-table-adamw-optim-bits-8"),
    right("4.3 q1", _builder(adamw8bit=_paged), id="paged-adamw8bit"),
])
def test_4_3_q1_right_another_way(build):
    pytest.importorskip("bitsandbytes")
    result = _status(l43.q1, build)
    assert result.status == "correct", result.message


@pytest.mark.judges("4.3 q1", "mistake")
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
