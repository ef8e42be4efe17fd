"""Where do my sentence pairs come from? (lesson 1.3, chapters 2-4)

``load_pairs(source)`` returns a ``DatasetDict`` with ``train`` and ``validation`` splits in the GLUE MRPC
layout (``sentence1``, ``sentence2``, ``label`` 1 = paraphrase / 0 = not, ``idx``), and a
:class:`DataChoice` saying which data it is and why. Sources, in order:

1. ``source`` given: a local CSV or JSON file (or a folder with ``*train*`` and ``*dev*``/``*validation*``
   files) with those columns; labels may be 0/1 or spelled ``equivalent`` / ``not_equivalent``;
2. ``glue/mrpc`` from the classroom's offline kit (``effitrain prefetch``; see ``kit``), else from the
   Hugging Face cache or the Hub (when reachable, never with ``HF_HUB_OFFLINE=1``);
3. the workbook's own pairs, built from its word lists so that the label is learnable: a paraphrase
   keeps who did what to whom (voice, word order and synonyms change); a non-paraphrase changes the
   subject, the object or the action.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from effitrain_helpers.sources.corpus import OBJECTS, SUBJECTS, SYNONYMS, TAILS, clause, lower_first
from effitrain_helpers.sources.kit import ITEMS
from effitrain_helpers.core.language import tr
from effitrain_helpers.core.validate import positive_int

LABEL_NAMES = ["not_equivalent", "equivalent"]
MRPC_SAMPLE = Path(__file__).parent / "sample_data" / "mrpc"  # 12 real GLUE MRPC rows (see its README)

@dataclass(frozen=True)
class DataChoice:
    """Which sentence pairs a lesson uses, and why."""

    name: str
    source: str  # "local", "kit", "cache", "hub" or "workbook"
    reason: str

    def __str__(self) -> str:
        return tr("Data: {name} ({source}): {reason}", name=self.name, source=self.source, reason=self.reason)


def make_pair(rng: random.Random) -> tuple[str, str, int]:
    """One (sentence1, sentence2, label) pair; label 1 when sentence2 says the same thing."""
    subject, obj, tail = rng.choice(SUBJECTS), rng.choice(OBJECTS), rng.choice(TAILS)
    verb = rng.choice(list(SYNONYMS))
    first = clause(subject, verb, obj, passive=False)
    label = int(rng.random() < 0.55)
    passive = rng.random() < 0.5
    # a paraphrase always changes its wording: passive voice, or else the verb's synonym
    s2_verb = SYNONYMS[verb] if label and not passive else rng.choice([verb, SYNONYMS[verb]])
    s2_subject, s2_obj = subject, obj
    if not label:  # change two of who, what and to whom
        keep = rng.choice(["subject", "object", "verb"])
        if keep != "subject":
            s2_subject = rng.choice([s for s in SUBJECTS if s != subject])
        if keep != "object":
            s2_obj = rng.choice([o for o in OBJECTS if o != obj])
        if keep != "verb":
            s2_verb = rng.choice([v for v in SYNONYMS if v != verb])
    second = clause(s2_subject, s2_verb, s2_obj, passive=passive)
    if tail:
        first += f" {tail}"
        second = f"{tail[0].upper() + tail[1:]}, {lower_first(second)}" if rng.random() < 0.3 else f"{second} {tail}"
    return first + ".", second + ".", label


def make_pairs(n_train: int = 800, n_validation: int = 200, seed: int = 0):
    """The workbook's own MRPC-style ``DatasetDict`` (train / validation), deterministic for a seed."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

    for name, n in (("n_train", n_train), ("n_validation", n_validation)):
        positive_int(name, n)
    features = Features({"sentence1": Value("string"), "sentence2": Value("string"),
                         "label": ClassLabel(names=LABEL_NAMES), "idx": Value("int32")})
    splits = {}
    for offset, (split, n) in enumerate((("train", n_train), ("validation", n_validation))):
        rng = random.Random(f"{seed}-{offset}")  # each split its own stream: validation does not move with n_train
        rows = [make_pair(rng) for _ in range(n)]
        splits[split] = Dataset.from_dict(
            {"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows],
             "label": [r[2] for r in rows], "idx": list(range(n))}, features=features)
    return DatasetDict(splits)


def _label(value) -> int | None:
    """A file's label as 0 / 1: 0, 1 (also as 0.0, 1.0 or text) or ``LABEL_NAMES``; None for anything else."""
    if isinstance(value, str):
        value = value.strip()
        if value in LABEL_NAMES:
            return LABEL_NAMES.index(value)
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value in (0, 1):
        return int(value)
    return None


def _checked(ds, file: str):
    """The MRPC layout of one loaded file, every row checked: both sentences there and a 0/1 label.

    Labels spelled 'equivalent' / 'not_equivalent' become 1 / 0, and ``idx`` is added when missing. Any bad row
    raises one ``ValueError`` naming the file, the first bad rows (numbered from 1 after the header), what is
    allowed and the fix.
    """
    from datasets import ClassLabel, Value

    allowed = tr("Allowed: columns sentence1, sentence2, label ({labels})",
                 labels=tr(" or ").join(["0/1"] + [repr(n) for n in LABEL_NAMES]))
    missing = {"sentence1", "sentence2", "label"} - set(ds.column_names)
    if missing:
        raise ValueError(tr("{file} has columns {column_names}; missing {missing}. {allowed}, optional idx. Fix: "
                            "rename the columns in the file.",
                            file=file, column_names=ds.column_names, missing=sorted(missing), allowed=allowed))
    if len(ds) == 0:
        raise ValueError(tr("{file} has no rows. {allowed}. Fix: add sentence pairs below the header.",
                            file=file, allowed=allowed))
    for column in ("sentence1", "sentence2"):
        empty = [i + 1 for i, text in enumerate(ds[column]) if not isinstance(text, str) or not text.strip()]
        if empty:
            raise ValueError(tr("{file}: {column} is missing or empty in row(s) {empty}{more}. Fix: fill them in or "
                                "remove those rows.",
                                file=file, column=column, empty=empty[:5], more=" ..." if len(empty) > 5 else ""))
    labels = [_label(v) for v in ds["label"]]
    bad = [(i + 1, v) for i, (v, label) in enumerate(zip(ds["label"], labels)) if label is None]
    if bad:
        shown = ", ".join(f"row {row}: {value!r}" for row, value in bad[:5])
        raise ValueError(tr("{file}: label not allowed ({shown}{more}). {allowed}. Fix: give every row label 1 "
                            "(paraphrase) or 0 (not).",
                            file=file, shown=shown, more=" ..." if len(bad) > 5 else "", allowed=allowed))
    ds = ds.remove_columns("label").add_column("label", labels)
    ds = ds.cast_column("label", ClassLabel(names=LABEL_NAMES))
    if "idx" not in ds.column_names:
        ds = ds.add_column("idx", list(range(len(ds))))
    return ds.cast_column("idx", Value("int32"))


def _local_files(path: Path) -> dict[str, str]:
    if path.is_file():
        return {"train": str(path)}
    files = sorted(p for p in path.iterdir() if p.suffix in {".csv", ".json", ".jsonl"})
    train = [p for p in files if "train" in p.name]
    val = [p for p in files if "dev" in p.name or "valid" in p.name]
    if not train or not val:
        raise ValueError(
            tr("folder {path!r} needs a *train* and a *dev* (or *validation*) CSV/JSON file; found {found}.",
               path=str(path), found=[p.name for p in files] or tr("none"))
        )
    return {"train": str(train[0]), "validation": str(val[0])}


def _read(file: str):
    """One CSV / JSON file as a ``Dataset``; a file the libraries cannot read gives one ``ValueError``."""
    from datasets import load_dataset
    from datasets.exceptions import DatasetGenerationError
    from datasets.utils import logging as ds_logging

    kind = "csv" if file.endswith(".csv") else "json"
    if Path(file).stat().st_size == 0:
        raise ValueError(tr("{file} is empty. Fix: write the header sentence1,sentence2,label and one row per pair.",
                            file=file))
    level = ds_logging.get_verbosity()
    ds_logging.set_verbosity(ds_logging.CRITICAL)  # the error below says it in one line, not the library
    try:
        return load_dataset(kind, data_files={"train": file})["train"]
    except DatasetGenerationError as err:
        cause = err.__cause__ or err
        why = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
        raise ValueError(tr("{file} cannot be read as {upper} ({why}). Fix: check the file's format (a {shape}).",
                            file=file, upper=kind.upper(), why=why, shape=tr("header line, then one row per pair")
                            if kind == "csv" else tr("JSON list or JSON lines")))
    except ValueError as err:
        if "corresponds to no data" not in str(err):
            raise
        raise ValueError(tr("{file} has a header but no rows. Fix: add sentence pairs below the header.", file=file)) from None
    finally:
        ds_logging.set_verbosity(level)


def load_local_pairs(source: str | Path):
    """Sentence pairs from a local CSV/JSON file or folder, in the MRPC layout (see module docstring)."""
    from datasets import DatasetDict

    path = Path(source).expanduser()
    if not path.exists():
        raise ValueError(tr("data source {source!r} does not exist; pass a CSV/JSON file or a folder of them.",
                            source=str(source)))
    files = _local_files(path)
    suffix = Path(next(iter(files.values()))).suffix
    if suffix not in {".csv", ".json", ".jsonl"}:
        raise ValueError(tr("file {path!r} is not .csv, .json or .jsonl; convert it to one of those.", path=str(path)))
    data = DatasetDict({split: _checked(_read(file), file) for split, file in files.items()})
    if "validation" not in data:  # one file: hold out a fifth for validation
        if len(data["train"]) < 2:
            raise ValueError(tr("{train} has 1 row; one file is split into training and validation pairs. Fix: give "
                                "at least 2 rows (better: hundreds).", train=files['train']))
        parts = data["train"].train_test_split(test_size=0.2, seed=0)
        data = DatasetDict({"train": parts["train"], "validation": parts["test"]})
    return data


GLUE_REPO = ITEMS["mrpc"].repo_id  # "nyu-mll/glue", defined with the offline kit's layout


def cached_glue_mrpc() -> dict[str, str] | None:
    """Paths of GLUE MRPC's train and validation parquet files in the Hugging Face cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    from effitrain_helpers.sources.kit import GLUE_MRPC_FILES
    from effitrain_helpers.core.hub import hf_cache_dir

    files = {}
    for split in ("train", "validation"):
        found = try_to_load_from_cache(GLUE_REPO, GLUE_MRPC_FILES[split], cache_dir=hf_cache_dir(),
                                       repo_type="dataset")
        if not isinstance(found, str):
            return None
        files[split] = found
    return files


def _cap(data, n_train: int, n_validation: int):
    """At most ``n_train`` / ``n_validation`` rows (a CPU lesson does not need all 3,668 MRPC pairs)."""
    from datasets import DatasetDict

    caps = {"train": n_train, "validation": n_validation}
    return DatasetDict({k: ds.select(range(min(len(ds), caps.get(k, len(ds))))) for k, ds in data.items()})


def load_pairs(source: str | Path | None = None, n_train: int = 800, n_validation: int = 200):
    """Return ``(DatasetDict, DataChoice)``: MRPC-layout pairs from ``source``, GLUE MRPC, or the workbook's own.

    Every source is capped at ``n_train`` / ``n_validation`` rows. Never waits on the network when offline.
    """
    from datasets import load_dataset

    from effitrain_helpers.sources.kit import GLUE_MRPC_FILES
    from effitrain_helpers.sources.ladder import course_rung

    if source is not None:
        return _cap(load_local_pairs(source), n_train, n_validation), DataChoice(str(source), "local", tr("you gave a local file"))
    rung = course_rung("mrpc", cached_glue_mrpc)
    if rung.source == "kit":
        data = load_dataset("parquet", data_files={s: str(rung.found.path / GLUE_MRPC_FILES[s]) for s in ("train", "validation")})
        choice = DataChoice("glue/mrpc", "kit", f"GLUE MRPC: {rung.found.reason}")
    elif rung.source == "cache":
        data = load_dataset("parquet", data_files=rung.found)
        choice = DataChoice("glue/mrpc", "cache", tr("GLUE MRPC is in the Hugging Face cache"))
    elif rung.source == "hub":
        data = load_dataset(GLUE_REPO, "mrpc")
        data.pop("test", None)
        choice = DataChoice("glue/mrpc", "hub", tr("GLUE MRPC, downloaded from the Hub"))
    else:
        data = make_pairs(n_train, n_validation)
        choice = DataChoice(tr("workbook MRPC-style pairs"), "workbook",
                            tr("GLUE MRPC is not cached and {why}: using the workbook's own pairs", why=rung.why_own))
    return _cap(data, n_train, n_validation), choice
