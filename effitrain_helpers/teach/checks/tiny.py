"""A tiny model and data for checkers that run the learner's training loop for real (lessons 2.2, 3.1, 3.2): a
linear regression answering ``model(**batch).loss`` like a Hugging Face model, fast enough to train in 2
processes within seconds, and a watch on its backward passes."""

from __future__ import annotations


class TinyOutput:
    """What a Hugging Face model returns, as far as a training loop needs it: ``.loss``."""

    def __init__(self, loss):
        self.loss = loss


def tiny_model(seed: int = 0):
    """A ``Linear(3, 1)`` regression that answers ``model(inputs=..., labels=...).loss``; weights from ``seed``."""
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 1)

        def forward(self, inputs, labels):
            return TinyOutput(torch.nn.functional.mse_loss(self.linear(inputs).squeeze(-1), labels))

    torch.manual_seed(seed)
    return Tiny()


def tiny_rows(n: int) -> list[dict]:
    """``n`` rows ``{"inputs", "labels"}`` for :func:`tiny_model`, the same every call."""
    import torch

    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(n, 3, generator=generator), torch.randn(n, generator=generator)
    return [{"inputs": x[i], "labels": y[i]} for i in range(n)]


def watch_stale_gradients(model) -> list[bool]:
    """A list that gets, for every backward pass of ``model(...).loss``, whether it began with a gradient already
    in one of the parameters: an earlier batch's, left there when ``optimizer.zero_grad()`` is left out. The
    loss's own gradient hook runs first in its backward, before any parameter's gradient is touched."""
    stale: list[bool] = []

    def watch(module, args, output):
        output.loss.register_hook(lambda grad: stale.append(any(
            p.grad is not None and bool(p.grad.any()) for p in module.parameters())))

    model.register_forward_hook(watch)
    return stale
