"""GPU tier: flash-linear-attention's chunked gated delta rule as an independent oracle for flidec's forked
Gated DeltaNet kernels, at Qwen3.5-0.8B's head shapes. Each leaf's path of a forked stream, run through fla as
one sequence, and flidec's forked rows of that path both agree with a float64 recurrence within the bf16
tolerance, so with each other within twice it (docs/DESIGN.md: fla is an oracle here, not a kernel of the
runtime)."""

from __future__ import annotations

import pytest
import torch
from test_gdn import forest, leaves, path_rows, recurrence  # a sibling test module

from flidec.codegen.gdn import fork_gdn, slot_buffer
from flidec.runtime.tables import gdn_tables
from flidec.testing.forests import pack_forest
from flidec.testing.tolerance import TOLERANCE

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
HK, HV, DK, DV = 16, 16, 128, 128  # Qwen3.5-0.8B's linear attention heads
# a long root, forks on and off a chunk boundary, a grandchild
SHAPE = [(-1, 700), (0, 300), (0, 257), (2, 65), (-1, 130)]


def test_fork_gdn_agrees_with_fla_on_every_path() -> None:
    chunk_gated_delta_rule = pytest.importorskip("fla.ops.gated_delta_rule").chunk_gated_delta_rule
    nodes = forest(SHAPE)
    stream = pack_forest(nodes)
    meta = stream.meta
    gen = torch.Generator().manual_seed(0)
    rows = len(stream.tokens)
    q, k = (torch.randn(rows, HK, DK, generator=gen).bfloat16().cuda() for _ in range(2))
    v = torch.randn(rows, HV, DV, generator=gen).bfloat16().cuda()
    g = (-0.3 * torch.rand(rows, HV, generator=gen)).cuda()
    beta = torch.rand(rows, HV, generator=gen).bfloat16().float().cuda()  # bf16 values: fla's input dtype
    slots = slot_buffer(gdn_tables(meta).num_slots, HV, DK, DV, torch.device("cuda"))
    ours = fork_gdn(q, k, v, g, beta, meta, slots=slots)
    atol, rtol = TOLERANCE[torch.bfloat16]
    for leaf in leaves(nodes):
        path = path_rows(meta, leaf).cuda()
        pq, pk, pv, pg, pb = (x[path] for x in (q, k, v, g, beta))
        theirs, _ = chunk_gated_delta_rule(pq[None], pk[None], pv[None], pg[None], pb.bfloat16()[None],
                                           scale=DK ** -0.5, use_qk_l2norm_in_kernel=True)
        exact, _ = recurrence(*(x.cpu() for x in (pq, pk, pv, pg, pb)))
        mine = ours[path]
        for name, got in (("flidec", mine), ("fla", theirs[0])):
            torch.testing.assert_close(got.double().cpu(), exact, atol=atol, rtol=rtol,
                                       msg=lambda m, n=name, at=leaf: f"{n}, leaf {at}: {m}")
        torch.testing.assert_close(mine.double(), theirs[0].double(), atol=2 * atol, rtol=2 * rtol)
        print(f"leaf {leaf} ({len(path)} rows): max |flidec - f64| "
              f"{(mine.double().cpu() - exact).abs().max():.2e}, max |fla - f64| "
              f"{(theirs[0].double().cpu() - exact).abs().max():.2e}")
