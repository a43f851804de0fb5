"""Ahead-of-time compilation of @triton.jit kernels into launchable records, and their on-disk form.

Consumes a kernel, its signature (every parameter's Triton type, "constexpr" for the specialized ones) and
its constexpr values; produces a CompiledKernel (runtime/launch.py: the cubin plus what a launcher needs),
written content-addressed into an artifact's kernel directory, never Triton's cache directory (it holds
absolute paths and toolchain-dependent keys). Relies on Triton 3.6 building for a GPU that need not be
present (ptxas ships in Triton's wheel); kernels the runtime cannot launch are refused at build time. Must
run in a process where TRITON_INTERPRET is unset.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from flidec.ir.errors import FlideError
from flidec.runtime.launch import SCRATCH_ALIGN, CompiledKernel
from flidec.runtime.launch import canonical as _canonical

MAX_SHARED = {90: 232448}  # opt-in dynamic shared memory per block, bytes, by compute capability
_SCALAR_TYPES = {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64",
                 "fp16", "bf16", "fp32", "fp64"}


class KernelBuildError(FlideError):
    """A kernel that does not compile, or that the flidec runtime could not launch."""


def parse_target(target: str) -> int:
    """Compute capability of an "sm_XY" target string."""
    m = re.fullmatch(r"sm_(\d+)", target)
    if not m or int(m.group(1)) not in MAX_SHARED:
        raise KernelBuildError(f"unsupported target {target!r} (supported: "
                               f"{', '.join(f'sm_{c}' for c in MAX_SHARED)})")
    return int(m.group(1))


def compile_kernel(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], target: str = "sm_90",
                   num_warps: int = 4, num_stages: int = 3, aligned: tuple[str, ...] | None = None
                   ) -> CompiledKernel:
    """Compile `fn` for `target` with these constexprs; refuse what the runtime cannot launch.

    `signature` maps every parameter of `fn`, in order, to its Triton type. `aligned` names the pointer
    parameters the compiler may assume 16-byte aligned (default: all of them; the runtime's buffer plan
    aligns every buffer). Triton 3.6's `triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))`
    needs no GPU; the compiled kernel takes its non-constexpr parameters in order followed by two hidden
    pointers, global and profile scratch.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    capability = parse_target(target)
    names = list(fn.arg_names)
    if list(signature) != names:
        raise KernelBuildError(f"{fn.__name__}: signature names {list(signature)} != parameters {names}")
    specialized = {n for n, t in signature.items() if t == "constexpr"}
    if specialized != set(constexprs):
        raise KernelBuildError(f"{fn.__name__}: constexprs {sorted(constexprs)} != signature's constexpr "
                               f"parameters {sorted(specialized)}")
    params = tuple((n, t) for n, t in signature.items() if t != "constexpr")
    for n, t in params:
        if not (t.startswith("*") and t[1:] in _SCALAR_TYPES) and t not in _SCALAR_TYPES:
            raise KernelBuildError(f"{fn.__name__}: parameter {n} has type {t!r}, which the runtime cannot "
                                   "pass")
    pointers = tuple(n for n, t in params if t.startswith("*"))
    aligned = pointers if aligned is None else tuple(aligned)
    if not set(aligned) <= set(pointers):
        raise KernelBuildError(f"{fn.__name__}: aligned {aligned} are not all pointer parameters")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    if not isinstance(fn, JITFunction):
        raise KernelBuildError(f"{fn.__name__} is not a compilable @triton.jit kernel here "
                               "(TRITON_INTERPRET=1 was set when triton was imported: compile in another "
                               "process)")

    src = ASTSource(fn, signature, constexprs, attrs)
    try:
        k = triton.compile(src, target=GPUTarget("cuda", capability, 32),
                           options={"num_warps": num_warps, "num_stages": num_stages})
    except Exception as e:  # Triton raises several unrelated types; the build reports them all one way
        raise KernelBuildError(f"{fn.__name__}: compilation for {target} failed: {e}") from e
    md = k.metadata
    _check_launchable(fn.__name__, md, capability)
    return CompiledKernel(
        name=md.name, target=target, cubin=bytes(k.asm["cubin"]), params=params,
        constexprs=tuple((n, constexprs[n]) for n in names if n in constexprs), aligned=aligned,
        num_warps=md.num_warps, num_stages=md.num_stages, shared=md.shared, triton_version=triton.__version__,
        scratch=md.global_scratch_size,
        scratch_align=md.global_scratch_align if md.global_scratch_size else 1)


def _check_launchable(name: str, md: Any, capability: int) -> None:
    """Refuse what the runtime cannot launch. It provides global scratch (the record keeps its bytes a
    program: TMA descriptors built on the device live there) but no profile scratch, cluster, cooperative or
    PDL launch, or TMA descriptors built on the host."""
    problems = []
    if md.global_scratch_size and SCRATCH_ALIGN % md.global_scratch_align:
        problems.append(f"needs its global scratch aligned to {md.global_scratch_align} bytes (the runtime "
                        f"aligns it to {SCRATCH_ALIGN})")
    if md.profile_scratch_size:
        problems.append("needs a profile scratch buffer")
    if md.num_ctas != 1:
        problems.append(f"needs a cluster launch of {md.num_ctas} CTAs")
    if md.launch_cooperative_grid:
        problems.append("needs a cooperative launch")
    if md.launch_pdl:
        problems.append("needs programmatic dependent launch")
    if md.tensordesc_meta:
        problems.append("takes TMA descriptors built on the host")
    if getattr(md, "tmem_size", 0):
        problems.append("needs tensor memory")
    if md.shared > MAX_SHARED[capability]:
        problems.append(f"needs {md.shared} bytes of shared memory (at most {MAX_SHARED[capability]})")
    if problems:
        raise KernelBuildError(f"kernel {name} cannot be launched by the flidec runtime: "
                               f"{'; '.join(problems)}")


def write_kernel(kernel: CompiledKernel, directory: str | Path) -> str:
    """Store the record as `<digest>.json` + `<digest>.cubin` under `directory`; returns the digest. The
    runtime (runtime/launch.py) reads it back with every hash checked."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    digest = kernel.digest
    (directory / f"{digest}.cubin").write_bytes(kernel.cubin)
    (directory / f"{digest}.json").write_bytes(_canonical(kernel.metadata()))
    return digest

