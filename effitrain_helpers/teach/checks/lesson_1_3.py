"""Exercises of lesson 1.3 (preprocess text, place data on several devices)."""

from __future__ import annotations

import math

from effitrain_helpers.teach.exercises import Exercise, Incorrect


def _check_tokenize_fn(fn, split, tokenizer) -> None:
    if not callable(fn):
        raise Incorrect(f"pass your function itself; you gave {fn!r}.")
    rows = split.select(range(min(8, len(split))))
    out = rows.map(fn, batched=True, remove_columns=rows.column_names)
    if "input_ids" not in out.column_names:
        raise Incorrect(f"your function should return the tokenizer's output; the result has {out.column_names}.")
    for row, ids in zip(rows, out["input_ids"]):
        ids = list(ids)
        if len(ids) > 16:
            raise Incorrect(f"a pair became {len(ids)} tokens; pass truncation=True and max_length=16.")
        if ids.count(tokenizer.sep_token_id) != 2:
            raise Incorrect("each row should hold both sentences (two [SEP] tokens): pass sentence1 AND sentence2.")
        if ids != tokenizer(row["sentence1"], row["sentence2"], truncation=True, max_length=16)["input_ids"]:
            raise Incorrect("the tokens differ from tokenizer(sentence1, sentence2, truncation=True, max_length=16).")


def _check_prediction(answer) -> None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Incorrect(f"answer should be a pair (samples per rank, samples repeated); you gave {answer!r}.")
    per_rank, repeated = answer
    batches = math.ceil(10 / 2)  # 5 batches of 2
    want_per_rank = math.ceil(batches / 3) * 2  # every rank gets as many full batches as the busiest one
    if per_rank != want_per_rank:
        raise Incorrect(f"{per_rank!r} samples per rank is not it: 10 samples make 5 batches of 2; with even_batches "
                        "every one of the 3 ranks gets as many batches as the busiest one.")
    if repeated != want_per_rank * 3 - 10:
        raise Incorrect(f"{per_rank} per rank is right; how many samples do the 3 ranks receive in all, and how many "
                        "more than the 10 that exist?")


def _check_collator(collator, split) -> None:
    if not callable(collator):
        raise Incorrect(f"pass the collator itself; you gave {collator!r}.")
    for start in range(0, min(len(split), 40), 5):  # several batches, with different longest rows
        rows = [split[i] for i in range(start, min(start + 5, len(split)))]
        batch = collator(rows)
        length, longest = batch["input_ids"].shape[1], max(len(r["input_ids"]) for r in rows)
        if length != math.ceil(longest / 8) * 8:
            raise Incorrect(f"a batch whose longest row has {longest} tokens came out {length} long; expected "
                            f"{math.ceil(longest / 8) * 8}: pad dynamically (no max_length) with pad_to_multiple_of=8.")
        if "labels" not in batch:
            raise Incorrect("the batch has no 'labels': collate the tokenized split whose 'label' column was renamed.")


q1 = Exercise(
    "1.3 q1: shorter pairs",
    _check_tokenize_fn,
    usage='q1.check(tokenize_short, pairs["train"], tokenizer)',
    hints=["Start from `tokenize` above; change one argument.",
           "tokenizer(batch['sentence1'], batch['sentence2'], truncation=True, max_length=16)"],
    solution_code=(
        "def tokenize_short(batch):\n"
        "    return tokenizer(batch['sentence1'], batch['sentence2'], truncation=True, max_length=16)\n\n"
        "q1.check(tokenize_short, pairs['train'], tokenizer)"
    ),
)
q2 = Exercise(
    "1.3 q2: predict the shards",
    _check_prediction,
    usage="q2.check((per_rank, repeated))",
    hints=["10 samples in batches of 2 make 5 batches; 3 ranks take them in turn.",
           "With even_batches=True each rank gets 2 batches (4 samples): 12 samples for 10 that exist."],
    solution_code="per_rank, repeated = 4, 2\nq2.check((per_rank, repeated))",
)
q3 = Exercise(
    "1.3 q3: pad to a multiple of 8",
    _check_collator,
    usage='q3.check(collator_8, tokenized["train"])',
    hints=["GPU tensor cores are fastest when sizes are multiples of 8.",
           "DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)"],
    solution_code="collator_8 = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)\n"
    "q3.check(collator_8, tokenized['train'])",
)
