"""How big is each lesson's run in the ``small`` and ``full`` size? (every lesson's set-up cell)

One table for the whole workbook: a lesson reads its row with ``lesson_size("3.1")`` instead of writing its own
``... if SETTINGS.size == "small" else ...``. ``small`` keeps each lesson near a minute on a 2-core CPU (and
is what the tests run); ``full`` is for demos on a GPU.
"""

from __future__ import annotations

from types import SimpleNamespace

from effitrain_helpers.core.language import tr
from effitrain_helpers.core.settings import SETTINGS, SIZES

# lesson -> size -> values. Chapter 4's three lessons share one row ("4"): they train the same steps.
LESSON_SIZES: dict[str, dict[str, dict]] = {
    "1.1": {  # matrix sides benchmarked; a CPU without bf16/fp16 units runs 16-bit ~100x slower: keep it small
        "small": {"cpu_float32": (128, 256, 512), "cpu_16bit": (128, 256, 512),
                  "gpu_float32": (256, 1024, 2048), "gpu_16bit": (256, 1024, 2048)},
        "full": {"cpu_float32": (256, 512, 1024, 2048), "cpu_16bit": (128, 256, 512),
                 "gpu_float32": (1024, 2048, 4096, 8192), "gpu_16bit": (1024, 2048, 4096, 8192)},
    },
    "1.2": {"small": {"n_images": 60, "n_sounds": 40}, "full": {"n_images": 600, "n_sounds": 400}},
    "1.3": {"small": {"n_train": 800, "n_validation": 200}, "full": {"n_train": 3668, "n_validation": 408}},
    "2.1": {"small": {"n_train": 3000, "n_validation": 200}, "full": {"n_train": 3668, "n_validation": 408}},
    "2.2": {"small": {"n_train": 1600, "epochs": 2}, "full": {"n_train": 3000, "epochs": 3}},
    "3.1": {"small": {"steps": 3}, "full": {"steps": 10}},  # optimizer steps per run
    "3.2": {"small": {"seq_lens": (32, 64, 128)}, "full": {"seq_lens": (128, 256, 512)}},
    "3.3": {"small": {"steps": 6}, "full": {"steps": 30}},
    "4": {"small": {"steps": 150}, "full": {"steps": 400}},  # lessons 4.1-4.3 and `effitrain optimizers`
    "5.1": {"small": {"steps": 3, "batch_size": 8}, "full": {"steps": 20, "batch_size": 32}},  # per process
    "5.2": {  # batch size, unrecorded reference steps (profiler waiting), recorded steps (profiler active)
        "small": {"batch_size": 8, "reference_steps": 2, "active_steps": 3},
        "full": {"batch_size": 32, "reference_steps": 5, "active_steps": 10},
    },
    "5.3": {  # rows of seq_len tokens, batch per process, optimizer steps; checkpoints every save_every steps
        "small": {"n_rows": 80, "seq_len": 32, "batch_size": 4, "steps": 16, "save_every": 3, "stop_at": 6,
                  "crash_at": 14},
        "full": {"n_rows": 400, "seq_len": 64, "batch_size": 8, "steps": 60, "save_every": 10, "stop_at": 30,
                 "crash_at": 47},
    },
    "5.4": {  # link rates (bit/s) swept with tc tbf, timed steps per strategy and rate
        "small": {"rates": (10e6, 100e6, 1e9), "link_steps": 3},
        "full": {"rates": (10e6, 100e6, 1e9, 10e9), "link_steps": 10},
    },
    "6.4": {  # tokens through the split MLP; micro-batch counts swept; repeats per count; steps per strategy
        "small": {"tokens": 64, "micro_batches": (1, 2, 4, 8), "repeats": 3, "steps": 3},
        "full": {"tokens": 512, "micro_batches": (1, 2, 4, 8, 16), "repeats": 5, "steps": 10},
    },
    "6.1": {"small": {"sizes": (1_000, 100_000, 1_000_000)},  # float32 values all-reduced, side by side
            "full": {"sizes": (1_000, 100_000, 1_000_000, 10_000_000)}},
    "7.1": {"small": {"steps": 4, "batch_size": 8}, "full": {"steps": 30, "batch_size": 32}},  # per process
    "7.2": {  # TinyLM's shape, global batch (sequences of seq tokens), AdamW steps and learning rate per run
        "small": {"vocab": 64, "hidden": 32, "heads": 4, "layers": 2, "seq": 16, "batch": 8, "steps": 4,
                  "lr": 1e-2},
        "full": {"vocab": 512, "hidden": 128, "heads": 8, "layers": 4, "seq": 64, "batch": 16, "steps": 10,
                 "lr": 1e-2},
    },
    "8.1": {  # (batch, heads, d) and the sequence lengths n whose bytes saved for backward are measured
        "small": {"batch": 1, "heads": 2, "d": 32, "lengths": (128, 256, 512)},
        "full": {"batch": 2, "heads": 4, "d": 64, "lengths": (256, 512, 1024, 2048)},
    },
    "8.2": {  # the block's shape: sequence s, batch b, hidden h, heads a (a s / h = 8: attention's squares dominate)
        "small": {"s": 128, "b": 2, "h": 64, "a": 4},
        "full": {"s": 1024, "b": 4, "h": 512, "a": 8},
    },
    "8.3": {  # ranks; ring attention's (batch, n, d); the sequence-parallel block's tokens, width and hidden size
        "small": {"processes": 2, "batch": 2, "n": 96, "d": 16, "tokens": 64, "width": 64, "hidden": 256},
        "full": {"processes": 4, "batch": 4, "n": 2048, "d": 64, "tokens": 1024, "width": 256, "hidden": 1024},
    },
    "8.4": {  # the expert-parallel layer: tokens on each rank (one entry per rank), widths, experts, routing
        "small": {"tokens": (96, 80, 72, 64), "d": 32, "hidden": 64, "experts": 8, "top_k": 2,
                  "capacity_factor": 1.25},
        "full": {"tokens": (2048, 1792, 1536, 1280), "d": 256, "hidden": 1024, "experts": 8, "top_k": 2,
                 "capacity_factor": 1.25},
    },
    "6.2": {  # the MLP timed with and without overlap: width, layers, rows per rank, timed steps, bucket MiB
        "small": {"width": 512, "depth": 6, "batch_size": 32, "steps": 8, "bucket_mib": 2},
        "full": {"width": 1024, "depth": 8, "batch_size": 64, "steps": 20, "bucket_mib": 8},
    },
}


def lesson_size(lesson: str, size: str | None = None) -> SimpleNamespace:
    """The values of ``lesson``'s row for ``size`` (default: the current ``SETTINGS.size``), as attributes.

    >>> lesson_size("3.1", "small").steps
    3
    """
    size = SETTINGS.size if size is None else size
    if lesson not in LESSON_SIZES:
        raise ValueError(tr("lesson {lesson!r} has no size row; rows: {lesson_sizes}.",
                            lesson=lesson, lesson_sizes=', '.join(LESSON_SIZES)))
    if size not in SIZES:
        raise ValueError(tr("size={size!r} is not allowed; choose one of {sizes}.", size=size, sizes=', '.join(SIZES)))
    return SimpleNamespace(**LESSON_SIZES[lesson][size])
