"""Plain-torch reference ops: the oracle every generated kernel is checked against.

Consumes per-row activations of a packed stream ([T, ...], no batch dim) and its StreamMeta (runtime/meta.py);
produces per-row outputs whose bits do not depend on how many rows, segments or instances the stream holds
nor where a row sits in it (E1, E3): row-wise work runs on fixed [ROW_TILE, ...] tiles (`_by_row_tiles`), and
sequence mixing (attention, Gated DeltaNet) on fixed-shape tiles of logical positions aligned to absolute
positions (QT, KT, meta.CHUNK) with padding that contributes exact zeros, so a forked stream and the plain
pass of a path run the same products on the same bits. Recurrent state, softmax and accumulation are fp32
(E4).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

from flidec.runtime.meta import CHUNK, CONV_TAPS, StreamMeta

ROW_TILE = 16  # rows per row-wise tile (GEMMs, norms, gates)
QT = 16  # attention query tile, in logical positions aligned to multiples of QT
KT = 64  # attention key tile, in logical positions aligned to multiples of KT
L2_EPS = 1e-6  # Gated DeltaNet's q/k L2 norm epsilon (fla's and transformers' use_qk_l2norm_in_kernel)


def _by_row_tiles(fn: Callable[..., torch.Tensor], *xs: torch.Tensor) -> torch.Tensor:
    """Apply `fn` to [ROW_TILE, ...] tiles of the row-aligned tensors `xs`, rows back in order; the last
    tile is zero-padded to full size, so `fn` only ever sees one shape. On the CPU fp32 GEMMs and vectorised
    pointwise loops change a row's bits with the tensor's row count (measured), while a row anywhere inside a
    fixed-shape tile keeps them."""
    rows = xs[0].shape[0]
    # Contiguous tiles: a strided view takes other vector/scalar loop paths than a dense tile (measured).
    xs = tuple(x.contiguous() for x in xs)
    tiles = []
    for i in range(0, rows, ROW_TILE):
        part = tuple(x[i : i + ROW_TILE] for x in xs)
        pad = ROW_TILE - part[0].shape[0]
        if pad:
            part = tuple(torch.cat([p, p.new_zeros((pad, *p.shape[1:]))]) for p in part)
        tiles.append(fn(*part))
    if not tiles:
        return fn(*xs)  # zero rows: let `fn` give the empty result its right trailing shape
    return torch.cat(tiles)[:rows]


def embed(ids: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The embedding rows of ids [T] -> [T, H] in `dtype` (default the weight's): a gather, exact."""
    return F.embedding(ids, weight).to(dtype or weight.dtype)


def linear(x: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [T, K] @ weight[N, K]^T -> [T, N] in `dtype` (default x's), one fixed-shape F.linear per row tile
    (no bias: Qwen3.5 has none). An fp32 result of bf16 operands is the fp32 accumulator unrounded: the
    products of 16-bit values are exact in fp32, as on the tensor cores."""
    if dtype is None or dtype == x.dtype:
        return _by_row_tiles(lambda t: F.linear(t, weight), x)
    w = weight.to(dtype)
    return _by_row_tiles(lambda t: F.linear(t.to(dtype), w), x)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype | None = None
             ) -> torch.Tensor:
    """Qwen3.5's zero-centred RMSNorm over the last dim: fp32 x * rsqrt(mean(x^2) + eps) * (1 + w), rounded
    once to `dtype` (default x's: an fp32 residual stream's norm feeds a GEMM in the weights' dtype)."""
    out = dtype or x.dtype

    def tile(t: torch.Tensor) -> torch.Tensor:
        h = t.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return (h * (1.0 + weight.float())).to(out)

    return _by_row_tiles(tile, x)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float,
                   dtype: torch.dtype | None = None) -> torch.Tensor:
    """Qwen3_5RMSNormGated: plain (not zero-centred) weight, applied in x's dtype, then * silu(z) in fp32,
    rounded to `dtype` (default x's). An fp32 x is not rounded before the weight."""
    out = dtype or x.dtype

    def tile(t: torch.Tensor, zt: torch.Tensor) -> torch.Tensor:
        h = t.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        h = weight * h.to(t.dtype)  # transformers rounds to the input dtype before the weight
        return (h * F.silu(zt.float())).to(out)

    return _by_row_tiles(tile, x, z)


def gdn_decay(a: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor) -> torch.Tensor:
    """Gated DeltaNet log-decay g = -exp(A_log) * softplus(a + dt_bias), fp32, [T, Hv]."""
    return _by_row_tiles(lambda t: -a_log.float().exp() * F.softplus(t.float() + dt_bias.float()), a)


def gdn_beta(b: torch.Tensor) -> torch.Tensor:
    """Gated DeltaNet write strength beta = sigmoid(b), fp32, [T, Hv]."""
    return _by_row_tiles(lambda t: torch.sigmoid(t.float()), b)


def rotary(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Partial RoPE on the first 2 * len(inv_freq) dims of each head of x [T, H, D] at the logical positions.

    cos/sin are computed in fp32 and cast to x's dtype before the rotation, as transformers does; for
    text-only input Qwen3.5's mRoPE gives every section the same position, so it is this plain RoPE.
    """
    rot = 2 * inv_freq.numel()

    def tile(t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        freqs = pos.float()[:, None] * inv_freq.float()[None, :]
        cos = torch.cat([freqs.cos(), freqs.cos()], -1).to(t.dtype)[:, None, :]
        sin = torch.cat([freqs.sin(), freqs.sin()], -1).to(t.dtype)[:, None, :]
        t_rot, t_pass = t[..., :rot], t[..., rot:]
        half = rot // 2
        rotated = torch.cat([-t_rot[..., half:], t_rot[..., :half]], -1)
        return torch.cat([t_rot * cos + rotated * sin, t_pass], -1)

    return _by_row_tiles(tile, x, positions)


def fork_conv(x: torch.Tensor, weight: torch.Tensor, meta: StreamMeta, dtype: torch.dtype | None = None
              ) -> torch.Tensor:
    """Depthwise causal conv over each row's path, then SiLU: x [T, C], weight [C, CONV_TAPS] -> [T, C] in
    `dtype` (default x's).

    Row r reads its CONV_TAPS - 1 predecessors on its path by index (meta.conv_prev; -1 reads zeros), so a
    branch's first rows read its parent's last rows. Taps are summed oldest first in fp32.
    """
    rows = x.shape[0]
    taps = torch.cat([meta.conv_prev, torch.arange(rows, device=x.device)[:, None]], 1)  # [T, CONV_TAPS]
    taps = torch.where(taps < 0, rows, taps).T  # row `rows` is the zero row appended below
    window = torch.cat([x, x.new_zeros(1, x.shape[1])]).float()[taps]  # [CONV_TAPS, T, C]
    w = weight.float()
    # Products and sums are correctly rounded elementwise ops (separate kernels, no FMA contraction), so
    # they are row-invariant on any shape; only the SiLU needs fixed tiles.
    acc = window[0] * w[:, 0]
    for j in range(1, CONV_TAPS):
        acc = acc + window[j] * w[:, j]
    return _by_row_tiles(lambda t: F.silu(t).to(dtype or x.dtype), acc)


def path_rows(meta: StreamMeta, seg: int) -> torch.Tensor:
    """Stream rows of logical positions 0 .. end-1 on the path ending in segment `seg` (its keys, in
    order)."""
    ranges = meta.key_ranges[seg, : len(meta.ancestors[seg]) + 1].tolist()
    rows = torch.cat([torch.arange(lo, hi) for lo, hi in ranges])
    assert rows.numel() == meta.segments[seg].end, "key ranges must cover the path"
    return rows


def fork_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: StreamMeta, scale: float | None = None
) -> torch.Tensor:
    """Causal GQA attention of every row over its own path: q [T, Hq, D], k/v [T, Hkv, D] -> [T, Hq, D].

    Per segment, keys of the path are gathered by logical position into KT-tiles; queries run in QT-tiles of
    logical positions; online softmax over key tiles in logical order with fixed-shape products and masked
    entries exactly 0. A key tile entirely masked for a row leaves its running max, sum and accumulator
    bit-identical, so the row's bits do not depend on how far the path continues.
    """
    rows, hq, d = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    scale = d**-0.5 if scale is None else scale
    out = torch.zeros(rows, hq, d, dtype=torch.float32, device=q.device)
    for s, seg in enumerate(meta.segments):
        if seg.length == 0 or s in meta.stored:
            continue  # a stored segment has no queries; its keys and values are rows of k and v
        keys = path_rows(meta, s).to(q.device)
        pad = -keys.numel() % KT
        kp = torch.cat([k[keys].float(), k.new_zeros(pad, hkv, d, dtype=torch.float32)]).permute(1, 2, 0)
        vp = torch.cat([v[keys].float(), v.new_zeros(pad, hkv, d, dtype=torch.float32)]).permute(1, 0, 2)
        for a in range(seg.pos0 - seg.pos0 % QT, seg.end, QT):
            lo, hi = max(a, seg.pos0), min(a + QT, seg.end)  # this tile's positions that are the segment's
            qt = q.new_zeros(QT, hq, d, dtype=torch.float32)
            qt[lo - a : hi - a] = q[seg.start + lo - seg.pos0 : seg.start + hi - seg.pos0].float()
            qh = qt.view(QT, hkv, group, d).permute(1, 2, 0, 3).reshape(hkv, group * QT, d)
            qpos = (a + torch.arange(QT, device=q.device)).repeat(group)
            m = torch.full((hkv, group * QT), float("-inf"), device=q.device)
            l_sum = torch.zeros(hkv, group * QT, device=q.device)
            acc = torch.zeros(hkv, group * QT, d, device=q.device)
            for j in range(0, min(a + QT, seg.end), KT):
                kpos = j + torch.arange(KT, device=q.device)
                valid = (kpos[None, :] <= qpos[:, None]) & (kpos[None, :] < seg.end)
                scores = torch.bmm(qh, kp[:, :, j : j + KT]) * scale
                scores = scores.masked_fill(~valid, float("-inf"))
                m_new = torch.maximum(m, scores.amax(-1))
                alpha = torch.exp(m - m_new)
                p = torch.exp(scores - m_new[..., None])
                l_sum = l_sum * alpha + p.sum(-1)
                acc = acc * alpha[..., None] + torch.bmm(p, vp[:, j : j + KT])
                m = m_new
            o = (acc / l_sum[..., None]).view(hkv, group, QT, d).permute(2, 0, 1, 3).reshape(QT, hq, d)
            out[seg.start + lo - seg.pos0 : seg.start + hi - seg.pos0] = o[lo - a : hi - a]
    return out.to(q.dtype)


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def _gdn_chunk(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One CHUNK of the gated delta rule (WY/UT form), all fp32, heads first: q/k [Hv, C, Dk], v [Hv, C, Dv],
    g/beta [Hv, C], state [Hv, Dk, Dv] at the chunk's start -> (out [Hv, C, Dv], state at its end).

    Row i reads rows j <= i only, through products with exact zeros at j > i, so rows after the path's end
    (padding, or a longer path's tokens) never change row i's bits.
    """
    c = q.shape[1]
    upper = torch.ones(c, c, dtype=torch.bool, device=q.device).triu(1)
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    cum = g.cumsum(-1)
    decay = (cum[:, :, None] - cum[:, None, :]).masked_fill(upper, float("-inf")).exp()
    system = (k_beta @ k.transpose(-1, -2)) * decay
    intra = (q @ k.transpose(-1, -2)) * decay
    u = torch.linalg.solve_triangular(system, v_beta, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(system, k_beta * cum.exp()[..., None], upper=False, unitriangular=True)
    v_new = u - w @ state
    out = (q * cum.exp()[..., None]) @ state + intra @ v_new
    k_end = k * (cum[:, -1:] - cum).exp()[..., None]
    state = state * cum[:, -1].exp()[:, None, None] + k_end.transpose(-1, -2) @ v_new
    return out, state


def fork_gdn(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, meta: StreamMeta,
    *, start: Mapping[int, torch.Tensor] | None = None,
    capture: dict[tuple[int, int], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Gated DeltaNet over every row's path: q/k [T, Hk, Dk], v [T, Hv, Dv], g/beta [T, Hv] -> [T, Hv, Dv].

    q and k are L2-normalised here (q also scaled by Dk^-0.5); key heads serve Hv // Hk consecutive value
    heads. Segments run level by level; segment s starts from the fp32 state at meta.gdn_chunk0[s] computed
    by meta.gdn_src[s] (zeros for -1), recomputes its straddling first chunk with its ancestors' tail rows
    (meta.gdn_tail[s]) in front of its own and drops their outputs, and keeps the states at the chunk
    boundaries its descendants start from. Chunks are CHUNK absolute positions, fixed shape, zero padding.
    A stored segment (meta.stored) is not run: `start[s]` is its state at its end, from a saved point.
    `capture`: keys (segment, boundary) to receive the state there (a saved point in the making).
    """
    rows, hk, dk = q.shape
    hv, dv = v.shape[1:]
    rep = hv // hk
    needed = {(src, b) for src, b in zip(meta.gdn_src, meta.gdn_chunk0, strict=True) if src >= 0}
    needed |= set(capture or ())
    states = {(s, meta.segments[s].end): start[s].float() for s in meta.stored} if start else {}
    assert set(states) == {(s, meta.segments[s].end) for s in meta.stored}, "a stored segment needs its state"
    out = torch.zeros(rows, hv, dv, dtype=torch.float32, device=q.device)

    def gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        chunk = x.new_zeros((CHUNK, *x.shape[1:]), dtype=torch.float32)
        chunk[: idx.numel()] = x[idx].float()
        return chunk

    for level in meta.levels:
        for s in level:
            seg = meta.segments[s]
            if seg.length == 0 or s in meta.stored:
                continue  # never a state source: its chunk0 lies at or past every boundary it could hold
            b, tail = meta.gdn_chunk0[s], meta.gdn_tail[s]
            idx = torch.cat([torch.tensor(tail, dtype=torch.int64),
                             torch.arange(seg.start, seg.start + seg.length)])
            idx = idx.to(q.device)
            src = meta.gdn_src[s]
            state = states[(src, b)] if src >= 0 else q.new_zeros(hv, dk, dv, dtype=torch.float32)
            for c0 in range(0, idx.numel(), CHUNK):
                ci = idx[c0 : c0 + CHUNK]
                qc = (_l2norm(gather(q, ci)) * dk**-0.5).repeat_interleave(rep, 1).transpose(0, 1)
                kc = _l2norm(gather(k, ci)).repeat_interleave(rep, 1).transpose(0, 1)
                vc = gather(v, ci).transpose(0, 1)
                gc, bc = gather(g, ci).transpose(0, 1), gather(beta, ci).transpose(0, 1)
                o, state = _gdn_chunk(qc, kc, vc, gc, bc, state)
                first = max(len(tail) - c0, 0)  # tail rows belong to ancestors: their outputs are dropped
                out[ci[first:]] = o.transpose(0, 1)[first : ci.numel()]
                boundary = b + c0 + CHUNK
                if ci.numel() == CHUNK and (s, boundary) in needed:
                    states[(s, boundary)] = state
    if capture is not None:
        for key in capture:
            capture[key] = states[key]
    return out.to(q.dtype)


def label_logits(hidden: torch.Tensor, embed_weight: torch.Tensor, meta: StreamMeta) -> torch.Tensor:
    """fp32 logits of each read's labels: hidden [T, H] (final-normed) x label rows of embed_weight [V, H].

    Returns [R, Lmax], padding labels -inf. Each read's label rows go through fixed [ROW_TILE, H] x [H, 1]
    products, so a logit's bits depend on neither R nor Lmax.
    """
    reads = meta.read_rows.numel()
    out = torch.full((reads, meta.read_labels.shape[1]), float("-inf"), device=hidden.device)
    for r in range(reads):
        n = int(meta.read_nlabels[r])
        h = hidden[meta.read_rows[r]].float()[None, :]
        labels = embed_weight[meta.read_labels[r, :n]].float()
        out[r, :n] = _by_row_tiles(lambda t, h=h: F.linear(t, h), labels)[:, 0]
    return out
