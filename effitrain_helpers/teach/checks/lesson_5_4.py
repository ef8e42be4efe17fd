"""Exercises of lesson 5.4 (from one machine to many)."""

from __future__ import annotations

import math

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number

# q1: the agent of node R on two nodes of 2 processes each, rendezvous on the first node, gloo on one interface
Q1_NODES, Q1_NPROC, Q1_FIRST, Q1_PORT, Q1_INTERFACE = 2, 2, "10.0.0.1", 29400, "eth1"
# q3: a DDP all-reduce of float32 gradients over 8 nodes linked at 25 Gbit/s, one rank per node
Q3_PARAMETERS, Q3_NODES, Q3_RATE = 124_000_000, 8, 25e9


def _torchrun_config(args):
    """What torchrun makes of ``args`` (its own parser and ``config_from_args``): the parsed arguments, the launch
    config and the command. Quietly: torchrun's warnings are not shown, and the ``OMP_NUM_THREADS`` it sets for
    its processes is taken back out of this one's environment."""
    import contextlib
    import io
    import logging
    import os

    from torch.distributed import run

    before, level = os.environ.get("OMP_NUM_THREADS"), run.logger.level
    run.logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            parsed = run.get_args_parser().parse_args([str(a) for a in args])
        config, command, command_args = run.config_from_args(parsed)
    except (SystemExit, ValueError):  # the parser exits on an unknown option, config_from_args raises
        raise Incorrect(tr("torchrun's parser refused these arguments: {args}",
                           args=" ".join(map(str, args)))) from None
    finally:
        run.logger.setLevel(level)
        if before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
    return parsed, config, [command, *command_args]


SOCKET_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")  # the interface for gloo and for NCCL

def _check_agent(agent) -> None:
    """``agent(node_rank)`` -> ``(args, env)``: judged by what torchrun itself makes of each node's arguments."""
    if not callable(agent):
        raise Incorrect(tr("pass your {name} function itself; you gave {fn!r}.", name="agent", fn=agent))
    answers = [agent(rank) for rank in range(Q1_NODES)]
    for answer in answers:
        if not (isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], dict)):
            raise Incorrect(tr("agent(node_rank) should return (args, env): a list of torchrun arguments and a "
                               "dict of environment variables; yours returned {got!r}.", got=answer))
    runs = [(_torchrun_config(args), env) for args, env in answers]
    endpoint = f"{Q1_FIRST}:{Q1_PORT}"
    for rank, ((parsed, config, command), env) in enumerate(runs):
        if parsed.standalone:
            raise Incorrect(tr("--standalone starts a rendezvous of its own on this machine: each node would "
                               "train alone. Join the rendezvous on the first node instead."))
        if config.rdzv_backend != "c10d":
            raise Incorrect(tr("the rendezvous backend is {backend!r}: pass --rdzv-backend c10d (without it, "
                               "torchrun uses the static rendezvous on MASTER_ADDR).", backend=config.rdzv_backend))
        if config.rdzv_endpoint != endpoint:
            raise Incorrect(tr("node {rank}'s rendezvous endpoint is {got!r}: every node joins the one on the "
                               "first node, {want!r}.", rank=rank, got=config.rdzv_endpoint, want=endpoint))
        if config.max_nodes * config.nproc_per_node != Q1_NODES * Q1_NPROC or config.min_nodes != Q1_NODES:
            raise Incorrect(tr("with --nnodes {nodes} and --nproc-per-node {nproc} the world would not be {n} "
                               "nodes of {per} processes.", nodes=parsed.nnodes,
                               nproc=config.nproc_per_node, n=Q1_NODES, per=Q1_NPROC))
        if command[-2:] != ["effitrain_helpers.training.train", "--json"] or "-m" not in command:
            raise Incorrect(tr("the agents should run the course's script as a module: -m "
                               "effitrain_helpers.training.train --json; torchrun would run {got}.",
                               got=" ".join(command[1:])))
        misspelt = sorted(k for k in env if "SOCKET_IFNAME" in str(k) and k not in SOCKET_VARIABLES)
        if misspelt:
            raise Incorrect(tr("node {rank}'s environment sets {names}, which nothing reads: the variables are "
                               "named {known}.", rank=rank, names=", ".join(misspelt),
                               known=", ".join(SOCKET_VARIABLES)))
        if env.get("GLOO_SOCKET_IFNAME") != Q1_INTERFACE:
            raise Incorrect(tr("node {rank}'s environment does not pin gloo to {interface}: gloo then picks the "
                               "interface of the machine's host name, often not the one between the nodes.",
                               rank=rank, interface=Q1_INTERFACE))
    if runs[0][0][1].run_id != runs[1][0][1].run_id or runs[0][0][1].run_id == "none":
        raise Incorrect(tr("the two nodes give --rdzv-id {ids}: the rendezvous joins only agents with the same "
                           "job id (one per job, not per node).",
                           ids=" and ".join(repr(run[0][1].run_id) for run in runs)))


def _check_global_rank(global_rank, ranks) -> None:
    """``global_rank(node, local_rank)``, which reads the processes per node from torchrun's environment, against
    what every rank of the run reported, then against a bigger cluster (4 nodes of 8); this process's
    environment is what it was before."""
    import os

    if not callable(global_rank):
        raise Incorrect(tr("pass your {name} function itself; you gave {fn!r}.", name="global_rank",
                           fn=global_rank))
    per_node = max(r["local_rank"] for r in ranks) + 1
    run = [(r, per_node, len(ranks) // per_node) for r in ranks]
    cluster = [({"node": n, "local_rank": lr, "rank": n * 8 + lr}, 8, 4) for n in range(4) for lr in range(8)]
    before = {name: os.environ.get(name) for name in ("LOCAL_WORLD_SIZE", "WORLD_SIZE")}
    try:
        for reported, nproc, nnodes in run + cluster:
            os.environ.update(LOCAL_WORLD_SIZE=str(nproc), WORLD_SIZE=str(nproc * nnodes))
            _judge_rank(global_rank(reported["node"], reported["local_rank"]), reported, nproc, nnodes)
    finally:
        for name, value in before.items():
            os.environ.pop(name) if value is None else os.environ.update({name: value})


def _judge_rank(answer, reported: dict, nproc: int, nnodes: int) -> None:
    """One rank of :func:`_check_global_rank`: ``answer`` against the rank torchrun gave, each mistake named."""
    if isinstance(answer, str):
        raise Incorrect(tr("your function returned the text {got!r}: os.environ holds strings; turn the "
                           "variable into a number with int(...).", got=answer))
    node, local, rank = reported["node"], reported["local_rank"], reported["rank"]
    got = as_number(answer)
    if got == rank:
        return
    if got == node + local:
        raise Incorrect(tr("node + local rank gives two ranks the same number (node 1's local rank 0 and "
                           "node 0's local rank 1); every node before this one holds nproc_per_node ranks."))
    if got == local * nnodes + node:
        raise Incorrect(tr("that numbers the ranks node by node within each local rank (column first): "
                           "torchrun gives each node a block of consecutive ranks."))
    if got == node * nproc * nnodes + local:
        raise Incorrect(tr("WORLD_SIZE counts every process of the job; the processes of one node are "
                           "LOCAL_WORLD_SIZE."))
    per_node = (got - local) / node if node else None
    if per_node and per_node == int(per_node) and per_node != nproc:
        raise Incorrect(tr("local rank {local} of node {node}: you give {got:g}, as if every node ran {k:g} processes; "
                           "this cluster runs {nproc} per node. Read the number from LOCAL_WORLD_SIZE rather than "
                           "writing it in.", local=local, node=node, got=got, k=per_node, nproc=nproc))
    raise Incorrect(tr("local rank {local} of node {node}, {nproc} processes per node: you give {got:g}, "
                       "the run reported rank {rank}.", local=local, node=node, nproc=nproc, got=got, rank=rank))


def ring_all_reduce_seconds(parameters: int, nodes: int, rate: float, bytes_per_value: int = 4) -> float:
    """Seconds a ring all-reduce of ``parameters`` values of ``bytes_per_value`` bytes spends on links of
    ``rate`` bit/s: each rank sends 2 (N-1)/N of the bytes (lesson 6.1)."""
    return 2 * (nodes - 1) / nodes * parameters * bytes_per_value * 8 / rate


def _check_link_seconds(answer) -> None:
    got = as_number(answer)
    want = ring_all_reduce_seconds(Q3_PARAMETERS, Q3_NODES, Q3_RATE)
    if math.isclose(got, want / 8, rel_tol=0.02):
        raise Incorrect(tr("the rate is in bits per second: bytes x 8 before dividing."))
    if math.isclose(got, want * Q3_NODES / (2 * (Q3_NODES - 1)), rel_tol=0.02):
        raise Incorrect(tr("that sends the gradient once; a ring all-reduce sends 2 (N - 1) / N of it "
                           "(reduce-scatter, then all-gather)."))
    if math.isclose(got, want / 4, rel_tol=0.02):
        raise Incorrect(tr("a float32 gradient has 4 bytes per parameter."))
    if not math.isclose(got, want, rel_tol=0.02):
        raise Incorrect(tr("{got:g} s is not 2 (N - 1) / N x the gradient's bits / the rate.", got=got))


q1 = Exercise(
    "5.4 q1: one node's torchrun arguments and environment",
    _check_agent,
    usage="q1.check(agent)",
    hints=["Every node runs the same command but for its node rank: the number of nodes and of processes per "
           "node, a rendezvous that every node joins on the first node, one job id, and the script. The "
           "environment names the network interface gloo must use.",
           "torchrun --help (or the 'torchrun (Elastic Launch)' page of the PyTorch docs): --nnodes, "
           "--nproc-per-node, --node-rank, --rdzv-backend, --rdzv-endpoint HOST:PORT, --rdzv-id; gloo reads "
           "GLOO_SOCKET_IFNAME (NCCL: NCCL_SOCKET_IFNAME).",
           "The arguments are hint 2's flags in torchrun's order with this exercise's values (2 nodes of 2 "
           "processes, this node's rank as text, the c10d rendezvous on the first node's address and port, a "
           "job id of your choice), then the module to run; the environment maps the socket-interface "
           "variables of hint 2 to INTERFACE."],
    solution_code=(
        'def agent(node_rank):\n'
        '    args = ["--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(node_rank),\n'
        '            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{FIRST}:{PORT}", "--rdzv-id",\n'
        '            "lesson-5-4", "-m", "effitrain_helpers.training.train", "--json"]\n'
        '    return args, {"GLOO_SOCKET_IFNAME": INTERFACE, "NCCL_SOCKET_IFNAME": INTERFACE}\n\n\n'
        'q1.check(agent)'),
    api=True,
    checked="torchrun's own parser makes a 2 x 2 world joining one c10d rendezvous on the first node, gloo pinned",
)
q2 = Exercise(
    "5.4 q2: global rank from node and local rank",
    _check_global_rank,
    usage="q2.check(global_rank, run['ranks'])",
    hints=["Every node runs the same number of processes, and torchrun numbers the ranks node after node: all "
           "of node 0's, then node 1's. Count the ranks held by the nodes before this one, then add this "
           "process's place on its own node.",
           "torchrun tells each process how many processes its node runs in an environment variable (the "
           "'torchrun (Elastic Launch)' page of the PyTorch docs lists them: LOCAL_RANK, RANK, GROUP_RANK, "
           "LOCAL_WORLD_SIZE, WORLD_SIZE...); environment variables are text.",
           "Multiply the node's number by the processes per node (read from that variable, turned into a "
           "number), then add the local rank."],
    solution_code=("def global_rank(node, local_rank):\n"
                   "    return node * int(os.environ[\"LOCAL_WORLD_SIZE\"]) + local_rank\n\n\n"
                   "q2.check(global_rank, run[\"ranks\"])"),
    api=True,
    checked="every rank the two-node run reported, and a cluster of 4 nodes of 8, from torchrun's environment",
)
q3 = Exercise(
    "5.4 q3: an all-reduce over the network",
    _check_link_seconds,
    usage="q3.check(seconds)",
    hints=["Under DDP each step all-reduces the whole gradient; over a ring each node sends about twice the "
           "gradient, and the link carries bits, not bytes.",
           "This lesson's bandwidth section: each rank sends 2 (N - 1) / N times the tensor's bytes; float32 "
           "is 4 bytes per value; the link's rate is in bits per second.",
           "Bytes one node sends per step: hint 2's ring factor for the exercise's number of nodes, times the"
           " model's parameters, times the bytes of a float32; turn them into bits and divide by the link's "
           "rate."],
    solution_code="seconds = 2 * (8 - 1) / 8 * 124_000_000 * 4 * 8 / 25e9\nq3.check(seconds)",
)
