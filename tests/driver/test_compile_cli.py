"""`flidec compile` options that steer the pass manager (--disable-pass, --dump-ir, --time-passes), over the
tree passes and the build stages alike, and a build stage's failure named with every pass before it."""

from __future__ import annotations

import json
from pathlib import Path

from flidec.cli import main
from flidec.models import DEMO_MODEL
from flidec.passes.pipeline import BUILD_PIPELINE, TREE_PIPELINE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def compile_cpu(tmp_path: Path, model: Path, name: str, *extra: str) -> int:
    return main(["compile", str(EXAMPLES / "planner.flide"), "--model", str(model), "--target", "cpu",
                 "-o", str(tmp_path / name), *extra])


def test_disabling_dedup_changes_the_layout_not_the_answers(tmp_path, tiny_checkpoint, capsys):
    assert compile_cpu(tmp_path, tiny_checkpoint, "dedup") == 0
    assert compile_cpu(tmp_path, tiny_checkpoint, "plain", "--disable-pass", "dedup_prefixes",
                       "--dump-ir", "after=fold_prompt_text") == 0
    assert "fold_prompt_text" in capsys.readouterr().err
    deduped = (tmp_path / "dedup" / "program.txt").read_text()
    plain = (tmp_path / "plain" / "program.txt").read_text()
    assert deduped != plain
    instance = {"history": "The agent listed the files and found a stale lock.",
                "next_tool": {"instructions": "Which tool next?",
                              "criteria": {"shell": None, "editor": None}},
                "action": [{"text": "rm the lock file", "outcome": [{"text": "the build runs"}]}]}
    src = tmp_path / "i.jsonl"
    src.write_text(json.dumps(instance) + "\n")
    results = []
    for name in ("dedup", "plain"):
        assert main(["run", str(tmp_path / name), "--instances", str(src),
                     "--out", str(tmp_path / f"o-{name}"), "--quiet"]) == 0
        results.append((tmp_path / f"o-{name}" / "results.jsonl").read_text())
    assert results[0] == results[1] and '"safe"' in results[0]


def test_pass_flags_are_checked(tmp_path, tiny_checkpoint, capsys):
    assert compile_cpu(tmp_path, tiny_checkpoint, "a", "--disable-pass", "no_such_pass") == 1
    assert "--disable-pass no_such_pass: no such pass" in capsys.readouterr().err
    assert compile_cpu(tmp_path, tiny_checkpoint, "b", "--disable-pass", "fold_prompt_text") == 1
    assert "turns tree IR into template IR" in capsys.readouterr().err


def compile_demo(out: Path, *extra: str) -> int:
    return main(["compile", str(EXAMPLES / "demo.flide"), "--model", str(DEMO_MODEL), "--target", "cpu",
                 "-o", str(out), *extra])


def test_time_passes_and_dump_ir_cover_the_build_stages(tmp_path, capsys):
    assert compile_demo(tmp_path / "a", "--time-passes", "--dump-ir", "after=record_buckets",
                        "--dump-ir", "after=write_artifact") == 0
    err = capsys.readouterr().err
    dumps, table = err.split("\npass ")
    assert dumps.startswith("// IR after record_buckets (recordings IR)\nno recordings (the target's "
                            "artifact runs on the reference executor)\n\n// IR after write_artifact "
                            "(artifact IR)\nartifact format=6 target=cpu complete=True weights=referenced\n")
    assert f"  file program.txt sha256={sha256_of(tmp_path / 'a' / 'program.txt')}\n" in dumps
    rows = table.splitlines()[1:]  # one table for the whole compile, after its header
    assert [r.split()[0] for r in rows] == [*TREE_PIPELINE, *BUILD_PIPELINE]


def sha256_of(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def test_a_stage_failure_names_the_stage_and_the_passes_run_before_it(tmp_path, monkeypatch, capsys):
    from flidec.codegen import artifact

    monkeypatch.setattr(artifact, "weight_files", lambda model: [])
    assert compile_demo(tmp_path / "a", "--disable-pass", "dedup_prefixes") == 1
    assert capsys.readouterr().err == (
        "flidec: error: in pass write_artifact (after verify, fold_prompt_text, bucket_topologies, layout, "
        f"record_buckets, compile_kernels): {DEMO_MODEL}: no safetensors weights to reference\n")
    assert list(tmp_path.iterdir()) == []  # the staging directory went with the failure


def test_without_model_compile_says_it_uses_the_demo_model_before_the_demo_s_limits(tmp_path, capsys):
    """systemone.flide asks for up to 255 options; the demo tokenizer has 47 single-token labels. The default
    is said first, so the error reads as the model's limit."""
    assert main(["compile", str(EXAMPLES / "systemone.flide"), "--target", "cpu",
                 "-o", str(tmp_path / "a")]) != 0
    err = capsys.readouterr().err
    note = err.index("no --model: using the embedded demo model")
    assert note < err.index("single-token labels for 47 options, not 255")
    assert main(["compile", str(EXAMPLES / "demo.flide"), "--target", "cpu", "-o", str(tmp_path / "b")]) == 0
    src = tmp_path / "i.jsonl"
    src.write_text((EXAMPLES / "demo.jsonl").read_text())
    capsys.readouterr()
    assert main(["run", str(tmp_path / "b"), "--instances", str(src), "--out", str(tmp_path / "r"),
                 "--quiet"]) == 0
    assert "demo model" not in capsys.readouterr().err  # an artifact brings its own model


def test_the_kernel_cache_compiles_a_kernel_again_when_its_source_changes(tmp_path, monkeypatch):
    """The kernel cache is keyed by the spec and by Triton's hash of the kernel's source (and its callees'):
    the same source is a hit, an edited body a miss, even with the same name, signature and constexprs."""
    from types import SimpleNamespace

    from flidec.codegen import compile_kernels as stage
    from flidec.codegen.recording import KernelSpec
    from flidec.runtime.launch import CompiledKernel

    spec = KernelSpec("k", (("x_ptr", "*fp32"),), (), 4, 1)
    compiled: list[str] = []

    def fake_compile(fn, *args, **kwargs):
        compiled.append(fn.cache_key)
        return CompiledKernel("k", "sm_90", fn.cache_key.encode(), (("x_ptr", "*fp32"),), (), (),
                              4, 1, 0, "3.6.0")

    monkeypatch.setattr(stage.aot, "compile_kernel", fake_compile)
    for source, fresh in (("a" * 64, True), ("a" * 64, False), ("b" * 64, True)):
        monkeypatch.setitem(stage.JIT_KERNELS, "k", SimpleNamespace(cache_key=source))
        kernel, was_compiled = stage.cached_kernel(spec, "sm_90", tmp_path)
        assert was_compiled == fresh and kernel.cubin == source.encode()
    assert compiled == ["a" * 64, "b" * 64]


def test_an_architecture_flidec_does_not_run_is_refused_at_compile_time_for_every_target(tmp_path, capsys):
    import shutil

    llama = tmp_path / "llama"
    shutil.copytree(DEMO_MODEL, llama)
    config = json.loads((llama / "config.json").read_text())
    (llama / "config.json").write_text(json.dumps({**config, "architectures": ["LlamaForCausalLM"],
                                                   "model_type": "llama"}))
    for target in ("cpu", "sm_90"):
        out = tmp_path / f"out-{target}"
        assert main(["compile", str(EXAMPLES / "demo.flide"), "--model", str(llama), "--target", target,
                     "-o", str(out)]) == 1
        err = capsys.readouterr().err
        assert "unsupported architecture 'LlamaForCausalLM': flidec runs Qwen3_5ForCausalLM" in err
        assert not out.exists() or not any(out.iterdir())  # nothing written
