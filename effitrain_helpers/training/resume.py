"""Did the resumed run end where the uninterrupted one did, and what did the crash cost? (lesson 5.3)

Lesson 5.3 writes its checkpoints with ``accelerator.save_state`` into folders named ``step_<n>`` (``n``: the
optimizer steps done when it was saved) under one root. This module answers the questions around that loop,
never the loop itself:

- :func:`checkpoint_folder`, :func:`steps_done`: the one home of that naming;
- :func:`latest_checkpoint`: the newest *complete* checkpoint (every file ``save_state`` writes, for every rank);
- :func:`lost_steps`: the steps a crash throws away when checkpoints come every ``save_every`` steps;
- :func:`state_differences`: how far two runs' final weights and AdamW states are apart (0.0: bit-identical);
- :func:`checkpoint_files`, :func:`expected_checkpoint_bytes`: what a checkpoint holds on disk, next to theory.
"""

from __future__ import annotations

from pathlib import Path

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.core.validate import positive_int, whole_number

PREFIX = "step_"
# What accelerate 1.x's save_accelerator_state (accelerate/checkpointing.py) writes for one model, optimizer,
# scheduler and data loader; random_states_<rank>.pkl is written by every rank, the rest by the main process.
WHAT_FILES_HOLD = {
    "model.safetensors": msg("model weights (safetensors)"),
    "pytorch_model.bin": msg("model weights (pickle, safe_serialization=False)"),
    "optimizer.bin": msg("optimizer.state_dict(): AdamW's exp_avg, exp_avg_sq and step per tensor, "
                         "hyper-parameters"),
    "scheduler.bin": msg("scheduler.state_dict(): its step count and last learning rates"),
    "sampler.bin": msg("the data sampler (an iterable dataset's seedable sampler only)"),
    "dl_state_dict.bin": msg("a StatefulDataLoader's position"),
    "scaler.pt": msg("the fp16 GradScaler"),
}
SHARED_FILES = ("model.safetensors", "optimizer.bin", "scheduler.bin")


def checkpoint_folder(root, step: int) -> Path:
    """Where lesson 5.3 saves the checkpoint taken after ``step`` optimizer steps: ``root/step_<step>``."""
    return Path(root) / f"{PREFIX}{whole_number('step', step, minimum=0, example='step=8')}"


def steps_done(folder) -> int:
    """The optimizer steps done when ``folder`` (named by :func:`checkpoint_folder`) was saved."""
    name = Path(folder).name
    number = name[len(PREFIX):]
    if not name.startswith(PREFIX) or not number.isdigit():
        raise ValueError(f"checkpoint folder {str(folder)!r} is not named {PREFIX}<steps>, e.g. {PREFIX}8. "
                         "Fix: pass a folder made by checkpoint_folder(root, step).")
    return int(number)


def is_complete(folder, world_size: int) -> bool:
    """Whether ``folder`` holds the shared files and one ``random_states_<rank>.pkl`` per rank."""
    folder = Path(folder)
    names = [*SHARED_FILES, *(f"random_states_{r}.pkl" for r in range(world_size))]
    return all((folder / name).is_file() for name in names)


def latest_checkpoint(root, world_size: int) -> Path | None:
    """The complete checkpoint under ``root`` with the most steps, or None when there is none.

    A folder a crash interrupted while it was being written lacks files: it is passed over, not resumed from.
    """
    positive_int("world_size", world_size, hint=msg("e.g. world_size=2 (the processes that saved)"))
    folders = [f for f in Path(root).glob(f"{PREFIX}*") if f.name[len(PREFIX):].isdigit()]
    complete = [f for f in folders if is_complete(f, world_size)]
    return max(complete, key=steps_done, default=None)


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
            raise ValueError(f"a run needs the keys model, optimizer and lr; missing {sorted(missing)}.")
    out = {"model": max_difference(a["model"], b["model"])}
    state_a, state_b = a["optimizer"]["state"], b["optimizer"]["state"]
    if set(state_a) != set(state_b):
        raise ValueError(f"the two optimizers hold state for different parameters ({len(state_a)} against "
                         f"{len(state_b)}): compare runs of the same model.")
    for key in ("exp_avg", "exp_avg_sq", "step"):
        out[key] = max_difference({i: s[key] for i, s in state_a.items()},
                                  {i: s[key] for i, s in state_b.items()}) if state_a else 0.0
    out["learning rate"] = abs(float(a["lr"]) - float(b["lr"]))
    return out


def checkpoint_files(folder) -> list[dict]:
    """The files ``save_state`` wrote into ``folder``: ``{"file", "bytes", "holds"}`` each, by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"checkpoint folder {str(folder)!r} does not exist. Fix: pass a folder save_state wrote.")
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
