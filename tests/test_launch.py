"""The multi-process launcher: real process groups, results in rank order, failures that clean up."""

import time

import psutil
import pytest

from effitrain_helpers.processes import launch as launch_mod
from effitrain_helpers.processes.launch import RankFailed, launch, usable_cores
from effitrain_helpers.processes.sharding import shard_indices, summarize_shards


def _children() -> set[int]:
    """This process's direct children: the workers launch starts (grandchildren belong to long-lived children of
    the test session, such as the browser tests' Chromium, which start and end processes of their own)."""
    return {p.pid for p in psutil.Process().children()}


@pytest.mark.slow
def test_a_local_function_runs_in_a_real_group_and_results_come_back_in_rank_order(capsys):
    def who_am_i(tag):
        import torch
        import torch.distributed as dist

        print(f"hello from {dist.get_rank()}")
        return {"tag": tag, "rank": dist.get_rank(), "world": dist.get_world_size(), "threads": torch.get_num_threads()}

    results = launch(who_am_i, "x", num_processes=2)
    assert [(r["rank"], r["world"], r["tag"]) for r in results] == [(0, 2, "x"), (1, 2, "x")]
    assert all(r["threads"] == max(1, usable_cores() // 2) for r in results)
    out = capsys.readouterr().out
    assert "[rank 0] hello from 0" in out and "[rank 1] hello from 1" in out


@pytest.mark.slow
def test_accelerate_sees_a_multi_cpu_group():
    def accelerate_view():
        from accelerate import Accelerator

        acc = Accelerator()
        return acc.process_index, acc.num_processes, acc.distributed_type.value

    assert launch(accelerate_view, num_processes=2) == [(0, 2, "MULTI_CPU"), (1, 2, "MULTI_CPU")]


@pytest.mark.slow
def test_collectives_really_cross_processes():
    def total():
        import torch
        import torch.distributed as dist

        x = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(x)
        return x.item()

    assert launch(total, num_processes=3) == [6.0, 6.0, 6.0]


@pytest.mark.slow
def test_a_silent_fall_back_to_one_process_is_caught():
    def lone_accelerator():
        import os

        from accelerate import PartialState

        del os.environ["ACCELERATE_USE_CPU"]  # what notebook_launcher users forget on a CPU machine
        return PartialState().num_processes

    with pytest.raises(RankFailed, match="Accelerate saw 1 process"):
        launch(lone_accelerator, num_processes=2)


@pytest.mark.slow
def test_a_failing_rank_reports_its_traceback_and_leaves_no_process_behind():
    def fail_on_rank_one():
        import time

        import torch.distributed as dist

        if dist.get_rank() == 1:
            raise KeyError("rank one broke")
        time.sleep(60)  # rank 0 would wait for ever: the launcher must end it

    before = _children()
    start = time.monotonic()
    with pytest.raises(RankFailed) as err:
        launch(fail_on_rank_one, num_processes=2)
    assert err.value.rank == 1 and err.value.exc_type == "KeyError"
    assert "fail_on_rank_one" in err.value.remote_traceback and "rank one broke" in str(err.value)
    assert time.monotonic() - start < 45
    assert _children() == before


@pytest.mark.slow
def test_timeout_ends_every_process():
    def hang():
        import time

        time.sleep(120)

    before = _children()
    with pytest.raises(TimeoutError, match="timeout=3"):
        launch(hang, num_processes=2, timeout=3)
    assert _children() == before


@pytest.mark.slow
def test_it_still_works_after_an_accelerator_was_created_here():
    from accelerate import Accelerator

    Accelerator(cpu=True)  # notebook_launcher refuses to start after this; fresh processes do not care

    def world():
        import torch.distributed as dist

        return dist.get_world_size()

    assert launch(world, num_processes=2) == [2, 2]


@pytest.mark.parametrize("bad", [0, -1, 65, 2.5, True, "2"])
def test_bad_num_processes_is_named(bad):
    with pytest.raises(ValueError, match=rf"num_processes={bad!r} must be a whole number from 1 to 64"):
        launch(print, num_processes=bad)


def test_other_bad_arguments():
    with pytest.raises(TypeError, match="not callable"):
        launch(42, num_processes=2)
    with pytest.raises(ValueError, match="timeout=0"):
        launch(print, num_processes=2, timeout=0)
    with pytest.raises(ValueError, match="threads_per_process=0"):
        launch(print, num_processes=2, threads_per_process=0)


@pytest.mark.slow
def test_more_processes_than_gpus_runs_on_the_cpu_and_says_so(monkeypatch, capsys):
    monkeypatch.setattr(launch_mod, "gpu_count", lambda: 1)

    def backend():
        import torch.distributed as dist

        return dist.get_backend()

    assert launch(backend, num_processes=2) == ["gloo", "gloo"]
    assert "1 GPU(s) for 2 processes: running all 2 on the CPU" in capsys.readouterr().out
    assert launch_mod.default_num_processes() == 2


@pytest.mark.slow
def test_a_worker_ends_itself_when_its_parent_dies(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "from effitrain_helpers.processes.launch import launch\n"
        "def hang():\n    import time\n    time.sleep(120)\n"
        "launch(hang, num_processes=2)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)])
    deadline = time.monotonic() + 60
    workers = []
    while time.monotonic() < deadline and len(workers) < 2:
        time.sleep(0.5)
        workers = [p for p in psutil.Process(parent.pid).children() if "launch_worker" in " ".join(p.cmdline())]
    assert len(workers) == 2
    time.sleep(3)  # let the workers start their watch
    parent.kill()
    parent.wait()
    gone, alive = psutil.wait_procs(workers, timeout=15)
    assert not alive, "workers outlived the process that launched them"


@pytest.mark.slow
def test_output_with_carriage_returns_and_bad_bytes_is_relayed(capsys):
    def noisy():
        import sys

        sys.stdout.buffer.write(b"10%\r50%\r100%\nbad byte \xff here\n")
        sys.stdout.flush()
        return "done"

    assert launch(noisy, num_processes=1) == ["done"]
    out = capsys.readouterr().out
    assert "[rank 0] 100%\n" in out and "10%" not in out and "bad byte \ufffd here" in out


@pytest.mark.slow
def test_a_rank_that_exits_without_a_result_is_reported():
    def vanish():
        import os

        os._exit(0)

    with pytest.raises(RankFailed, match="without returning a result"):
        launch(vanish, num_processes=1)


@pytest.mark.slow
@pytest.mark.parametrize("num_samples, even", [(12, True), (10, True), (10, False)])
def test_prepared_dataloader_shards(num_samples, even):
    reports = launch(shard_indices, num_samples, 2, even, num_processes=2)
    summary = summarize_shards(reports, num_samples)
    assert [r["rank"] for r in reports] == [0, 1] and {r["world_size"] for r in reports} == {2}
    assert summary.covers_all and not summary.missing
    if num_samples == 12:  # divides evenly: two disjoint halves
        assert summary.disjoint and summary.per_rank == [6, 6]
    elif even:  # 10 samples in batches of 2 over 2 ranks: the last batch is filled from the start
        assert summary.repeated == [0, 1] and summary.per_rank == [6, 6]
    else:
        assert summary.disjoint and summary.per_rank == [6, 4]
