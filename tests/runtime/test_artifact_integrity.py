"""An artifact is verified whole at load and cannot be talked out of it: a manifest field removed or of the
wrong type is refused naming the field; `files` must list every file in the directory (none missing, none
extra, none a symlink, none outside it) and each is hashed; a recording path outside the artifact is refused;
referenced weights are hashed against the manifest (`verify_weights=False` / `--trust-weights` skip only
that); an older format is refused with the reason; `flidec run ARTIFACT` refuses options it would ignore.
A hypothesis fuzz of manifests and artifact files (delete a field, change a type, edit or add a file, point
a recording outside) finds only clean ArtifactErrors, never another exception. All on cpu artifacts of
examples/systemone.flide with the tiny checkpoint."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flidec.cli import main
from flidec.compile import compile_artifact
from flidec.ir.errors import ArtifactError
from flidec.runtime.artifact import FORMAT, load_manifest, weights_dir
from flidec.runtime.program import load
from flidec.testing.make_checkpoint import make_checkpoint

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def linked_copy(src: Path, dst: Path) -> Path:
    """A copy of the artifact whose files are hard links (cheap; plain files to the loader). Edit a file
    only by writing a new one (`rewrite`), never in place: the link is shared."""
    shutil.copytree(src, dst, copy_function=os.link)
    return dst


def rewrite(path: Path, data: bytes) -> None:
    path.unlink()
    path.write_bytes(data)


def manifest_of(artifact: Path) -> dict[str, Any]:
    return json.loads((artifact / "manifest.json").read_bytes())


def put_manifest(artifact: Path, manifest: Any) -> None:
    rewrite(artifact / "manifest.json", json.dumps(manifest).encode())


def verify(artifact: Path) -> None:
    """What `load` checks before it reads anything else: the manifest, the files and the weights."""
    weights_dir(artifact, load_manifest(artifact))


@pytest.fixture
def art(systemone_cpu_artifact: Path, tmp_path: Path) -> Path:
    return linked_copy(systemone_cpu_artifact, tmp_path / "a")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("model", None, "`model` is missing"),
    ("model.weights", None, "`model.weights` is missing"),
    ("model.weight_sha256", None, "`model.weight_sha256` is missing"),
    ("files", None, "`files` is missing"),
    ("versions", None, "`versions` is missing"),
    ("target", None, "`target` is missing"),
    ("buckets", None, "`buckets` is missing"),
    ("model", "x", "`model` must be an object, got a string"),
    ("model.weights", 3, "`model.weights` must be a string, got an integer"),
    ("files", [], "`files` must be an object, got an array"),
    ("files", {}, "`files` must not be empty"),
    ("versions", "0.1.0", "`versions` must be an object, got a string"),
    ("versions.torch", 2, "`versions.torch` must be a string, got an integer"),
    ("target", ["cpu"], "`target` must be a string, got an array"),
    ("buckets", {}, "`buckets` must be an array, got an object"),
    ("buckets.0.rows", "64", "`buckets[0].rows` must be an integer, got a string"),
    ("buckets.0.rows", True, "`buckets[0].rows` must be an integer, got a boolean"),
    ("complete", 1, "`complete` must be a boolean, got an integer"),
    ("model.config_sha256", "abc", "`model.config_sha256` must be a sha256 (64 lowercase hex digits)"),
])
def test_a_manifest_field_removed_or_of_the_wrong_type_is_refused_naming_it(art, field, value,
                                                                           message) -> None:
    manifest = manifest_of(art)
    *parents, last = field.split(".")
    target: Any = manifest
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    if value is None:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    put_manifest(art, manifest)
    with pytest.raises(ArtifactError) as e:
        load(art, "cpu")
    assert f"manifest field {message}" in str(e.value) and str(e.value).endswith("; recompile the artifact")


def test_every_file_is_listed_and_hashed(art) -> None:
    config = art / "tokenizer" / "tokenizer_config.json"
    edited = json.loads(config.read_bytes())
    edited["chat_template"] = "{{ messages }}" + edited["chat_template"]  # an edited chat template
    rewrite(config, json.dumps(edited).encode())
    with pytest.raises(ArtifactError, match="tokenizer_config.json does not match its sha256"):
        verify(art)
    manifest = manifest_of(art)
    del manifest["files"]["tokenizer/tokenizer_config.json"]  # unlisting it does not switch the check off
    put_manifest(art, manifest)
    with pytest.raises(ArtifactError, match=r"tokenizer/tokenizer_config.json is in the artifact but not in "
                                            r"the manifest's files \(1 such\)"):
        verify(art)
    config.unlink()
    del manifest["files"]["program.txt"]
    (art / "program.txt").unlink()
    put_manifest(art, manifest)
    with pytest.raises(ArtifactError, match="the manifest's files do not list program.txt, which the "):
        verify(art)


def test_a_listed_file_missing_or_an_extra_file_is_refused(art) -> None:
    (art / "notes.txt").write_text("hi")
    with pytest.raises(ArtifactError, match="notes.txt is in the artifact but not in the manifest's files"):
        verify(art)
    (art / "notes.txt").unlink()
    (art / "model" / "config.json").unlink()
    with pytest.raises(ArtifactError, match=r"model/config.json is missing \(corrupted artifact\)"):
        verify(art)


def test_symlinks_are_refused(art, tmp_path) -> None:
    target = art / "tokenizer" / "tokenizer.json"
    outside = tmp_path / "tokenizer.json"
    shutil.copyfile(target, outside)
    target.unlink()
    target.symlink_to(outside)  # the same bytes, so only the link itself is wrong
    with pytest.raises(ArtifactError, match="tokenizer/tokenizer.json is a symlink"):
        verify(art)
    target.unlink()
    shutil.copyfile(outside, target)
    (art / "more").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(ArtifactError, match="more is a symlink"):
        verify(art)


@pytest.mark.parametrize("path", ["../../../../etc/passwd", "/etc/passwd", "recordings/../../x.json"])
def test_a_recording_outside_the_artifact_is_refused(art, path) -> None:
    manifest = manifest_of(art)
    manifest["buckets"][0]["recording"] = path
    put_manifest(art, manifest)
    with pytest.raises(ArtifactError, match="do not list"):
        verify(art)
    manifest["files"][path] = "0" * 64  # listing it as well is refused before anything is opened
    put_manifest(art, manifest)
    with pytest.raises(ArtifactError, match="manifest lists a path outside the artifact"):
        verify(art)


def test_an_older_format_is_refused_with_the_reason(art) -> None:
    manifest = manifest_of(art)
    assert manifest["flidec_artifact"] == FORMAT == 6
    manifest["flidec_artifact"] = 4
    put_manifest(art, manifest)
    with pytest.raises(ArtifactError, match=r"artifact format 4, this runtime reads format 6; recompile it "
                                            r"\(format 6 artifacts carry the checkpoint.s decision format"):
        load(art, "cpu")


@pytest.fixture(scope="module")
def swapped(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An artifact compiled against a copy of the tiny checkpoint whose weights were then replaced by another
    seed's (same shapes, same sizes, same config.json)."""
    work = tmp_path_factory.mktemp("swap")
    model = work / "model"
    shutil.copytree(tiny_checkpoint, model)
    compile_artifact(EXAMPLES / "systemone.flide", model, "cpu", work / "art")
    other = make_checkpoint(work / "other", "tiny", seed=1, dtype="bf16").path
    for f in other.glob("*.safetensors"):
        assert f.stat().st_size == (model / f.name).stat().st_size
        shutil.copyfile(f, model / f.name)
    return work / "art", model


def test_swapped_weights_are_refused_unless_trusted(swapped, tmp_path, capsys) -> None:
    art, model = swapped
    with pytest.raises(ArtifactError, match=r"model.safetensors does not match its sha256 in the manifest; "
                                            r"recompile .* --trust-weights"):
        load(art, "cpu")
    program = load(art, "cpu", verify_weights=False)
    assert "error" not in program.run([{"state": "x", "questions": {"q": {"type": "noul"}}}])[0]
    instances = tmp_path / "i.jsonl"
    instances.write_text(json.dumps({"state": "x", "questions": {"q": {"type": "noul"}}}) + "\n")
    command = ["run", str(art), "--instances", str(instances), "--out", str(tmp_path / "o"), "--quiet"]
    assert main(command) == 1
    assert "does not match its sha256" in capsys.readouterr().err
    assert main([*command, "--trust-weights"]) == 0


def test_run_refuses_options_an_artifact_would_ignore(systemone_cpu_artifact, tiny_checkpoint, tmp_path,
                                                      capsys) -> None:
    instances = tmp_path / "i.jsonl"
    instances.write_text(json.dumps({"state": "x", "questions": {"q": {"type": "noul"}}}) + "\n")
    base = ["run", str(systemone_cpu_artifact), "--instances", str(instances), "--out", str(tmp_path / "o"),
            "--quiet"]
    for extra, flag in ((["--model", str(tiny_checkpoint)], "--model"),
                        (["--format", "next_token"], "--format")):
        assert main(base + extra) == 1
        err = capsys.readouterr().err
        assert f"{flag} does not apply to an artifact" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "results.jsonl").exists()
    spec = ["run", str(EXAMPLES / "systemone.flide"), "--model", str(tiny_checkpoint), "--instances",
            str(instances), "--out", str(tmp_path / "s"), "--quiet", "--trust-weights"]
    assert main(spec) == 1
    assert "--trust-weights applies to an artifact" in capsys.readouterr().err


# ---- fuzz ------------------------------------------------------------------------------------------------

def _paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path (keys and indices) into a JSON value, the value's own first."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


OTHER_TYPE: dict[type, list[Any]] = {
    str: [None, 7, [], {}, True], int: [None, "7", 7.5, [], True], float: [None, "0.5", [], {}],
    bool: [None, 1, "true"], list: [None, "x", {}, 3], dict: [None, "x", [], 3], type(None): ["x", 0, [], {}]}


@st.composite
def mutations(draw: st.DrawFn, manifest: dict[str, Any], files: list[str]) -> tuple[str, Any, Any]:
    kind = draw(st.sampled_from(["delete", "retype", "edit", "add", "recording", "unlist", "garbage"]))
    if kind in ("delete", "retype"):
        path = draw(st.sampled_from([p for p in _paths(manifest) if p]))
        if kind == "delete":
            return kind, path, None
        value: Any = manifest
        for key in path:
            value = value[key]
        return kind, path, draw(st.sampled_from(OTHER_TYPE[type(value)]))
    if kind in ("edit", "unlist"):
        return kind, draw(st.sampled_from(files)), draw(st.binary(min_size=1, max_size=8))
    if kind == "add":
        name = draw(st.sampled_from(["x", "tokenizer/x.json", "recordings/a.json",
                                     "weights/model.safetensors"]))
        return kind, name, draw(st.binary(max_size=8))
    if kind == "recording":
        outside = draw(st.sampled_from(["../x", "/etc/passwd", "recordings/../../x", "a/./b", "", "."]))
        return kind, outside, draw(st.booleans())  # also listed in files or not
    return kind, None, draw(st.sampled_from([b"", b"[]", b"null", b"{", b'{"flidec_artifact": 4}',
                                             b"\xff\xfe", b"[" * 100_000]))


def _apply(art: Path, manifest: dict[str, Any], mutation: tuple[str, Any, Any]) -> bool:
    """Mutate the artifact; whether the mutation must be refused (a list element deleted or a value of the
    same type changed may leave a valid manifest, and nothing else)."""
    kind, where, what = mutation
    if kind in ("delete", "retype"):
        parent: Any = manifest
        for key in where[:-1]:
            parent = parent[key]
        if kind == "delete":
            del parent[where[-1]]
        else:
            parent[where[-1]] = what
        put_manifest(art, manifest)
        return not (kind == "delete" and isinstance(parent, list) and where[0] != "files")
    if kind == "edit":
        rewrite(art / where, (art / where).read_bytes() + what)
        return True
    if kind == "unlist":
        del manifest["files"][where]
        put_manifest(art, manifest)
        return True
    if kind == "add":
        target = art / where
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.unlink()
        target.write_bytes(what)
        return True
    if kind == "recording":
        manifest["buckets"][0]["recording"] = where
        if what:
            manifest["files"][where] = "0" * 64
        put_manifest(art, manifest)
        return True
    rewrite(art / "manifest.json", what)
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_artifacts_are_refused_cleanly(systemone_cpu_artifact, tmp_path_factory, data) -> None:
    manifest = manifest_of(systemone_cpu_artifact)
    art = linked_copy(systemone_cpu_artifact, tmp_path_factory.mktemp("fuzz") / "a")
    try:
        mutation = data.draw(mutations(manifest, sorted(manifest["files"])))
        must_refuse = _apply(art, manifest, mutation)
        try:
            verify(art)
        except ArtifactError as e:
            assert str(e) and "\n" not in str(e)
        else:
            assert not must_refuse, mutation
    finally:
        shutil.rmtree(art.parent)
