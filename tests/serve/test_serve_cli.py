"""`flidec serve`'s command line: every option parses (`--checkpoints` included, passed to load), bad values
are one error line, and an artifact that does not load stops the server with exit status 1 and the
loader's message."""

from __future__ import annotations

import pytest

from flidec.cli import build_parser, main


def test_every_option_parses() -> None:
    args = build_parser().parse_args([
        "serve", "out/a", "--host", "0.0.0.0", "--port", "9000", "--api-key", "k1", "--api-key", "k2",
        "--served-name", "jev", "--checkpoints", "ckpt", "--device", "cuda:1", "--dtype", "bf16",
        "--trust-weights", "--max-queue", "8", "--max-batch", "4", "--deadline", "2.5",
        "--max-body-bytes", "1000", "--threads", "1", "--log-level", "debug"])
    assert (args.artifact, args.host, args.port, args.api_key, args.served_name, args.checkpoints) == \
        ("out/a", "0.0.0.0", 9000, ["k1", "k2"], "jev", "ckpt")
    assert (args.device, args.dtype, args.trust_weights, args.max_queue, args.max_batch, args.deadline,
            args.max_body_bytes, args.threads) == ("cuda:1", "bf16", True, 8, 4, 2.5, 1000, 1)
    defaults = build_parser().parse_args(["serve", "out/a"])
    assert (defaults.host, defaults.port, defaults.device, defaults.checkpoints) == ("127.0.0.1", 8000, None,
                                                                                    None)


def test_the_checkpoints_option_reaches_load(monkeypatch, tmp_path) -> None:
    import flidec.runtime.http.main as serve_main

    seen = {}

    def fake_load(artifact, device, **kwargs):
        seen.update(kwargs, artifact=artifact, device=device)
        raise RuntimeError("stop here")

    monkeypatch.setattr(serve_main, "load", fake_load)
    options = serve_main.ServeOptions(tmp_path, checkpoints=str(tmp_path / "ckpt"), served_name="jev")
    with pytest.raises(RuntimeError, match="stop here"):
        serve_main.loader(options)()
    assert seen["checkpoints"] == str(tmp_path / "ckpt") and seen["served_name"] == "jev"
    assert seen["verify_weights"] is True and seen["device"] == "cpu"


@pytest.mark.parametrize(("argv", "message"), [
    (["--deadline", "0"], "--deadline 0.0: it must be a positive number"),
    (["--max-queue", "0"], "--max-queue 0: it must be at least 1"),
    (["--threads", "0"], "--threads 0: it must be at least 1"),
])
def test_bad_values_are_one_error_line(tmp_path, capsys, argv, message) -> None:
    assert main(["serve", str(tmp_path), *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("flidec: error: ") and message in err and err.count("\n") == 1


def test_a_missing_artifact_and_an_artifact_that_does_not_load(tmp_path, capsys) -> None:
    assert main(["serve", str(tmp_path / "nope")]) == 1
    assert "not an artifact directory" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text("{}")
    assert main(["serve", str(tmp_path), "--port", "0", "--device", "cpu", "--log-level", "critical"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("flidec: error: ") and "manifest" in err


def test_keys_from_the_command_line_and_a_file_exclude_each_other(tmp_path) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "a", "--api-key", "k", "--api-key-file", "f"])
