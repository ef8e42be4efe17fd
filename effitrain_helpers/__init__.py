"""effitrain_helpers: the machinery the lesson notebooks share.

Sub-packages, lowest layer first (a module imports only from its own layer or lower ones; a test enforces it):

- ``core``       settings (size, cache folder), the cache, the hardware (``devices``), the Hub question (``hub``)
- ``sources``    where models and data come from: ``models``, ``processors``, ``pairs``, ``media``, ``corpus``,
                 ``kit`` (the classroom's offline kit)
- ``processes``  running real processes from a notebook: ``launch`` (and its ``launch_worker``), ``sharding``
- ``measure``    ``bench`` (matrix-product speed), ``metrics``, ``saved_memory``, ``communication``,
                 ``optimizer_memory``
- ``training``   the lessons' runs: ``train`` (chapter 2's loop), ``ddp_checks``, ``scaling``; chapter 3's
                 ``workload``, ``accumulation``, ``checkpointing``, ``local_sgd``, ``precision``, ``techniques``
                 and ``efficiency`` (the chapter's table); ``optimizer_compare`` (chapter 4);
                 ``model_sharding`` (lesson 5.1: DDP against FSDP)
- ``teach``      ``exercises`` and ``checks`` (one module per lesson), ``editions``, ``lessons`` (the course map),
                 ``plots``, ``widgets``
- ``cli``        the ``effitrain`` command line

Importing this package is cheap: transformers, accelerate, datasets and bitsandbytes are only imported
inside the functions that need them.
"""

import os

# Threads that wait for work sleep instead of spinning (OpenMP's passive wait policy), in this process when torch
# is imported after this package, and in every process it starts (launched ranks, the command line's runs). With
# one of a laptop's two cores busy with another program, a spinning thread keeps the core its partner needs: a
# small training step then ran 45 times slower than on the idle machine (sleeping: 1.4 times). The kernels get it
# from their kernel spec (Makefile, README), which is set before the notebook imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
