"""The recording format (runtime/recording.py): a recording written and read back is the same recording and
the same bytes; a golden recording written by codegen (the tiny fp32 model's first three steps, format 1)
still reads back and writes byte for byte; every inconsistency the runtime relies on being absent is refused
with ArtifactError naming the file; and the one dtype map agrees with torch and numpy."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from flidec.ir.errors import ArtifactError
from flidec.ir.program import Bucket
from flidec.runtime.recording import (
    DTYPE_NAMES,
    DTYPES,
    MODEL_DTYPES,
    RECORDING_VERSION,
    Arg,
    Buffer,
    KernelSpec,
    Recording,
    Step,
    numpy_type,
    read_recording,
    recording_from_json,
    write_recording,
)

GOLDEN = Path(__file__).parent / "golden" / "recording_v1.json"
BUCKET = Bucket("b0", rows=8, segments=2, depth=2, reads=1, labels=3)


def small() -> Recording:
    """A hand-made recording: a meta table, a weight, a constant, two activations, a kernel step with a
    scalar and a step without a kernel."""
    spec = KernelSpec("gather_rows_kernel", (("x_ptr", "*bf16"), ("idx_ptr", "*i64"), ("BLOCK", "constexpr")),
                      (("BLOCK", 64),), 4, 1)
    buffers = (Buffer("tokens", "meta", "i64", (8,), 0, "tokens"),
               Buffer("embed.weight", "weight", "bf16", (16, 4)),
               Buffer("inv_freq", "constant", "fp32", (2,)),
               Buffer("embedding", "activation", "bf16", (8, 4), 256),
               Buffer("logits", "activation", "fp32", (1, 3), 512))
    steps = (Step("embedding", "embedding", spec.key, (1, 2),
                  (Arg("embed.weight", 0, (16, 4), (4, 1)), Arg("tokens", 0, (8,), (1,)),
                   Arg("embedding", 4, (7, 4), (4, 1)), Arg(scalar="fp32", value=1e-6),
                   Arg(scalar="i32", value=3))),
             Step("label_head", "label_head", args=(Arg("embedding", 0, (8, 4), (4, 1)),
                                                    Arg("logits", 0, (1, 3), (3, 1))), outputs=1))
    return Recording(BUCKET, buffers, 1024, steps, (spec,), (("inv_freq", (1.0, 0.5)),), "logits")


def test_a_recording_written_and_read_back_is_the_same_recording_and_bytes() -> None:
    rec = small()
    blob = write_recording(rec)
    back = recording_from_json(json.loads(blob))
    assert back == rec and write_recording(back) == blob
    assert back.buffer("embedding") == rec.buffers[3]
    assert back.missing == ("label_head",) and not back.complete
    d = json.loads(blob)
    assert d["flidec_recording"] == RECORDING_VERSION and d["missing"] == ["label_head"] and not d["complete"]
    assert "index" not in d  # the by-name index is derived, never written
    assert blob == json.dumps(d, sort_keys=True, separators=(",", ":")).encode()  # canonical bytes


def test_the_golden_recording_reads_back_and_writes_byte_for_byte(tmp_path: Path) -> None:
    blob = GOLDEN.read_bytes()
    rec = read_recording(GOLDEN)
    assert write_recording(rec) == blob
    assert rec.bucket == Bucket("b0", rows=96, segments=6, depth=3, reads=4, labels=5)
    assert [s.op for s in rec.steps] == ["embedding", "rms_norm", "linear_group"] and rec.complete
    assert rec.buffer("tokens") == Buffer("tokens", "meta", "i64", (96,), 0, "tokens")
    assert rec.buffer("embed_tokens.weight").region == "weight" and rec.output == "label_head"
    norm = rec.steps[1]
    assert norm.args[-1] == Arg(scalar="fp32", value=1e-06)
    # a kernel's key is the hash of its spec: the golden's keys are what a spec hashes to today
    assert {s.kernel for s in rec.steps} == {k.key for k in rec.kernels}


def test_a_recording_of_another_version_is_refused() -> None:
    d = json.loads(write_recording(small()))
    with pytest.raises(ArtifactError, match=r"^r.json: recording version 2, this flidec reads 1; recompile"):
        recording_from_json({**d, "flidec_recording": 2}, "r.json")
    del d["buffers"][0]["fill"]
    with pytest.raises(ArtifactError, match=r"^r.json: malformed recording \(KeyError: 'fill'\)"):
        recording_from_json(d, "r.json")


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("{not json")
    with pytest.raises(ArtifactError, match=f"^{path}: unreadable recording"):
        read_recording(path)


def _refused(rec: Recording, message: str) -> None:
    with pytest.raises(ArtifactError, match=f"^r.json: {message}"):
        recording_from_json(json.loads(write_recording(rec)), "r.json")


def test_inconsistent_recordings_are_refused() -> None:
    rec = small()
    bufs = rec.buffers
    _refused(dataclasses.replace(rec, buffers=(*bufs, bufs[0])), "two buffers share a name")
    _refused(dataclasses.replace(rec, buffers=(dataclasses.replace(bufs[0], dtype="f8"), *bufs[1:])),
             "buffer tokens has dtype f8, which this runtime does not know")
    _refused(dataclasses.replace(rec, arena_bytes=520), "buffer logits lies outside the arena")
    step = rec.steps[0]
    past = dataclasses.replace(step, args=(Arg("embedding", 8, (7, 4), (4, 1)), *step.args[1:]))
    _refused(dataclasses.replace(rec, steps=(past,)), "step embedding reads past the end of buffer embedding")
    ragged = dataclasses.replace(step, args=(Arg("embedding", 0, (7, 4), (4,)),))
    _refused(dataclasses.replace(rec, steps=(ragged,)),
             "step embedding reads buffer embedding with 2 dims and 1 strides; recompile the artifact")
    unknown = dataclasses.replace(step, args=(Arg("nowhere", 0, (1,), (1,)),))
    _refused(dataclasses.replace(rec, steps=(unknown,)), "step embedding reads unknown buffer nowhere")
    _refused(dataclasses.replace(rec, output="nothing"), "output buffer nothing is not in the recording")


def test_replace_rebuilds_the_index() -> None:
    rec = small()
    ids = dataclasses.replace(rec.buffers[0], name="ids")
    renamed = dataclasses.replace(rec, buffers=(ids, *rec.buffers[1:]))
    assert renamed.buffer("ids").fill == "tokens" and "tokens" not in renamed.index


def test_the_dtype_map_agrees_with_torch_and_numpy() -> None:
    assert {DTYPE_NAMES[t]: t for t in DTYPE_NAMES} == DTYPES  # one map, read both ways
    assert list(MODEL_DTYPES.items()) == [("fp32", torch.float32), ("bf16", torch.bfloat16)]
    assert Buffer("x", "activation", "bf16", (3, 5)).nbytes == 30
    for name, dtype in DTYPES.items():
        if dtype == torch.bfloat16:
            with pytest.raises(KeyError, match="bf16 has no numpy type"):
                numpy_type(name)
            continue
        assert torch.empty((2,), dtype=dtype).numpy().dtype == np.dtype(numpy_type(name)), name
