"""The build stages' IR levels, registered with the pass manager: "recordings", "kernels" and "artifact".

Each level's value carries what the stages after it need: Recordings (the program IR and each bucket's
Recording, runtime/recording.py), Kernels (those and the compiled kernel records by key, runtime/launch.py)
and Artifact (the written directory and its manifest). Each level has a verifier, which checks what is
cheap to check (every step's kernel known and called with its parameters, buffers inside the arena and
arguments inside their buffers, every recorded kernel compiled, every manifest file present), and a
deterministic `--dump-ir` text, one item per line; the texts are for reading and are not parsed back.
Imports no Triton: the stages that do are codegen/record_buckets.py, compile_kernels.py, write_artifact.py.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flidec.ir.program import ProgramIR
from flidec.passes.manager import LEVELS, register_level
from flidec.runtime.launch import CompiledKernel
from flidec.runtime.recording import DTYPES, Arg, KernelSpec, Recording

INDENT = "  "


@dataclass(frozen=True, slots=True)
class Recordings:
    """The program IR and each bucket's recording by (tree, bucket) name; none for a cpu target, whose
    artifact the reference executor runs."""

    program: ProgramIR
    by_bucket: Mapping[tuple[str, str], Recording]


@dataclass(frozen=True, slots=True)
class Kernels:
    """The recordings and every distinct kernel they launch, compiled for the target, by KernelSpec key;
    `compiled`: how many were compiled now (the rest came from the kernel cache)."""

    recordings: Recordings
    by_key: Mapping[str, CompiledKernel]
    compiled: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Artifact:
    """The written artifact: its directory (the compile's staging directory, renamed by the driver once
    complete) and the manifest written there; `compiled` as in Kernels."""

    out: Path = field(compare=False)
    manifest: Mapping[str, Any]
    compiled: int = field(default=0, compare=False)


# ---- verifiers --------------------------------------------------------------------------------------------


def verify_recordings(rs: Recordings) -> list[str]:
    """Every recording is of a bucket of the program, as the program sizes it, and well formed."""
    buckets = {(t.name, p.bucket.name): p.bucket for t in rs.program.trees for p in t.buckets}
    problems = []
    for key, rec in rs.by_bucket.items():
        where = f"recording {key[0]}/{key[1]}"
        if key not in buckets:
            problems.append(f"{where}: the program has no such bucket")
        elif rec.bucket != buckets[key]:
            problems.append(f"{where}: recorded for {rec.bucket}, the program's bucket is {buckets[key]}")
        problems += recording_problems(rec, where)
    if rs.by_bucket and set(rs.by_bucket) != set(buckets):
        unrecorded = [f"{t}/{b}" for t, b in buckets if (t, b) not in rs.by_bucket]
        problems.append(f"buckets without a recording: {', '.join(unrecorded)}")
    return problems


def recording_problems(rec: Recording, where: str) -> list[str]:
    """What the runtime relies on in one recording, every problem listed."""
    problems = []
    if len(rec.index) != len(rec.buffers):
        problems.append(f"{where}: two buffers share a name")
    for b in rec.buffers:
        if b.dtype not in DTYPES:
            problems.append(f"{where}: buffer {b.name} has the unknown dtype {b.dtype}")
        elif b.region in ("meta", "activation") and not 0 <= b.offset <= rec.arena_bytes - b.nbytes:
            problems.append(f"{where}: buffer {b.name} ({b.nbytes} bytes at {b.offset}) lies outside the "
                            f"arena of {rec.arena_bytes} bytes")
    kernels = {k.key: k for k in rec.kernels}
    for s in rec.steps:
        step = f"{where}: step {s.node}"
        if not s.kernel:
            problems.append(f"{step}: {s.op} has no kernel")
        elif s.kernel not in kernels:
            problems.append(f"{step}: kernel {s.kernel} is not among the recording's kernels")
        else:
            problems += _call_problems(step, kernels[s.kernel], s.args)
        if s.kernel and not 1 <= len(s.grid) <= 3:
            problems.append(f"{step}: a grid of {len(s.grid)} dimensions")
        for a in s.args:
            if a.buffer:
                problems += _arg_problems(step, rec, a)
    if rec.output not in rec.index:
        problems.append(f"{where}: the output buffer {rec.output} is not among its buffers")
    return problems


def _call_problems(step: str, spec: KernelSpec, args: tuple[Arg, ...]) -> list[str]:
    """A kernel step passes one argument per non-constexpr parameter: a buffer to a pointer, else a scalar."""
    params = [(n, t) for n, t in spec.signature if t != "constexpr"]
    if len(params) != len(args):
        return [f"{step}: {len(args)} arguments for the {len(params)} parameters of {spec.name}"]
    return [f"{step}: {spec.name}'s parameter {n} ({t}) gets a {'buffer' if a.buffer else 'scalar'}"
            for (n, t), a in zip(params, args, strict=True) if t.startswith("*") != bool(a.buffer)]


def _arg_problems(step: str, rec: Recording, a: Arg) -> list[str]:
    b = rec.index.get(a.buffer)
    if b is None:
        return [f"{step}: reads the unknown buffer {a.buffer}"]
    if len(a.shape) != len(a.strides):
        return [f"{step}: reads {a.buffer} with {len(a.shape)} dims and {len(a.strides)} strides"]
    last = a.offset + sum((n - 1) * st for n, st in zip(a.shape, a.strides, strict=True) if n > 0)
    if a.offset < 0 or (math.prod(a.shape) and last >= math.prod(b.shape)):
        return [f"{step}: reads past the end of buffer {a.buffer}"]
    return []


def verify_kernels(ks: Kernels) -> list[str]:
    """Every kernel a recording names is compiled, with its spec's parameters, for one target; no other."""
    problems = verify_recordings(ks.recordings)
    specs = {k.key: k for rec in ks.recordings.by_bucket.values() for k in rec.kernels}
    for key in sorted(specs.keys() - ks.by_key.keys()):
        problems.append(f"kernel {key} ({specs[key].name}) is recorded but not compiled")
    for key in sorted(ks.by_key.keys() - specs.keys()):
        problems.append(f"kernel {key} ({ks.by_key[key].name}) is compiled but no recording launches it")
    for key in sorted(specs.keys() & ks.by_key.keys()):
        params = tuple((n, t) for n, t in specs[key].signature if t != "constexpr")
        if ks.by_key[key].params != params:
            problems.append(f"kernel {key} ({specs[key].name}) was compiled with the parameters "
                            f"{ks.by_key[key].params}, its spec has {params}")
    targets = sorted({k.target for k in ks.by_key.values()})
    if len(targets) > 1:
        problems.append(f"kernels compiled for several targets: {', '.join(targets)}")
    return problems


def verify_artifact(a: Artifact) -> list[str]:
    """The manifest is written and complete, and every file it lists exists."""
    problems = [] if (a.out / "manifest.json").is_file() else [f"{a.out}: no manifest.json"]
    if not a.manifest.get("complete"):
        problems.append(f"incomplete: no kernels for {', '.join(a.manifest.get('missing_kernels', []))}")
    problems += [f"{name}: listed in the manifest, not written" for name in a.manifest.get("files", {})
                 if not (a.out / name).is_file()]
    return problems


# ---- texts ------------------------------------------------------------------------------------------------


def render_recordings(rs: Recordings) -> str:
    """Each bucket's recording in program order: its buffers, constants, kernels (numbered k0, k1, ... for
    the steps to refer to) and steps, one per line."""
    lines = []
    for t in rs.program.trees:
        for plan in t.buckets:
            rec = rs.by_bucket.get((t.name, plan.bucket.name))
            if rec is not None:
                lines += _recording(f"{t.name}/{plan.bucket.name}", rec)
    return "\n".join(lines or ["no recordings (the target's artifact runs on the reference executor)"]) + "\n"


def _recording(name: str, rec: Recording) -> list[str]:
    b = rec.bucket
    lines = [f"recording {name} rows={b.rows} segments={b.segments} depth={b.depth} reads={b.reads} "
             f"labels={b.labels} arena={rec.arena_bytes} output={rec.output}"]
    for buf in rec.buffers:
        place = f" @{buf.offset}" if buf.region in ("meta", "activation") else ""
        fill = f" fill={buf.fill}" if buf.fill else ""
        lines.append(f"{INDENT}buffer {buf.name} {buf.region} {buf.dtype}[{_ints(buf.shape)}]{place}{fill}")
    for cname, values in rec.constants:
        lines.append(f"{INDENT}constant {cname} values={len(values)}")
    number = {k.key: f"k{i}" for i, k in enumerate(rec.kernels)}
    for k in rec.kernels:
        consts = ",".join(f"{n}={v!r}" for n, v in k.constexprs) or "-"
        lines.append(f"{INDENT}kernel {number[k.key]} {k.name} key={k.key} warps={k.num_warps} "
                     f"stages={k.num_stages} constexprs={consts}")
    for s in rec.steps:
        kernel = f"{number.get(s.kernel, s.kernel)} grid=({_ints(s.grid)})" if s.kernel else "missing"
        lines.append(f"{INDENT}step {s.node} {s.op} {kernel}: {', '.join(_arg(a) for a in s.args)}")
    return lines


def _arg(a: Arg) -> str:
    if a.buffer:
        return f"{a.buffer}+{a.offset}[{_ints(a.shape)}/{_ints(a.strides)}]"
    return f"{a.scalar} {a.value!r}"


def _ints(xs: tuple[int, ...]) -> str:
    return ",".join(map(str, xs))


def render_kernels(ks: Kernels) -> str:
    """Each compiled kernel by key: its kernel, entry point, launch needs and the cubin's hash."""
    specs = {k.key: k for rec in ks.recordings.by_bucket.values() for k in rec.kernels}
    lines = []
    for key in sorted(ks.by_key):
        k = ks.by_key[key]
        name = specs[key].name if key in specs else "?"
        lines.append(f"kernel {key} {name} entry={k.name} target={k.target} warps={k.num_warps} "
                     f"stages={k.num_stages} shared={k.shared} scratch={k.scratch} "
                     f"cubin={hashlib.sha256(k.cubin).hexdigest()[:16]}")
    return "\n".join(lines or ["no kernels"]) + "\n"


def render_artifact(a: Artifact) -> str:
    """The manifest's target, buckets, kernels and files (hashes cut to 16 digits; no paths outside the
    artifact; a kernel's two files are named by its digest)."""
    m = a.manifest
    weights = "bundled" if m["model"]["weights"] == "weights" else "referenced"
    lines = [f"artifact format={m['flidec_artifact']} target={m['target']} complete={m['complete']} "
             f"weights={weights}"]
    for b in m["buckets"]:
        rec = f" recording={b['recording']} launches={b['launches']}" if "recording" in b else ""
        lines.append(f"{INDENT}bucket {b['tree']}/{b['bucket']} rows={b['rows']} segments={b['segments']} "
                     f"depth={b['depth']} reads={b['reads']} labels={b['labels']}{rec}")
    for key, k in sorted(m["kernels"].items()):
        lines.append(f"{INDENT}kernel {key} {k['name']} digest={k['digest'][:16]}")
    for name, digest in sorted(m["files"].items()):
        if not (name.startswith("kernels/") and name != "kernels/index.json"):  # the kernel lines name those
            lines.append(f"{INDENT}file {name} sha256={digest[:16]}")
    return "\n".join(lines) + "\n"


if "recordings" not in LEVELS:  # a second import of this module must not register twice
    register_level("recordings", verify=verify_recordings, render=render_recordings)
    register_level("kernels", verify=verify_kernels, render=render_kernels)
    register_level("artifact", verify=verify_artifact, render=render_artifact)
