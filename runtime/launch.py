"""Kernel records and launches: what a compiled kernel is on disk, and how the runtime calls it.

Consumes an artifact's kernel records (`kernels/<digest>.json` + `.cubin`, written by codegen/aot.py, which
imports the record type and reader from here) and a recording's steps resolved to pointers by
runtime/buffers.py; produces launches through a Launcher. `CudaLauncher` loads cubins with cuda.core
(imported lazily: only on the GPU path) and launches them on torch's current stream as CompiledKernel
describes. Tests substitute a recording launcher for CudaLauncher and check the exact argument values.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from flidec.ir.errors import ArtifactError
from flidec.runtime.recording import DTYPES, numpy_type

HIDDEN_PARAMS = 2  # Triton 3.6 appends global-scratch and profile-scratch pointers to every kernel
SCRATCH_ALIGN = 256  # the global scratch buffer's alignment (torch's CUDA allocations are 512-byte aligned)
DEFAULT_SHARED = 48 * 1024  # dynamic shared memory a launch may use without opting in
# Triton scalar type -> the numpy type its value is passed as (every named dtype but bf16, which numpy lacks)
SCALARS: dict[str, type] = {name: numpy_type(name) for name in DTYPES if name != "bf16"}


@dataclass(frozen=True, slots=True)
class CompiledKernel:
    """One kernel binary and what launching it takes.

    Launch: grid from the recording, block = (32 * num_warps, 1, 1), `shared` bytes of dynamic shared memory
    (above 48 KiB the launcher must raise the function's max-dynamic-shared-memory attribute first),
    arguments = `params` in order (pointers as ints, scalars as numpy values of their type) then
    HIDDEN_PARAMS pointers: global scratch of `scratch` bytes a program (the engine's scratch buffer; null
    when 0), and null for profile scratch (the build refuses kernels that need it). Pointers named in
    `aligned` were compiled assuming 16-byte alignment.
    """

    name: str  # the cubin's entry point
    target: str  # e.g. "sm_90"
    cubin: bytes
    # launch parameters in order: (name, Triton type: "*bf16", "i32", ...)
    params: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, int | float | bool | str], ...]  # what it was specialized on, for inspection
    aligned: tuple[str, ...]
    num_warps: int
    num_stages: int
    shared: int
    triton_version: str
    scratch: int = 0  # global scratch bytes per program (TMA descriptors built on the device)
    scratch_align: int = 1

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
        return hashlib.sha256(canonical(self.metadata())).hexdigest()


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def read_kernel(directory: str | Path, digest: str) -> CompiledKernel:
    """Load a record written by codegen.aot.write_kernel, refusing it if any hash disagrees."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / f"{digest}.json").read_bytes())
        cubin = (directory / f"{digest}.cubin").read_bytes()
    except (OSError, ValueError) as e:
        raise ArtifactError(f"kernel {digest}: cannot read its record in {directory}: {e}") from e
    if hashlib.sha256(canonical(meta)).hexdigest() != digest:
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
        triton_version=meta["triton_version"], scratch=meta["scratch"], scratch_align=meta["scratch_align"])


# ---- argument packing --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Launch:
    """One resolved launch: the kernel (by record), its grid and its exact argument values."""

    kernel: CompiledKernel
    grid: tuple[int, int, int]
    args: tuple[Any, ...]  # pointers (int), scalars (numpy), then HIDDEN_PARAMS zeros


def scratch_bytes(kernel: CompiledKernel, grid: tuple[int, int, int]) -> int:
    """The global scratch a launch of `kernel` over `grid` takes (0 when it takes none)."""
    return kernel.scratch * grid[0] * grid[1] * grid[2]


def pack_args(kernel: CompiledKernel, args: Sequence[Any], pointer: Callable[[Any], int],
              where: str, scratch: int = 0) -> tuple[Any, ...]:
    """The launch values of a recorded step's arguments: a tensor argument (its `buffer` set) becomes
    `pointer(arg)`, a scalar its value as the parameter's numpy type; then the hidden pointers: `scratch`
    (the address of a buffer of at least scratch_bytes) for a kernel that takes global scratch, else null,
    and null. ArtifactError when the recording and the kernel's parameters disagree (count, pointer vs
    scalar, type), or when the kernel needs scratch and none is given."""
    if kernel.scratch and not scratch:
        raise ArtifactError(f"{where}: {kernel.name} needs {kernel.scratch} bytes of global scratch a "
                            "program, and no scratch buffer was given")
    if len(args) != len(kernel.params):
        raise ArtifactError(f"{where}: {len(args)} arguments for {kernel.name}'s {len(kernel.params)} "
                            "parameters")
    values: list[Any] = []
    for (name, typ), a in zip(kernel.params, args, strict=True):
        if typ.startswith("*"):
            if not a.buffer:
                raise ArtifactError(f"{where}: {kernel.name}.{name} is a pointer, the recording passes a "
                                    "scalar")
            values.append(int(pointer(a)))
        else:
            if a.buffer or typ not in SCALARS or a.scalar != typ:
                raise ArtifactError(f"{where}: {kernel.name}.{name} is a {typ} scalar, the recording passes "
                                    f"{a.buffer or a.scalar!r}")
            values.append(SCALARS[typ](a.value))
    return (*values, scratch if kernel.scratch else 0, *([0] * (HIDDEN_PARAMS - 1)))


def grid3(grid: Sequence[int]) -> tuple[int, int, int]:
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
    if len(g) != 3 or min(g) < 1:
        raise ArtifactError(f"grid {list(grid)} is not a launchable 1-3 dimensional grid")
    return g  # type: ignore[return-value]


# ---- launchers ---------------------------------------------------------------------------------------------


class Launcher(Protocol):
    def load(self, kernel: CompiledKernel) -> object:
        """A launchable handle of the kernel (done once, before any graph capture)."""
        ...

    def launch(self, handle: object, launch: Launch) -> None:
        """Enqueue one launch on torch's current stream."""
        ...


class CudaLauncher:
    """Launches cubins through cuda.core on torch's current CUDA stream."""

    def __init__(self) -> None:
        import torch
        from cuda.core import Device

        self._torch = torch
        self._device = Device(torch.cuda.current_device())
        self._device.set_current()
        self._streams: dict[int, Any] = {}

    def load(self, kernel: CompiledKernel) -> object:
        from cuda.core import ObjectCode

        handle = ObjectCode.from_cubin(kernel.cubin).get_kernel(kernel.name)
        # above the default, dynamic shared memory is opted into per kernel
        if kernel.shared > DEFAULT_SHARED:
            from cuda.bindings import driver

            (err,) = driver.cuKernelSetAttribute(
                driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel.shared,
                driver.CUkernel(int(handle.handle)), self._device.device_id)
            if err != driver.CUresult.CUDA_SUCCESS:
                raise ArtifactError(f"kernel {kernel.name}: cannot raise its shared memory to "
                                    f"{kernel.shared} bytes on this GPU ({err})")
        return handle

    def launch(self, handle: object, launch: Launch) -> None:
        from cuda.core import LaunchConfig, Stream
        from cuda.core import launch as cuda_launch

        raw = self._torch.cuda.current_stream().cuda_stream  # inside graph capture: the capture stream
        # the cuda.core Stream wrapper is cached per handle: wrapping it on every launch costs host time
        stream = self._streams.get(raw)
        if stream is None:
            stream = self._streams[raw] = Stream.from_handle(raw)
        k = launch.kernel
        cuda_launch(stream, LaunchConfig(grid=launch.grid, block=(k.threads, 1, 1), shmem_size=k.shared),
                    handle, *launch.args)
