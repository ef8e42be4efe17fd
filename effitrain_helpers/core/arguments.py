"""Command-line options whose mistakes are one line: the ``effitrain`` command and the training script share it."""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and exit code 2), with a pointer to ``--help``."""

    def error(self, message: str):  # noqa: D102 - argparse hook
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
