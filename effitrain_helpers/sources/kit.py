"""Where is the classroom's offline kit, and what is in it? (``effitrain prefetch``; used by models, processors, pairs)

An instructor runs ``effitrain prefetch [--dir DIR]`` once on a machine with network: it downloads the course's
real model and data into one folder, which is then copied to every student machine. With that folder present,
the lessons load the real model, processors and GLUE MRPC from it, with no network, and say so.

Where the kit is: ``$EFFITRAIN_KIT`` when set, else ``<cache folder>/kit`` (``~/.cache/effitrain/kit``; see
``settings``). No kit there: the loaders carry on as before (HF cache, Hub, the workbook's own), at the cost
of one ``stat``. A kit that is there but broken (``$EFFITRAIN_KIT`` pointing nowhere, no manifest, a listed
item with files missing) raises a ``ValueError`` saying what is wrong and how to fix it.

The layout, defined once here (``ITEMS``) and used by both ``prefetch`` and the loaders::

    KIT/
      effitrain-kit.json                         manifest: which items are complete
      models/distilbert-base-cased/              config.json, model.safetensors, tokenizer files
      processors/google--vit-base-patch16-224/   preprocessor_config.json (lesson 1.2, images)
      processors/facebook--wav2vec2-base/        preprocessor_config.json (lesson 1.2, audio)
      datasets/glue-mrpc/mrpc/                   train-/validation-/test-00000-of-00001.parquet

Each item folder holds the files exactly as on the Hub (``from_pretrained`` and ``load_dataset("parquet")``
read them). ``prefetch`` writes the manifest first and adds each item when its download is complete, so an
interrupted prefetch leaves a kit whose finished items work and the rest fall back as if absent.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from effitrain_helpers.core import files
from effitrain_helpers.core.language import tr
from effitrain_helpers.core.settings import SETTINGS

KIT_ENV = "EFFITRAIN_KIT"
MANIFEST = "effitrain-kit.json"
KIT_FORMAT = 1
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
GLUE_MRPC_FILES = {"train": "mrpc/train-00000-of-00001.parquet",
                   "validation": "mrpc/validation-00000-of-00001.parquet",
                   "test": "mrpc/test-00000-of-00001.parquet"}  # the file names on the Hub, in the HF cache and in the kit


@dataclass(frozen=True)
class KitItem:
    """One thing the kit holds: which Hub repository, where in the kit, which files prove it is complete."""

    key: str
    repo_id: str
    repo_type: str  # "model" or "dataset"
    folder: str  # relative to the kit
    patterns: tuple[str, ...]  # what prefetch downloads
    needs: tuple[tuple[str, ...], ...] = field(default=())  # for each tuple, one of its files must be there
    lesson: str = ""


ITEMS: dict[str, KitItem] = {item.key: item for item in (
    KitItem("model", "distilbert-base-cased", "model", "models/distilbert-base-cased",
            ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"),
            (("config.json",), WEIGHT_FILES, ("tokenizer.json", "vocab.txt")), "1.1 onwards"),
    KitItem("image_processor", "google/vit-base-patch16-224", "model", "processors/google--vit-base-patch16-224",
            ("preprocessor_config.json", "config.json"), (("preprocessor_config.json",),), "1.2"),
    KitItem("feature_extractor", "facebook/wav2vec2-base", "model", "processors/facebook--wav2vec2-base",
            ("preprocessor_config.json", "config.json"), (("preprocessor_config.json",),), "1.2"),
    KitItem("mrpc", "nyu-mll/glue", "dataset", "datasets/glue-mrpc", tuple(GLUE_MRPC_FILES.values()),
            ((GLUE_MRPC_FILES["train"],), (GLUE_MRPC_FILES["validation"],)), "1.3 onwards"),
)}


@dataclass(frozen=True)
class KitHit:
    """An item found in the kit: ``path`` is its folder, ``reason`` the sentence the loaders print."""

    path: Path
    reason: str


def kit_location(folder: str | Path | None = None) -> tuple[Path, str]:
    """Where the kit is looked for, and why there (``folder`` if given, ``$EFFITRAIN_KIT``, or the default)."""
    if folder is not None:
        return Path(folder).expanduser(), tr("the folder you gave")
    explicit = os.environ.get(KIT_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser(), tr("set by {variable}", variable=KIT_ENV)
    return SETTINGS.cache_dir / "kit", tr("the default place")


def read_manifest(kit: Path) -> dict:
    """The manifest of the kit folder ``kit``; ``ValueError`` when it is missing or unreadable."""
    try:
        manifest = json.loads(files.read_bytes(kit / MANIFEST))
    except FileNotFoundError:
        raise ValueError(tr("offline kit folder {kit!r} has no {manifest}: it is not a kit made by `effitrain "
                            "prefetch`. Fix: copy the whole kit folder again, run `effitrain prefetch --dir {path}` "
                            "on a machine with network, or unset {kit_env}.",
                            kit=str(kit), manifest=MANIFEST, path=kit, kit_env=KIT_ENV)) from None
    except (OSError, ValueError) as err:
        raise ValueError(tr("offline kit manifest {manifest!r} cannot be read ({err}). Fix: copy the kit folder again "
                            "or re-run `effitrain prefetch`.", manifest=str(kit / MANIFEST), err=err)) from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("items"), dict):
        raise ValueError(tr("offline kit manifest {manifest!r} is not one `effitrain prefetch` wrote. Fix: re-run "
                            "`effitrain prefetch`.", manifest=str(kit / MANIFEST)))
    return manifest


def find_kit(folder: str | Path | None = None) -> tuple[Path, dict] | None:
    """``(kit folder, manifest)`` when a kit is present, None when there is none; ``ValueError`` when broken."""
    kit, why = kit_location(folder)
    if not kit.exists():
        if folder is not None:
            raise ValueError(tr("kit folder {kit!r} does not exist. Fix: pass the folder `effitrain prefetch` wrote.",
                                kit=str(kit)))
        if why.startswith("set by"):
            raise ValueError(tr("{kit_env}={kit!r} does not exist. Allowed: the folder `effitrain prefetch` wrote. "
                                "Fix: correct the path, copy the kit there, or unset {kit_env} to use the workbook's "
                                "own models.", kit_env=KIT_ENV, kit=str(kit)))
        return None
    if not kit.is_dir():
        raise ValueError(tr("offline kit {kit!r} ({why}) is a file, not a folder. Fix: point {kit_env} to the kit "
                            "folder.", kit=str(kit), why=why, kit_env=KIT_ENV))
    return kit, read_manifest(kit)


def missing_files(folder: Path, item: KitItem) -> list[str]:
    """The files ``item`` needs that ``folder`` lacks (one name per alternative group; empty when complete)."""
    return [" or ".join(group) for group in item.needs if not any((folder / f).is_file() for f in group)]


def file_problem(path: Path) -> str | None:
    """What makes a kit file that is there unusable (checked from its first and last bytes, never loaded
    whole), or None: empty, a JSON file that is not a non-empty object (``config.json`` of ``{}``), a
    safetensors file whose header is cut or not JSON, a parquet file without its ``PAR1`` marks."""
    try:
        size = path.stat().st_size
        if size == 0:
            return tr("empty (0 bytes)")
        with open(path, "rb") as f:
            head = f.read(8)
            if path.suffix == ".json":
                f.seek(0)
                data = json.loads(f.read().decode("utf-8"))
                return None if isinstance(data, dict) and data else tr("not a JSON object with settings")
            if path.suffix == ".safetensors":
                header = int.from_bytes(head, "little") if len(head) == 8 else size
                if 8 + header > size:
                    return tr("cut short (its header says more bytes than the file has)")
                if not isinstance(json.loads(f.read(header).decode("utf-8")), dict):
                    raise ValueError
            if path.suffix == ".parquet":
                f.seek(max(0, size - 4))
                if head[:4] != b"PAR1" or f.read(4) != b"PAR1":
                    return tr("not a parquet file (cut short?)")
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError included
        return tr("unreadable or not the format its name says")
    return None


def unusable_files(folder: Path, item: KitItem) -> list[str]:
    """``"name (what is wrong)"`` for each file of ``item`` in ``folder`` that is there but unusable."""
    found = [folder / f for group in item.needs for f in group if (folder / f).is_file()]
    return [f"{path.name} ({problem})" for path in found if (problem := file_problem(path))]


def kit_item(key: str) -> KitHit | None:
    """The kit's copy of item ``key`` (see ``ITEMS``), or None when there is no kit or it lacks the item.

    ``ValueError`` when the kit lists the item but its files are missing (a broken copy).
    """
    if key not in ITEMS:
        raise ValueError(tr("kit item {key!r} does not exist; allowed: {items}.", key=key, items=', '.join(ITEMS)))
    found = find_kit()
    if found is None:
        return None
    kit, manifest = found
    if key not in manifest["items"]:
        return None
    item = ITEMS[key]
    folder = kit / item.folder
    missing = missing_files(folder, item)
    if missing:
        raise ValueError(tr("offline kit {kit!r} lists {repo_id} but {folder!r} lacks {missing}: the copy is broken. "
                            "Fix: copy the kit folder again, or re-run `effitrain prefetch --dir {path}` on a "
                            "machine with network.", kit=str(kit), repo_id=item.repo_id, folder=str(folder),
                            missing=", ".join(missing), path=kit))
    unusable = unusable_files(folder, item)
    if unusable:
        raise ValueError(tr("offline kit {kit!r} lists {repo_id} but these files of {folder!r} are unusable: {files}. "
                            "Fix: copy the kit folder again, or re-run `effitrain prefetch --dir {kit}` on a machine "
                            "with network.", kit=str(kit), repo_id=item.repo_id, folder=str(folder),
                            files=", ".join(unusable)))
    _, why = kit_location()
    return KitHit(folder, tr("{repo_id} from the offline kit at {kit} ({why}), no network needed", repo_id=item.repo_id,
                             kit=kit, why=why))


def describe_kit(folder: str | Path | None = None) -> str:
    """One or a few lines: where the kit is looked for (or ``folder``), and what it holds (start page, CLI)."""
    kit, why = kit_location(folder)
    try:
        found = find_kit(folder)
    except ValueError as err:
        return tr("Offline kit: broken: {error}", error=err)
    if found is None:
        return tr("Offline kit: none ({variable} is not set and {kit} does not exist): lessons use the Hugging Face "
                  "cache, the Hub when reachable, or the workbook's own small models and data.", variable=KIT_ENV,
                  kit=kit)
    lines = [tr("Offline kit: {kit} ({why})", kit=kit, why=why)]
    for item in ITEMS.values():
        if item.key not in found[1]["items"]:
            state = tr("not in this kit")
        else:
            missing = missing_files(kit / item.folder, item)
            unusable = unusable_files(kit / item.folder, item)
            state = (tr("BROKEN, lacks {files}", files=", ".join(missing)) if missing else
                     tr("BROKEN, unusable {files}", files=", ".join(unusable)) if unusable else tr("ready"))
        lines.append("  " + tr("{repo_id:<30} lesson {lesson:<12} {state}", repo_id=item.repo_id,
                               lesson=item.lesson, state=state))
    return "\n".join(lines)


def _write_manifest(kit: Path, manifest: dict) -> None:
    tmp = kit / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, kit / MANIFEST)


def prepare_target(target: Path) -> bool:
    """Make ``target`` ready for a kit; True when this call created it. ``ValueError`` when it cannot be used."""
    if target.exists() and not target.is_dir():
        raise ValueError(tr("--dir {target!r} is a file, not a folder. Fix: pass a folder path for the kit.",
                            target=str(target)))
    if target.is_dir() and any(target.iterdir()) and not (target / MANIFEST).is_file():
        raise ValueError(tr("--dir {target!r} holds other files and is not a kit. Fix: pass a new or empty folder "
                            "(or an existing kit, to complete or update it).", target=str(target)))
    created = not target.exists()
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe = target / ".effitrain-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise ValueError(tr("cannot write to the kit folder {target!r} ({reason}). Fix: pass a folder you can write "
                            "to with --dir, or fix its permissions.", target=str(target),
                            reason=err.strerror or err)) from None
    return created


def prefetch(target: str | Path | None = None, timeout: float = 3.0, progress: bool = True) -> dict:
    """Download every ``ITEMS`` entry into the kit folder ``target`` (default: ``kit_location()``).

    Fails within about ``timeout`` seconds, with a ``ValueError`` that says so, when the Hub cannot be reached
    (or ``HF_HUB_OFFLINE`` is set). Returns ``{"kit": path, "items": {key: folder}, "seconds": s}``.
    """
    from effitrain_helpers.core.hub import hub_offline_requested, hub_problem

    target = Path(target).expanduser() if target is not None else kit_location()[0]
    created = prepare_target(target)
    offline_hint = tr("Run `effitrain prefetch` on a machine with network, then copy the folder to the student "
                      "machines. Meanwhile the lessons keep using the workbook's own small models and data.")
    problem = (tr("HF_HUB_OFFLINE is set, so nothing may be downloaded (unset it to prefetch)")
               if hub_offline_requested() else
               hub_problem(timeout))
    if problem:
        if created:
            target.rmdir()
        raise ValueError(tr("prefetch needs the network: {problem}. {offline_hint}",
                            problem=problem, offline_hint=offline_hint))
    from huggingface_hub import snapshot_download

    start = time.perf_counter()
    manifest = read_manifest(target) if (target / MANIFEST).is_file() else {"format": KIT_FORMAT, "items": {}}
    manifest["complete"] = False
    _write_manifest(target, manifest)
    for item in ITEMS.values():
        if progress:
            print(f"prefetch: {item.repo_id} ({item.repo_type}) -> {item.folder}", flush=True)
        folder = target / item.folder
        snapshot_download(item.repo_id, repo_type=item.repo_type, local_dir=folder, allow_patterns=list(item.patterns))
        missing = missing_files(folder, item)
        if missing:
            raise ValueError(tr("{repo_id} downloaded without {missing}: the Hub repository changed? Report it to "
                                "the workbook's maintainers.", repo_id=item.repo_id, missing=', '.join(missing)))
        manifest["items"][item.key] = {"repo_id": item.repo_id, "folder": item.folder,
                                       "downloaded": time.strftime("%Y-%m-%d %H:%M:%S")}
        _write_manifest(target, manifest)
    manifest["complete"] = True
    _write_manifest(target, manifest)
    return {"kit": str(target), "items": {k: v["folder"] for k, v in manifest["items"].items()},
            "seconds": time.perf_counter() - start}
