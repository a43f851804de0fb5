"""Row-wise reference ops (linear, norms, gates, rotary, label logits): agree with a float64 formulation,
and every row's bits are independent of the number of rows and of the row's place among them."""

import pytest
import torch
import torch.nn.functional as F

from flidec.runtime.meta import Read, Segment, build_meta
from flidec.runtime.reference import ops
from flidec.testing.tolerance import TOLERANCE

DTYPES = [torch.float32, torch.bfloat16]


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(actual.double(), expected.double(), atol=atol, rtol=rtol)


def _row_ops(dtype: torch.dtype):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(48, 40, generator=g).to(dtype)
    nw = (0.5 * torch.randn(40, generator=g)).to(dtype)
    gw = (1 + 0.5 * torch.randn(8, generator=g)).to(dtype)
    a_log, dt = torch.randn(6, generator=g).to(dtype), torch.randn(6, generator=g).to(dtype)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 4, 2).float() / 4))
    return {
        "linear": lambda x: ops.linear(x, w),
        "rms_norm": lambda x: ops.rms_norm(x, nw, 1e-6),
        "gated_rms_norm": lambda x: ops.gated_rms_norm(x[:, :16].reshape(-1, 2, 8),
                                                       x[:, 16:32].reshape(-1, 2, 8), gw, 1e-6),
        "gdn_decay": lambda x: ops.gdn_decay(x[:, :6], a_log, dt),
        "gdn_beta": lambda x: ops.gdn_beta(x[:, :6]),
        "rotary": lambda x: ops.rotary(x[:, :24].reshape(-1, 3, 8), torch.arange(x.shape[0]) % 7, inv_freq),
    }


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(_row_ops(torch.float32)))
def test_row_op_is_exact(name, dtype):
    """Rows computed alone, in a short stream and at other offsets in a long one give the same bits."""
    fn = _row_ops(dtype)[name]
    x = torch.randn(300, 40, generator=torch.Generator().manual_seed(2)).to(dtype)
    pos_free = name != "rotary"  # rotary depends on the row index through its positions (row % 7)
    whole = fn(x)
    for rows in (1, 5, 16, 17, 63, 140):
        assert torch.equal(fn(x[:rows]), whole[:rows]), rows
    if pos_free:
        for shift in (1, 7, 16, 33):
            assert torch.equal(fn(x[shift:])[: 100], whole[shift : shift + 100]), shift


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_ops_match_reference(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(37, 40, generator=g).to(dtype)
    w = torch.randn(48, 40, generator=g).to(dtype)
    _close(ops.linear(x, w), x.double() @ w.double().T, dtype)
    nw = (0.5 * torch.randn(40, generator=g)).to(dtype)
    xd = x.double()
    _close(ops.rms_norm(x, nw, 1e-6),
           xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * (1 + nw.double()), dtype)
    z = torch.randn(37, 40, generator=g).to(dtype)
    gw = (1 + 0.5 * torch.randn(40, generator=g)).to(dtype)
    expected = xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * gw.double() * F.silu(z.double())
    _close(ops.gated_rms_norm(x, z, gw, 1e-6), expected, dtype)
    a_log, dt = torch.randn(40, generator=g), torch.randn(40, generator=g)
    _close(ops.gdn_decay(x, a_log, dt), -a_log.double().exp() * F.softplus(xd + dt.double()), torch.float32)
    _close(ops.gdn_beta(x), torch.sigmoid(xd), torch.float32)


def test_rotary_matches_reference():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(20, 2, 16, generator=g, dtype=torch.float64)
    pos = torch.randint(0, 500, (20,), generator=g)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2).double() / 8))  # 8 of 16 dims rotate
    out = ops.rotary(x.float(), pos, inv_freq.float())
    ang = pos.double()[:, None] * inv_freq[None, :]
    x1, x2, rest = x[..., :4], x[..., 4:8], x[..., 8:]
    c, s = ang.cos()[:, None], ang.sin()[:, None]
    expected = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], -1)
    _close(out, expected, torch.float32)


def _read_meta(label_sets: list[tuple[int, ...]], rows: int):
    seg = (Segment(start=0, length=rows, pos0=0, parent=-1, level=0),)
    reads = tuple(Read(row=(7 * j) % rows, labels=labels) for j, labels in enumerate(label_sets))
    return build_meta(seg, reads, rows)


@pytest.mark.parametrize("dtype", DTYPES)
def test_label_logits_matches_reference_and_is_exact(dtype):
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(50, 32, generator=g)
    emb = torch.randn(300, 32, generator=g).to(dtype)
    label_sets = [(3, 4, 5), tuple(range(255)), (9,), (17, 2)]
    meta = _read_meta(label_sets, 50)
    out = ops.label_logits(hidden, emb, meta)
    assert out.dtype == torch.float32 and out.shape == (4, 255)
    for j, labels in enumerate(label_sets):
        expected = hidden[(7 * j) % 50].double() @ emb[list(labels)].double().T
        _close(out[j, : len(labels)], expected, torch.float32)
        assert torch.isneginf(out[j, len(labels) :]).all()
        alone = ops.label_logits(hidden, emb, _read_meta([(0,)] * j + [labels], 50))  # other R, other Lmax
        assert torch.equal(alone[j, : len(labels)], out[j, : len(labels)])
