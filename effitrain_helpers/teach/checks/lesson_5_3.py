"""Exercises of lesson 5.3 (checkpoint, crash, resume)."""

from __future__ import annotations

import functools
import math
import os
import re
from pathlib import Path

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.checks.tiny import tiny_model, tiny_rows
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number, hands_over_to

# q1's run: 2 processes, batches of 2, 8 steps (one epoch per rank); saves after steps 2 and 4; stops after 5
PROCESSES, BATCH, STEPS, SAVES, STOP = 2, 2, 8, (2, 4), 5
TIMEOUT = 150  # seconds; a save or barrier on one rank only can make the other wait for ever
# Rank 1's save_state starts this many seconds late, so a seal that does not wait for every rank at a barrier
# always finds rank 1's files missing (unslowed, rank 1 is usually quick enough, and the race goes unseen).
SLOW_RANK_SECONDS = 1.0
# The slowed rank leaves this file in root when its save_state is called, so a seal that found rank 1's files
# missing can tell a race (rank 1 saving late) from a save that rank 1 never made (the main process saving alone).
SAVE_CALLED = ".effitrain-check-save-state-called"
# The main process leaves this file (then the step) in root each time the learner's save returns: a run that
# failed inside save is judged by its error, not by the folders a finished run would have left
SAVE_RETURNED = ".effitrain-check-save-returned-"
# q2: a checkpoint every 50 steps, a rank dies after 1,336 steps; q3: Young's interval for a 512-GPU job
Q2_EVERY, Q2_DONE = 50, 1336
Q3_SAVE_SECONDS, Q3_GPUS, Q3_GPU_MTBF_YEARS = 30.0, 512, 5.0
# q3's answer may be off by this fraction: a 365.25-day year (0.03%) or an answer rounded to 4,300 s or to 72
# minutes (0.5%) is right; a save time of 31 s in place of 30 (1.6%) is not
Q3_TOLERANCE = 0.01
YEAR_SECONDS = 365 * 24 * 3600


def _build():
    """A seeded run on the tiny model: Accelerator, prepared model, AdamW, shuffled loader, linear schedule."""
    import torch
    from accelerate import Accelerator, DataLoaderConfiguration
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader

    set_seed(0)
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    loader = DataLoader(tiny_rows(PROCESSES * BATCH * STEPS), batch_size=BATCH, shuffle=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / (PROCESSES * STEPS + 1))
    return accelerator, *accelerator.prepare(model, optimizer, loader, scheduler)


def _step(accelerator, model, optimizer, scheduler, batch) -> None:
    accelerator.backward(model(**batch).loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def _weights(accelerator, model):
    return accelerator.unwrap_model(model).linear.weight.detach().clone()


def _run_learner(save, resume, root: str) -> dict:
    """In each process: an uninterrupted run; a run that saves with ``save`` and stops; a run restarted
    with ``resume``. Returns what the checker compares."""
    accelerator, model, optimizer, loader, scheduler = _build()
    batches = []
    for batch in loader:
        batches.append(batch["labels"].clone())
        _step(accelerator, model, optimizer, scheduler, batch)
    reference = _weights(accelerator, model)

    accelerator, model, optimizer, loader, scheduler = _build()
    if not accelerator.is_main_process:
        _slow_down_save_state(accelerator, root)
    saved = {}
    for done, batch in enumerate(loader, start=1):
        _step(accelerator, model, optimizer, scheduler, batch)
        if done in SAVES:
            save(accelerator, root, done)
            if accelerator.is_main_process:
                Path(root, f"{SAVE_RETURNED}{done}").touch()
            saved[done] = _weights(accelerator, model)
        if done == STOP:
            break
    accelerator.wait_for_everyone()

    accelerator, model, optimizer, loader, scheduler = _build()
    answer = resume(accelerator, loader, root)
    if not (isinstance(answer, tuple) and len(answer) == 2):
        return {"answer": repr(answer)[:80]}
    done, rest = answer
    restored = {"weights": _weights(accelerator, model), "adam": len(optimizer.state_dict()["state"]),
                "scheduler": scheduler.scheduler.last_epoch}
    first, steps = None, 0
    for batch in rest:
        first = batch["labels"].clone() if first is None else first
        _step(accelerator, model, optimizer, scheduler, batch)
        steps += 1
    return {"answer": None, "done": done, "restored": restored, "first": first, "steps": steps,
            "saved": saved, "batches": batches, "reference": reference, "final": _weights(accelerator, model)}


def _slow_down_save_state(accelerator, root: str) -> None:
    """Make this rank's ``accelerator.save_state`` start :data:`SLOW_RANK_SECONDS` late (a slow disk), leaving
    :data:`SAVE_CALLED` in ``root`` when it is called."""
    import time

    save_state = accelerator.save_state

    def slow_save_state(*args, **kwargs):
        Path(root, SAVE_CALLED).touch()
        time.sleep(SLOW_RANK_SECONDS)
        return save_state(*args, **kwargs)

    accelerator.save_state = slow_save_state


def _sealed_world_sizes(root) -> dict[str, int]:
    """Each sealed folder under ``root`` with the number of processes its seal was told (its marker's)."""
    import json

    from effitrain_helpers.training.resume import MARKER

    return {str(p.parent.relative_to(root)): json.loads(p.read_text())["world_size"] for p in Path(root).rglob(MARKER)}


def _ranks_told(error: str) -> int:
    """How many processes seal was told of, from its RankFilesMissing message (rank 0's file is there): one more
    than the highest rank whose random state it found missing."""
    return 1 + max((int(rank) for rank in re.findall(r"random_states_(\d+)\.pkl", error)), default=0)


def _seal_miscounted(processes: int, told: int) -> Incorrect:
    return Incorrect(tr("in {processes} process(es), seal was told {told} processes saved: give it the number of "
                        "processes that saved, accelerator.num_processes (a number written in is right in one "
                        "world size only).", processes=processes, told=told))


def _seal_in_one_process(save) -> None:
    """The learner's ``save`` once more, in this process: a world of 1 process. The 2-process run cannot tell
    ``accelerator.num_processes`` from a 2 written in; here a seal told of 2 processes finds rank 1's files
    missing. Judges only what seal was told: a save that fails here for another reason (a
    ``torch.distributed.barrier()``, which needs a process group) was judged where it ran, in 2 processes."""
    import tempfile

    from accelerate import Accelerator

    from effitrain_helpers.training.resume import RankFilesMissing

    accelerator = Accelerator(cpu=True)  # nothing prepared: save_state writes the random state, which seal counts
    with tempfile.TemporaryDirectory(prefix="effitrain-5-3-check-") as root:
        try:
            save(accelerator, root, SAVES[0])
        except RankFilesMissing as err:  # random_states_1.pkl ... missing: seal was told of more than 1
            raise _seal_miscounted(1, _ranks_told(str(err))) from None
        except Exception:  # noqa: BLE001 - not about what seal was told: judged in 2 processes
            return
        told = sorted(set(_sealed_world_sizes(root).values()) - {1})
    if told:
        raise _seal_miscounted(1, told[0])


def _saved_files(root) -> dict[str, set[str]]:
    """Each folder under ``root`` that holds a file, with the names of its files (the check's own left out)."""
    out: dict[str, set[str]] = {}
    for path in Path(root).rglob("*"):
        if path.is_file() and path.name != SAVE_CALLED and not path.name.startswith(SAVE_RETURNED):
            out.setdefault(str(path.parent.relative_to(root)), set()).add(path.name)
    return out


def _judge_files(files: dict[str, set[str]], saves: int = len(SAVES)) -> None:
    """Incorrect when what ``save`` wrote, in the ``saves`` calls that returned, cannot be a sealed checkpoint of
    every rank at each step. Rank 1's missing random state is judged even when a save failed (seal's refusal)."""
    from effitrain_helpers.training.resume import MARKER

    lonely = [f for f, names in files.items() if "random_states_0.pkl" in names and "random_states_1.pkl" not in names]
    if lonely:
        raise Incorrect(tr("rank 1's random state is missing from the checkpoint: call save_state in EVERY "
                           "process (it writes the shared files on the main process only, and each rank's own "
                           "state)."))
    if not saves:  # the first save raised: its error says what happened
        return
    if not files:
        raise Incorrect(tr("nothing was written under root: save should call accelerator.save_state(folder) "
                           "with folder = partial_folder(root, step)."))
    if len(files) < saves:
        raise Incorrect(tr("save was called {calls} times but wrote {folders} folder(s): give each step "
                           "its own folder (put the step in its name), or the newest overwrites the others.",
                           calls=saves, folders=len(files)))
    if not any(MARKER in names for names in files.values()):
        raise Incorrect(tr("no checkpoint was sealed, so there is nothing to resume from: after the barrier, "
                           "the main process should call seal(folder, accelerator.num_processes)."))


def _judge(rank: dict) -> None:
    """Incorrect with the first thing that went wrong in one rank's report."""
    import torch

    if rank["answer"] is not None:
        raise Incorrect(tr("resume should return a pair (steps_done, loader); yours returned {answer}.",
                           answer=rank["answer"]))
    done = rank["done"]
    if done != SAVES[-1]:
        raise Incorrect(tr("your resume said {done!r} steps were done; the newest checkpoint was saved after "
                           "{saved} (the run stopped after {stop}, so step {stop} is lost).", done=done,
                           saved=SAVES[-1], stop=STOP))
    restored = rank["restored"]
    if not torch.equal(restored["weights"], rank["saved"][done]) or not restored["adam"]:
        raise Incorrect(tr("after resume the model (or AdamW's state) is not the saved one: call "
                           "accelerator.load_state(folder) after prepare, on every process."))
    if restored["scheduler"] != PROCESSES * done:
        raise Incorrect(tr("the scheduler starts at step {got}, not {want}: load_state restores it when it was "
                           "prepared; load the folder you resume from.", got=restored["scheduler"],
                           want=PROCESSES * done))
    expected_first = rank["batches"][done] if done < len(rank["batches"]) else None
    if rank["first"] is None or not torch.equal(rank["first"], expected_first):
        seen_again = rank["first"] is not None and torch.equal(rank["first"], rank["batches"][0])
        if seen_again:
            raise Incorrect(tr("the loader you returned starts again from the first batch: skip the batches "
                               "already seen with accelerator.skip_first_batches(loader, steps_done)."))
        raise Incorrect(tr("the loader you returned does not start at batch {batch} of the epoch.", batch=done + 1))
    gap = float((rank["final"] - rank["reference"]).abs().max())
    if gap != 0.0 or rank["steps"] != STEPS - done:
        raise Incorrect(tr("after {steps} more steps the weights differ from the uninterrupted run by "
                           "{gap:.1e} (they should be identical).", steps=rank["steps"], gap=gap))


def _check_resume(save, resume) -> None:
    import tempfile

    from effitrain_helpers.processes.launch import RankFailed, launch
    from effitrain_helpers.training.resume import PARTIAL

    from effitrain_helpers.training.resume import save_checkpoint

    for fn, name in ((save, "save"), (resume, "resume")):
        if not callable(fn):
            raise Incorrect(tr("pass your {name} function itself; you gave {fn!r}.", name=name, fn=fn))
    if hands_over_to(save, save_checkpoint):
        raise Incorrect(tr("your save hands the work to {name}, the lesson's own save: write its steps yourself "
                           "(the exercise is what that function does).", name="save_checkpoint"))
    ranks, failed = None, None
    with tempfile.TemporaryDirectory(prefix="effitrain-5-3-check-") as root:
        try:
            ranks = launch(_run_learner, save, resume, root, num_processes=PROCESSES, cpu=True, quiet=True,
                           timeout=TIMEOUT)
        except RankFailed as err:
            error = str(err).splitlines()[0]
            failed = Incorrect(tr("in {processes} processes, {error}", processes=PROCESSES, error=error))
            # seal's own exception classes, so that a message in any language is told apart
            sealed_twice = (err.exc_type == "NotBeingWritten" and _saved_files(root)) or (  # (else none written)
                err.exc_type == "FileNotFoundError" and PARTIAL in error)  # two ranks renaming the same folder
            if sealed_twice:  # named before the files, which it leaves half renamed
                raise Incorrect(tr("seal ran on more than one process (the first renamed the folder): seal "
                                   "on the main process only (if accelerator.is_main_process).")) from None
            if err.exc_type == "RankFilesMissing" and _ranks_told(error) > PROCESSES:
                raise _seal_miscounted(PROCESSES, _ranks_told(error)) from None
            rank_1_saved = os.path.exists(os.path.join(root, SAVE_CALLED))  # else rank 1 never saved: judged below
            if err.exc_type == "RankFilesMissing" and rank_1_saved:  # seal ran ahead of rank 1
                raise Incorrect(tr("the main process sealed the folder before rank 1 had written its files "
                                   "(the check makes rank 1's save_state start {seconds:g} s late): every rank "
                                   "must reach a barrier, accelerator.wait_for_everyone(), after its save_state "
                                   "and before the main process seals.", seconds=SLOW_RANK_SECONDS)) from None
        except TimeoutError:
            failed = Incorrect(tr("the run did not finish within {timeout} s: did one process wait for the other "
                                  "(a wait_for_everyone or save_state called on one rank only)?", timeout=TIMEOUT))
        returned = sum(os.path.exists(os.path.join(root, f"{SAVE_RETURNED}{step}")) for step in SAVES)
        _judge_files(_saved_files(root), returned)  # first: a bad save is often why resume failed
        told = sorted(set(_sealed_world_sizes(root).values()) - {PROCESSES})
    if failed is not None:
        raise failed
    for rank in ranks:
        _judge(rank)
    if told:
        raise _seal_miscounted(PROCESSES, told[0])
    _seal_in_one_process(save)


def _check_lost_steps(answer) -> None:
    from effitrain_helpers.training.resume import lost_steps

    got, want = as_number(answer), lost_steps(Q2_DONE, Q2_EVERY)
    if got == Q2_DONE - want:
        raise Incorrect(tr("{got:,g} is the step after which the newest checkpoint was taken; the steps lost are "
                           "those done after it, up to {done:,}.", got=got, done=Q2_DONE))
    if got == want + 1:
        raise Incorrect(tr("step {step:,} was running, never finished: it is not among the steps done.",
                           step=Q2_DONE + 1))
    if got == Q2_EVERY - want:
        raise Incorrect(tr("{got:,g} steps were still to go to the next checkpoint; count those since the last "
                           "one.", got=got))
    if got != want:
        raise Incorrect(tr("{got:,g} is not the number of steps done after the newest checkpoint (taken after the "
                           "largest multiple of {every} up to {done:,}).", got=got, every=Q2_EVERY, done=Q2_DONE))


def young_interval(save_seconds: float, mtbf_seconds: float) -> float:
    """Young's (1974) first-order best time between checkpoints: sqrt(2 x save time x mean time between
    failures), for a save much shorter than the time between failures."""
    return math.sqrt(2 * save_seconds * mtbf_seconds)


def _check_young(answer) -> None:
    got = as_number(answer)
    job_mtbf = Q3_GPU_MTBF_YEARS * YEAR_SECONDS / Q3_GPUS
    want = young_interval(Q3_SAVE_SECONDS, job_mtbf)
    if math.isclose(got, young_interval(Q3_SAVE_SECONDS, Q3_GPU_MTBF_YEARS * YEAR_SECONDS), rel_tol=Q3_TOLERANCE):
        raise Incorrect(tr("that is the interval for one GPU; the job stops when ANY of its {gpus} GPUs fails, "
                           "so it fails {gpus} times as often.", gpus=Q3_GPUS))
    if math.isclose(got, want / math.sqrt(2), rel_tol=Q3_TOLERANCE):
        raise Incorrect(tr("close: Young's formula has a factor 2 under the square root."))
    if math.isclose(got, want / 60, rel_tol=Q3_TOLERANCE):
        raise Incorrect(tr("answer in seconds, not minutes."))
    if not math.isclose(got, want, rel_tol=Q3_TOLERANCE):
        raise Incorrect(tr("{got:,g} s is not sqrt(2 x save time x the job's mean time between failures).",
                           got=got))


q1 = Exercise(
    "5.3 q1: save and resume, in 2 processes",
    _check_resume,
    usage="q1.check(save, resume)",
    hints=["save: every process writes everything a run needs into a folder of its own for that step, all wait "
           "until every rank has written, then a single process seals the folder. resume finds the newest "
           "whole checkpoint, loads it into the prepared objects, and returns the steps done with a loader that "
           "starts where the run stopped.",
           "Accelerator.save_state(folder) and Accelerator.load_state(folder) (Accelerate docs: 'Checkpointing'); "
           "the workbook's partial_folder, seal, latest_checkpoint and steps_done name, seal and find the "
           "folders; Accelerator.skip_first_batches(loader, n) moves the data position.",
           "Order is the idea. save: every rank writes, every rank waits for all the others, and only then "
           "one rank seals, telling seal how many ranks wrote. resume: find the newest sealed folder, load it "
           "into the prepared objects, and hand back the steps it holds with a loader moved past them."],
    solution_code=(
        "def save(accelerator, root, step):\n"
        "    folder = partial_folder(root, step)\n"
        "    accelerator.save_state(folder)\n"
        "    accelerator.wait_for_everyone()\n"
        "    if accelerator.is_main_process:\n"
        "        seal(folder, accelerator.num_processes)\n\n\n"
        "def resume(accelerator, loader, root):\n"
        "    folder = latest_checkpoint(root)\n"
        "    accelerator.load_state(folder)\n"
        "    done = steps_done(folder)\n"
        "    return done, accelerator.skip_first_batches(loader, done)\n\n\n"
        "q1.check(save, resume)"
    ),
    api=True,
    checked="saved and resumed in 2 processes: weights, AdamW, scheduler and data position as uninterrupted, bit for bit",
)
def _check_loader(make_loader) -> None:
    """Calls ``make_loader`` with a fresh Accelerator: a shuffled loader in batches of 4, whose iterators leave
    torch's global generator alone, with a generator that is registered for checkpointing."""
    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, RandomSampler

    if not callable(make_loader):
        raise Incorrect(tr("pass your {name} function itself; you gave {fn!r}.", name="make_loader", fn=make_loader))
    accelerator = Accelerator(cpu=True)
    try:
        loader = make_loader(accelerator, list(range(16)), 0)
    except ValueError as err:
        if "must include a `state_dict`" in str(err) and "Generator" in str(err):  # a bare torch.Generator
            raise Incorrect(tr("register_for_checkpointing saves objects that have state_dict and "
                               "load_state_dict, and a torch.Generator has neither (it has get_state and "
                               "set_state): register this lesson's LoaderGenerator(seed), which holds one in "
                               ".generator, and give the DataLoader its .generator.")) from None
        raise
    if not isinstance(loader, DataLoader):
        raise Incorrect(tr("make_loader should return a torch DataLoader; yours returned {got}.",
                           got=type(loader).__name__))
    if loader.batch_size != 4 or not isinstance(loader.sampler, RandomSampler):
        raise Incorrect(tr("the loader should shuffle (shuffle=True) in batches of 4."))
    before = torch.get_rng_state()
    next(iter(loader))
    if not torch.equal(before, torch.get_rng_state()) or loader.generator is None:
        raise Incorrect(tr("iter(loader) drew from torch's global generator: give the DataLoader a generator "
                           "of its own (its generator= argument)."))
    state = loader.generator.get_state()
    saved = [obj for obj in getattr(accelerator, "_custom_objects", [])
             if any(isinstance(v, torch.Tensor) and torch.equal(v, state) for v in obj.state_dict().values())]
    if not saved:
        raise Incorrect(tr("the loader's generator is not saved with the checkpoint: save_state only saves the "
                           "prepared objects and those registered for checkpointing (Accelerate docs, "
                           "'Checkpointing')."))


q2 = Exercise(
    "5.3 q2: steps lost in a crash",
    _check_lost_steps,
    usage="q2.check(lost)",
    hints=["Only what is on disk survives: the newest checkpoint. Every step done after it is lost.",
           "The newest checkpoint was taken after the largest multiple of the saving interval that is at most "
           "the steps done (Python's // rounds down).",
           "Find the step at which the newest checkpoint was taken first; the steps lost are those done after "
           "it."],
    solution_code="lost = 1336 - 1336 // 50 * 50\nq2.check(lost)",
)
q3 = Exercise(
    "5.3 q3: how often to save",
    _check_young,
    usage="q3.check(interval_seconds)",
    hints=["Saving often costs save time; saving rarely loses more steps per failure. Young's formula balances "
           "the two: interval = sqrt(2 x save seconds x mean seconds between failures of the JOB).",
           "The job stops when any of its 512 GPUs fails: its mean time between failures is one GPU's divided "
           "by 512. A year has 365 x 24 x 3600 seconds.",
           "Two steps: first the job's mean time between failures in seconds (one GPU's, shared among all the "
           "job's GPUs), then Young's square root with the save time."],
    solution_code=("job_mtbf = 5 * 365 * 24 * 3600 / 512\n"
                   "interval_seconds = math.sqrt(2 * 30 * job_mtbf)\nq3.check(interval_seconds)"),
)
q4 = Exercise(
    "5.3 q4: a data loader with a generator of its own",
    _check_loader,
    usage="q4.check(make_loader)",
    hints=["Give the loader a random generator of its own, so that starting an iterator leaves torch's global "
           "one alone, and make that generator part of what save_state writes.",
           "DataLoader's generator argument (torch.utils.data docs); this lesson's LoaderGenerator(seed) holds a "
           "torch.Generator in .generator, with state_dict and load_state_dict; Accelerate's 'Checkpointing' "
           "guide shows how save_state saves an object of your own.",
           "Three moves: make the lesson's generator holder from the seed; register the holder itself (the "
           "object with state_dict, not the torch generator inside it) so that save_state writes it; build "
           "the shuffled loader on the generator it holds."],
    solution_code=("def make_loader(accelerator, rows, seed):\n"
                   "    generator = LoaderGenerator(seed)\n"
                   "    accelerator.register_for_checkpointing(generator)\n"
                   "    return DataLoader(rows, batch_size=4, shuffle=True, generator=generator.generator)\n\n\n"
                   "q4.check(make_loader)"),
    api=True,
    checked="a shuffled loader in batches of 4 with its own generator, registered for checkpointing",
)


# q5: lesson 5.3's sharded run (training/resume.py's resume_sharded) with the learner's save and load: 2 ranks,
# 4 steps, a checkpoint after step 2, rank 1 killed after step 3, resumed on 1 rank
Q5_STEPS, Q5_SAVE_EVERY, Q5_CRASH_AT, Q5_TIMEOUT = 4, 2, 3, 60


NOT_HANDED_OVER = "effitrain-5-3-q5: load never handed the loaded state to the model and AdamW"


def _load_handed_over(load, model, optimizer, folder) -> None:
    """In each resumed rank: the learner's ``load``, then whether the model and the optimizer took what was
    read through their own ``load_state_dict`` (``set_state_dict`` calls both; so does any right load).
    ``dcp.load`` alone fills the tensors of the dict it is given, which are the model's own here only because
    ``get_state_dict``'s default happens to share them: a load that relies on it is not the lesson's."""
    loaded = set()
    handles = [model.register_load_state_dict_post_hook(lambda module, keys: loaded.add("model")),
               optimizer.register_load_state_dict_post_hook(lambda opt: loaded.add("optimizer"))]
    try:
        load(model, optimizer, folder)
    finally:
        for handle in handles:
            handle.remove()
    missing = [owner for owner in ("model", "optimizer") if owner not in loaded]
    if missing:
        raise RuntimeError(f"{NOT_HANDED_OVER}: missing=" + "+".join(missing))


def _check_sharded(save, load) -> None:
    """``resume_sharded`` with the learner's ``save(model, optimizer, folder)`` and ``load(model, optimizer,
    folder)``: saved on 2 ranks, resumed on 1, compared with the uninterrupted run."""
    from effitrain_helpers.processes.launch import RankFailed
    from effitrain_helpers.training.resume import resume_sharded

    for fn, name in ((save, "save"), (load, "load")):
        if not callable(fn):
            raise Incorrect(tr("pass your {name} function itself; you gave {fn!r}.", name=name, fn=fn))
    try:
        result = resume_sharded(2, 1, crash_at=Q5_CRASH_AT, steps=Q5_STEPS, save_every=Q5_SAVE_EVERY,
                                report=None, write=save, read=functools.partial(_load_handed_over, load),
                                timeout=Q5_TIMEOUT)
    except TimeoutError:
        raise Incorrect(tr("the 2 processes did not finish within {timeout} s: dcp.save is collective (the "
                           "ranks agree on a plan, then each writes its shard), so a save on rank 0 only waits "
                           "for rank 1 for ever; call it on every rank.", timeout=Q5_TIMEOUT)) from None
    except RankFailed as err:
        # dcp.load's load plan; the traceback also shows the f-string's own line, "... state_dict: {fqn}."
        missing = re.search(r"Missing key in checkpoint state_dict: ([A-Za-z_]\w*)", str(err))
        if missing:
            raise Incorrect(tr("the checkpoint holds nothing under {name!r}, which load reads: save "
                               "get_state_dict(model, optimizer)'s two parts, the model's and AdamW's, each under "
                               "the name load reads it by.", name=missing.group(1))) from None
        if f"{NOT_HANDED_OVER}: missing=optimizer" in str(err):  # the model took its part, AdamW did not
            raise Incorrect(tr("load gave the model its part but not AdamW: load the optimizer's part too "
                               "(set_state_dict(model, optimizer, ...) takes both).")) from None
        if NOT_HANDED_OVER in str(err):
            raise Incorrect(tr("load read the checkpoint into a state dict but never gave it to the model and "
                               "AdamW: dcp.load fills the tensors of the dict you pass it; hand them over with "
                               "set_state_dict(model, optimizer, model_state_dict=..., optim_state_dict=...), "
                               "which loads each part into its owner (here the tensors happened to be the "
                               "model's own; with other options they are copies).")) from None
        raise Incorrect(tr("a rank failed: {error}", error=str(err).splitlines()[0])) from None
    if result["resumed_from"] is None:
        raise Incorrect(tr("no whole checkpoint was found after the crash: save should write every rank's "
                           "shard into folder with dcp.save(state, checkpoint_id=folder)."))
    differences = result["differences"]
    if differences["step"] or differences["exp_avg"] > 1e-3:
        raise Incorrect(tr("after load, AdamW did not continue where it was saved (its step counts differ by "
                           "{step:g}): load the optimizer's part too (get_state_dict(model, optimizer) gives "
                           "both parts, dcp.load fills them).", step=differences["step"]))
    if not result["within_tolerance"]:
        raise Incorrect(tr("the resumed weights differ from the uninterrupted run by {got:.1e}, more than the "
                           "{floor:.1e} that changing the world size costs anyway: load what was saved into "
                           "the sharded model (dcp.load, then set_state_dict).", got=result["max_difference"],
                           floor=result["tolerance"]))


q5 = Exercise(
    "5.3 q5: a sharded checkpoint, resumed at another world size",
    _check_sharded,
    usage="q5.check(save, load)",
    hints=["After fully_shard each rank holds only its part of the weights and of AdamW's state: every rank "
           "writes its own part, all at once, and a load on any number of ranks reads back the parts it needs "
           "now, into a model that is already sharded.",
           "torch.distributed.checkpoint (imported as dcp): its save and load take a state dict and "
           "checkpoint_id=folder; get_state_dict and set_state_dict in torch.distributed.checkpoint.state_dict "
           "give and take the model's and the optimizer's parts together (PyTorch docs: 'Distributed "
           "Checkpoint - torch.distributed.checkpoint').",
           "save: take the model's and the optimizer's parts together, save them in one dict under two names "
           "in the folder. load: the same two parts, as a template, read back in place by dcp.load from the "
           "folder, then handed back to the model and the optimizer with the function that takes them (by "
           "keyword)."],
    solution_code=(
        "def save(model, optimizer, folder):\n"
        "    model_state, optim_state = get_state_dict(model, optimizer)\n"
        "    dcp.save({\"model\": model_state, \"optimizer\": optim_state}, checkpoint_id=folder)\n\n\n"
        "def load(model, optimizer, folder):\n"
        "    model_state, optim_state = get_state_dict(model, optimizer)\n"
        "    state = {\"model\": model_state, \"optimizer\": optim_state}\n"
        "    dcp.load(state, checkpoint_id=folder)\n"
        "    set_state_dict(model, optimizer, model_state_dict=state[\"model\"],\n"
        "                   optim_state_dict=state[\"optimizer\"])\n\n\n"
        "q5.check(save, load)"
    ),
    api=True,
    checked="saved by 2 ranks with dcp.save, resumed on 1 after a crash: weights within the world-size floor",
)
