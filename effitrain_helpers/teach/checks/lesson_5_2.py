"""Exercises of lesson 5.2 (where a training step's time goes: ``torch.profiler``)."""

from __future__ import annotations

from contextlib import contextmanager

from effitrain_helpers.core.language import tr
from effitrain_helpers.measure.step_profile import OTHER, STEP_PREFIX, StepProfile
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number, run_learner_in_processes

STEP_LABEL = "training step"  # q4: the range around the step the checker hands the learner

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

    from effitrain_helpers.teach.checks.tiny import tiny_model, tiny_rows, watch_stale_gradients

    accelerator = Accelerator(cpu=True)
    model = tiny_model()
    stale = watch_stale_gradients(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stepped = []
    optimizer.register_step_post_hook(lambda *_: stepped.append(1))
    model, optimizer = accelerator.prepare(model, optimizer)
    rows = tiny_rows(BATCHES * BATCH_SIZE)
    batches = [{k: torch.stack([r[k] for r in rows[i:i + BATCH_SIZE]]) for k in rows[0]}
               for i in range(0, len(rows), BATCH_SIZE)]
    prof = profile_fn(model, optimizer, batches)
    found = {"world": accelerator.num_processes, "stepped": len(stepped), "returned": type(prof).__name__,
             "is_profile": isinstance(prof, torch.profiler.profile), "stale": sum(stale[1:])}
    if not found["is_profile"]:
        return found
    events = list(prof.events() or [])

    def spans(match) -> list[tuple[float, float]]:
        return [(e.time_range.start, e.time_range.end) for e in events if match(e.name)]

    found["recorded"] = len(spans(lambda n: n.startswith(STEP_PREFIX)))
    schedule = getattr(prof, "schedule", None)  # torch's default (none given) records everything, marks no step
    found["scheduled"] = getattr(schedule, "__name__", "") != "_default_schedule_fn"
    found["marked"] = getattr(prof, "step_num", None)  # how many times prof.step() was called
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
    if found["stale"]:
        raise Incorrect(tr("on rank {rank}: {count} of {batches} backward passes began with the gradients of "
                           "earlier batches still in the parameters, so they add up from step to step: clear them "
                           "once per optimizer step (optimizer.zero_grad()).", rank=rank, count=found["stale"],
                           batches=BATCHES))
    if found["recorded"] != RECORDED:
        if found["recorded"] == 0 and found.get("scheduled") and found.get("marked") == BATCHES:
            why = tr("your schedule had started a new cycle by the end (the last prof.step() began it, and what "
                     "the profiler shows is that cycle, still empty): give schedule(...) repeat=1, or a wait of 1")
        elif found["recorded"] == 0 and found.get("scheduled") and found.get("marked") == 0:
            why = tr("call prof.step() once at the end of each training step (the schedule counts those calls)")
        else:
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
    if answer != profile.dominant() and answer == max(profile.phases_ms):
        raise Incorrect(tr("{answer!r} comes last in alphabetical order: max() over the dict compared the phases' "
                           "names, not their times. Give max() a key= that ranks each name by its milliseconds.",
                           answer=answer))
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
    if abs(got - want / (1 - want)) < 0.005 and abs(got - want) >= 0.01:
        raise Incorrect(tr("that is data loading over the rest of the step; the gain is loading's share of the "
                           "whole step: divide by the step's time, loading included."))
    if abs(got - want) >= 0.01:
        raise Incorrect(tr("{got:.3f} is not it: data loading took {loading:.1f} ms of the {step:.1f} ms step "
                           "in the run without workers.", got=got, loading=profile.phases_ms["data loading"],
                           step=profile.step_ms))


q1 = Exercise(
    "5.2 q1: profile a training step, in 2 processes",
    _check_profiler,
    usage="q1.check(profile_training)",
    api=True,
    checked=("checked in 2 processes: 3 recorded steps, each with one 'forward', 'backward' and 'optimizer' "
             "range, optimizer.step() and the gradients' all-reduce inside theirs."),
    hints=["Open the profiler around the loop with a schedule (skip a step, warm up a step, record the rest), "
           "label each phase of a step with its own range, tell the profiler when a step ends, and return it.",
           "torch.profiler.profile(activities=..., schedule=torch.profiler.schedule(wait=..., warmup=..., "
           "active=...)) as a `with` block; torch.profiler.record_function('forward') and the like as `with` "
           "blocks; the profiler's step() method at the end of each step (PyTorch docs: 'PyTorch Profiler' recipe, 'Using profiler to "
           "analyze long-running jobs').",
           "Make the schedule of hint 1 from the number of batches; open the profiler with the CPU activity "
           "and that schedule; for each batch, wrap the forward, the backward and the optimizer's step and "
           "zero_grad each in its labelled range, then tell the profiler the step ended; return the profiler."],
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
           "one.phases_ms is a dict {phase: ms per step}; Python's max() takes a key= function, and a dict has "
           "a method that returns the value of a key.",
           "Take the max over the dict's keys, ranked by each key's milliseconds: the dict's own lookup "
           "method is the key function."],
    solution_code="slowest = max(one.phases_ms, key=one.phases_ms.get)\nq2.check(slowest, one)",
)
q3 = Exercise(
    "5.2 q3: the most that loader workers can save",
    _check_best_gain,
    usage="q3.check(best_gain, one)",
    hints=["Workers take over the loading and nothing else. Even if they made it free, the rest of the step "
           "stays: the best they can do is remove the loading's share of the step.",
           f"one.phases_ms['data loading'] is the loading's ms per step, and another attribute of one holds the "
           f"whole step's (both from the run without workers); {OTHER!r} is not part of the loading.",
           "The best gain is the loading's share of the whole step, both read from the run without workers: "
           "its data-loading phase over its step time."],
    solution_code="best_gain = one.phases_ms[\"data loading\"] / one.step_ms\nq3.check(best_gain, one)",
)


def _tiny_step():
    """q4's training step: a small MLP's forward, backward and SGD step in one labelled range, with matrix
    products large enough that an operator, not the loop's Python, does most of the work (run once here, so
    that the optimizer's first-call set-up is not what the learner's profiler measures)."""
    import torch
    from torch.profiler import record_function

    generator = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(256, 512, generator=generator)

    def step():
        with record_function(STEP_LABEL):
            model(inputs).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()

    step()
    return step


@contextmanager
def _quiet_native_stderr():
    """Send file descriptor 2 to a discarded file for the block: the profiler's C++ engine (kineto) logs a
    ``profiler_start``/``profiler_stop`` line there at each start and stop, which a notebook would show
    (or not, as its capture thread catches it) under the verdict."""
    import os
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _check_trace_and_top(profile_and_save) -> None:
    import json
    import tempfile
    from pathlib import Path

    import torch

    with tempfile.TemporaryDirectory() as folder:  # removed afterwards, whatever happens
        path = Path(folder) / "step.json"
        try:
            with _quiet_native_stderr():
                returned = profile_and_save(_tiny_step(), str(path))
        except AttributeError as error:
            if "save" not in str(error):
                raise
            raise Incorrect(tr("export_chrome_trace ran before the profiler stopped (inside the `with` block, "
                               "it has nothing to save yet): call it after the block.")) from None
        if not (isinstance(returned, tuple) and len(returned) == 2):
            raise Incorrect(tr("return two things, the profiler and the operator's name (`return prof, top`); "
                               "yours returned {kind}.", kind=type(returned).__name__))
        prof, top = returned
        if not path.is_file():
            raise Incorrect(tr("no trace file at the path you were given: pass `path` to "
                               "prof.export_chrome_trace."))
        try:
            events = json.loads(path.read_text()).get("traceEvents", [])
        except (ValueError, AttributeError):
            raise Incorrect(tr("the file at `path` is not a Chrome trace (JSON with traceEvents): write it with "
                               "prof.export_chrome_trace(path).")) from None
    if not any(event.get("name") == STEP_LABEL for event in events):
        raise Incorrect(tr("the trace holds no {label!r} range: profile the call of step() itself.",
                           label=STEP_LABEL))
    if not isinstance(prof, torch.profiler.profile):
        raise Incorrect(tr("the first thing returned should be the profiler (the `prof` of `with profile(...) "
                           "as prof:`); yours is {kind}.", kind=type(prof).__name__))
    averages = list(prof.key_averages())
    by_self = max(averages, key=lambda e: e.self_cpu_time_total).key
    by_total = max(averages, key=lambda e: e.cpu_time_total).key
    if not isinstance(top, str):
        raise Incorrect(tr("top should be an operator's name, a string such as 'aten::mm'; you gave {kind}.",
                           kind=type(top).__name__))
    if top == by_total and top != by_self:
        raise Incorrect(tr("{top!r} has the most CPU total, which counts the operators it called; the work "
                           "itself is the self CPU time, where {want!r} comes first.", top=top, want=by_self))
    if top != by_self:
        raise Incorrect(tr("{top!r} is not the operator with the most self CPU time in your profiler's "
                           "key_averages(): {want!r} is.", top=top, want=by_self))


q4 = Exercise(
    "5.2 q4: save a trace and name the top operator",
    _check_trace_and_top,
    usage="q4.check(profile_and_save)",
    api=True,
    checked=("checked: your trace file parsed with the step's range, and your top operator is the one with "
             "the most self CPU time in your profiler."),
    hints=["Profile one call of the step function you are given; once the profiler has stopped, write its trace to the path, then look "
           "through its per-operator averages for the one whose own time (not counting the operators it "
           "called) is largest.",
           "profile(activities=[ProfilerActivity.CPU]) as a `with` block; the profiler's export_chrome_trace "
           "and key_averages() methods after the block; each row of key_averages() has a name and times, and "
           "Python's max() takes key= (PyTorch docs: 'PyTorch Profiler' recipe).",
           "After the `with` block: export the trace to the path, then take the row of key_averages() with "
           "the largest self CPU time (an attribute of each row, beside its total) and return the profiler "
           "with that row's name."],
    solution_code=(
        "def profile_and_save(step, path):\n"
        "    with profile(activities=[ProfilerActivity.CPU]) as prof:\n"
        "        step()\n"
        "    prof.export_chrome_trace(path)\n"
        "    top = max(prof.key_averages(), key=lambda e: e.self_cpu_time_total).key\n"
        "    return prof, top\n\nq4.check(profile_and_save)"
    ),
)
