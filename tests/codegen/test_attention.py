"""Fork attention kernel: agrees with a float64 path-attention oracle, and is exact across streams (E1, E3).

Runs on the CPU interpreter in CI (tiny streams) and through the JIT on a GPU. Outputs start NaN-poisoned
(fork_attention's default), so a segment row the kernel never writes fails the comparisons.
"""

from __future__ import annotations

import math

import pytest
import torch

from flidec.codegen.attention import fork_attention
from flidec.runtime.meta import Segment, StreamMeta, build_meta
from flidec.runtime.reference import ops
from flidec.testing.tolerance import TOLERANCE


def assert_close(got: torch.Tensor, want: torch.Tensor) -> None:
    atol, rtol = TOLERANCE[got.dtype]
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol)


def forest(nodes: list[tuple[int, int]], gaps: list[int]) -> StreamMeta:
    """Segments from (parent, length) in stream order, `gaps[i]` padding rows before segment i (and one
    trailing gap when gaps is one longer)."""
    segs: list[Segment] = []
    row = 0
    for (parent, length), gap in zip(nodes, gaps, strict=False):
        row += gap
        pos0 = 0 if parent < 0 else segs[parent].end
        level = 0 if parent < 0 else segs[parent].level + 1
        segs.append(Segment(start=row, length=length, pos0=pos0, parent=parent, level=level))
        row += length
    return build_meta(tuple(segs), (), row + sum(gaps[len(nodes):]))


def two_instances(fork_on_64: bool) -> StreamMeta:
    """Instance one: a root with two children, the second with a child; instance two: a root and a child.
    With fork_on_64 the first instance's fork points are 64 and 128, else 70 and 100 (inside key tiles)."""
    if fork_on_64:
        nodes = [(-1, 64), (-1, 90), (0, 40), (0, 64), (1, 20), (3, 25)]
    else:
        nodes = [(-1, 70), (-1, 90), (0, 30), (0, 50), (1, 20), (2, 20)]
    return forest(nodes, [0, 3, 0, 5, 0, 2, 4])


def path_rows(meta: StreamMeta, seg: int) -> torch.Tensor:
    chain = meta.ancestors[seg] + (seg,)
    return torch.cat([torch.arange(meta.segments[a].start, meta.segments[a].start + meta.segments[a].length)
                      for a in chain])


def naive_fork_attention(q, k, v, meta: StreamMeta, gate=None) -> torch.Tensor:
    """float64 oracle: each query attends to the rows of its path up to its own logical position."""
    out = torch.full(q.shape, float("nan"), dtype=torch.float64)
    group = q.shape[1] // k.shape[1]
    for i, s in enumerate(meta.segments):
        rows = path_rows(meta, i)
        qs = q[s.start:s.start + s.length].double()
        ks = k[rows].double().repeat_interleave(group, dim=1)
        vs = v[rows].double().repeat_interleave(group, dim=1)
        scores = torch.einsum("lhd,phd->hlp", qs, ks) / math.sqrt(q.shape[2])
        causal = torch.arange(len(rows))[None, :] <= (s.pos0 + torch.arange(s.length))[:, None]
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        o = torch.einsum("hlp,phd->lhd", probs, vs)
        if gate is not None:
            o = o * torch.sigmoid(gate[s.start:s.start + s.length].double())
        out[s.start:s.start + s.length] = o
    return out


def inputs(meta: StreamMeta, hq: int, hkv: int, d: int, dtype: torch.dtype, device: torch.device,
           seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    t = meta.num_rows
    q, k, v, gate = (torch.randn(t, h, d, generator=g) for h in (hq, hkv, hkv, hq))
    return tuple(x.to(dtype).to(device) for x in (q, k, v, gate))


def segment_mask(meta: StreamMeta) -> torch.Tensor:
    return meta.segment_ids >= 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fork_on_64", [True, False])
@pytest.mark.parametrize("gated", [False, True])
def test_fork_attention_matches_naive(dtype, fork_on_64, gated, device) -> None:
    meta = two_instances(fork_on_64)
    q, k, v, gate = inputs(meta, hq=4, hkv=2, d=32, dtype=dtype, device=device)
    out = fork_attention(q, k, v, meta, gate if gated else None).cpu()
    want = naive_fork_attention(q.cpu(), k.cpu(), v.cpu(), meta, gate.cpu() if gated else None)
    rows = segment_mask(meta)
    assert out.dtype == dtype
    assert not out[rows].isnan().any(), "a segment row was not written"
    assert out[~rows].isnan().all(), "a padding row was written"
    assert_close(out[rows], want[rows])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fork_on_64", [True, False])
def test_fork_attention_matches_reference(dtype, fork_on_64, device) -> None:
    meta = two_instances(fork_on_64)
    q, k, v, gate = inputs(meta, hq=4, hkv=2, d=64, dtype=dtype, device=device, seed=1)
    rows = segment_mask(meta)
    out = fork_attention(q, k, v, meta).cpu()
    want = ops.fork_attention(q.cpu(), k.cpu(), v.cpu(), meta)
    assert_close(out[rows], want[rows])
    # the reference has no gate: Qwen3.5 multiplies the attention output by sigmoid(gate) after it
    gated = fork_attention(q, k, v, meta, gate).cpu()
    assert_close(gated[rows], want[rows].double() * torch.sigmoid(gate.cpu()[rows].double()))


def test_fork_attention_head_dim_256_matches_naive(device) -> None:
    meta = forest([(-1, 70), (0, 30), (0, 20)], [0, 2, 0])
    q, k, v, gate = inputs(meta, hq=2, hkv=1, d=256, dtype=torch.bfloat16, device=device)
    out = fork_attention(q, k, v, meta, gate).cpu()
    want = naive_fork_attention(q.cpu(), k.cpu(), v.cpu(), meta, gate.cpu())
    rows = segment_mask(meta)
    assert_close(out[rows], want[rows])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fork_on_64", [True, False])
def test_fork_attention_is_exact(dtype, fork_on_64, device) -> None:
    """E3: every row of a forked stream equals, bit for bit, the same path's plain single-sequence stream;
    E1: also when the tables are padded to a larger bucket (more tiles, deeper paths, more segments)."""
    meta = two_instances(fork_on_64)
    q, k, v, gate = inputs(meta, hq=2, hkv=1, d=32, dtype=dtype, device=device)
    out = fork_attention(q, k, v, meta, gate)
    padded = fork_attention(q, k, v, meta, gate, num_tiles=40, depth=5, num_segments=9)
    assert torch.equal(out[segment_mask(meta)], padded[segment_mask(meta)])
    leaves = [i for i in range(len(meta.segments)) if all(s.parent != i for s in meta.segments)]
    for leaf in leaves:
        rows = path_rows(meta, leaf).to(device)
        plain_meta = build_meta((Segment(start=0, length=len(rows), pos0=0, parent=-1, level=0),), (),
                                len(rows))
        plain = fork_attention(q[rows], k[rows], v[rows], plain_meta, gate[rows])
        assert torch.equal(out[rows], plain), f"path to segment {leaf} differs from its plain stream"


def test_fork_attention_refuses_unsupported_shapes() -> None:
    meta = forest([(-1, 8)], [0])
    q, k, v, _ = inputs(meta, hq=3, hkv=2, d=32, dtype=torch.float32, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="cannot share"):
        fork_attention(q, k, v, meta)
    q, k, v, _ = inputs(meta, hq=2, hkv=1, d=48, dtype=torch.float32, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="head dim 48"):
        fork_attention(q, k, v, meta)


def test_fork_attention_walks_fork_points_in_open_tiles(device) -> None:
    """Key tiles wholly before a query tile (read as runs of consecutive rows per path level, or gathered
    key by key where a tile holds fork points): three fork points in one such tile (150, 170, 180), forks
    on tile boundaries (128, 192), levels shorter than a tile, several whole tiles in a level; against the
    oracle, the plain stream of every leaf's path (bitwise, E3) and tables padded to a larger bucket (E1)."""
    meta = forest([(-1, 150), (0, 20), (1, 10), (2, 100), (-1, 128), (4, 64), (5, 100), (0, 50)],
                  [0, 3, 0, 1, 2, 0, 0, 4])
    q, k, v, gate = inputs(meta, hq=2, hkv=1, d=32, dtype=torch.float32, device=device, seed=3)
    out = fork_attention(q, k, v, meta, gate)
    rows = segment_mask(meta)
    want = naive_fork_attention(q.cpu(), k.cpu(), v.cpu(), meta, gate.cpu())
    assert_close(out.cpu()[rows], want[rows])
    padded = fork_attention(q, k, v, meta, gate, num_tiles=30, depth=6, num_segments=11)
    assert torch.equal(out[rows.to(device)], padded[rows.to(device)])
    for leaf in (3, 6, 7):
        path = path_rows(meta, leaf).to(device)
        n = len(path)
        plain_meta = build_meta((Segment(start=0, length=n, pos0=0, parent=-1, level=0),), (), n)
        plain = fork_attention(q[path], k[path], v[path], plain_meta, gate[path])
        assert torch.equal(out[path], plain), f"path to segment {leaf} differs from its plain stream"
