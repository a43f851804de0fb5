"""Instances over the largest bucket are split at tree boundaries (runtime/split.split_plan): every sub-plan
fits, keeps each of its reads' whole paths and holds every read once; a split instance's label logits equal
the same instance run whole in a larger bucket, bit for bit (E1), on the reference executor and through the
GraphEngine with a fake launcher (several streams in one call, pipelined); a read whose path alone does not
fit the largest bucket is a per-row error naming it and what is over; chains merged inside a tree keep their
bits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from flidec.ir.errors import InstanceError
from flidec.ir.program import Bucket
from flidec.runtime.binder import merge_chains
from flidec.runtime.engines import GraphEngine
from flidec.runtime.launch import CompiledKernel
from flidec.runtime.program import Program, TreeRuntime, load
from flidec.runtime.recording import Buffer, Recording, Step
from flidec.runtime.split import plan_sizes, split_plan
from flidec.runtime.templates import TemplateWalker, bind_template

DEEP = """model qwen3_5
format next_token(style="vllm")

tree deep (buckets=[{buckets}]) {{
  state context: text[..512]
  ask start_ok: noul "Is the start sound?"
  fork step[1..4]: text[..64] {{
    ask ok: noul "Still on track?"
    fork next[1..3]: text[..64] {{
      ask ok: noul "Still on track?"
    }}
  }}
}}
"""


def deep(steps: int, nexts: int, tag: str = "") -> dict:
    return {"context": f"We plan a trip to the coast{tag}. " * 4,
            "step": [{"text": f"Step {i}: drive north for {i} hours.",
                      "next": [{"text": f"Then rest {j}."} for j in range(nexts)]} for i in range(steps)]}


def instances() -> list[dict]:
    # the first needs ~616 rows (over 128: split twice down), the second and fourth fit whole, the third ~180
    return [deep(4, 3), deep(1, 1, " again"), deep(2, 2, " later"), deep(1, 1)]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, tiny_checkpoint) -> dict[str, Path]:
    from flidec.compile import compile_artifact

    out = {}
    for name, buckets in (("small", "64, 128"), ("big", "1024")):
        d = tmp_path_factory.mktemp(f"deep-{name}")
        (d / "deep.flide").write_text(DEEP.format(buckets=buckets), encoding="utf-8")
        compile_artifact(d / "deep.flide", tiny_checkpoint, "cpu", d / "artifact")
        out[name] = d / "artifact"
    return out


@pytest.fixture(scope="module")
def programs(artifacts) -> dict[str, Program]:
    out = {name: load(path, "cpu", dtype="fp32", served_name="jev") for name, path in artifacts.items()}
    # the compiler adds a bucket for the longest path one read can have (~700 rows here); without it, the
    # small ladder stops at 128 rows, the shape of an artifact whose largest bucket is under some path
    small = out["small"].trees["deep"]
    assert [r.bucket.rows for r in small.program.buckets] == [64, 128, 704]
    ladder = replace(small.program, buckets=small.program.buckets[:2])
    out["small"].trees["deep"] = TreeRuntime(small.tree, ladder)
    return out


def plan_of(program: Program, instance: dict):
    t = program.tree()
    return TemplateWalker(t.tree, t.program.template, program.fmt).plan(instance)[0]


def test_sub_plans_fit_and_keep_whole_paths(programs) -> None:
    program = programs["small"]
    largest = program.tree().largest
    plan = plan_of(program, deep(4, 3))
    assert plan_sizes(plan).rows > 4 * largest.rows
    parts = split_plan(plan, largest)
    assert sorted(r for _, reads in parts for r in reads) == list(range(len(plan.reads)))
    assert any(len(reads) < 4 for _, reads in parts), "a step's subtree had to be split one level down"
    for sub, reads in parts:
        s = plan_sizes(sub)
        assert largest.fits(s.rows, s.segments, s.depth, s.reads, s.labels)
        assert all(p < j for j, p in enumerate(sub.parents))
        for (seg, piece, path), r in zip(sub.reads, reads, strict=True):
            oseg, opiece, opath = plan.reads[r]
            assert (path, piece) == (opath, opiece) and sub.path_ids(seg) == plan.path_ids(oseg)


def test_a_path_over_the_largest_bucket_is_named(programs) -> None:
    plan = plan_of(programs["small"], deep(2, 1))
    tiny = Bucket("r64", 64, 64, 4, 64, 255)
    with pytest.raises(InstanceError, match=r"step\[0\]\.ok: its path alone needs \d+ rows; the largest "
                                            r"bucket \(r64\) holds 64 rows"):
        split_plan(plan, tiny)


def test_split_instances_equal_whole_ones_bitwise(programs) -> None:
    small, big = programs["small"], programs["big"]
    insts = instances()
    before = small.stats.streams, big.stats.streams
    got = small.label_logits(insts)
    want = big.label_logits(insts)
    assert small.stats.streams - before[0] >= 4, "the large instances were not split"
    assert big.stats.streams - before[1] <= 2  # whole instances (the bucket holds 34 segments)
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, torch.Tensor) and torch.equal(g, w)
    assert small.run(insts) == big.run(insts)


def test_chains_inside_a_tree_merge_with_the_same_bits(programs) -> None:
    """With one `next` per step, each next branch and its ask's block merge (merge_chains); the logits equal
    those of the stream the template binds, every segment apart, bit for bit (E3)."""
    program = programs["big"]
    t = program.tree()
    insts = [deep(2, 1), deep(1, 1, " again")]
    for inst in insts:
        plan = plan_of(program, inst)
        assert len(merge_chains(plan).ids) == len(plan.ids) - len(inst["step"])
    for inst, got in zip(insts, program.label_logits(insts), strict=True):
        bound = bind_template(t.tree, t.program.template, [inst], program.fmt)
        assert torch.equal(got, program.engine.executor.run_stream(bound.stream))


# ---- the GraphEngine path, with a launcher that computes a path-dependent stand-in for logits -------------

STATIC = ("tokens", "positions", "segments", "read_rows", "read_labels", "read_nlabels")


def fake_recording(bucket: Bucket) -> Recording:
    """A recording with the static meta buffers and an fp32 [reads, labels] output after them."""
    from flidec.runtime.tables import meta_buffers

    buffers, offset = [], 0
    for b in meta_buffers(bucket):
        if b.name in STATIC:
            buffers.append(Buffer(b.name, "meta", "i64", b.shape, offset, ""))
            offset += buffers[-1].nbytes
    buffers.append(Buffer("logits", "activation", "fp32", (bucket.reads, bucket.labels), offset, ""))
    step = Step("fake", "fake", bucket.name, (1,), ())
    return Recording(bucket, tuple(buffers), offset + buffers[-1].nbytes, (step,), (), (), "logits")


class PathLauncher:
    """Per read: a hash of every (token, position) on its path (found through the segments table), plus
    each label id; -inf past its labels. What a fork-aware model's read depends on, and nothing else."""

    def __init__(self) -> None:
        self.engine: GraphEngine | None = None
        self.launches = 0

    def load(self, kernel: CompiledKernel) -> object:
        return kernel.name

    def launch(self, handle: object, launch) -> None:
        assert self.engine is not None
        self.launches += 1
        rec = next(r for r in self.engine.recordings.values() if r.bucket.name == handle)
        arena = self.engine.buffers.arena

        def view(name: str) -> torch.Tensor:
            b = rec.buffer(name)
            return arena[b.offset : b.offset + b.nbytes].view(b.torch_dtype).view(b.shape)

        tokens, positions, segs = view("tokens"), view("positions"), view("segments").tolist()
        out = view("logits")
        out.fill_(float("-inf"))
        reads = zip(view("read_rows").tolist(), view("read_nlabels").tolist(), strict=True)
        for r, (row, n) in enumerate(reads):
            if n == 0:
                continue
            s = next(k for k, (start, length, _, _, level) in enumerate(segs)
                     if level >= 0 and start <= row < start + length)
            value = 0
            while s >= 0:
                start, length, _, parent, _ = segs[s]
                rows = slice(start, min(start + length, row + 1))
                value += int((tokens[rows] * (positions[rows] + 1) * (positions[rows] + 7)).sum())
                s = parent
            out[r, :n] = float(value % 1_000_003) + 0.5 * view("read_labels")[r, :n].float()


def fake_program(program: Program) -> tuple[Program, PathLauncher]:
    t = program.tree()
    bs = [p.bucket for p in t.program.buckets]
    kernels = {b.name: CompiledKernel(b.name, "sm_90", b"", (), (), (), 1, 1, 0, "3.6.0") for b in bs}
    launcher = PathLauncher()
    engine = GraphEngine({f"{t.tree.name}/{b.name}": fake_recording(b) for b in bs}, kernels, {},
                         torch.device("cpu"), launcher, graphs=False)
    launcher.engine = engine
    return Program({t.tree.name: t}, program.fmt, engine, "jev", {}), launcher


def test_graph_engine_split_and_pipelined_equals_whole(programs) -> None:
    small, _ = fake_program(programs["small"])
    big, _ = fake_program(programs["big"])
    insts = instances()
    got = small.label_logits(insts)
    assert small.stats.streams >= 4
    want = big.label_logits(insts)
    assert big.stats.streams <= 2
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, torch.Tensor) and torch.isfinite(g[:, 0]).all() and torch.equal(g, w)
    for inst, g in zip(insts, got, strict=True):  # alone, one call per instance: the same rows
        (alone,) = small.label_logits([inst])
        assert torch.equal(alone, g)


def test_graph_engine_refuses_a_path_over_the_largest_bucket_per_row(programs) -> None:
    program, _ = fake_program(programs["small"])
    long = {**deep(1, 1), "context": "We plan a long trip to the far coast of the north. " * 12}
    got = program.label_logits([deep(1, 1), long, deep(2, 1)])
    assert isinstance(got[0], torch.Tensor) and isinstance(got[2], torch.Tensor)
    assert isinstance(got[1], InstanceError)
    assert got[1].problems[0].startswith("start_ok: its path alone needs ")
    assert got[1].problems[0].endswith(" rows; the largest bucket (r128) holds 128 rows")
    assert program.run([long])[0]["error"]["type"] == "InstanceError"
