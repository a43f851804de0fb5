"""Run a @triton.jit kernel eagerly on torch tensors: Triton's JIT on a GPU, or its interpreter on the CPU.

Consumes a kernel, a grid and the launch arguments; produces the kernel's side effects on the tensors. This
is the path of the kernel tests (the CPU interpreter in CI, the JIT on the GPU tier); production launches
the AOT cubins of codegen/aot.py instead.
Relies on Triton 3.6's interpreter switch: TRITON_INTERPRET=1 must be set before triton is first imported
(Triton decides at decoration time, for its own triton.language helpers too, whether a @jit function is
compiled or interpreted), so one process either interprets or compiles (tests/codegen/conftest.py sets it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter
from triton.runtime.interpreter import InterpretedFunction

_BF16_SPLITS = ("bf16x3", "bf16x6")  # tl.dot input precisions the compiler has and the interpreter lacks


def interpreting() -> bool:
    """Whether this process's Triton runs kernels in the interpreter (TRITON_INTERPRET=1 at import)."""
    return isinstance(tl.zeros, InterpretedFunction)


def launch(kernel: Any, grid: tuple[int, ...], *args: Any, device: torch.device, **constexprs: Any) -> None:
    """Launch `kernel[grid](*args, **constexprs)` on the tensors of `device`."""
    if isinstance(kernel, InterpretedFunction):
        # the interpreter copies device tensors to the host and back, so it runs with any device; it knows
        # only the tf32 and ieee dot precisions and computes every one in fp32: bf16 splits run as ieee
        constexprs = {k: "ieee" if v in _BF16_SPLITS else v for k, v in constexprs.items()}
        with _interpreter_fixed():
            kernel[grid](*args, **constexprs)
        return
    if device.type != "cuda":
        raise RuntimeError(f"a compiled Triton kernel needs CUDA tensors, got {device}; set "
                           "TRITON_INTERPRET=1 before importing triton to run kernels on the CPU")
    # kernels that build TMA descriptors on the device (codegen/gemm.py PERSISTENT) take Triton's global
    # scratch, which Triton allocates per launch through this allocator
    triton.set_allocator(_scratch)
    kernel[grid](*args, **constexprs)


def row_count(rows: int, device: torch.device) -> torch.Tensor:
    """The rows pointer of an eager launch over `rows` rows (codegen/gemm.py ROWS): an int32 on `device`,
    filled there (no copy from the host to wait for)."""
    return torch.full((1,), rows, dtype=torch.int32, device=device)


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


@contextmanager
def _interpreter_fixed() -> Iterator[None]:
    """Patch the Triton 3.6 interpreter for the duration of a launch (undone on exit).

    - tl.dot is numpy's matmul, whose rounding depends on the rows beside a row and on the CPU: floating
      products take _tree_dot instead, so a row's bits are its own (E3 under the interpreter).
    - bf16 tl.dot: the interpreter stores bfloat16 as uint16 and create_dot multiplies the raw bit patterns
      (triton-lang/triton#11584). The GPU multiplies bf16 values exactly into fp32, which widening the
      operands to fp32 before the matmul computes.
    - scalar loads are 1-element arrays, and NumPy >= 2.4 refuses int() of them, so a `range` bounded by a
      loaded value fails (triton-lang/triton#9171): index with the squeezed value instead.
    - fp32 -> bf16 casts truncate the mantissa where the GPU rounds to nearest even: round as torch does.
    """
    builder = interpreter.interpreter_builder
    create_dot: Callable = builder.create_dot
    cast_impl: Callable = builder.cast_impl
    patch_tensor: Callable = interpreter._patch_lang_tensor

    def fixed_dot(a, b, d, input_precision, max_num_imprecise_acc):
        a, b = _widen_bf16(a), _widen_bf16(b)
        if not all(np.issubdtype(x.dtype, np.floating) for x in (a.data, b.data, d.data)):
            # integer products are exact, and fp8 operands (raw bits) are widened by create_dot itself
            return create_dot(a, b, d, input_precision, max_num_imprecise_acc)
        return interpreter.TensorHandle(_tree_dot(a.data, b.data, d.data), d.dtype.scalar)

    def fixed_cast(src, dst_type):
        if src.dtype.scalar != tl.float32 or dst_type.scalar != tl.bfloat16:
            return cast_impl(src, dst_type)
        rounded = torch.from_numpy(np.ascontiguousarray(src.data, np.float32)).to(torch.bfloat16)
        return interpreter.TensorHandle(rounded.view(torch.uint16).numpy(), tl.bfloat16)

    def fixed_patch_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    builder.create_dot = fixed_dot
    builder.cast_impl = builder.create_fp_trunc = fixed_cast
    interpreter._patch_lang_tensor = fixed_patch_tensor
    try:
        yield
    finally:
        del builder.create_dot, builder.cast_impl, builder.create_fp_trunc  # back to the class's methods
        interpreter._patch_lang_tensor = patch_tensor


def _tree_dot(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """acc + a @ b, each output element summed over K in one fixed pairwise order.

    numpy's matmul hands fp32 products to the BLAS, whose blocking (and so each element's rounding) depends
    on the row count, the shapes and the CPU's kernels: under it a row's bits depend on the other rows. Here
    every product is rounded alone, then the K products are added pairwise (k and k + half, halving until one
    is left), an order fixed by K only, so a row's bits are the same whatever M, N and the CPU.
    """
    dtype = acc.dtype
    k = a.shape[-1]
    width = 1 << max(k - 1, 0).bit_length()  # K padded to a power of two: adding the zero pad is exact
    # K leads, so each halving adds two contiguous blocks in place
    terms = np.empty((width, *acc.shape), dtype)
    terms[k:] = 0
    a_k, b_k = np.moveaxis(a.astype(dtype), -1, 0), np.moveaxis(b.astype(dtype), -2, 0)
    np.multiply(a_k[..., None], b_k[..., None, :], out=terms[:k])
    while width > 1:
        width //= 2
        terms[:width] += terms[width : 2 * width]
    return terms[0] + acc


def _widen_bf16(h: interpreter.TensorHandle) -> interpreter.TensorHandle:
    if h.dtype.scalar != tl.bfloat16:
        return h
    # a bf16 is the top half of an fp32: shifting its bits up is exact
    wide = (h.data.astype(np.uint32) << 16).view(np.float32)
    return interpreter.TensorHandle(wide, tl.float32)
