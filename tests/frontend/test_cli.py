"""The flidec CLI: check, inspect and fmt through main(argv), and the console script once."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from flidec.cli import main

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted(str(p) for p in (ROOT / "examples").glob("*.flide"))
BAD = 'model qwen3_5\nformat next_token(style="vllm")\ntree t {\n  state s: text[..9]\n  ask a: choice[1]\n' \
      '  fork f[0..2] { text "x" }\n}\n'


def test_check_examples_ok(capsys):
    assert main(["check", *EXAMPLES]) == 0
    assert capsys.readouterr().out == "ok: 6 trees\n"


def test_check_reports_every_error_with_caret_and_hint(tmp_path, capsys):
    spec = tmp_path / "bad.flide"
    spec.write_text(BAD)
    assert main(["check", str(spec), EXAMPLES[0]]) == 1
    err = capsys.readouterr().err
    assert err == f"""\
{spec}:5:16: error: a choice has 2 to 255 options under format next_token, got [1]
   5 |   ask a: choice[1]
                      ^~~
  = hint: keep the count within [2..255]
{spec}:6:3: error: fork `f` asks nothing: there is no ask anywhere in its body
   6 |   fork f[0..2] {{ text "x" }}
         ^~~~~~~~~~~~~~~~~~~~~~~~~
  = hint: add an ask to its body, or remove the fork: a branch with no question is never read
{spec}:6:9: error: a fork's fan-out is at least 1, got [0..2]
   6 |   fork f[0..2] {{ text "x" }}
               ^~~~~~
  = hint: write [1..2]
"""


def test_check_missing_file(capsys):
    assert main(["check", "/nonexistent/x.flide"]) == 1
    assert capsys.readouterr().err.startswith("/nonexistent/x.flide: error: cannot read the spec: ")


def test_inspect(capsys):
    assert main(["inspect", str(ROOT / "examples" / "lookahead.flide")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:4] == [
        "tree lookahead  buckets 2048, 4096, 16384",
        "  state context             level 0: text[..1024]",
        "  ask start_ok: noul        instructions 28 bytes, criteria none; <= 68 tokens",
        "  fork step1                level 1: [1..2] branches, text[..64] each",
    ]
    assert "    level 6: 7616\n" in out  # 64 branches x (64 text + 32 framing + 15 bytes + 2 options x 4)
    assert "a constant string counts as its UTF-8 bytes" in out


def test_inspect_refuses_a_bad_spec(tmp_path, capsys):
    spec = tmp_path / "bad.flide"
    spec.write_text(BAD)
    assert main(["inspect", str(spec)]) == 1
    assert "error: a choice has 2 to 255 options" in capsys.readouterr().err


def test_fmt_check_and_rewrite(tmp_path, capsys):
    spec = tmp_path / "messy.flide"
    spec.write_text('model qwen3_5 format next_token( style = "vllm" ) // fmt\n'
                    'tree t{state s:text[0..9] ask a:choice[2..2]"?"{x,y}}\n')
    assert main(["fmt", "--check", str(spec)]) == 1
    diff = capsys.readouterr().out
    assert f"--- {spec} (as written)" in diff and "+  ask a: choice \"?\" { x, y }\n" in diff
    assert main(["fmt", str(spec)]) == 0
    assert spec.read_text() == ('model qwen3_5\nformat next_token(style="vllm")  // fmt\n\ntree t {\n'
                                '  state s: text[..9]\n  ask a: choice "?" { x, y }\n}\n')
    assert main(["fmt", "--check", str(spec)]) == 0


def test_fmt_check_passes_on_examples(capsys):
    assert main(["fmt", "--check", *EXAMPLES]) == 0
    assert capsys.readouterr().out == ""


def test_fmt_syntax_error(tmp_path, capsys):
    spec = tmp_path / "bad.flide"
    spec.write_text("model\n")
    assert main(["fmt", str(spec)]) == 1
    assert spec.read_text() == "model\n"
    assert "error: expected a name after `model`, found the end of the file" in capsys.readouterr().err


def test_console_script():
    exe = shutil.which("flidec", path=str(Path(sys.executable).parent))
    assert exe is not None
    r = subprocess.run([exe, "check", *EXAMPLES], capture_output=True, text=True, timeout=60, check=False)
    assert (r.returncode, r.stdout) == (0, "ok: 6 trees\n")
