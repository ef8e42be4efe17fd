"""The engines the learner rebuilds, one short module per mechanism (as picotron keeps one file per parallelism).

Each module here is the workbook's reference for a mechanism a lesson has the learner write by hand (gradient
sync, ZeRO, tensor and pipeline parallelism, tiled attention, ...): the thing itself, small enough to read in one
sitting. The lessons' runs and measurements that use an engine stay in ``training/``; checks compare the learner's
version with the engine. Engines import only from ``core``, ``processes`` and ``measure`` (tests/test_architecture.py).
"""
