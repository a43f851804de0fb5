"""Ahead-of-time compilation of @triton.jit kernels into launchable records, and their on-disk form.

Consumes a kernel, its signature (every parameter's Triton type, "constexpr" for the specialized ones) and
its constexpr values; produces a CompiledKernel: the cubin plus what a launcher needs (entry name, launch
parameters in order, threads per block, dynamic shared memory). Records are written into an artifact's
kernel directory as `<sha256>.json` + `<sha256>.cubin`, content-addressed, and read back with every hash
checked. Never Triton's cache directory: it holds absolute paths and toolchain-dependent keys.
Relies on Triton 3.6: `triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))` builds for a GPU
that need not be present (ptxas ships in Triton's wheel), and a compiled kernel takes its non-constexpr
parameters in order followed by two hidden pointers (global and profile scratch) that we pass as null, so
kernels that need either scratch buffer, a cluster, a cooperative or PDL launch, or TMA descriptors built on
the host are refused at build time. Must run in a process where TRITON_INTERPRET is unset.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from flidec.ir.errors import ArtifactError, FlideError

HIDDEN_PARAMS = 2  # Triton 3.6 appends global-scratch and profile-scratch pointers to every kernel
MAX_SHARED = {90: 232448}  # opt-in dynamic shared memory per block, bytes, by compute capability
_SCALAR_TYPES = {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32", "fp64"}


class KernelBuildError(FlideError):
    """A kernel that does not compile, or that the flidec runtime could not launch."""


@dataclass(frozen=True, slots=True)
class CompiledKernel:
    """One kernel binary and what launching it takes.

    Launch: grid from the recording, block = (32 * num_warps, 1, 1), `shared` bytes of dynamic shared memory
    (above 48 KiB the launcher must raise the function's max-dynamic-shared-memory attribute first),
    arguments = `params` in order (pointers as ints, scalars as numpy values of their type) then
    HIDDEN_PARAMS null pointers. Pointers named in `aligned` were compiled assuming 16-byte alignment.
    """

    name: str  # the cubin's entry point
    target: str  # e.g. "sm_90"
    cubin: bytes
    params: tuple[tuple[str, str], ...]  # launch parameters in order: (name, Triton type: "*bf16", "i32", ...)
    constexprs: tuple[tuple[str, int | float | bool | str], ...]  # what it was specialized on, for inspection
    aligned: tuple[str, ...]
    num_warps: int
    num_stages: int
    shared: int
    triton_version: str

    @property
    def threads(self) -> int:
        return 32 * self.num_warps

    def metadata(self) -> dict[str, Any]:
        """The JSON half of the record (everything but the cubin, which it names by hash)."""
        meta = asdict(self)
        del meta["cubin"]
        meta["params"] = [list(p) for p in self.params]
        meta["constexprs"] = [list(c) for c in self.constexprs]
        meta["aligned"] = list(self.aligned)
        meta["cubin_sha256"] = hashlib.sha256(self.cubin).hexdigest()
        meta["hidden_params"] = HIDDEN_PARAMS
        return meta

    @property
    def digest(self) -> str:
        """sha256 of the canonical metadata (which includes the cubin's hash): the record's address."""
        return hashlib.sha256(_canonical(self.metadata())).hexdigest()


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
    aligns every buffer).
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
            raise KernelBuildError(f"{fn.__name__}: parameter {n} has type {t!r}, which the runtime cannot pass")
    pointers = tuple(n for n, t in params if t.startswith("*"))
    aligned = pointers if aligned is None else tuple(aligned)
    if not set(aligned) <= set(pointers):
        raise KernelBuildError(f"{fn.__name__}: aligned {aligned} are not all pointer parameters")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    if not isinstance(fn, JITFunction):
        raise KernelBuildError(f"{fn.__name__} is not a compilable @triton.jit kernel here "
                               "(TRITON_INTERPRET=1 was set when triton was imported: compile in another process)")

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
        num_warps=md.num_warps, num_stages=md.num_stages, shared=md.shared, triton_version=triton.__version__)


def _check_launchable(name: str, md: Any, capability: int) -> None:
    problems = []
    if md.global_scratch_size:
        problems.append(f"needs {md.global_scratch_size} bytes of global scratch per program")
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
        raise KernelBuildError(f"kernel {name} cannot be launched by the flidec runtime: {'; '.join(problems)}")


def write_kernel(kernel: CompiledKernel, directory: str | Path) -> str:
    """Store the record as `<digest>.json` + `<digest>.cubin` under `directory`; returns the digest."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    digest = kernel.digest
    (directory / f"{digest}.cubin").write_bytes(kernel.cubin)
    (directory / f"{digest}.json").write_bytes(_canonical(kernel.metadata()))
    return digest


def read_kernel(directory: str | Path, digest: str) -> CompiledKernel:
    """Load a record written by `write_kernel`, refusing it if any hash disagrees."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / f"{digest}.json").read_bytes())
        cubin = (directory / f"{digest}.cubin").read_bytes()
    except (OSError, ValueError) as e:
        raise ArtifactError(f"kernel {digest}: cannot read its record in {directory}: {e}") from e
    if hashlib.sha256(_canonical(meta)).hexdigest() != digest:
        raise ArtifactError(f"kernel {digest}: its metadata does not match its hash (corrupted artifact)")
    if hashlib.sha256(cubin).hexdigest() != meta.get("cubin_sha256"):
        raise ArtifactError(f"kernel {digest} ({meta.get('name')}): its cubin does not match its hash "
                            "(corrupted artifact)")
    if meta.get("hidden_params") != HIDDEN_PARAMS:
        raise ArtifactError(f"kernel {digest}: built with {meta.get('hidden_params')} hidden parameters, "
                            f"this runtime passes {HIDDEN_PARAMS}")
    return CompiledKernel(
        name=meta["name"], target=meta["target"], cubin=cubin,
        params=tuple((n, t) for n, t in meta["params"]),
        constexprs=tuple((n, v) for n, v in meta["constexprs"]), aligned=tuple(meta["aligned"]),
        num_warps=meta["num_warps"], num_stages=meta["num_stages"], shared=meta["shared"],
        triton_version=meta["triton_version"])


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
