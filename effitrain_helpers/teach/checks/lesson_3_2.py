"""Exercises of lesson 3.2 (activation checkpointing and local SGD)."""

from __future__ import annotations

import math

from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number


def _check_layer_inputs(answer, config) -> None:
    for name in ("n_layers", "dim"):
        if not hasattr(config, name):
            raise Incorrect(f"pass the model's config as the second argument (it needs .{name}).")
    got = as_number(answer)
    want = config.n_layers * 8 * 64 * config.dim * 4
    if math.isclose(got, want, rel_tol=1e-9):
        return
    if math.isclose(got, want / 4, rel_tol=1e-9):
        raise Incorrect("that counts numbers, not bytes: a float32 takes 4 bytes.")
    if math.isclose(got, want / config.n_layers, rel_tol=1e-9):
        raise Incorrect(f"that is one layer's input; the model has {config.n_layers} layers.")
    raise Incorrect(f"{got:g} is not it: each layer keeps one tensor of batch x length x dim float32 numbers.")


def _check_averages(answer) -> None:
    steps, k = 100, 8
    got = as_number(answer)
    if got == steps // k + 1:
        return
    if got == steps // k:
        raise Incorrect("close: LocalSGD also averages once more when its `with` block ends (so replicas leave "
                        "the block identical).")
    if got == steps / k:
        raise Incorrect(f"{steps} / {k} is not a whole number: averages happen at steps {k}, {2 * k}, ... only.")
    raise Incorrect(f"{got:g} is not it: an average every {k} steps during {steps} steps, plus one at the end.")


def _check_bytes_sent(answer, parameter_bytes, measured_bytes) -> None:
    steps, k = 24, 4
    per = as_number(parameter_bytes)
    got = as_number(answer)
    want = (steps // k + 1) * per
    if math.isclose(got, want, rel_tol=1e-9):
        if not math.isclose(as_number(measured_bytes), want, rel_tol=1e-9):
            raise Incorrect(f"your formula gives {want:.0f} bytes but the counter measured {measured_bytes}: "
                            "pass the measured local SGD bytes (in the loop plus the closing average).")
        return
    if math.isclose(got, steps * per, rel_tol=1e-9):
        raise Incorrect("that is plain data parallelism (every step); local SGD averages every k steps.")
    if math.isclose(got, steps // k * per, rel_tol=1e-9):
        raise Incorrect("you forgot the closing average when the LocalSGD block ends.")
    raise Incorrect(f"{got:.0f} is not it: each average sends the parameters ({per:.0f} bytes) once per process.")


q1 = Exercise(
    "3.2 q1: what checkpointing keeps",
    _check_layer_inputs,
    usage="q1.check(layer_input_bytes, model.config)",
    hints=["With checkpointing, each transformer layer keeps only its input: batch x sequence length x dim numbers.",
           "model.config.n_layers x 8 x 64 x model.config.dim x 4 bytes."],
    solution_code=("layer_input_bytes = model.config.n_layers * 8 * 64 * model.config.dim * 4\n"
                   "q1.check(layer_input_bytes, model.config)"),
)
q2 = Exercise(
    "3.2 q2: how many parameter averages?",
    _check_averages,
    usage="q2.check(averages)",
    hints=["local_sgd.step() averages when the step count is a multiple of k.",
           "100 // 8 averages in the loop, and LocalSGD's __exit__ averages once more."],
    solution_code="averages = 100 // 8 + 1\nq2.check(averages)",
)
q3 = Exercise(
    "3.2 q3: bytes local SGD sends",
    _check_bytes_sent,
    usage="q3.check(bytes_sent, parameter_bytes, measured_bytes)",
    hints=["Each average all-reduces every parameter: parameter_bytes per process.",
           "(24 // 4 + 1) x parameter_bytes: the averages in the loop plus the closing one."],
    solution_code="bytes_sent = (24 // 4 + 1) * parameter_bytes\nq3.check(bytes_sent, parameter_bytes, measured_bytes)",
)
