"""A node lost mid-run and the job carried on: elastic torchrun, restarts and 5.3's checkpoints (lesson 5.4).

:func:`lose_a_node` starts the two agents of :mod:`effitrain_helpers.training.nodes` (namespaces or loopback)
with ``--nnodes 1:2 --max-restarts 1``; the ranks run lesson 5.3's loop (:func:`resume.train_with_checkpoints`,
a checkpoint every ``save_every`` steps). After ``lose_at`` steps one rank of node 1 writes a marker naming its
agent and waits; the harness then kills that agent and every rank below it with SIGKILL, as a power cut would.
Node 0's ranks lose their peers in the next all-reduce and fail; node 0's agent goes back to the rendezvous, which
strikes node 1 off when its heartbeats stop and completes a new round with the one node left (after
``last_call_timeout``); the restarted ranks resume from the newest whole checkpoint and finish on half the world
size. Steps lost: those done after that checkpoint.

Every run has a time limit (a timeout names the processes still running) and ends both agents, their ranks,
the namespaces and the temporary folder, whatever happens.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from effitrain_helpers.core.language import tr
from effitrain_helpers.training import nodes as node_harness
from effitrain_helpers.training.resume import latest_checkpoint, lost_steps, train_with_checkpoints

TORCHRUN_OPTIONS = ("--max-restarts", "1")
NNODES = "1:2"  # elastic: start with two nodes, carry on with one
# last_call_timeout: how long the rendezvous waits for more nodes once the minimum has joined; long enough
# for both agents to join the first round, short enough not to keep the survivor waiting long. A heartbeat
# every second, two missed: the lost node is declared dead in seconds (torch's defaults: 5 s, 3 missed).
RDZV_CONF = "join_timeout=120,last_call_timeout=6,keep_alive_interval=1,keep_alive_max_attempt=2"
RANK_SCRIPT = ["-m", "effitrain_helpers.training.node_loss"]


def lost_node_rank(checkpoints: str, out: str, marker: str, lose_at: int) -> None:
    """One rank of the run (module docstring): resume from the newest whole checkpoint if any, train lesson
    5.3's steps; on the first attempt, local rank 0 of node 1 writes ``marker`` (its agent's pid, the steps
    done) after ``lose_at`` steps and waits to be killed. Rank 0 writes its summary to ``out`` (JSON)."""
    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.training.workload import lesson_model, lesson_rows

    size = lesson_size("5.3")
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    node, local = int(os.environ.get("GROUP_RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))

    def after_step(done: int) -> None:
        if attempt == 0 and node == 1 and local == 0 and done == lose_at:
            Path(marker).write_text(json.dumps({"agent": os.getppid(), "done": done,
                                                 "world_size": int(os.environ["WORLD_SIZE"])}))
            time.sleep(3600)  # until the harness kills this node

    folder = latest_checkpoint(checkpoints, report=None)
    state = train_with_checkpoints(lesson_model(0, dropout=0.1), lesson_rows(size.n_rows, seq_len=size.seq_len),
                                   checkpoints, steps=size.steps, save_every=size.save_every,
                                   batch_size=size.batch_size, resume=folder, after_step=after_step)
    if os.environ.get("RANK") == "0":
        Path(out).write_text(json.dumps({"attempt": attempt, "world_size": state["world_size"],
                                         "nodes": int(os.environ.get("GROUP_WORLD_SIZE", "1")),
                                         "resumed_from": state["resumed_from"], "steps": size.steps,
                                         "save_every": size.save_every}))


def _kill_the_node(agents: list[subprocess.Popen], marker: Path, deadline: float) -> dict:
    """Wait for ``marker``, then SIGKILL the agent it names and all below it; what the marker said."""
    from effitrain_helpers.processes.ending import end_tree

    while not marker.is_file() or not marker.read_text():
        if time.monotonic() > deadline or any(agent.poll() is not None for agent in agents):
            raise RuntimeError(tr("no node reached the step to lose before the run {why}.",
                                  why=tr("timed out") if time.monotonic() > deadline else tr("ended")))
        time.sleep(0.2)
    lost = json.loads(marker.read_text())
    end_tree(lost["agent"])
    lost["node_agent"] = next(i for i, agent in enumerate(agents) if agent.pid == lost["agent"])
    return lost


def lose_a_node(form: str = "loopback", nproc: int = 2, lose_at: int | None = None,
                timeout: float = 300.0) -> dict:
    """Run the experiment of the module docstring; returns ``form``, ``world_sizes`` (before and after),
    ``lost_at`` (steps done when the node was lost), ``resumed_from``, ``steps_lost``, ``expected_lost``
    (:func:`resume.lost_steps`), ``attempts``, ``steps`` and ``seconds``."""
    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.core.validate import positive_int, whole_number
    from effitrain_helpers.processes.ending import end_tree
    from effitrain_helpers.processes.launch import sigterm_ends_the_launch

    node_harness.check_form(form)
    nproc = positive_int("nproc", nproc, example="nproc=2")
    size = lesson_size("5.3")
    lose_at = size.crash_at if lose_at is None else lose_at
    whole_number("lose_at", lose_at, minimum=1, maximum=size.steps - 1, example=f"lose_at={size.crash_at}")
    run_id, made, agents = uuid.uuid4().hex[:8], [], []
    start = time.monotonic()
    with sigterm_ends_the_launch(), tempfile.TemporaryDirectory(prefix="effitrain-nodeloss-") as tmp:
        root = Path(tmp)
        files = [str(root / "checkpoints"), str(root / "out.json"), str(root / "lost.json"), str(lose_at)]
        try:
            nodes = node_harness.make_nodes(form, run_id, made)
            agents = node_harness.start_agents(nodes, nproc, files, run_id, nnodes=NNODES,
                                               options=TORCHRUN_OPTIONS, rdzv_conf=RDZV_CONF, script=RANK_SCRIPT,
                                               env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "TMPDIR": tmp})
            lost = _kill_the_node(agents, root / "lost.json", start + timeout)
            survivor = agents[1 - lost["node_agent"]]
            output = survivor.communicate(timeout=max(1.0, timeout - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            raise TimeoutError(tr("the surviving agent did not finish within {seconds:.0f} s; these were still "
                                  "running and were ended:\n{stuck}\nFix: run it again on a quieter machine, "
                                  "or give a larger timeout.", seconds=timeout,
                                  stuck=node_harness.stuck(agents))) from None
        finally:
            for agent in agents:
                end_tree(agent.pid)
            node_harness.delete_namespaces(made)
        out = root / "out.json"
        if not out.is_file():
            raise RuntimeError(tr("the surviving agent exited with {code} and no summary:\n{tail}",
                                  code=survivor.returncode, tail=output[1][-2000:]))
        summary = json.loads(out.read_text())
    return {"form": form, "world_sizes": [lost["world_size"], summary["world_size"]], "lost_at": lost["done"],
            "resumed_from": summary["resumed_from"], "steps_lost": lost["done"] - (summary["resumed_from"] or 0),
            "expected_lost": lost_steps(lost["done"], summary["save_every"]), "attempts": summary["attempt"] + 1,
            "steps": summary["steps"], "seconds": time.monotonic() - start}


if __name__ == "__main__":  # a rank under torchrun: checkpoints folder, summary file, marker file, step to lose
    import sys

    from effitrain_helpers.processes.ending import exit_without_teardown

    lost_node_rank(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
    exit_without_teardown(0)
