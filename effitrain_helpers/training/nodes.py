"""Beyond one machine, for real: two torchrun agents, one per "node", training together (issue 30, lesson 5.4).

Two forms of the same run of the course's script ``python -m effitrain_helpers.training.train``:

- ``namespaces`` (needs root): two network namespaces joined by a veth pair, each end given a link-local
  169.254.x.y address and no route out; one torchrun agent in each, the c10d rendezvous at the first
  namespace's address, ``GLOO_SOCKET_IFNAME`` naming that namespace's veth end. The ranks of node 1 can reach
  node 0 only over the veth, as over a real network cable.
- ``loopback`` (no rights needed): the same two agents with two node ranks, both on 127.0.0.1.

Whatever happens (an error, a timeout, SIGTERM, Ctrl-C), :func:`run_nodes` ends both agents and every rank
below them and deletes the namespaces (deleting a namespace deletes the veth end inside it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from effitrain_helpers.core.language import tr

FORMS = ("namespaces", "loopback")
PREFIX = "effitrain-node"  # every namespace this module makes is named effitrain-node<i>-<run id>
SUBNET = "169.254.77"  # link-local: never routed, so the two nodes reach nothing but each other
VETH = "etveth"
TRAIN_ARGS = ["--n-train", "64", "--n-validation", "16", "--batch-size", "8", "--epochs", "1",
              "--warmup-steps", "1"]


def _ip(*args: str) -> None:
    """Run ``ip ARGS``; a failure raises ``PermissionError`` with the command and ip's own words."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise PermissionError(tr("`ip {command}` failed: {why}. Fix: run as root (CAP_NET_ADMIN), or use "
                                 "--form loopback.", command=" ".join(args), why=done.stderr.strip()))


def namespace_refusal() -> str | None:
    """Why this process cannot make network namespaces (one line), or None when it can."""
    if shutil.which("ip") is None:
        return tr("the `ip` command (iproute2) is missing. Fix: install iproute2, or use --form loopback.")
    if os.geteuid() != 0:
        return tr("network namespaces need root (CAP_NET_ADMIN); this process runs as user {uid}. Fix: run as "
                  "root, or use --form loopback.", uid=os.geteuid())
    return None


def our_namespaces() -> list[str]:
    """The network namespaces of this module still present (``ip netns list``)."""
    if shutil.which("ip") is None:
        return []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(PREFIX)]


def make_namespaces(run_id: str, made: list[str]) -> list[dict]:
    """Two namespaces joined by a veth pair with link-local addresses; appends each name to ``made`` as soon as
    it exists (so the caller deletes what was made even if a later step fails); returns each node's setting."""
    nodes = [{"namespace": f"{PREFIX}{i}-{run_id}", "interface": f"{VETH}{i}", "address": f"{SUBNET}.{i + 1}"}
             for i in range(2)]
    for node in nodes:
        _ip("netns", "add", node["namespace"])
        made.append(node["namespace"])
    _ip("link", "add", nodes[0]["interface"], "netns", nodes[0]["namespace"], "type", "veth",
        "peer", "name", nodes[1]["interface"], "netns", nodes[1]["namespace"])
    for node in nodes:
        inside = ["-n", node["namespace"]]
        _ip(*inside, "address", "add", node["address"] + "/30", "dev", node["interface"])
        _ip(*inside, "link", "set", node["interface"], "up")
        _ip(*inside, "link", "set", "lo", "up")
    return nodes


def delete_namespaces(names: list[str]) -> None:
    """Delete the namespaces ``names`` (their veth ends go with them); missing ones are passed over."""
    for name in names:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)


TRAIN_SCRIPT = ["-m", "effitrain_helpers.training.train", "--json"]


def agent_command(node: dict, node_rank: int, endpoint: str, run_id: str, nproc: int, train_args: list[str],
                  nnodes: str = "2", options: tuple[str, ...] = (), rdzv_conf: str = "join_timeout=120",
                  script: list[str] | None = None) -> list[str]:
    """The torchrun command line of one agent: ``nnodes`` nodes (``"1:2"``: elastic), ``nproc`` ranks each, c10d
    rendezvous at ``endpoint``; ``options``: more torchrun options (``--max-restarts 1``), ``rdzv_conf``: more
    rendezvous settings; ``script``: the module the ranks run (default: the course's training script)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", nnodes, "--node-rank", str(node_rank),
               "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
               "--rdzv-id", run_id, "--local-addr", node["address"], *options,
               # torchrun guesses which agent hosts the store from the hostname, which both namespaces share
               "--rdzv-conf", f"is_host={str(node_rank == 0).lower()},{rdzv_conf}",
               *(TRAIN_SCRIPT if script is None else script), *train_args]
    if "namespace" in node:
        command = ["ip", "netns", "exec", node["namespace"], *command]
    return command


def start_agents(nodes: list[dict], nproc: int, train_args: list[str], run_id: str, env: dict | None = None,
                 **command) -> list[subprocess.Popen]:
    """One torchrun agent per node (:func:`agent_command`, ``command``: its keyword options), each in a session
    of its own, one thread per rank, on the CPU, with ``env`` added to the environment; output piped."""
    from effitrain_helpers.processes.launch import free_port

    port = 29400 if "namespace" in nodes[0] else free_port()  # a fresh namespace has every port free
    endpoint = f"{nodes[0]['address']}:{port}"
    agents = []
    for rank, node in enumerate(nodes):
        agent_env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1",
                     "GLOO_SOCKET_IFNAME": node["interface"], **(env or {})}
        agents.append(subprocess.Popen(agent_command(node, rank, endpoint, run_id, nproc, train_args, **command),
                                       env=agent_env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       start_new_session=True))
    return agents


def make_nodes(form: str, run_id: str, made: list[str]) -> list[dict]:
    """The two nodes of ``form``: namespaces (their names appended to ``made``) or two settings on loopback."""
    if form == "namespaces":
        return make_namespaces(run_id, made)
    return [{"interface": "lo", "address": "127.0.0.1"} for _ in range(2)]


def check_form(form: str) -> None:
    """``ValueError`` for an unknown form, ``PermissionError`` (one line) for namespaces without the rights."""
    if form not in FORMS:
        raise ValueError(tr("--form {form!r} is not one of {forms}. Fix: pass namespaces (as root) or loopback.",
                            form=form, forms=", ".join(FORMS)))
    if form == "namespaces" and (why := namespace_refusal()):
        raise PermissionError(why)


def stuck(agents: list[subprocess.Popen]) -> str:
    """The processes still running under ``agents`` (pid and command), one per line: what a timeout names."""
    import psutil

    lines = []
    for agent in agents:
        try:
            family = [psutil.Process(agent.pid), *psutil.Process(agent.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in family:
            try:
                lines.append(f"  pid {proc.pid}: {' '.join(proc.cmdline())[:160]}")
            except psutil.Error:
                pass
    return "\n".join(lines) or "  (none)"


def _summary(stdout: str) -> dict | None:
    """Rank 0's JSON line among an agent's output, or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{") and '"world_size"' in line:
            return json.loads(line)
    return None


REFERENCE_SCRIPT = ["-m", "effitrain_helpers.training.ddp_checks"]  # four_steps: each rank against one process


def run_nodes(form: str = "namespaces", nproc: int = 2, train_args: list[str] | None = None,
              timeout: float = 300.0, on_start=None, script: list[str] | None = None) -> dict:
    """Train across two nodes of ``form`` (see the module), ``nproc`` ranks each: rank 0's JSON summary (for the
    training script: ``world_size``, ``ranks``, ``identical_weights``, ``history``) with ``form``, the nodes'
    settings, the agents' ``commands`` and ``seconds``. ``script``: another module the ranks run
    (``REFERENCE_SCRIPT``: lesson 2.2's four steps, each rank against one process); ``on_start(nodes)`` is
    called once the agents run (a test uses it to kill the run)."""
    from effitrain_helpers.core.validate import positive_int
    from effitrain_helpers.processes.launch import sigterm_ends_the_launch
    from effitrain_helpers.processes.ending import end_tree

    check_form(form)
    nproc = positive_int("nproc", nproc, example="nproc=2")
    run_id = uuid.uuid4().hex[:8]
    made: list[str] = []
    agents: list[subprocess.Popen] = []
    start = time.perf_counter()
    # the agents' temporary folders (torchrun's torchelastic_* logs) go into one of ours, removed at the end
    with sigterm_ends_the_launch(), tempfile.TemporaryDirectory(prefix="effitrain-nodes-") as tmp:
        try:
            nodes = make_nodes(form, run_id, made)
            args = (TRAIN_ARGS if script is None else []) if train_args is None else train_args
            agents = start_agents(nodes, nproc, args, run_id, env={"TMPDIR": tmp}, script=script)
            if on_start is not None:
                on_start(nodes)
            outputs = [agent.communicate(timeout=max(1.0, timeout - (time.perf_counter() - start)))
                       for agent in agents]
        except subprocess.TimeoutExpired:
            raise TimeoutError(tr("the two agents did not finish within {seconds:.0f} s; these were still "
                                  "running and were ended:\n{stuck}\nFix: run it again on a quieter machine, "
                                  "or give a larger --timeout.", seconds=timeout, stuck=stuck(agents))) from None
        finally:
            for agent in agents:
                end_tree(agent.pid)
            delete_namespaces(made)
    summary = _summary(outputs[0][0])
    if summary is None or any(agent.returncode != 0 for agent in agents):
        codes = ", ".join(str(agent.returncode) for agent in agents)
        raise RuntimeError(tr("the agents exited with {codes} and no summary:\n{tail}", codes=codes,
                              tail=(outputs[0][1] + outputs[1][1])[-2000:]))
    return {"form": form, "nodes": nodes, "commands": [agent.args for agent in agents], **summary,
            "seconds": time.perf_counter() - start}
