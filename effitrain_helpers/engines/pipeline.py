"""Pipeline schedules: in what order each stage runs its micro-batches' forwards and backwards (lesson 6.4).

A model cut into ``p`` stages (one per process) trains a batch cut into ``m`` micro-batches. A **schedule** is
the order of a stage's operations, each ``("F", i)`` (forward of micro-batch i) or ``("B", i)`` (its backward):

- :func:`all_forward_all_backward` (GPipe): every forward, then every backward; a stage holds all m
  micro-batches' activations at once;
- :func:`one_f_one_b` (1F1B, PipeDream-flush): ``p - 1 - s`` forwards to fill the pipe, then one forward and
  one backward in turn, then the last backwards; a stage holds at most ``p - s`` micro-batches' activations.

Both keep each stage idle for the same share of the step, the **bubble** (:func:`theory_bubble`) when every
stage takes the same time per micro-batch. :func:`effitrain_helpers.training.pipeline.run_schedule` runs a
schedule in real processes and measures it.
"""

from __future__ import annotations

from typing import Callable


def all_forward_all_backward(stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    """GPipe's order: every forward, then every backward."""
    return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


def one_f_one_b(stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    """1F1B: ``stages - 1 - stage`` forwards to fill the pipe, then a forward and a backward in turn, then the
    backwards left (the house's reference for lesson 6.4's exercise)."""
    warm = min(stages - 1 - stage, m)
    order = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", i) for i in range(m - warm, m)]


SCHEDULES: dict[str, Callable] = {"all-forward-all-backward": all_forward_all_backward, "1F1B": one_f_one_b}


def theory_bubble(stages: int, m: int) -> float:
    """The share of a step each stage is idle, for equal stages: ``(p - 1) / (m + p - 1)``."""
    return (stages - 1) / (m + stages - 1)
