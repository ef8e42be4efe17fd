"""Lesson 5.4: its checkers with known right and known wrong answers, the crossover of the bandwidth sweep and
its figure (no process starts: the two-node runs are tested in tests/test_nodes.py)."""

import os
from fractions import Fraction

import numpy as np
import pytest

from effitrain_helpers.teach import plots
from effitrain_helpers.teach.checks import lesson_5_4 as l54
from effitrain_helpers.training import link_rate
from verdicts import speak

FIRST, PORT, INTERFACE = l54.Q1_FIRST, l54.Q1_PORT, l54.Q1_INTERFACE
SCRIPT = ["-m", "effitrain_helpers.training.train", "--json"]



def _agent(**change):
    """An answer to q1, right unless ``change`` replaces an option's value (None: leave the option out), the
    rendezvous id (``rdzv_id``: a function of the node rank) or the environment (``env``)."""
    def agent(node_rank):
        options = {"--nnodes": "2", "--nproc-per-node": "2", "--node-rank": str(node_rank),
                   "--rdzv-backend": "c10d", "--rdzv-endpoint": f"{FIRST}:{PORT}",
                   "--rdzv-id": change.get("rdzv_id", lambda r: "job-7")(node_rank)}
        for key, value in change.items():
            if key.startswith("--"):
                options[key] = value(node_rank) if callable(value) else value
        args = [part for key, value in options.items() if value is not None for part in (key, value)]
        return [*change.get("extra", []), *args, *change.get("script", SCRIPT)], \
            change.get("env", {"GLOO_SOCKET_IFNAME": INTERFACE, "NCCL_SOCKET_IFNAME": INTERFACE})
    return agent


def test_5_4_q1_a_right_agent_and_torchrun_leaves_the_environment_alone(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert l54.q1.evaluate(_agent()).status == "correct"
    assert "OMP_NUM_THREADS" not in os.environ


def _agent_with_equals(node_rank):
    """Right, another way: --option=value, torchrun's underscore spellings, numbers as ints, gloo's variable
    alone (NCCL is not used here)."""
    args = ["--nnodes=2", "--nproc_per_node=2", f"--node_rank={node_rank}", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={FIRST}:{PORT}", "--rdzv_id=effitrain", "-m", "effitrain_helpers.training.train",
            "--json"]
    return args, dict(GLOO_SOCKET_IFNAME=INTERFACE)


def _agent_with_a_range(node_rank):
    """Right, another way: --nnodes as the range MIN:MAX (2:2), --module for -m, ints where torchrun takes
    numbers, the options in another order."""
    args = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{FIRST}:{PORT}", "--rdzv-id", "job-42",
            "--node-rank", node_rank, "--nproc-per-node", 2, "--nnodes", "2:2",
            "--module", "effitrain_helpers.training.train", "--json"]
    env = {}
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        env[name] = INTERFACE
    return args, env


@pytest.mark.judges("5.4 q1", "right")
@pytest.mark.parametrize("agent", [_agent_with_equals, _agent_with_a_range])
def test_5_4_q1_right_written_another_way(agent):
    result = l54.q1.evaluate(agent)
    assert result.status == "correct", result.message


@pytest.mark.judges("5.4 q1", "mistake")
@pytest.mark.parametrize("agent, words", [
    (_agent(extra=["--standalone"]), "--standalone starts a rendezvous of its own"),
    (_agent(**{"--rdzv-backend": None}), "pass --rdzv-backend c10d"),
    (_agent(**{"--rdzv-endpoint": lambda r: f"10.0.0.{r + 1}:{PORT}"}), "every node joins the one on the first"),
    (_agent(**{"--nnodes": "4"}), "would not be 2 nodes of 2 processes"),
    (_agent(**{"--nproc-per-node": "4"}), "would not be 2 nodes of 2 processes"),
    (_agent(rdzv_id=lambda r: f"node-{r}"), "same job id"),
    (_agent(**{"--rdzv-id": None}), "same job id"),
    (_agent(env={}), "does not pin gloo to eth1"),
    (_agent(env={"NCCL_SOCKET_IFNAME": INTERFACE}), "does not pin gloo"),
    (_agent(env={"GLOO_SOCKET_IFNAME": INTERFACE, "NCCL_SOCKET_IFNAME_": INTERFACE}),  # a mutant (issue 41)
     "sets NCCL_SOCKET_IFNAME_, which nothing reads"),
    (_agent(script=["effitrain_helpers/training/train.py"]), "as a module"),
    (_agent(**{"--rdzv-endpoint": None, "--nnodes": "two"}), "refused these arguments"),
    (lambda r: ["--nnodes", "2"], "should return (args, env)"),
    ("torchrun --nnodes 2", "pass your agent function itself"),
], ids=["standalone", "static-backend", "own-endpoint", "nnodes-4", "nproc-4", "id-per-node", "no-id",
        "no-env", "nccl-only", "misspelt-variable", "script-path", "unparsable", "no-env-returned", "not-a-function"])
def test_5_4_q1_names_each_mistake(agent, words):
    result = l54.q1.evaluate(agent)
    assert result.status == "incorrect" and words in result.message, result.message


RANKS = [{"rank": n * 2 + lr, "node": n, "local_rank": lr} for n in range(2) for lr in range(2)]


def right_rank(node, local):
    return node * int(os.environ["LOCAL_WORLD_SIZE"]) + local


@pytest.mark.judges("5.4 q2", "mistake")
@pytest.mark.parametrize("answer, words", [
    (lambda node, local: node + local, "same number"),
    (lambda node, local: local * 2 + node, "column first"),
    (lambda node, local: node * int(os.environ["WORLD_SIZE"]) + local, "LOCAL_WORLD_SIZE"),
    (lambda node, local: node * os.environ["LOCAL_WORLD_SIZE"] + str(local), "int(...)"),
    (lambda node, local: node * 2 + local, "as if every node ran 2 processes; this cluster runs 8"),  # 2 x 2 only
    (3, "pass your global_rank function"),
], ids=["node-plus-local", "column-first", "world-size", "text", "fixed-2", "not-a-function"])
def test_5_4_q2_names_each_mistake_and_restores_the_environment(answer, words, monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "9")
    result = l54.q2.evaluate(answer, RANKS)
    assert result.status == "incorrect" and words in result.message, result.message
    assert "LOCAL_WORLD_SIZE" not in os.environ and os.environ["WORLD_SIZE"] == "9"


def test_5_4_q2_right():
    assert l54.q2.evaluate(right_rank, RANKS).status == "correct"
    result = l54.q2.evaluate(lambda node, local: node * 3 + local + 1, RANKS)  # no slip the checker can name
    assert result.status == "incorrect" and "you give 1, the run reported rank 0" in result.message, result.message


def test_5_4_q2_names_a_written_in_count_in_portuguese(monkeypatch):
    speak(monkeypatch, "pt-BR")
    result = l54.q2.evaluate(lambda node, local: node * 2 + local, RANKS)
    assert "como se cada nó rodasse 2 processos; este cluster roda 8 por nó" in result.message, result.message


def _rank_from_getenv(node, local):
    """Right, another way: os.getenv, the product written the other way round."""
    return int(os.getenv("LOCAL_WORLD_SIZE")) * node + local


def _rank_counted(node, local):
    """Right, another way: the ranks of the nodes before this one counted in a loop."""
    before = 0
    for _ in range(node):
        before += int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return before + local


@pytest.mark.judges("5.4 q2", "right")
@pytest.mark.parametrize("answer", [_rank_from_getenv, _rank_counted])
def test_5_4_q2_right_written_another_way(answer):
    result = l54.q2.evaluate(answer, RANKS)
    assert result.status == "correct", result.message


Q3_RIGHT = 2 * 7 / 8 * 124e6 * 4 * 8 / 25e9


def test_5_4_q3_all_reduce_seconds():
    assert l54.q3.evaluate(Q3_RIGHT).status == "correct"
    assert l54.q3.evaluate(1.0).status == "incorrect"


@pytest.mark.judges("5.4 q3", "right")
@pytest.mark.parametrize("answer", [
    pytest.param(0.278, id="rounded"),
    pytest.param(np.float64(1.75) * 124_000_000 * 32 / 25_000_000_000, id="numpy-bits-first"),
    pytest.param(Fraction(2 * 7 * 124_000_000 * 4 * 8, 8 * 25_000_000_000), id="fraction"),
])
def test_5_4_q3_right_written_another_way(answer):
    result = l54.q3.evaluate(answer)
    assert result.status == "correct", result.message


@pytest.mark.judges("5.4 q3", "mistake")
@pytest.mark.parametrize("answer, words", [
    pytest.param(Q3_RIGHT / 8, "bits per second", id="bytes-as-bits"),
    pytest.param(124e6 * 4 * 8 / 25e9, "sends the gradient once", id="sent-once"),
    pytest.param(Q3_RIGHT / 4, "4 bytes per parameter", id="one-byte-per-parameter"),
])
def test_5_4_q3_names_each_mistake(answer, words):
    result = l54.q3.evaluate(answer)
    assert result.status == "incorrect" and words in result.message, result.message


def _sweep(base_ddp, base_fsdp, ddp_bytes, fsdp_bytes, rates=(1e7, 1e9)):
    """A link_rate_steps result whose measured times are exactly the theory."""
    rows = [{"rate": None, "DDP": base_ddp, "FSDP": base_fsdp}]
    rows += [{"rate": r, "DDP": base_ddp + ddp_bytes * 8 / r, "FSDP": base_fsdp + fsdp_bytes * 8 / r}
             for r in rates]
    return {"rows": rows, "bytes_sent": {"DDP": ddp_bytes, "FSDP": fsdp_bytes}}


def test_crossover_never_when_fsdp_sends_more_and_computes_more():
    cross = link_rate.crossover(_sweep(0.01, 0.04, 5e5, 6.5e5))
    assert cross == {"measured": [], "theory": None, "side": None, "bytes_ratio": 1.3}


def test_crossover_below_a_rate_when_fsdp_sends_less():
    cross = link_rate.crossover(_sweep(0.01, 0.02, 1e6, 5e5))  # 0.01 s more work, 4e6 bits fewer
    assert cross["side"] == "below" and cross["theory"] == pytest.approx(4e8)
    assert cross["measured"] == [1e7]


def test_crossover_above_a_rate_and_always():
    assert link_rate.crossover(_sweep(0.02, 0.01, 5e5, 6e5))["side"] == "above"
    assert link_rate.crossover(_sweep(0.02, 0.01, 6e5, 5e5))["side"] == "always"


def test_plot_link_rates_draws_measured_and_theory():
    rows = link_rate.with_theory(_sweep(0.01, 0.04, 5e5, 6.5e5))
    fig = plots.plot_link_rates(rows)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["DDP measured", "DDP theory", "FSDP measured", "FSDP theory"]
    with pytest.raises(ValueError, match="at least one rate"):
        plots.plot_link_rates(rows[:1])
