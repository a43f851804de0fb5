"""`flidec compile` and the artifact: every example compiles for cpu and, with the tiny model, for sm_90
(kernels compiled once per session through a kernel cache, in a subprocess without TRITON_INTERPRET); the
same inputs give byte-identical artifacts; a cpu artifact answers through the reference executor; a
corrupted, mismatched or incomplete artifact is refused with a one-line reason; `flidec inspect` shows it.
Every sm_90 artifact is complete: each recorded step, the forked Gated DeltaNet's included, has a kernel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.fx

from flidec.cli import main
from flidec.codegen import recording
from flidec.compile import compile_artifact
from flidec.formats import make_format
from flidec.ir.errors import ArtifactError
from flidec.ir.serde import spec_from_json
from flidec.models.tokenizer import load_tokenizer
from flidec.runtime.artifact import FORMAT, load_manifest, weights_dir
from flidec.runtime.binder import bind
from flidec.runtime.reference import op_table
from flidec.runtime.reference.executor import ReferenceExecutor
from flidec.runtime.reference.qwen3_5 import Qwen35

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.flide"))

GPU_BUILD = """
import json, sys
from pathlib import Path
from flidec.compile import compile_artifact
examples, model, work = (Path(a) for a in sys.argv[1:4])
names = sys.argv[4:]
report = {}
for name in names + [names[0] + "-again", names[0] + "-fp32"]:
    r = compile_artifact(examples / (name.split("-")[0] + ".flide"), model, "sm_90", work / name,
                         kernel_cache=work / "kernel-cache", activations=name.split("-")[-1]
                         if name.endswith("-fp32") else "bf16")
    report[name] = {"seconds": r.seconds, "kernels": r.kernels, "compiled": r.compiled, "bytes": r.bytes}
print(json.dumps(report))
"""


def tree_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def gpu_artifacts(tmp_path_factory, tiny_checkpoint) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("sm90")
    script = work / "build.py"
    script.write_text(GPU_BUILD)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(work / "triton-cache")
    run = subprocess.run([sys.executable, str(script), str(EXAMPLES), str(tiny_checkpoint), str(work),
                          *NAMES],
                         env=env, capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    for name in NAMES:
        r = report[name]
        print(f"sm_90 {name}: {r['seconds']:.1f} s, {r['kernels']} kernels ({r['compiled']} compiled), "
              f"{r['bytes'] / 2**20:.1f} MiB")
    return work, report


@pytest.fixture(scope="session")
def cpu_artifacts(tmp_path_factory, tiny_checkpoint) -> Path:
    work = tmp_path_factory.mktemp("cpu")
    for name in NAMES:
        compile_artifact(EXAMPLES / f"{name}.flide", tiny_checkpoint, "cpu", work / name)
    return work


@pytest.mark.parametrize("name", NAMES)
def test_every_example_compiles_for_cpu(cpu_artifacts, name) -> None:
    m = load_manifest(cpu_artifacts / name, target="cpu")
    assert m["complete"] and m["target"] == "cpu" and m["buckets"] and not m["kernels"]
    assert {"tree.json", "program.txt", "tokenizer/tokenizer.json", "model/config.json"} <= set(m["files"])
    assert m["flidec_artifact"] == FORMAT
    assert set(m["model"]["weight_sha256"]) == set(m["model"]["weight_sizes"])


@pytest.mark.parametrize("name", NAMES)
def test_every_example_compiles_for_sm90(gpu_artifacts, name) -> None:
    work, _ = gpu_artifacts
    m = load_manifest(work / name, target="sm_90")
    assert m["complete"] and m["missing_kernels"] == []
    names = {k["name"] for k in m["kernels"].values()}
    assert {"gemm_kernel", "fork_attention_kernel", "fork_conv_kernel", "gdn_prep_kernel",
            "gdn_state_kernel", "gdn_out_kernel", "label_head_kernel"} <= names
    for b in m["buckets"]:
        rec = json.loads((work / name / b["recording"]).read_bytes())
        assert rec["bucket"]["rows"] == b["rows"] and rec["complete"] and rec["missing"] == []
        assert all(s["kernel"] for s in rec["steps"])
        used = {s["kernel"] for s in rec["steps"] if s["kernel"]}
        assert used <= set(m["kernels"])
        for key in used:
            assert (work / name / "kernels" / f"{m['kernels'][key]['digest']}.cubin").exists()


def test_compiling_twice_gives_identical_bytes(gpu_artifacts, cpu_artifacts, tiny_checkpoint,
                                               tmp_path) -> None:
    work, _ = gpu_artifacts
    assert tree_files(work / NAMES[0]) == tree_files(work / f"{NAMES[0]}-again")
    compile_artifact(EXAMPLES / f"{NAMES[0]}.flide", tiny_checkpoint, "cpu", tmp_path / "again")
    assert tree_files(cpu_artifacts / NAMES[0]) == tree_files(tmp_path / "again")


def test_incomplete_artifact_is_refused(gpu_artifacts, tmp_path) -> None:
    work, _ = gpu_artifacts
    shutil.copytree(work / NAMES[0], tmp_path / "a")
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    manifest |= {"complete": False, "missing_kernels": ["fork_gdn_static"]}
    (tmp_path / "a" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"incomplete artifact \(no kernels for fork_gdn_static\)$"):
        load_manifest(tmp_path / "a", target="sm_90")


def test_sm90_compile_refuses_an_op_without_kernel(tiny_checkpoint, tmp_path, capsys, monkeypatch) -> None:
    # fails in the recording, before any kernel is compiled: safe in this interpreting process
    monkeypatch.delitem(recording.EMITTERS, op_table.BY_NAME["fork_gdn_normed"])
    assert main(["compile", str(EXAMPLES / "classifier.flide"), "--model", str(tiny_checkpoint), "--target",
                 "sm_90", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err == ("flidec: error: in pass record_buckets (after verify, fold_prompt_text, dedup_prefixes, "
                   "bucket_topologies, layout, label_head, lower_forks, trim_reads, fuse_pointwise, "
                   "group_linears, fuse_gdn_norm): tree ticket, bucket r256: no kernel for fork_gdn_normed\n")


@pytest.fixture
def copy(cpu_artifacts, tmp_path) -> Path:
    dst = tmp_path / "artifact"
    shutil.copytree(cpu_artifacts / "classifier", dst)
    return dst


def test_corrupted_file_is_refused(copy) -> None:
    program = copy / "program.txt"
    program.write_text(program.read_text() + " ")
    with pytest.raises(ArtifactError) as e:
        load_manifest(copy)
    want = f"{copy}: program.txt does not match its sha256 in the manifest (corrupted artifact)"
    assert str(e.value) == want
    (copy / "tree.json").unlink()
    with pytest.raises(ArtifactError, match=r": program.txt does not match|: tree.json is missing"):
        load_manifest(copy)


def test_wrong_target_and_version_are_refused(copy) -> None:
    with pytest.raises(ArtifactError, match=r"built for target cpu, not sm_90$"):
        load_manifest(copy, target="sm_90")
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["versions"]["flidec"] = "0.0.1"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"built by flidec 0.0.1, this runtime is flidec 0.1.0; "
                                            r"recompile it$"):
        load_manifest(copy)
    (copy / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="unreadable manifest"):
        load_manifest(copy)
    with pytest.raises(ArtifactError, match="not an artifact"):
        load_manifest(copy / "tokenizer")


def test_referenced_weights_are_checked_against_the_compiled_model(tiny_checkpoint, tmp_path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, model)
    out = tmp_path / "referenced"
    compile_artifact(EXAMPLES / "classifier.flide", model, "cpu", out)
    m = load_manifest(out, target="cpu")
    assert weights_dir(out, m) == model.resolve()
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # rewritten in place with the same size: caught by its sha256 (format 4)
    weights.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=r"model.safetensors does not match its sha256 in the manifest"):
        weights_dir(out, m)
    assert weights_dir(out, m, verify_weights=False) == model.resolve()  # a trusted swap: sizes only
    with open(weights, "ab") as f:  # the same name, another size
        f.write(b"\0")
    with pytest.raises(ArtifactError, match=r"model.safetensors has \d+ bytes, the compiled one had \d+; "
                                            r"recompile"):
        weights_dir(out, m)
    weights.unlink()
    with pytest.raises(ArtifactError, match=r"model.safetensors is missing; recompile the artifact against"):
        weights_dir(out, m)
    config = model / "config.json"
    config.write_text(config.read_text().replace("}", ', "note": 1}', 1))
    with pytest.raises(ArtifactError, match="has another config.json than the one compiled against"):
        weights_dir(out, m)
    shutil.rmtree(model)
    with pytest.raises(ArtifactError, match=r"the referenced model .* is missing \(no config.json\)"):
        weights_dir(out, m)


def test_cpu_artifact_answers_with_the_reference_executor(tiny_checkpoint, tmp_path) -> None:
    out = tmp_path / "bundled"
    compile_artifact(EXAMPLES / "classifier.flide", tiny_checkpoint, "cpu", out, bundle_weights=True)
    m = load_manifest(out, target="cpu")
    assert weights_dir(out, m) == out / "weights"
    spec = spec_from_json(json.loads((out / "tree.json").read_text()))
    fmt = make_format(spec.format, load_tokenizer(out / "tokenizer"))
    model = Qwen35.from_pretrained(weights_dir(out, m), torch.bfloat16)
    direct = Qwen35.from_pretrained(tiny_checkpoint, torch.bfloat16)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), direct.state_dict().values(),
                                                        strict=True))
    instance = {"ticket": "Charged twice.", "checks": {"a": {"instructions": "Urgent?"}}}
    bound = bind(spec.trees[0], [instance], fmt)
    logits = ReferenceExecutor(torch.fx.symbolic_trace(model)).run_stream(bound.stream)
    assert torch.isfinite(logits[:, 0]).all() and logits.shape[0] == len(bound.sites) == 5


def test_inspect_shows_manifest_buckets_and_kernels(gpu_artifacts, capsys) -> None:
    work, _ = gpu_artifacts
    assert main(["inspect", str(work / "classifier")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("artifact for sm_90: flidec 0.1.0, torch ")
    assert "INCOMPLETE" not in text
    assert "ticket/r256: rows 256, segments 15, depth 4, reads 12, labels 5, padding <= 18.4%" in text
    assert "fork_attention_kernel" in text and "shared" in text


def test_activations_are_a_compile_option_the_manifest_records(gpu_artifacts, capsys) -> None:
    """--activations fp32 (E4): the manifest says so, inspect shows it, and the recordings' residual stream
    and Gated DeltaNet inputs are fp32 buffers where the default build's are bf16."""
    work, _ = gpu_artifacts
    default, closest = work / NAMES[0], work / f"{NAMES[0]}-fp32"
    dtypes = {}
    for path in (default, closest):
        manifest = json.loads((path / "manifest.json").read_text())
        recording = json.loads((path / manifest["buckets"][0]["recording"]).read_text())
        buffers = {b["name"]: b["dtype"] for b in recording["buffers"]}
        dtypes[path.name] = (manifest["activations"], buffers["embed"], buffers["fork_conv_static"])
    assert dtypes == {default.name: ("bf16", "bf16", "bf16"), closest.name: ("fp32", "fp32", "fp32")}
    assert main(["inspect", str(closest)]) == 0
    assert "  activations fp32 (GEMM operands bf16" in capsys.readouterr().out


def test_output_directory_must_be_empty_and_dump_ir_names_a_pass(cpu_artifacts, tiny_checkpoint,
                                                                 capsys) -> None:
    compile_args = ["compile", str(EXAMPLES / "classifier.flide"), "--model", str(tiny_checkpoint),
                    "--target", "cpu", "-o"]
    assert main([*compile_args, str(cpu_artifacts / "classifier")]) == 1
    assert "classifier: the output directory is not empty" in capsys.readouterr().err
    assert main([*compile_args, str(cpu_artifacts / "x"), "--dump-ir", "after=nope"]) == 1
    assert "--dump-ir after=nope: no such pass" in capsys.readouterr().err
