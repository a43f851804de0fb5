"""Recordings of the tiny Qwen3.5: the plan (complete, arena without live overlaps, JSON round trip, one
forked Gated DeltaNet launch per tree level, a missing kernel named and refused), and playing it under the
interpreter with every step a kernel: label logits match the reference executor within TOLERANCE, and a
forked stream's reads (three levels, forks inside a chunk) equal their plain single-sequence passes bit for
bit (torch.equal)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.fx

from flidec.codegen import recording
from flidec.ir.program import Bucket
from flidec.passes import graph
from flidec.passes.manager import run
from flidec.passes.pipeline import GRAPH_PIPELINE  # registers the passes
from flidec.runtime.meta import Read, Segment, build_meta, linear_stream, pad_meta
from flidec.runtime.recording import MODEL_DTYPES, recording_from_json, write_recording
from flidec.runtime.reference import op_table
from flidec.runtime.reference.qwen3_5 import Qwen35
from flidec.testing.tolerance import TOLERANCE

PIPELINE = list(GRAPH_PIPELINE)
BUCKET = Bucket("b0", rows=96, segments=6, depth=3, reads=4, labels=5)


# weights and activations (E4): fp32 throughout, bf16 weights with fp32 activations (`--activations fp32`),
# bf16 throughout (flidec compile's default)
@pytest.fixture(scope="module", params=["fp32", "bf16", "bf16/bf16"])
def model(request, tiny_checkpoint):
    weights, _, activations = request.param.partition("/")
    activations = MODEL_DTYPES[activations or "fp32"]
    module = Qwen35.from_pretrained(tiny_checkpoint, MODEL_DTYPES[weights], activations)
    traced = torch.fx.symbolic_trace(module)
    rec = recording.record(run(traced, PIPELINE).ir, BUCKET)
    weights = {k: v.detach() for k, v in module.named_parameters(remove_duplicate=False)}
    return traced, rec, weights


def forked():
    """A root of 66 tokens (one full chunk), two children forking at 66 (mid-chunk: they recompute rows 64,
    65), a grandchild whose straddling chunk gathers tail rows from two ancestors, and a second root packed
    after them (two work items on level 0)."""
    segs = (Segment(0, 66, 0, -1, 0), Segment(66, 4, 66, 0, 1), Segment(70, 7, 66, 0, 1),
            Segment(77, 3, 73, 2, 2), Segment(80, 9, 0, -1, 0))
    reads = (Read(69, (5, 6, 7)), Read(76, (9, 10, 11, 12, 13)), Read(79, (1, 2)), Read(88, (3, 4)))
    tokens = torch.randint(0, 5000, (89,), generator=torch.Generator().manual_seed(1))
    return tokens, build_meta(segs, reads, 89)


def test_recording_is_complete_and_round_trips(model) -> None:
    _, rec, _ = model
    assert rec.missing == () and rec.complete
    blob = write_recording(rec)
    assert recording_from_json(json.loads(blob)) == rec
    assert json.loads(blob)["complete"] is True
    ops = [s.op for s in rec.steps]
    assert ops.count("fork_attention_gated") == 1
    # GDN layers: (qkv, a, b, z), out; the attention layer: (q, k, v), o; every MLP: silu(gate) * up, down
    assert ops.count("linear_group") == 4 and ops.count("linear_silu_mul") == 4 and ops.count("linear") == 8
    assert "silu_mul" not in ops
    assert ops[0] == "embed" and ops[-1] == "label_head"


def test_gemms_compute_the_streams_rows_and_past_the_trim_its_reads(model) -> None:
    """Every projection's rows pointer (codegen/gemm.py ROWS) is a live_rows meta buffer: the stream's rows,
    or its reads for the last layer's MLP, which trim_reads runs at the read rows; a stream fills the same
    counts padded to the bucket or not."""
    _, rec, _ = model
    buffers = {b.name: b for b in rec.buffers}
    gemms = [s for s in rec.steps if s.op in ("linear", "linear_group", "linear_silu_mul")]
    fills = [buffers[s.args[-1].buffer].fill for s in gemms]
    assert {buffers[s.args[-1].buffer].region for s in gemms} == {"meta"}
    # the last MLP (silu(gate) * up, then down) is the only work over the reads
    assert fills == ["live_rows(stream=1,reads=0)"] * (len(gemms) - 2) + ["live_rows(stream=0,reads=1)"] * 2
    assert [s.grid[0] for s in gemms[-2:]] == [1, 1] and gemms[-2].op == "linear_silu_mul"
    tokens, meta = forked()
    padded = torch.zeros(BUCKET.rows, dtype=torch.int64)
    padded[: len(tokens)] = tokens
    for stream in ((tokens, meta), (padded, pad_meta(meta, BUCKET.rows))):
        tables = recording.fill_tables(rec, *stream)
        assert tables["stream_rows"].tolist() == [89] and tables["read_count"].tolist() == [4]


def test_row_wise_launches_and_the_conv_compute_the_streams_rows_then_its_reads(model) -> None:
    """Every launch but the attention's, the Gated DeltaNet's, the label head's and the saved points' row
    copies (their maps bound them) takes a rows pointer (codegen/pointwise.py ROWS): the norms, rotary, adds,
    gates, embedding and conv the stream's rows, the read gather and everything after it (the last MLP's
    norm and add, the final norm) the read count."""
    _, rec, _ = model
    buffers = {b.name: b for b in rec.buffers}
    signatures = {k.key: [n for n, t in k.signature if t != "constexpr"] for k in rec.kernels}
    fills = []
    for step in rec.steps:
        params = signatures[step.kernel]
        if "rows_ptr" not in params:
            unbounded = step.op.startswith(("fork_attention", "fork_gdn"))
            assert unbounded or step.op in ("label_head", "saved_rows"), step.op
            continue
        arg = step.args[params.index("rows_ptr")]
        assert buffers[arg.buffer].region == "meta"
        fills.append((step.op, buffers[arg.buffer].fill))
    gather = next(i for i, (op, _) in enumerate(fills) if op == "gather_rows")
    assert fills[0] == ("embed", "live_rows(stream=1,reads=0)")
    assert {f for _, f in fills[:gather]} == {"live_rows(stream=1,reads=0)"}
    assert {f for _, f in fills[gather:]} == {"live_rows(stream=0,reads=1)"}
    assert {"fork_conv_static", "rotary", "add_rms_norm"} <= {op for op, _ in fills[:gather]}
    assert [op for op, _ in fills[gather:]] == ["gather_rows", "rms_norm", "linear_silu_mul", "linear", "add",
                                                "rms_norm_f32"]


def test_a_bucket_with_as_many_reads_as_rows_bounds_its_gemms_by_both() -> None:
    """When a bucket's rows and reads are equal a projection's rows may be either, so its bound covers both;
    a projection over neither count is refused at compile time."""
    from flidec.runtime import tables

    ctx = recording.EmitContext(Bucket("b", rows=64, segments=2, depth=1, reads=64, labels=2))
    recording._live_rows(ctx, torch.empty(64, 8, device="meta"))
    assert ctx.derived == {"stream_rows_or_reads": ((1,), torch.int32, "live_rows(stream=1,reads=1)")}
    with pytest.raises(ValueError, match="neither the bucket's 64 rows nor its 64 reads"):
        recording._live_rows(ctx, torch.empty(32, 8, device="meta"))
    reads = tuple(Read(0, (1, 2)) for _ in range(5))  # five reads of one row: more reads than rows
    meta = build_meta((Segment(0, 3, 0, -1, 0),), reads, 3)
    req = tables.FillRequest("stream_rows_or_reads", "live_rows(stream=1,reads=1)", (1,))
    filled = tables.fill_meta([req], torch.zeros(3, dtype=torch.int64), meta, ctx.bucket)
    assert filled[req.name].tolist() == [5]


def test_gdn_launches_a_prep_one_state_walk_per_level_then_the_outputs_on_the_bucket_tables(model) -> None:
    _, rec, _ = model
    # gates computed in the prep, norm in the outputs
    gdn = [s for s in rec.steps if s.op == "fork_gdn_normed"]
    per_layer = 2 + BUCKET.depth
    assert len(gdn) == 3 * per_layer  # three GDN layers
    preps, outs = gdn[::per_layer], gdn[per_layer - 1 :: per_layer]
    walks = [s for i, s in enumerate(gdn) if 0 < i % per_layer < per_layer - 1]
    chunks = BUCKET.rows // 64 + 2 * BUCKET.segments  # tables.max_chunks
    assert {len(s.args) for s in preps} == {17} and {len(s.args) for s in walks} == {9}
    assert {len(s.args) for s in outs} == {10}
    # Dv 16: one block
    assert {s.grid for s in preps} == {(4, chunks)} and {s.grid for s in outs} == {(4, chunks)}
    assert [s.args[7].value for s in walks] == [lvl * BUCKET.segments for lvl in range(BUCKET.depth)] * 3
    assert {s.args[8].value for s in walks} == {BUCKET.segments}  # a level's items: where walkers stop
    # 4 value-head blocks a level (Dv 16: one width), each with a program per item here (gdn.WALK_SMS: up to
    # 33 for 4 blocks), in one grid axis
    assert {s.grid for s in walks} == {(4 * BUCKET.segments, 1)}
    buffers = {b.name: b for b in rec.buffers}
    items, tails, table = (buffers[preps[0].args[i].buffer] for i in (7, 8, 9))
    capacity = f"per_level=6,slots=6,chunks={chunks}"
    assert (items.region, items.shape, items.fill) == ("meta", (BUCKET.depth * BUCKET.segments, 8),
                                                        f"gdn_items({capacity})")
    assert (tails.region, tails.shape, tails.fill) == ("meta", (BUCKET.depth * BUCKET.segments, 64),
                                                        f"gdn_tails({capacity})")
    assert (table.region, table.shape, table.fill) == ("meta", (chunks, 2), f"gdn_chunks({capacity})")
    slots = buffers[walks[0].args[6].buffer]
    assert (slots.region, slots.shape) == ("activation", (BUCKET.segments, 4, 16, 16))
    assert {s.args[6].buffer for s in walks} == {slots.name}  # one slot buffer, reused by every layer
    w, u, qe, ke, attn, decay = (buffers[a.buffer] for a in preps[0].args[10:16])
    assert [b.shape for b in (w, u, qe, ke)] == [(chunks, 4, 64, 16)] * 4
    assert (attn.shape, decay.shape) == ((chunks, 4, 64, 64), (chunks, 4))
    states = buffers[walks[0].args[4].buffer]
    assert states.shape == (chunks, 4, 16, 16)
    # every layer shares one chunk work: the walks read the prep's parts, the outputs the walks' results
    assert {tuple(a.buffer for a in s.args[10:16]) for s in preps} == {(w.name, u.name, qe.name, ke.name,
                                                                         attn.name, decay.name)}
    assert {tuple(a.buffer for a in s.args[:5]) for s in walks} == {(w.name, u.name, ke.name, decay.name,
                                                                      states.name)}
    assert {tuple(a.buffer for a in s.args[:4]) for s in outs} == {(qe.name, attn.name, u.name, states.name)}
    assert {s.args[5].buffer for s in outs} == {items.name}
    assert {s.args[6].buffer for s in outs} == {table.name}


def test_a_step_without_kernel_is_named_and_refuses_to_play(model, monkeypatch) -> None:
    traced, _, weights = model
    monkeypatch.delitem(recording.EMITTERS, op_table.BY_NAME["fork_gdn_normed"])
    rec = recording.record(run(traced, PIPELINE).ir, BUCKET)
    assert rec.missing == ("fork_gdn_normed",)
    assert json.loads(write_recording(rec))["complete"] is False
    with pytest.raises(RuntimeError, match="fork_gdn_normed has no kernel"):
        recording.play(rec, *forked(), weights)


def test_arena_buffers_never_overlap_while_live(model) -> None:
    _, rec, _ = model
    first, last = {}, {}
    for i, s in enumerate(rec.steps):
        for a in s.args:
            first.setdefault(a.buffer, i)
            last[a.buffer] = i
    arena = [b for b in rec.buffers if b.region in ("meta", "activation")]
    for b in arena:
        assert b.offset % recording.ALIGN == 0 and b.offset + b.nbytes <= rec.arena_bytes

    def span(b):
        if b.region == "meta" or b.name == rec.output:
            return (0, len(rec.steps))
        return (first[b.name], last[b.name])

    for i, a in enumerate(arena):
        for b in arena[i + 1:]:
            (fa, la), (fb, lb) = span(a), span(b)
            if fa <= lb and fb <= la:
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (a.name, b.name)


def test_playing_matches_the_reference_executor(model, tiny_checkpoint) -> None:
    """fp32: within TOLERANCE of the reference executor. bf16: the kernels round once where the reference
    rounds between steps (silu * up, the attention gate, rotary), so after four layers the two bf16 answers
    part by more than one op's tolerance; the played answer must be at least as close to the fp32 reference
    as the bf16 reference executor is (plus one TOLERANCE)."""
    traced, rec, weights = model
    tokens, meta = forked()
    want = graph.run_graph(traced, tokens, meta, BUCKET)
    got = recording.play(rec, tokens, meta, weights)
    reads, labels = want.shape
    assert (got[reads:] == float("-inf")).all()
    got = got[:reads, :labels]
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    dtype = weights["norm.weight"].dtype
    atol, rtol = TOLERANCE[dtype]
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, atol=atol, rtol=rtol)
        return
    fp32 = graph.run_graph(torch.fx.symbolic_trace(Qwen35.from_pretrained(tiny_checkpoint, torch.float32)),
                           tokens, meta, BUCKET)
    finite = torch.isfinite(want)
    reference_error = (want - fp32)[finite].abs().max()
    assert (got - fp32)[finite].abs().max() <= reference_error + atol


def test_played_reads_equal_their_plain_passes(model) -> None:
    _, rec, weights = model
    tokens, meta = forked()
    got = recording.play(rec, tokens, meta, weights)
    for i, read in enumerate(meta.reads):
        seg = int(meta.segment_ids[read.row])
        rows = [r for s in (*meta.ancestors[seg], seg)
                for r in range(meta.segments[s].start, meta.segments[s].start + meta.segments[s].length)]
        plain = linear_stream(tokens[rows].tolist(), {len(rows) - 1: read.labels})
        alone = recording.play(rec, plain.tokens, plain.meta, weights)
        assert torch.equal(got[i], alone[0]), f"read {i} differs from its plain pass"


def test_gdn_norm_fusion_leaves_the_played_answers_unchanged(model) -> None:
    """passes/fuse_gdn_norm.py: the label logits played with the gated norm in the Gated DeltaNet's output
    kernel equal, bit for bit, those played with the norm launched on its own."""
    traced, rec, weights = model
    unfused = recording.record(run(traced, [p for p in PIPELINE if p != "fuse_gdn_norm"]).ir, BUCKET)
    assert [s.op for s in unfused.steps].count("gated_rms_norm") == 3
    assert "gated_rms_norm" not in [s.op for s in rec.steps]
    tokens, meta = forked()
    want = recording.play(unfused, tokens, meta, weights)
    assert torch.isfinite(want[:, 0]).all()
    assert torch.equal(recording.play(rec, tokens, meta, weights), want)
