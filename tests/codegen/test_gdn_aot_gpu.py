"""GPU tier: the forked Gated DeltaNet (prep with the fused gate, state walk, outputs) and fork conv cubins,
built by codegen/aot at Qwen3.5-0.8B head shapes and at the tiny test checkpoint's (fewer key than value
heads, head dim 16), launch through cuda.core the way the runtime will, agree with the reference ops and keep
E3 on the hardware (a forest's paths equal their plain streams bit for bit)."""

from __future__ import annotations

import pytest
import torch

from flidec.codegen import aot, eager
from flidec.codegen.conv import ConvSpec, fork_conv_kernel
from flidec.codegen.gdn import ChunkWork, GdnSpec, slot_buffer
from flidec.codegen.gdn_out import gdn_out_kernel
from flidec.codegen.gdn_prep import gdn_prep_kernel
from flidec.codegen.gdn_walk import gdn_state_kernel
from flidec.runtime.launch import CompiledKernel
from flidec.runtime.reference import ops
from flidec.runtime.tables import conv_taps, gdn_tables
from flidec.testing.forests import pack_forest, path_stream
from flidec.testing.tolerance import TOLERANCE

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# (key heads, value heads, head dim): 0.8B's 16 and 16 of 128; the tiny checkpoint's 2 and 4 of 16
SHAPES = [(16, 16, 128), (2, 4, 16)]


def spec_of(shape: tuple[int, int, int]) -> GdnSpec:
    hk, hv, d = shape
    conv_dim = (2 * hk + hv) * d
    return GdnSpec(torch.bfloat16, torch.bfloat16, torch.bfloat16, hk, hv, d, d, True,
                   ((conv_dim, d), (conv_dim, d), (conv_dim, d), (2 * hv, 1), (2 * hv, 1), (hv * d, d)))


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "hk{}-hv{}-d{}".format(*s))
def kernels(request) -> tuple[GdnSpec, dict[object, CompiledKernel], CompiledKernel]:
    """The spec, the GDN cubins by kernel function, and the conv cubin."""
    spec = spec_of(request.param)
    conv_dim = (2 * spec.num_k_heads + spec.num_v_heads) * spec.key_dim
    conv = ConvSpec(torch.bfloat16, torch.bfloat16, conv_dim, (conv_dim, 4, conv_dim))
    t = spec.tiles
    gdn = {fn: aot.compile_kernel(fn, sig, constexprs, num_warps=warps, num_stages=stages)
           for fn, sig, constexprs, warps, stages in (
               (gdn_prep_kernel, spec.prep_signature(), spec.prep_constexprs(), t.prep_warps, 1),
               (gdn_state_kernel, spec.state_signature(), spec.state_constexprs(), t.state_warps,
                t.state_stages),
               (gdn_out_kernel, spec.out_signature(), spec.out_constexprs(), t.out_warps, 1))}
    return spec, gdn, aot.compile_kernel(fork_conv_kernel, conv.signature(), conv.constexprs(),
                                         num_warps=conv.tiles.num_warps, num_stages=conv.tiles.num_stages)


def split_qkv(spec: GdnSpec, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    hk, hv, d = spec.num_k_heads, spec.num_v_heads, spec.key_dim
    rows = qkv.shape[0]
    return (qkv[:, : hk * d].view(rows, hk, d), qkv[:, hk * d : 2 * hk * d].view(rows, hk, d),
            qkv[:, 2 * hk * d :].view(rows, hv, d))


def layer(kernels, mixed: torch.Tensor, ab: torch.Tensor, weight, a_log, dt_bias, meta, per_level=None):
    """conv then GDN from the cubins: mixed [T, conv dim] -> q, k, v in place; ab [T, 2 Hv] holds a then b."""
    from test_aot_gpu import launch_cubin

    spec, gdn, conv = kernels
    hv, d = spec.num_v_heads, spec.value_dim
    qkv = torch.full_like(mixed, float("nan"))
    taps = conv_taps(meta).cuda()
    conv_spec = ConvSpec(torch.bfloat16, torch.bfloat16, mixed.shape[1], (mixed.shape[1], 4, mixed.shape[1]))
    count = eager.row_count(mixed.shape[0], torch.device("cuda"))  # the rows pointer (gemm.py ROWS)
    launch_cubin(conv, conv_spec.grid(mixed.shape[0]), mixed, weight, qkv, taps, count)
    q, k, v = split_qkv(spec, qkv)
    tables = gdn_tables(meta, per_level=per_level, num_chunks=None if per_level is None else 40)
    items, tails, chunks = tables.items.cuda(), tables.tails.cuda(), tables.chunks.cuda()
    slots = slot_buffer(tables.num_slots, hv, d, d, "cuda")
    work = ChunkWork.empty(tables.num_chunks, spec, "cuda")
    out = torch.full((mixed.shape[0], hv, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    for call in spec.calls(tables.num_chunks, tables.num_levels, tables.per_level, q, k, v, ab[:, :hv],
                           ab[:, hv:], a_log, dt_bias, items, tails, chunks, work, out, slots):
        launch_cubin(gdn[call.kernel], call.grid, *call.args)
    return qkv, out


def weights(spec: GdnSpec, conv_dim: int):
    g = torch.Generator().manual_seed(0)
    hv = spec.num_v_heads
    return ((torch.randn(conv_dim, 4, generator=g) * 0.5).bfloat16().cuda(),
            torch.linspace(-1, 1, hv).bfloat16().cuda(), torch.linspace(-2, 0.5, hv).bfloat16().cuda())


def test_gdn_cubins_match_reference_and_are_exact(kernels) -> None:
    from test_gdn import path_rows

    spec = kernels[0]
    hv = spec.num_v_heads
    conv_dim = (2 * spec.num_k_heads + hv) * spec.key_dim
    shape = [(-1, 65), (0, 63), (1, 1), (0, 64), (3, 65), (-1, 130), (5, 3), (5, 70)]
    nodes, next_id = [], 1
    for parent, length in shape:
        nodes.append((parent, list(range(next_id, next_id + length))))
        next_id += length
    g = torch.Generator().manual_seed(1)
    mixed_table = torch.randn(next_id, conv_dim, generator=g).bfloat16().cuda()
    ab_table = torch.randn(next_id, 2 * hv, generator=g).bfloat16().cuda()
    weight, a_log, dt_bias = weights(spec, conv_dim)
    stream = pack_forest(nodes, list(reversed(range(len(nodes)))), gap=2)
    tokens = stream.tokens.cuda()
    qkv, out = layer(kernels, mixed_table[tokens], ab_table[tokens], weight, a_log, dt_bias, stream.meta)

    meta, rows = stream.meta, stream.meta.segment_ids >= 0
    want_qkv = ops.fork_conv(mixed_table[tokens].cpu(), weight.cpu(), meta)
    q, k, v = split_qkv(spec, want_qkv)
    ab = ab_table[tokens].cpu()
    gate = ops.gdn_decay(ab[:, :hv], a_log.cpu(), dt_bias.cpu())
    want = ops.fork_gdn(q, k, v, gate, ops.gdn_beta(ab[:, hv:]), meta)
    atol, rtol = TOLERANCE[torch.bfloat16]
    torch.testing.assert_close(qkv.cpu()[rows].double(), want_qkv[rows].double(), atol=atol, rtol=rtol)
    torch.testing.assert_close(out.cpu()[rows].double(), want[rows].double(), atol=atol, rtol=rtol)
    assert out.cpu()[~rows].isnan().all()

    _, padded = layer(kernels, mixed_table[tokens], ab_table[tokens], weight, a_log, dt_bias, meta,
                      per_level=9)
    assert torch.equal(out[rows.cuda()], padded[rows.cuda()])
    for leaf in (2, 4, 6, 7):
        plain = path_stream(nodes, leaf)
        ptok = plain.tokens.cuda()
        _, want_plain = layer(kernels, mixed_table[ptok], ab_table[ptok], weight, a_log, dt_bias, plain.meta)
        s = meta.segments[leaf]
        path = path_rows(meta, leaf).cuda()
        assert torch.equal(out[path], want_plain), f"path to {leaf} ({s}) differs from its plain stream"
