"""Can the user's output path be written? Asked before any work starts, so nothing computed is lost at the end.

``check_output_folder`` (a folder the work saves into, created if missing) and ``check_output_file`` (one
file, e.g. a plot) raise one ``ValueError`` naming the option as the user spelled it, the path, what is wrong
and the fix. They create and leave nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from effitrain_helpers.core.language import tr


def _shown(option: str, path) -> str:
    return f"{option} {str(path)!r}" if option.startswith("--") else f"{option}={str(path)!r}"


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _writable_folder(folder: Path) -> bool:
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


def check_output_folder(path, option: str) -> Path:
    """``path`` as a folder that exists and can be written, or can be created; returns it, expanded."""
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(tr("{shown} is a file, not a folder: nothing could be saved there. Fix: pass a folder (it "
                            "is created if missing).", shown=_shown(option, path)))
    base = _nearest_existing(folder)
    if not _writable_folder(base):
        what = tr("is a file") if base.exists() and not base.is_dir() else tr("cannot be written")
        raise ValueError(tr("{shown}: {base!r} {what}, so nothing could be saved there. Fix: pass a folder you can "
                            "write to (it is created if missing).",
                            shown=_shown(option, path), base=str(base), what=what))
    return folder


def check_output_file(path, option: str, suffixes: tuple[str, ...] = ()) -> Path:
    """``path`` as a file that can be written (its folder exists and is writable; one of ``suffixes`` if given)."""
    file = Path(path).expanduser()
    example = "results" + (suffixes[0] if suffixes else ".png")
    if file.is_dir():
        raise ValueError(tr("{shown} is a folder. Fix: pass a file name, e.g. {option} {example}.",
                            shown=_shown(option, path), option=option, example=example))
    if suffixes and file.suffix.lower() not in suffixes:
        raise ValueError(tr("{shown}: the file type {suffix!r} is not one of {suffixes}. Fix: end the name with one "
                            "of them, e.g. {example}.", shown=_shown(option, path), suffix=file.suffix or "(none)",
                            suffixes=", ".join(suffixes), example=example))
    folder = file.parent
    if not _writable_folder(folder):
        what = tr("does not exist") if not folder.exists() else tr("is not a folder you can write to")
        raise ValueError(tr("{shown}: its folder {folder!r} {what}. Fix: create the folder first, or pass a path in "
                            "a folder you can write to.", shown=_shown(option, path), folder=str(folder), what=what))
    if file.exists() and not os.access(file, os.W_OK):
        raise ValueError(tr("{shown} exists and cannot be overwritten. Fix: pass another file name.",
                            shown=_shown(option, path)))
    return file
