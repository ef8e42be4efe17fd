"""Ring vs gloo vs parameter server (lesson 6.1's measurement and ``effitrain collectives``): the theory, bad
input in this process, and one real run through the command line (slow)."""

import json
import os
import subprocess
import sys

import pytest

from effitrain_helpers.cli import main
from effitrain_helpers.measure.all_reduce_cost import parse_lengths, theory_bytes_sent


def test_theory_bytes_per_rank():
    assert theory_bytes_sent("ring", 1200, 3, 1) == pytest.approx(1600)  # 2(N-1)/N
    assert theory_bytes_sent("gloo all_reduce", 1000, 2, 0) == pytest.approx(1000)
    assert theory_bytes_sent("parameter server", 1200, 3, 0) == 2400  # N-1 times the tensor
    assert theory_bytes_sent("parameter server", 1200, 3, 2) == 1200
    with pytest.raises(ValueError, match="tree"):
        theory_bytes_sent("tree", 1, 2, 0)
    assert parse_lengths("1000, 100000") == [1000, 100000]


@pytest.mark.parametrize("args, words", [
    (["collectives", "--processes", "1"], "--processes=1 must be a whole number from 2 to 64"),
    (["collectives", "--sizes", "10,x"], "--sizes='x' must be a whole number from 1 to 100000000"),
    (["collectives", "--sizes", "0"], "--sizes=0 must be a whole number"),
    (["collectives", "--repeats", "0"], "--repeats=0 must be a whole number >= 1"),
])
def test_collectives_bad_input_is_one_line_and_exit_code_2(args, words, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_collectives_json_measures_bytes_per_rank_against_theory():
    out = subprocess.run([sys.executable, "-m", "effitrain_helpers.cli", "collectives", "--processes", "3",
                          "--sizes", "999,30000", "--repeats", "2", "--json"], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    cost = json.loads(out.stdout)
    rows = cost["rows"]
    assert cost["ring"] == "reference" and len(rows) == 2 * 3 * 3  # sizes x methods x ranks
    assert all(r["error"] <= 1e-5 for r in rows), "every method sums right"
    for r in rows:
        if r["counted_bytes"] is not None:
            assert abs(r["counted_bytes"] - r["theory_bytes"]) <= 2 * 2 * 4, r
        if r["socket_bytes"] is not None and r["numel"] == 30000:  # Linux: the sockets, headers included
            assert 1.0 <= r["socket_bytes"] / r["theory_bytes"] <= 1.05, r
    server = {r["rank"]: r["counted_bytes"] for r in rows if r["method"] == "parameter server" and r["numel"] == 999}
    assert server == {0: 2 * 999 * 4, 1: 999 * 4, 2: 999 * 4}
