"""AOT compilation for sm_90 on this machine: both kernels build, their records round-trip through an
artifact directory, carry what a launcher needs, and kernels the runtime cannot launch are refused.

Compilation runs in a subprocess: this test process interprets Triton (TRITON_INTERPRET=1, conftest.py),
and Triton decides compiled vs interpreted once, at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flidec.codegen import aot
from flidec.ir.errors import ArtifactError
from flidec.runtime.launch import SCRATCH_ALIGN, read_kernel

# Qwen3.5-0.8B shapes: 8 q heads sharing 2 kv heads of dim 256, q and its gate interleaved per head in one
# projection (row stride 2 * 8 * 256), hidden 1024, MLP 3584.
BUILD = '''
import json, sys, time
from pathlib import Path
import torch
import triton
import triton.language as tl
from flidec.codegen import aot
from flidec.codegen.attention import AttentionSpec, fork_attention_kernel
from flidec.codegen.gemm import GemmSpec, gemm_kernel, tiles_for

@triton.jit
def device_descriptor_kernel(x_ptr, n, B: tl.constexpr):
    d = tl.make_tensor_descriptor(x_ptr, shape=[n], strides=[1], block_shape=[B])
    d.store([0], d.load([0]) + 1.0)

out = Path(sys.argv[1])
hq, hkv, d = 8, 2, 256
attention = AttentionSpec(torch.bfloat16, hq, hkv, d, depth=3, has_gate=True,
                          strides=((2 * hq * d, 2 * d), (hkv * d, d), (hkv * d, d), (2 * hq * d, 2 * d),
                                   (hq * d, d)))
gemm = GemmSpec(torch.bfloat16, n=3584, k=1024, strides=(1024, 1024, 3584),
                tiles=tiles_for(torch.bfloat16, 8192, 8192))
report = {}
for name, fn, spec in (("attention", fork_attention_kernel, attention), ("gemm", gemm_kernel, gemm),
                       ("gemm_again", gemm_kernel, gemm)):
    t = time.perf_counter()
    k = aot.compile_kernel(fn, spec.signature(), spec.constexprs(), target="sm_90",
                           num_warps=spec.tiles.num_warps, num_stages=spec.tiles.num_stages)
    report[name] = {"digest": aot.write_kernel(k, out), "seconds": time.perf_counter() - t,
                    "signature": spec.signature(), "constexprs": spec.constexprs(),
                    "num_warps": spec.tiles.num_warps}
k = aot.compile_kernel(device_descriptor_kernel, {"x_ptr": "*fp32", "n": "i32", "B": "constexpr"}, {"B": 64})
report["descriptor"] = {"digest": aot.write_kernel(k, out)}
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("aot")
    script = work / "build.py"
    script.write_text(BUILD)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # a fresh cache, and no cache hits, so the second gemm build really recompiles
    env |= {"TRITON_CACHE_DIR": str(work / "triton-cache"), "TRITON_ALWAYS_COMPILE": "1"}
    run = subprocess.run([sys.executable, str(script), str(work / "kernels")], env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    for name in ("attention", "gemm"):
        print(f"compile {name} for sm_90: {report[name]['seconds']:.2f} s")
    return work / "kernels", report


@pytest.mark.parametrize("name", ["attention", "gemm"])
def test_kernels_compile_for_sm90_with_launch_metadata(built, name) -> None:
    directory, report = built
    k = read_kernel(directory, report[name]["digest"])
    signature = report[name]["signature"]
    assert k.target == "sm_90" and k.triton_version == "3.6.0"
    assert k.name in ("fork_attention_kernel", "gemm_kernel") and k.name.encode() in k.cubin
    assert k.cubin[:4] == b"\x7fELF"
    assert [n for n, _ in k.params] == [n for n, t in signature.items() if t != "constexpr"]
    assert dict(k.params) == {n: t for n, t in signature.items() if t != "constexpr"}
    assert dict(k.constexprs) == report[name]["constexprs"]
    assert set(k.aligned) == {n for n, t in k.params if t.startswith("*")}
    assert k.threads == 32 * k.num_warps and k.num_warps == report[name]["num_warps"]  # the tiles' (4 or 8)
    assert 0 < k.shared <= aot.MAX_SHARED[90]


def test_compilation_is_deterministic(built) -> None:
    _, report = built
    assert report["gemm"]["digest"] == report["gemm_again"]["digest"]


def test_kernel_building_a_tma_descriptor_records_its_global_scratch(built) -> None:
    """A descriptor built on the device lives in Triton's global scratch: the record keeps its bytes per
    program (one 128-byte descriptor) and alignment, which the runtime's scratch buffer satisfies."""
    directory, report = built
    k = read_kernel(directory, report["descriptor"]["digest"])
    assert k.scratch == 128 and SCRATCH_ALIGN % k.scratch_align == 0
    assert read_kernel(directory, report["gemm"]["digest"]).scratch == 0


def test_record_round_trips_and_corruption_is_refused(built, tmp_path) -> None:
    directory, report = built
    k = read_kernel(directory, report["gemm"]["digest"])
    digest = aot.write_kernel(k, tmp_path)
    assert digest == report["gemm"]["digest"] and read_kernel(tmp_path, digest) == k

    cubin = tmp_path / f"{digest}.cubin"
    data = bytearray(cubin.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cubin.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="cubin does not match its hash"):
        read_kernel(tmp_path, digest)
    meta = tmp_path / f"{digest}.json"
    meta.write_text(meta.read_text().replace('"num_warps":8', '"num_warps":4'))
    with pytest.raises(ArtifactError, match="metadata does not match"):
        read_kernel(tmp_path, digest)
    with pytest.raises(ArtifactError, match="cannot read"):
        read_kernel(tmp_path, "0" * 64)


def test_compile_kernel_checks_its_inputs() -> None:
    import torch

    from flidec.codegen import eager
    from flidec.codegen.gemm import GemmSpec, gemm_kernel, tiles_for

    spec = GemmSpec(torch.float32, n=64, k=64, strides=(64, 64, 64), tiles=tiles_for(torch.float32, 64, 64))
    with pytest.raises(aot.KernelBuildError, match="unsupported target"):
        aot.compile_kernel(gemm_kernel, spec.signature(), spec.constexprs(), target="sm_80")
    with pytest.raises(aot.KernelBuildError, match="constexprs"):
        aot.compile_kernel(gemm_kernel, spec.signature(), {"N": 64})
    bad = dict(spec.signature()) | {"rows_ptr": "tensordesc<fp32[64]>"}
    with pytest.raises(aot.KernelBuildError, match="cannot pass"):
        aot.compile_kernel(gemm_kernel, bad, spec.constexprs())
    with pytest.raises(aot.KernelBuildError, match="not all pointer"):
        aot.compile_kernel(gemm_kernel, spec.signature(), spec.constexprs(), aligned=("N",))
    if eager.interpreting():
        with pytest.raises(aot.KernelBuildError, match="TRITON_INTERPRET=1"):
            aot.compile_kernel(gemm_kernel, spec.signature(), spec.constexprs())
    else:
        assert aot.compile_kernel(gemm_kernel, spec.signature(), spec.constexprs()).name == "gemm_kernel"
