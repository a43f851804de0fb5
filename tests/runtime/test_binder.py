"""The binder and packer: every ask's path in the packed stream is its whole prompt's tokenization (many
texts: whitespace, JSON, Unicode), instances pack without touching each other, answers come back in the
instance's shape, bad instances are reported by path without stopping the others, and merge_chains keeps
every read's path while it merges only children into parents without reads."""

from __future__ import annotations

import json
import math
import zlib

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flidec.ir.defaults import DEFAULT_CRITERIA, DEFAULT_INSTRUCTIONS
from flidec.ir.errors import InstanceError
from flidec.ir.tree import Ask, AskType, Bound, Fork, NoulCriteria, Range, ScoreLevels, State, Text, Tree
from flidec.models.tokenizer import ModelTokenizer
from flidec.runtime.answers import assemble
from flidec.runtime.binder import Plan, bind, merge_chains
from flidec.runtime.next_token import NextTokenFormat
from flidec.testing.streams import bind_one, plain_streams


def encode_chat(tok: ModelTokenizer, content: str) -> list[int]:
    """The reference: the whole one-user-turn chat string tokenized at once."""
    return tok.encode_template(tok.chat.render(content))


NOUL, SCORE = AskType("noul", Range(2, 2)), AskType("score", Range(2, 10))
CHOICE = AskType("choice", Range(2, 30))
T = Bound(400)
PLANNER = Tree("planner", State("trajectory", Bound(4000)), (
    Ask("done", (NOUL,), instructions=T, criteria=NoulCriteria("the goal is reached")),
    Text("goal", T),
    Fork("action", Range(0, 4), T, (
        Ask("safe", (NOUL,), instructions="Is this action safe?"),
        Ask("kind", (CHOICE,), instructions=T, criteria=T),
        Text(None, "What could happen next:"),
        Fork("outcome", Range(0, 3), T, (
            Ask("good", (SCORE,), instructions="How good is this outcome?",
                criteria=ScoreLevels(("bad", "neutral", "good"))),
        )),
    )),
))
SYSTEMONE = Tree("systemone", State("state", Bound(32768)), (
    Ask("questions", (NOUL, AskType("choice", Range(2, 255)), SCORE), instructions=DEFAULT_INSTRUCTIONS,
        criteria=DEFAULT_CRITERIA, repeat=Range(1, 64)),
), wire="systemone")


def _lookahead(depth: int) -> Tree:
    """state -> step -> step -> ... (depth forks), an ask at every step."""
    body: tuple = ()
    for _ in range(depth):
        body = (Fork("step", Range(1, 2), T, (Ask("ok", (NOUL,), instructions="Still on track?"), *body)),)
    return Tree("lookahead", State("state", Bound(4000)), body)


LOOKAHEAD = _lookahead(6)


def expected_prompts(tree: Tree, inst: dict, fmt: NextTokenFormat) -> dict[str, str]:
    """Each ask's path -> its whole prompt's content text, walked independently of the binder."""
    out: dict[str, str] = {}
    state = inst[tree.state.name]

    def walk(body, obj, texts, prefix):
        texts = list(texts)
        for node in body:
            if isinstance(node, Text):
                texts.append(node.value if isinstance(node.value, str) else obj[node.name])
            elif isinstance(node, Fork):
                for i, b in enumerate(obj[node.name]):
                    btexts = texts + ([b["text"]] if node.text else [])
                    walk(node.body, b, btexts, f"{prefix}{node.name}[{i}].")
            elif node.repeat is not None:
                for qid, q in obj[node.name].items():
                    path = f"{prefix}{node.name}[{json.dumps(qid, ensure_ascii=False)}]"
                    out[path] = fmt.prompt_text(state, texts, node, q, path)
            else:
                q = obj.get(node.name) if node.name in obj else None
                out[prefix + node.name] = fmt.prompt_text(state, texts, node, q, prefix + node.name)

    walk(tree.body, inst, [], "")
    return out


def check_paths(tree: Tree, instances: list, fmt: NextTokenFormat, qwen_tokenizer: ModelTokenizer) -> None:
    bound = bind(tree, instances, fmt, verify=False)  # the test checks it here, independently
    assert not bound.errors, bound.errors
    plains = plain_streams(bound)
    seen = {}
    for site, plain, read in zip(bound.sites, plains, bound.stream.meta.reads, strict=True):
        seen[site.instance, site.path] = plain.tokens.tolist()
        assert plain.meta.reads[0].labels == read.labels
    for i, inst in enumerate(instances):
        expected = expected_prompts(tree, inst, fmt)
        assert sorted(p for k, p in seen if k == i) == sorted(expected)
        for path, content in expected.items():
            if any(special in content for special in qwen_tokenizer.special_tokens):
                # user text spelling a special token (Hypothesis draws the source's own literals, such as
                # "<think>") stays plain text in flidec by design (tokenizer.py's docstring), where the
                # whole-string reference would make it the control token: test_next_token covers that case
                continue
            assert seen[i, path] == encode_chat(qwen_tokenizer, content), path


ATOMS = st.sampled_from(["\n", "\n\n", " ", "\t", "\r\n", "\u00a0", "a", "Z", "7", "{", '"', ":", "e\u0301",
                         "\u0301", "한", "🙂", "'ll", ".", "Question", "<|", "yes"])
TEXT = st.one_of(st.text(max_size=10), st.lists(ATOMS, max_size=6).map("".join))
JSON = st.recursive(st.none() | st.integers() | TEXT,
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(TEXT, c, max_size=2), max_leaves=5)
STATE = TEXT | st.dictionaries(TEXT, JSON, max_size=3) | st.lists(JSON, max_size=3)
INSTRUCTIONS = JSON.filter(lambda v: not isinstance(v, int))  # a string, object, array or null, as validated
CHOICES = st.dictionaries(TEXT.filter(bool), TEXT | st.none(), min_size=2, max_size=4)


@st.composite
def planner_instances(draw) -> dict:
    def outcome():
        return {"text": draw(TEXT)}

    def action():
        kind = {"criteria": draw(CHOICES)}
        if draw(st.booleans()):
            kind["instructions"] = draw(INSTRUCTIONS)
        outcomes = [outcome() for _ in range(draw(st.integers(0, 2)))]
        return {"text": draw(TEXT), "kind": kind, "outcome": outcomes}

    return {"trajectory": draw(STATE), "done": {"instructions": draw(TEXT)}, "goal": draw(TEXT),
            "action": [action() for _ in range(draw(st.integers(0, 2)))]}


QUESTION = st.one_of(
    st.fixed_dictionaries({"type": st.just("noul")}, optional={"instructions": INSTRUCTIONS}),
    st.fixed_dictionaries({"type": st.just("choice"), "criteria": CHOICES}),
    st.fixed_dictionaries({"type": st.just("score"), "criteria": st.lists(TEXT, min_size=2, max_size=3)},
                          optional={"instructions": TEXT}))
SYSTEMONE_INSTANCES = st.fixed_dictionaries({
    "model": st.just("jev-latest"), "state": STATE,
    "questions": st.dictionaries(TEXT.filter(bool), QUESTION, min_size=1, max_size=3)})


@st.composite
def lookahead_instances(draw) -> dict:
    def steps(depth):
        if depth == 0:
            return {}
        n = draw(st.integers(1, 2)) if depth > 4 else 1  # fan out near the root only: keeps it small
        return {"step": [{"text": draw(TEXT), **steps(depth - 1)} for _ in range(n)]}

    return {"state": draw(STATE), **steps(6)}


SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(planner_instances(), min_size=1, max_size=2))
def test_planner_paths_are_whole_prompt_tokenizations(fmt, qwen_tokenizer, instances) -> None:
    check_paths(PLANNER, instances, fmt, qwen_tokenizer)


@SETTINGS
@given(st.lists(SYSTEMONE_INSTANCES, min_size=1, max_size=2))
def test_systemone_paths_are_whole_prompt_tokenizations(fmt, qwen_tokenizer, instances) -> None:
    check_paths(SYSTEMONE, instances, fmt, qwen_tokenizer)


@SETTINGS
@given(lookahead_instances())
def test_lookahead_chain_of_depth_6(fmt, qwen_tokenizer, instance) -> None:
    check_paths(LOOKAHEAD, [instance], fmt, qwen_tokenizer)


def test_lookahead_segments_nest_six_deep_and_empty_texts_take_no_segment(fmt) -> None:
    def chain(texts):
        return {"text": texts[0], **({"step": [chain(texts[1:])]} if texts[1:] else {})}

    full = bind_one(LOOKAHEAD, {"state": "s", "step": [chain(list("abcdef"))]}, fmt).stream.meta
    assert max(s.level for s in full.segments) == 7  # 6 step texts, then the deepest ask's block
    assert len(full.segments) == 1 + 6 + 6 and len(full.reads) == 6
    holed = {"state": "s", "step": [chain(["a", " ", "c", "", "e", "f"])]}
    holes = bind_one(LOOKAHEAD, holed, fmt).stream.meta
    assert len(holes.segments) == 1 + 4 + 6 and max(s.level for s in holes.segments) == 5


PLAN_A = {
    "trajectory": "Step 1: opened the fridge.\nStep 2: looked inside.",
    "done": {"instructions": "Is the fridge closed?"},
    "goal": "Make breakfast.",
    "action": [
        {"text": "take the eggs",
         "kind": {"instructions": "Which kind?", "criteria": {"cook": None, "move": "m"}},
         "outcome": [{"text": "eggs in hand"}, {"text": "  dropped one"}]},
        {"text": "", "kind": {"criteria": {"x": None, "y": None, "z": None}}, "outcome": []},
    ],
}
PLAN_B = {"trajectory": {"steps": ["wake", "wash"]}, "done": {}, "goal": "  ",
          "action": [{"text": "walk", "kind": {"criteria": {"a": "b", "c": ["d"]}},
                      "outcome": [{"text": "x"}]}]}
SYS = {"model": "jev-latest", "state": "The ticket: my order never arrived.",
       "questions": {"refund?": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
                     "urgency 🙂": {"type": "score", "criteria": ["low", {"level": "high"}]},
                     "team": {"type": "choice", "instructions": "Route to",
                              "criteria": {"billing": None, "shipping": "parcels"}}}}


def _by_instance(bound, i: int) -> dict[str, list[int]]:
    return {s.path: p.tokens.tolist() for s, p in zip(bound.sites, plain_streams(bound), strict=True)
            if s.instance == i}


def test_packing_leaves_each_instance_as_it_is_alone(fmt) -> None:
    alone = [_by_instance(bind_one(PLANNER, inst, fmt), 0) for inst in (PLAN_A, PLAN_B)]
    packed = bind(PLANNER, [PLAN_B, PLAN_A, PLAN_B], fmt)
    assert _by_instance(packed, 1) == alone[0]
    assert _by_instance(packed, 0) == alone[1] == _by_instance(packed, 2)
    meta = packed.stream.meta
    assert [s.instance for s in packed.sites] == sorted(s.instance for s in packed.sites)
    # level by level: each level's rows are one contiguous run, in level order
    starts = [min(meta.segments[s].start for s in lvl) for lvl in meta.levels]
    ends = [max(meta.segments[s].start + meta.segments[s].length for s in lvl) for lvl in meta.levels]
    assert starts[0] == 0 and all(e == s for e, s in zip(ends, starts[1:], strict=False))
    assert sum(meta.segments[s].length for lvl in meta.levels for s in lvl) == ends[-1] == packed.rows_used
    assert [len(lvl) for lvl in meta.levels][0] == 3  # one root per instance


def test_segments_follow_the_branch_points(fmt) -> None:
    meta = bind_one(PLANNER, PLAN_A, fmt).stream.meta
    # root (state), done's block, goal (after a branch point), action[0] text, action[0].safe, .kind,
    # the constant text after them, 2 outcomes with their good asks; action[1] has no text: its asks hang
    # off the goal segment and its constant text gets a segment of its own.
    parents = [s.parent for s in meta.segments]
    assert len(meta.segments) == 14 and parents.count(-1) == 1
    assert len(meta.reads) == 1 + 2 * 2 + 2


def test_padding_rows_lie_outside_every_segment(fmt) -> None:
    used = bind_one(PLANNER, PLAN_B, fmt).rows_used
    bound = bind_one(PLANNER, PLAN_B, fmt, rows=used + 5)
    assert bound.stream.tokens.shape == (used + 5,) and bound.rows_used == used
    assert torch.equal(bound.stream.meta.segment_ids[used:], torch.full((5,), -1))
    assert torch.equal(bound.stream.tokens[used:], torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match="need"):
        bind_one(PLANNER, PLAN_B, fmt, rows=used - 1)


def _logits(bound, fill: float = math.nan) -> torch.Tensor:
    """Row j: label i gets logit i (so the last label wins); columns past the labels hold `fill`."""
    lmax = max(len(s.piece.labels) for s in bound.sites)
    out = torch.full((len(bound.sites), lmax), fill, dtype=torch.float32)
    for j, s in enumerate(bound.sites):
        out[j, : len(s.piece.labels)] = torch.arange(len(s.piece.labels), dtype=torch.float32)
    return out


def test_answers_mirror_the_instance(fmt) -> None:
    bound = bind(PLANNER, [PLAN_A, {"trajectory": 1}, PLAN_B], fmt)
    out = assemble(bound, _logits(bound))
    assert out[1] is None and 1 in bound.errors
    a = out[0]
    assert list(a) == ["done", "action"] and a["done"]["type"] == "noul"
    assert a["done"]["noul"] == pytest.approx(1 / (1 + math.e))
    assert [list(b) for b in a["action"]] == [["safe", "kind", "outcome"]] * 2
    assert a["action"][0]["kind"]["choice"] == "move" and a["action"][1]["kind"]["choice"] == "z"
    legend = {"0": "bad", "1": "neutral", "2": "good"}
    assert [o["good"]["legend"] for o in a["action"][0]["outcome"]] == [legend, legend]
    assert a["action"][1]["outcome"] == [] and len(out[2]["action"][0]["outcome"]) == 1
    json.dumps(out)  # plain JSON all the way down


def test_systemone_responses(fmt) -> None:
    other = {"state": ["a", 1], "questions": {"q": {"type": "noul"}}, "stream": True}
    bound = bind(SYSTEMONE, [SYS, other], fmt)
    out = assemble(bound, _logits(bound), served_name="qwen3.5-0.8b")
    r = out[0]
    assert list(r) == ["model", "answers", "usage"] and r["model"] == "qwen3.5-0.8b"
    assert list(r["answers"]) == ["refund?", "urgency 🙂", "team"]
    assert r["answers"]["team"]["choice"] == "shipping"
    assert r["answers"]["urgency 🙂"]["legend"] == {"0": "low", "1": {"level": "high"}}
    lengths = [len(p.tokens) for s, p in zip(bound.sites, plain_streams(bound), strict=True)
               if s.instance == 0]
    assert r["usage"] == {"input_tokens": sum(lengths), "output_tokens": 0}
    assert type(r["usage"]["input_tokens"]) is int
    assert out[1]["answers"]["q"]["type"] == "noul"
    with pytest.raises(ValueError, match="served model name"):
        assemble(bound, _logits(bound))


def test_bad_instances_are_reported_by_path_and_do_not_stop_the_others(fmt) -> None:
    missing_text = json.loads(json.dumps(PLAN_A))
    del missing_text["action"][0]["outcome"][1]["text"]
    bad_type = {"state": "s", "questions": {"q1": {"type": "noul"}, "q2": {"type": "vote"}}}
    bound = bind(PLANNER, [missing_text, PLAN_B], fmt)
    assert list(bound.errors) == [0] and "action[0].outcome[1].text: missing" in str(bound.errors[0])
    assert {s.instance for s in bound.sites} == {1}
    with pytest.raises(InstanceError, match=r'questions\["q2"\]\.type: unknown type "vote"'):
        bind_one(SYSTEMONE, bad_type, fmt)
    with pytest.raises(InstanceError, match=r'questions\["q2"\]\.type: must be one of'):
        bind_one(SYSTEMONE, bad_type, fmt, validate=False)  # the binder's own check, same path
    too_long = {**PLAN_B, "goal": "word " * 500}
    with pytest.raises(InstanceError, match=r"^goal: \d+ tokens over its bound 400"):
        bind_one(PLANNER, too_long, fmt)


class _Merging(NextTokenFormat):
    """A broken format: tokenizes branch texts without their separator, so pieces no longer add up."""

    def text_piece(self, text: str, constant: bool) -> tuple[int, ...]:
        return super().text_piece(text, constant)[:-1] if not constant else super().text_piece(text, constant)


def test_verify_catches_pieces_that_do_not_add_up(qwen_tokenizer) -> None:
    with pytest.raises(InstanceError, match=r"^action\[0\]\.safe: its token pieces do not add up"):
        bind_one(PLANNER, PLAN_B, _Merging(qwen_tokenizer))


def test_constant_ask_needs_no_instance_key(fmt) -> None:
    bound = bind_one(PLANNER, PLAN_B, fmt)
    assert [s.path for s in bound.sites] == ["done", "action[0].safe", "action[0].kind",
                                             "action[0].outcome[0].good"]


def _logits_by_path(bound) -> torch.Tensor:
    """Each read's logits depend on its own ask path and label count only (a stand-in for a model)."""
    out = torch.full((len(bound.sites), bound.stream.meta.read_labels.shape[1]), float("-inf"))
    for i, site in enumerate(bound.sites):
        for j in range(len(site.piece.labels)):
            out[i, j] = float(zlib.crc32(f"{site.path}/{j}".encode()) % 97) / 10
    return out


def test_each_packed_instance_gets_its_own_answers(fmt) -> None:
    other = {"state": "b",
             "questions": {"x": {"type": "noul"}, "y": {"type": "score", "criteria": ["l", "h"]}}}
    packed = bind(SYSTEMONE, [SYS, other], fmt)
    alone = [bind(SYSTEMONE, [inst], fmt) for inst in (SYS, other)]
    together = assemble(packed, _logits_by_path(packed), served_name="m")
    for k, b in enumerate(alone):
        answers = assemble(b, _logits_by_path(b), served_name="m")[0]["answers"]
        assert together[k]["answers"] == answers


# ---- merge_chains -----------------------------------------------------------------------------------------


def _paths(plan: Plan) -> list[tuple[str, list[int]]]:
    return [(path, plan.path_ids(seg)) for seg, _, path in plan.reads]


def _plan(ids: list[list[int]], parents: list[int], reads: list[int]) -> Plan:
    return Plan([list(i) for i in ids], list(parents), [(seg, None, f"r{seg}") for seg in reads])


def test_a_one_question_instance_becomes_its_plain_pass(fmt) -> None:
    bound = bind_one(SYSTEMONE, {"state": "a ticket", "questions": {"q": {"type": "noul"}}}, fmt)
    meta = bound.stream.meta
    assert len(meta.segments) == 2
    plan = Plan([bound.stream.tokens[s.start : s.start + s.length].tolist() for s in meta.segments],
                [s.parent for s in meta.segments], [(1, None, "q")])
    merged = merge_chains(plan)
    assert merged.ids == [bound.stream.tokens.tolist()] and merged.parents == [-1] and merged.reads[0][0] == 0
    # the input is left as it was
    assert plan.ids[0] == bound.stream.tokens[: meta.segments[0].length].tolist()


def test_chains_merge_and_branch_points_stay() -> None:
    # 0 -> 1 -> 2 -> {3 -> 4, 5}, reads at 4 and 5: 0..2 are one segment, 3..4 another, 5 stays
    plan = _plan([[1, 2], [3], [4, 5], [6], [7], [8]], [-1, 0, 1, 2, 3, 2], [4, 5])
    merged = merge_chains(plan)
    assert merged.ids == [[1, 2, 3, 4, 5], [6, 7], [8]] and merged.parents == [-1, 0, 0]
    assert _paths(merged) == _paths(plan)


def test_a_parent_with_a_read_keeps_its_only_child_apart() -> None:
    plan = _plan([[1], [2], [3]], [-1, 0, 1], [1, 2])  # 1 is read at its last token: 2 must start a segment
    merged = merge_chains(plan)
    assert merged.ids == [[1, 2], [3]] and merged.parents == [-1, 0]
    assert [seg for seg, _, _ in merged.reads] == [0, 1] and _paths(merged) == _paths(plan)


def test_reads_keep_their_order_and_a_plan_without_chains_is_returned_as_is() -> None:
    plan = _plan([[1], [2], [3], [4], [5]], [-1, 0, 0, 2, -1], [3, 1, 4])
    merged = merge_chains(plan)
    assert [path for _, _, path in merged.reads] == ["r3", "r1", "r4"] and _paths(merged) == _paths(plan)
    assert merged.ids == [[1], [2], [3, 4], [5]]
    flat = _plan([[1], [2], [3]], [-1, 0, 0], [1, 2])
    assert merge_chains(flat) is flat
