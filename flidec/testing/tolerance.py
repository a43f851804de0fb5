"""Per-dtype tolerances for `..._matches_reference` checks: one table for the reference ops, the model and
the generated kernels. Values are (atol, rtol) for torch.testing.assert_close against a float64 oracle."""

from __future__ import annotations

import torch

TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (2e-5, 2e-5),
    torch.bfloat16: (3e-2, 3e-2),
}
