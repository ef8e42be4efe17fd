"""Did the resumed run end where the uninterrupted one did, and what did the crash cost? (lesson 5.3)

Lesson 5.3 writes its checkpoints with ``accelerator.save_state`` into folders named ``step_<n>`` (``n``: the
optimizer steps done when it was saved) under one root. This module answers the questions around that loop,
never the loop itself:

- :func:`checkpoint_folder`, :func:`steps_done`: the one home of that naming;
- :func:`save_checkpoint` (:func:`partial_folder`, :func:`seal`): an atomic checkpoint, whole or absent;
- :func:`checkpoint_problem`, :func:`latest_checkpoint`: the newest checkpoint that is whole, passing over the others
  with one line saying why;
- :class:`LoaderGenerator`: a data loader's own random generator, saved with the checkpoint;
- :func:`lost_steps`: the steps a crash throws away when checkpoints come every ``save_every`` steps;
- :func:`state_differences`: how far two runs' final weights and AdamW states are apart (0.0: bit-identical);
- :func:`checkpoint_files`, :func:`expected_checkpoint_bytes`: what a checkpoint holds on disk, next to theory
  (:data:`TERMS`: their keys, which ``language.styled`` shows in the learner's language).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from effitrain_helpers.core.files import read_bytes
from effitrain_helpers.core.outputs import check_output_folder
from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.core.validate import positive_int, whole_number

PREFIX = "step_"
PARTIAL = ".partial"  # a checkpoint still being written: .step_<n>.partial, renamed to step_<n> when sealed
MARKER = "complete.json"  # written last, by the main process: every file's size and SHA-256
# What accelerate 1.x's save_accelerator_state and save_custom_state (accelerate/checkpointing.py) write for one
# model, optimizer, scheduler, data loader and registered object under DDP; random_states_<rank>.pkl is written by
# every rank, the rest by the main process (after fully_shard, each rank would hold a shard instead).
WHAT_FILES_HOLD = {
    "model.safetensors": msg("model weights (safetensors)"),
    "pytorch_model.bin": msg("model weights (pickle, safe_serialization=False)"),
    "optimizer.bin": msg("optimizer.state_dict(): AdamW's exp_avg, exp_avg_sq and step per tensor, "
                         "hyper-parameters"),
    "scheduler.bin": msg("scheduler.state_dict(): its step count and last learning rates"),
    "sampler.bin": msg("the data sampler (an iterable dataset's seedable sampler only)"),
    "dl_state_dict.bin": msg("a StatefulDataLoader's position"),
    "scaler.pt": msg("the fp16 GradScaler"),
    "custom_checkpoint_0.pkl": msg("the first object given to register_for_checkpointing (here: the loader's "
                                   "generator)"),
    MARKER: msg("written last by the main process: each file's size and SHA-256 (save_checkpoint)"),
}
# The English keys of lesson 5.3's tables (the self-checks compare them), shown in the learner's language by
# language.styled: checkpoint_files' columns, the pieces a resume needs, state_differences' and the byte counts'.
TERMS = (msg("file"), msg("holds"), msg("data position"), msg("optimizer"), msg("loader's generator"),
         msg("model"), msg("learning rate"), msg("weights"), msg("everything else"))


def checkpoint_folder(root, step: int) -> Path:
    """Where lesson 5.3 saves the checkpoint taken after ``step`` optimizer steps: ``root/step_<step>``."""
    return Path(root) / f"{PREFIX}{whole_number('step', step, minimum=0, example='step=8')}"


def steps_done(folder) -> int:
    """The optimizer steps done when ``folder`` (named by :func:`checkpoint_folder`) was saved."""
    name = Path(folder).name
    number = name[len(PREFIX):]
    if not name.startswith(PREFIX) or not number.isdigit():
        raise ValueError(tr("checkpoint folder {folder!r} is not named {prefix}<steps>, e.g. {prefix}8. Fix: pass a "
                            "folder made by checkpoint_folder(root, step).", folder=str(folder), prefix=PREFIX))
    return int(number)


def partial_folder(root, step: int) -> Path:
    """Where the checkpoint of ``step`` is written before it is sealed: ``root/.step_<step>.partial`` (a name
    :func:`latest_checkpoint` never resumes from)."""
    final = checkpoint_folder(root, step)
    return final.with_name(f".{final.name}{PARTIAL}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file or, where the system allows, a folder) to the disk."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # a folder on Windows
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class NotBeingWritten(ValueError):
    """:func:`seal` was given a folder that is no checkpoint being written (never one, or already sealed)."""


class RankFilesMissing(ValueError):
    """:func:`seal` found a rank's own file missing: that rank never saved, has not finished, or seal was told of
    more processes than saved. Its own class, so a checker can tell it in any language."""


def seal(folder, world_size: int, per_rank: str = "random_states_{rank}.pkl") -> Path:
    """Make the checkpoint written into ``partial_folder(root, step)`` a complete one; main process only, after
    a barrier that every rank reached once its own files were written.

    Checks that every rank's own file is there (``per_rank``: ``save_state`` 's random states, or
    ``"__{rank}_0.distcp"`` for ``torch.distributed.checkpoint`` 's shards), writes :data:`MARKER` (each file's size and
    SHA-256) last, flushed to disk, then renames the folder to ``step_<n>``: a rename on one file system is
    atomic, so ``step_<n>`` appears whole or not at all. Returns the sealed folder."""
    folder = Path(folder)
    world_size = positive_int("world_size", world_size, hint=msg("e.g. world_size=2 (the processes that saved)"))
    if not folder.name.endswith(PARTIAL) or not folder.is_dir():
        raise NotBeingWritten(tr("{folder!r} is not a checkpoint being written. Fix: seal the folder that "
                                 "partial_folder(root, step) names, after save_state wrote into it.",
                                 folder=str(folder)))
    missing = [per_rank.format(rank=r) for r in range(world_size) if not (folder / per_rank.format(rank=r)).is_file()]
    if missing:
        raise RankFilesMissing(tr("{missing} missing from {folder}: every process must call save_state (each "
                                  "writes its own random state), then wait at a barrier before the main process "
                                  "seals.", missing=", ".join(missing), folder=folder.name))
    files = {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(folder.iterdir()) if p.is_file() and p.name != MARKER}
    for name in files:
        _fsync(folder / name)
    marker = folder / MARKER
    marker.with_suffix(".tmp").write_text(json.dumps({"world_size": world_size, "files": files}, indent=1))
    _fsync(marker.with_suffix(".tmp"))
    os.replace(marker.with_suffix(".tmp"), marker)
    final = folder.with_name(folder.name[1:-len(PARTIAL)])
    if final.exists():  # a resumed run saving the same step again: the new copy replaces the old
        shutil.rmtree(final)
    os.replace(folder, final)
    _fsync(final.parent)
    return final


def save_checkpoint(accelerator, root, step: int) -> Path:
    """Save an atomic checkpoint of every prepared object after ``step`` optimizer steps; call it on every process.

    1. every rank calls ``save_state`` into the partial folder (the main process writes the model, optimizer,
       scheduler and registered objects, each rank its random state);
    2. a barrier: when it opens, no rank is still writing;
    3. the main process seals it (:func:`seal`): marker last, then the rename to ``step_<n>``.
    A crash before 3 ends leaves no ``step_<n>``; a file damaged later no longer matches the marker."""
    folder = partial_folder(root, step)
    accelerator.save_state(folder)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        seal(folder, accelerator.num_processes)
    return checkpoint_folder(root, step)


def checkpoint_problem(folder) -> str | None:
    """Why ``folder`` cannot be resumed from (one line), or None when it is whole: sealed, every file it lists
    there with its size and SHA-256."""
    folder = Path(folder)
    if folder.name.endswith(PARTIAL):
        return tr("never sealed: the save did not finish")
    marker = folder / MARKER
    if not marker.is_file():
        return tr("no {marker}: not sealed by the main process (a crash mid-save, or not saved with "
                  "save_checkpoint)", marker=MARKER)
    try:
        listed = _listed_files(json.loads(read_bytes(marker, limit=2**20)))
    except ValueError:
        listed = None
    if listed is None:
        return tr("{marker} cannot be read", marker=MARKER)
    if isinstance(listed, str):
        return listed
    for name, expected in listed.items():
        path = folder / name
        if not path.is_file():
            return tr("{file} is missing", file=name)
        size = path.stat().st_size
        if size != expected["bytes"]:
            return tr("{file} has {size:,} bytes, {expected:,} when saved (truncated?)", file=name, size=size,
                      expected=expected["bytes"])
        if _sha256(path) != expected["sha256"]:
            return tr("{file} changed since it was saved (SHA-256 differs)", file=name)
    return None


def _listed_files(marker) -> dict | str | None:
    """The ``{file: {"bytes", "sha256"}}`` a parsed :data:`MARKER` lists; None when it is not a marker's shape,
    one line (a ``str``) when it lists too little to resume from: a rank's own file (``random_states_<r>.pkl``,
    or ``__<r>_0.distcp`` for a sharded save) or the model (its weights, or a sharded save's ``.metadata``)."""
    if not isinstance(marker, dict) or not isinstance(marker.get("files"), dict):
        return None
    listed, world = marker["files"], marker.get("world_size")
    if not all(isinstance(name, str) and name and Path(name).name == name and name not in (".", "..")
               and isinstance(e, dict) and type(e.get("bytes")) is int and e["bytes"] >= 0
               and isinstance(e.get("sha256"), str) for name, e in listed.items()):
        return None
    if type(world) is not int or world < 1:
        return None
    for rank in range(world):
        if not {f"random_states_{rank}.pkl", SHARD_FILE.format(rank=rank)} & set(listed):
            return tr("{marker} lists no file of rank {rank}", marker=MARKER, rank=rank)
    if ".metadata" not in listed and not any(n.startswith(("model", "pytorch_model")) for n in listed):
        return tr("{marker} lists no model weights (model.safetensors)", marker=MARKER)
    return listed


def latest_checkpoint(root, report=print) -> Path | None:
    """The newest whole checkpoint under ``root`` (most steps), or None when there is none.

    Newer folders that are not whole (:func:`checkpoint_problem`: never sealed, truncated, changed) are passed
    over, each with one line given to ``report`` (``print`` by default; None: silent)."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = []
    for folder in root.iterdir():
        name = folder.name[1:-len(PARTIAL)] if folder.name.endswith(PARTIAL) else folder.name
        if folder.is_dir() and name.startswith(PREFIX) and name[len(PREFIX):].isdigit():
            found.append((int(name[len(PREFIX):]), not folder.name.endswith(PARTIAL), folder))
    for _, _, folder in sorted(found, key=lambda f: f[:2], reverse=True):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder
        if report is not None:
            report(tr("passing over {folder}: {problem}", folder=folder.name, problem=problem))
    return None


class LoaderGenerator:
    """A data loader's own ``torch.Generator``, which ``accelerator.save_state`` saves when registered.

    Each ``iter(DataLoader)`` draws a base seed (for its workers) from ``DataLoader(generator=...)``, or from
    torch's global generator when none is given (torch's ``_BaseDataLoaderIter.__init__``): a run that restores
    the global generator and then starts a fresh iterator is one draw ahead of the uninterrupted run, and its
    dropout masks differ. With a generator of its own, the loader leaves the global one alone::

        generator = LoaderGenerator(seed)
        loader = DataLoader(rows, ..., generator=generator.generator)
        accelerator.register_for_checkpointing(generator)  # saved as custom_checkpoint_0.pkl
    """

    def __init__(self, seed: int):
        import torch

        self.generator = torch.Generator().manual_seed(whole_number("seed", seed, minimum=0, example="seed=0"))

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


def lost_steps(completed: int, save_every: int, start: int = 0) -> int:
    """Optimizer steps a crash throws away: those done since the last checkpoint.

    ``completed``: steps finished when the run died; checkpoints were taken after every ``save_every``-th step
    counted from 0 (a run resumed at ``start`` keeps the same grid); ``start`` itself is on disk already.
    """
    completed = whole_number("completed", completed, minimum=0, example="completed=11")
    save_every = positive_int("save_every", save_every, example="save_every=4")
    start = whole_number("start", start, minimum=0, maximum=completed, hint=msg("the step the run resumed from"))
    last = max(start, completed // save_every * save_every)
    return completed - last


def state_differences(a: dict, b: dict) -> dict[str, float]:
    """Largest absolute differences between two runs' final states, per part: ``{"model", "exp_avg",
    "exp_avg_sq", "step", "learning rate"}``. Each run is ``{"model": state_dict, "optimizer": state_dict,
    "lr": float}`` (a plain optimizer's ``state_dict()``). 0.0 everywhere means bit-identical runs."""
    from effitrain_helpers.training.workload import max_difference

    for run in (a, b):
        missing = {"model", "optimizer", "lr"} - set(run)
        if missing:
            raise ValueError(tr("a run needs the keys model, optimizer and lr; missing {missing}.",
                                missing=sorted(missing)))
    out = {"model": max_difference(a["model"], b["model"])}
    state_a, state_b = a["optimizer"]["state"], b["optimizer"]["state"]
    if set(state_a) != set(state_b):
        raise ValueError(tr("the two optimizers hold state for different parameters ({n_state_a} against "
                            "{n_state_b}): compare runs of the same model.",
                            n_state_a=len(state_a), n_state_b=len(state_b)))
    for key in ("exp_avg", "exp_avg_sq", "step"):
        out[key] = max_difference({i: s[key] for i, s in state_a.items()},
                                  {i: s[key] for i, s in state_b.items()}) if state_a else 0.0
    out["learning rate"] = abs(float(a["lr"]) - float(b["lr"]))
    return out


def checkpoint_files(folder) -> list[dict]:
    """The files ``save_state`` wrote into ``folder``: ``{"file", "bytes", "holds"}`` each, by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(tr("checkpoint folder {folder!r} does not exist. Fix: pass a folder save_state wrote.",
                            folder=str(folder)))
    rows = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        holds = WHAT_FILES_HOLD.get(path.name)
        if holds is not None:
            holds = tr(holds)
        elif path.name.startswith("random_states_"):
            holds = tr("rank {rank}'s random generators (Python, NumPy, torch CPU; CUDA where present) and "
                       "accelerator.step", rank=path.stem.split("_")[-1])
        rows.append({"file": path.name, "bytes": path.stat().st_size, "holds": holds or tr("other")})
    return rows


def expected_checkpoint_bytes(model) -> dict[str, int]:
    """Theory for a float32 model trained with AdamW: ``{"weights": 4 x parameters, "optimizer": 8 x
    parameters + 4 per tensor}`` (the two moments and a float32 step per tensor: lesson 4.1)."""
    from effitrain_helpers.measure.optimizer_memory import adamw_state_bytes, parameter_bytes

    return {"weights": parameter_bytes(model), "optimizer": adamw_state_bytes(model)}


# ---- the lesson's experiment from a terminal (effitrain resume)

def _build(model, rows, steps: int, batch_size: int, seed: int, own_generator: bool = True):
    """Lesson 5.3's set-up: Accelerator, prepared model, AdamW, shuffled loader (its own generator, registered
    for checkpointing, unless ``own_generator`` is False) and a linear schedule with warm-up."""
    import copy

    import torch
    from accelerate import Accelerator, DataLoaderConfiguration
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup, set_seed

    set_seed(seed)
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    model = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = LoaderGenerator(seed)
    loader = DataLoader(rows, batch_size=batch_size, shuffle=True,
                        generator=generator.generator if own_generator else None)
    if own_generator:
        accelerator.register_for_checkpointing(generator)
    n = accelerator.num_processes
    scheduler = get_linear_schedule_with_warmup(optimizer, 2 * n, n * steps)
    return accelerator, *accelerator.prepare(model, optimizer, loader, scheduler)


def train_with_checkpoints(model, rows, root, *, steps: int, save_every: int, batch_size: int, seed: int = 0,
                           crash_at: int | None = None, resume=None, own_generator: bool = True,
                           after_step=None) -> dict:
    """In each process: lesson 5.3's loop, saving with :func:`save_checkpoint` every ``save_every`` steps into
    ``root``; ``resume``: a checkpoint folder to load first; ``crash_at``: rank 1 kills itself (SIGKILL) after
    that many steps; ``after_step(done)``: called after each step and its checkpoint (lesson 5.4 loses a node
    there). Returns the final state (see :func:`state_differences`)."""
    import copy
    import signal

    accelerator, model, optimizer, loader, scheduler = _build(model, rows, steps, batch_size, seed, own_generator)
    done, resumed_from = 0, None
    if resume is not None:
        accelerator.load_state(resume)
        done = resumed_from = steps_done(resume)
    while done < steps:
        epoch, seen = divmod(done, len(loader))
        loader.set_epoch(epoch)
        for batch in accelerator.skip_first_batches(loader, seen):
            if done == crash_at and accelerator.process_index == 1:
                os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
            accelerator.backward(model(**batch).loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            done += 1
            if done % save_every == 0:
                save_checkpoint(accelerator, root, done)
            if after_step is not None:
                after_step(done)
            if done == steps:
                break
    unwrapped = accelerator.unwrap_model(model)
    return {"world_size": accelerator.num_processes, "resumed_from": resumed_from,
            "model": {k: v.detach().clone() for k, v in unwrapped.state_dict().items()},
            "optimizer": copy.deepcopy(optimizer.state_dict()), "lr": scheduler.get_last_lr()[0]}


def resume_arguments(processes: int, dropout: float, crash_at: int, steps: int, save_every: int) -> None:
    """One-line ``ValueError`` for options :func:`resume_experiment` cannot run with, before any work."""
    whole_number("--processes", processes, minimum=2, hint=msg("a crash needs a rank 1 to kill: e.g. --processes 2"))
    if not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
        raise ValueError(tr("--dropout must be a probability in [0, 1), got {value!r}. Fix: e.g. --dropout 0.1.",
                            value=dropout))
    positive_int("--steps", steps, example="--steps 16")
    positive_int("--save-every", save_every, maximum=steps, hint=msg("at most --steps, e.g. --save-every 3"))
    positive_int("--crash-at", crash_at, maximum=steps - 1,
                 hint=tr("a step before the last ({steps}), e.g. --crash-at {example}", steps=steps,
                         example=min(steps - 1, save_every + 1)))


def _check_checkpoints(checkpoints, model, saves: int) -> None:
    """One-line ``ValueError``, before any process starts, unless ``checkpoints`` is None, or a new or empty
    folder (nothing is lost) that can be written and has room for ``saves`` checkpoints of ``model`` (weights
    and AdamW state: :func:`expected_checkpoint_bytes`)."""
    if checkpoints is None:
        return
    keep = Path(checkpoints)
    if keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
        raise ValueError(tr("--checkpoints {path} exists and is not an empty folder: nothing in it is "
                            "overwritten. Fix: name a new or empty folder.", path=str(keep)))
    check_output_folder(keep, "--checkpoints")
    base = keep
    while not base.exists():
        base = base.parent
    need, free = saves * sum(expected_checkpoint_bytes(model).values()), shutil.disk_usage(base).free
    if free < need:
        raise ValueError(tr("--checkpoints {path}: its disk has {free:,} bytes free, and the runs save about "
                            "{need:,} bytes of checkpoints. Fix: free some space, or name a folder on another "
                            "disk.", path=str(keep), free=free, need=need))


def _crash(launch, RankFailed, fn, *args, **kwargs) -> str | None:
    """Launch the run meant to crash (``kwargs["crash_at"]``: when rank 1 kills itself); one line on how it
    ended: the intended kill said as that (not with launch's out-of-memory hint for a rank that died by
    SIGKILL), any other failure as the first line of its ``RankFailed``; None if it did not crash."""
    try:
        launch(fn, *args, **kwargs)
    except RankFailed as err:
        if err.rank == 1 and err.exc_type == "ProcessExit":
            return tr("rank 1 killed itself on purpose after {steps} steps, as the experiment intends; the other "
                      "ranks were ended", steps=kwargs["crash_at"])
        return str(err).splitlines()[0]
    return None


def resume_experiment(processes: int = 2, dropout: float = 0.1, crash_at: int | None = None,
                      checkpoints=None, steps: int | None = None, save_every: int | None = None,
                      report=print) -> dict:
    """An uninterrupted run, a run whose rank 1 is killed after ``crash_at`` steps, and its resume in fresh
    processes; returns ``{"max_difference", "differences", "resumed_from", ...}`` (0.0: bit-identical).

    ``checkpoints``: a folder (new or empty) to keep the checkpoints in; by default a temporary one, removed.
    ``report`` gets one line for each checkpoint passed over."""
    import tempfile

    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.processes.launch import RankFailed, launch
    from effitrain_helpers.training.workload import lesson_model, lesson_rows

    size = lesson_size("5.3")
    steps = size.steps if steps is None else steps
    save_every = size.save_every if save_every is None else save_every
    crash_at = size.crash_at if crash_at is None else crash_at
    resume_arguments(processes, dropout, crash_at, steps, save_every)
    model, rows = lesson_model(0, dropout=dropout), lesson_rows(size.n_rows, seq_len=size.seq_len)
    _check_checkpoints(checkpoints, model, saves=3 * (steps // save_every))  # uninterrupted, crashed, resumed
    run = {"steps": steps, "save_every": save_every, "batch_size": size.batch_size, "num_processes": processes,
           "cpu": True, "quiet": True}
    with tempfile.TemporaryDirectory(prefix="effitrain-resume-") as tmp:
        root = Path(checkpoints) if checkpoints is not None else Path(tmp)
        reference = launch(train_with_checkpoints, model, rows, root / "uninterrupted", **run)[0]
        crash = _crash(launch, RankFailed, train_with_checkpoints, model, rows, root / "crashed", crash_at=crash_at,
                       **run)
        passed_over = []
        folder = latest_checkpoint(root / "crashed", report=lambda line: (passed_over.append(line), report(line)))
        resumed = launch(train_with_checkpoints, model, rows, root / "crashed", resume=folder, **run)[0]
    differences = state_differences(reference, resumed)
    return {"processes": processes, "dropout": dropout, "steps": steps, "save_every": save_every,
            "crash_at": crash_at, "crash": crash, "resumed_from": resumed["resumed_from"], "passed_over": passed_over,
            "lost_steps": lost_steps(crash_at, save_every), "max_difference": differences["model"],
            "differences": differences, "checkpoints": str(checkpoints) if checkpoints is not None else None}


# ---- sharded checkpoints (fully_shard + torch.distributed.checkpoint), resumed at another world size

SHARD_FILE = "__{rank}_0.distcp"  # what dcp.save's FileSystemWriter writes for each rank (one thread)
SHARDED_BATCH = 12  # global batch: 1, 2, 3, 4 or 6 ranks each take an equal part of it
# Resumed at another world size, the same sums are added in another order (the gradients' reduce-scatter, the
# sharded AdamW update): float32 rounding, which AdamW can magnify (it divides by sqrt(exp_avg_sq), small for
# small gradients). So the tolerance is measured, not guessed: the difference between two uninterrupted runs at
# the two world sizes (the floor). A resume at another world size is right when it differs from the
# uninterrupted run by no more than that floor: it adds nothing to what changing the world size costs anyway.


def _sharded_model():
    from effitrain_helpers.training.model_sharding import sharding_model, wrap_fsdp

    return wrap_fsdp(sharding_model(0))  # every block, then the root, sharded with fully_shard


def _full_states(model, optimizer) -> dict:
    """Model and AdamW state gathered in full on every rank (every rank must call it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    return {"model": {k: v.detach().clone() for k, v in model_state.items()}, "optimizer": optim_state,
            "lr": optimizer.param_groups[0]["lr"]}


def write_shards(model, optimizer, folder) -> None:
    """Every rank's shards of a ``fully_shard`` model and of its optimizer's state into ``folder``:
    ``get_state_dict`` gives this rank's parts (DTensors), ``dcp.save`` writes them; collective, so every rank
    must call it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)  # this rank's shards (DTensors)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=folder)


def read_shards(model, optimizer, folder) -> None:
    """Load a checkpoint of :func:`write_shards` into a model already sharded with ``fully_shard`` (at any
    world size: ``dcp.load`` reads the parts of the saved shards each rank needs now) and its optimizer."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=folder)  # fills the tensors in place, this rank's part only
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def save_sharded(model, optimizer, root, step: int, write=write_shards) -> Path:
    """An atomic sharded checkpoint: every rank writes its own shard with ``write`` (:func:`write_shards`) into
    the partial folder, a barrier, then rank 0 seals it (every rank's shard file must be there). Call it on
    every rank."""
    import torch.distributed as dist

    folder = partial_folder(root, step)
    write(model, optimizer, folder)
    dist.barrier()
    if dist.get_rank() == 0:
        seal(folder, dist.get_world_size(), per_rank=SHARD_FILE)
    return checkpoint_folder(root, step)


def load_sharded(model, optimizer, folder, read=read_shards) -> int:
    """Load a checkpoint of :func:`save_sharded` with ``read`` (:func:`read_shards`); returns the steps it
    holds."""
    read(model, optimizer, folder)
    return steps_done(folder)


def train_sharded(batches: list, root, *, save_every: int, crash_at: int | None = None, resume=None,
                  reference: bool = False, write=write_shards, read=read_shards) -> dict:
    """In each rank: lesson 5.1's model sharded with ``fully_shard``, AdamW created after it, one step per
    global batch of ``batches`` (each rank its equal part), a :func:`save_sharded` checkpoint every
    ``save_every`` steps; ``resume``: a folder to load first; ``crash_at``: rank 1 kills itself after that many
    steps. ``reference``: also an uninterrupted run first, at this world size. ``write``, ``read``: what
    saves and loads the shards (lesson 5.3's exercise passes the learner's). Returns the full final states."""
    import signal

    import torch
    import torch.distributed as dist

    out = {"world_size": dist.get_world_size()}
    if reference:
        out["reference"] = train_sharded(batches, Path(root) / "reference", save_every=len(batches) + 1,
                                         write=write, read=read)["final"]
    rank, world = dist.get_rank(), dist.get_world_size()
    model = _sharded_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # after fully_shard: it holds the shards
    done = 0 if resume is None else load_sharded(model, optimizer, resume, read=read)
    for tokens, labels in batches[done:]:
        if done == crash_at and rank == 1:
            os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
        loss = torch.nn.functional.cross_entropy(model(tokens.chunk(world)[rank]), labels.chunk(world)[rank])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        done += 1
        if done % save_every == 0:
            save_sharded(model, optimizer, root, done, write=write)
    out["final"] = _full_states(model, optimizer)
    return out


def resume_sharded(processes: int = 2, resume_processes: int = 1, crash_at: int | None = None, checkpoints=None,
                   steps: int | None = None, save_every: int | None = None, report=print, write=write_shards,
                   read=read_shards, timeout: float | None = None) -> dict:
    """A sharded run in ``processes`` ranks, uninterrupted; the same run whose rank 1 is killed after
    ``crash_at`` steps; then, in ``resume_processes`` fresh ranks, an uninterrupted run (the rounding floor)
    and the resume from the newest whole checkpoint. ``max_difference``: the largest weight difference, resumed
    against uninterrupted; ``tolerance``: the same between the two uninterrupted runs (see above). ``write``,
    ``read``: see :func:`train_sharded`; ``timeout``: seconds each launch may take (None: launch's default)."""
    import tempfile

    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.processes.launch import RankFailed, launch
    from effitrain_helpers.training.model_sharding import sharding_batches, sharding_model

    size = lesson_size("5.3")
    steps = size.steps if steps is None else steps
    save_every = size.save_every if save_every is None else save_every
    crash_at = size.crash_at if crash_at is None else crash_at
    resume_arguments(processes, 0.0, crash_at, steps, save_every)
    if SHARDED_BATCH % processes or SHARDED_BATCH % whole_number(
            "--resume-processes", resume_processes, minimum=1, maximum=SHARDED_BATCH,
            hint=msg("e.g. --resume-processes 1")):
        raise ValueError(tr("--processes {n} and --resume-processes {m} must both divide the global batch of "
                            "{batch}. Fix: choose from 1, 2, 3, 4, 6.", n=processes, m=resume_processes,
                            batch=SHARDED_BATCH))
    _check_checkpoints(checkpoints, sharding_model(0), saves=3 * (steps // save_every))
    batches = sharding_batches(steps, SHARDED_BATCH)
    options = {"write": write, "read": read, "cpu": True, "quiet": True,
               **({} if timeout is None else {"timeout": timeout})}
    with tempfile.TemporaryDirectory(prefix="effitrain-resume-") as tmp:
        root = Path(checkpoints) if checkpoints is not None else Path(tmp)
        reference = launch(train_sharded, batches, root / "uninterrupted", save_every=save_every,
                           num_processes=processes, **options)[0]["final"]
        crash = _crash(launch, RankFailed, train_sharded, batches, root / "crashed", save_every=save_every,
                       crash_at=crash_at, num_processes=processes, **options)
        passed_over = []
        folder = latest_checkpoint(root / "crashed", report=lambda line: (passed_over.append(line), report(line)))
        resumed = launch(train_sharded, batches, root / f"resumed on {resume_processes}", save_every=save_every,
                         resume=folder, reference=True, num_processes=resume_processes, **options)[0]
    differences = state_differences(reference, resumed["final"])
    floor = state_differences(reference, resumed["reference"])["model"]
    return {"processes": processes, "resume_processes": resume_processes, "fsdp": True, "steps": steps,
            "save_every": save_every, "crash_at": crash_at, "crash": crash,
            "resumed_from": steps_done(folder) if folder else None, "passed_over": passed_over,
            "lost_steps": lost_steps(crash_at, save_every), "max_difference": differences["model"],
            "differences": differences, "tolerance": floor, "within_tolerance": differences["model"] <= floor,
            "checkpoints": str(checkpoints) if checkpoints is not None else None}


# ---- restarts without a human: torchrun --max-restarts

def restarted_run(checkpoints, out, crash_at: int, dropout: float = 0.1) -> None:
    """One rank of a run under ``torchrun --max-restarts 1``: resume from the newest whole checkpoint in
    ``checkpoints`` if there is one, train to the end; on the first attempt only
    (``TORCHELASTIC_RESTART_COUNT`` 0) rank 1 kills itself after ``crash_at`` steps, torchrun ends the other
    rank and starts the group again. Rank 0 saves the final state to ``out`` (``torch.save``)."""
    import torch

    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.training.workload import lesson_model, lesson_rows

    size = lesson_size("5.3")
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    folder = latest_checkpoint(checkpoints, report=print if os.environ.get("RANK") == "0" else None)
    state = train_with_checkpoints(lesson_model(0, dropout=dropout), lesson_rows(size.n_rows, seq_len=size.seq_len),
                                   checkpoints, steps=size.steps, save_every=size.save_every,
                                   batch_size=size.batch_size, crash_at=crash_at if attempt == 0 else None,
                                   resume=folder)
    if os.environ.get("RANK") == "0":
        torch.save({**state, "attempt": attempt}, out)


def _torchrun(checkpoints, out, crash_at: int, processes: int, timeout: float = 300.0) -> dict:
    """``torchrun --standalone --max-restarts 1 --nproc_per_node N -m effitrain_helpers.training.resume ...`` on
    the CPU; rank 0's saved final state.

    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: by default (torch 2.13, ``DynamicRendezvousHandler.next_rendezvous``)
    every attempt's ranks reach the same TCPStore server, the agent's, kept from one rendezvous round to the next,
    and ``init_process_group`` prefixes its keys with the group's name only (``default_pg``, ``0/cpu/``), not
    the attempt: the restarted ranks can read the addresses the killed attempt's ranks left there and wait on
    peers that no longer exist. With the variable set, each round's rank 0 starts a store of its own on a
    fresh port (``RendezvousStoreInfo.build``), which holds nothing from an earlier attempt."""
    import subprocess
    import sys

    import torch

    from effitrain_helpers.processes.ending import end_tree

    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--max-restarts", "1",
               "--nproc-per-node", str(processes), "-m", "effitrain_helpers.training.resume",
               str(checkpoints), str(out), str(crash_at)]
    tmp = Path(out).with_suffix(".tmp")  # torchrun's own temporary folders (torchelastic_*), removed with ``out``'s
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "ACCELERATE_USE_CPU": "1", "TMPDIR": str(tmp),
           "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # a fresh store for each attempt (see above)
    proc = subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TimeoutError(tr("torchrun did not finish within {timeout:.0f} s; it and its ranks were ended. Fix: run "
                              "it again on a quieter machine, or give a larger timeout.", timeout=timeout)) from None
    finally:  # on any exit (Ctrl-C, SIGTERM via sigterm_ends_the_launch, a timeout): torchrun and its ranks
        end_tree(proc.pid)  # (each rank in a session of its own, which a kill of torchrun's group does not reach)
        proc.communicate(timeout=30)
    if not Path(out).is_file():
        raise RuntimeError(tr("torchrun exited with {returncode} and no result:\n{stderr}",
                              returncode=proc.returncode, stderr=stderr[-2000:]))
    return {**torch.load(out, weights_only=False), "log": stdout + stderr}


def restart_experiment(processes: int = 2, crash_at: int | None = None, dropout: float = 0.1) -> dict:
    """Two runs under ``torchrun --max-restarts 1``: one whose rank 1 is killed on the first attempt (torchrun
    restarts the group, which resumes by itself), one never killed; ``max_difference`` between their final
    weights (0.0: the restarted run ended where the uninterrupted one did)."""
    import tempfile

    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.processes.launch import sigterm_ends_the_launch

    size = lesson_size("5.3")
    crash_at = size.crash_at if crash_at is None else crash_at
    resume_arguments(processes, dropout, crash_at, size.steps, size.save_every)
    with sigterm_ends_the_launch(), tempfile.TemporaryDirectory(prefix="effitrain-restart-") as tmp:
        root = Path(tmp)
        restarted = _torchrun(root / "restarted", root / "restarted.pt", crash_at, processes)
        reference = _torchrun(root / "uninterrupted", root / "uninterrupted.pt", size.steps + 1, processes)
    differences = state_differences(reference, restarted)
    return {"processes": processes, "crash_at": crash_at, "attempts": restarted["attempt"] + 1,
            "resumed_from": restarted["resumed_from"], "max_difference": differences["model"],
            "differences": differences}


if __name__ == "__main__":  # a rank under torchrun: checkpoints folder, result file, crash step
    import faulthandler
    import signal
    import sys

    if hasattr(signal, "SIGUSR1"):  # a stuck rank tells where it waits: kill -USR1 <pid>
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    from effitrain_helpers.processes.ending import exit_without_teardown

    restarted_run(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    exit_without_teardown(0)
