"""DDP against FSDP over a slow link between two "machines": the veth pair rate-limited with tc (lesson 5.4).

:func:`link_rate_steps` (root) makes the two namespaces of :mod:`effitrain_helpers.training.nodes` and runs one
rank in each (world size 2, gloo over the veth). For each rate, each rank puts a token-bucket filter on its own
end of the link (``tc qdisc replace dev <veth> root tbf rate R burst B latency L``; ``netem`` is missing from
some kernels), then trains lesson 5.1's model a few steps under DDP and under ``fully_shard`` and times each
step. Beside each measured time: theory, the step's time on the unlimited link plus the bytes each rank sends
(ring algorithms, :func:`model_sharding.ring_bytes_sent`) divided by the rate; and the rate at which the link
would take as long as the rest of the step (``balance``: below it, the step is bound by the network).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from effitrain_helpers.core.language import tr

RATES = (10e6, 100e6, 1e9, 10e9)  # bit/s: slow Wi-Fi, fast Wi-Fi / old Ethernet, gigabit, a datacentre link
LATENCY = "100ms"  # how long a packet may wait in tbf's queue before it is dropped
PORT = 29500


def tbf_command(interface: str, rate: float | None) -> list[str]:
    """The ``tc`` command that limits ``interface`` to ``rate`` bit/s (burst: 5 ms of the rate, at least 32 KB),
    or, for ``None``, removes the limit."""
    if rate is None:
        return ["tc", "qdisc", "del", "dev", interface, "root"]
    burst = max(32 * 1024, int(rate / 8 * 0.005))
    return ["tc", "qdisc", "replace", "dev", interface, "root", "tbf", "rate", f"{int(rate)}bit",
            "burst", str(burst), "latency", LATENCY]


def _time_steps(wrap, steps: int) -> list[float]:
    """Seconds of each of ``steps`` training steps (after one warm-up step) of lesson 5.1's model, wrapped."""
    import torch.distributed as dist

    from effitrain_helpers.training.model_sharding import sharding_batches, sharding_model, train_steps

    model = wrap(sharding_model(0))
    batches = sharding_batches(steps + 1, 8)
    _, optimizer = train_steps(model, batches[:1])
    seconds = []
    for batch in batches[1:]:
        dist.barrier()
        start = time.perf_counter()
        train_steps(model, [batch], optimizer=optimizer)
        seconds.append(time.perf_counter() - start)
    return seconds


def rank_main(out: str, steps: int, rates: list[float | None]) -> None:
    """One rank (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``GLOO_SOCKET_IFNAME`` set by the harness): for each
    rate, limit this rank's end of the link, time DDP and FSDP steps; rank 0 writes the medians to ``out``."""
    import torch
    import torch.distributed as dist

    from effitrain_helpers.training import model_sharding as ms

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    interface, rows = os.environ["GLOO_SOCKET_IFNAME"], []
    limited = False
    for rate in rates:
        if rate is not None or limited:
            subprocess.run(tbf_command(interface, rate), check=True, capture_output=True, timeout=30)
            limited = rate is not None
        dist.barrier()
        row = {"rate": rate}
        for name, wrap in (("DDP", ms.wrap_ddp), ("FSDP", ms.wrap_fsdp)):
            row[name] = statistics.median(_time_steps(wrap, steps))
        rows.append(row)
    model = ms.wrap_fsdp(ms.sharding_model(0))
    groups = ms.fsdp_groups(model)
    payload = ms.theory_communication(groups, 2, [True] * (len(groups) - 1) + [False])
    sent = {name: ms.ring_bytes_sent(p, 2) for name, p in payload.items()}
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"rows": rows, "bytes_sent": sent, "steps": steps}, f)
    dist.barrier()


def with_theory(result: dict) -> list[dict]:
    """Each measured row with its theory: the unlimited link's time plus bytes sent / rate, and FSDP / DDP."""
    base = next(r for r in result["rows"] if r["rate"] is None)
    rows = []
    for row in result["rows"]:
        extra = {name: 0.0 if row["rate"] is None else result["bytes_sent"][name] * 8 / row["rate"]
                 for name in ("DDP", "FSDP")}
        rows.append({**row, "DDP theory": base["DDP"] + extra["DDP"], "FSDP theory": base["FSDP"] + extra["FSDP"],
                     "FSDP / DDP": row["FSDP"] / row["DDP"]})
    return rows


def crossover(result: dict) -> dict:
    """Where FSDP's step is quicker than DDP's (lesson 5.4), from :func:`link_rate_steps`'s ``result``:
    ``measured``, the rates (bit/s) at which it was; ``theory``, the rate at which the two lines of
    :func:`with_theory` (unlimited time + bits sent / rate) cross, or None when they never do for a positive rate;
    ``side``: "below" or "above" that rate FSDP is quicker, "always", or None (never); ``bytes_ratio``: FSDP's bytes over DDP's."""
    rows, sent = result["rows"], result["bytes_sent"]
    base = next(r for r in rows if r["rate"] is None)
    measured = [r["rate"] for r in rows if r["rate"] is not None and r["FSDP"] < r["DDP"]]
    extra_time, extra_bits = base["FSDP"] - base["DDP"], (sent["FSDP"] - sent["DDP"]) * 8
    # FSDP quicker at rate R when extra_time + extra_bits / R < 0
    theory = -extra_bits / extra_time if extra_time * extra_bits < 0 else None
    side = ("below" if extra_bits < 0 else "above") if theory is not None else \
        ("always" if extra_time <= 0 and extra_bits <= 0 else None)
    return {"measured": measured, "theory": theory, "side": side, "bytes_ratio": sent["FSDP"] / sent["DDP"]}


def link_rate_steps(rates=RATES, steps: int = 5, timeout: float = 240.0) -> dict:
    """Measure DDP and FSDP time per step on two namespaces at each of ``rates`` (bit/s) and unlimited (root
    only); returns ``rows`` (see :func:`with_theory`), ``bytes_sent`` per rank per step, ``balance`` (bit/s
    at which each strategy's link time equals its step time on the unlimited link) and ``seconds``."""
    from effitrain_helpers.core.validate import positive_int
    from effitrain_helpers.processes.ending import end_tree
    from effitrain_helpers.training import nodes

    nodes.check_form("namespaces")
    steps = positive_int("steps", steps, example="steps=3")
    run_id, made, ranks = uuid.uuid4().hex[:8], [], []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="effitrain-link-") as tmp:
        out = os.path.join(tmp, "out.json")
        try:
            pair = nodes.make_namespaces(run_id, made)
            for rank, node in enumerate(pair):
                env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "RANK": str(rank),
                       "WORLD_SIZE": "2", "MASTER_ADDR": pair[0]["address"], "MASTER_PORT": str(PORT),
                       "GLOO_SOCKET_IFNAME": node["interface"]}
                command = ["ip", "netns", "exec", node["namespace"], sys.executable, "-m", __name__, out,
                           str(steps), json.dumps([None, *rates])]
                ranks.append(subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, start_new_session=True))
            output = [rank.communicate(timeout=max(1.0, timeout - (time.monotonic() - start))) for rank in ranks]
        except subprocess.TimeoutExpired:
            raise TimeoutError(tr("the two ranks did not finish within {seconds:.0f} s; these were still running "
                                  "and were ended:\n{stuck}\nFix: measure fewer rates or steps.", seconds=timeout,
                                  stuck=nodes.stuck(ranks))) from None
        finally:
            for rank in ranks:
                end_tree(rank.pid)
            nodes.delete_namespaces(made)
        if not os.path.isfile(out):
            raise RuntimeError(tr("the ranks exited with {codes} and no result:\n{tail}",
                                  codes=", ".join(str(r.returncode) for r in ranks), tail=output[0][0][-2000:]))
        with open(out) as f:
            result = json.load(f)
    rows = with_theory(result)
    base = next(r for r in rows if r["rate"] is None)
    return {"rows": rows, "bytes_sent": result["bytes_sent"], "steps": result["steps"],
            "balance": {name: sent * 8 / base[name] for name, sent in result["bytes_sent"].items()},
            "seconds": time.monotonic() - start}


if __name__ == "__main__":  # one rank: result file, steps, rates (JSON list, null: unlimited)
    from effitrain_helpers.processes.ending import exit_without_teardown

    rank_main(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]))
    exit_without_teardown(0)
