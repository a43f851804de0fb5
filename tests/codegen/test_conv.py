"""Fork conv kernel: agrees with the reference op, and every path's rows equal its plain single-sequence
stream bit for bit (E1, E3). Outputs start NaN-poisoned and padding rows of the input are NaN, so an unwritten
segment row, a written padding row or a read of a padding row fails.
"""

from __future__ import annotations

import pytest
import torch

from flidec.codegen.conv import fork_conv
from flidec.runtime.meta import CONV_TAPS
from flidec.runtime.reference import ops
from flidec.runtime.tables import conv_taps
from flidec.testing.forests import Node, pack_forest, path_stream
from flidec.testing.tolerance import TOLERANCE

# forks after 1, 2 and 3 tokens (a branch's taps reach past its parent into its grandparent), empty segments
SHAPE = [(-1, 5), (0, 1), (1, 2), (2, 0), (3, 3), (0, 40), (-1, 1), (6, 2), (-1, 0), (5, 20)]
CHANNELS = 200  # not a multiple of the channel tile


def forest() -> list[Node]:
    nodes, next_id = [], 1
    for parent, length in SHAPE:
        nodes.append((parent, list(range(next_id, next_id + length))))
        next_id += length
    return nodes


def token_table(nodes: list[Node], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1 + sum(len(t) for _, t in nodes), CHANNELS, generator=gen).to(dtype)
    x[0] = float("nan")  # token 0 is padding
    return x, torch.randn(CHANNELS, CONV_TAPS, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fork_conv_matches_reference(dtype, device) -> None:
    nodes = forest()
    stream = pack_forest(nodes, list(reversed(range(len(nodes)))), gap=2)
    table, weight = token_table(nodes, dtype)
    x = table[stream.tokens]
    out = fork_conv(x.to(device), weight.to(device), stream.meta).cpu()
    rows = stream.meta.segment_ids >= 0
    assert out.dtype == dtype
    assert not out[rows].isnan().any(), "a segment row was not written"
    assert out[~rows].isnan().all(), "a padding row was written"
    want = ops.fork_conv(torch.nan_to_num(x), weight, stream.meta)
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(out[rows].double(), want[rows].double(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fork_conv_is_exact(dtype, device) -> None:
    """E3: a path's rows equal its plain stream's; E1: also with the taps table padded to more rows."""
    nodes = forest()
    stream = pack_forest(nodes, list(reversed(range(len(nodes)))), gap=2)
    table, weight = token_table(nodes, dtype)
    weight = weight.to(device)
    out = fork_conv(table[stream.tokens].to(device), weight, stream.meta)
    padded = fork_conv(table[stream.tokens].to(device), weight, stream.meta, rows=stream.meta.num_rows + 37)
    assert torch.equal(out.isnan(), padded.isnan()) and torch.equal(out.nan_to_num(), padded.nan_to_num())
    for node in range(len(nodes)):
        plain = path_stream(nodes, node)
        if not len(plain.tokens):
            continue
        want = fork_conv(table[plain.tokens].to(device), weight, plain.meta)
        s = stream.meta.segments[node]
        got = out[s.start : s.start + s.length]
        assert torch.equal(got, want[len(want) - s.length :]), f"node {node} differs from its plain stream"


def test_fork_conv_computes_only_the_rows_its_rows_pointer_holds() -> None:
    """The kernel reads how many rows to compute from a device int32 (codegen/gemm.py ROWS): with 30 there
    (a cut inside a segment, and not at a tile's edge) rows below it have the bits of the whole launch and
    rows from it on are not written."""
    from flidec.codegen import conv, eager

    nodes = forest()
    stream = pack_forest(nodes, gap=2)
    table, weight = token_table(nodes, torch.bfloat16)
    x = table[stream.tokens]
    whole = fork_conv(x, weight, stream.meta)
    cut = torch.full_like(whole, float("nan"))
    spec = conv.conv_spec(x, weight, cut)
    taps = conv_taps(stream.meta)
    eager.launch(conv.fork_conv_kernel, spec.grid(taps.shape[0]), x, weight, cut, taps,
                 torch.tensor([30], dtype=torch.int32), device=x.device, **spec.constexprs())
    assert stream.meta.num_rows > 30 and not whole[:30].isnan().all(dim=1).all()
    assert torch.equal(cut[:30].isnan(), whole[:30].isnan())
    assert torch.equal(cut[:30].nan_to_num(), whole[:30].nan_to_num())
    assert cut[30:].isnan().all()


def test_conv_taps_layout() -> None:
    stream = pack_forest([(-1, [1, 2]), (0, [3]), (1, [4])], gap=1)
    taps = conv_taps(stream.meta, rows=9)
    # rows: pad, 1, 2, pad, 3, pad, 4, pad, then two table-padding rows
    want = [[-1] * 4, [-1, -1, -1, 1], [-1, -1, 1, 2], [-1] * 4, [-1, 1, 2, 4], [-1] * 4, [1, 2, 4, 6],
            [-1] * 4, [-1] * 4]
    assert taps.dtype == torch.int32 and taps.tolist() == want
    with pytest.raises(ValueError, match="the table holds 5"):
        conv_taps(stream.meta, rows=5)


def test_fork_conv_refuses_unsupported_shapes() -> None:
    meta = pack_forest([(-1, [1, 2])]).meta
    with pytest.raises(ValueError, match="weight"):
        fork_conv(torch.zeros(2, 8), torch.zeros(8, 3), meta)
    with pytest.raises(ValueError, match="contiguous"):
        fork_conv(torch.zeros(8, 2).T, torch.zeros(8, 4), meta)


def test_fork_conv_writes_fp32_of_bf16_inputs_unrounded(device) -> None:
    """fp32 activations (E4): bf16 windows, fp32 out, within fp32's tolerance of the reference (which sums
    and applies SiLU in fp32 and rounds only to the dtype asked for), and every path equals its plain
    stream bit for bit (E3)."""
    nodes = forest()
    stream = pack_forest(nodes, list(reversed(range(len(nodes)))), gap=2)
    table, weight = token_table(nodes, torch.bfloat16)
    x = table[stream.tokens]
    out = fork_conv(x.to(device), weight.to(device), stream.meta, dtype=torch.float32)
    rows = stream.meta.segment_ids >= 0
    assert out.dtype == torch.float32 and not out.cpu()[rows].isnan().any() and out.cpu()[~rows].isnan().all()
    want = ops.fork_conv(torch.nan_to_num(x), weight, stream.meta, torch.float32)
    assert want.dtype == torch.float32
    atol, rtol = TOLERANCE[torch.float32]
    torch.testing.assert_close(out.cpu()[rows], want[rows], atol=atol, rtol=rtol)
    assert not torch.equal(out.cpu()[rows].to(torch.bfloat16).float(), out.cpu()[rows])
    for node in range(len(nodes)):
        plain = path_stream(nodes, node)
        if not len(plain.tokens):
            continue
        alone = fork_conv(table[plain.tokens].to(device), weight.to(device), plain.meta, dtype=torch.float32)
        s = stream.meta.segments[node]
        assert torch.equal(out[s.start : s.start + s.length], alone[len(alone) - s.length :]), f"node {node}"
