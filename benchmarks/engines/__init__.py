"""The engines the harness can run, by name. Each factory makes a fresh engine (benchmarks/engines/base.py).

`flidec` is the slot for flidec's compiled runtime (issue 4: `flidec compile` artifacts loaded by
flidec.runtime): until that runtime exists its factory raises EngineUnavailable, so asking for it gives
an error row that says why. When it lands, its adapter goes in engines/flidec.py beside flidec_ref.py
(load = load the artifact; prepare = bind; run = replay) and replaces the factory below.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.engines.base import Engine, EngineUnavailable


def _flidec() -> Engine:
    raise EngineUnavailable(
        "flidec's compiled runtime does not exist yet (issue 4); flidec-ref runs its reference executor"
    )


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
    "flidec": _flidec,
    "flidec-ref": _flidec_ref(solo=False),
    "flidec-solo": _flidec_ref(solo=True),
    "flide": _flide(solo=False),
    "flide-solo": _flide(solo=True),
    "hf": _transformers(reference=False),
    "fp32-ref": _transformers(reference=True),
}


def unavailable(name: str, device: str) -> str | None:
    """Why engine `name` cannot run here, found without loading it; None when it may run (its load can
    still fail). The harness shares the time budget among the engines that may run."""
    import importlib.util

    if name == "flidec":
        try:
            _flidec()
        except EngineUnavailable as e:
            return f"EngineUnavailable: {e}"
    if name in ("flide", "flide-solo"):
        if importlib.util.find_spec("flide") is None:
            return "EngineUnavailable: flide is not importable: not installed"
        if not device.startswith("cuda"):
            return "EngineUnavailable: flide runs on CUDA only"
    return None


# fork engine -> the engine that runs the same prompts with nothing shared (fork-vs-solo speedup, bitwise)
SOLO_OF = {"flidec-ref": "flidec-solo", "flide": "flide-solo"}
REFERENCE = "fp32-ref"

__all__ = ["ENGINES", "REFERENCE", "SOLO_OF", "Engine", "EngineUnavailable", "unavailable"]
