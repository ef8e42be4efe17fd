"""The communication counter, in a real 2-process group."""

import pytest

from effitrain_helpers.processes.launch import launch

pytestmark = pytest.mark.slow  # a real process group


def test_ddp_gradient_syncs_and_explicit_all_reduces_are_counted():
    def train():
        import torch
        import torch.distributed as dist

        from effitrain_helpers.measure.communication import CommunicationCounter

        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(10, 10))
        counter = CommunicationCounter().watch(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            if step == 2:
                with model.no_sync():  # a step without communication
                    model(torch.randn(3, 10)).sum().backward()
            else:
                model(torch.randn(3, 10)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            counter.step()
        dist.all_reduce(torch.zeros(100))
        counter.step()
        counter.stop()
        dist.all_reduce(torch.zeros(7))  # after stop: not counted
        return counter.summary()

    summaries = launch(train, num_processes=2, quiet=True)
    parameter_bytes = (10 * 10 + 10) * 4
    for s in summaries:
        assert s.steps == 5 and s.synchronised_steps == [1, 2, 4, 5] and s.synchronisations == 4
        assert s.bytes == 3 * parameter_bytes + 100 * 4
