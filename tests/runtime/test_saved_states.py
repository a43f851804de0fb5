"""Saved states on the CPU tier (the reference executor): an agent's growing history resumed from host
memory, from disk after a restart, several in one stream, with a tiny budget, is bit for bit its fresh
computation (E3: torch.equal); every kind of bad checkpoint is refused with a logged reason and computed
fresh; an unwritable directory never fails a request; `x_session` saves, resumes and drops a System One
history; `flidec run --checkpoints` resumes across processes; `flidec inspect` says what a point costs."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flidec.cli import main
from flidec.ir.errors import FlideError
from flidec.runtime.program import load

TEXT = ("the agent opened a file and read the log then found an error in the parser wrote a patch ran the "
        "tests saw two failures fixed the import and ran them again")
WORDS = TEXT.split()


def prose(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def history(trajectory: int, step: int) -> str:
    """A history that grows by about 100 tokens a step from about 200."""
    return "\n".join(prose(1000 * trajectory + k, 160 if k == 0 else 80) for k in range(step + 1))


def planner(trajectory: int, step: int) -> dict:
    return {"history": history(trajectory, step),
            "next_tool": {"instructions": "Which tool next?",
                          "criteria": {"shell": None, "editor": "edit a file", "search": None}},
            "action": [{"text": f"run the tests of step {step}", "outcome": [{"text": "they pass"},
                                                                           {"text": "one fails"}]},
                       {"text": "revert the patch", "outcome": [{"text": "the log is clean"}]}]}


def systemone(step: int, session: object = None) -> dict:
    body = {"state": history(7, step), "questions": {
        "done": {"type": "noul", "instructions": "Is the task finished?"},
        "next": {"type": "choice", "instructions": "What next?", "criteria": {"test": None, "edit": None}}}}
    if session is not None:
        body["x_session"] = session
    return body


@pytest.fixture(scope="module")
def fresh(planner_cpu_artifact):
    return load(planner_cpu_artifact, "cpu", saved_states=False)


def equal_fresh(fresh, program, instances: list[dict], tree: str | None = None) -> list[int]:
    """Run `instances` on `program`, assert every logit equals the fresh program's; the reused positions."""
    got = program.answer(instances, tree)
    want = fresh.label_logits(instances, tree)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g.logits, w), "a resumed answer differs from its fresh computation"
    return [g.reused for g in got]


def test_resumed_agent_steps_equal_fresh_from_host_memory(planner_cpu_artifact, fresh) -> None:
    program = load(planner_cpu_artifact, "cpu")
    reused = [equal_fresh(fresh, program, [planner(0, step)])[0] for step in range(4)]
    assert reused[0] == 0 and all(r > 0 for r in reused[1:]), reused
    assert reused == sorted(reused) and reused[-1] > reused[1]  # each step resumes further than the last
    stats = program.stats.saved
    assert stats.hits == 3 and stats.from_tier == {"host": 3} and stats.tokens_reused == sum(reused)
    assert stats.points["host"] == stats.saved >= 3 and stats.bytes["host"] > 0
    # the stream computes only the rows past the point (step 3 again: from the point step 3 saved)
    before = program.stats.stream_tokens
    again = [r.reused for r in program.answer([planner(0, 3)])]
    assert again[0] > reused[-1]
    assert program.stats.stream_tokens - before == fresh_rows(fresh, planner(0, 3)) - again[0]


def fresh_rows(fresh, instance: dict) -> int:
    before = fresh.stats.stream_tokens
    fresh.label_logits([instance])
    return fresh.stats.stream_tokens - before


def test_resumed_equal_fresh_after_a_restart_from_disk(planner_cpu_artifact, fresh, tmp_path) -> None:
    first = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path)
    for step in range(3):
        equal_fresh(fresh, first, [planner(1, step)])
    first.saved.flush()  # what the process does at exit
    assert first.stats.saved.bytes["disk"] > 0
    del first
    again = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path)
    (reused,) = equal_fresh(fresh, again, [planner(1, 3)])
    assert reused > 0 and again.stats.saved.from_tier == {"disk": 1}
    (reused,) = equal_fresh(fresh, again, [planner(1, 3)])  # now in memory: promoted on its first use
    assert again.stats.saved.from_tier == {"disk": 1, "host": 1}


def test_a_point_another_program_writes_is_found_in_the_shared_directory(planner_cpu_artifact, fresh,
                                                                         tmp_path) -> None:
    reader = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path)
    assert equal_fresh(fresh, reader, [planner(16, 0)]) == [0]  # lists the directory: nothing of 16 yet
    writer = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path)
    equal_fresh(fresh, writer, [planner(16, 1)])
    writer.saved.flush()
    reader.saved.tiers[0].pop(next(iter(reader.saved.tiers[0])))  # its own point of step 0 gone
    (reused,) = equal_fresh(fresh, reader, [planner(16, 2)])  # the directory changed: listed again
    assert reused > 0 and reader.stats.saved.from_tier == {"disk": 1}


def test_several_resumed_instances_in_one_stream_equal_fresh(planner_cpu_artifact, fresh) -> None:
    program = load(planner_cpu_artifact, "cpu")
    program.label_logits([planner(t, 0) for t in (2, 3, 4)])
    streams = program.stats.streams
    reused = equal_fresh(fresh, program, [planner(t, 1) for t in (2, 3, 4)])
    assert all(r > 0 for r in reused) and program.stats.streams == streams + 1  # three stored segments


def test_a_tiny_budget_evicts_and_never_changes_an_answer(planner_cpu_artifact, fresh) -> None:
    program = load(planner_cpu_artifact, "cpu", host_budget_gib=300_000 / 2**30)  # about one point
    for step in range(3):
        for t in (5, 6):
            equal_fresh(fresh, program, [planner(t, step)])
    stats = program.stats.saved
    assert stats.evicted["host"] > 0 and stats.bytes["host"] <= 300_000


def saved_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*/*.json"))


BAD = {  # what is done to the one checkpoint on disk -> the reason it is refused for
    "corrupt tensor": (lambda data, meta: flip(data, -9), "corrupt"),
    "truncated tensors": (lambda data, meta: data.write_bytes(data.read_bytes()[:-100]), "corrupt"),
    "missing tensors": (lambda data, meta: data.unlink(), "unreadable"),
    "manifest lists other tensors": (lambda data, meta: edit(meta, lambda m: m["tensors"].popitem()),
                                     "truncated"),
    "foreign": (lambda data, meta: edit(meta, lambda m: m.update(scope="0" * 64)), "foreign"),
    "other format": (lambda data, meta: edit(meta, lambda m: m.update(flidec_saved_state=99)),
                     "other format"),
    "broken manifest": (lambda data, meta: meta.write_text("{not json"), "bad manifest"),
    "checksum": (lambda data, meta: edit(meta, lambda m: m["tensors"]["tokens"].update(sha256="0" * 64)),
                 "corrupt"),
    "another key's name": (lambda data, meta: rename(data, meta, "f" * 32), "bad manifest"),
}


def rename(data: Path, meta: Path, key: str) -> None:
    """The files moved under another point's key (the manifest still names its own): a lookup of that key."""
    data.rename(data.with_name(f"{key}.safetensors"))
    meta.rename(meta.with_name(f"{key}.json"))


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


def edit(path: Path, change) -> None:
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_checkpoint_is_refused_logged_and_computed_fresh_equal(planner_cpu_artifact, fresh, tmp_path,
                                                                     caplog, kind) -> None:
    first = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path)
    first.label_logits([planner(8, 0)])
    first.saved.flush()
    (meta,) = saved_files(tmp_path)
    damage, reason = BAD[kind]
    damage(meta.with_suffix(".safetensors"), meta)
    program = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path)
    store = program.saved
    if kind == "another key's name":  # looked up under the key it was moved to
        assert store.disk.read("f" * 32) is None
    else:
        with caplog.at_level("WARNING", logger="flidec.saved"):
            assert equal_fresh(fresh, program, [planner(8, 1)]) == [0]
    assert program.stats.saved.refused == {reason: 1}, program.stats.saved
    assert any("checkpoint refused" in r.message for r in caplog.records)


def written_chain(planner_cpu_artifact, fresh, directory: Path, trajectory: int) -> list[dict]:
    """Three steps of one trajectory in one Program: each point extends the one before; their manifests,
    oldest first."""
    program = load(planner_cpu_artifact, "cpu", checkpoints=directory)
    for step in range(3):
        equal_fresh(fresh, program, [planner(trajectory, step)])
    program.saved.flush()
    manifests = [json.loads(m.read_text()) for m in saved_files(directory)]
    return sorted(manifests, key=lambda m: m["length"])


def test_a_point_extending_a_written_one_writes_only_its_new_positions(planner_cpu_artifact, fresh,
                                                                      tmp_path) -> None:
    chain = written_chain(planner_cpu_artifact, fresh, tmp_path, 12)
    assert len(chain) == 3
    first, last = chain[0], chain[-1]
    assert [e["file"] for e in last["extents"]] == [m["key"] for m in chain]  # one extent per step's file
    assert [(e["start"], e["end"]) for e in last["extents"]] == [
        (0, first["length"]), (first["length"], chain[1]["length"]), (chain[1]["length"], last["length"])]
    own = {name.split(".")[1] for name in last["tensors"] if name.startswith("kv.")}
    assert own == {str(chain[1]["length"])}  # its file holds only its new positions' keys and values
    again = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path)  # a restart reads across the files
    (reused,) = equal_fresh(fresh, again, [planner(12, 3)])
    assert reused == last["length"] and again.stats.saved.from_tier == {"disk": 1}


@pytest.mark.parametrize("damage", ["flipped", "gone"])
def test_a_point_whose_extent_file_is_bad_is_refused_and_computed_fresh(planner_cpu_artifact, fresh, tmp_path,
                                                                       damage) -> None:
    chain = written_chain(planner_cpu_artifact, fresh, tmp_path, 14)
    (scope,) = tmp_path.iterdir()
    data = scope / f"{chain[0]['key']}.safetensors"  # holds the first extent every later point reads
    if damage == "flipped":
        flip(data, -9)
    else:
        data.unlink()
    again = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path)
    assert equal_fresh(fresh, again, [planner(14, 3)]) == [0]
    refused = again.stats.saved.refused
    assert sum(refused.values()) == 3 and set(refused) == ({"corrupt"} if damage == "flipped" else
                                                          {"unreadable"}), refused


def test_dropping_a_session_keeps_the_file_another_sessions_point_reads(planner_cpu_artifact, fresh,
                                                                       tmp_path) -> None:
    program = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path)
    equal_fresh(fresh, program, [{**planner(15, 0), "x_session": "a"}])
    equal_fresh(fresh, program, [{**planner(15, 1), "x_session": "b"}])  # extends a's point
    program.saved.flush()
    first, second = sorted((json.loads(m.read_text()) for m in saved_files(tmp_path)),
                           key=lambda m: m["length"])
    program.saved.drop("a")
    (scope,) = tmp_path.iterdir()
    assert not program.saved.has(first["key"]) and (scope / f"{first['key']}.extents.json").is_file()
    again = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path)
    (reused,) = equal_fresh(fresh, again, [planner(15, 2)])
    assert reused == second["length"] and again.stats.saved.refused == {}
    again.saved.flush()
    third = max((json.loads(m.read_text()) for m in saved_files(tmp_path)), key=lambda m: m["length"])
    again.saved.sessions.update(b=[second["key"]], c=[third["key"]])  # as requests naming them would
    again.saved.drop("b")  # the third point reads b's file (and a's): both stay
    assert {p.name.split(".", 1)[1] for p in scope.iterdir()} == {"safetensors", "json", "extents.json"}
    again.saved.drop("c")  # nothing reads a's or b's file any more: every file goes
    assert list(scope.iterdir()) == []


def test_an_unwritable_checkpoint_directory_never_fails_a_request(planner_cpu_artifact, fresh, tmp_path,
                                                                  monkeypatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    program = load(planner_cpu_artifact, "cpu", checkpoints=blocker / "checkpoints")
    equal_fresh(fresh, program, [planner(9, 0)])
    program.saved.flush()
    assert program.stats.saved.write_failures == 1 and program.stats.saved.saved == 1

    full = load(planner_cpu_artifact, "cpu", checkpoints=tmp_path / "full")

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    equal_fresh(fresh, full, [planner(10, 0)])
    full.saved.flush()
    assert full.stats.saved.write_failures == 1
    assert list((tmp_path / "full").rglob("*")) == [next((tmp_path / "full").iterdir())]  # no file left


def test_x_session_saves_resumes_and_drops_a_systemone_history(systemone_cpu_artifact, tmp_path) -> None:
    fresh1 = load(systemone_cpu_artifact, "cpu", saved_states=False)
    program = load(systemone_cpu_artifact, "cpu", checkpoints=tmp_path)
    equal_fresh(fresh1, program, [systemone(0)])
    assert program.stats.saved.saved == 0  # the systemone state is not resumable: no session, no point
    equal_fresh(fresh1, program, [systemone(1, "agent-7")])
    program.saved.flush()
    assert program.stats.saved.saved == 1 and len(saved_files(tmp_path)) == 1
    assert equal_fresh(fresh1, program, [systemone(2)])[0] > 0  # any request resumes from it
    answer = program.run([systemone(2, {"id": "agent-7", "drop": True})])[0]
    assert answer == fresh1.run([systemone(2)])[0]
    assert saved_files(tmp_path) == [] and program.stats.saved.points["host"] == 0


def test_a_bad_x_session_is_an_error_in_place(systemone_cpu_artifact) -> None:
    program = load(systemone_cpu_artifact, "cpu")
    out = program.run([systemone(0, 7), systemone(0, {"id": "a", "forever": True}), systemone(0, "ok")])
    for bad in out[:2]:
        assert bad["error"]["type"] == "InstanceError" and "x_session" in bad["error"]["problems"][0]
    assert "answers" in out[2]


def test_flidec_run_resumes_across_processes_with_equal_answers(planner_cpu_artifact, tmp_path) -> None:
    for step in range(3):
        (tmp_path / f"step{step}.jsonl").write_text(json.dumps(planner(11, step)) + "\n")

    def cli(step: int, *extra: str) -> dict:
        out = tmp_path / f"out{step}{''.join(extra)}"
        run = subprocess.run([sys.executable, "-m", "flidec.cli", "run", str(planner_cpu_artifact),
                              "--instances", str(tmp_path / f"step{step}.jsonl"), "--out", str(out),
                              "--quiet", *extra],
                             capture_output=True, text=True, timeout=300, check=False)
        assert run.returncode == 0, run.stderr[-2000:]
        summary = json.loads((out / "summary.json").read_text())
        return {"summary": summary, "results": (out / "results.jsonl").read_text(), "stdout": run.stdout}

    checkpoints = ("--checkpoints", str(tmp_path / "ck"))
    for step in range(2):
        cli(step, *checkpoints)
    resumed = cli(2, *checkpoints)
    assert resumed["summary"]["saved_states"]["hits"] == 1, resumed["summary"]
    assert resumed["summary"]["saved_states"]["from_tier"] == {"disk": 1}
    assert "saved states: 1 resumed" in resumed["stdout"]
    assert resumed["results"] == cli(2, "--no-saved-states")["results"]


def test_inspect_says_which_states_save_and_what_a_point_costs(planner_cpu_artifact, capsys) -> None:
    assert main(["inspect", str(planner_cpu_artifact)]) == 0
    out = capsys.readouterr().out
    assert "planner: state history resumable" in out
    assert "a point in bf16:" in out and "KiB a position" in out


def test_a_checkpoint_directory_it_would_not_use_is_refused(planner_cpu_artifact, tmp_path) -> None:
    with pytest.raises(FlideError, match="saved states are off"):
        load(planner_cpu_artifact, "cpu", saved_states=False, checkpoints=tmp_path)
    with pytest.raises(FlideError, match="at least 0"):
        load(planner_cpu_artifact, "cpu", host_budget_gib=-1)
