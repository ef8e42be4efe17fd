"""The one settings object of the workbook: lesson size, cache folder and language.

Lessons read ``SETTINGS.size`` instead of inventing their own knobs (guide: one size knob).
Environment variables:

- ``EFFITRAIN_SIZE``: ``small`` (default; a 2-core CPU runs a lesson in about a minute)
  or ``full`` (demos on a GPU: larger benchmarks and batches).
- ``EFFITRAIN_CACHE``: where the workbook keeps what it builds (default ``~/.cache/effitrain``).
- ``EFFITRAIN_LANG``: the language of the workbook's messages and of the learner's copy, ``en`` (default) or
  ``pt-BR`` (Brazilian Portuguese); :mod:`effitrain_helpers.core.language` looks messages up in it. Not
  ``LANG``, which is the operating system's locale.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

SIZES = ("small", "full")
LANGUAGES = ("en", "pt-BR")  # English is the source; translations/<language>/ holds each translation


def tr(text: str, **fields) -> str:
    """:func:`effitrain_helpers.core.language.tr` once :data:`SETTINGS` exists (it reads the language there) and
    that module is loaded (it imports this one, so it is found in ``sys.modules``, not imported: always the case
    once the workbook has shown a message); before, the English (a bad variable at import is said in English)."""
    language = sys.modules.get("effitrain_helpers.core.language")
    if "SETTINGS" not in globals() or language is None:
        return text.format(**fields) if fields else text
    return language.tr(text, **fields)


def _size_from_env() -> str:
    value = os.environ.get("EFFITRAIN_SIZE", "small").strip().lower() or "small"
    if value not in SIZES:
        raise ValueError(
            tr("EFFITRAIN_SIZE={value!r} is not a size; allowed: {sizes}. Fix: export EFFITRAIN_SIZE=small (CPU, "
               "tests) or EFFITRAIN_SIZE=full (GPU demos).", value=value, sizes=', '.join(SIZES))
        )
    return value


def check_lang(value: str, name: str = "EFFITRAIN_LANG") -> str:
    """``value`` as one of :data:`LANGUAGES` (case aside: ``pt-br`` is ``pt-BR``); a ValueError naming ``name``, the
    value, what is allowed and the fix otherwise (``name=""``: the value alone, for argparse's own prefix)."""
    wanted = {lang.lower(): lang for lang in LANGUAGES}.get(str(value).strip().lower())
    if wanted is None:
        fix = tr("export EFFITRAIN_LANG=pt-BR (Brazilian Portuguese) or EFFITRAIN_LANG=en (English)") \
            if name == "EFFITRAIN_LANG" else tr("use pt-BR (Brazilian Portuguese) or en (English)")
        raise ValueError(tr("{option}{value!r} is not a language of the workbook; allowed: {languages}. Fix: {fix}.",
                            option=f"{name}=" if name else "", value=value, languages=", ".join(LANGUAGES), fix=fix))
    return wanted


def _lang_from_env() -> str:
    return check_lang(os.environ.get("EFFITRAIN_LANG", "").strip() or "en")


def _cache_from_env() -> Path:
    explicit = os.environ.get("EFFITRAIN_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "effitrain"


@dataclass
class Settings:
    """Run-wide settings, read once from the environment (see module docstring)."""

    size: str
    cache_dir: Path
    lang: str = "en"

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(size=_size_from_env(), cache_dir=_cache_from_env(), lang=_lang_from_env())

    def set_size(self, size: str) -> None:
        """Switch between ``small`` and ``full`` for the rest of this kernel, and for the processes it launches
        (they read ``EFFITRAIN_SIZE`` from the environment they inherit)."""
        if size not in SIZES:
            raise ValueError(tr("size={size!r} is not allowed; choose one of {sizes}.",
                                size=size, sizes=', '.join(SIZES)))
        self.size = size
        os.environ["EFFITRAIN_SIZE"] = size

    def set_lang(self, lang: str) -> None:
        """Answer in ``lang`` (``en`` or ``pt-BR``) for the rest of this kernel and the processes it launches.
        A translated notebook's first code cell calls it (see :mod:`effitrain_helpers.teach.translations`)."""
        self.lang = check_lang(lang, "lang")
        os.environ["EFFITRAIN_LANG"] = self.lang


SETTINGS = Settings.from_env()
