"""The model-graph passes on the tiny Qwen3.5: golden IR text before/after each pass, answers unchanged
(torch.equal on the reference executor, fp32 and bf16, on a forked stream with fork points off the chunk
grid), and the rendered errors of a pipeline in the wrong order or a graph the fx verifier rejects.

Regenerate the goldens with FLIDEC_UPDATE_GOLDEN=1 (then read the diff)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.fx

from flidec.ir.program import Bucket
from flidec.passes import graph
from flidec.passes.manager import PassError, run
from flidec.passes.pipeline import GRAPH_PIPELINE  # registers the passes
from flidec.runtime.meta import Read, Segment, build_meta
from flidec.runtime.reference.qwen3_5 import Qwen35
from flidec.runtime.tables import META_BUFFERS

GOLDEN = Path(__file__).parent / "golden"
PIPELINE = list(GRAPH_PIPELINE)
BUCKET = Bucket("b0", rows=128, segments=8, depth=4, reads=4, labels=6)


def trace(checkpoint, dtype: torch.dtype) -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(Qwen35.from_pretrained(checkpoint, dtype))


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def traced(request, tiny_checkpoint) -> torch.fx.GraphModule:
    return trace(tiny_checkpoint, {"fp32": torch.float32, "bf16": torch.bfloat16}[request.param])


@pytest.fixture(scope="module")
def traced_fp32(tiny_checkpoint) -> torch.fx.GraphModule:
    """The graph text does not depend on the dtype: one golden set, from the fp32 graph."""
    return trace(tiny_checkpoint, torch.float32)


@pytest.fixture(scope="module")
def answers(traced) -> torch.Tensor:
    """The traced graph's answers on the forked stream: what every stage must reproduce."""
    return graph.run_graph(traced, *forked_stream(), BUCKET)


def forked_stream():
    """A root of 70 tokens, two branches (one with a nested child) forking off the 64-token chunk grid."""
    segs = (Segment(0, 70, 0, -1, 0), Segment(70, 5, 70, 0, 1), Segment(75, 9, 70, 0, 1),
            Segment(84, 3, 79, 2, 2))
    reads = (Read(74, (5, 6, 7)), Read(83, (9, 10)), Read(86, (11, 12, 13, 14)))
    tokens = torch.randint(0, 5000, (90,), generator=torch.Generator().manual_seed(0))
    return tokens, build_meta(segs, reads, 90)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("FLIDEC_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), (f"{name}: the IR differs from {path} (FLIDEC_UPDATE_GOLDEN=1 rewrites "
                                      "it)")


@pytest.mark.parametrize("upto", range(len(PIPELINE) + 1))
def test_golden_ir_after_each_pass(traced_fp32, upto) -> None:
    ir = run(traced_fp32, PIPELINE[:upto]).ir if upto else traced_fp32
    check_golden(f"graph_{PIPELINE[upto - 1] if upto else 'traced'}", graph.render(ir))


@pytest.mark.parametrize("upto", range(1, len(PIPELINE) + 1))
def test_answers_are_equal_after_each_pass(traced, answers, upto) -> None:
    tokens, meta = forked_stream()
    before = answers
    ir = run(traced, PIPELINE[:upto]).ir
    after = graph.run_graph(ir, tokens, meta, BUCKET)
    reads, labels = before.shape
    assert after.shape == ((BUCKET.reads, BUCKET.labels) if graph.is_lowered(ir) else (reads, labels))
    assert torch.equal(after[:reads, :labels], before), f"answers changed by {PIPELINE[upto - 1]}"
    assert torch.isfinite(before[0, :3]).all()
    assert (after[reads:] == float("-inf")).all() and (after[:, labels:] == float("-inf")).all()


def test_passes_do_not_mutate_their_input(traced) -> None:
    text = graph.render(traced)
    run(traced, PIPELINE)
    assert graph.render(traced) == text


def test_lowered_graph_reads_only_static_buffers(traced) -> None:
    lowered = run(traced, PIPELINE[:2]).ir
    inputs = [n.target for n in lowered.graph.nodes if n.op == "placeholder"]
    assert inputs == ["tables"]
    read = sorted(n.args[1] for n in lowered.graph.nodes if n.name.startswith("meta_"))
    assert read == sorted(META_BUFFERS)


def test_fork_lowering_before_the_label_head_is_refused(traced) -> None:
    with pytest.raises(PassError) as e:
        run(traced, ["lower_forks"])
    assert str(e.value) == ("in pass lower_forks (the first pass): %label_logits: label_logits reads the "
                            "meta object and has no lowering (run label_head first for label_logits)")


def test_trimming_without_the_label_head_is_refused(traced) -> None:
    with pytest.raises(PassError, match=r"^in pass trim_reads \(the first pass\): trim_reads needs the label "
                                        r"head's read gather \(run label_head first\)$"):
        run(traced, ["trim_reads"])


def test_verifier_rejects_a_lowered_graph_reading_meta(traced) -> None:
    lowered = run(traced, PIPELINE[:2]).ir
    g = lowered.graph
    conv = next(n for n in g.nodes if graph.op_name(n) == "fork_conv_static")
    from flidec.runtime.reference import ops

    conv.target = ops.fork_conv
    assert graph.verify(lowered) == [f"%{conv.name}: fork_conv reads a StreamMeta in a lowered graph"]
    tables = graph.placeholder(lowered, "tables")
    with g.inserting_after(tables):
        bad = g.call_function(ops.rms_norm, (conv, conv, 1e-6))  # used before its argument is defined
    problems = graph.verify(lowered)
    assert len(problems) == 1 and "used before it has been defined" in problems[0] and bad.name in problems[0]


def test_gdn_norm_fusion_needs_a_lowered_graph(traced) -> None:
    with pytest.raises(PassError, match=r"^in pass fuse_gdn_norm \(the first pass\): fuse_gdn_norm needs a "
                                        r"lowered graph \(run lower_forks first\)$"):
        run(traced, ["fuse_gdn_norm"])


def test_gdn_norm_fusion_keeps_a_gdn_output_with_other_users(traced_fp32) -> None:
    """A Gated DeltaNet output that something besides its norm reads is kept, and so is the norm."""
    ir = run(traced_fp32, PIPELINE[: PIPELINE.index("fuse_gdn_norm")]).ir
    first = next(n for n in ir.graph.nodes if graph.op_name(n) == "fork_gdn_gated")
    with ir.graph.inserting_after(first):
        ir.graph.call_function(torch.neg, (first,))
    fused = run(ir, ["fuse_gdn_norm"]).ir
    ops = [graph.op_name(n) for n in fused.graph.nodes]
    assert ops.count("fork_gdn_gated") == 1 and ops.count("gated_rms_norm") == 1
    assert ops.count("fork_gdn_normed") == 2 and "neg" not in ops  # the extra user was dead: dropped after
