"""The fused row-wise kernels against their plain-torch references (TOLERANCE per dtype, NaN-poisoned
outputs, strided head views), and row invariance: a row's bits do not depend on where it sits or how many
rows are launched (torch.equal)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from flidec.codegen import pointwise as pw
from flidec.runtime.reference import op_table, ops
from flidec.testing.tolerance import TOLERANCE

DTYPES = [torch.float32, torch.bfloat16]


def rand(*shape: int, dtype: torch.dtype, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def nan_like(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.full(t.shape, float("nan"), dtype=dtype or t.dtype)


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    atol, rtol = TOLERANCE[want.dtype]
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


def run(call: pw.KernelCall) -> None:
    pw.launch(call, torch.device("cpu"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_on_head_views_matches_reference(dtype) -> None:
    qg = rand(21, 4, 64, dtype=dtype)  # per head: query, then gate, as in Qwen3.5's q_proj
    q = qg[..., :32]
    w = rand(32, dtype=dtype, seed=1, scale=0.1)
    out = nan_like(q)
    run(pw.emit_rms_norm(q, w, out, 1e-6))
    close(out, ops.rms_norm(q, w, 1e-6))
    final = nan_like(qg[:, 0], torch.float32)  # the final norm: bf16 in, fp32 out
    run(pw.emit_rms_norm(qg[:, 0], rand(64, dtype=dtype), final, 1e-6))
    close(final, op_table.rms_norm_f32(qg[:, 0], rand(64, dtype=dtype), 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_matches_reference(dtype) -> None:
    x, y, w = rand(19, 48, dtype=dtype), rand(19, 48, dtype=dtype, seed=1), rand(48, dtype=dtype, seed=2)
    total, out = nan_like(x), nan_like(x)
    run(pw.emit_add_rms_norm(x, y, w, total, out, 1e-6))
    want_total, want = op_table.add_rms_norm(x, y, w, 1e-6)
    assert torch.equal(total, want_total)  # one correctly rounded add either way
    close(out, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [16, 24])  # 24: padding columns in the sum of squares' tree
def test_gated_rms_norm_matches_reference(dtype, d) -> None:
    x, z = rand(17, 4, d, dtype=dtype), rand(17, 4, d, dtype=dtype, seed=1)
    w = rand(d, dtype=dtype, seed=2)
    out = nan_like(x)
    run(pw.emit_gated_rms_norm(x, z, w, out, 1e-6))
    close(out, ops.gated_rms_norm(x, z, w, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rot", [8, 12, 32])  # partial (8 or 12 of 32 dims: a half not a power of 2) or whole
def test_rotary_matches_reference(dtype, rot) -> None:
    x = rand(23, 2, 32, dtype=dtype)
    positions = torch.arange(100, 123)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    out = nan_like(x)
    run(pw.emit_rotary(x, positions, inv_freq, out))
    close(out, ops.rotary(x, positions, inv_freq))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["add", "silu_mul", "sigmoid_gate"])
def test_binary_ops_match_reference(dtype, op) -> None:
    a, b = rand(18, 96, dtype=dtype), rand(18, 96, dtype=dtype, seed=1)
    out = nan_like(a)
    code = {"add": pw.ADD, "silu_mul": pw.SILU_MUL, "sigmoid_gate": pw.SIGMOID_GATE}[op]
    run(pw.emit_binary(code, a, b, out))
    want = {"add": lambda: a + b, "silu_mul": lambda: op_table.silu_mul(a, b),
            "sigmoid_gate": lambda: a * torch.sigmoid(b)}[op]()
    close(out, want)
    if op == "add":
        assert torch.equal(out, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_rows_and_embedding_are_exact(dtype) -> None:
    table = rand(50, 24, dtype=dtype)
    index = torch.tensor([7, 0, 49, 7, 3])
    out = nan_like(table[:5])
    run(pw.emit_gather_rows(table, index, out))
    assert torch.equal(out, F.embedding(index, table))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gdn_gates_match_reference(dtype) -> None:
    # softplus on both sides of 20
    a, b = rand(20, 4, dtype=dtype, scale=8.0), rand(20, 4, dtype=dtype, seed=1)
    a_log, dt_bias = rand(4, dtype=dtype, seed=2), rand(4, dtype=dtype, seed=3)
    g, beta = nan_like(a, torch.float32), nan_like(b, torch.float32)
    run(pw.emit_gdn_gate(a, g, a_log, dt_bias))
    run(pw.emit_gdn_gate(b, beta))
    close(g, ops.gdn_decay(a, a_log, dt_bias))
    close(beta, ops.gdn_beta(b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_label_head_matches_reference(dtype) -> None:
    hidden = rand(3, 300, dtype=torch.float32)  # H not a multiple of the H block
    weight = rand(1000, 300, dtype=dtype, seed=1)
    labels = torch.tensor([[5, 6, 7, 0] + [0] * 16, [9] * 20, [11, 12, 0, 0] + [0] * 16])
    nlabels = torch.tensor([3, 20, 2])
    out = torch.full((3, 20), float("nan"))
    run(pw.emit_label_head(hidden, weight, labels, nlabels, out))
    want = op_table.label_head(hidden, weight, labels, nlabels)
    close(out, want)
    assert torch.equal(torch.isinf(out), torch.isinf(want))


def test_rows_are_invariant_to_their_place_and_count() -> None:
    x = rand(40, 3, 48, dtype=torch.bfloat16)
    w = rand(48, dtype=torch.bfloat16, seed=1)
    full, part = nan_like(x), nan_like(x[29:31])
    run(pw.emit_rms_norm(x, w, full, 1e-6))
    run(pw.emit_rms_norm(x[29:31].clone(), w, part, 1e-6))
    assert torch.equal(full[29:31], part)


def test_launches_compute_only_the_tokens_their_rows_pointer_holds() -> None:
    """Every row-wise kernel over a bucket's 40 tokens with 21 in its rows pointer (ROWS; 3-D views count
    tokens, INNER heads each): those tokens' rows have the bits of a launch over them alone, and nothing past
    them is written (the NaN fill stays). Programs cover 16 to 128 rows, so the cut falls inside a program
    for some kernels and at a program's start for others."""
    live, dtype = 21, torch.bfloat16
    rows = torch.tensor([live], dtype=torch.int32)
    x, z = rand(40, 3, 48, dtype=dtype), rand(40, 3, 48, dtype=dtype, seed=1)
    w = rand(48, dtype=dtype, seed=2, scale=0.1)
    flat, other = x.flatten(1), z.flatten(1)
    gates = rand(40, 4, dtype=dtype, seed=3)
    a_log, dt_bias = rand(4, dtype=dtype, seed=4), rand(4, dtype=dtype, seed=5)
    table, index = rand(50, 24, dtype=dtype, seed=6), torch.randperm(50)[:40]
    positions, inv_freq = torch.arange(40) * 3, torch.rand(12, generator=torch.Generator().manual_seed(8))
    emitters = [
        (lambda o, n, r: pw.emit_rms_norm(x[:n], w, o, 1e-6, r), x),
        (lambda o, n, r: pw.emit_gated_rms_norm(x[:n], z[:n], w, o, 1e-6, r), x),
        (lambda o, n, r: pw.emit_rotary(x[:n], positions[:n], inv_freq, o, r), x),
        (lambda o, n, r: pw.emit_binary(pw.SILU_MUL, flat[:n], other[:n], o, r), flat),
        (lambda o, n, r: pw.emit_gather_rows(table, index[:n], o, r), table[:40]),
        (lambda o, n, r: pw.emit_gdn_gate(gates[:n], o, a_log, dt_bias, r), gates.float()),
    ]
    for emit, like in emitters:
        bucket, alone = nan_like(like), nan_like(like[:live])
        run(emit(bucket, 40, rows))
        run(emit(alone, live, None))
        assert not alone.isnan().any() and torch.equal(bucket[:live], alone) and bucket[live:].isnan().all()
    total, normed = nan_like(flat), nan_like(flat)
    run(pw.emit_add_rms_norm(flat, other, w.repeat(3), total, normed, 1e-6, rows))
    alone = nan_like(flat[:live]), nan_like(flat[:live])
    run(pw.emit_add_rms_norm(flat[:live], other[:live], w.repeat(3), *alone, 1e-6))
    for got, want in zip((total, normed), alone, strict=True):
        assert torch.equal(got[:live], want) and got[live:].isnan().all()
    with pytest.raises(ValueError, match="takes its rows pointer from the stream's meta"):
        pw.emit_rms_norm(x.to("meta"), w.to("meta"), x.to("meta"), 1e-6)


def test_operands_that_do_not_share_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="do not share rows"):
        pw.emit_rms_norm(torch.zeros(4, 8), torch.zeros(8), torch.zeros(5, 8), 1e-6)
    with pytest.raises(ValueError, match="contiguous last dim"):
        pw.emit_rms_norm(torch.zeros(8, 4).T, torch.zeros(8), torch.zeros(4, 8), 1e-6)
