"""Reading an artifact back: its manifest, checked before anything in the directory is trusted.

Consumes an artifact directory written by codegen/artifact.py (layout in docs/ARTIFACT.md); produces the
manifest (a dict) once its format and flidec version are this runtime's, its fields have their types
(`check_schema`), every file in the directory is listed in `files` with its sha256 and nothing else is there
(no symlink, no path outside), and the target is the one asked for; `weights_dir` then vouches for the
weights (bundled or referenced) by their per-file sha256. Otherwise ArtifactError, one line naming the field
or file. Imports only the standard library and flidec.ir / flidec.runtime, so a production box needs no
compiler; kernel records are read, with their own hashes, by runtime/launch.read_kernel.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flidec import (
    __version__ as RUNTIME_VERSION,  # an artifact of any other flidec is refused (no promise yet)
)
from flidec.ir.errors import ArtifactError

# 3: kernels that take Triton's global scratch (device-built TMA descriptors); 4: `files` lists every file (a
# file not listed is refused) and `model.weight_sha256` pins each weight file, checked at load; 6: a decision
# format's format.json and readout head (runtime/decision), read when tree.json's format is `decision`
FORMAT = 6
WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json")  # what `verify_weights=False` leaves unhashed
_SHA256 = re.compile(r"[0-9a-f]{64}")

# ---- schema: what each manifest field must be ----------------------------------------------------------
# A checker takes (value, field path) and returns a problem ("must be a string, got number") or None.
Check = Callable[[Any, str], "str | None"]


def _json_type(v: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
             dict: "an object", type(None): "null"}
    return names.get(type(v), type(v).__name__)


def _scalar(kind: type | tuple[type, ...], words: str) -> Check:
    def check(v: Any, where: str) -> str | None:
        ok = isinstance(v, kind) and (kind is bool or not isinstance(v, bool))  # JSON true is no integer
        return None if ok else f"`{where}` must be {words}, got {_json_type(v)}"
    return check


STR, INT, BOOL = _scalar(str, "a string"), _scalar(int, "an integer"), _scalar(bool, "a boolean")
NUMBER = _scalar((int, float), "a number")


def _sha(v: Any, where: str) -> str | None:
    if not isinstance(v, str) or not _SHA256.fullmatch(v):
        return f"`{where}` must be a sha256 (64 lowercase hex digits), got {_json_type(v)}"
    return None


def _array(item: Check) -> Check:
    def check(v: Any, where: str) -> str | None:
        if not isinstance(v, list):
            return f"`{where}` must be an array, got {_json_type(v)}"
        return next((p for i, x in enumerate(v) if (p := item(x, f"{where}[{i}]"))), None)
    return check


def _map(value: Check, nonempty: bool = False) -> Check:
    def check(v: Any, where: str) -> str | None:
        if not isinstance(v, dict):
            return f"`{where}` must be an object, got {_json_type(v)}"
        if nonempty and not v:
            return f"`{where}` must not be empty"
        return next((p for k, x in v.items() if (p := value(x, f"{where}.{k}"))), None)
    return check


def _object(required: Mapping[str, Check], optional: Mapping[str, Check] | None = None) -> Check:
    def check(v: Any, where: str) -> str | None:
        if not isinstance(v, dict):
            return f"`{where}` must be an object, got {_json_type(v)}"
        for key, sub in required.items():
            path = f"{where}.{key}" if where else key
            if key not in v:
                return f"`{path}` is missing"
            if problem := sub(v[key], path):
                return problem
        for key, sub in (optional or {}).items():
            if key in v and (problem := sub(v[key], f"{where}.{key}" if where else key)):
                return problem
        return None
    return check


MANIFEST: Check = _object({
    "flidec_artifact": INT,
    "versions": _object({"flidec": STR, "torch": STR, "triton": STR}),
    "target": STR,
    "complete": BOOL,
    "missing_kernels": _array(STR),
    "spec": _object({"sha256": _sha, "trees": _array(STR)}),
    "model": _object({"config_sha256": _sha, "tokenizer_sha256": _sha, "weights_sha256": _sha,
                      "weight_sha256": _map(_sha, nonempty=True), "weight_sizes": _map(INT, nonempty=True),
                      "weights": STR}),
    "buckets": _array(_object({"tree": STR, "bucket": STR, "rows": INT, "segments": INT, "depth": INT,
                               "reads": INT, "labels": INT, "padding": NUMBER},
                              {"recording": STR, "arena_bytes": INT, "launches": INT})),
    "kernels": _map(_object({"name": STR, "digest": _sha, "num_warps": INT, "shared": INT,
                             "constexprs": _map(lambda v, w: None)})),
    "files": _map(_sha, nonempty=True),
})


def check_schema(manifest: Any, where: str) -> None:
    """ArtifactError naming the first manifest field that is missing or of the wrong type."""
    if problem := MANIFEST(manifest, ""):
        raise ArtifactError(f"{where}: manifest field {problem}; recompile the artifact")


# ---- loading -------------------------------------------------------------------------------------------


def load_manifest(directory: str | Path, target: str | None = None, allow_incomplete: bool = False, *,
                  verify_weights: bool = True) -> dict[str, Any]:
    """The verified manifest of the artifact in `directory` (ArtifactError says why it is refused).
    `verify_weights=False` leaves bundled weight files unhashed (their presence and size are still checked):
    for a trusted in-place weight swap."""
    directory = Path(directory)
    path = directory / "manifest.json"
    try:
        if path.is_symlink():
            raise ArtifactError(f"{path}: a symlink; an artifact holds only plain files")
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ArtifactError(f"{directory}: not an artifact (no manifest.json)") from None
    except (OSError, ValueError, RecursionError) as e:
        raise ArtifactError(f"{path}: unreadable manifest ({e})") from None
    fmt = manifest.get("flidec_artifact") if isinstance(manifest, dict) else None
    if fmt != FORMAT or isinstance(fmt, bool):
        why = "; recompile it" + (" (format 6 artifacts carry the checkpoint's decision format)"
                                  if isinstance(fmt, int) and fmt < FORMAT else "")
        raise ArtifactError(f"{path}: artifact format {fmt!r}, this runtime reads format {FORMAT}{why}")
    versions = manifest.get("versions")
    version = versions.get("flidec") if isinstance(versions, dict) else None
    if isinstance(version, str) and version != RUNTIME_VERSION:
        raise ArtifactError(f"{directory}: built by flidec {version}, this runtime is flidec "
                            f"{RUNTIME_VERSION}; recompile it")
    check_schema(manifest, str(path))
    if target is not None and manifest["target"] != target:
        raise ArtifactError(f"{directory}: built for target {manifest['target']}, not {target}")
    if not manifest["complete"] and not allow_incomplete:
        raise ArtifactError(f"{directory}: incomplete artifact (no kernels for "
                            f"{', '.join(manifest['missing_kernels'])})")
    _check_files(directory, manifest, verify_weights)
    return manifest


def _check_files(directory: Path, manifest: Mapping[str, Any], verify_weights: bool) -> None:
    """Every file in the directory is listed (and every listed file is there) with its sha256; every file the
    runtime reads by name is listed; nothing is a symlink or outside the directory."""
    files: Mapping[str, str] = manifest["files"]
    present = _plain_files(directory)
    for name in files:
        parts = Path(name).parts
        if Path(name).is_absolute() or ".." in parts or "." in parts or name != "/".join(parts):
            raise ArtifactError(f"{directory}: manifest lists a path outside the artifact: {name}")
    unlisted = sorted(present - set(files) - {"manifest.json"})
    if unlisted:
        raise ArtifactError(f"{directory}: {unlisted[0]} is in the artifact but not in the manifest's files "
                            f"({len(unlisted)} such); an artifact holds only what it lists")
    for name in _needed(manifest):
        if name not in files:
            raise ArtifactError(f"{directory}: the manifest's files do not list {name}, which the runtime "
                                "reads")
    for name, digest in sorted(files.items()):
        if name not in present:
            raise ArtifactError(f"{directory}: {name} is missing (corrupted artifact)")
        if not verify_weights and name.startswith("weights/") and name.endswith(WEIGHT_SUFFIXES):
            continue  # trusted in place: weights_dir still checks its size
        try:
            actual = sha256_file(directory / name)
        except OSError as e:
            raise ArtifactError(f"{directory}: {name} is unreadable ({e.strerror})") from None
        if actual != digest:
            raise ArtifactError(f"{directory}: {name} does not match its sha256 in the manifest "
                                "(corrupted artifact)")


def _plain_files(directory: Path) -> set[str]:
    """Every file under `directory` by its relative path; ArtifactError at a symlink or a special file."""
    out: set[str] = set()
    for root, dirs, names in os.walk(directory, onerror=_walk_error, followlinks=False):
        for name in [*dirs, *names]:
            full = Path(root) / name
            rel = full.relative_to(directory).as_posix()
            mode = full.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise ArtifactError(f"{directory}: {rel} is a symlink; an artifact holds only plain files")
            if name in names:
                if not stat.S_ISREG(mode):
                    raise ArtifactError(f"{directory}: {rel} is not a plain file")
                out.add(rel)
    return out


def _walk_error(e: OSError) -> None:
    raise ArtifactError(f"{e.filename}: unreadable ({e.strerror})")


def _needed(manifest: Mapping[str, Any]) -> list[str]:
    """The files the runtime opens by name: the trees, the program, the tokenizer, each recording, each kernel
    record a bucket may use, and bundled weights."""
    names = ["tree.json", "program.txt", "tokenizer/tokenizer.json"]
    names += [b["recording"] for b in manifest["buckets"] if "recording" in b]
    for k in manifest["kernels"].values():
        names += [f"kernels/{k['digest']}.json", f"kernels/{k['digest']}.cubin"]
    if manifest["model"]["weights"] == "weights":
        names += ["weights/config.json", *(f"weights/{n}" for n in manifest["model"]["weight_sizes"])]
    return names


def weights_dir(directory: str | Path, manifest: Mapping[str, Any], *, verify_weights: bool = True) -> Path:
    """Where the weights are: bundled inside (their hashes are among the manifest's `files`), or the
    referenced model directory, checked against what was compiled: its config.json's sha256, each weight
    file's size and (unless `verify_weights=False`, for a trusted in-place swap) each weight file's sha256,
    read in 1 MiB chunks (a few seconds a GB). ArtifactError says what differs."""
    model = manifest["model"]
    ref = model["weights"]
    sizes: Mapping[str, int] = model["weight_sizes"]
    digests: Mapping[str, str] = model["weight_sha256"]
    if set(sizes) != set(digests) or weights_hash(digests) != model["weights_sha256"]:
        raise ArtifactError(f"{directory}: the manifest's model.weight_sizes, model.weight_sha256 and "
                            "model.weights_sha256 disagree (corrupted artifact)")
    for name in sizes:
        if Path(name).name != name or name in ("", ".", ".."):
            raise ArtifactError(f"{directory}: manifest field `model.weight_sizes` names {name!r}, not a "
                                "file name; recompile the artifact")
    bundled = ref == "weights"
    path = Path(directory) / ref if bundled else Path(ref)
    fix = ("recompile the artifact" if bundled else
           f"recompile the artifact against the model at {path}, or put that model back")
    try:
        config = sha256_file(path / "config.json")
    except OSError:
        raise ArtifactError(f"{directory}: the referenced model {path} is missing (no config.json); "
                            f"{fix}") from None
    if config != model["config_sha256"]:
        raise ArtifactError(f"{directory}: the referenced model {path} has another config.json than the one "
                            f"compiled against; {fix}")
    for name, size in sorted(sizes.items()):
        try:
            actual = (path / name).stat().st_size
        except OSError:
            raise ArtifactError(f"{directory}: the referenced weight file {path / name} is missing; "
                                f"{fix}") from None
        if actual != size:
            raise ArtifactError(f"{directory}: the referenced weight file {path / name} has {actual} bytes, "
                                f"the compiled one had {size}; {fix}")
    if verify_weights and not bundled:  # bundled ones were hashed with every other listed file
        for name, digest in sorted(digests.items()):
            if sha256_file(path / name) != digest:
                raise ArtifactError(f"{directory}: the referenced weight file {path / name} does not match "
                                    f"its sha256 in the manifest; {fix} (or load with verify_weights=False"
                                    " / --trust-weights if the swap is trusted)")
    return path


def weights_hash(digests: Mapping[str, str]) -> str:
    """One hash over several files' sha256, by name: `model.weights_sha256` and `tokenizer_sha256`."""
    text = json.dumps(dict(digests), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_file(path: Path) -> str:
    """The file's sha256, read in 1 MiB chunks (a multi-GB weight file is never held in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
