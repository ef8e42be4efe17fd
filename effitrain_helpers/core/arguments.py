"""Command-line options whose mistakes are one line: the ``effitrain`` command and the training script share it."""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and exit code 2), with a pointer to ``--help``."""

    def error(self, message: str):  # noqa: D102 - argparse hook
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def not_empty(option: str):
    """An argparse ``type`` for a path or name option: an empty (or blank) value is refused, one line naming
    ``option``, instead of being read as the current folder (``--dir ''``) or failing later with a traceback."""
    from effitrain_helpers.core.language import tr

    def check(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(tr("an empty value is not allowed (it is not the current folder). Fix: "
                                                "give a path or a name, or leave the option out for its default."))
        return text

    check.__name__ = option  # what argparse names in its own messages
    return check
