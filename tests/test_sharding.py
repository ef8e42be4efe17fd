import pytest

from effitrain_helpers.processes.sharding import summarize_shards, validate_request


def test_summary_of_disjoint_covering_shards():
    s = summarize_shards([{"indices": [0, 2, 4]}, {"indices": [1, 3]}], 5)
    assert (s.world_size, s.per_rank, s.disjoint, s.covers_all, s.repeated, s.missing) == (2, [3, 2], True, True, [], [])


def test_summary_finds_repeats_and_gaps():
    s = summarize_shards([{"indices": [0, 1]}, {"indices": [1, 3]}], 5)
    assert not s.disjoint and not s.covers_all and s.repeated == [1] and s.missing == [2, 4]


@pytest.mark.parametrize("samples, batch", [(0, 2), (5, 0), (-1, 2), (2.5, 2), (True, 2), (5, 6), (10**9, 2)])
def test_bad_requests(samples, batch):
    with pytest.raises(ValueError, match="must be a whole number from 1 to"):
        validate_request(samples, batch)
