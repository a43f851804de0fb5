"""Kernel tests run on the CPU through Triton's interpreter, or on a GPU through Triton's JIT when one exists.

Triton reads TRITON_INTERPRET when a @triton.jit function is decorated, its own triton.language helpers
included, so the variable must be set before anything imports triton: this conftest runs at collection,
before the test modules. Setting it is process-wide; on a CPU-only machine that is what every kernel test
wants. AOT compilation needs a process without it (test_aot.py compiles in a subprocess).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

if not torch.cuda.is_available():
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("triton was imported before tests/codegen/conftest.py could set "
                           "TRITON_INTERPRET=1; set it in the environment instead")
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
