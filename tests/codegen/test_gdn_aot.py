"""AOT compilation for sm_90 of the forked Gated DeltaNet (prep, plain and fused gate, state walk, outputs
plain and with the gated norm) and fork conv kernels at
Qwen3.5-0.8B shapes: they build through codegen/aot.compile_kernel (which refuses what the runtime cannot
launch), their records carry what a launcher needs, and their resource usage is printed for the report.

Compilation runs in a subprocess: this test process interprets Triton (TRITON_INTERPRET=1, conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flidec.codegen import aot
from flidec.runtime.launch import read_kernel

# 0.8B linear attention: 16 key and 16 value heads of 128, q/k/v read in place from the conv output
# [T, 2 * 16 * 128 + 16 * 128]; g and beta fp32 [T, 16] (fused: the projections a, b in bf16); the gated
# norm's z a [T, 16 * 128] projection.
BUILD = '''
import dataclasses, json, subprocess, sys, time
from pathlib import Path
import torch
import triton
from flidec.codegen import aot
from flidec.codegen.conv import ConvSpec, fork_conv_kernel
from flidec.codegen.gdn import GdnNorm, GdnSpec
from flidec.codegen.gdn_out import gdn_out_kernel
from flidec.codegen.gdn_prep import gdn_prep_kernel
from flidec.codegen.gdn_walk import gdn_state_kernel

out = Path(sys.argv[1])
h, d = 16, 128
conv_dim = 3 * h * d
strides = ((conv_dim, d), (conv_dim, d), (conv_dim, d), (h, 1), (h, 1), (h * d, d))
gdn = GdnSpec(torch.bfloat16, torch.float32, torch.bfloat16, h, h, d, d, False, strides)
fused = GdnSpec(torch.bfloat16, torch.bfloat16, torch.bfloat16, h, h, d, d, True, strides)
normed = dataclasses.replace(gdn, norm=GdnNorm(torch.bfloat16, torch.bfloat16, (h * d, d)))
conv = ConvSpec(torch.bfloat16, torch.bfloat16, conv_dim, (conv_dim, 4, conv_dim))
specs = {
    "gdn_prep": (gdn_prep_kernel, gdn.prep_signature(), gdn.prep_constexprs(), gdn.tiles.prep_warps),
    "gdn_prep_fused": (gdn_prep_kernel, fused.prep_signature(), fused.prep_constexprs(),
                       fused.tiles.prep_warps),
    "gdn_state": (gdn_state_kernel, gdn.state_signature(), gdn.state_constexprs(), gdn.tiles.state_warps),
    "gdn_out": (gdn_out_kernel, gdn.out_signature(), gdn.out_constexprs(), gdn.tiles.out_warps),
    "gdn_out_norm": (gdn_out_kernel, normed.out_signature(), normed.out_constexprs(), normed.tiles.out_warps),
    "conv": (fork_conv_kernel, conv.signature(), conv.constexprs(), conv.tiles.num_warps),
}
cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
report = {}
for name, (fn, signature, constexprs, warps) in specs.items():
    t = time.perf_counter()
    k = aot.compile_kernel(fn, signature, constexprs, target="sm_90", num_warps=warps, num_stages=1)
    seconds = time.perf_counter() - t
    digest = aot.write_kernel(k, out)
    usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(out / f"{digest}.cubin")],
                           capture_output=True, text=True, check=True).stdout
    report[name] = {"digest": digest, "seconds": seconds, "signature": signature, "shared": k.shared,
                    "constexprs": constexprs, "warps": warps, "usage": usage.strip().splitlines()[-1].strip()}
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("gdn_aot")
    script = work / "build.py"
    script.write_text(BUILD)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env |= {"TRITON_CACHE_DIR": str(work / "triton-cache")}
    run = subprocess.run([sys.executable, str(script), str(work / "kernels")], env=env, capture_output=True,
                         text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    for name, r in report.items():
        print(f"compile {name} for sm_90: {r['seconds']:.1f} s, {r['shared']} B shared; {r['usage']}")
    return work / "kernels", report


@pytest.mark.parametrize("name",
                         ["gdn_prep", "gdn_prep_fused", "gdn_state", "gdn_out", "gdn_out_norm", "conv"])
def test_gdn_and_conv_kernels_compile_for_sm90(built, name) -> None:
    directory, report = built
    k = read_kernel(directory, report[name]["digest"])
    signature = report[name]["signature"]
    kernels = {"conv": "fork_conv_kernel", "gdn_state": "gdn_state_kernel", "gdn_out": "gdn_out_kernel",
               "gdn_out_norm": "gdn_out_kernel"}
    assert k.name == kernels.get(name, "gdn_prep_kernel")
    assert k.cubin[:4] == b"\x7fELF"
    assert dict(k.params) == {n: t for n, t in signature.items() if t != "constexpr"}
    assert [n for n, _ in k.params] == [n for n, t in signature.items() if t != "constexpr"]
    assert dict(k.constexprs) == report[name]["constexprs"]
    assert k.threads == 32 * report[name]["warps"] and 0 < k.shared <= aot.MAX_SHARED[90]
    assert "REG:" in report[name]["usage"]
