"""A GraphEngine launcher for tests: every recorded launch run through the Triton interpreter on the CPU.

Consumes kernel records (runtime/launch.CompiledKernel) and packed launches; resolves each pointer argument
to a view of the tensor whose storage holds it (`storages`: the engine's arena, weights and staging, set
once the engine exists) and launches the kernel's @triton.jit function eagerly. Needs TRITON_INTERPRET=1
in the environment before Triton is imported (the tests run it in a subprocess).
"""

from __future__ import annotations

import torch

from flidec.codegen import eager
from flidec.codegen.recording import JIT_KERNELS
from flidec.runtime.recording import DTYPES


class InterpreterLauncher:
    def __init__(self) -> None:
        self.storages: list[torch.Tensor] = []

    def load(self, kernel):
        return kernel

    def launch(self, kernel, launch) -> None:
        args = []
        for (_, typ), value in zip(kernel.params, launch.args, strict=False):  # hidden pointers come last
            if not typ.startswith("*"):
                args.append(value.item())
                continue
            t = next(s for s in self.storages
                     if s.data_ptr() <= value < s.data_ptr() + s.numel() * s.element_size())
            flat = t.reshape(-1).view(torch.uint8)[value - t.data_ptr():]
            dtype = DTYPES[typ.removeprefix("*")]
            size = torch.empty((), dtype=dtype).element_size()
            args.append(flat[: flat.numel() // size * size].view(dtype))
        eager.launch(JIT_KERNELS[kernel.name], launch.grid, *args, device=torch.device("cpu"),
                     **dict(kernel.constexprs))
