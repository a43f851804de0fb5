"""Golden rendered syntax errors: the full text a user sees, caret and hint included."""

from __future__ import annotations

import pytest

from flidec.frontend import parse_spec
from flidec.ir.errors import SpecError

H = 'model qwen3_5\nformat next_token(style="vllm")\n'

CASES = {
    "missing_colon": (H + 'tree t {\n  state s: text[..9]\n  ask safe noul "?"\n}\n', """\
spec.flide:5:12: error: expected `:` or `[` after the ask name `safe`, found `noul`
   5 |   ask safe noul "?"
                  ^~~~
  = hint: a colon goes between a name and its type: `ask safe: noul`"""),
    "missing_state": (H + 'tree t {\n  ask safe: noul "?"\n}\n', """\
spec.flide:4:3: error: expected `state` after `{`, found `ask`
   4 |   ask safe: noul "?"
         ^~~
  = hint: a tree begins with its state: `state history: text[..16384]`"""),
    "misspelled_keyword": (H + "tree t {\n  state s: text[..9]\n  aks safe: noul\n}\n", """\
spec.flide:5:3: error: expected a node (`text`, `ask` or `fork`) or `resumable` or `}` after `text[..9]`, \
found `aks`
   5 |   aks safe: noul
         ^~~
  = hint: did you mean `ask`?"""),
    "unclosed_brace": (H + "tree t {\n  state s: text[..9]\n  fork f[1..2] {\n    ask a: noul\n}\n", """\
spec.flide:7:2: error: expected a node (`text`, `ask` or `fork`) or `}` after `}`, found the end of the file
   7 | }
        ^
  = hint: the `{` on line 3 is never closed: add `}`"""),
    "unclosed_string": (H + 'tree t {\n  state s: text[..9]\n  ask a: noul "Is it\n}\n', """\
spec.flide:5:15: error: this string is not closed on its line
   5 |   ask a: noul "Is it
                     ^
  = hint: close it with " before the line ends; write \\n for a line break"""),
    "missing_model": ("tree t {}\n", """\
spec.flide:1:1: error: expected `model` at the start of the spec, found `tree`
   1 | tree t {}
       ^~~~
  = hint: a spec begins with `model qwen3_5`, then `format next_token(style="vllm")`, then its trees"""),
    "single_quotes": (H + "tree t {\n  state s: text[..9]\n  ask a: noul 'x'\n}\n", """\
spec.flide:5:15: error: unexpected character `'`
   5 |   ask a: noul 'x'
                     ^
  = hint: strings are written in double quotes: "like this\""""),
    "state_without_text": (H + "tree t {\n  state s: [..9]\n}\n", """\
spec.flide:4:12: error: expected `text` after `:`, found `[`
   4 |   state s: [..9]
                  ^
  = hint: the token bound follows the word text: `text[..4096]`"""),
    "unclosed_comment": (H + "/* note\ntree t {}\n", """\
spec.flide:3:1: error: this comment is never closed
   3 | /* note
       ^
  = hint: close it with */"""),
    "quoted_name": (H + 'tree "t" {}\n', """\
spec.flide:3:6: error: expected a name after `tree`, found the string "t"
   3 | tree "t" {}
            ^~~
  = hint: names are written without quotes; quotes are for text and for option names"""),
    "none_criteria": (H + "tree t {\n  state s: text[..9]\n  ask a: noul bound[..5] none\n}\n", """\
spec.flide:5:26: error: expected a node (`text`, `ask` or `fork`) or `bound` or `{` or `}` \
after `bound[..5]`, \
found `none`
   5 |   ask a: noul bound[..5] none
                                ^~~~
  = hint: criteria left out are absent; `none` only stands for absent instructions, before the criteria"""),
    "semicolon": (H + "tree t {\n  state s: text[..9];\n}\n", """\
spec.flide:4:21: error: unexpected character `;`
   4 |   state s: text[..9];
                           ^
  = hint: declarations end at the line's end; no `;` is needed"""),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_syntax_error(name):
    source, expected = CASES[name]
    with pytest.raises(SpecError) as e:
        parse_spec(source, "spec.flide")
    assert e.value.render() == expected
    assert len(e.value.diagnostics) == 1


def test_semantic_errors_render_together():
    source = H + 'tree t {\n  state s: text[..9]\n  ask a: chioce[2]\n  text x "\\q"\n}\n'
    with pytest.raises(SpecError) as e:
        parse_spec(source, "spec.flide")
    assert e.value.render() == """\
spec.flide:5:10: error: unknown ask type `chioce`
   5 |   ask a: chioce[2]
                ^~~~~~
  = hint: did you mean `choice`?
spec.flide:6:11: error: unknown escape \\q
   6 |   text x "\\q"
                 ^~
  = hint: the escapes are \\n \\t \\" \\\\ and \\u{hex}; write \\\\ for a backslash"""
