"""What did each process see? (lesson 1.3, and ``effitrain shards``)

``shard_indices`` runs inside every process started by ``launch``: it wraps the sample indices
0..M-1 in a ``DataLoader``, lets ``accelerator.prepare`` shard it, and returns which indices this rank
received. ``summarize_shards`` turns the ranks' reports into facts a lesson can assert: the shards
are disjoint, they cover the dataset, and which samples were repeated to even out the last batch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from effitrain_helpers.core.validate import whole_number


def shard_indices(num_samples: int, batch_size: int = 4, even_batches: bool = True) -> dict:
    """In one process of a group: the indices its prepared DataLoader yields, batch by batch."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration
    from torch.utils.data import DataLoader

    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=even_batches))
    loader = accelerator.prepare(DataLoader(torch.arange(num_samples), batch_size=batch_size))
    batches = [batch.tolist() for batch in loader]
    return {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "indices": [i for batch in batches for i in batch],
        "batches": batches,
    }


@dataclass
class ShardSummary:
    """What the ranks' reports prove: sizes, overlap, coverage, repeated and missing samples."""

    world_size: int
    per_rank: list[int]
    disjoint: bool
    covers_all: bool
    repeated: list[int]
    missing: list[int]


def summarize_shards(reports: list[dict], num_samples: int) -> ShardSummary:
    """Check the reports of all ranks against the dataset ``0..num_samples-1``."""
    counts = Counter(i for r in reports for i in r["indices"])
    seen_by = [set(r["indices"]) for r in reports]
    disjoint = all(not (a & b) for k, a in enumerate(seen_by) for b in seen_by[k + 1:])
    return ShardSummary(
        world_size=len(reports),
        per_rank=[len(r["indices"]) for r in reports],
        disjoint=disjoint,
        covers_all=set(counts) >= set(range(num_samples)),
        repeated=sorted(i for i, c in counts.items() if c > 1),
        missing=sorted(set(range(num_samples)) - set(counts)),
    )


MAX_SAMPLES = 100_000  # every index is listed per rank: more is unreadable and slow


def validate_request(num_samples: int, batch_size: int) -> None:
    """Clear errors for a shard request that cannot work (or would print a flood of indices)."""
    for option, value, most in (("--samples", num_samples, MAX_SAMPLES), ("--batch-size", batch_size, num_samples)):
        whole_number(option, value, maximum=most, example="--samples 10 --batch-size 2")
