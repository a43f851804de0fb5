"""Batch-invariant GEMM: agrees with torch, and a row's bits depend neither on M nor on the row's tile; a
group launch gives each member exactly its own launch's bits, and the SwiGLU epilogue those of the product
of the two stored projections."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flidec.codegen.gemm import GROUP, linear, linear_group, linear_silu_mul
from flidec.runtime.reference import ops
from flidec.testing.tolerance import TOLERANCE


def operands(m: int, n: int, k: int, dtype: torch.dtype, device: torch.device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(dtype).to(device)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype).to(device)
    return x, w


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(100, 72, 96), (7, 130, 200)])
def test_linear_matches_float64(dtype, shape, device) -> None:
    m, n, k = shape  # N and K that are not multiples of the tiles: masked edges
    x, w = operands(m, n, k, dtype, device)
    y = linear(x, w).cpu()
    want = (x.double() @ w.double().T).cpu()
    assert y.dtype == dtype and not y.isnan().any()
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(y.double(), want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_matches_reference(dtype, device) -> None:
    x, w = operands(37, 72, 96, dtype, device, seed=2)
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(linear(x, w).cpu(), ops.linear(x.cpu(), w.cpu()), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_is_exact_across_batch_sizes_and_row_order(dtype, device) -> None:
    x, w = operands(100, 72, 96, dtype, device)
    full = linear(x, w)
    for m in (1, 7, 16, 100):
        assert torch.equal(linear(x[:m], w), full[:m]), f"rows differ at M={m}"
    perm = torch.randperm(100, generator=torch.Generator().manual_seed(1)).to(device)
    assert torch.equal(linear(x[perm], w), full[perm]), "rows differ when shuffled"
    wide = torch.zeros(100, 128, dtype=dtype, device=device)
    wide[:, :96] = x
    assert torch.equal(linear(wide[:, :96], w), full), "a strided x changes the rows"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_tile_order_writes_every_tile(dtype, device, monkeypatch) -> None:
    """With group_m, programs take tiles group_m row tiles at a time (gemm._tile; the large rungs' order):
    with a full group, a partial one and a partial column tile, every tile is written once, with the bits
    of the grid's own order."""
    from flidec.codegen import gemm

    grid_order = dataclasses.replace(gemm.tiles_for(dtype, 64, 200), group_m=0)
    grouped = dataclasses.replace(grid_order, group_m=8)
    m = grid_order.block_m * 11 + 5  # 12 row tiles: a group of 8, then 4 (the last partial)
    x, w = operands(m, 200, 32, dtype, device, seed=7)
    _, w_up = operands(m, 200, 32, dtype, device, seed=8)
    outputs = {}
    for tiles in (grid_order, grouped):
        monkeypatch.setitem(gemm.TILES, dtype, ((gemm.ANY, gemm.ANY, tiles),))
        outputs[tiles.group_m] = (linear(x, w), linear_group(x, (w, w_up[:72])), linear_silu_mul(x, w, w_up))
    y, (y0, y1), fused = outputs[8]
    assert not y.isnan().any() and not y1.isnan().any() and not fused.isnan().any()
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(y.double().cpu(), (x.double() @ w.double().T).cpu(), atol=atol, rtol=rtol)
    want, (want0, want1), want_fused = outputs[0]
    assert torch.equal(y, want) and torch.equal(y0, want0) and torch.equal(y1, want1)
    assert torch.equal(fused, want_fused)


@pytest.mark.parametrize("group_m, programs", [(0, 0), (2, 0), (2, 3), (0, 2)])
def test_launches_compute_only_the_rows_their_rows_pointer_holds(group_m, programs, device,
                                                                  monkeypatch) -> None:
    """A grid over a bucket's rows with the stream's row count in `rows_ptr` (gemm.py ROWS): rows below it
    have the bits of a launch over those rows alone, for every kernel, in both tile orders and PERSISTENT
    (fewer programs than tiles: each walks several); rows past it, and the programs of row tiles past it,
    write nothing (the NaN fill stays)."""
    from flidec.codegen import eager, gemm

    dtype = torch.bfloat16
    tiles = dataclasses.replace(gemm.tiles_for(dtype, 64, 200), group_m=group_m, programs=programs)
    monkeypatch.setitem(gemm.TILES, dtype, ((gemm.ANY, gemm.ANY, tiles),))
    monkeypatch.setattr(gemm, "SILU_MUL_PERSISTENT_ROWS", 0)
    bucket = tiles.block_m * 5  # 5 row tiles in the grid
    x, w = operands(bucket, 200, 32, dtype, device, seed=9)
    _, w_up = operands(bucket, 200, 32, dtype, device, seed=10)
    for used in (1, tiles.block_m, 2 * tiles.block_m + 3):  # one row, one whole tile, a partial third tile
        rows = torch.full((1,), used, dtype=torch.int32, device=device)
        head = x[:used]
        alone = (linear(head, w), linear_group(head, (w, w_up[:72])), linear_silu_mul(head, w, w_up))
        y, y0, y1, fused = (torch.full((bucket, n), float("nan"), dtype=dtype, device=device)
                            for n in (200, 200, 72, 200))
        group = gemm.gemm_group_spec(x, (w, w_up[:72]), (y0, y1))
        silu_mul = gemm.silu_mul_spec(x, w, w_up, fused)
        launches = (
            (gemm.gemm_spec(x, w, y).kernel(), gemm.gemm_spec(x, w, y), (x, w, y, rows)),
            (group.kernel(), group, group.args(x, (w, w_up[:72]), (y0, y1), rows)),
            (silu_mul.kernel(silu_mul=True), silu_mul, (x, w, w_up, fused, rows)),
        )
        assert all((k.__name__.endswith("_tma_kernel")) == bool(programs) for k, _, _ in launches)
        for kernel, spec, args in launches:
            eager.launch(kernel, spec.grid(bucket), *args, device=device, num_warps=spec.tiles.num_warps,
                         num_stages=spec.tiles.num_stages, **spec.constexprs())
        for got, want in zip((y, y0, y1, fused), (alone[0], *alone[1], alone[2]), strict=True):
            assert torch.equal(got[:used], want), used
            assert got[used:].isnan().all(), f"rows past {used} were written"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_persistent_launches_equal_a_program_per_tile(dtype, device, monkeypatch) -> None:
    """PERSISTENT (gemm.py): 3 programs walking 12 row tiles of each member in the grouped order, the
    members' tiles dealt as one sequence (a group of widths 200, 72 and 16: partial and narrow column tiles),
    K not a whole number of K tiles (TMA's zero fill): every output has the bits of a program per tile."""
    from flidec.codegen import gemm

    per_tile = dataclasses.replace(gemm.tiles_for(dtype, 64, 200), group_m=8)
    persistent = dataclasses.replace(per_tile, programs=3)
    monkeypatch.setattr(gemm, "SILU_MUL_PERSISTENT_ROWS", 0)
    m = per_tile.block_m * 11 + 5
    x, w = operands(m, 200, 40, dtype, device, seed=11)
    _, w_up = operands(m, 200, 40, dtype, device, seed=12)
    members = (w, w_up[:72], w_up[100:116])
    outputs = {}
    for tiles in (per_tile, persistent):
        monkeypatch.setitem(gemm.TILES, dtype, ((gemm.ANY, gemm.ANY, tiles),))
        grid = gemm.gemm_spec(x, w, torch.empty(m, 200, dtype=dtype)).grid(m)
        assert grid == ((3,) if tiles.programs else (12, 4))
        outputs[tiles.programs] = (linear(x, w), *linear_group(x, members), linear_silu_mul(x, w, w_up))
    for got, want in zip(outputs[3], outputs[0], strict=True):
        assert not got.isnan().any() and torch.equal(got, want)


def test_the_swiglu_launch_is_persistent_only_above_its_rows(monkeypatch) -> None:
    """gemm.SILU_MUL_PERSISTENT_ROWS: at and below it the SwiGLU launch keeps a program per tile (its own
    tiles), above it takes the persistent rung's, while single projections are persistent on that rung."""
    from flidec.codegen import gemm

    tiles = dataclasses.replace(gemm.tiles_for(torch.bfloat16, 64, 200), programs=3)
    monkeypatch.setitem(gemm.TILES, torch.bfloat16, ((gemm.ANY, gemm.ANY, tiles),))
    monkeypatch.setattr(gemm, "SILU_MUL_PERSISTENT_ROWS", 64)
    w = torch.empty(72, 96, dtype=torch.bfloat16, device="meta")
    for m, persistent in ((64, False), (65, True)):
        x = torch.empty(m, 96, dtype=torch.bfloat16, device="meta")
        y = torch.empty(m, 72, dtype=torch.bfloat16, device="meta")
        spec = gemm.silu_mul_spec(x, w, w, y)
        assert (spec.kernel(silu_mul=True) is gemm.gemm_silu_mul_tma_kernel) == persistent, m
        assert spec.tiles == (dataclasses.replace(tiles, num_stages=min(tiles.num_stages, 4)) if persistent
                              else gemm._PER_TILE)
        assert gemm.gemm_spec(x, w, y).kernel() is gemm.gemm_tma_kernel


def test_persistent_tiles_fall_back_where_tma_cannot_load(monkeypatch) -> None:
    """TMA needs 16-byte row strides and bases: a launch on an x with a 100-element (200-byte) row stride, or
    an x starting 2 bytes into its storage, gets a program per tile; a group falls back as a whole."""
    from flidec.codegen import gemm

    tiles = dataclasses.replace(gemm.tiles_for(torch.bfloat16, 64, 200), programs=3)
    monkeypatch.setitem(gemm.TILES, torch.bfloat16, ((gemm.ANY, gemm.ANY, tiles),))
    x, w = operands(64, 72, 96, torch.bfloat16, torch.device("cpu"))
    y = torch.empty(64, 72, dtype=torch.bfloat16)
    assert gemm.gemm_spec(x, w, y).tiles == tiles
    wide = torch.zeros(64, 100, dtype=torch.bfloat16)
    # a program per tile on the per-tile rung's stages: 4 overflow shared memory
    per_tile = dataclasses.replace(tiles, programs=0, num_stages=gemm._PER_TILE.num_stages)
    assert gemm.gemm_spec(wide[:, :96], w, y).tiles == per_tile
    shifted = torch.zeros(64 * 96 + 1, dtype=torch.bfloat16)[1:].view(64, 96)  # 2 bytes into its storage
    assert gemm.gemm_spec(shifted, w, y).tiles.programs == 0
    odd = torch.zeros(72, 100, dtype=torch.bfloat16)[:, :96]
    assert gemm.gemm_group_spec(x, (w, odd), (y, y)).kernel() is gemm.gemm_group_kernel
    assert gemm.gemm_group_spec(x, (w, w), (y, y)).kernel() is gemm.gemm_group_tma_kernel


def test_linear_refuses_mismatched_operands() -> None:
    x, w = operands(4, 8, 16, torch.float32, torch.device("cpu"))
    with pytest.raises(ValueError, match="do not compose"):
        linear(x, w[:, :8])
    with pytest.raises(ValueError, match="share one of"):
        linear(x, w.double())


def test_rungs_by_rows_and_columns_and_every_rung_gives_the_same_rows(device, monkeypatch) -> None:
    """A launch takes the first rung serving its rows and columns (a group: all its members'; the SwiGLU
    kernel at most 4 stages); the interpreter's products are exact in every tile, so this checks the tiles'
    coverage and edge masks (the hardware's bits: test_aot_gpu.py)."""
    from flidec.codegen import gemm

    rungs = gemm.TILES[torch.bfloat16]
    assert len(rungs) > 1 and rungs[-1][:2] == (gemm.ANY, gemm.ANY)
    assert [most for most, _, _ in rungs] == sorted(most for most, _, _ in rungs)
    for most_rows, most_columns, _ in rungs:  # each rung's corner goes to the first rung serving it
        serving = [t for r, c, t in rungs if most_rows <= r and most_columns <= c]
        assert gemm.tiles_for(torch.bfloat16, most_rows, most_columns) == serving[0]
    narrow = next((r, c, t) for r, c, t in rungs if c < gemm.ANY)  # 0.8B's out and down projections at r1024
    assert gemm.tiles_for(torch.bfloat16, narrow[0], narrow[1]) == narrow[2]
    assert gemm.tiles_for(torch.bfloat16, narrow[0], narrow[1] + 1) != narrow[2]
    x, w = operands(narrow[0], narrow[1] // 2 + 8, 96, torch.bfloat16, torch.device("cpu"))
    y = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype)
    group = gemm.gemm_group_spec(x, (w, w), (y, y))
    assert group.tiles == gemm.tiles_for(torch.bfloat16, narrow[0], 2 * w.shape[0]) != narrow[2]
    small = rungs[0][2]
    assert small.num_stages > 4
    assert gemm.silu_mul_spec(x[:1], w, w, y[:1]).tiles == dataclasses.replace(small, num_stages=4)
    x, w = operands(130, 200, 96, torch.bfloat16, device, seed=4)  # edges in every dim of every rung's tiles
    outs = []
    for *_, tiles in rungs:
        monkeypatch.setitem(gemm.TILES, torch.bfloat16, ((gemm.ANY, gemm.ANY, tiles),))
        outs.append(linear(x, w))
    assert not outs[0].isnan().any() and all(torch.equal(o, outs[0]) for o in outs[1:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ns", [(72, 16), (130, 8, 200), (64, 16, 16, 96)])
def test_group_members_equal_their_own_launches(dtype, ns, device) -> None:
    """Members of different widths (edges inside a tile, narrower than a tile): each output is torch.equal
    to its own launch, at row counts on both sides of the small rung."""
    from flidec.codegen import gemm

    g = torch.Generator().manual_seed(5)
    weights = tuple((torch.randn(n, 96, generator=g) / 96**0.5).to(dtype).to(device) for n in ns)
    for m in (37, gemm.TILES[torch.bfloat16][0][0] + 3):
        x = torch.randn(m, 96, generator=g).to(dtype).to(device)
        outs = linear_group(x, weights)
        assert len(outs) == len(ns)
        for w, y in zip(weights, outs, strict=True):
            assert not y.isnan().any() and torch.equal(y, linear(x, w)), f"a member differs at M={m}"


def test_group_refuses_bad_members() -> None:
    x, w = operands(4, 8, 16, torch.float32, torch.device("cpu"))
    with pytest.raises(ValueError, match="1 to 4 members"):
        linear_group(x, (w,) * (GROUP + 1))
    with pytest.raises(ValueError, match="do not compose"):
        linear_group(x, (w, w[:, :8]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_epilogue_equals_the_product_of_the_stored_projections(dtype, device) -> None:
    from flidec.codegen import gemm, pointwise
    from flidec.runtime.reference import op_table

    g = torch.Generator().manual_seed(6)
    w_gate, w_up = ((torch.randn(200, 96, generator=g) / 96**0.5).to(dtype).to(device) for _ in range(2))
    for m in (37, gemm.TILES[torch.bfloat16][0][0] + 3):  # both rungs; N = 200 leaves a partial tile
        x = torch.randn(m, 96, generator=g).to(dtype).to(device)
        unfused = torch.full((m, 200), float("nan"), dtype=dtype, device=device)
        call = pointwise.emit_binary(pointwise.SILU_MUL, linear(x, w_gate), linear(x, w_up), unfused)
        pointwise.eager.launch(call.kernel, call.grid, *call.args, device=device, **call.constexprs)
        fused = linear_silu_mul(x, w_gate, w_up)
        assert not fused.isnan().any() and torch.equal(fused, unfused), f"M={m}"
        atol, rtol = TOLERANCE[dtype]
        reference = op_table.linear_silu_mul(x.cpu(), w_gate.cpu(), w_up.cpu())
        torch.testing.assert_close(fused.cpu(), reference, atol=atol, rtol=rtol)
    with pytest.raises(ValueError, match="weights differ"):
        linear_silu_mul(x, w_gate, w_up[:100])


def test_fp32_results_of_bf16_operands_are_the_unrounded_accumulator(device) -> None:
    """fp32 activations (E4): a bf16 GEMM writing fp32 keeps the accumulator, which the reference's fp32
    product of the same bf16 values gives within fp32's tolerance, far inside one bf16 rounding; its rows are
    invariant under M and shuffling (E3), and a group writing fp32 equals its members' own launches."""
    x, w = operands(100, 72, 96, torch.bfloat16, device, seed=7)
    y = linear(x, w, dtype=torch.float32)
    assert y.dtype == torch.float32 and not y.isnan().any()
    want = ops.linear(x.cpu(), w.cpu(), torch.float32)
    assert want.dtype == torch.float32
    atol, rtol = TOLERANCE[torch.float32]
    torch.testing.assert_close(y.cpu(), want, atol=atol, rtol=rtol)
    rounded = linear(x, w)
    assert not torch.equal(y.to(torch.bfloat16).float(), y), "the fp32 result must keep bits bf16 drops"
    assert torch.equal(y.to(torch.bfloat16), rounded), "bf16 results are the fp32 accumulator rounded once"
    for m in (1, 7, 16, 100):
        assert torch.equal(linear(x[:m], w, dtype=torch.float32), y[:m]), f"rows differ at M={m}"
    perm = torch.randperm(100, generator=torch.Generator().manual_seed(1)).to(device)
    assert torch.equal(linear(x[perm], w, dtype=torch.float32), y[perm])
    w2 = (torch.randn(40, 96, generator=torch.Generator().manual_seed(8)) / 96**0.5).to(torch.bfloat16)
    outs = linear_group(x, (w, w2.to(device)), dtype=torch.float32)
    assert torch.equal(outs[0], y) and torch.equal(outs[1], linear(x, w2.to(device), dtype=torch.float32))
    with pytest.raises(ValueError, match="or fp32"):
        linear(x, w, out=torch.empty(100, 72, dtype=torch.float16, device=device))
    with pytest.raises(ValueError, match="outputs one"):
        linear_group(x, (w, w2.to(device)), outs=(torch.empty(100, 72, device=device),
                                                   torch.empty(100, 40, dtype=torch.bfloat16, device=device)))
    with pytest.raises(ValueError, match="SwiGLU product"):
        linear_silu_mul(x, w, w, out=torch.empty(100, 72, device=device))


def test_silu_mul_of_fp32_projections_rounds_once(device) -> None:
    """fp32 activations (E4): the SwiGLU launch reading its projections unrounded equals fp32 projections
    stored and multiplied into bf16 by the pointwise kernel, bit for bit, at both rungs; the reference (fp32
    projections, one rounding of the product) agrees within bf16's tolerance; rounding the projections
    first gives other bits."""
    from flidec.codegen import gemm, pointwise
    from flidec.runtime.reference import op_table

    g = torch.Generator().manual_seed(9)
    bf16, f32 = torch.bfloat16, torch.float32
    w_gate, w_up = ((torch.randn(200, 96, generator=g) / 96**0.5).to(bf16).to(device) for _ in range(2))
    for m in (37, gemm.TILES[bf16][0][0] + 3):
        x = torch.randn(m, 96, generator=g).to(bf16).to(device)
        unfused = torch.full((m, 200), float("nan"), dtype=bf16, device=device)
        gate, up = linear(x, w_gate, dtype=f32), linear(x, w_up, dtype=f32)
        call = pointwise.emit_binary(pointwise.SILU_MUL, gate, up, unfused)
        pointwise.eager.launch(call.kernel, call.grid, *call.args, device=device, **call.constexprs)
        fused = linear_silu_mul(x, w_gate, w_up, projections=f32)
        assert fused.dtype == bf16 and not fused.isnan().any() and torch.equal(fused, unfused), f"M={m}"
        assert not torch.equal(fused, linear_silu_mul(x, w_gate, w_up)), "the projections were rounded"
        atol, rtol = TOLERANCE[bf16]
        reference = op_table.linear_silu_mul(x.cpu(), w_gate.cpu(), w_up.cpu(), f32)
        assert reference.dtype == bf16
        torch.testing.assert_close(fused.cpu(), reference, atol=atol, rtol=rtol)
