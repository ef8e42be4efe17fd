"""Exercises of lesson 1.1 (prepare models with AutoModel and Accelerator): q1 writes the lesson's calls
(`from_pretrained`, `Accelerator()`, `prepare`), q2-q4 are the numbers and the order behind them."""

from __future__ import annotations

import math

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number

_ORDER = ("data sharding", "model replication", "gradient aggregation", "parameter synchronization")
STEP_NAMES = tuple(sorted(_ORDER))  # alphabetical: the order is the exercise
_WHY = {
    0: msg("before anything else, each device must get its own slice of the batch"),
    1: msg("a device can only compute gradients once it holds a copy of the model"),
    2: msg("the gradients of all devices are combined before any weight changes"),
    3: msg("the last step makes every copy hold the same updated weights"),
}
_PASS_FUNCTION = msg("pass your function itself (no parentheses); you gave {fn!r}.")


def _close(answer: float, want: float) -> bool:
    """Equal up to 0.1 %, or to rounding at one decimal."""
    return math.isclose(answer, want, rel_tol=1e-3) or abs(answer - want) <= 0.05


def _check_load_and_prepare(fn, path) -> None:
    """Run the learner's ``fn(path)`` for real and judge what it returns: (accelerator, model, tokenizer)."""
    import torch
    from accelerate import Accelerator

    if not callable(fn):
        raise Incorrect(tr(_PASS_FUNCTION, fn=fn))
    got = fn(path)
    if not isinstance(got, tuple) or len(got) != 3:
        raise Incorrect(tr("your function should return (accelerator, model, tokenizer); it returned {got!r:.80}.",
                           got=got))
    accelerator, model, tokenizer = got
    if not isinstance(accelerator, Accelerator):
        raise Incorrect(tr("the first value should be an Accelerator; it is a {kind}.",
                           kind=type(accelerator).__name__))
    if not isinstance(model, torch.nn.Module):
        raise Incorrect(tr("the second value should be the model; it is a {kind}.", kind=type(model).__name__))
    if not callable(tokenizer) or not hasattr(tokenizer, "convert_ids_to_tokens"):
        raise Incorrect(tr("the third value should be the tokenizer; it is a {kind}.", kind=type(tokenizer).__name__))
    if not any(m is model for m in accelerator._models):  # what prepare() records for every model it returns
        raise Incorrect(tr("this model was not returned by accelerator.prepare(model): return what prepare gives "
                           "back."))
    devices = {p.device.type for p in model.parameters()}
    if devices != {accelerator.device.type}:
        raise Incorrect(tr("the parameters are on {devices}, not on the accelerator's {device}.",
                           devices=sorted(devices), device=accelerator.device))
    embeddings = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > embeddings:
        raise Incorrect(tr("the tokenizer has {tokens:,} tokens but the model only {embeddings:,} embeddings: "
                           "load both from the same `path`.", tokens=len(tokenizer), embeddings=embeddings))
    batch = tokenizer(["The engineer trained the model.", "A short one."], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch.to(accelerator.device))
    logits = getattr(out, "logits", None)
    if logits is None:
        raise Incorrect(tr("the model returns hidden states but no logits: AutoModel has no task head; use the "
                           "AutoModelFor... class of the task (sequence classification)."))
    if tuple(logits.shape) != (2, 2):
        raise Incorrect(tr("two sentences gave logits of shape {shape}; expected (2, 2): a classification head "
                           "with num_labels=2.", shape=tuple(logits.shape)))
    _check_pretrained_weights(model, path)


def _check_pretrained_weights(model, path) -> None:
    """The word embeddings are the checkpoint's (from_pretrained), not fresh random ones (from_config)."""
    import torch
    from transformers import AutoModel

    reference = AutoModel.from_pretrained(path).get_input_embeddings().weight
    mine = model.get_input_embeddings().weight.detach().to("cpu", torch.float32)
    if mine.shape != reference.shape or not torch.equal(mine, reference.detach().float()):
        raise Incorrect(tr("the weights are not the checkpoint's: build the model with from_pretrained(path), "
                           "not from a config (that starts from random weights)."))


def _check_training_mib(answer, model) -> None:
    mib = as_number(answer)
    count = sum(p.numel() for p in model.parameters())
    per_param = {4: msg("that counts only the weights: training keeps weights, gradients and two AdamW states."),
                 8: msg("that counts weights and gradients, but not AdamW's two moving averages: training keeps "
                        "weights, gradients and two AdamW states."),
                 12: msg("that counts three of the four float32 copies: training keeps weights, gradients and two "
                         "AdamW states.")}
    if _close(mib, count * 16 / 2**20):
        return
    if _close(mib, count * 16 / 1e6):
        raise Incorrect(tr("that is megabytes (10^6 bytes); a MiB is 2^20 = 1,048,576 bytes."))
    for size, why in per_param.items():
        if _close(mib, count * size / 2**20):
            raise Incorrect(tr(why))
    if _close(mib, count * 16):
        raise Incorrect(tr("that is bytes; divide by 2**20 for MiB."))
    raise Incorrect(tr("{mib:.3f} MiB is not what training this model's {count:,} parameters keeps in float32.",
                       mib=mib, count=count))


def _check_gflops_fn(fn) -> None:
    if not callable(fn):
        raise Incorrect(tr(_PASS_FUNCTION, fn=fn))
    got = fn(1000, 1.0)
    if got is None:
        raise Incorrect(tr("your function returns None: add a `return`."))
    if math.isclose(got, 2.0, rel_tol=1e-6):
        for n, t in ((512, 0.002), (64, 1e-5)):
            want = 2 * n**3 / t / 1e9
            if not math.isclose(fn(n, t), want, rel_tol=1e-6):
                raise Incorrect(tr("right for n=1000, but for n={n}, t={t} s it gives {got!r} instead of {want:.4g}.",
                                   n=n, t=t, got=fn(n, t), want=want))
        return
    if math.isclose(got, 1.0, rel_tol=1e-6):
        raise Incorrect(tr("off by a factor of 2: each of the n^3 multiply-adds counts as 2 floating-point "
                           "operations."))
    if math.isclose(got, 2e9, rel_tol=1e-6):
        raise Incorrect(tr("that is FLOP/s; divide by 1e9 to get GFLOP/s."))
    raise Incorrect(tr("for n=1000 and 1 s your function gives {got!r}; expected 2.0 GFLOP/s.", got=got))


def _check_steps(steps) -> None:
    if not isinstance(steps, (list, tuple)) or len(steps) != 4:
        raise Incorrect(tr("give a list of the 4 step names; you gave {steps!r}.", steps=steps))
    norm = [str(s).strip().lower().replace("synchronisation", "synchronization") for s in steps]
    unknown = [s for s in norm if s not in _ORDER]
    if unknown:
        raise Incorrect(tr("{name!r} is not one of the four steps; use the names in `STEP_NAMES`.", name=unknown[0]))
    if sorted(norm) != sorted(_ORDER):
        raise Incorrect(tr("each step should appear exactly once."))
    wrong = next((i for i, (a, b) in enumerate(zip(norm, _ORDER)) if a != b), None)
    if wrong is not None:
        raise Incorrect(tr("position {position} is wrong: {why}.", position=wrong + 1, why=tr(_WHY[wrong])))


q1 = Exercise(
    "1.1 q1: load a checkpoint and prepare it",
    _check_load_and_prepare,
    usage="q1.check(load_and_prepare, choice.path)",
    api=True,
    checked=("checked: your function ran; its model has the checkpoint's weights and a 2-label head, and it is "
             "the one accelerator.prepare returned."),
    hints=["Three objects: a model with a classification head and its tokenizer, both read from the folder "
           "`path`, and an Accelerator that places the model. Return what `prepare` gives back, not the model "
           "you passed in.",
           "The Auto classes read `config.json` to pick the architecture. The one for a model with a "
           "sequence-classification head is named after its task (transformers docs, 'Auto Classes': "
           "AutoModelFor...); its `from_pretrained` takes the number of labels. `AutoTokenizer` reads the "
           "tokenizer the same way; then the Accelerator and its `prepare` method (accelerate docs, 'Accelerator').",
           "model = ____.from_pretrained(____, ____=2)\n"
           "tokenizer = ____.from_pretrained(____)\n"
           "accelerator = ____\n"
           "model = ____.prepare(____)"],
    solution_code=(
        "def load_and_prepare(path):\n"
        "    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)\n"
        "    tokenizer = AutoTokenizer.from_pretrained(path)\n"
        "    accelerator = Accelerator()\n"
        "    model = accelerator.prepare(model)\n"
        "    return accelerator, model, tokenizer\n\n"
        "q1.check(load_and_prepare, choice.path)"
    ),
)
q2 = Exercise(
    "1.1 q2: memory to train the model",
    _check_training_mib,
    usage="q2.check(train_mib, model)",
    hints=[
        "Training with AdamW in float32 keeps four numbers per parameter: the weight, its gradient and two "
        "moving averages.",
        "A float32 number takes 4 bytes; `p.numel()` counts the numbers in a parameter tensor "
        "(`model.parameters()` yields them all); one MiB is 2**20 bytes.",
        "train_mib = sum(____ for p in model.parameters()) * ____ / ____",
    ],
    solution_code="train_mib = sum(p.numel() for p in model.parameters()) * 16 / 2**20\nq2.check(train_mib, model)",
)
q3 = Exercise(
    "1.1 q3: GFLOP/s from a timing",
    _check_gflops_fn,
    usage="q3.check(my_gflops)",
    hints=["An n x n by n x n product does n^3 multiply-adds: each of the n^2 results sums n products.",
           "A multiply-add is two floating-point operations (FLOPs); a rate is operations over seconds; a GFLOP "
           "is a billion (giga) of them: write that power of ten yourself (see the 'Measure it' cell above).",
           "return ____ * n**____ / seconds / ____"],
    solution_code="def my_gflops(n, seconds):\n    return 2 * n**3 / seconds / 1e9\n\nq3.check(my_gflops)",
)
q4 = Exercise(
    "1.1 q4: the four steps in order",
    _check_steps,
    usage="q4.check(steps)",
    hints=[
        "A device needs its data and its own copy of the model before it can compute anything.",
        "Gradients must be combined before the updated weights can be shared (look at the figure of steps "
        "3 and 4).",
        'steps = ["data sharding", ____, "gradient aggregation", ____]',
    ],
    solution_code=(
        'steps = ["data sharding", "model replication", "gradient aggregation", "parameter synchronization"]\n'
        "q4.check(steps)"
    ),
)
