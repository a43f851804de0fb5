"""GPU tier: the forked Gated DeltaNet (prep with the fused gate, state walk, outputs) and fork conv cubins, built by codegen/aot at Qwen3.5-0.8B
head shapes, launch through cuda.core the way the runtime will, agree with the reference ops and keep E3 on
the hardware (a forest's paths equal their plain streams bit for bit)."""

from __future__ import annotations

import pytest
import torch

from flidec.codegen import aot
from flidec.codegen.conv import ConvSpec, fork_conv_kernel
from flidec.codegen.gdn import (
    ChunkWork,
    GdnSpec,
    gdn_out_kernel,
    gdn_prep_kernel,
    gdn_state_kernel,
    slot_buffer,
)
from flidec.runtime.launch import CompiledKernel
from flidec.runtime.reference import ops
from flidec.runtime.reference.forests import pack_forest, path_stream
from flidec.runtime.reference.tolerance import TOLERANCE
from flidec.runtime.tables import conv_taps, gdn_tables

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

H, D = 16, 128  # 0.8B: 16 key and 16 value heads of 128
CONV_DIM = 3 * H * D


SPEC = GdnSpec(torch.bfloat16, torch.bfloat16, torch.bfloat16, H, H, D, D, True,
               ((CONV_DIM, D), (CONV_DIM, D), (CONV_DIM, D), (2 * H, 1), (2 * H, 1), (H * D, D)))


@pytest.fixture(scope="module")
def kernels() -> tuple[dict[object, CompiledKernel], CompiledKernel]:
    """The GDN cubins by kernel function, and the conv cubin."""
    conv = ConvSpec(torch.bfloat16, torch.bfloat16, CONV_DIM, (CONV_DIM, 4, CONV_DIM))
    t = SPEC.tiles
    gdn = {fn: aot.compile_kernel(fn, sig, constexprs, num_warps=warps, num_stages=stages)
           for fn, sig, constexprs, warps, stages in (
               (gdn_prep_kernel, SPEC.prep_signature(), SPEC.prep_constexprs(), t.prep_warps, 1),
               (gdn_state_kernel, SPEC.state_signature(), SPEC.state_constexprs(), t.state_warps, t.state_stages),
               (gdn_out_kernel, SPEC.out_signature(), SPEC.out_constexprs(), t.out_warps, 1))}
    return gdn, aot.compile_kernel(fork_conv_kernel, conv.signature(), conv.constexprs(),
                                   num_warps=conv.tiles.num_warps, num_stages=conv.tiles.num_stages)


def layer(kernels, mixed: torch.Tensor, ab: torch.Tensor, weight, a_log, dt_bias, meta, per_level=None):
    """conv then GDN from the cubins: mixed [T, CONV_DIM] -> q, k, v in place; ab [T, 2H] holds a then b."""
    from test_aot_gpu import launch_cubin

    gdn, conv = kernels
    rows = mixed.shape[0]
    qkv = torch.full_like(mixed, float("nan"))
    taps = conv_taps(meta).cuda()
    launch_cubin(conv, ((rows + 15) // 16, CONV_DIM // 128), mixed, weight, qkv, taps, rows)
    q, k, v = (qkv[:, i * H * D : (i + 1) * H * D].view(rows, H, D) for i in range(3))
    tables = gdn_tables(meta, per_level=per_level, num_chunks=None if per_level is None else 40)
    items, tails, chunks = tables.items.cuda(), tables.tails.cuda(), tables.chunks.cuda()
    slots = slot_buffer(tables.num_slots, H, D, D, "cuda")
    work = ChunkWork.empty(tables.num_chunks, SPEC, "cuda")
    out = torch.full((rows, H, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    for call in SPEC.calls(tables.num_chunks, tables.num_levels, tables.per_level, q, k, v, ab[:, :H], ab[:, H:],
                           a_log, dt_bias, items, tails, chunks, work, out, slots):
        launch_cubin(gdn[call.kernel], call.grid, *call.args)
    return qkv, out


def weights():
    g = torch.Generator().manual_seed(0)
    return ((torch.randn(CONV_DIM, 4, generator=g) * 0.5).bfloat16().cuda(),
            torch.linspace(-1, 1, H).bfloat16().cuda(), torch.linspace(-2, 0.5, H).bfloat16().cuda())


def test_gdn_cubins_match_reference_and_are_exact(kernels) -> None:
    from test_gdn import path_rows

    shape = [(-1, 65), (0, 63), (1, 1), (0, 64), (3, 65), (-1, 130), (5, 3), (5, 70)]
    nodes, next_id = [], 1
    for parent, length in shape:
        nodes.append((parent, list(range(next_id, next_id + length))))
        next_id += length
    g = torch.Generator().manual_seed(1)
    mixed_table = torch.randn(next_id, CONV_DIM, generator=g).bfloat16().cuda()
    ab_table = torch.randn(next_id, 2 * H, generator=g).bfloat16().cuda()
    weight, a_log, dt_bias = weights()
    stream = pack_forest(nodes, list(reversed(range(len(nodes)))), gap=2)
    tokens = stream.tokens.cuda()
    qkv, out = layer(kernels, mixed_table[tokens], ab_table[tokens], weight, a_log, dt_bias, stream.meta)

    meta, rows = stream.meta, stream.meta.segment_ids >= 0
    want_qkv = ops.fork_conv(mixed_table[tokens].cpu(), weight.cpu(), meta)
    q, k, v = (want_qkv[:, i * H * D : (i + 1) * H * D].view(-1, H, D) for i in range(3))
    ab = ab_table[tokens].cpu()
    gate = ops.gdn_decay(ab[:, :H], a_log.cpu(), dt_bias.cpu())
    want = ops.fork_gdn(q, k, v, gate, ops.gdn_beta(ab[:, H:]), meta)
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
