"""Every decision layout compiles for sm_90 on this CPU-only machine: the readout head becomes an fp32 weight
buffer of the recordings (the label head's kernel reads it in place of the output head's rows), the
artifact carries format.json and the head, its manifest is complete and lists them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from flidec.runtime.artifact import load_manifest
from flidec.runtime.recording import read_recording

SPEC = Path(__file__).resolve().parent / "systemone_decision.flide"
BUILD = """
import sys
from pathlib import Path
from flidec.compile import compile_artifact
spec, work = Path(sys.argv[1]), Path(sys.argv[2])
for layout, ckpt in zip(sys.argv[3::2], sys.argv[4::2]):
    compile_artifact(spec, ckpt, "sm_90", work / layout, kernel_cache=work / "kernel-cache")
"""
LAYOUTS = ("readout", "standalone", "forms")


def test_every_layout_compiles_for_sm_90(decision_checkpoint, tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    pairs = [str(x) for layout in LAYOUTS for x in (layout, decision_checkpoint(layout))]
    run = subprocess.run([sys.executable, "-c", BUILD, str(SPEC), str(tmp_path), *pairs], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    for layout in LAYOUTS:
        art = tmp_path / layout
        manifest = load_manifest(art, target="sm_90")
        assert manifest["complete"] and "format.json" in manifest["files"]
        assert json.loads((art / "tree.json").read_text())["format"]["name"] == "decision"
        weights = {b.name: b.torch_dtype for p in (art / "recordings").glob("*.json")
                   for b in read_recording(p).buffers if b.region == "weight"}
        if layout == "readout":
            assert "format/readout.safetensors" in manifest["files"]
            assert str(weights["readout.weight"]) == "torch.float32"
        else:
            assert "readout.weight" not in weights
