"""What every lesson run is built from: its settings (``TrainConfig``), its learning rate, its tokenized data,
and a fingerprint of the weights it ends with (chapters 2-4 share these; the loops themselves live in
``train``, ``ddp_checks``, ``scaling``, ``efficiency`` and ``optimizer_compare``)."""

from __future__ import annotations

from dataclasses import dataclass

from effitrain_helpers.core.language import tr
from effitrain_helpers.core.outputs import check_output_folder
from effitrain_helpers.core.validate import positive_int, positive_number, whole_number

SMALL_MODEL_LR = 1e-3  # the workbook's small model learns from random weights: bigger steps
PRETRAINED_LR = 5e-5  # a real pre-trained checkpoint: the usual fine-tuning rate


def learning_rate_hint() -> str:
    """The fix shown after a bad learning rate, in the learner's language."""
    return tr("pass e.g. {small:g} (the workbook's small model) or {pretrained:g} (a pre-trained DistilBERT)",
              small=SMALL_MODEL_LR, pretrained=PRETRAINED_LR)


@dataclass
class TrainConfig:
    """What to fine-tune, on what, and how. Bad values raise ``ValueError`` naming the value and the fix."""

    model: str | None = None  # a folder or Hub id; None: the course's model or the workbook's own
    data: str | None = None  # a local CSV/JSON file or folder in the MRPC layout; None: GLUE MRPC or the workbook's
    label_column: str = "label"
    n_train: int = 3000
    n_validation: int = 200
    batch_size: int = 16
    eval_batch_size: int = 64
    learning_rate: float | None = None  # None: 1e-3 for the workbook's small model, 5e-5 for a pre-trained one
    epochs: int = 2
    warmup_steps: int = 10
    max_length: int = 128
    seed: int = 0
    output_dir: str | None = None  # where rank 0 saves the fine-tuned model and tokenizer (None: not saved)

    def __post_init__(self) -> None:
        for name in ("n_train", "n_validation", "batch_size", "eval_batch_size", "epochs", "max_length"):
            setattr(self, name, positive_int(name, getattr(self, name), example=f"{name}={getattr(TrainConfig, name)}"))
        self.warmup_steps = whole_number("warmup_steps", self.warmup_steps, minimum=0, example="warmup_steps=10")
        if self.learning_rate is not None:
            self.learning_rate = positive_number("learning_rate", self.learning_rate, hint=learning_rate_hint())
        if self.output_dir is not None:  # before training: a model trained for nothing is lost at the end
            folder = check_output_folder(self.output_dir, "output_dir")
            if folder.is_dir() and any(folder.iterdir()):  # the rule of resume --checkpoints and editions --out
                raise ValueError(tr("output_dir {path!r} is not empty: a model saved there would replace what it "
                                    "holds (a model trained earlier, say), and nothing in it is overwritten. Fix: "
                                    "name a new or empty folder.", path=str(self.output_dir)))


def default_learning_rate(model_source: str) -> float:
    """The rate that suits a model from ``model_source`` (a ``ModelChoice.source``): :data:`SMALL_MODEL_LR` for
    the workbook's own (``offline-build``), :data:`PRETRAINED_LR` for a real pre-trained checkpoint."""
    return SMALL_MODEL_LR if model_source == "offline-build" else PRETRAINED_LR


def learning_rate(config: TrainConfig, choice=None) -> float:
    """``config.learning_rate``, or the rate that suits the model that will be loaded (see
    :func:`default_learning_rate`). Pass the ``ModelChoice`` already made to not resolve the model again."""
    from effitrain_helpers.sources.models import choose_model

    if config.learning_rate is not None:
        return config.learning_rate
    return default_learning_rate((choice or choose_model(config.model)).source)


def build_data(config: TrainConfig, tokenizer):
    """Tokenized train / validation splits with ``labels`` (and ``idx``), in torch format; checked first.

    Returns ``(data, DataChoice)``.
    """
    from effitrain_helpers.sources.pairs import load_pairs

    pairs, choice = load_pairs(config.data, n_train=config.n_train, n_validation=config.n_validation)
    for split, ds in pairs.items():
        if config.label_column not in ds.column_names:
            raise ValueError(tr(
                "label_column={label!r} is not a column of the {split} split (columns: {columns}). Fix: pass "
                "label_column= the name of the column holding 0/1 labels.",
                label=config.label_column, split=split, columns=ds.column_names))
    classes = sorted(set(pairs["train"][config.label_column]))
    if len(classes) < 2:
        raise ValueError(tr("the training split has only one class ({classes}); a classifier needs examples of "
                            "both. Fix: use data with paraphrases (1) and non-paraphrases (0).", classes=classes))

    def tokenize(batch):
        return tokenizer(batch["sentence1"], batch["sentence2"], truncation=True, max_length=config.max_length)

    data = pairs.map(tokenize, batched=True, remove_columns=["sentence1", "sentence2"])
    data = data.rename_column(config.label_column, "labels")
    data.set_format("torch", columns=["input_ids", "attention_mask", "labels", "idx"])
    return data, choice


def save_model(model, tokenizer, output_dir) -> None:
    """``save_pretrained`` of ``model`` and ``tokenizer`` into ``output_dir`` (new or empty), whole or not at all:
    written into a temporary folder beside it, then moved there, so a full disk leaves no ``config.json``
    without its weights. A failure is one ``OSError`` naming the folder."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    target = Path(output_dir).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        if target.is_dir():
            target.rmdir()  # empty (TrainConfig checked it): the rename below needs the name free
        os.replace(partial, target)
    except Exception as err:  # noqa: BLE001 - OSError, or safetensors' own SafetensorError on a full disk
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise OSError(tr("the model could not be saved to {path} ({reason}); nothing was left there. Fix: free "
                         "some space (or choose another --output-dir) and train again.", path=str(target),
                         reason=reason)) from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def weights_fingerprint(model) -> str:
    """A short hash of every parameter's bytes: equal fingerprints mean bit-identical weights."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]
