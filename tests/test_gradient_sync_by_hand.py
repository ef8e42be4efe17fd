"""Data parallelism by hand, the engine lesson 6.2's exercise 4 is checked against
(:class:`~effitrain_helpers.engines.gradient_sync.OverlappedSync`), run in 2 real processes: frozen parameters and
tied weights train as DDP does, a parameter that got no gradient raises on every rank, and the buckets leave in
one fixed order whatever order their gradients arrive in (slow)."""

import pytest


class _Tied:
    """Embedding and output head sharing one weight, a frozen layer in between, and optionally a layer never
    used in forward."""

    def __new__(cls, unused=False):
        import torch

        class Tied(torch.nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.embed = torch.nn.Embedding(10, 6)
                self.frozen = torch.nn.Linear(6, 6)
                self.frozen.requires_grad_(False)
                self.middle = torch.nn.Linear(6, 6)
                self.head = torch.nn.Linear(6, 10, bias=False)
                self.head.weight = self.embed.weight  # tied
                self.spare = torch.nn.Linear(6, 6) if unused else None

            def forward(self, tokens):
                return self.head(torch.tanh(self.middle(self.frozen(self.embed(tokens)))))

        return Tied()


def _train(by_hand, unused=False, steps=3):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank = dist.get_rank()
    from effitrain_helpers.engines.gradient_sync import MissingGradientError, OverlappedSync

    model = _Tied(unused)
    if by_hand:
        sync, net = OverlappedSync(model, 64), model
    else:
        net = DistributedDataParallel(model)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        tokens = torch.randint(0, 10, (4, 3), generator=generator)
        loss = torch.nn.functional.cross_entropy(net(tokens).reshape(-1, 10), tokens.reshape(-1))
        loss.backward()
        if by_hand:
            try:
                sync.wait()
            except MissingGradientError as error:
                return str(error)
        optimizer.step()
        optimizer.zero_grad()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.slow
def test_frozen_and_tied_parameters_train_as_ddp_and_a_missing_gradient_is_named():
    from effitrain_helpers.processes.launch import launch

    ranks = launch(lambda: (_train(True), _train(False), _train(True, unused=True)),
                   num_processes=2, quiet=True, timeout=120)
    for hand, ddp, unused in ranks:
        assert hand.keys() == ddp.keys()
        assert max(float((hand[k] - ddp[k]).abs().max()) for k in hand) <= 1e-6
        assert "was never sent" in unused and "got no gradient" in unused, unused
    assert all(float((ranks[0][0][k] - ranks[1][0][k]).abs().max()) == 0 for k in ranks[0][0])


def _arrive():
    """Rank 1's gradients arrive in another order than rank 0's; returns the averaged gradients."""
    import torch
    import torch.distributed as dist

    from effitrain_helpers.engines.gradient_sync import OverlappedSync

    order = [3, 1, 0, 2] if dist.get_rank() else [0, 1, 2, 3]
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    sync = OverlappedSync(model, 1)  # one parameter per bucket
    for b in order:  # gradients "arrive" in this rank's order (what the hook of bucket b's parameter does)
        for p in sync.buckets[b]:
            p.grad = torch.full_like(p, float(dist.get_rank() + 1 + b))
        sync._arrived(b)
    sync.wait()
    return [float(p.grad.flatten()[0]) for bucket in sync.buckets for p in bucket]


@pytest.mark.slow
def test_buckets_leave_in_one_order_whatever_order_their_gradients_arrive_in():
    from effitrain_helpers.processes.launch import launch

    ranks = launch(_arrive, num_processes=2, quiet=True, timeout=120)
    for grads in ranks:  # bucket b summed with bucket b: arrival order would have paired bucket 3 with 0
        assert grads == [1.5 + b for b in range(4)]  # the average of rank 0's (1 + b) and rank 1's (2 + b)
