"""Exercises of lesson 2.3 (evaluate with Accelerator; scaling)."""

from __future__ import annotations

import math

from effitrain_helpers.teach.exercises import Exercise, Incorrect, Spy, as_number


def _check_eval_fn(fn) -> None:
    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, TensorDataset

    if not callable(fn):
        raise Incorrect(f"pass your function itself; you gave {fn!r}.")
    torch.manual_seed(0)
    x, y = torch.randn(37, 4), torch.randint(0, 2, (37,))

    class Tiny(torch.nn.Module):  # answers like a Hugging Face model: an object with .logits
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, inputs, labels=None):
            return type("Out", (), {"logits": self.linear(inputs)})()

    model = Tiny()
    want = float((model(x).logits.argmax(-1) == y).float().mean())
    spy = Spy(Accelerator(), watch=("gather", "gather_for_metrics"))
    loader = DataLoader(TensorDataset(x, y), batch_size=8, collate_fn=lambda rows: {
        "inputs": torch.stack([r[0] for r in rows]), "labels": torch.stack([r[1] for r in rows])})
    model, loader = spy.prepare(model, loader)
    got = as_number(fn(model, loader, spy))
    if "gather_for_metrics" not in spy.calls:
        raise Incorrect("gather the predictions with accelerator.gather_for_metrics: plain gather counts the samples "
                        "repeated at the end of an uneven split twice." if "gather" in spy.calls else
                        "your function never gathers across processes: call accelerator.gather_for_metrics.")
    if model.training:
        raise Incorrect("switch the model to evaluation mode with model.eval() (dropout off).")
    if not math.isclose(got, want, abs_tol=1e-6):
        raise Incorrect(f"your accuracy is {got:.4f}; the model's true accuracy on these 37 samples is {want:.4f}.")


def _check_ideal_speedups(answer) -> None:
    n = 4
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Incorrect(f"answer should be a pair (one shared CPU, N GPUs); you gave {answer!r}.")
    cpu, gpu = (as_number(a) for a in answer)
    if math.isclose(cpu, n):
        raise Incorrect(f"on one CPU the {n} processes share the same cores: each has 1/{n} of the compute.")
    if not math.isclose(cpu, 1.0):
        raise Incorrect(f"{cpu} is not it: the total compute of one CPU does not grow with the number of processes.")
    if not math.isclose(gpu, n):
        raise Incorrect(f"{gpu} is not it: with one GPU per process, each process brings its own compute.")


def _check_ring_bytes(answer, gradient_mib) -> None:
    n = 4
    gradient_mib = as_number(gradient_mib)
    got = as_number(answer)
    want = 2 * (n - 1) / n * gradient_mib
    if math.isclose(got, want, rel_tol=1e-3):
        return
    if math.isclose(got, gradient_mib * (n - 1), rel_tol=1e-3):
        raise Incorrect("that is sending the whole gradient to every other process; a ring splits it into N chunks.")
    if math.isclose(got, (n - 1) / n * gradient_mib, rel_tol=1e-3):
        raise Incorrect("that is one of the two phases (reduce-scatter); the all-gather phase sends as much again.")
    if not math.isclose(got, want, rel_tol=1e-3):
        raise Incorrect(f"{got:.3f} MiB is not it: ring all-reduce sends 2 (N-1)/N of the gradient per process.")


q1 = Exercise(
    "2.3 q1: an evaluation loop",
    _check_eval_fn,
    usage="q1.check(my_accuracy)",
    hints=["model.eval(), then a loop over the loader inside `with torch.no_grad():`.",
           "For each batch: predictions = model(**batch).logits.argmax(-1); then "
           "accelerator.gather_for_metrics((predictions, batch['labels'])); at the end, the mean of the matches."],
    solution_code=(
        "def my_accuracy(model, loader, accelerator):\n    model.eval()\n    correct, total = 0, 0\n"
        "    with torch.no_grad():\n        for batch in loader:\n"
        "            predictions = model(**batch).logits.argmax(-1)\n"
        "            predictions, labels = accelerator.gather_for_metrics((predictions, batch['labels']))\n"
        "            correct += int((predictions == labels).sum())\n            total += len(labels)\n"
        "    return correct / total\n\nq1.check(my_accuracy)"
    ),
)
q2 = Exercise(
    "2.3 q2: ideal speedups",
    _check_ideal_speedups,
    usage="q2.check((on_one_cpu, on_4_gpus))",
    hints=["Speedup = time with one process / time with N, if communication were free.",
           "Sharing one CPU's cores gives nothing extra; N GPUs give N times the compute."],
    solution_code="on_one_cpu, on_4_gpus = 1.0, 4.0\nq2.check((on_one_cpu, on_4_gpus))",
)
q3 = Exercise(
    "2.3 q3: what a ring all-reduce sends",
    _check_ring_bytes,
    usage='q3.check(mib_sent, scaling_n["gradient_mib"])',
    hints=["A ring all-reduce has two phases, reduce-scatter then all-gather.",
           "In each phase a process sends (N-1) chunks of 1/N of the gradient: 2 (N-1)/N x gradient size in all."],
    solution_code='mib_sent = 2 * (4 - 1) / 4 * scaling_n["gradient_mib"]\nq3.check(mib_sent, scaling_n["gradient_mib"])',
)
