"""Reading an artifact back: its manifest, checked before anything in the directory is trusted.

Consumes an artifact directory written by codegen/artifact.py (layout in docs/ARTIFACT.md); produces the
manifest (a dict) once every listed file exists with its recorded sha256, the format and flidec version are
this runtime's, and the target is the one asked for; otherwise raises ArtifactError with a one-line reason.
Imports only the standard library and flidec.ir / flidec.runtime, so a production box needs no compiler;
the kernel records are read, with their own hashes, by runtime/launch.read_kernel.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from flidec import (
    __version__ as RUNTIME_VERSION,  # an artifact of any other flidec is refused (no promise yet)
)
from flidec.ir.errors import ArtifactError

FORMAT = 3  # 2: the forked Gated DeltaNet's prep/scan launches and their gdn_chunks table; 3: kernels that take
# Triton's global scratch (device-built TMA descriptors), which a format-2 runtime would launch without one


def load_manifest(directory: str | Path, target: str | None = None, allow_incomplete: bool = False
                  ) -> dict[str, Any]:
    """The verified manifest of the artifact in `directory` (ArtifactError says why it is refused)."""
    directory = Path(directory)
    path = directory / "manifest.json"
    try:
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ArtifactError(f"{directory}: not an artifact (no manifest.json)") from None
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: unreadable manifest ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("flidec_artifact") != FORMAT:
        raise ArtifactError(f"{path}: artifact format {manifest.get('flidec_artifact') if isinstance(manifest, dict) else None!r}, "
                            f"this runtime reads format {FORMAT}")
    version = manifest.get("versions", {}).get("flidec")
    if version != RUNTIME_VERSION:
        raise ArtifactError(f"{directory}: built by flidec {version}, this runtime is flidec {RUNTIME_VERSION}; "
                            "recompile it")
    if target is not None and manifest.get("target") != target:
        raise ArtifactError(f"{directory}: built for target {manifest.get('target')}, not {target}")
    if not manifest.get("complete") and not allow_incomplete:
        raise ArtifactError(f"{directory}: incomplete artifact (no kernels for "
                            f"{', '.join(manifest.get('missing_kernels', []))})")
    for name, digest in sorted(manifest.get("files", {}).items()):
        file = directory / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise ArtifactError(f"{directory}: manifest lists a path outside the artifact: {name}")
        try:
            actual = _sha256(file)
        except OSError:
            raise ArtifactError(f"{directory}: {name} is missing (corrupted artifact)") from None
        if actual != digest:
            raise ArtifactError(f"{directory}: {name} does not match its sha256 in the manifest (corrupted artifact)")
    return manifest


def weights_dir(directory: str | Path, manifest: dict[str, Any]) -> Path:
    """Where the weights are: bundled inside (their hashes are the manifest's `files`), or the referenced
    model directory, checked against what was compiled: its config.json's sha256 and each weight file's
    size (hashing gigabytes of weights at every load would cost seconds: a file rewritten in place with
    the same size is not caught). ArtifactError says what differs."""
    model = manifest["model"]
    ref = model["weights"]
    if ref == "weights":
        return Path(directory) / ref
    path = Path(ref)
    fix = f"recompile the artifact against the model at {path}, or put that model back"
    try:
        config = _sha256(path / "config.json")
    except OSError:
        raise ArtifactError(f"{directory}: the referenced model {path} is missing (no config.json); {fix}") from None
    if config != model["config_sha256"]:
        raise ArtifactError(f"{directory}: the referenced model {path} has another config.json than the one "
                            f"compiled against; {fix}")
    for name, size in sorted(model["weight_sizes"].items()):
        try:
            actual = (path / name).stat().st_size
        except OSError:
            raise ArtifactError(f"{directory}: the referenced weight file {path / name} is missing; {fix}") from None
        if actual != size:
            raise ArtifactError(f"{directory}: the referenced weight file {path / name} has {actual} bytes, "
                                f"the compiled one had {size}; {fix}")
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
