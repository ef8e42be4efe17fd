"""Test set-up: never touch the network, keep the workbook's cache inside the test session."""

import os
import tempfile

import matplotlib

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("EFFITRAIN_SIZE", "small")
os.environ["MPLBACKEND"] = "Agg"
matplotlib.use("Agg")
# Notebook kernels started by nbval inherit this, so the whole session builds the offline model once, here.
os.environ.setdefault("EFFITRAIN_CACHE", tempfile.mkdtemp(prefix="effitrain-test-cache-"))
