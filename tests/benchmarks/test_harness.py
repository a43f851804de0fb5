"""benchmarks/run.py end to end on the CPU at a tiny scale with the tiny checkpoint: every engine x workload
gets a row, flidec's reference executor forked equals it unforked bit for bit, exactness is measured
against fp32-ref, the compiled flidec engines run a cpu artifact (compiled before their load is timed) and
equal their solo runs bit for bit too, flide (not installed here) gives clean error rows, and the results
come out as a table, a JSON file and one final JSON line."""

import json

import pytest
import torch

from benchmarks.run import main

ENGINES = ["flidec", "flidec-solo", "flidec-ref", "flidec-ref-solo", "hf", "fp32-ref", "flide"]
WORKLOADS = ["race", "planner"]


@pytest.fixture
def one_thread():
    """CPU timings of tiny ops collapse when intra-op threads fight other test processes for 2 cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_harness_end_to_end(tiny_checkpoint, tmp_path, capsys, one_thread):
    try:
        import flide  # noqa: F401

        pytest.skip("flide is installed here; this test checks its error row")
    except ImportError:
        pass
    rc = main(
        [
            "--model",
            str(tiny_checkpoint),
            "--engines",
            ",".join(ENGINES),
            "--workloads",
            ",".join(WORKLOADS),
            "--scale",
            "0.02",
            "--time-budget-s",
            "600",  # a budget the run never nears: the test checks cells, not speed
            "--results-dir",
            str(tmp_path),
            "--commit",
            "test",
            "--no-plot",
        ]
    )
    assert rc == 0
    stdout = capsys.readouterr().out.strip().splitlines()
    result = json.loads(stdout[-1])
    assert json.loads((tmp_path / f"{result['date']}-test.json").read_text()) == result
    assert any(line.startswith("workload") and "q/s" in line for line in stdout)

    rows = {(r["engine"], r["workload"]): r for r in result["cells"]}
    assert set(rows) == {(e, w) for e in ENGINES for w in WORKLOADS}
    for e in ("flidec", "flidec-solo", "flidec-ref", "flidec-ref-solo", "hf", "fp32-ref"):
        race = rows[e, "race"]
        assert race["status"] == "ok", race
        assert race["qps"] > 0 and race["questions"] > 0 and race["tok_s"] > 0
        assert rows[e, "planner"]["status"] in ("ok", "skipped")
    for w in WORKLOADS:
        assert rows["flide", w]["status"] == "error" and "not importable" in rows["flide", w]["error"]

    exact = rows["flidec-ref", "race"]["exact"]
    assert exact["reads"] > 0 and 0 <= exact["max_dp_points"] < 100 and exact["flips"] <= exact["reads"]
    race_cmp = {c["fork"] for c in result["comparisons"] if c["workload"] == "race"}
    assert race_cmp == {"flidec", "flidec-ref"}
    for c in result["comparisons"]:  # E3: every forked read equals its plain pass bit for bit
        assert c["bitwise_compared"] > 0 and c["bitwise_equal"] == c["bitwise_compared"], c

    race = result["workloads"]["race"]
    assert race["sharing_ratio"] > 1 and race["plain_tokens"] > race["tree_tokens"]
    engines = {e["name"]: e for e in result["engines"]}
    assert engines["flidec-ref"]["load_to_first_answer_s"] > 0
    assert engines["flidec"]["build"]["target"] == "cpu" and engines["flidec"]["build_s"] > 0
