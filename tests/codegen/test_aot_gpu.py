"""GPU tier: the AOT cubins launch through cuda.core the way the runtime will (pointers as ints, scalars as
numpy values, then the hidden pointers: global scratch where a kernel takes it), agree with the oracle, and
keep E3 on the hardware."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from flidec.codegen import aot, eager
from flidec.codegen.attention import AttentionSpec, fork_attention_kernel
from flidec.codegen.gemm import TILES, GemmSpec
from flidec.runtime import tables
from flidec.runtime.launch import HIDDEN_PARAMS, CompiledKernel, grid3, scratch_bytes
from flidec.runtime.meta import Segment, build_meta
from flidec.testing.tolerance import TOLERANCE

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

_NUMPY = {"i32": np.int32, "i64": np.int64, "fp32": np.float32}


def launch_cubin(k: CompiledKernel, grid: tuple[int, ...], *args) -> None:
    from cuda.bindings import driver
    from cuda.core import Device, LaunchConfig, ObjectCode, Stream, launch

    dev = Device()
    dev.set_current()
    kernel = ObjectCode.from_cubin(k.cubin).get_kernel(k.name)  # a library kernel (CUkernel)
    if k.shared > 48 * 1024:  # above the default, dynamic shared memory must be opted into per kernel
        (err,) = driver.cuKernelSetAttribute(
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k.shared,
            driver.CUkernel(int(kernel.handle)), dev.device_id)
        assert err == driver.CUresult.CUDA_SUCCESS, err
    print(f"{k.name}: {kernel.attributes.num_regs} registers, {kernel.attributes.local_size_bytes} B local "
          f"(spills), {k.shared} B shared")
    values = []
    for (_name, typ), a in zip(k.params, args, strict=True):
        values.append(a.data_ptr() if typ.startswith("*") else _NUMPY[typ](a))
    # global scratch for device-built TMA descriptors (codegen/gemm.py PERSISTENT), as the engine provides it
    need = scratch_bytes(k, grid3(grid))
    scratch = torch.empty(need, dtype=torch.uint8, device="cuda") if need else None
    values += [0 if scratch is None else scratch.data_ptr()] + [0] * (HIDDEN_PARAMS - 1)
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    launch(stream, LaunchConfig(grid=grid, block=(k.threads, 1, 1), shmem_size=k.shared), kernel, *values)
    torch.cuda.synchronize()


def test_attention_cubin_is_exact_and_matches_naive() -> None:
    from test_attention import naive_fork_attention, path_rows, two_instances

    hq, hkv, d, depth = 8, 2, 256, 4
    meta = two_instances(fork_on_64=False)
    t = meta.num_rows
    g = torch.Generator().manual_seed(0)
    qg = torch.randn(t, hq, 2 * d, generator=g).bfloat16().cuda()  # q and gate interleaved per head
    q, gate = qg[:, :, :d], qg[:, :, d:]
    k, v = (torch.randn(t, hkv, d, generator=g).bfloat16().cuda() for _ in range(2))
    spec = AttentionSpec(torch.bfloat16, hq, hkv, d, depth, True,
                         ((2 * hq * d, 2 * d), (hkv * d, d), (hkv * d, d), (2 * hq * d, 2 * d), (hq * d, d)))
    kern = aot.compile_kernel(fork_attention_kernel, spec.signature(), spec.constexprs(),
                              num_warps=spec.tiles.num_warps, num_stages=spec.tiles.num_stages)

    def run(qg, k, v, meta):
        out = torch.full((qg.shape[0], hq, d), float("nan"), dtype=torch.bfloat16, device="cuda")
        tiles = tables.query_tiles(meta, spec.tiles.block_m, num_tiles=32).cuda()
        levels = tables.path_levels(meta, depth, num_segments=8).cuda()
        launch_cubin(kern, spec.grid(32), qg[:, :, :d], k, v, qg[:, :, d:], out, tiles, levels, d**-0.5)
        return out

    out = run(qg, k, v, meta)
    rows = meta.segment_ids >= 0
    want = naive_fork_attention(q.cpu(), k.cpu(), v.cpu(), meta, gate.cpu())
    atol, rtol = TOLERANCE[torch.bfloat16]
    torch.testing.assert_close(out.cpu()[rows].double(), want[rows], atol=atol, rtol=rtol)
    for leaf in (2, 4, 5):
        path = path_rows(meta, leaf).cuda()
        plain = build_meta((Segment(0, len(path), 0, -1, 0),), (), len(path))
        assert torch.equal(run(qg[path].contiguous(), k[path], v[path], plain), out[path])


@pytest.mark.parametrize("n, kdim", [(3584, 1024), (1024, 3584)])
def test_gemm_cubins_are_batch_invariant_across_every_rung(n, kdim) -> None:
    """Each rung of gemm.TILES is batch invariant on its own, and every rung gives the same bits (what lets
    the tiles depend on the bucket's rows under E3). 1,100 rows are 9 row tiles of 128: the grouped order's
    full group of 8 and a partial one. A grid over all rows whose rows pointer holds fewer (gemm.py ROWS)
    writes those rows' bits and nothing past them."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(1100, kdim, generator=g) * 4).bfloat16().cuda()  # wide exponents: rounding shows
    w = (torch.randn(n, kdim, generator=g) / kdim**0.5).bfloat16().cuda()
    results = []
    for *_, tiles in TILES[torch.bfloat16]:
        spec = GemmSpec(torch.bfloat16, n, kdim, (kdim, kdim, n), tiles)
        kern = aot.compile_kernel(spec.kernel(), spec.signature(), spec.constexprs(),
                                  num_warps=tiles.num_warps, num_stages=tiles.num_stages)

        def run(x, rows=None, spec=spec, kern=kern):
            y = torch.full((x.shape[0], n), float("nan"), dtype=torch.bfloat16, device="cuda")
            count = eager.row_count(x.shape[0] if rows is None else rows, torch.device("cuda"))
            launch_cubin(kern, spec.grid(x.shape[0]), x, w, y, count)
            return y

        full = run(x)
        atol, rtol = TOLERANCE[torch.bfloat16]
        torch.testing.assert_close(full.double(), x.double() @ w.double().T, atol=16 * atol, rtol=rtol)
        for m in (1, 7, 16, 100):
            assert torch.equal(run(x[:m].contiguous()), full[:m]), (tiles, m)
        perm = torch.randperm(1100, generator=g).cuda()
        assert torch.equal(run(x[perm].contiguous()), full[perm]), tiles
        part = run(x, rows=300)
        assert torch.equal(part[:300], full[:300]) and part[300:].isnan().all(), tiles
        results.append(full)
    assert len(results) > 1 and all(torch.equal(r, results[0]) for r in results[1:])


def test_persistent_group_and_swiglu_cubins_equal_a_program_per_tile() -> None:
    """PERSISTENT on the hardware: the grouped launch of a Gated DeltaNet layer's four input projections
    (6,144, 2,048, 16 and 16 columns: members dealt as one sequence of tiles) and the SwiGLU launch, as
    cubins with 132 programs walking 1,100 rows' tiles, each output torch.equal to the program-per-tile
    cubins' on the same tiles; with a short rows pointer, nothing written past it."""
    from flidec.codegen.gemm import SILU_MUL_POINTERS, GemmGroupSpec

    g = torch.Generator().manual_seed(1)
    m, k = 1100, 1024
    x = (torch.randn(m, k, generator=g) * 4).bfloat16().cuda()
    ws = [(torch.randn(n, k, generator=g) / k**0.5).bfloat16().cuda() for n in (6144, 2048, 16, 16)]
    gate, up = ((torch.randn(3584, k, generator=g) / k**0.5).bfloat16().cuda() for _ in range(2))
    persistent = TILES[torch.bfloat16][-1][-1]
    per_tile = dataclasses.replace(persistent, programs=0, num_stages=3)  # 4: out of shared memory
    got = {}
    for tiles in (per_tile, persistent):
        # as fp32 activations compile them: fp32 projections out of the group, the SwiGLU's unrounded
        group = GemmGroupSpec(tuple(GemmSpec(torch.bfloat16, w.shape[0], k, (k, k, w.shape[0]), tiles,
                                             out_dtype=torch.float32) for w in ws))
        silu = GemmSpec(torch.bfloat16, 3584, k, (k, k, 3584), tiles, silu_round=False)
        launches = ((group, group.kernel(), group.signature()),
                    (silu, silu.kernel(silu_mul=True), silu.signature(SILU_MUL_POINTERS)))
        for rows in (m, 300):
            count = eager.row_count(rows, torch.device("cuda"))
            outs = tuple(torch.full((m, w.shape[0]), float("nan"), device="cuda") for w in ws)
            fused = torch.full((m, 3584), float("nan"), dtype=torch.bfloat16, device="cuda")
            for spec, fn, signature in launches:
                kern = aot.compile_kernel(fn, signature, spec.constexprs(), num_warps=tiles.num_warps,
                                          num_stages=spec.tiles.num_stages)
                args = group.args(x, tuple(ws), outs, count) if spec is group else (x, gate, up, fused, count)
                launch_cubin(kern, spec.grid(m), *args)
            got[tiles.programs, rows] = (*outs, fused)
    for rows in (m, 300):
        for a, b in zip(got[0, rows], got[persistent.programs, rows], strict=True):
            assert torch.equal(a[:rows], b[:rows]) and not b[:rows].isnan().any(), rows
            assert b[rows:].isnan().all(), rows
