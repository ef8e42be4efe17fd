"""Exercises of lesson 4.1 (AdamW: the two moving averages, decoupled weight decay, 8 bytes per parameter)."""

from __future__ import annotations

import math

from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number

MODEL_SHAPES = {"embedding": (1000, 64), "linear.weight": (32, 64), "linear.bias": (32,)}  # q1's model
LR, BETAS, EPS, WEIGHT_DECAY = 0.1, (0.9, 0.999), 1e-8, 0.1  # q2's settings


def q1_model():
    """The model of exercise 1: an embedding of 1000 x 64 and a linear layer 64 -> 32."""
    import torch

    torch.manual_seed(0)
    return torch.nn.ModuleDict({"embedding": torch.nn.Embedding(1000, 64), "linear": torch.nn.Linear(64, 32)})


def _check_state_bytes(answer) -> None:
    got = as_number(answer)
    n = sum(math.prod(s) for s in MODEL_SHAPES.values())
    if math.isclose(got, 8 * n):
        return
    if math.isclose(got, 8 * n + 4 * len(MODEL_SHAPES)):
        raise Incorrect("close: that includes the 4-byte `step` counters; the question asks for the two moving "
                        "averages only.")
    if math.isclose(got, 4 * n):
        raise Incorrect("that is one float32 copy of the parameters; AdamW keeps two (exp_avg and exp_avg_sq).")
    if math.isclose(got, 2 * n) or math.isclose(got, n):
        raise Incorrect("count bytes, not values: each float32 value takes 4 bytes.")
    raise Incorrect(f"{got:.0f} bytes is not it: count the model's parameters (sum of numel over "
                    "model.parameters()), then 2 states x 4 bytes each.")


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
    """What common slips give: no bias correction, L2 weight decay (Adam), decay applied after the update."""
    b1, b2 = BETAS
    results = {}
    for variant in ("no_bias_correction", "coupled", "decay_after"):
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
            else:
                p = p * (1 - LR * WEIGHT_DECAY) - LR * m_hat / (math.sqrt(v_hat) + EPS)
            out.append(p)
        results[variant] = out
    return results


def _check_adamw_by_hand(fn) -> None:
    if not callable(fn):
        raise Incorrect(f"pass your function itself (adamw_by_hand, without calling it); you gave {fn!r}.")
    cases = [(1.0, [0.5, -0.2, 0.3, 0.1]), (-2.0, [3.0, 3.0, -1.0]), (0.5, [0.0, 1e-3, -2.0, 0.7, 0.7])]
    for p0, grads in cases:
        got = fn(p0, list(grads))
        if not isinstance(got, (list, tuple)) or len(got) != len(grads):
            raise Incorrect(f"return one parameter value per step: {len(grads)} values for {len(grads)} gradients; "
                            f"you returned {got!r}.")
        got = [as_number(x) for x in got]
        want = _adamw_reference(p0, grads)
        if all(math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6) for a, b in zip(got, want)):
            continue
        for variant, values in _variants(p0, grads).items():
            if all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) for a, b in zip(got, values)):
                raise Incorrect({
                    "no_bias_correction": "you skipped the bias correction: divide m by (1 - beta1**t) and v by "
                                          "(1 - beta2**t), t counting from 1.",
                    "coupled": "that is Adam with L2 regularisation (weight decay added to the gradient); AdamW "
                               "decays the parameter directly: p = p - lr * weight_decay * p.",
                    "decay_after": "decay the parameter before the Adam update (torch multiplies p by "
                                   "1 - lr * weight_decay first, then subtracts the update).",
                }[variant])
        raise Incorrect(f"starting at p={p0} with gradients {grads}, torch.optim.AdamW gives "
                        f"{[round(x, 6) for x in want]}; yours gave {[round(x, 6) for x in got]}.")


def _check_training_bytes(answer) -> None:
    got = as_number(answer)
    if math.isclose(got, 16):
        return
    if math.isclose(got, 12):
        raise Incorrect("you left out the gradients: backward() keeps one float32 gradient per parameter.")
    if math.isclose(got, 8):
        raise Incorrect("those are the optimizer states alone; add the parameter and its gradient.")
    if math.isclose(got, 4):
        raise Incorrect("that is the parameter alone; training also keeps its gradient and AdamW's two states.")
    raise Incorrect(f"{got} is not it: add the bytes of the parameter, its gradient and AdamW's two states "
                    "(all float32).")


q1 = Exercise(
    "4.1 q1: AdamW's state bytes for a model",
    _check_state_bytes,
    usage="q1.check(moment_bytes)",
    hints=["Count the values first: sum(p.numel() for p in model.parameters()).",
           "AdamW keeps exp_avg and exp_avg_sq, each a float32 tensor the shape of its parameter: 2 x 4 bytes per value."],
    solution_code=("model = q1_model()\nn = sum(p.numel() for p in model.parameters())\nmoment_bytes = 2 * 4 * n\n"
                   "q1.check(moment_bytes)"),
)
q2 = Exercise(
    "4.1 q2: AdamW by hand",
    _check_adamw_by_hand,
    usage="q2.check(adamw_by_hand)",
    hints=["Keep m and v (both start at 0) and a step counter t starting at 1; LR, BETAS, EPS, WEIGHT_DECAY are "
           "imported for you.",
           "Each step: p = p * (1 - LR * WEIGHT_DECAY); m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; "
           "p = p - LR * (m / (1 - b1**t)) / (sqrt(v / (1 - b2**t)) + EPS)."],
    solution_code=(
        "def adamw_by_hand(p, grads):\n    b1, b2 = BETAS\n    m = v = 0.0\n    values = []\n"
        "    for t, g in enumerate(grads, start=1):\n        p = p * (1 - LR * WEIGHT_DECAY)\n"
        "        m = b1 * m + (1 - b1) * g\n        v = b2 * v + (1 - b2) * g * g\n"
        "        p = p - LR * (m / (1 - b1**t)) / (math.sqrt(v / (1 - b2**t)) + EPS)\n        values.append(p)\n"
        "    return values\n\nq2.check(adamw_by_hand)"),
)
q3 = Exercise(
    "4.1 q3: bytes per parameter while training",
    _check_training_bytes,
    usage="q3.check(bytes_per_parameter)",
    hints=["Training with AdamW in float32 keeps, for every parameter: the parameter, its gradient, and two states.",
           "4 bytes each."],
    solution_code="bytes_per_parameter = 4 + 4 + 2 * 4  # parameter, gradient, exp_avg, exp_avg_sq\nq3.check(bytes_per_parameter)",
)
