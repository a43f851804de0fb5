"""compile_kernels: recordings -> kernels, each distinct kernel the recordings launch compiled for the target.

Consumes codegen/levels.Recordings and, from the context, the target and the kernel cache; produces
codegen/levels.Kernels: each KernelSpec key's CompiledKernel, compiled by codegen/aot (Triton's compiler,
not its cache; TRITON_INTERPRET must be unset) in key order, or read from the cache. A cache entry
`<target>-<key>-<source>` holds the record's digest, `source` being Triton's hash of the kernel's source
and its callees', so an edited kernel compiles again under the same key. No recordings, no kernels (cpu).
"""

from __future__ import annotations

from pathlib import Path

from flidec.codegen import aot, levels
from flidec.codegen.recording import JIT_KERNELS
from flidec.passes.context import CompileContext
from flidec.passes.manager import register
from flidec.runtime.launch import CompiledKernel, read_kernel
from flidec.runtime.recording import KernelSpec


@register("compile_kernels", level_in="recordings", level_out="kernels")
def compile_kernels(rs: levels.Recordings, ctx: CompileContext) -> levels.Kernels:
    specs = {k.key: k for rec in rs.by_bucket.values() for k in rec.kernels}
    kernels: dict[str, CompiledKernel] = {}
    compiled = 0
    for key in sorted(specs):
        kernels[key], fresh = cached_kernel(specs[key], ctx.target, ctx.kernel_cache)
        compiled += fresh
    return levels.Kernels(rs, kernels, compiled)


def cached_kernel(spec: KernelSpec, target: str, cache: Path | None) -> tuple[CompiledKernel, bool]:
    """The compiled kernel of `spec`, from the cache when it holds it; True when compiled now."""
    fn = JIT_KERNELS[spec.name]
    entry = cache / f"{target}-{spec.key}-{fn.cache_key[:16]}" if cache is not None else None
    if entry is not None and entry.exists():
        return read_kernel(cache, entry.read_text().strip()), False
    kernel = aot.compile_kernel(fn, dict(spec.signature), dict(spec.constexprs), target=target,
                                num_warps=spec.num_warps, num_stages=spec.num_stages)
    if entry is not None:
        digest = aot.write_kernel(kernel, cache)
        entry.write_text(digest + "\n")
    return kernel, True
