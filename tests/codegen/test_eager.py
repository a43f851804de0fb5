"""The interpreter's tl.dot (codegen/eager.py): each output element is summed in one fixed pairwise order,
so a row's bits depend neither on the rows beside it nor on the CPU's BLAS kernels, and a kernel's products
under the interpreter are the products the exactness tests need (E3 on the CPU tier)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from flidec.codegen import eager
from flidec.codegen.eager import _tree_dot


def pairwise(terms: list[torch.Tensor]) -> torch.Tensor:
    """The documented order, written independently: pad to a power of two, add k and k + half, halve."""
    width = 1
    while width < len(terms):
        width *= 2
    terms = terms + [torch.zeros_like(terms[0])] * (width - len(terms))
    while len(terms) > 1:
        half = len(terms) // 2
        terms = [terms[i] + terms[i + half] for i in range(half)]
    return terms[0]


@pytest.mark.parametrize("k", [1, 2, 5, 64, 96, 100])
def test_tree_dot_is_the_pairwise_sum_of_rounded_products(k) -> None:
    g = torch.Generator().manual_seed(k)
    a, b = torch.randn(9, k, generator=g), torch.randn(k, 11, generator=g)
    acc = torch.randn(9, 11, generator=g)
    want = pairwise([a[:, i : i + 1] * b[i : i + 1, :] for i in range(k)]) + acc
    got = _tree_dot(a.numpy(), b.numpy(), acc.numpy())
    assert got.dtype == np.float32
    assert torch.equal(torch.from_numpy(got), want)


def test_tree_dot_rows_and_columns_are_their_own() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(100, 96, generator=g).numpy(), torch.randn(96, 72, generator=g).numpy()
    acc = np.zeros((100, 72), np.float32)
    full = _tree_dot(a, b, acc)
    for m in (1, 7, 16, 99):
        assert np.array_equal(_tree_dot(a[:m], b, acc[:m]), full[:m]), f"rows differ at M={m}"
    assert np.array_equal(_tree_dot(a, b[:, :5], acc[:, :5]), full[:, :5]), "columns depend on N"
    perm = np.random.default_rng(1).permutation(100)
    assert np.array_equal(_tree_dot(a[perm], b, acc[perm]), full[perm]), "rows differ when shuffled"


def test_tree_dot_batched_operands() -> None:
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(2, 5, 6, generator=g).numpy(), torch.randn(2, 6, 4, generator=g).numpy()
    acc = np.zeros((2, 5, 4), np.float32)
    got = _tree_dot(a, b, acc)
    for i in range(2):
        assert np.array_equal(got[i], _tree_dot(a[i], b[i], acc[i]))


@triton.jit
def _dot_kernel(x_ptr, w_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rows, cols, ks = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    x = tl.load(x_ptr + rows[:, None] * K + ks[None, :])
    w = tl.load(w_ptr + ks[:, None] * N + cols[None, :])
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], tl.dot(x, w))


@pytest.mark.skipif(not eager.interpreting(), reason="the interpreter's dot only: a GPU runs its own")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_dot_under_the_interpreter_takes_the_tree(dtype) -> None:
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(32, 64, generator=g).to(dtype), torch.randn(64, 16, generator=g).to(dtype)
    y = torch.full((32, 16), float("nan"))
    eager.launch(_dot_kernel, (1,), x, w, y, device=torch.device("cpu"), M=32, N=16, K=64)
    want = _tree_dot(x.float().numpy(), w.float().numpy(), np.zeros((32, 16), np.float32))
    assert torch.equal(y, torch.from_numpy(want))
