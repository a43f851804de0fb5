"""Fork-aware reference ops (fork_conv, fork_attention, fork_gdn).

`..._matches_reference`: every row of a forked stream equals a float64 formulation of its own path (full
causal attention, the token-by-token delta rule, a direct causal conv) within tolerance (E2).
`..._is_exact`: every row of a forked stream equals, with torch.equal, the same op run on the plain
single-sequence pass of its path (E3), for fork points on and off the chunk boundary, empty roots, deep
fan-out and several instances placed in any order. Padding rows hold NaN inputs and must stay inert.
"""

import random

import pytest
import torch
import torch.nn.functional as F

from flidec.runtime.reference import ops
from flidec.testing.forests import pack_forest, path_nodes, path_stream
from flidec.testing.tolerance import TOLERANCE

DTYPES = [torch.float32, torch.bfloat16]
HQ, HKV, D = 4, 2, 16  # attention: GQA groups of 2
HK, HV, DK, DV = 2, 4, 16, 8  # Gated DeltaNet: each key head serves 2 value heads
C = 24  # conv channels
VOCAB = 4000


def _tree(lengths_by_parent: list[tuple[int, int]]):
    """Nodes with unique token ids per row (1, 2, ...); token 0 is the padding row."""
    nodes, nxt = [], 1
    for parent, length in lengths_by_parent:
        nodes.append((parent, list(range(nxt, nxt + length))))
        nxt += length
    assert nxt < VOCAB
    return nodes


def _fan_out(fan: int, lengths_per_level: list[list[int]]):
    """A root of 70 tokens, then one level per entry, every node with `fan` children of the listed lengths."""
    spec, frontier = [(-1, 70)], [0]
    for lengths in lengths_per_level:
        nxt = []
        for p in frontier:
            for j in range(fan):
                spec.append((p, lengths[j % len(lengths)]))
                nxt.append(len(spec) - 1)
        frontier = nxt
    return spec


TOPOLOGIES = {
    "off_boundary": [(-1, 100), (0, 1), (0, 63), (0, 64), (0, 65)],
    "on_boundary": [(-1, 64), (0, 1), (0, 63), (0, 64), (0, 65), (0, 0), (5, 3)],
    "empty_root": [(-1, 0), (0, 5), (0, 64), (0, 70), (3, 60)],
    "depth3_fan4": _fan_out(4, [[1, 63, 64, 65], [7, 0, 2, 30], [1, 5, 64, 3]]),
    "instances": [(-1, 10), (-1, 130), (0, 60), (1, 2), (-1, 1), (3, 64), (4, 64), (6, 1)],
}


def _inputs(dtype: torch.dtype):
    g = torch.Generator().manual_seed(7)
    x = {
        "q": torch.randn(VOCAB, HQ, D, generator=g),
        "k": torch.randn(VOCAB, HKV, D, generator=g),
        "v": torch.randn(VOCAB, HKV, D, generator=g),
        "gq": torch.randn(VOCAB, HK, DK, generator=g),
        "gk": torch.randn(VOCAB, HK, DK, generator=g),
        "gv": torch.randn(VOCAB, HV, DV, generator=g),
        "g": -F.softplus(torch.randn(VOCAB, HV, generator=g)) * 0.3,  # log-decay, fp32 like gdn_decay
        "beta": torch.sigmoid(torch.randn(VOCAB, HV, generator=g)),
        "c": torch.randn(VOCAB, C, generator=g),
    }
    x = {k: t if k in ("g", "beta") else t.to(dtype) for k, t in x.items()}
    for t in x.values():
        t[0] = float("nan")  # padding rows are poison: they must never reach a real row
    conv_w = torch.randn(C, 4, generator=g).to(dtype)
    return x, conv_w


def _ops(dtype):
    x, conv_w = _inputs(dtype)
    return {
        "conv": lambda tok, meta: ops.fork_conv(x["c"][tok], conv_w, meta),
        "attention": lambda tok, meta: ops.fork_attention(x["q"][tok], x["k"][tok], x["v"][tok], meta),
        "gdn": lambda tok, meta: ops.fork_gdn(
            x["gq"][tok], x["gk"][tok], x["gv"][tok], x["g"][tok], x["beta"][tok], meta
        ),
    }


def _placement(n: int, seed: int) -> list[int]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["conv", "attention", "gdn"])
@pytest.mark.parametrize("topology", list(TOPOLOGIES))
def test_fork_op_is_exact(topology, op, dtype):
    nodes = _tree(TOPOLOGIES[topology])
    fn = _ops(dtype)[op]
    stream = pack_forest(nodes, placement=_placement(len(nodes), 11), gap=3)
    out = fn(stream.tokens, stream.meta)
    assert out.dtype == dtype
    assert not out[stream.meta.segment_ids >= 0].isnan().any()
    for i, seg in enumerate(stream.meta.segments):
        plain = path_stream(nodes, i)
        expected = fn(plain.tokens, plain.meta)
        assert torch.equal(out[seg.start : seg.start + seg.length], expected[seg.pos0 : seg.end]), (i, seg)


def _path_tokens(nodes, i):
    return torch.tensor([t for j in path_nodes(nodes, i) for t in nodes[j][1]], dtype=torch.int64)


def _attention64(q, k, v):
    """Full-matrix causal GQA attention of one path, float64."""
    q, k, v = (t.double().transpose(0, 1) for t in (q, k, v))
    k, v = k.repeat_interleave(HQ // HKV, 0), v.repeat_interleave(HQ // HKV, 0)
    s = q @ k.transpose(-1, -2) * D**-0.5
    s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    return (s.softmax(-1) @ v).transpose(0, 1)


def _delta_rule64(q, k, v, g, beta):
    """The gated delta rule token by token (the recurrent form), float64."""
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    q = q / (q.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt() * DK**-0.5
    k = k / (k.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()
    q, k = q.repeat_interleave(HV // HK, 1), k.repeat_interleave(HV // HK, 1)
    state = torch.zeros(HV, DK, DV, dtype=torch.float64)
    out = []
    for t in range(q.shape[0]):
        state = state * g[t].exp()[:, None, None]
        delta = (v[t] - torch.einsum("hkv,hk->hv", state, k[t])) * beta[t][:, None]
        state = state + k[t][:, :, None] * delta[:, None, :]
        out.append(torch.einsum("hkv,hk->hv", state, q[t]))
    return torch.stack(out)


def _conv64(x, w):
    y = F.conv1d(x.double().T[None], w.double()[:, None, :], padding=3, groups=C)[0, :, : x.shape[0]].T
    return F.silu(y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["conv", "attention", "gdn"])
def test_fork_op_matches_reference(op, dtype):
    nodes = _tree(TOPOLOGIES["depth3_fan4"][:12] + [(11, 65)])
    x, conv_w = _inputs(dtype)
    fn = _ops(dtype)[op]
    stream = pack_forest(nodes, placement=_placement(len(nodes), 5), gap=2)
    out = fn(stream.tokens, stream.meta)
    for i, seg in enumerate(stream.meta.segments):
        tok = _path_tokens(nodes, i)
        if op == "conv":
            expected = _conv64(x["c"][tok], conv_w)
        elif op == "attention":
            expected = _attention64(x["q"][tok], x["k"][tok], x["v"][tok])
        else:
            expected = _delta_rule64(x["gq"][tok], x["gk"][tok], x["gv"][tok], x["g"][tok], x["beta"][tok])
        atol, rtol = TOLERANCE[dtype]
        torch.testing.assert_close(
            out[seg.start : seg.start + seg.length].double(), expected[seg.pos0 :], atol=atol, rtol=rtol
        )
