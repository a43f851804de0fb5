"""Forked Gated DeltaNet kernel: agrees with the reference op and a float64 recurrence (outputs and the saved
boundary states), and every path's rows equal its plain single-sequence stream bit for bit (E1, E3).

Runs on the CPU interpreter in CI (tiny shapes) and through the JIT on a GPU. Outputs and state slots start
NaN-poisoned, so an unwritten row or a slot read before it is written fails; padding rows of the inputs are
NaN too, so a kernel reading one fails.
"""

from __future__ import annotations

import pytest
import torch

from flidec.codegen import gdn
from flidec.codegen.gdn import ChunkWork, fork_gdn, gdn_spec, slot_buffer
from flidec.runtime.meta import CHUNK, StreamMeta
from flidec.runtime.reference import ops
from flidec.runtime.tables import gdn_tables, state_slots
from flidec.testing.forests import Node, pack_forest, path_nodes, path_stream
from flidec.testing.tolerance import TOLERANCE

# (parent, length): three levels, several roots; lengths 0, 1, 63, 64, 65; fork points on and off CHUNK
# (65, 128, 129, 64, 1, 71), a child of an empty segment, a straddling chunk that starts at position 0.
SHAPE_OFF_64 = [(-1, 65), (0, 63), (1, 1), (1, 0), (3, 5), (0, 64), (5, 65), (-1, 1), (7, 70), (8, 3),
                (-1, 0)]
# every fork point on a multiple of CHUNK: children start from a saved state with no tail
SHAPE_ON_64 = [(-1, 64), (0, 64), (1, 20), (0, 1), (-1, 128), (4, 64), (5, 63)]


def forest(shape: list[tuple[int, int]]) -> list[Node]:
    """Nodes whose tokens are unique ids, so activations can be looked up per token in any stream."""
    nodes, next_id = [], 1
    for parent, length in shape:
        nodes.append((parent, list(range(next_id, next_id + length))))
        next_id += length
    return nodes


def token_table(nodes: list[Node], hk: int, hv: int, dk: int, dv: int, dtype: torch.dtype,
                raw_gate: bool = False, seed: int = 0) -> dict[str, torch.Tensor]:
    """Per-token q, k, v, g, beta (or the raw gate projections a, b) for every token id of the forest; token 0
    (padding) gets NaN."""
    gen = torch.Generator().manual_seed(seed)
    vocab = 1 + sum(len(toks) for _, toks in nodes)
    table = {
        "q": torch.randn(vocab, hk, dk, generator=gen).to(dtype),
        "k": torch.randn(vocab, hk, dk, generator=gen).to(dtype),
        "v": torch.randn(vocab, hv, dv, generator=gen).to(dtype),
    }
    if raw_gate:
        table["a"] = torch.randn(vocab, hv, generator=gen).to(dtype)
        table["b"] = torch.randn(vocab, hv, generator=gen).to(dtype)
    else:
        table["g"] = -0.3 * torch.rand(vocab, hv, generator=gen)
        table["beta"] = torch.rand(vocab, hv, generator=gen)
    for t in table.values():
        t[0] = float("nan")
    return table


def lookup(table: dict[str, torch.Tensor], tokens: torch.Tensor, names: str, device: torch.device
           ) -> list[torch.Tensor]:
    return [table[n][tokens].to(device) for n in names.split()]


def recurrence(q, k, v, g, beta) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """float64 token-by-token gated delta rule over one sequence: outputs, and the state after each token."""
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    rep = v.shape[1] // k.shape[1]
    q, k = (torch.nn.functional.normalize(x, dim=-1, eps=0).repeat_interleave(rep, 1) for x in (q, k))
    q = q * q.shape[-1] ** -0.5
    state = torch.zeros(v.shape[1], k.shape[2], v.shape[2], dtype=torch.float64)
    outs, states = [], []
    for t in range(q.shape[0]):
        state = state * g[t].exp()[:, None, None]
        delta = v[t] - torch.einsum("hkv,hk->hv", state, k[t])
        state = state + beta[t][:, None, None] * torch.einsum("hk,hv->hkv", k[t], delta)
        outs.append(torch.einsum("hkv,hk->hv", state, q[t]))
        states.append(state)
    return torch.stack(outs) if outs else torch.zeros(0, *v.shape[1:], dtype=torch.float64), states


# fp32 through bf16x3 products (gdn.TILES: about 16 mantissa bits each, compounded over the WY inverse's
# chained products and the walk) and then the gated norm's division by the RMS: up to 1.2e-4 on the H200
SPLIT_FP32 = (5e-4, 5e-4)


def assert_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, split: bool = False) -> None:
    atol, rtol = SPLIT_FP32 if split and dtype == torch.float32 else TOLERANCE[dtype]
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol)


def segment_rows(meta: StreamMeta) -> torch.Tensor:
    return meta.segment_ids >= 0


def leaves(nodes: list[Node]) -> list[int]:
    """Nodes without children whose path has tokens."""
    return [i for i in range(len(nodes))
            if all(p != i for p, _ in nodes) and len(path_stream(nodes, i).tokens)]


def path_rows(meta: StreamMeta, node: int) -> torch.Tensor:
    """Stream rows of the path ending at `node`, root first (the forest helpers keep node i = segment i)."""
    segs = [meta.segments[i] for i in meta.ancestors[node] + (node,)]
    return torch.cat([torch.arange(s.start, s.start + s.length) for s in segs])


SHAPES = {"off_64": SHAPE_OFF_64, "on_64": SHAPE_ON_64}
# placement: rows out of tree order (last node first), padding rows before every segment
PLACEMENT = {name: list(reversed(range(len(shape)))) for name, shape in SHAPES.items()}


QKVGB = "q k v g beta"
QKVAB = "q k v a b"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", ["off_64", "on_64"])
# the TILES of 16 (tf32x3) and of 128 (w and ke as bf16 planes: bf16x3 needs Dk >= 64)
@pytest.mark.parametrize(("dk", "dv"), [(16, 16), (64, 128)])
def test_fork_gdn_matches_reference(dtype, shape, dk, dv, device) -> None:
    nodes = forest(SHAPES[shape])
    stream = pack_forest(nodes, PLACEMENT[shape], gap=2)
    meta = stream.meta
    hk, hv = 1, 2
    table = token_table(nodes, hk, hv, dk, dv, dtype)
    slots = slot_buffer(gdn_tables(meta).num_slots, hv, dk, dv, device)
    out = fork_gdn(*lookup(table, stream.tokens, QKVGB, device), meta, slots=slots).cpu()
    rows = segment_rows(meta)
    assert out.dtype == dtype
    assert not out[rows].isnan().any(), "a segment row was not written"
    assert out[~rows].isnan().all(), "a padding row was written"
    # the reference runs every row, padding too: give it zeros there
    clean = [torch.nan_to_num(x) for x in lookup(table, stream.tokens, QKVGB, torch.device("cpu"))]
    want = ops.fork_gdn(*clean, meta)
    assert_close(out[rows], want[rows], dtype)

    # each saved state equals the float64 recurrence's state on its path at the segment's last full chunk
    slots = slots.cpu()
    assert state_slots(meta), "the forest must make some segment save a state"
    for seg, slot in state_slots(meta).items():
        path = path_rows(meta, seg)
        boundary = meta.segments[seg].end // CHUNK * CHUNK
        outs, states = recurrence(*lookup(table, stream.tokens[path], QKVGB, torch.device("cpu")))
        assert_close(slots[slot], states[boundary - 1], torch.float32)
        assert_close(out[path], outs, dtype)


def test_fork_gdn_fused_gate_matches_reference(device) -> None:
    """With A_log and dt_bias the kernel computes g and beta from the raw projections a and b itself."""
    nodes = forest(SHAPE_OFF_64[:7])
    stream = pack_forest(nodes, gap=1)
    meta = stream.meta
    table = token_table(nodes, hk=1, hv=2, dk=16, dv=32, dtype=torch.float32, raw_gate=True)
    a_log, dt_bias = torch.tensor([0.3, -1.0]), torch.tensor([0.5, -2.0])
    out = fork_gdn(*lookup(table, stream.tokens, QKVAB, device), meta, a_log=a_log.to(device),
                   dt_bias=dt_bias.to(device)).cpu()
    q, k, v, a, b = (torch.nan_to_num(x) for x in lookup(table, stream.tokens, QKVAB, torch.device("cpu")))
    want = ops.fork_gdn(q, k, v, ops.gdn_decay(a, a_log, dt_bias), ops.gdn_beta(b), meta)
    rows = segment_rows(meta)
    assert not out[rows].isnan().any() and out[~rows].isnan().all()
    assert_close(out[rows], want[rows], torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("shape", "dk"), [("off_64", 16), ("on_64", 16), ("on_64", 128)])
def test_fork_gdn_is_exact(dtype, shape, dk, device, monkeypatch) -> None:
    """E3: every path's rows in the forest equal its plain single-sequence stream bit for bit; E1: also with
    the tables padded to a bigger bucket (more levels, items per level and slots), and with one walk program
    per value-head block walking all of a level's items in turn. With GQA (2 value heads per key head) and
    several blocks of value columns (Dv = 128): the forest's levels with several items take the wide walk,
    each plain stream the narrow one. Dk = 128 multiplies as the 0.8B checkpoint does (bf16x3)."""
    nodes = forest(SHAPES[shape])
    stream = pack_forest(nodes, PLACEMENT[shape], gap=2)
    table = token_table(nodes, hk=1, hv=2, dk=dk, dv=128, dtype=dtype, seed=1)
    args = lookup(table, stream.tokens, QKVGB, device)
    out = fork_gdn(*args, stream.meta)
    padded = fork_gdn(*args, stream.meta, levels=4, per_level=9, num_slots=7)
    rows = segment_rows(stream.meta).to(device)
    assert torch.equal(out[rows], padded[rows]) and padded[~rows].isnan().all()
    spec = gdn_spec(*args, out, fused_gate=False)
    assert spec.walkers(9) > 1  # else the default already walks every item in one program
    monkeypatch.setattr(gdn, "WALK_SMS", 1)
    assert spec.walkers(9) == 1
    one_walker = fork_gdn(*args, stream.meta, levels=4, per_level=9, num_slots=7)
    assert torch.equal(out[rows], one_walker[rows]) and one_walker[~rows].isnan().all()
    for leaf in leaves(nodes):
        plain = path_stream(nodes, leaf)
        want = fork_gdn(*lookup(table, plain.tokens, QKVGB, device), plain.meta)
        got = out[path_rows(stream.meta, leaf).to(device)]
        assert torch.equal(got, want), f"path {path_nodes(nodes, leaf)} differs from its plain stream"


def test_walk_takes_levels_of_several_items_wide(device, monkeypatch) -> None:
    """A level with one live item is walked by the narrow programs (one a value block), a level with several
    by the wide ones: with every walk's grid cut to its narrow programs, the root's rows are as before and
    the rows of its two children (one level, two items) are never computed."""
    nodes = forest([(-1, 130), (0, 20), (0, 70)])
    stream = pack_forest(nodes, gap=1)
    table = token_table(nodes, hk=1, hv=1, dk=16, dv=128, dtype=torch.float32, seed=3)
    args = lookup(table, stream.tokens, QKVGB, device)
    whole = fork_gdn(*args, stream.meta)
    spec = gdn_spec(*args, whole, fused_gate=False)
    narrow = spec.num_v_heads * spec.value_dim // spec.tiles.block_v
    assert spec.tiles.wide_v > spec.tiles.block_v and spec.state_grid(9)[0] > narrow
    monkeypatch.setattr(gdn.GdnSpec, "state_grid", lambda self, per_level: (narrow, 1))
    cut = fork_gdn(*args, stream.meta)
    root, children = path_rows(stream.meta, 0).to(device), segment_rows(stream.meta).to(device)
    children[root] = False
    assert not whole[children].isnan().any() and cut[children].isnan().all()
    assert torch.equal(cut[root], whole[root])


def test_fork_gdn_fused_gate_is_exact(device) -> None:
    nodes = forest(SHAPE_OFF_64[:7])
    stream = pack_forest(nodes, gap=3)
    table = token_table(nodes, hk=1, hv=1, dk=16, dv=16, dtype=torch.bfloat16, raw_gate=True, seed=2)
    gate = {"a_log": torch.tensor([0.2], dtype=torch.bfloat16, device=device),
            "dt_bias": torch.tensor([-0.5], dtype=torch.bfloat16, device=device)}
    out = fork_gdn(*lookup(table, stream.tokens, QKVAB, device), stream.meta, **gate)
    for leaf in leaves(nodes):
        plain = path_stream(nodes, leaf)
        want = fork_gdn(*lookup(table, plain.tokens, QKVAB, device), plain.meta, **gate)
        assert torch.equal(out[path_rows(stream.meta, leaf).to(device)], want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dv", [16, 128])  # one output block a head (16), two blocks of 64 (128)
def test_fork_gdn_fused_norm_is_exact(dtype, dv, device) -> None:
    """The output kernel with the gated RMS norm fused equals the unfused launches (the output kernel, then
    gated_rms_norm_kernel) bit for bit at every segment row, z read through a strided view as the z
    projection is; padding rows stay unwritten."""
    from flidec.codegen import eager, pointwise

    nodes = forest(SHAPE_OFF_64[:7])
    stream = pack_forest(nodes, gap=2)
    hv = 2
    table = token_table(nodes, hk=1, hv=hv, dk=64 if dv == 128 else 16, dv=dv, dtype=dtype, raw_gate=True,
                        seed=3)
    gen = torch.Generator().manual_seed(4)
    rows = stream.tokens.shape[0]
    z = torch.randn(rows, 2 * hv * dv, generator=gen).to(dtype)[:, hv * dv:].view(rows, hv, dv).to(device)
    weight = (1 + 0.5 * torch.randn(dv, generator=gen)).to(dtype).to(device)
    gate = {"a_log": torch.tensor([0.2, -0.4], dtype=dtype, device=device),
            "dt_bias": torch.tensor([-0.5, 0.3], dtype=dtype, device=device)}
    args = lookup(table, stream.tokens, QKVAB, device)
    o = fork_gdn(*args, stream.meta, **gate)
    want = torch.full_like(o, float("nan"))
    call = pointwise.emit_gated_rms_norm(o, z, weight, want, 1e-6)
    eager.launch(call.kernel, call.grid, *call.args, device=device, **call.constexprs)
    got = fork_gdn(*args, stream.meta, **gate, norm=(z, weight, 1e-6))
    seg = segment_rows(stream.meta).to(device)
    assert not got[seg].isnan().any() and got[~seg].isnan().all()
    assert torch.equal(got[seg], want[seg])
    clean = [torch.nan_to_num(x) for x in lookup(table, stream.tokens, QKVAB, torch.device("cpu"))]
    q, k, v, a, b = clean
    ref = ops.fork_gdn(q, k, v, ops.gdn_decay(a, gate["a_log"].cpu(), gate["dt_bias"].cpu()), ops.gdn_beta(b),
                       stream.meta)
    ref = ops.gated_rms_norm(ref.to(dtype), z.cpu(), weight.cpu(), 1e-6)
    assert_close(got.cpu()[seg.cpu()], ref[seg.cpu()], dtype, split=dv == 128)


def test_fork_gdn_refuses_unsupported_shapes() -> None:
    meta = pack_forest(forest([(-1, 4)])).meta
    q, k = torch.zeros(4, 2, 16), torch.zeros(4, 2, 16)
    g, beta = torch.zeros(4, 3), torch.zeros(4, 3)
    with pytest.raises(ValueError, match="cannot serve 3 value heads"):
        fork_gdn(q, k, torch.zeros(4, 3, 16), g, beta, meta)
    with pytest.raises(ValueError, match="head dims 16/48"):
        fork_gdn(q, k, torch.zeros(4, 2, 48), g[:, :2], beta[:, :2], meta)
    with pytest.raises(ValueError, match="fp32"):
        fork_gdn(q, k, torch.zeros(4, 2, 16), g[:, :2].bfloat16(), beta[:, :2].bfloat16(), meta)
    with pytest.raises(ValueError, match="a_log and dt_bias"):
        fork_gdn(q, k, torch.zeros(4, 2, 16), g[:, :2], beta[:, :2], meta, a_log=torch.zeros(2))


@pytest.mark.parametrize(("dk", "dv"), [(16, 16), (16, 128), (64, 128)])
def test_chunk_work_matches_the_signatures(dk, dv) -> None:
    """The scratch the kernels are launched on has the dtypes their signatures declare; with bf16x3 tiles (Dv
    = 128 and Dk >= 64) w and ke are bf16 hi and lo planes in the bytes of the fp32 tiles."""
    qk, v, gate = torch.zeros(4, 2, dk), torch.zeros(4, 2, dv), torch.zeros(4, 2)
    spec = gdn_spec(qk, qk, v, gate, gate, torch.zeros_like(v), fused_gate=False)
    work = ChunkWork.empty(3, spec, "cpu")
    dtypes = {torch.float32: "*fp32", torch.bfloat16: "*bf16"}
    for sig, parts in ((spec.prep_signature(), ChunkWork.PREP_PARTS),
                       (spec.state_signature(), ChunkWork.STATE_PARTS),
                       (spec.out_signature(), ChunkWork.OUT_PARTS)):
        want = {name: dtypes[x.dtype] for name, x in zip(parts, work.parts(parts), strict=True)}
        assert {name: sig[name] for name in parts} == want
    assert spec.split == (dv == 128 and dk >= 64)
    assert (spec.tiles.dot, spec.tiles.out_dot) == (("bf16x3",) * 2 if spec.split else ("tf32x3",) * 2)
    assert work.w.dtype == work.ke.dtype == (torch.bfloat16 if spec.split else torch.float32)
    assert work.w.nbytes == work.ke.nbytes == work.qe.nbytes == 3 * 2 * CHUNK * dk * 4


@pytest.mark.parametrize("dk", [16, 128])  # tf32x3 products, and fp32 q and k split for bf16x3 (SPLIT_QK)
def test_fork_gdn_fp32_activations_normed_into_bf16(dk, device) -> None:
    """fp32 activations (E4): fp32 q, k, v, a, b with the weights' bf16 A_log, dt_bias and norm weight, the
    output normed into bf16 for the out projection. The fused norm equals the unfused launches (o stored in
    fp32, then normed into bf16) bit for bit, so o is not rounded before the norm; the reference computes
    the same function within bf16's tolerance; every path equals its plain stream (E3)."""
    from flidec.codegen import eager, pointwise

    nodes = forest(SHAPE_OFF_64[:7])
    stream = pack_forest(nodes, gap=2)
    hv, dv = 2, 128
    table = token_table(nodes, hk=1, hv=hv, dk=dk, dv=dv, dtype=torch.float32, raw_gate=True, seed=5)
    gen = torch.Generator().manual_seed(6)
    rows = stream.tokens.shape[0]
    z = torch.randn(rows, hv, dv, generator=gen).to(device)
    weight = (1 + 0.5 * torch.randn(dv, generator=gen)).to(torch.bfloat16).to(device)
    gate = {"a_log": torch.tensor([0.2, -0.4], dtype=torch.bfloat16, device=device),
            "dt_bias": torch.tensor([-0.5, 0.3], dtype=torch.bfloat16, device=device)}
    args = lookup(table, stream.tokens, QKVAB, device)
    o = fork_gdn(*args, stream.meta, **gate)
    assert o.dtype == torch.float32
    unfused = torch.full(o.shape, float("nan"), dtype=torch.bfloat16, device=device)
    call = pointwise.emit_gated_rms_norm(o, z, weight, unfused, 1e-6)
    eager.launch(call.kernel, call.grid, *call.args, device=device, **call.constexprs)

    def normed(tokens: torch.Tensor, meta: StreamMeta, zs: torch.Tensor) -> torch.Tensor:
        out = torch.full((tokens.shape[0], hv, dv), float("nan"), dtype=torch.bfloat16, device=device)
        return fork_gdn(*lookup(table, tokens, QKVAB, device), meta, **gate, out=out,
                        norm=(zs, weight, 1e-6))

    got = normed(stream.tokens, stream.meta, z)
    seg = segment_rows(stream.meta).to(device)
    assert not got[seg].isnan().any() and got[~seg].isnan().all()
    assert torch.equal(got[seg], unfused[seg])
    q, k, v, a, b = (torch.nan_to_num(x) for x in lookup(table, stream.tokens, QKVAB, torch.device("cpu")))
    ref = ops.fork_gdn(q, k, v, ops.gdn_decay(a, gate["a_log"].cpu(), gate["dt_bias"].cpu()), ops.gdn_beta(b),
                       stream.meta)
    ref = ops.gated_rms_norm(ref, z.cpu(), weight.cpu(), 1e-6, torch.bfloat16)
    assert ref.dtype == torch.bfloat16
    assert_close(got.cpu()[seg.cpu()], ref[seg.cpu()], torch.bfloat16)
    for leaf in leaves(nodes):
        plain = path_stream(nodes, leaf)
        path = path_rows(stream.meta, leaf).to(device)
        assert torch.equal(got[path], normed(plain.tokens, plain.meta, z[path])), f"path to {leaf} differs"
