"""Exercises of lesson 4.1 (AdamW: its state for a model, one step by hand, parameter groups for weight decay)."""

from __future__ import annotations

import math

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number

LR, BETAS, EPS, WEIGHT_DECAY = 0.1, (0.9, 0.999), 1e-8, 0.1  # q2's settings


def q1_model():
    """The model of exercise 1: an embedding of 1000 x 64 and a linear layer 64 -> 32."""
    import torch

    torch.manual_seed(0)
    return torch.nn.ModuleDict({"embedding": torch.nn.Embedding(1000, 64), "linear": torch.nn.Linear(64, 32)})


def _frozen_model():
    """A model of the checker's own with a frozen part: its embedding has requires_grad False."""
    import torch

    torch.manual_seed(1)
    model = torch.nn.ModuleDict({"embedding": torch.nn.Embedding(200, 16), "linear": torch.nn.Linear(16, 8)})
    model["embedding"].requires_grad_(False)
    return model


def _float64_model():
    """A small model of the checker's own in float64 (8 bytes a value)."""
    import torch

    torch.manual_seed(2)
    return torch.nn.Sequential(torch.nn.Linear(10, 6), torch.nn.Linear(6, 3)).double()


CHECK_MODELS = (q1_model, _frozen_model, _float64_model)


def _state_truth(model) -> dict[str, int]:
    """What a real AdamW gives after one zero-gradient step, and what the common slips give instead."""
    import torch

    trainable = [p for p in model.parameters() if p.requires_grad]
    for p in trainable:
        p.grad = torch.zeros_like(p)
    optimizer = torch.optim.AdamW(trainable)
    optimizer.step()
    moments = [s[k] for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")]
    steps = [s["step"] for s in optimizer.state.values() if torch.is_tensor(s["step"])]
    nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    everything = list(model.parameters())
    return {"truth": nbytes(moments), "step": nbytes(moments) + nbytes(steps),
            "one_copy": nbytes(moments) // 2, "frozen": 2 * nbytes(everything),
            "values": sum(t.numel() for t in moments), "values_one": sum(t.numel() for t in moments) // 2,
            "float32": 2 * 4 * sum(p.numel() for p in trainable)}


def _check_state_bytes(fn) -> None:
    if not callable(fn):
        raise Incorrect(tr("pass your function itself (adamw_state_bytes, without calling it); you gave {fn!r}.",
                           fn=fn))
    answers = [as_number(fn(make())) for make in CHECK_MODELS]
    if len(set(answers)) == 1 and answers[0] != 0:
        raise Incorrect(tr("{got:.0f} bytes for every model: the number must come from the model you are given "
                           "(its optimizer.state), not be written in.", got=answers[0]))
    for make, got in zip(CHECK_MODELS, answers):
        want = _state_truth(make())
        if math.isclose(got, want["truth"]):
            continue
        if got == 0:
            raise Incorrect(tr("0 bytes: optimizer.state is empty until the first optimizer.step(); give the "
                               "trainable parameters zero gradients and take one step before counting."))
        named = [("float32", msg("that assumes 4 bytes a value, but this model is in float64: use each state "
                                 "tensor's element_size().")),
                 ("step", msg("close: that includes the `step` counters; count only the two moving averages, "
                              "exp_avg and exp_avg_sq.")),
                 ("one_copy", msg("that is one copy of the parameters; AdamW keeps two tensors per parameter "
                                  "(exp_avg and exp_avg_sq): count both.")),
                 ("frozen", msg("that counts the frozen parameters too: those with requires_grad False get no "
                                "gradient and no state; build AdamW over the trainable parameters only.")),
                 ("values", msg("count bytes, not values: multiply each tensor's numel() by its "
                                "element_size().")),
                 ("values_one", msg("count bytes, not values: multiply each tensor's numel() by its "
                                    "element_size()."))]
        for key, message in named:
            if want[key] != want["truth"] and math.isclose(got, want[key]):
                raise Incorrect(tr(message))
        raise Incorrect(tr("{got:.0f} bytes is not it for {model}(): a real AdamW keeps {want} bytes of exp_avg "
                           "and exp_avg_sq after its first step.", got=got, model=make.__name__.lstrip("_"),
                           want=want["truth"]))


def _adamw_reference(p0, grads):
    """Parameters after each step of torch.optim.AdamW with the q2 settings."""
    import torch

    p = torch.tensor([float(p0)], requires_grad=True)
    optimizer = torch.optim.AdamW([p], lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    out = []
    for g in grads:
        p.grad = torch.tensor([float(g)])
        optimizer.step()
        out.append(float(p.detach()[0]))
    return out


def _variants(p0, grads):
    """What common slips give: no bias correction, L2 weight decay (Adam), decay applied after the update, eps
    inside the square root or subtracted from it (they differ from AdamW only where the gradients are as small
    as eps)."""
    b1, b2 = BETAS
    results = {}
    for variant in ("no_bias_correction", "coupled", "decay_after", "eps_inside", "eps_subtracted"):
        p, m, v = float(p0), 0.0, 0.0
        out = []
        for t, g in enumerate(grads, start=1):
            if variant == "coupled":
                g = g + WEIGHT_DECAY * p
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            m_hat, v_hat = (m, v) if variant == "no_bias_correction" else (m / (1 - b1**t), v / (1 - b2**t))
            if variant == "decay_after":
                p = p - LR * m_hat / (math.sqrt(v_hat) + EPS)
                p = p - LR * WEIGHT_DECAY * p
            elif variant == "coupled":
                p = p - LR * m_hat / (math.sqrt(v_hat) + EPS)
            elif variant == "eps_inside":
                p = p * (1 - LR * WEIGHT_DECAY) - LR * m_hat / math.sqrt(v_hat + EPS)
            elif variant == "eps_subtracted":
                p = p * (1 - LR * WEIGHT_DECAY) - LR * m_hat / (math.sqrt(v_hat) - EPS)
            else:
                p = p * (1 - LR * WEIGHT_DECAY) - LR * m_hat / (math.sqrt(v_hat) + EPS)
            out.append(p)
        results[variant] = out
    return results


def _check_adamw_by_hand(fn) -> None:
    if not callable(fn):
        raise Incorrect(tr("pass your function itself (adamw_by_hand, without calling it); you gave {fn!r}.",
                           fn=fn))
    cases = [(1.0, [0.5, -0.2, 0.3, 0.1]), (-2.0, [3.0, 3.0, -1.0]), (0.5, [0.0, 1e-3, -2.0, 0.7, 0.7]),
             (1.0, [2e-8, -1e-8, 3e-8])]  # gradients as small as eps: where eps keeps the step finite
    for p0, grads in cases:
        try:
            got = fn(p0, list(grads))
        except ZeroDivisionError:
            if 0.0 in grads:  # a zero gradient makes v_hat 0: only eps keeps the denominator from 0
                raise Incorrect(tr("division by zero with gradients {grads}: a gradient of 0 makes v_hat 0, and "
                                   "eps is what keeps the step finite: divide by (sqrt(v_hat) + eps).",
                                   grads=grads)) from None
            raise Incorrect(tr("division by zero with gradients {grads}, none of them 0: the bias corrections "
                               "divide by 1 - beta1**t and 1 - beta2**t, which are 0 when t = 0; count the steps "
                               "from 1 (enumerate(grads, start=1)).", grads=grads)) from None
        if not isinstance(got, (list, tuple)) or len(got) != len(grads):
            raise Incorrect(tr("return one parameter value per step: {count} values for {count} "
                               "gradients; you returned {got!r}.", count=len(grads), got=got))
        got = [as_number(x) for x in got]
        want = _adamw_reference(p0, grads)
        if all(math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6) for a, b in zip(got, want)):
            continue
        for variant, values in _variants(p0, grads).items():
            if all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) for a, b in zip(got, values)):
                raise Incorrect(tr({
                    "no_bias_correction": msg("you skipped the bias correction: divide m by (1 - beta1**t) and v "
                                              "by (1 - beta2**t), t counting from 1."),
                    "coupled": msg("that is Adam with L2 regularisation (weight decay added to the gradient); "
                                   "AdamW decays the parameter directly: p = p - lr * weight_decay * p."),
                    "decay_after": msg("decay the parameter before the Adam update (torch multiplies p by "
                                       "1 - lr * weight_decay first, then subtracts the update)."),
                    "eps_inside": msg("eps is on the wrong side: it is added after the square root, "
                                      "sqrt(v_hat) + eps, not inside it; with gradients as small as eps the "
                                      "difference is large."),
                    "eps_subtracted": msg("eps is on the wrong side: the denominator is sqrt(v_hat) + eps (eps "
                                          "added, so it never comes near 0), not sqrt(v_hat) - eps."),
                }[variant]))
        raise Incorrect(tr("starting at p={p0} with gradients {grads}, torch.optim.AdamW gives {want}; yours "
                           "gave {got}.", p0=p0, grads=grads, want=[round(x, 6) for x in want],
                           got=[round(x, 6) for x in got]))


def q3_model():
    """The model of exercise 3: embedding, linear layer, LayerNorm and classifier (weights and biases)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.ModuleDict({"embedding": torch.nn.Embedding(100, 16), "linear": torch.nn.Linear(16, 16),
                                "norm": torch.nn.LayerNorm(16), "classifier": torch.nn.Linear(16, 2)})


Q3_LR, Q3_WEIGHT_DECAY = 2e-3, 0.05  # q3's settings: not torch.optim.AdamW's defaults, so leaving one out shows
Q3_NO_DECAY = ("linear.bias", "norm.weight", "norm.bias", "classifier.bias")  # what Trainer leaves undecayed


def _one_step_moves(make_adamw) -> tuple[dict, dict, dict, object]:
    """Build the learner's optimizer on a fresh q3_model, take one step with random gradients (random signs,
    sizes 0.5 to 2), and return ``(start, after, grads, optimizer)``: float64 values by parameter name."""
    import torch

    model = q3_model()
    optimizer = make_adamw(model)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise Incorrect(tr("make_adamw(model) should return a torch optimizer; it returned {kind}.",
                           kind=type(optimizer).__name__))
    generator = torch.Generator().manual_seed(1)
    start = {n: p.detach().double() for n, p in model.named_parameters()}
    for p in model.parameters():
        sign = torch.randint(0, 2, p.shape, generator=generator) * 2 - 1
        p.grad = sign * (0.5 + 1.5 * torch.rand(p.shape, generator=generator))
    grads = {n: p.grad.double() for n, p in model.named_parameters()}
    optimizer.step()
    return start, {n: p.detach().double() for n, p in model.named_parameters()}, grads, optimizer


def _check_param_groups(make_adamw) -> None:
    """Judged by what one step does: AdamW's first step moves every value by lr against its gradient's sign,
    and decoupled decay adds lr * weight_decay * p, for the decayed parameters only."""
    import torch

    if not callable(make_adamw):
        raise Incorrect(tr("pass your function itself (make_adamw, without calling it); you gave {fn!r}.",
                           fn=make_adamw))
    start, after, grads, optimizer = _one_step_moves(make_adamw)
    still = sorted(n for n in start if torch.equal(start[n], after[n]))
    if still:
        raise Incorrect(tr("{still} did not move at all: every parameter must be in one of the groups.",
                           still=still))
    for name in start:
        moved = start[name] - after[name]
        if torch.allclose(moved, Q3_LR * grads[name], rtol=1e-3):
            raise Incorrect(tr("{name} moved in proportion to its gradient: that is SGD; AdamW moves each value "
                               "by about lr whatever the gradient's size.", name=name))
        residual = moved - Q3_LR * torch.sign(grads[name])  # what is left after the Adam part: the decay
        weight = float((start[name] ** 2).sum())
        decay_seen = float((residual * start[name]).sum()) / weight / Q3_LR if weight else 0.0
        if not torch.allclose(residual, Q3_LR * decay_seen * start[name], atol=1e-6):
            lr_seen = float(moved.abs().mean())
            raise Incorrect(tr("{name} moved by about {lr_seen:.2g} per value in the first step; AdamW moves "
                               "each value by its learning rate there: use lr={lr}.", name=name,
                               lr_seen=lr_seen, lr=Q3_LR))
        if name in Q3_NO_DECAY and abs(decay_seen) > 1e-3:
            raise Incorrect(tr("{name} was decayed (weight_decay {decay_seen:.2g}): biases and LayerNorm weights "
                               "go in a group with weight_decay=0.0.", name=name, decay_seen=decay_seen))
        if name not in Q3_NO_DECAY and not math.isclose(decay_seen, Q3_WEIGHT_DECAY, rel_tol=0.05):
            if abs(decay_seen) < 1e-3 and not isinstance(optimizer, torch.optim.AdamW):
                raise Incorrect(tr("{name} was not decayed in the first step: that is Adam's L2 term (added to "
                                   "the gradient, then rescaled with it); use torch.optim.AdamW, whose decay is "
                                   "decoupled.", name=name))
            seen = (tr("was not decayed") if abs(decay_seen) < 1e-3
                    else tr("decayed with weight_decay {decay:.2g}", decay=decay_seen))
            raise Incorrect(tr("{name} {seen}; the exercise asks for weight_decay={weight_decay} on the "
                               "weights and embeddings.", name=name, seen=seen, weight_decay=Q3_WEIGHT_DECAY))


q1 = Exercise(
    "4.1 q1: AdamW's state bytes for a model",
    _check_state_bytes,
    usage="q1.check(adamw_state_bytes)",
    api=True,
    checked=("checked on q1_model(), a model with a frozen part and a float64 one: the bytes of exp_avg and "
             "exp_avg_sq in a real AdamW's state, without the step counters."),
    hints=["Measure, do not compute: build a real torch.optim.AdamW over the parameters that train, make its "
           "state exist with one step, then add up the bytes of the two moving averages it keeps.",
           "optimizer.state is empty until the optimizer has stepped once, and a step needs gradients: zeros "
           "(torch.zeros_like(p) as p.grad) will do. Parameters with requires_grad False must stay out. "
           "optimizer.state maps each parameter to a dict with 'step', 'exp_avg' and 'exp_avg_sq'; "
           "t.numel() * t.element_size() is a tensor's bytes.",
           "After the step, each trainable p has its state: s = optimizer.state[p]; what you want is\n"
           "s[\"exp_avg\"] and s[\"exp_avg_sq\"] in bytes, added over every p (s[\"step\"] stays out). "
           "Which parameters did the optimizer get, and what did you give them as gradients?"],
    solution_code=(
        "def adamw_state_bytes(model):\n"
        "    trainable = [p for p in model.parameters() if p.requires_grad]\n"
        "    for p in trainable:\n        p.grad = torch.zeros_like(p)\n"
        "    optimizer = torch.optim.AdamW(trainable)\n    optimizer.step()\n"
        "    return sum(state[key].numel() * state[key].element_size()\n"
        "               for state in optimizer.state.values() for key in (\"exp_avg\", \"exp_avg_sq\"))\n\n"
        "q1.check(adamw_state_bytes)"),
)
q2 = Exercise(
    "4.1 q2: AdamW by hand",
    _check_adamw_by_hand,
    usage="q2.check(adamw_by_hand)",
    hints=["Follow the five numbered lines of the lesson's by-hand cell, once per gradient: keep m and v "
           "(both start at 0) and a step counter t that starts at 1.",
           "The algorithm box of the torch.optim.AdamW documentation gives the order: decay the parameter "
           "(p times 1 - lr * weight_decay), update m and v, divide them by 1 - beta**t, then subtract "
           "lr * m_hat / (sqrt(v_hat) + eps). LR, BETAS, EPS and WEIGHT_DECAY are imported for you.",
           "Inside the loop over the gradients, the four updates in the order of hint 2, each written with "
           "the names imported for you and the step counter t; keep every new p in a list and return it."],
    solution_code=(
        "def adamw_by_hand(p, grads):\n    b1, b2 = BETAS\n    m = v = 0.0\n    values = []\n"
        "    for t, g in enumerate(grads, start=1):\n        p = p * (1 - LR * WEIGHT_DECAY)\n"
        "        m = b1 * m + (1 - b1) * g\n        v = b2 * v + (1 - b2) * g * g\n"
        "        p = p - LR * (m / (1 - b1**t)) / (math.sqrt(v / (1 - b2**t)) + EPS)\n        values.append(p)\n"
        "    return values\n\nq2.check(adamw_by_hand)"),
)
q3 = Exercise(
    "4.1 q3: AdamW with parameter groups",
    _check_param_groups,
    usage="q3.check(make_adamw)",
    api=True,
    checked=("checked by one real step: decoupled weight decay on the decayed group only, at the exercise's "
             "learning rate."),
    hints=["One optimizer, two groups of parameters with different settings: the weight matrices and "
           "embeddings decay, the biases and the LayerNorm weights do not (as Trainer does it).",
           "torch.optim.AdamW accepts a list of dicts instead of parameters: "
           "[{'params': [...], 'weight_decay': ...}, ...] (\"Per-parameter options\" in the torch.optim "
           "documentation). model.named_parameters() gives (name, tensor) pairs; the names say 'bias' or "
           "'norm'.",
           "Sort each named parameter into one of two lists by its name, build the two group dicts of hint 2 "
           "(the exercise's decay for one list, none for the other) and give them to AdamW with the "
           "exercise's learning rate."],
    solution_code=(
        "print([name for name, _ in q3_model().named_parameters()])\n\n"
        "def make_adamw(model):\n    decay, no_decay = [], []\n    for name, p in model.named_parameters():\n"
        "        (no_decay if name.endswith(\"bias\") or \"norm\" in name else decay).append(p)\n"
        "    groups = [{\"params\": decay, \"weight_decay\": Q3_WEIGHT_DECAY},\n"
        "              {\"params\": no_decay, \"weight_decay\": 0.0}]\n"
        "    return torch.optim.AdamW(groups, lr=Q3_LR)\n\nq3.check(make_adamw)"),
)
