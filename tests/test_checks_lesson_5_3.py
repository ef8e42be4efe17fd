"""Lesson 5.3: the resume helpers, its figure, and its checkers with known right and known wrong answers."""

import copy
import math

import pytest
import torch

from effitrain_helpers.teach import plots
from effitrain_helpers.teach.checks import lesson_5_3 as l53
from effitrain_helpers.training import resume


# ---- effitrain_helpers.training.resume

def test_checkpoint_folder_and_steps_done_round_trip(tmp_path):
    folder = resume.checkpoint_folder(tmp_path, 12)
    assert folder == tmp_path / "step_12" and resume.steps_done(folder) == 12
    for bad in ("checkpoint_3", "step_", "step_x"):
        with pytest.raises(ValueError, match="step_<steps>"):
            resume.steps_done(tmp_path / bad)
    with pytest.raises(ValueError, match="step"):
        resume.checkpoint_folder(tmp_path, -1)


def _fake_checkpoint(root, step, ranks=(0, 1), shared=resume.SHARED_FILES):
    folder = resume.checkpoint_folder(root, step)
    folder.mkdir(parents=True)
    for name in (*shared, *(f"random_states_{r}.pkl" for r in ranks)):
        (folder / name).write_bytes(b"x" * 10)
    return folder


def test_latest_checkpoint_passes_over_incomplete_folders(tmp_path):
    assert resume.latest_checkpoint(tmp_path, 2) is None
    _fake_checkpoint(tmp_path, 3)
    nine = _fake_checkpoint(tmp_path, 9)
    _fake_checkpoint(tmp_path, 12, ranks=(0,))  # rank 1 never wrote its random state
    _fake_checkpoint(tmp_path, 15, shared=("model.safetensors",))  # the main process died mid-save
    (tmp_path / "step_notes").mkdir()
    assert resume.latest_checkpoint(tmp_path, 2) == nine
    assert resume.latest_checkpoint(tmp_path, 1).name == "step_12"
    with pytest.raises(ValueError, match="world_size"):
        resume.latest_checkpoint(tmp_path, 0)


@pytest.mark.parametrize("completed, every, start, lost", [
    (14, 3, 0, 2), (12, 3, 0, 0), (2, 3, 0, 2), (1336, 50, 0, 36), (14, 3, 13, 1), (14, 5, 12, 2)])
def test_lost_steps(completed, every, start, lost):
    assert resume.lost_steps(completed, every, start) == lost


def test_lost_steps_rejects_bad_values():
    with pytest.raises(ValueError, match="save_every"):
        resume.lost_steps(10, 0)
    with pytest.raises(ValueError, match="start"):
        resume.lost_steps(10, 3, start=11)


def _run(model, steps=2, lr=0.01):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(steps):
        model(torch.ones(2, 3)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "lr": lr}


def test_state_differences_zero_for_identical_runs_and_positive_otherwise():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    a, b = _run(copy.deepcopy(model)), _run(copy.deepcopy(model))
    assert set(resume.state_differences(a, b).values()) == {0.0}
    c = _run(copy.deepcopy(model), steps=3)
    diff = resume.state_differences(a, c)
    assert diff["model"] > 0 and diff["exp_avg"] > 0 and diff["step"] == 1.0
    with pytest.raises(ValueError, match="missing"):
        resume.state_differences(a, {"model": a["model"]})


def test_checkpoint_files_and_theory(tmp_path):
    folder = _fake_checkpoint(tmp_path, 3)
    rows = {r["file"]: r for r in resume.checkpoint_files(folder)}
    assert rows["optimizer.bin"]["bytes"] == 10 and "exp_avg" in rows["optimizer.bin"]["holds"]
    assert "rank 1" in rows["random_states_1.pkl"]["holds"]
    with pytest.raises(ValueError, match="does not exist"):
        resume.checkpoint_files(tmp_path / "nowhere")
    model = torch.nn.Linear(10, 4)  # 44 parameters in 2 tensors
    assert resume.expected_checkpoint_bytes(model) == {"weights": 44 * 4, "optimizer": 44 * 8 + 2 * 4}


def test_timeline_figure():
    launches = [{"label": "crashed", "start": 0, "end": 14, "saves": [3, 6, 9, 12]},
                {"label": "resumed", "start": 12, "end": 16, "saves": [15]}]
    fig = plots.plot_resume_timeline(launches, crash_after=14, resumed_from=12)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["resumed", "crashed"]
    assert "lost: 2 step(s) done again" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    with pytest.raises(ValueError, match="resumed_from"):
        plots.plot_resume_timeline(launches, crash_after=14, resumed_from=15)


# ---- checkers

def test_5_3_q2_lost_steps():
    assert l53.q2.evaluate(36).status == "correct"
    assert "never finished" in l53.q2.evaluate(37).message
    assert "next checkpoint" in l53.q2.evaluate(14).message
    assert l53.q2.evaluate(50).status == "incorrect"


def test_5_3_q3_young_interval():
    mtbf = 5 * 365 * 24 * 3600 / 512
    right = math.sqrt(2 * 30 * mtbf)
    assert l53.q3.evaluate(right).status == "correct"
    assert "ANY" in l53.q3.evaluate(math.sqrt(2 * 30 * mtbf * 512)).message
    assert "factor 2" in l53.q3.evaluate(math.sqrt(30 * mtbf)).message
    assert "minutes" in l53.q3.evaluate(right / 60).message
    assert l53.q3.evaluate(1000).status == "incorrect"


def save(accelerator, root, step):
    accelerator.save_state(resume.checkpoint_folder(root, step))
    accelerator.wait_for_everyone()


def save_on_main_only(accelerator, root, step):
    if accelerator.is_main_process:
        accelerator.save_state(resume.checkpoint_folder(root, step))
    accelerator.wait_for_everyone()


def right_resume(accelerator, loader, root):
    folder = resume.latest_checkpoint(root, accelerator.num_processes)
    accelerator.load_state(folder)
    done = resume.steps_done(folder)
    return done, accelerator.skip_first_batches(loader, done)


def resume_without_skip(accelerator, loader, root):
    folder = resume.latest_checkpoint(root, accelerator.num_processes)
    accelerator.load_state(folder)
    return resume.steps_done(folder), loader


def resume_without_loading(accelerator, loader, root):
    done = resume.steps_done(resume.latest_checkpoint(root, accelerator.num_processes))
    return done, accelerator.skip_first_batches(loader, done)


@pytest.mark.slow
@pytest.mark.parametrize("save_fn, resume_fn, status, words", [
    (save, right_resume, "correct", ""),
    (save_on_main_only, right_resume, "incorrect", "EVERY process"),
    (save, resume_without_skip, "incorrect", "skip_first_batches"),
    (save, resume_without_loading, "incorrect", "load_state"),
], ids=["right", "main-only save", "no skip", "no load"])
def test_5_3_q1_runs_save_and_resume_in_two_processes(save_fn, resume_fn, status, words):
    result = l53.q1.evaluate(save_fn, resume_fn)
    assert result.status == status, result.message
    assert words in result.message


def test_5_3_q1_rejects_what_is_not_a_function():
    assert "function itself" in l53.q1.evaluate(save, 3).message


@pytest.mark.parametrize("files, words", [
    ({}, "nothing was written"),
    ({"one": {"model.safetensors", "random_states_0.pkl", "random_states_1.pkl"}}, "its own folder"),
    ({f"step_{s}": {"model.safetensors", "random_states_0.pkl"} for s in (2, 4)}, "EVERY process"),
], ids=["nothing", "one folder", "main only"])
def test_5_3_q1_judges_what_save_wrote(files, words):
    with pytest.raises(l53.Incorrect, match=words):
        l53._judge_files(files)
    l53._judge_files({f"step_{s}": {"model.safetensors", "random_states_0.pkl", "random_states_1.pkl"}
                      for s in (2, 4)})  # a checkpoint of both ranks at each step passes
