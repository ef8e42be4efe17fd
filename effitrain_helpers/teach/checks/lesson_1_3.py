"""Exercises of lesson 1.3 (preprocess text, place data on several devices): q1 and q3 call the tokenizer
and the collator, q4 runs the learner's `accelerator.prepare(DataLoader(...))` in 2 real processes and checks
the shards; q2 predicts what `even_batches` does."""

from __future__ import annotations

import math

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect


def _check_tokenize_fn(fn, split, tokenizer) -> None:
    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    rows = split.select(range(min(8, len(split))))
    out = rows.map(fn, batched=True, remove_columns=rows.column_names)
    if "input_ids" not in out.column_names:
        raise Incorrect(tr("your function should return the tokenizer's output; the result has {column_names}.",
                           column_names=out.column_names))
    for row, ids in zip(rows, out["input_ids"]):
        ids = list(ids)
        if len(ids) > 16:
            raise Incorrect(tr("a pair became {count} tokens; pass truncation=True and max_length=16.",
                               count=len(ids)))
        if ids.count(tokenizer.sep_token_id) != 2:
            raise Incorrect(tr("each row should hold both sentences (two [SEP] tokens): pass sentence1 AND "
                               "sentence2."))
        if ids != tokenizer(row["sentence1"], row["sentence2"], truncation=True, max_length=16)["input_ids"]:
            raise Incorrect(tr("the tokens differ from tokenizer(sentence1, sentence2, truncation=True, "
                               "max_length=16)."))


def _check_prediction(answer) -> None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Incorrect(tr("answer should be a pair (samples per rank, samples repeated); you gave {answer!r}.",
                           answer=answer))
    per_rank, repeated = answer
    batches = math.ceil(10 / 2)  # 5 batches of 2
    want_per_rank = math.ceil(batches / 3) * 2  # every rank gets as many full batches as the busiest one
    if per_rank == math.ceil(batches / 3):
        raise Incorrect(tr("{per_rank!r} is how many batches each rank gets; the answer counts samples, and a batch "
                           "holds 2.", per_rank=per_rank))
    if per_rank != want_per_rank:
        raise Incorrect(tr("{per_rank!r} samples per rank is not it: 10 samples make 5 batches of 2; with "
                           "even_batches every one of the 3 ranks gets as many batches as the busiest one.",
                           per_rank=per_rank))
    if repeated == want_per_rank * 3:
        raise Incorrect(tr("{repeated!r} is how many samples the 3 ranks receive in all; the second number is how "
                           "many of them are repeats, beyond the 10 that exist.", repeated=repeated))
    if repeated != want_per_rank * 3 - 10:
        raise Incorrect(tr("{per_rank} per rank is right; how many samples do the 3 ranks receive in all, and "
                           "how many more than the 10 that exist?", per_rank=per_rank))


def _check_collator(collator, split) -> None:
    """Correct when every batch of ``split`` comes out as long as its longest row rounded up to a multiple of 8
    and carries 'labels'; names the usual mistakes: no rounding, padding to a fixed length, another multiple."""
    if not callable(collator):
        raise Incorrect(tr("pass the collator itself; you gave {collator!r}.", collator=collator))
    groups = [[split[i] for i in range(start, min(start + 5, len(split)))]
              for start in range(0, min(len(split), 40), 5)]  # several batches, with different longest rows
    batches = [collator(rows) for rows in groups]
    if any("labels" not in batch for batch in batches):
        raise Incorrect(tr("the batch has no 'labels': collate the tokenized split whose 'label' column was "
                           "renamed."))
    longest = [max(len(row["input_ids"]) for row in rows) for rows in groups]
    lengths = [batch["input_ids"].shape[1] for batch in batches]
    expected = [math.ceil(n / 8) * 8 for n in longest]
    if lengths == expected:
        return
    if lengths == longest:
        raise Incorrect(tr("each batch came out exactly as long as its longest row (the first: {length} tokens): "
                           "padded dynamically but not rounded up; pass pad_to_multiple_of=8.",
                           length=lengths[0]))
    if len(set(lengths)) == 1 < len(set(expected)):
        raise Incorrect(tr("every batch came out {length} long whatever its rows: that is padding to a fixed "
                           "max_length; pad dynamically (no padding='max_length', no max_length) with "
                           "pad_to_multiple_of=8.", length=lengths[0]))
    i = next(i for i, (got, want) in enumerate(zip(lengths, expected)) if got != want)
    raise Incorrect(tr("a batch whose longest row has {longest} tokens came out {length} long; expected "
                       "{expected}: pad dynamically (no max_length) with pad_to_multiple_of=8.",
                       longest=longest[i], length=lengths[i], expected=expected[i]))


def _check_sharded_loader(fn, dataset, collate_fn) -> None:
    """Launch the learner's ``fn(dataset, collate_fn)`` in 2 real processes; each returns the ``idx`` it read.

    Correct when the two shards are disjoint, together hold every sample, and follow ``accelerator.prepare``'s
    split (batch b of 2 goes to rank b % 2)."""
    from effitrain_helpers.processes.launch import launch

    if not callable(fn):
        raise Incorrect(tr("pass your function itself (no parentheses); you gave {fn!r}.", fn=fn))
    ids = [int(i) for i in dataset.with_format(None)["idx"]]
    if len(ids) % 4:
        raise Incorrect(tr("check it on a dataset of a multiple of 4 samples (2 processes x batches of 2); this "
                           "one has {count}.", count=len(ids)))
    shards = launch(fn, dataset, collate_fn, num_processes=2, quiet=True)
    for rank, shard in enumerate(shards):
        if not isinstance(shard, (list, tuple)) or not all(isinstance(i, int) for i in shard):
            raise Incorrect(tr("rank {rank} returned {shard!r:.60}; return the list of `idx` values it read "
                               "(ints: batch['idx'].tolist()).", rank=rank, shard=shard))
    first, second = (set(s) for s in shards)
    if sorted(shards[0]) == sorted(shards[1]) == sorted(ids):
        raise Incorrect(tr("both processes read all {count} samples: a plain DataLoader is not sharded. Hand it "
                           "to accelerator.prepare and iterate over the loader prepare returns (calling prepare "
                           "and keeping the DataLoader you passed in does not shard it).", count=len(ids)))
    if first & second:
        raise Incorrect(tr("samples {overlap} were read by both processes: the shards overlap.",
                           overlap=sorted(first & second)[:6]))
    if first | second != set(ids):
        raise Incorrect(tr("samples {missing} were read by no process: together the shards must cover the dataset.",
                           missing=sorted(set(ids) - first - second)[:6]))
    batches = [ids[k:k + 2] for k in range(0, len(ids), 2)]
    want = [[i for b in batches[rank::2] for i in b] for rank in (0, 1)]
    if [list(s) for s in shards] != want:
        raise Incorrect(tr("disjoint and complete, but not the split accelerator.prepare makes (rank k reads "
                           "batches k, k + 2, ... of size 2): use DataLoader(..., batch_size=2) and prepare it."))


q1 = Exercise(
    "1.3 q1: shorter pairs",
    _check_tokenize_fn,
    usage='q1.check(tokenize_short, pairs["train"], tokenizer)',
    api=True,
    checked=("checked: both sentences of each pair in one row, truncated to the exercise's length."),
    hints=["Start from `tokenize` above; change one argument.",
           "The tokenizer takes the two sentences as a pair (`text`, `text_pair`) and cuts with `truncation=True` "
           "and `max_length=` (transformers docs, 'Tokenizer', `__call__`).",
           "Keep `tokenize`'s call as it is and change only how long a pair may be: the exercise's length, "
           "counted over both sentences together, with cutting turned on."],
    solution_code=(
        "def tokenize_short(batch):\n"
        "    return tokenizer(batch[\"sentence1\"], batch[\"sentence2\"], truncation=True, max_length=16)\n\n"
        "q1.check(tokenize_short, pairs[\"train\"], tokenizer)"
    ),
)
q2 = Exercise(
    "1.3 q2: predict the shards",
    _check_prediction,
    usage="q2.check((per_rank, repeated))",
    hints=["10 samples in batches of 2 make 5 batches; 3 ranks take them in turn.",
           "With `even_batches=True` (the default of `DataLoaderConfiguration`, accelerate docs) every rank gets "
           "as many batches as the busiest one, refilled from the start of the dataset.",
           "per_rank = (batches of the busiest rank) x 2; repeated = 3 x per_rank - ____"],
    solution_code="per_rank, repeated = 4, 2\nq2.check((per_rank, repeated))",
)
q3 = Exercise(
    "1.3 q3: pad to a multiple of 8",
    _check_collator,
    usage='q3.check(collator_8, tokenized["train"])',
    api=True,
    checked=("checked: every batch padded dynamically, to a multiple of 8."),
    hints=["GPU tensor cores are fastest when sizes are multiples of 8.",
           "`DataCollatorWithPadding` pads each batch to its longest row; one of its arguments rounds that "
           "length up (transformers docs, 'Data Collator').",
           "Make the collator with the tokenizer as `collator` above does, adding the argument of hint 2 with"
           " the multiple the exercise asks for."],
    solution_code="collator_8 = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)\n"
    "q3.check(collator_8, tokenized[\"train\"])",
)
q4 = Exercise(
    "1.3 q4: shard a data loader in 2 processes",
    _check_sharded_loader,
    usage='q4.check(my_shard, tokenized["validation"].select(range(12)), collator)',
    api=True,
    checked=("checked in 2 real processes: the shards are disjoint, hold every sample together and follow "
             "accelerator.prepare's split."),
    hints=["Each process must read a different part of the data; the object that knows this process's rank and "
           "the world size comes from accelerate, made inside the function (each process makes its own).",
           "That object's `prepare(...)` takes a `DataLoader` and returns the loader to iterate in this process "
           "(accelerate docs, 'prepare'); `who_got_what` above does it with more options.",
           "Make the Accelerator inside the function; wrap the dataset in a DataLoader with the exercise's "
           "batch size and the collator you were given, pass it through prepare, and list the 'idx' of every "
           "batch this process receives."],
    solution_code=(
        "def my_shard(dataset, collate_fn):\n"
        "    from accelerate import Accelerator\n"
        "    from torch.utils.data import DataLoader\n\n"
        "    accelerator = Accelerator()\n"
        "    loader = accelerator.prepare(DataLoader(dataset, batch_size=2, collate_fn=collate_fn))\n"
        "    return [i for batch in loader for i in batch[\"idx\"].tolist()]\n\n"
        "q4.check(my_shard, tokenized[\"validation\"].select(range(12)), collator)"
    ),
)
