"""Command-line options whose mistakes are one line, in the learner's language: the ``effitrain`` command and the
training script share it.

Everything argparse shows goes through :func:`~effitrain_helpers.core.language.tr`, so ``EFFITRAIN_LANG`` decides
the language of the command line as it does for the lessons, and a new option or subcommand is translated by
adding its English ``help`` to the module's message file, with no change to the ``add_argument`` line:

* the help texts, descriptions and group titles the code writes (``help=``, ``description=``, ``title=``,
  collected from the code by ``teach.translations.package_messages``), by :class:`TranslatedHelpFormatter`;
* argparse's own words (``usage:``, ``options``, ``invalid choice: ...``), which CPython's argparse looks up at
  call time through its module-level ``_``/``ngettext`` (``gettext``): :class:`OneLineParser` points them at ``tr``
  while one of its methods runs, then puts them back. :data:`ARGPARSE_WORDS` lists them (a test checks that each
  is still in the installed argparse)."""

from __future__ import annotations

import argparse
from contextlib import contextmanager

from effitrain_helpers.core.language import msg, tr

# argparse's learner-visible words, exactly as CPython 3.11's argparse.py passes them to gettext.
ARGPARSE_WORDS = (
    msg("usage: "), msg("positional arguments"), msg("options"), msg("show this help message and exit"),
    msg("argument %(argument_name)s: %(message)s"), msg("invalid choice: %(value)r (choose from %(choices)s)"),
    msg("invalid %(type)s value: %(value)r"), msg("the following arguments are required: %s"),
    msg("unrecognized arguments: %s"), msg("expected one argument"), msg("expected at most one argument"),
    msg("expected at least one argument"), msg("expected %s argument"), msg("expected %s arguments"),
    msg("ambiguous option: %(option)s could match %(matches)s"), msg("not allowed with argument %s"),
    msg("one of the arguments %s is required"), msg("ignored explicit argument %r"),
    msg("unknown parser %(parser_name)r (choices: %(choices)s)"),
)


@contextmanager
def _argparse_in_learners_language():
    """argparse's gettext lookups answered by ``tr`` while the block runs (restored after, even on exit)."""
    saved = argparse._, argparse.ngettext
    argparse._ = tr
    argparse.ngettext = lambda singular, plural, n: tr(singular if n == 1 else plural)
    try:
        yield
    finally:
        argparse._, argparse.ngettext = saved


class TranslatedHelpFormatter(argparse.HelpFormatter):
    """``--help`` in the learner's language: each help text, description and section title through ``tr``
    (an English text with no translation is shown as it is)."""

    def _get_help_string(self, action):
        return tr(action.help) if action.help else action.help

    def add_text(self, text):
        super().add_text(tr(text) if text and text is not argparse.SUPPRESS else text)

    def start_section(self, heading):
        super().start_section(tr(heading) if heading else heading)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and exit code 2), with a pointer to ``--help``, and which
    speaks the learner's language (help, usage and argparse's own messages: see the module's docstring)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", TranslatedHelpFormatter)
        with _argparse_in_learners_language():
            super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102 - argparse hook
        with _argparse_in_learners_language():
            return super().parse_known_args(args, namespace)

    def parse_args(self, args=None, namespace=None):  # noqa: D102 - argparse hook
        with _argparse_in_learners_language():
            return super().parse_args(args, namespace)

    def format_usage(self):  # noqa: D102 - argparse hook
        with _argparse_in_learners_language():
            return super().format_usage()

    def format_help(self):  # noqa: D102 - argparse hook
        with _argparse_in_learners_language():
            return super().format_help()

    def error(self, message: str):  # noqa: D102 - argparse hook
        self.exit(2, tr("{prog}: error: {message} (see {prog} --help)", prog=self.prog, message=message) + "\n")


def not_empty(option: str):
    """An argparse ``type`` for a path or name option: an empty (or blank) value is refused, one line naming
    ``option``, instead of being read as the current folder (``--dir ''``) or failing later with a traceback."""

    def check(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(tr("an empty value is not allowed (it is not the current folder). Fix: "
                                                "give a path or a name, or leave the option out for its default."))
        return text

    check.__name__ = option  # what argparse names in its own messages
    return check
