"""The fine-tuning of chapter 2: a plain PyTorch loop, the same loop with Accelerate, and their evaluation.

Lesson 2.2 writes its own two loops in notebook cells (the plain one, then the Accelerate one with the changed
lines marked); the loops here are the same, for the script below, lesson 2.3's training and the tests
(``train_plain`` is their one-process reference). Lesson 2.3 writes ``evaluate`` out in a cell. The module is
also a script that runs unchanged on one machine or many::

    python -m effitrain_helpers.training.train --epochs 2                     # one process
    torchrun --nproc_per_node 2 -m effitrain_helpers.training.train --json    # N processes (CPU or one GPU each)
    accelerate launch -m effitrain_helpers.training.train --json
    torchrun --nnodes 2 --node_rank R --master_addr HOST --nproc_per_node 8 -m effitrain_helpers.training.train

Every rank reports a fingerprint of its final weights; rank 0 prints whether they are identical. The run's
settings, data and fingerprint come from ``runs`` and the CPU-group question from ``processes.group`` (chapters
3 and 4 use them too); this module holds only chapter 2's loops and evaluation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict

from effitrain_helpers.processes.group import cpu_group_requested
from effitrain_helpers.training.runs import TrainConfig, build_data, learning_rate, save_model, weights_fingerprint
from effitrain_helpers.core.arguments import OneLineParser, not_empty
from effitrain_helpers.core.language import msg, tr


def preflight(config: TrainConfig, num_processes: int = 1):
    """Check config, data and process count in this process, before any process starts; returns the data."""
    from effitrain_helpers.processes.launch import resolve_num_processes
    from effitrain_helpers.sources.models import load_tokenizer

    resolve_num_processes(num_processes)
    tokenizer = load_tokenizer(config.model)
    data, choice = build_data(config, tokenizer)
    for split in ("train", "validation"):
        if len(data[split]) < num_processes:
            raise ValueError(tr(
                "{n} processes but only {samples} {split} samples: some processes would get nothing. Fix: use at "
                "most {samples} processes, or more samples.", n=num_processes, samples=len(data[split]), split=split
            ))
    return data, choice


def make_loaders(data, tokenizer, config: TrainConfig):
    """Training loader (shuffled, dynamic padding) and evaluation loader, without the ``idx`` column."""
    from torch.utils.data import DataLoader
    from transformers import DataCollatorWithPadding

    collator = DataCollatorWithPadding(tokenizer)
    columns = ["input_ids", "attention_mask", "labels"]
    train = DataLoader(data["train"].with_format("torch", columns=columns), batch_size=config.batch_size,
                       shuffle=True, collate_fn=collator)
    evaluation = DataLoader(data["validation"].with_format("torch", columns=columns),
                            batch_size=config.eval_batch_size, collate_fn=collator)
    return train, evaluation


def evaluate_plain(model, loader, device) -> dict[str, float]:
    """Accuracy and F1 of ``model`` on ``loader`` in one process."""
    import torch

    from effitrain_helpers.measure.metrics import accuracy_f1

    model.eval()
    predictions, labels = [], []
    with torch.no_grad():
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            logits = model(**batch).logits
            predictions.append(logits.argmax(-1))
            labels.append(batch["labels"])
    return accuracy_f1(torch.cat(predictions), torch.cat(labels))


def evaluate(model, loader, accelerator, drop_repeats: bool = True) -> dict[str, float]:
    """Accuracy and F1 over the whole validation set, whatever the number of processes (lesson 2.3).

    ``gather_for_metrics`` collects every process's predictions and drops the samples Accelerate repeated to
    even out the last batch, so each sample counts exactly once. ``drop_repeats=False`` uses plain
    ``gather`` instead, to show what goes wrong.
    """
    import torch

    from effitrain_helpers.measure.metrics import accuracy_f1

    model.eval()
    predictions, labels = [], []
    with torch.no_grad():
        for batch in loader:
            logits = model(**batch).logits
            gather = accelerator.gather_for_metrics if drop_repeats else accelerator.gather
            batch_predictions, batch_labels = gather((logits.argmax(-1), batch["labels"]))
            predictions.append(batch_predictions)
            labels.append(batch_labels)
    predictions, labels = torch.cat(predictions), torch.cat(labels)
    return {**accuracy_f1(predictions, labels), "n_evaluated": len(labels)}


def train_plain(config: TrainConfig) -> dict:
    """Lesson 2.2, before: plain PyTorch, everything moved to the device by hand."""
    import torch
    from transformers import get_linear_schedule_with_warmup, set_seed

    from effitrain_helpers.sources.models import choose_model, load_classifier

    set_seed(config.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    choice = choose_model(config.model)
    model, tokenizer = load_classifier(choice, verbose=False)
    data, _ = build_data(config, tokenizer)
    train_loader, eval_loader = make_loaders(data, tokenizer, config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate(config, choice))
    scheduler = get_linear_schedule_with_warmup(optimizer, config.warmup_steps, config.epochs * len(train_loader))
    model.to(device)
    history, start = [], time.perf_counter()
    for epoch in range(config.epochs):
        model.train()
        losses = []
        for batch in train_loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        history.append({"epoch": epoch + 1, "train_loss": sum(losses) / len(losses),
                        **evaluate_plain(model, eval_loader, device)})
    seconds = time.perf_counter() - start
    if config.output_dir:
        save_model(model, tokenizer, config.output_dir)
    return {"history": history, "seconds": seconds, "world_size": 1,
            "rank": 0, "samples_per_second": config.epochs * len(data["train"]) / seconds,
            "fingerprint": weights_fingerprint(model)}


def train_accelerate(config: TrainConfig) -> dict:
    """Lesson 2.2, after: the same loop with Accelerate; runs unchanged in 1 or N processes."""
    import torch
    from accelerate import Accelerator
    from transformers import get_linear_schedule_with_warmup, set_seed

    from effitrain_helpers.sources.models import choose_model, load_classifier

    set_seed(config.seed)
    accelerator = Accelerator(cpu=cpu_group_requested())
    choice = choose_model(config.model)
    model, tokenizer = load_classifier(choice, verbose=False)
    data, _ = build_data(config, tokenizer)
    train_loader, eval_loader = make_loaders(data, tokenizer, config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate(config, choice))
    scheduler = get_linear_schedule_with_warmup(optimizer, config.warmup_steps, config.epochs * len(train_loader))
    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler)
    history, start, samples_seen = [], time.perf_counter(), 0
    for epoch in range(config.epochs):
        model.train()
        losses = []
        for batch in train_loader:
            samples_seen += len(batch["labels"])
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        history.append({"epoch": epoch + 1, "train_loss": sum(losses) / len(losses),
                        **evaluate(model, eval_loader, accelerator)})
    seconds = time.perf_counter() - start
    if config.output_dir:
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            save_model(accelerator.unwrap_model(model), tokenizer, config.output_dir)
    return {"history": history, "seconds": seconds, "world_size": accelerator.num_processes,
            "rank": accelerator.process_index, "samples_per_second": config.epochs * len(data["train"]) / seconds,
            "samples_seen": samples_seen, "fingerprint": weights_fingerprint(accelerator.unwrap_model(model))}


def where_this_rank_runs() -> dict:
    """This rank's place as torchrun set it (``GROUP_RANK``: its node, ``LOCAL_RANK``) and the address it
    reaches the rendezvous host from: the source address the kernel picks to reach ``MASTER_ADDR`` (a UDP
    ``connect`` sends no packet), so two nodes on two interfaces show two addresses."""
    import os
    import socket

    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((master, 9))
            address = probe.getsockname()[0]
        except OSError:
            address = None
    return {"node": int(os.environ.get("GROUP_RANK", 0)), "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
            "master_addr": master, "address": address}


def evaluate_checkpoint(path: str, n_validation: int = 200, eval_batch_size: int = 64, drop_repeats: bool = True) -> dict:
    """Lesson 2.3: evaluate a saved model on the first ``n_validation`` pairs, in this process's share."""
    from accelerate import Accelerator

    from effitrain_helpers.sources.models import load_classifier

    accelerator = Accelerator(cpu=cpu_group_requested())
    config = TrainConfig(model=path, n_train=20, n_validation=n_validation, eval_batch_size=eval_batch_size)
    model, tokenizer = load_classifier(path, verbose=False)
    data, _ = build_data(config, tokenizer)
    _, eval_loader = make_loaders(data, tokenizer, config)
    model, eval_loader = accelerator.prepare(model, eval_loader)
    return {"rank": accelerator.process_index, "world_size": accelerator.num_processes,
            "batches_here": len(eval_loader), **evaluate(model, eval_loader, accelerator, drop_repeats)}


OPTION_HELP = {  # one line per TrainConfig field, shown by `effitrain train --help` in the learner's language
    "model": msg("a model folder or Hub id (default: the course's model, or the workbook's own when offline)"),
    "data": msg("a CSV/JSON file or folder in GLUE MRPC's layout (default: GLUE MRPC, or the workbook's own pairs)"),
    "label_column": msg("the data's label column (default: %(default)s)"),
    "n_train": msg("training pairs used (default: %(default)s)"),
    "n_validation": msg("validation pairs evaluated (default: %(default)s)"),
    "batch_size": msg("pairs per batch in each process (default: %(default)s)"),
    "eval_batch_size": msg("pairs per evaluation batch (default: %(default)s)"),
    "learning_rate": msg("peak learning rate (default: 1e-3 for the workbook's small model, 5e-5 for a "
                         "pre-trained one)"),
    "epochs": msg("passes over the training pairs (default: %(default)s)"),
    "warmup_steps": msg("steps of linear warm-up before the linear decay (default: %(default)s)"),
    "max_length": msg("tokens per pair at most (default: %(default)s)"),
    "seed": msg("random seed of weights and data order (default: %(default)s)"),
    "output_dir": msg("an empty or new folder where rank 0 saves the fine-tuned model (default: not saved)"),
}


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="effitrain train", description="The fine-tuning of chapter 2: a plain PyTorch loop, "
                                                                 "the same loop with Accelerate, and their evaluation.")
    for name, value in asdict(TrainConfig()).items():
        kind = float if name == "learning_rate" else int if isinstance(value, int) else str  # other None defaults: str
        kind = not_empty("--model") if name == "model" else kind
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=value, dest=name,
                            help=OPTION_HELP[name])
    parser.add_argument("--json", action="store_true", help="rank 0 prints one JSON summary")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Script entry point (``python -m effitrain_helpers.training.train``, ``torchrun``, ``accelerate launch``)."""
    import torch
    from accelerate.utils import gather_object

    args = _parser().parse_args(argv)
    options = {k: v for k, v in vars(args).items() if k != "json"}
    try:
        config = TrainConfig(**options)
    except ValueError as err:
        print(f"effitrain train: error: {err}", file=sys.stderr)
        return 2
    try:
        result = train_accelerate(config)
        ranks = gather_object([{"rank": result["rank"], **where_this_rank_runs(),
                                "samples_seen": result["samples_seen"], "fingerprint": result["fingerprint"]}])
        fingerprints = [rank["fingerprint"] for rank in ranks]
    except (ValueError, OSError) as err:  # bad data or model files: said before any step runs
        print(f"effitrain train: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback (nothing was saved)
        print(tr("effitrain train: interrupted"), file=sys.stderr)
        return 130
    finally:
        # leave the process group, as every script should (on GPUs, NCCL warns when a group is not destroyed)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    if result["rank"] == 0:
        summary = {"world_size": result["world_size"], "history": result["history"],
                   "samples_per_second": result["samples_per_second"], "fingerprints": fingerprints, "ranks": ranks,
                   "identical_weights": len(set(fingerprints)) == 1}
        if args.json:
            print(json.dumps(summary))
        else:
            for row in result["history"]:
                print(tr("epoch {epoch}: train loss {loss:.3f}, validation accuracy {accuracy:.3f}, F1 {f1:.3f}",
                         epoch=row["epoch"], loss=row["train_loss"], accuracy=row["accuracy"], f1=row["f1"]))
            print(tr("{n} process(es); final weights identical on every rank: {identical}", n=summary["world_size"],
                     identical=tr("yes") if summary["identical_weights"] else tr("no")))
    return 0


if __name__ == "__main__":
    from effitrain_helpers.processes.ending import exit_without_teardown

    exit_without_teardown(main())
