"""Exercises of lesson 7.3 (choosing a configuration).

q1 judges the learner's ``memory_per_device(model, layout, m)`` (bytes per device, the four parts summed) and
q2 their ``bubble(p, m)``, each on configurations the notebook does not show, against the planner
(``measure/planner.py``); a wrong answer that equals a known mistake (ZeRO ignored, GPipe's m micro-batches in
flight, the logits forgotten, ...) is named. q3 judges the learner's call of ``plan`` for a stated question by
what it returns.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, hands_over_to

RELATIVE = 1e-6  # an answer this close to the planner's is right


def _cases():
    """(model, layout, m): configurations the learner does not see, each exposing at least one mistake."""
    from effitrain_helpers.measure.planner import Layout, Model

    big = Model(30e9, 48, 6144, 48, 8192, 64000)
    small = Model(3e9, 24, 3072, 24, 2048, 50000)
    return [(big, Layout(dp=4, tp=4, pp=4, cp=2, zero=1, recompute="selective"), 16),
            (big, Layout(dp=8, tp=8, pp=2, cp=1, zero=3, recompute="none"), 1),
            (small, Layout(dp=16, tp=2, pp=1, cp=1, zero=2, recompute="full"), 8),
            (small, Layout(dp=2, tp=1, pp=6, cp=2, zero=0, recompute="none"), 3),
            (small, Layout(dp=4, tp=2, pp=1, cp=2, zero=1, recompute="selective", micro_batch=2), 4)]


def _activations(model, layout, in_flight: int, logits: bool = True, split: bool = True) -> float:
    """The activations of the busier end stage, with ``in_flight`` micro-batches on the first; without the
    ``logits`` or without the TP and CP ``split`` when a mistake says so."""
    from effitrain_helpers.measure.memory_estimate import layer_activation_bytes

    t, c = (layout.tp, layout.cp) if split else (1, 1)
    per_layer = layer_activation_bytes(model.hidden, model.heads, model.seq, layout.micro_batch, t, c,
                                       layout.recompute)
    layers = model.layers / layout.pp
    last = layers * per_layer + (4 * model.seq * layout.micro_batch * model.vocab / (t * c) if logits else 0)
    return max(layers * per_layer * in_flight, last)


def _held(parts: dict) -> float:
    return parts["parameters"] + parts["gradients"] + parts["optimizer state"]


def _mistakes(model, layout, m) -> dict[str, float]:
    """Totals a likely mistake gives, each with the message that names it."""
    from effitrain_helpers.measure.planner import memory_per_device

    right = memory_per_device(model, layout, m)
    held = _held(right)
    in_flight = min(layout.pp, m)
    return {
        tr("ZeRO is left out: with ZeRO-{zero}, stage 1 shards the optimizer state, 2 also the gradients, 3 also "
           "the parameters, over the DP x CP ranks.", zero=layout.zero):
            sum(memory_per_device(model, replace(layout, zero=0), m).values()),
        tr("ZeRO shards over DP alone here; context-parallel ranks hold the same parameters too: divide by DP x CP."):
            _held(memory_per_device(model, replace(layout, cp=1), m)) + right["activations"],
        tr("the first stage holds every micro-batch here (GPipe); under 1F1B it holds min(PP, m) of them."):
            held + _activations(model, layout, m),
        tr("one micro-batch of activations only: under 1F1B the first stage holds min(PP, m) of them."):
            held + _activations(model, layout, 1),
        tr("the logits are missing: the last stage also keeps 4·s·b·V / (TP·CP) bytes, and the device is the "
           "busier of the first and the last stage."): held + _activations(model, layout, in_flight, logits=False),
        tr("the activations are not split: tensor (with sequence) parallelism and context parallelism divide them "
           "by TP x CP."): held + _activations(model, layout, in_flight, split=False),
        tr("these are float32 Adam's bytes (4 + 4 + 8): the plan counts mixed precision, 2 + 2 + 12 per parameter."):
            sum(memory_per_device(model, layout, m, "fp32").values()),
    }


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= RELATIVE * abs(b)


def _check_memory(fn) -> None:
    from effitrain_helpers.measure.planner import memory_per_device

    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    if hands_over_to(fn, memory_per_device):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own answer: write the rule "
                           "yourself (the exercise is what that function does).", name="memory_per_device"))
    for model, layout, m in _cases():
        got = fn(model, layout, m)
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise Incorrect(tr("return one number, the bytes per device; for {name} you returned {got!r}.",
                               name=layout.name(), got=got)) from None
        want = sum(memory_per_device(model, layout, m).values())
        if _close(got, want):
            continue
        named = [why for why, total in _mistakes(model, layout, m).items() if _close(got, total) and
                 not _close(total, want)]
        detail = named[0] if named else tr("compare each part with the lesson's formulas.")
        raise Incorrect(tr("for {name} with m = {m} ({parameters:g} parameters, {layers} layers, s = {seq}) you "
                           "give {got:.4g} bytes; the planner {want:.4g}. {detail}", name=layout.name(), m=m,
                           parameters=model.parameters, layers=model.layers, seq=model.seq, got=got, want=want,
                           detail=detail))


def _check_bubble(fn) -> None:
    from effitrain_helpers.measure.planner import bubble

    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    if hands_over_to(fn, bubble):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own answer: write the rule "
                           "yourself (the exercise is what that function does).", name="bubble"))
    for p, m in ((1, 8), (4, 4), (8, 24), (6, 1)):
        got = fn(p, m)
        want = bubble(p, m)
        if isinstance(got, (int, float)) and abs(got - want) <= 1e-12:
            continue
        if isinstance(got, (int, float)) and abs(got - (p - 1) / m) <= 1e-12:
            raise Incorrect(tr("(p - 1) / m is the bubble measured against the ideal step (the Playbook's ratio); "
                               "the exercise asks for the share of the whole step a stage idles: its idle slots over all the slots of "
                               "the step, the idle ones included."))
        if isinstance(got, (int, float)) and abs(got - (m - 1) / (m + p - 1)) <= 1e-12:
            raise Incorrect(tr("p and m are swapped: the idle slots come from the p - 1 other stages."))
        raise Incorrect(tr("with p = {p} stages and m = {m} micro-batches you give {got!r}; a stage idles {want:.4f} "
                           "of the step.", p=p, m=m, got=got, want=want))


QUESTION = {"parameters": 13e9, "layers": 40, "hidden": 5120, "heads": 40, "seq": 4096, "vocab": 32000,
            "devices": 32, "memory_gb": 40, "global_batch_tokens": 2e6, "tp": 4}


def _check_plan(report) -> None:
    from effitrain_helpers.measure.planner import Cluster, Model, plan

    if not isinstance(report, dict) or "configurations" not in report:
        raise Incorrect(tr("pass what plan(...) returned (a dict with 'configurations'); you gave {kind}.",
                           kind=type(report).__name__))
    q = QUESTION
    model, cluster = report["model"], report["cluster"]
    for key in ("parameters", "layers", "hidden", "heads", "seq", "vocab"):
        if model[key] != q[key]:
            raise Incorrect(tr("the model's {key} is {got:g}; the question says {want:g}.", key=key,
                               got=model[key], want=q[key]))
    if cluster["memory_gb"] != q["memory_gb"]:
        raise Incorrect(tr("memory per device is {got:g} GB; the question says {want:g} GB (Cluster takes GB, "
                           "not bytes).", got=cluster["memory_gb"], want=q["memory_gb"]))
    if cluster["devices"] != q["devices"]:
        raise Incorrect(tr("the cluster has {got} devices; the question says {want}.", got=cluster["devices"],
                           want=q["devices"]))
    if report["global_batch_tokens"] != q["global_batch_tokens"]:
        raise Incorrect(tr("the global batch is {got:g}; the question gives {want:g} tokens (not sequences).",
                           got=report["global_batch_tokens"], want=q["global_batch_tokens"]))
    changed = [k for k, v in asdict(Cluster(q["devices"], q["memory_gb"])).items() if cluster.get(k) != v]
    if changed:
        raise Incorrect(tr("the cluster's {names} differ from the defaults the question assumes: give Cluster only "
                           "the devices and the memory per device.", names=", ".join(changed)))
    if any(c["tp"] != q["tp"] for c in report["configurations"]):
        raise Incorrect(tr("some configurations have a TP other than {tp}: fix it with fixed={{'tp': {tp}}}.",
                           tp=q["tp"]))
    want = plan(Model(**{k: q[k] for k in model}), Cluster(q["devices"], q["memory_gb"]), q["global_batch_tokens"],
                {"tp": q["tp"]})
    if report["configurations"][0]["name"] != want["configurations"][0]["name"]:
        raise Incorrect(tr("your first pick is {got}; the planner's, with the default cluster links and peak, is "
                           "{want}. Keep Cluster's other settings at their defaults.",
                           got=report["configurations"][0]["name"], want=want["configurations"][0]["name"]))


q1 = Exercise(
    "7.3 q1: memory per device, the four parts",
    _check_memory,
    usage="q1.check(memory_per_device)",
    checked=("checked on 5 configurations you did not see (ZeRO 0-3, recomputation none, selective and full, "
             "PP up to 6, CP 2, micro-batches of 2), within a millionth of the planner."),
    hints=["Four parts: parameters, gradients and optimizer state (2, 2 and 12 bytes per parameter in mixed "
           "precision, the rank's share of its stage, ZeRO shards some of them), and activations (per layer, "
           "per micro-batch held).",
           "parameters_per_rank(model, layout) is the rank's parameters before ZeRO; ZeRO-1 divides the 12 by "
           "DP x CP, ZeRO-2 also the 2 of the gradients, ZeRO-3 also those of the parameters. "
           "layer_activation_bytes(h, a, s, b, tp, cp, recompute) is one layer's; a stage has L / PP layers, "
           "holds min(PP, m) micro-batches on the first stage, one plus the logits on the last.",
           "Follow the table above the exercise: one line per part, each the rank's parameters times its bytes, "
           "divided by DP x CP when the ZeRO stage shards it; then the first and the last stage's activations; "
           "return the three parts plus the busier stage's activations."],
    solution_code=(
        "def memory_per_device(model, layout, m):\n"
        "    n = parameters_per_rank(model, layout)\n"
        "    shards = layout.dp * layout.cp\n"
        "    params = 2 * n / (shards if layout.zero >= 3 else 1)\n"
        "    grads = 2 * n / (shards if layout.zero >= 2 else 1)\n"
        "    state = 12 * n / (shards if layout.zero >= 1 else 1)\n"
        "    per_layer = layer_activation_bytes(model.hidden, model.heads, model.seq, layout.micro_batch,\n"
        "                                       layout.tp, layout.cp, layout.recompute)\n"
        "    layers = model.layers / layout.pp\n"
        "    first = layers * per_layer * min(layout.pp, m)\n"
        "    split = layout.tp * layout.cp\n"
        "    last = layers * per_layer + 4 * model.seq * layout.micro_batch * model.vocab / split\n"
        "    return params + grads + state + max(first, last)\n\n\nq1.check(memory_per_device)"
    ),
)
q2 = Exercise(
    "7.3 q2: the pipeline bubble",
    _check_bubble,
    usage="q2.check(bubble_share)",
    checked="checked on 4 pairs (p, m) you did not see, one of them a single stage and one a single micro-batch.",
    hints=["Count time in slots of one micro-batch's forward and backward: a stage works m slots, and the step "
           "lasts as long as the last micro-batch needs to cross every stage.",
           "Draw the timeline of p = 2 stages and m = 2 micro-batches: count the slots from the first stage's "
           "first forward to the end of the step, and the slots in which one stage works. The bubble is the share "
           "it idles.",
           "Read the share off your drawing (idle slots over all the step's slots), then test it with a single "
           "stage (no bubble at all) and with a single micro-batch (each stage waits for every other)."],
    solution_code="def bubble_share(p, m):\n    return (p - 1) / (m + p - 1)\n\n\nq2.check(bubble_share)",
)
q3 = Exercise(
    "7.3 q3: ask the planner",
    _check_plan,
    usage="q3.check(report)",
    api=True,
    checked=("checked: the model, the cluster and the batch of the question, every configuration with TP 4, "
             "and the planner's own first pick."),
    hints=["Describe the model and the cluster as the planner takes them, then ask for the configurations "
           "with tensor parallelism fixed.",
           "Model(parameters, layers, hidden, heads, seq, vocab) and Cluster(devices, memory_gb) from "
           "effitrain_helpers.measure.planner; plan(model, cluster, global_batch_tokens, fixed) with fixed a dict "
           "of the dimensions to pin.",
           "The section 'Ask the planner' above calls plan() with a model, a cluster and the global batch in tokens; "
           "the grid's cell after it also pins a dimension (context parallelism) in the last argument. Do both "
           "with the question's model and cluster, pinning tensor parallelism."],
    solution_code=(
        "report = plan(Model(13e9, 40, 5120, 40, 4096, 32000), Cluster(32, 40), 2e6, {\"tp\": 4})\n"
        "q3.check(report)"
    ),
)
