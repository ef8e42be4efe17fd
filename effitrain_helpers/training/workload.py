"""What does chapter 3 train on? The lesson model and fixed-length batches of sentence pairs (lessons 3.1-3.3).

Every batch is padded to the same length, so memory counts depend on the batch shape only, and the model has
dropout switched off, so runs with different techniques can be compared step by step. The checks and
helpers here are shared by chapter 3's measurement modules (``accumulation``, ``checkpointing``,
``techniques``, ``local_sgd``, ``precision``, ``efficiency``).
"""

from __future__ import annotations

from effitrain_helpers.core.language import tr
from effitrain_helpers.core.validate import positive_int


def check_steps(name: str, value, maximum: int | None = None) -> int:
    """``value`` as a whole number >= 1 (and <= ``maximum``), else ``ValueError`` naming ``name`` (e.g.
    ``gradient_accumulation_steps``)."""
    if name.endswith("_steps"):
        return positive_int(name, value, maximum=maximum, hint=tr("e.g. {call} (1 means off)", call=f"{name}=4"))
    return positive_int(name, value, maximum=maximum, example=f"{name}=4")


def lesson_rows(n: int, seq_len: int = 64, seed: int = 0) -> list[dict]:
    """``n`` tokenized sentence pairs, each padded (or cut) to exactly ``seq_len`` tokens, as a list of
    ``{"input_ids", "attention_mask", "labels"}`` tensors: a dataset that ``DataLoader`` (its default collate
    stacks them into batches) and ``Trainer`` accept as it is."""
    import datasets

    from effitrain_helpers.training.runs import TrainConfig, build_data

    check_steps("n", n)
    check_steps("seq_len", seq_len)
    tokenizer = lesson_tokenizer()
    bars = not datasets.utils.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # a second's tokenizing: no bar in the lessons' output
    try:
        # at least 64 pairs, so that both classes are present, then the first n
        data, _ = build_data(TrainConfig(n_train=max(n, 64), n_validation=1, max_length=seq_len, seed=seed),
                             tokenizer)
    finally:
        if bars:
            datasets.enable_progress_bars()
    rows = data["train"].select(range(n))
    encoded = tokenizer.pad({"input_ids": rows[:]["input_ids"]}, padding="max_length", max_length=seq_len,
                            return_tensors="pt")
    labels = rows.with_format("torch")[:]["labels"]
    return [{"input_ids": encoded["input_ids"][i], "attention_mask": encoded["attention_mask"][i],
             "labels": labels[i]} for i in range(n)]


def lesson_batches(n_batches: int, batch_size: int, seq_len: int = 64, seed: int = 0) -> list[dict]:
    """``n_batches`` batches of ``batch_size`` rows of :func:`lesson_rows` (the same rows every call, so memory
    counts depend on the batch shape only, and runs with different batch sizes see the same samples)."""
    import torch

    check_steps("n_batches", n_batches)
    check_steps("batch_size", batch_size)
    rows = lesson_rows(n_batches * batch_size, seq_len, seed)
    return [{key: torch.stack([row[key] for row in rows[i:i + batch_size]]) for key in rows[0]}
            for i in range(0, len(rows), batch_size)]


def lesson_model(seed: int = 0, dropout: float = 0.0):
    """The lesson model (the course's DistilBERT classifier, or the workbook's own offline), in training mode,
    with weights that depend only on ``seed`` and every dropout rate set to ``dropout``: off by default, since
    chapter 3 compares runs step by step, and dropout would draw different random masks for a batch and for its
    micro-batches; lesson 5.3 turns it on to show what a resume must restore."""
    import torch
    from transformers import set_seed

    from effitrain_helpers.sources.models import load_classifier

    if not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
        raise ValueError(tr("dropout must be a probability in [0, 1), got {dropout!r}. Fix: e.g. dropout=0.1.",
                            dropout=dropout))
    set_seed(seed)
    model, _ = load_classifier(verbose=False)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = float(dropout)
    for name in ("dropout", "attention_dropout", "seq_classif_dropout", "hidden_dropout_prob",
                 "attention_probs_dropout_prob"):
        if isinstance(getattr(model.config, name, None), float):
            setattr(model.config, name, float(dropout))  # attention kernels read the rate from the config
    return model.train()


def lesson_tokenizer():
    """The lesson model's tokenizer alone, without loading the model's weights (all :func:`lesson_rows` needs)."""
    from transformers import AutoTokenizer

    from effitrain_helpers.sources.models import choose_model

    choice = choose_model()
    return AutoTokenizer.from_pretrained(choice.path, local_files_only=choice.local_files_only)


def max_difference(state_a: dict, state_b: dict) -> float:
    """The largest absolute difference between two state dicts (or two models) with the same keys."""
    if hasattr(state_a, "state_dict"):
        state_a, state_b = state_a.state_dict(), state_b.state_dict()
    return max(float((state_a[k].detach().cpu().float() - state_b[k].detach().cpu().float()).abs().max())
               for k in state_a)


def split_batches(batches: list[dict], parts: int) -> list[dict]:
    """Each batch cut into ``parts`` equal micro-batches, in order (the batch size must divide evenly)."""
    check_steps("parts", parts)
    out = []
    for batch in batches:
        size = len(batch["labels"])
        if size % parts:
            raise ValueError(tr("a batch of {size} cannot be cut into {parts} equal micro-batches. Fix: use a batch "
                                "size that is a multiple of {parts}.", size=size, parts=parts))
        step = size // parts
        out += [{k: v[i:i + step] for k, v in batch.items()} for i in range(0, size, step)]
    return out
