"""Exercises of lesson 5.2 (where a training step's time goes: ``torch.profiler``)."""

from __future__ import annotations

from effitrain_helpers.core.language import tr
from effitrain_helpers.measure.step_profile import OTHER, STEP_PREFIX, StepProfile
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number, run_learner_in_processes

LABELS = ("forward", "backward", "optimizer")  # q1's labels
BATCHES, BATCH_SIZE, PROCESSES = 5, 4, 2  # q1: 5 steps (skip 1, warm up 1, record 3) in 2 processes
RECORDED = BATCHES - 2


def _inside(span: tuple[float, float], ranges: list[tuple[float, float]]) -> bool:
    """Whether ``span`` starts within one of ``ranges`` (microseconds)."""
    return any(lo <= span[0] <= hi for lo, hi in ranges)


def _run_learner(profile_fn) -> dict:
    """In each process: the learner's ``profile_fn(model, optimizer, batches)`` on a DDP-wrapped tiny model,
    then what its returned profiler recorded (plain values: the profiler itself stays in the process)."""
    import torch
    from accelerate import Accelerator

    from effitrain_helpers.teach.checks.tiny import tiny_model, tiny_rows

    accelerator = Accelerator(cpu=True)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stepped = []
    optimizer.register_step_post_hook(lambda *_: stepped.append(1))
    model, optimizer = accelerator.prepare(model, optimizer)
    rows = tiny_rows(BATCHES * BATCH_SIZE)
    batches = [{k: torch.stack([r[k] for r in rows[i:i + BATCH_SIZE]]) for k in rows[0]}
               for i in range(0, len(rows), BATCH_SIZE)]
    prof = profile_fn(model, optimizer, batches)
    found = {"world": accelerator.num_processes, "stepped": len(stepped), "returned": type(prof).__name__,
             "is_profile": isinstance(prof, torch.profiler.profile)}
    if not found["is_profile"]:
        return found
    events = list(prof.events() or [])

    def spans(match) -> list[tuple[float, float]]:
        return [(e.time_range.start, e.time_range.end) for e in events if match(e.name)]

    found["recorded"] = len(spans(lambda n: n.startswith(STEP_PREFIX)))
    found["labels"] = {label: len(spans(lambda n, label=label: n == label)) for label in LABELS}
    found["step_in_optimizer"] = any(_inside(s, spans(lambda n: n == "optimizer"))
                                     for s in spans(lambda n: n.startswith("Optimizer.step#")))
    found["reduce_in_backward"] = any(_inside(s, spans(lambda n: n == "backward"))
                                      for s in spans(lambda n: n.startswith("gloo:all_reduce")))
    return found


def _check_profiler(profile_fn) -> None:
    ranks = run_learner_in_processes(_run_learner, profile_fn, processes=PROCESSES)
    for rank, found in enumerate(ranks):
        _judge(rank, found)


def _judge(rank: int, found: dict) -> None:
    """Incorrect (naming what is wrong) unless rank ``rank``'s profiler recorded what the exercise asks."""
    if not found["is_profile"]:
        raise Incorrect(tr("on rank {rank}: your function returned {kind}; return the profiler itself "
                           "(the `prof` of `with profile(...) as prof:`).", rank=rank, kind=found["returned"]))
    if found["stepped"] != BATCHES:
        raise Incorrect(tr("on rank {rank}: the optimizer stepped {stepped} times for {batches} batches: train "
                           "one step per batch.", rank=rank, stepped=found["stepped"], batches=BATCHES))
    if found["recorded"] != RECORDED:
        why = (tr("give profile(...) a schedule (without one it marks no steps) and call prof.step() once at "
                  "the end of each training step") if found["recorded"] == 0 else
               tr("give profile(...) a schedule that skips 1 step, warms up 1 and records the rest"))
        raise Incorrect(tr("on rank {rank}: the profiler recorded {recorded} steps, not {want} of {batches}: "
                           "{why}.", rank=rank, recorded=found["recorded"], want=RECORDED, batches=BATCHES,
                           why=why))
    missing = [tr("{label!r} ({n} of {want})", label=label, n=n, want=RECORDED)
               for label, n in found["labels"].items() if n != RECORDED]
    if missing:
        raise Incorrect(tr("on rank {rank}: each recorded step needs one range of each label; found {missing}.",
                           rank=rank, missing=", ".join(missing)))
    if not found["step_in_optimizer"]:
        raise Incorrect(tr("on rank {rank}: your 'optimizer' range does not contain optimizer.step(): put the "
                           "step inside it.", rank=rank))
    if not found["reduce_in_backward"]:
        raise Incorrect(tr("on rank {rank}: the gradients' all-reduce did not start inside your 'backward' "
                           "range: put loss.backward() inside it.", rank=rank))


def _profile(profile) -> StepProfile:
    if not isinstance(profile, StepProfile):
        raise Incorrect(tr("pass the 1-process profile from above (`one`); you gave {kind}.",
                           kind=type(profile).__name__))
    return profile


def _check_dominant(answer, profile) -> None:
    profile = _profile(profile)
    if not isinstance(answer, str):
        raise Incorrect(tr("answer with a phase's name, a string such as 'forward'; you gave {answer!r}.",
                           answer=answer))
    if answer not in profile.phases_ms:
        raise Incorrect(tr("{answer!r} is not one of the labelled phases: {phases}.", answer=answer,
                           phases=", ".join(profile.phases_ms)))
    if answer != profile.dominant():
        raise Incorrect(tr("{answer!r} took {ms:.0f} ms per step; another phase took more. "
                           "Compare the 'ms per step' column of the labelled phases.", answer=answer,
                           ms=profile.phases_ms[answer]))


def _check_best_gain(answer, profile) -> None:
    profile = _profile(profile)
    got, want = as_number(answer), profile.share("data loading")
    if got > 1:
        raise Incorrect(tr("{got:g} is more than the whole step: answer a fraction between 0 and 1, not a "
                           "percent.", got=got))
    if abs(got - (1 - want)) < 0.01 and abs(got - want) >= 0.01:
        raise Incorrect(tr("that is the share of everything BUT data loading: workers only take over the "
                           "loading."))
    if abs(got - want) >= 0.01:
        raise Incorrect(tr("{got:.3f} is not it: data loading took {loading:.1f} ms of the {step:.1f} ms step "
                           "in the run without workers.", got=got, loading=profile.phases_ms["data loading"],
                           step=profile.step_ms))


q1 = Exercise(
    "5.2 q1: profile a training step, in 2 processes",
    _check_profiler,
    usage="q1.check(profile_training)",
    hints=["Open the profiler around the loop with a schedule (skip a step, warm up a step, record the rest), "
           "label each phase of a step with its own range, tell the profiler when a step ends, and return it.",
           "torch.profiler.profile(activities=..., schedule=torch.profiler.schedule(wait=..., warmup=..., "
           "active=...)) as a `with` block; torch.profiler.record_function('forward') and the like as `with` "
           "blocks; the profiler's step() method at the end of each step (PyTorch docs: 'PyTorch Profiler' recipe, 'Using profiler to "
           "analyze long-running jobs').",
           "plan = schedule(wait=1, warmup=1, active=len(batches) - ____)\n"
           "with profile(activities=[ProfilerActivity.CPU], schedule=____) as prof:\n"
           "    for ____ in ____:\n        with record_function(____):\n            ...\n"
           "        ...  # the 'backward' and 'optimizer' ranges, then tell the profiler the step ended\n"
           "return ____"],
    solution_code=(
        "def profile_training(model, optimizer, batches):\n"
        "    plan = schedule(wait=1, warmup=1, active=len(batches) - 2)\n"
        "    with profile(activities=[ProfilerActivity.CPU], schedule=plan) as prof:\n"
        "        for batch in batches:\n"
        "            with record_function(\"forward\"):\n"
        "                loss = model(**batch).loss\n"
        "            with record_function(\"backward\"):\n"
        "                loss.backward()\n"
        "            with record_function(\"optimizer\"):\n"
        "                optimizer.step()\n"
        "                optimizer.zero_grad()\n"
        "            prof.step()\n"
        "    return prof\n\nq1.check(profile_training)"
    ),
)
q2 = Exercise(
    "5.2 q2: which phase dominates?",
    _check_dominant,
    usage="q2.check(slowest, one)",
    hints=["Among the labelled phases (not the unlabelled rest, not the whole step), which one took the most "
           "milliseconds per step in your 1-process run?",
           "one.phases_ms is a dict {phase: ms per step}; Python's max() takes a key= function, and a dict's "
           ".get returns the value of a key.",
           "slowest = max(one.phases_ms, key=____)"],
    solution_code="slowest = max(one.phases_ms, key=one.phases_ms.get)\nq2.check(slowest, one)",
)
q3 = Exercise(
    "5.2 q3: the most that loader workers can save",
    _check_best_gain,
    usage="q3.check(best_gain, one)",
    hints=["Workers take over the loading and nothing else. Even if they made it free, the rest of the step "
           "stays: the best they can do is remove the loading's share of the step.",
           f"one.phases_ms['data loading'] is the loading's ms per step and one.step_ms the whole step's (both "
           f"from the run without workers); {OTHER!r} is not part of the loading.",
           "best_gain = one.phases_ms[____] / one.____"],
    solution_code="best_gain = one.phases_ms[\"data loading\"] / one.step_ms\nq3.check(best_gain, one)",
)
