"""The engines the harness can run, by name. Each factory makes a fresh engine (benchmarks/engines/base.py).

`flidec` is the compiled runtime (engines/flidec.py): artifacts built by `flidec compile` before its load is
timed, answered by flidec.runtime; `flidec-fp32` the same compiled with `--activations fp32`, beside it to
measure what fp32 activations gain and cost (E4).
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.engines.base import Engine, EngineUnavailable


def _flidec(solo: bool, activations: str = "bf16") -> Callable[[], Engine]:
    def make() -> Engine:
        from benchmarks.engines.flidec import FlidecCompiled

        return FlidecCompiled(solo=solo, activations=activations)

    return make


def _flidec_ref(solo: bool) -> Callable[[], Engine]:
    def make() -> Engine:
        from benchmarks.engines.flidec_ref import FlidecReference

        return FlidecReference(solo=solo)

    return make


def _flide(solo: bool) -> Callable[[], Engine]:
    def make() -> Engine:
        from benchmarks.engines.flide import Flide

        return Flide(solo=solo)

    return make


def _transformers(reference: bool) -> Callable[[], Engine]:
    def make() -> Engine:
        from benchmarks.engines.hf import Transformers

        return Transformers(reference=reference)

    return make


ENGINES: dict[str, Callable[[], Engine]] = {
    "flidec": _flidec(solo=False),
    "flidec-solo": _flidec(solo=True),
    "flidec-fp32": _flidec(solo=False, activations="fp32"),  # compiled with --activations fp32 (E4, its cost)
    "flidec-ref": _flidec_ref(solo=False),
    "flidec-ref-solo": _flidec_ref(solo=True),
    "flide": _flide(solo=False),
    "flide-solo": _flide(solo=True),
    "hf": _transformers(reference=False),
    "fp32-ref": _transformers(reference=True),
}


def unavailable(name: str, device: str) -> str | None:
    """Why engine `name` cannot run here, found without loading it; None when it may run (its load can
    still fail). The harness shares the time budget among the engines that may run."""
    import importlib.util

    if name in ("flide", "flide-solo"):
        if importlib.util.find_spec("flide") is None:
            return "EngineUnavailable: flide is not importable: not installed"
        if not device.startswith("cuda"):
            return "EngineUnavailable: flide runs on CUDA only"
    return None


# fork engine -> the engine that runs the same prompts with nothing shared (fork-vs-solo speedup, bitwise)
SOLO_OF = {"flidec": "flidec-solo", "flidec-ref": "flidec-ref-solo", "flide": "flide-solo"}
REFERENCE = "fp32-ref"

__all__ = ["ENGINES", "REFERENCE", "SOLO_OF", "Engine", "EngineUnavailable", "unavailable"]
