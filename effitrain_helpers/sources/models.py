"""Which pre-trained model do I load, and from where? (lesson 1.1 onwards)

``choose_model(name)`` resolves, in this order:

1. ``name`` given by the user: a local folder, else a Hub id that is cached, else one the Hub can serve now;
   (the course's own id is taken from the offline kit when the kit holds it);
2. the course's model from the classroom's offline kit (``effitrain prefetch``; see ``kit``), when there is one;
3. the course's model, ``distilbert-base-cased``, from the Hugging Face cache;
4. the same model from the Hub, when it answers within a few seconds (never when ``HF_HUB_OFFLINE=1``);
5. otherwise a small DistilBERT checkpoint the workbook builds once (config, random weights and a
   WordPiece tokenizer trained on the workbook's own text) and saves under the cache folder.

Whatever the source, the model is loaded through the real ``from_pretrained`` path. ``load_classifier``
does the loading for later lessons and prints one line saying which model it used and why.
``trust_remote_code`` is never enabled.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from effitrain_helpers.core.cache import build_once, damage
from effitrain_helpers.core.hub import hf_cache_dir, hub_reachable
from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.sources.kit import ITEMS, WEIGHT_FILES, kit_item
from effitrain_helpers.sources.ladder import course_rung
from effitrain_helpers.core.validate import positive_int

DEFAULT_MODEL = ITEMS["model"].repo_id  # "distilbert-base-cased", defined with the offline kit's layout
OFFLINE_MODEL = {"dim": 128, "n_layers": 2, "n_heads": 4, "hidden_dim": 512, "max_position_embeddings": 512,
                 "dropout": 0.0, "attention_dropout": 0.0, "seq_classif_dropout": 0.0}  # tiny and trained from scratch: no dropout
VOCAB_SIZE = 3000
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")

# Where a model came from (``ModelChoice.source``: the key; shown to the learner through tr)
SOURCES = (msg("local"), msg("kit"), msg("cache"), msg("hub"), msg("offline-build"))

@dataclass(frozen=True)
class ModelChoice:
    """Where a model comes from: ``path`` is what to pass to ``from_pretrained``."""

    path: str
    source: str  # "local", "kit", "cache", "hub" or "offline-build" (SOURCES)
    reason: str
    what: str = "model"

    @property
    def local_files_only(self) -> bool:
        return self.source != "hub"

    def __str__(self) -> str:
        what = tr(self.what)
        return f"{what[0].upper() + what[1:]}: {self.path} ({tr(self.source)}): {self.reason}"


def cached_snapshot(repo_id: str, marker: str = "config.json", needs_one_of: tuple[str, ...] = ()) -> Path | None:
    """The folder of ``repo_id`` in the Hugging Face cache if ``marker`` and one of ``needs_one_of`` are there.

    A half-finished download (a config without weights) does not count as cached.
    """
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, marker, cache_dir=hf_cache_dir())
    if not isinstance(found, str):
        return None
    if needs_one_of and not any(
        isinstance(try_to_load_from_cache(repo_id, f, cache_dir=hf_cache_dir()), str) for f in needs_one_of
    ):
        return None
    return Path(found).parent


def cached_model_ids() -> list[str]:
    """Model ids present in the Hugging Face cache (empty when there is no cache)."""
    root = hf_cache_dir()
    if not root.is_dir():
        return []
    return sorted(
        p.name[len("models--"):].replace("--", "/") for p in root.iterdir() if p.name.startswith("models--")
    )


def _not_found_message(name: str, what: str) -> str:
    cached = ", ".join(cached_model_ids()) or tr("none")
    return tr("{what} {name!r} is neither a local folder nor in the Hugging Face cache, and the Hub cannot be reached "
              "(offline). Allowed: a folder written by save_pretrained, a cached id (cached here: {cached}), or "
              "None for the workbook's own. Fix: on a machine with network run `hf download {name}` "
              "(or set HF_HUB_OFFLINE=0 when online), or pass the path of a local copy.", what=tr(what), name=name,
              cached=cached)


def resolve_checkpoint(
    name: str | None, *, default_id: str, marker: str, build_offline: Callable[[], Path], what: str, offline_desc: str,
    needs_one_of: tuple[str, ...] = (), kit_key: str | None = None,
) -> ModelChoice:
    """The resolution order of the module docstring, for any kind of checkpoint. Choosing never downloads
    (``from_pretrained`` on a ``hub`` choice does).

    ``marker`` is the file that proves a folder holds one (``config.json`` for a model,
    ``preprocessor_config.json`` for a processor), ``needs_one_of`` the files of which one must be there
    too (the weights); ``build_offline`` makes the workbook's own; ``kit_key`` names the offline kit's item
    that holds ``default_id`` (see ``kit.ITEMS``), looked up before the Hugging Face cache.
    """
    kit = kit_item(kit_key) if kit_key is not None and name is not None and str(name) == default_id else None
    if kit is not None:  # the course's own id, named: the kit's copy
        return ModelChoice(str(kit.path), "kit", tr("the course's {what} {reason}", what=tr(what), reason=kit.reason),
                           what)
    if name is not None:
        if not isinstance(name, (str, os.PathLike)) or not str(name).strip():
            raise TypeError(tr("name={name!r} must be a non-empty string (a folder or a Hub id) or None.", name=name))
        name = str(name)
        path = Path(name).expanduser()
        if path.is_dir():
            if not (path / marker).is_file():
                raise ValueError(
            tr("{what} folder {name!r} has no {marker}; allowed: a folder written by save_pretrained. "
                       "Fix: point to the folder that holds {marker}.", what=tr(what), name=name, marker=marker)
                )
            problem = damage(path)
            if problem:
                raise ValueError(tr("{what} folder {name!r} is damaged: {problem}. Fix: copy or save it again "
                                    "(save_pretrained), or pass another folder.", what=tr(what), name=name,
                                    problem=problem))
            return ModelChoice(str(path), "local", tr("you gave a local folder"), what)
        if name.startswith((".", "/", "~")) or not _HUB_ID.match(name):
            raise ValueError(
                tr("{what} {name!r} is not an existing folder and not a Hub id like '{default_id}' or "
                   "'owner/name'. Fix: check the spelling of the path, or pass a Hub id.", what=tr(what), name=name,
                   default_id=default_id)
            )
        snapshot = cached_snapshot(name, marker, needs_one_of)
        if snapshot is not None:
            return ModelChoice(str(snapshot), "cache", tr("{name} is in the Hugging Face cache", name=name), what)
        if hub_reachable():
            return ModelChoice(name, "hub", tr("{name} is not cached; the Hub is reachable, downloading it",
                                               name=name), what)
        raise ValueError(_not_found_message(name, what))
    rung = course_rung(kit_key, lambda: cached_snapshot(default_id, marker, needs_one_of))
    if rung.source == "kit":
        return ModelChoice(str(rung.found.path), "kit", tr("the course's {what} {reason}", what=tr(what),
                                                           reason=rung.found.reason), what)
    if rung.source == "cache":
        return ModelChoice(str(rung.found), "cache", tr("the course's {what} {name} is in the Hugging Face cache",
                                                        what=tr(what), name=default_id), what)
    if rung.source == "hub":
        return ModelChoice(default_id, "hub", tr("the course's {what}; the Hub is reachable", what=tr(what)), what)
    reason = tr("{name} is not cached and {why}: {instead}", name=default_id, why=rung.why_own,
                instead=tr(offline_desc))
    return ModelChoice(str(build_offline()), "offline-build", reason, what)


def choose_model(name: str | None = None) -> ModelChoice:
    """Decide which model checkpoint to load (see the module docstring for the order). Never downloads."""
    return resolve_checkpoint(
        name, default_id=DEFAULT_MODEL, marker="config.json", needs_one_of=WEIGHT_FILES,
        build_offline=build_offline_checkpoint, what=msg("model"), kit_key="model",
        offline_desc=msg("using the workbook's small DistilBERT (same architecture, random weights, its own "
                         "vocabulary)"),
    )


SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _train_vocabulary(vocab_size: int) -> dict[str, int]:
    """A cased WordPiece vocabulary learnt from the workbook's own sentences, the same on every machine.

    Frequency-based, like WordPiece training but without its tie-breaking by hash order (the
    ``tokenizers`` trainer gives a slightly different vocabulary on each run): special tokens, every
    character alone and as a continuation ``##c``, then the most frequent whole words, word starts and
    ``##`` word endings, ties broken alphabetically.
    """
    import string
    from collections import Counter

    from tokenizers.pre_tokenizers import BertPreTokenizer

    from effitrain_helpers.sources.corpus import corpus_sentences

    split = BertPreTokenizer().pre_tokenize_str
    words = Counter(w for text in corpus_sentences() for w, _ in split(text))
    pieces: Counter[str] = Counter()
    for word, count in words.items():
        pieces[word] += 2 * count  # whole words first
        for k in range(2, min(len(word), 6)):
            pieces[word[:k]] += count
            pieces["##" + word[-k:]] += count
    alphabet = sorted(set(string.ascii_letters + string.digits + string.punctuation) | set("".join(words)))
    vocab = SPECIAL_TOKENS + alphabet + ["##" + c for c in alphabet]
    ranked = sorted((p for p in pieces if p not in vocab), key=lambda p: (-pieces[p], p))
    vocab += ranked[: max(0, vocab_size - len(vocab))]
    return {token: i for i, token in enumerate(vocab)}


def _write_offline_checkpoint(folder: Path) -> None:
    import torch
    from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizer

    tokenizer = DistilBertTokenizer(vocab=_train_vocabulary(VOCAB_SIZE), do_lower_case=False, model_max_length=512)
    config = DistilBertConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **OFFLINE_MODEL)
    with torch.random.fork_rng(devices=[]):  # the caller's random state stays untouched
        torch.manual_seed(0)
        DistilBertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def offline_model_name() -> str:
    """Folder name of the offline checkpoint: changes whenever its text or its settings change."""
    import hashlib

    from effitrain_helpers.sources.corpus import corpus_sentences

    recipe = repr((corpus_sentences(), sorted(OFFLINE_MODEL.items()), VOCAB_SIZE, SPECIAL_TOKENS))
    return "distilbert-tiny-cased-" + hashlib.sha256(recipe.encode()).hexdigest()[:10]


def build_offline_checkpoint(force: bool = False) -> Path:
    """Build (once) and return the folder of the workbook's small DistilBERT checkpoint."""
    return build_once(f"models/{offline_model_name()}", _write_offline_checkpoint, "config.json", force)


def _model_choice(name) -> ModelChoice:
    """``name`` itself when it is a ``ModelChoice`` already made (the model is not resolved twice), else
    :func:`choose_model` of it."""
    return name if isinstance(name, ModelChoice) else choose_model(name)


def load_classifier(name: str | ModelChoice | None = None, num_labels: int = 2, verbose: bool = True):
    """Return ``(model, tokenizer)`` for sequence classification, loaded with ``from_pretrained``.

    ``name`` is what :func:`choose_model` takes, or the ``ModelChoice`` it returned. Prints one line saying
    which model was used and why; ``verbose=False`` prints nothing, not even the library's loading report (for
    code that runs in every process of a group).
    """
    positive_int("num_labels", num_labels, hint=msg("num_labels=2 for paraphrase / not"))
    choice = _model_choice(name)
    if verbose:
        print(choice)
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    if not verbose:  # no loading report or progress bars (the one line above says what was loaded)
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            choice.path, num_labels=num_labels, local_files_only=choice.local_files_only, trust_remote_code=False)
        tokenizer = load_tokenizer(choice)
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
    return model, tokenizer


def load_tokenizer(name: str | ModelChoice | None = None):
    """The tokenizer of the model :func:`load_classifier` would load, without loading the model's weights
    (for code that only tokenizes). Prints nothing."""
    from transformers import AutoTokenizer

    choice = _model_choice(name)
    return AutoTokenizer.from_pretrained(choice.path, local_files_only=choice.local_files_only, trust_remote_code=False)
