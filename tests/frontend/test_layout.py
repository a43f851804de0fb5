"""fmt keeps comments and blank lines: where each kind of comment lands, and idempotence."""

from __future__ import annotations

from flidec.frontend import parse_spec
from flidec.frontend.layout import layout_of
from flidec.ir.printer import print_spec

MESSY = """\
// header comment
/* block
   header */
model qwen3_5 // the model
format next_token(style="vllm")
// the planner
tree planner (buckets=[4096, 8192]) {  // trailing tree
  state history: text[..16384] resumable
  ask next_tool: choice[2..32]                 // everything bound


  // forks
  fork action[1..16]: text[..256] {
    ask safe: noul "Is this action // safe?"  /* not in the string */
    ask gain: score {
       "a", // inside a block
       "b"
    }
    fork outcome[1..4]: text[..256] { ask done: noul "Done?" }
    // closing of action
  }  // after a brace
}
// the end
"""

CANONICAL = """\
// header comment
/* block
   header */
model qwen3_5  // the model
format next_token(style="vllm")

// the planner
tree planner (buckets=[4096, 8192]) {  // trailing tree
  state history: text[..16384] resumable
  ask next_tool: choice[2..32]  // everything bound

  // forks
  fork action[1..16]: text[..256] {
    ask safe: noul "Is this action // safe?"  /* not in the string */
    // inside a block
    ask gain: score { "a", "b" }
    fork outcome[1..4]: text[..256] {
      ask done: noul "Done?"
    }
    // closing of action
  }
  // after a brace
}

// the end
"""


def fmt(source: str) -> str:
    spec = parse_spec(source)
    return print_spec(spec, layout_of(source, spec))


def test_comments_land_where_expected():
    assert fmt(MESSY) == CANONICAL


def test_formatting_is_idempotent_and_keeps_the_ir():
    assert fmt(CANONICAL) == CANONICAL
    assert parse_spec(CANONICAL) == parse_spec(MESSY)


def test_long_criteria_go_one_per_line():
    desc = "x" * 60
    source = (f'model m\nformat f\ntree t {{\n  state s: text[..1]\n'
              f'  ask a: noul {{ yes: "{desc}", no: "{desc}" }}\n}}\n')
    assert fmt(source).splitlines()[5:9] == ["  ask a: noul {", f'    yes: "{desc}"', f'    no: "{desc}"',
                                             "  }"]
