"""The artifact writer: one directory holding everything the runtime needs, and a manifest vouching for it.

Consumes what `flidec compile` produced: the spec (source and tree IR), the program IR, the model directory,
the target, and for a GPU target the recordings per bucket and the compiled kernels by key. Produces the
directory described in docs/ARTIFACT.md: manifest.json (versions, target, hashes of spec, weights and
tokenizer, every file's sha256), tree.json, program.txt, recordings/, kernels/, tokenizer/, model/ and,
with `bundle_weights`, weights/. Deterministic: the same inputs give byte-identical files (canonical JSON,
sorted names, no timestamps, no absolute paths except the weights reference the caller asked for).
runtime/artifact.py reads it back and verifies it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

import flidec
from flidec.codegen import aot
from flidec.ir.errors import ArtifactError
from flidec.ir.program import ProgramIR
from flidec.ir.program_printer import print_program
from flidec.ir.serde import spec_to_json
from flidec.ir.tree import Spec
from flidec.runtime.artifact import FORMAT, weights_hash
from flidec.runtime.decision.format import HEAD_FILE, DecisionFormat
from flidec.runtime.launch import CompiledKernel
from flidec.runtime.recording import Recording, write_recording

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
                   "special_tokens_map.json", "vocab.json", "merges.txt")
MODEL_FILES = ("config.json", "generation_config.json")


@dataclass(frozen=True)
class ArtifactInputs:
    spec: Spec
    spec_source: bytes
    program: ProgramIR
    model_dir: Path
    target: str  # "sm_90" or "cpu"
    recordings: Mapping[tuple[str, str], Recording]  # (tree, bucket) -> recording; empty for cpu
    kernels: Mapping[str, CompiledKernel]  # KernelSpec key -> compiled kernel
    bundle_weights: bool = False
    activations: str | None = None  # a GPU target's --activations; None for cpu (the executor's own)
    decision: DecisionFormat | None = None  # the checkpoint's decision format, written as format.json
    head: Mapping[str, torch.Tensor] | None = None  # its readout head, written as format/readout.safetensors


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def weight_files(model_dir: Path) -> list[Path]:
    files = sorted(model_dir.glob("*.safetensors"))
    index = model_dir / "model.safetensors.index.json"
    return files + ([index] if index.exists() else [])


def _digests(files: list[Path], root: Path) -> dict[str, str]:
    """Each file's sha256 by its name relative to root."""
    return {str(f.relative_to(root)): sha256_file(f) for f in files}


def write_artifact(inputs: ArtifactInputs, out: Path) -> dict[str, Any]:
    """Write the artifact into `out` (created; must be empty or absent); returns the manifest."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ArtifactError(f"{out}: the output directory is not empty")
    incomplete = sorted({op for rec in inputs.recordings.values() for op in rec.missing})
    out.mkdir(parents=True, exist_ok=True)
    (out / "tree.json").write_bytes(canonical(spec_to_json(inputs.spec)))
    (out / "program.txt").write_text(print_program(inputs.program), encoding="utf-8")
    if inputs.decision is not None:
        (out / "format.json").write_bytes(canonical(inputs.decision.to_json()))
        if inputs.head is not None:
            (out / "format").mkdir()
            save_file({k: v.contiguous() for k, v in sorted(inputs.head.items())}, str(out / HEAD_FILE))
    model = inputs.model_dir
    tokenizer = [model / n for n in TOKENIZER_FILES if (model / n).exists()]
    for f in tokenizer:
        _copy(f, out / "tokenizer" / f.name)
    for n in MODEL_FILES:
        if (model / n).exists():
            _copy(model / n, out / "model" / n)
    weights = weight_files(model)
    if not weights:
        raise ArtifactError(f"{model}: no safetensors weights to reference")
    if inputs.bundle_weights:  # weights/ is then a loadable model directory: its config travels with it
        for f in [*weights, model / "config.json"]:
            _copy(f, out / "weights" / f.name)
    weight_digests = _digests(weights, model)  # one read of each weight file (1 MiB chunks)
    digests: dict[str, str] = {}
    for key in sorted(inputs.kernels):
        digests[key] = aot.write_kernel(inputs.kernels[key], out / "kernels")
    if digests:
        (out / "kernels" / "index.json").write_bytes(canonical(digests))
    buckets = []
    for tree in inputs.program.trees:
        for plan in tree.buckets:
            b = plan.bucket
            entry = {"tree": tree.name, "bucket": b.name, "rows": b.rows, "segments": b.segments,
                     "depth": b.depth, "reads": b.reads, "labels": b.labels,
                     "padding": round(plan.padding, 4)}
            rec = inputs.recordings.get((tree.name, b.name))
            if rec is not None:
                path = f"recordings/{tree.name}.{b.name}.json"
                (out / "recordings").mkdir(exist_ok=True)
                (out / path).write_bytes(write_recording(rec))
                entry |= {"recording": path, "arena_bytes": rec.arena_bytes, "launches": len(rec.steps)}
            buckets.append(entry)
    manifest = {
        "flidec_artifact": FORMAT,
        "versions": _versions(inputs.target),
        "target": inputs.target,
        **({"activations": inputs.activations} if inputs.activations else {}),
        "complete": not incomplete,
        "missing_kernels": incomplete,
        "spec": {"sha256": hashlib.sha256(inputs.spec_source).hexdigest(),
                 "trees": [t.name for t in inputs.spec.trees]},
        "model": {"config_sha256": sha256_file(model / "config.json"),
                  "tokenizer_sha256": weights_hash(_digests(tokenizer, model)),
                  "weights_sha256": weights_hash(weight_digests),
                  "weight_sha256": weight_digests,
                  "weight_sizes": {f.name: f.stat().st_size for f in weights},
                  "weights": "weights" if inputs.bundle_weights else str(model.resolve())},
        "buckets": buckets,
        "kernels": {key: _kernel_summary(inputs.kernels[key], digests[key])
                    for key in sorted(inputs.kernels)},
    }
    files = sorted(p for p in out.rglob("*") if p.is_file())
    manifest["files"] = {str(p.relative_to(out)): sha256_file(p) for p in files}
    text = json.dumps(manifest, sort_keys=True, indent=1, ensure_ascii=False)
    (out / "manifest.json").write_bytes(text.encode() + b"\n")
    return manifest


def _versions(target: str) -> dict[str, str]:
    import triton

    return {"flidec": flidec.__version__, "torch": torch.__version__.split("+")[0],
            "triton": triton.__version__}


def _kernel_summary(k: CompiledKernel, digest: str) -> dict[str, Any]:
    return {"name": k.name, "digest": digest, "num_warps": k.num_warps, "shared": k.shared,
            "constexprs": dict(k.constexprs)}


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
