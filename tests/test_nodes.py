"""effitrain nodes: the course's training script across two torchrun agents (issue 30)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from effitrain_helpers.training import nodes

ROOT = os.geteuid() == 0 and nodes.namespace_refusal() is None


def test_without_rights_namespaces_are_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(PermissionError, match=r"need root \(CAP_NET_ADMIN\).*user 1000.*--form loopback"):
        nodes.run_nodes("namespaces")


def test_a_failing_ip_command_names_itself(monkeypatch):
    failed = subprocess.CompletedProcess([], 2, "", "Operation not permitted")
    monkeypatch.setattr(nodes.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(PermissionError, match=r"`ip netns add x` failed: Operation not permitted"):
        nodes._ip("netns", "add", "x")


def test_an_unknown_form_is_refused():
    with pytest.raises(ValueError, match=r"'wifi' is not one of namespaces, loopback"):
        nodes.run_nodes("wifi")


def test_each_agent_joins_the_first_nodes_rendezvous():
    node = {"namespace": "effitrain-node1-ab", "interface": "etveth1", "address": "169.254.77.2"}
    command = nodes.agent_command(node, 1, "169.254.77.1:29400", "ab", 2, [])
    assert command[:4] == ["ip", "netns", "exec", "effitrain-node1-ab"]
    text = " ".join(command)
    for part in ("--nnodes 2", "--node-rank 1", "--rdzv-backend c10d", "--rdzv-endpoint 169.254.77.1:29400",
                 "is_host=false", "-m effitrain_helpers.training.train --json"):
        assert part in text


def _check_run(result: dict) -> None:
    assert result["world_size"] == 4
    assert [r["node"] for r in result["ranks"]] == [0, 0, 1, 1]
    assert [r["local_rank"] for r in result["ranks"]] == [0, 1, 0, 1]
    assert sum(r["samples_seen"] for r in result["ranks"]) == 64  # each sample of TRAIN_ARGS once
    assert result["identical_weights"] and len({r["fingerprint"] for r in result["ranks"]}) == 1


@pytest.mark.slow
def test_loopback_two_nodes_world_size_four(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    result = nodes.run_nodes("loopback")
    _check_run(result)
    assert {r["address"] for r in result["ranks"]} == {"127.0.0.1"}
    assert list(tmp_path.iterdir()) == [], "torchrun's torchelastic_* folders are removed with the run"


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="network namespaces need root and iproute2")
def test_two_namespaces_reach_each_other_over_the_veth_only():
    result = nodes.run_nodes("namespaces")
    _check_run(result)
    assert [r["address"] for r in result["ranks"]] == ["169.254.77.1"] * 2 + ["169.254.77.2"] * 2
    assert {r["master_addr"] for r in result["ranks"]} == {"169.254.77.1"}
    assert nodes.our_namespaces() == []


@pytest.mark.slow
def test_killed_mid_run_leaves_no_namespace_and_no_process(tmp_path):
    import psutil

    form = "namespaces" if ROOT else "loopback"
    before = set(nodes.our_namespaces())
    proc = subprocess.Popen([sys.executable, "-m", "effitrain_helpers.cli", "nodes", "--form", form],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    family: list[psutil.Process] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:  # until both agents have started ranks
        family = psutil.Process(proc.pid).children(recursive=True)
        if sum("effitrain_helpers.training.train" in " ".join(p.cmdline()) for p in family
               if p.is_running()) >= 4:
            break
        time.sleep(0.5)
    assert proc.poll() is None, "the run ended before it could be killed"
    made = set(nodes.our_namespaces()) - before
    assert len(made) == (2 if ROOT else 0)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert set(nodes.our_namespaces()) & made == set()
    alive = [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [] and list(tmp_path.iterdir()) == []


def test_the_cli_takes_processes_per_node(monkeypatch, capsys):
    from effitrain_helpers import cli

    seen = {}

    def fake(form, nproc, timeout):
        seen.update(form=form, nproc=nproc)
        raise PermissionError("no rights here")

    monkeypatch.setattr(nodes, "run_nodes", fake)
    assert cli.main(["nodes", "--form", "loopback", "--processes-per-node", "3"]) == 2
    assert seen == {"form": "loopback", "nproc": 3}
    assert "effitrain nodes: error: no rights here" in capsys.readouterr().err


def test_an_elastic_agent_restarts_and_waits_little_for_a_lost_node():
    from effitrain_helpers.training import node_loss

    node = {"interface": "lo", "address": "127.0.0.1"}
    text = " ".join(nodes.agent_command(node, 0, "127.0.0.1:1", "ab", 2, [], nnodes=node_loss.NNODES,
                                        options=node_loss.TORCHRUN_OPTIONS, rdzv_conf=node_loss.RDZV_CONF,
                                        script=node_loss.RANK_SCRIPT))
    for part in ("--nnodes 1:2", "--max-restarts 1", "is_host=true,join_timeout=120,last_call_timeout=6,",
                 "keep_alive_interval=1,keep_alive_max_attempt=2",
                 "-m effitrain_helpers.training.node_loss"):
        assert part in text


def test_lose_at_must_leave_steps_to_resume():
    from effitrain_helpers.training import node_loss

    with pytest.raises(ValueError, match="lose_at"):
        node_loss.lose_a_node("loopback", lose_at=0)


@pytest.mark.slow
def test_a_timeout_names_the_stuck_processes():
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert f"pid {stuck.pid}: " in nodes.stuck([stuck]) and "time.sleep(60)" in nodes.stuck([stuck])
    finally:
        stuck.kill()
        stuck.wait()
    assert nodes.stuck([stuck]) == "  (none)"


@pytest.mark.slow
@pytest.mark.exhaustive  # lesson 5.4's nbval loses a node every run (namespaces as root, else loopback)
@pytest.mark.parametrize("form", ["loopback", pytest.param("namespaces", marks=pytest.mark.skipif(
    not ROOT, reason="network namespaces need root and iproute2"))])
def test_a_lost_node_is_carried_on_from_the_last_checkpoint(form):
    import glob

    import psutil

    from effitrain_helpers.training import node_loss

    before = {p.pid for p in psutil.process_iter()}
    temps = set(glob.glob("/tmp/effitrain-nodeloss-*"))
    result = node_loss.lose_a_node(form)
    assert result["world_sizes"] == [4, 2] and result["attempts"] == 2
    assert result["resumed_from"] is not None and result["resumed_from"] < result["lost_at"]
    assert result["steps_lost"] == result["expected_lost"] == result["lost_at"] - result["resumed_from"]
    assert nodes.our_namespaces() == [] and set(glob.glob("/tmp/effitrain-nodeloss-*")) == temps
    left = [p for p in psutil.process_iter(["cmdline"]) if p.pid not in before
            and "effitrain_helpers.training.node_loss" in " ".join(p.info["cmdline"] or [])]
    assert left == []


def test_tbf_limits_the_rate_with_a_burst_of_at_least_32_kb():
    from effitrain_helpers.training.link_rate import tbf_command

    assert tbf_command("etveth0", 10e6) == ["tc", "qdisc", "replace", "dev", "etveth0", "root", "tbf", "rate",
                                            "10000000bit", "burst", "32768", "latency", "100ms"]
    assert tbf_command("etveth0", 10e9)[10] == str(int(10e9 / 8 * 0.005))  # 5 ms of the rate
    assert tbf_command("etveth1", None) == ["tc", "qdisc", "del", "dev", "etveth1", "root"]


@pytest.mark.slow
@pytest.mark.exhaustive  # lesson 5.4's nbval run measures the same sweep as root every run
@pytest.mark.skipif(not ROOT, reason="network namespaces need root and iproute2")
def test_a_slow_link_slows_the_step_as_bytes_over_rate_predicts():
    from effitrain_helpers.training.link_rate import link_rate_steps

    result = link_rate_steps(rates=(10e6, 1e9), steps=3)
    slow, fast = result["rows"][1], result["rows"][2]
    assert result["bytes_sent"]["FSDP"] > result["bytes_sent"]["DDP"] > 0
    for name in ("DDP", "FSDP"):
        assert slow[name] > 3 * fast[name]
        assert 0.5 < slow[name] / slow[f"{name} theory"] < 2.0  # bytes / rate dominates at 10 Mbit/s
    assert nodes.our_namespaces() == []
