"""The alpha-beta model of lesson 6.1 (measure/latency_bandwidth.py): the three algorithms' step counts, the
ring's bytes that stay below 2n while its latency grows with N, the crossover where ring and tree meet, the fit
through two sizes, and a real ping-pong in 2 processes (slow)."""

import math

import pytest

from effitrain_helpers.measure import latency_bandwidth as lb

ALPHA, BETA = 40e-6, 1 / 3e9


@pytest.mark.parametrize("world", [2, 3, 4, 8, 64, 1000])
def test_ring_tree_and_parameter_server_take_their_steps(world):
    n = 1e6
    assert lb.model_seconds("ring", n, world, ALPHA, BETA) == pytest.approx(
        2 * (world - 1) * ALPHA + 2 * (world - 1) / world * n * BETA)
    assert lb.model_seconds("tree", n, world, ALPHA, BETA) == pytest.approx(
        2 * math.ceil(math.log2(world)) * (ALPHA + n * BETA))
    assert lb.model_seconds("parameter server", n, world, ALPHA, BETA) == pytest.approx(
        2 * (world - 1) * (ALPHA + n * BETA))


def test_the_ring_bandwidth_term_is_bounded_but_its_latency_grows_with_n():
    bandwidth_only = [lb.model_seconds("ring", 1e6, n, 0.0, BETA) for n in (2, 8, 1000)]
    assert all(b < 2 * 1e6 * BETA for b in bandwidth_only)
    latency_only = [lb.model_seconds("ring", 1e6, n, ALPHA, 0.0) for n in (2, 8, 1000)]
    assert latency_only == sorted(latency_only) and latency_only[-1] == pytest.approx(1998 * ALPHA)


@pytest.mark.parametrize("world", [4, 8, 64, 1024])
def test_at_the_crossover_ring_and_tree_take_the_same_time_and_swap_around_it(world):
    cross = lb.crossover_bytes(world, ALPHA, BETA)
    ring, tree = (lb.model_seconds(a, cross, world, ALPHA, BETA) for a in ("ring", "tree"))
    assert ring == pytest.approx(tree)
    assert lb.model_seconds("ring", cross / 2, world, ALPHA, BETA) > lb.model_seconds("tree", cross / 2, world,
                                                                                       ALPHA, BETA)
    assert lb.model_seconds("ring", cross * 2, world, ALPHA, BETA) < lb.model_seconds("tree", cross * 2, world,
                                                                                       ALPHA, BETA)
    assert lb.crossover_bytes(2, ALPHA, BETA) == 0.0  # same steps: the ring always wins


def test_the_fit_goes_through_the_smallest_and_largest_message_and_names_bad_input():
    times = {8: ALPHA + 8 * BETA, 2**16: 3 * ALPHA, 2**22: ALPHA + 2**22 * BETA}
    assert lb.fit_alpha_beta(times) == pytest.approx((ALPHA, BETA))
    with pytest.raises(ValueError, match="at least 2 message sizes"):
        lb.fit_alpha_beta({8: 1e-5})
    with pytest.raises(ValueError, match="algorithm='star' is not one of"):
        lb.model_seconds("star", 1, 4, ALPHA, BETA)


@pytest.mark.slow
def test_ping_pong_in_two_processes_gives_a_positive_latency_and_bandwidth():
    from effitrain_helpers.processes.launch import launch

    times, rest = launch(lb.ping_pong, [8, 2**22], 20, num_processes=2, cpu=True, quiet=True, timeout=120)
    assert rest == {} and set(times) == {8, 2**22}  # 4 MB: far above the latency, even on a busy machine
    alpha, beta = lb.fit_alpha_beta(times)
    assert alpha > 0 and beta > 0
