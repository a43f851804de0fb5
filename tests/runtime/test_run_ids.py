"""The run-ids cache: a growing history is tokenized only where it is new, every text keeps its whole ids,
the cache stays inside its character budget (least recently used out), and threads sharing it agree."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from test_next_token import PROSE, _Counting  # a sibling test module

from flidec.runtime import next_token
from flidec.runtime.next_token import NextTokenFormat
from flidec.runtime.run_ids import RunIds


def test_a_growing_history_is_tokenized_only_where_it_is_new(qwen_tokenizer) -> None:
    counting = _Counting(qwen_tokenizer)
    fmt = NextTokenFormat(counting)
    history = PROSE[:6000]
    for step in range(6):
        before = counting.calls
        got = fmt.encode_texts([history, "Question: which?\n"])
        assert got[history] == tuple(qwen_tokenizer.encode(history))  # the whole text's ids, every step
        runs = len(next_token.text_runs(history))
        if step == 0:
            assert counting.calls - before == runs + 1
        else:  # the runs before the last one of the step before are cut where they were: held
            assert counting.calls - before <= 3 < runs
        history += f"\n\nStep {step}: the agent called a tool and read its output, {step * 7} lines long."


def test_the_budget_holds_and_the_least_recently_used_run_goes_first() -> None:
    encoded: list[str] = []

    def encode_batch(texts: list[str]) -> list[list[int]]:
        encoded.extend(texts)
        return [[len(t), ord(t[0])] for t in texts]

    cache = RunIds(encode_batch, budget_chars=10)
    assert cache.ids(["aaaa", "bbbb", "aaaa"]) == [(4, 97), (4, 98), (4, 97)]
    assert encoded == ["aaaa", "bbbb"]  # each distinct run once
    cache.ids(["aaaa"])  # now b is the least recently used
    cache.ids(["cccc"])  # 12 chars > 10: b goes
    assert len(cache) == 2 and cache._chars == 8
    encoded.clear()
    cache.ids(["aaaa", "cccc", "bbbb"])
    assert encoded == ["bbbb"]
    cache.ids(["x" * 11])  # longer than the whole budget: answered, not held
    assert len(cache) == 2 and cache._chars <= 10


def test_threads_sharing_the_cache_get_the_whole_ids(qwen_tokenizer) -> None:
    fmt = NextTokenFormat(qwen_tokenizer)
    texts = [PROSE[: 1500 + 700 * k] for k in range(12)]
    want = {t: tuple(qwen_tokenizer.encode(t)) for t in texts}
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda k: fmt.encode_texts(texts[k % 12:] + texts[:k % 12]), range(48)))
    assert all(g == want for g in got)
