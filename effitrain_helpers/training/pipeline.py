"""How does a model split into stages train, and how long does each stage wait? (lesson 6.4, pipelines)

A model of ``p * blocks_per_stage`` MLP blocks is cut into ``p`` **stages**, one per process. A batch is cut
into ``m`` **micro-batches**; stage s receives each micro-batch's activations from stage s-1
(``dist.recv``), runs its blocks, sends the result to stage s+1 (``dist.isend``); in backward the gradient
of the activations travels the other way, in the order a **schedule** gives
(:mod:`effitrain_helpers.engines.pipeline`: GPipe's all-forward-all-backward and 1F1B, and the bubble each
leaves in theory).

:func:`run_schedule` runs a schedule in each rank of a group, with a timestamp (``time.time()``, one clock for
the processes of one machine) around every operation; :func:`bubble_fraction` turns them into the measured
bubble. Sends are non-blocking, so only the order of the *receives* can deadlock: each rank prints what it waits
for before it waits, which ``launch``'s time limit then shows for every waiting rank.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from effitrain_helpers.core.validate import positive_int
from effitrain_helpers.engines.pipeline import SCHEDULES


def pipeline_model(stages: int, width: int = 128, hidden: int = 512, blocks_per_stage: int = 2,
                   seed: int = 0) -> torch.nn.Sequential:
    """``stages`` stages of ``blocks_per_stage`` MLP blocks each (``Linear -> GELU -> Linear``, with a
    residual connection), as a ``Sequential`` of stages; weights depend only on ``seed``."""
    for name, value in (("stages", stages), ("width", width), ("hidden", hidden),
                        ("blocks_per_stage", blocks_per_stage)):
        positive_int(name, value, example=f"{name}=2")
    torch.manual_seed(seed)
    return torch.nn.Sequential(*(torch.nn.Sequential(*(Residual(width, hidden) for _ in range(blocks_per_stage)))
                                 for _ in range(stages)))


class Residual(torch.nn.Module):
    """``x + Linear(GELU(Linear(x)))``: one MLP block of :func:`pipeline_model`."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, hidden), torch.nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def micro_batches(m: int, size: int = 16, width: int = 128, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``m`` fixed ``(inputs, targets)`` micro-batches of ``size`` rows (a regression: mean squared error)."""
    positive_int("m", m, example="m=4")
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, width, generator=g), torch.randn(size, width, generator=g)) for _ in range(m)]


def unsplit_loss(m: int, stages: int, **shape: Any) -> tuple[float, list[torch.Tensor]]:
    """The loss of the whole model on the ``m`` micro-batches together (the mean of their mean squared errors)
    and its parameters' gradients, in one process: what every pipeline must reproduce."""
    model = pipeline_model(stages, **_model_shape(shape))
    batches = micro_batches(m, shape.get("size", 16), shape.get("width", 128))
    loss = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in batches) / m
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in model.parameters()]


def _model_shape(shape: dict) -> dict:
    return {k: v for k, v in shape.items() if k in ("width", "hidden", "blocks_per_stage")}


def _receive(shape: tuple, source: int, what: str, i: int, stage: int) -> torch.Tensor:
    print(f"stage {stage} waits for the {what} of micro-batch {i} from stage {source}", flush=True)
    buffer = torch.empty(shape)
    torch.distributed.recv(buffer, src=source)
    return buffer


def run_schedule(order: Callable, m: int, size: int = 16, width: int = 128, hidden: int = 512,
                 blocks_per_stage: int = 2) -> dict[str, Any]:
    """In each rank of a group (rank = stage): this stage's blocks of :func:`pipeline_model`, trained on the
    ``m`` :func:`micro_batches` in the order ``order(stage, stages, m)`` returns.

    Returns ``stage``, ``stages``, ``m``, ``events`` (``(kind, i, start, end)``, seconds on the shared clock),
    ``start`` and ``end`` of the step, ``in_flight`` (the most micro-batches whose activations this stage held
    at once), ``sent`` (bytes this stage sent), ``loss`` (the last stage's; None elsewhere) and ``grads`` of
    this stage's parameters.
    """
    import torch.distributed as dist

    stage, stages = dist.get_rank(), dist.get_world_size()
    last = stage == stages - 1
    part = pipeline_model(stages, width, hidden, blocks_per_stage)[stage]
    batches = micro_batches(m, size, width)
    inputs, outputs, pending, events = {}, {}, [], []
    in_flight, sent, loss = 0, 0, 0.0
    dist.barrier()
    start = time.time()
    for kind, i in order(stage, stages, m):
        if kind == "F":
            x = batches[i][0] if stage == 0 else _receive((size, width), stage - 1, "activations", i, stage)
            x.requires_grad_(stage > 0)
            began = time.time()
            y = part(x)
            if last:
                y = torch.nn.functional.mse_loss(y, batches[i][1]) / m
                loss += float(y)
            events.append(("F", i, began, time.time()))
            inputs[i], outputs[i] = x, y
            in_flight = max(in_flight, len(outputs))
            if not last:
                pending.append(dist.isend(y.detach(), dst=stage + 1))
                sent += y.numel() * y.element_size()
        else:
            grad = None if last else _receive((size, width), stage + 1, "gradient", i, stage)
            began = time.time()
            torch.autograd.backward(outputs.pop(i), grad)
            events.append(("B", i, began, time.time()))
            if stage > 0:
                g = inputs.pop(i).grad
                pending.append(dist.isend(g, dst=stage - 1))
                sent += g.numel() * g.element_size()
            else:
                inputs.pop(i)
    for work in pending:
        work.wait()
    end = time.time()
    dist.barrier()
    return {"stage": stage, "stages": stages, "m": m, "events": events, "start": start, "end": end,
            "in_flight": in_flight, "sent": sent, "loss": loss if last else None,
            "grads": [None if p.grad is None else p.grad.clone() for p in part.parameters()]}


def bubble_fraction(ranks: list[dict]) -> float:
    """The measured bubble of one run of :func:`run_schedule` (its results in rank order): the step lasts from
    the earliest start to the latest end over the stages; each stage's idle share is the step minus its time
    in forward and backward, over the step; the mean over the stages. Time spent waiting for a message counts
    as idle, as in the theory's bubble."""
    step = max(r["end"] for r in ranks) - min(r["start"] for r in ranks)
    busy = [sum(end - began for _, _, began, end in r["events"]) for r in ranks]
    return sum(1 - b / step for b in busy) / len(ranks)


def bubble_sweep(schedule: str, ms: tuple[int, ...], repeats: int = 3, **shape: Any) -> list[dict[str, Any]]:
    """In each rank of a group: :func:`run_schedule` with ``SCHEDULES[schedule]`` for every m in ``ms``,
    ``repeats`` times; returns this rank's results (``m``, ``repeat`` and the rest) in order, for
    :func:`bubble_fraction` over the ranks of each run."""
    run_schedule(SCHEDULES[schedule], 1, **shape)  # warm-up: the first backward of a process is slow
    results = []
    for m in ms:
        for repeat in range(repeats):
            result = run_schedule(SCHEDULES[schedule], m, **shape)
            result["repeat"] = repeat
            results.append(result)
    return results
