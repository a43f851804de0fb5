"""Specs at scale and in bad places (issue 23): deep nesting is a diagnostic, long lines are clipped in
diagnostics, `fmt --check` prints one bounded hunk found in linear time, `fmt` on a file it cannot write is
one line and exit 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flidec.cli import DIFF_LINES, changed_hunk, main
from flidec.frontend import parse_spec
from flidec.frontend.parser import MAX_BUILD_DEPTH
from flidec.ir.errors import EXCERPT_WIDTH, SpecError

HEAD = 'model qwen3_5\nformat next_token(style="vllm")\n\n'


def nested(depth: int) -> str:
    lines = [HEAD + "tree t {", "  state s: text[..100]"]
    lines += [f"{'  ' * (i + 1)}fork f{i}[1..2] {{" for i in range(depth)]
    lines.append(f"{'  ' * (depth + 1)}ask q: noul")
    lines += [f"{'  ' * (i + 1)}}}" for i in reversed(range(depth))]
    return "\n".join(lines + ["}", ""])


@pytest.mark.parametrize("depth", [MAX_BUILD_DEPTH + 1, 300, 5000])
def test_forks_nested_past_the_stack_are_a_depth_diagnostic(tmp_path, capsys, depth):
    spec = tmp_path / "deep.flide"
    spec.write_text(nested(depth))
    assert main(["check", str(spec)]) == 1
    err = capsys.readouterr().err
    line = 4 + 2 + MAX_BUILD_DEPTH  # the header, `tree t {`, the state, then one line a fork
    col = 2 * (MAX_BUILD_DEPTH + 1) + 1
    assert err.splitlines()[0] == (f"{spec}:{line}:{col}: error: fork `f{MAX_BUILD_DEPTH}` is over "
                                   f"{MAX_BUILD_DEPTH} levels deep; the limit is 16")
    assert "Traceback" not in err and "RecursionError" not in err


def test_forks_just_over_the_verifier_limit_get_the_verifier_s_words(tmp_path, capsys):
    spec = tmp_path / "deep.flide"
    spec.write_text(nested(17))
    assert main(["check", str(spec)]) == 1
    assert "error: fork `f16` is 17 levels deep; the limit is 16" in capsys.readouterr().err


def test_a_long_line_is_clipped_around_the_caret():
    source = HEAD + "tree t { state s: text[..10] ask q: noul " + "x " * 50_000 + "}\n"
    with pytest.raises(SpecError) as e:
        parse_spec(source, "long.flide")
    text = e.value.render()
    excerpt, caret = text.splitlines()[1:3]
    assert len(excerpt) <= len("   4 | ") + EXCERPT_WIDTH + 6 and excerpt.count("...") == 2
    assert excerpt[caret.index("^")] == "x"  # the caret still points at the token the error names
    assert len(text) < 1000


def test_a_short_line_is_shown_whole():
    with pytest.raises(SpecError) as e:
        parse_spec(HEAD + "tree t { state s: text[..10] ask q: nope }\n", "short.flide")
    assert "...\n" not in e.value.render() and "ask q: nope }" in e.value.render()


def test_changed_hunk_spans_first_to_last_difference_with_context():
    old = "".join(f"L{i}\n" for i in range(20))
    new = old.replace("L5\n", "five\n").replace("L12\n", "twelve\n")
    assert changed_hunk(old, new, "a", "b", context=2) == "".join([
        "--- a\n", "+++ b\n", "@@ -4,12 +4,12 @@\n", " L3\n", " L4\n",
        *(f"-L{i}\n" for i in range(5, 13)), "+five\n", *(f"+L{i}\n" for i in range(6, 12)), "+twelve\n",
        " L13\n", " L14\n"])


def test_changed_hunk_of_a_pure_insertion():
    assert changed_hunk("a\nb\n", "a\nx\nb\n", "o", "n") == "--- o\n+++ n\n@@ -1,2 +1,3 @@\n a\n+x\n b\n"


def test_fmt_check_of_a_large_spec_prints_a_bounded_hunk(tmp_path, capsys):
    trees = "".join(f"tree t{i} {{\n    state s:   text[..10]\n  ask a: noul\n}}\n" for i in range(8000))
    spec = tmp_path / "big.flide"
    spec.write_text(HEAD + trees)
    assert main(["fmt", "--check", str(spec)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"--- {spec} (as written)", f"+++ {spec} (canonical)"]
    assert len(out) <= 3 + 2 * (DIFF_LINES + 1) + 6
    assert "-... (31957 more lines)" in out and "+... (39956 more lines)" in out  # 32,000 lines, 40,001


def test_fmt_on_a_file_it_cannot_write_is_one_line(tmp_path, capsys, monkeypatch):
    spec = tmp_path / "s.flide"
    spec.write_text(HEAD + "tree t {\n    state s:   text[..10]\n  ask a: noul\n}\n")
    real = Path.write_text

    def read_only(self: Path, *args: object, **kwargs: object) -> int:
        if self == spec:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", read_only)
    assert main(["fmt", str(spec)]) == 1
    assert capsys.readouterr().err.strip() == (f"flidec: error: cannot rewrite {spec}: Permission denied; "
                                               "check its permissions, or use --check")
