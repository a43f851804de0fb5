"""The tree-side IR levels, registered with the pass manager: "tree" (ir/tree.Spec), "template"
(ir/template.Templates) and "program" (ir/program.ProgramIR), each with its verifier and its `--dump-ir` text.

The tree level prints as canonical .flide (ir/printer.py, parsed back by flidec.frontend); the template and
program levels print with ir/program_printer.py, which parses them back too.
"""

from __future__ import annotations

from flidec.ir.printer import print_spec
from flidec.ir.program import verify_program
from flidec.ir.program_printer import print_program, print_templates
from flidec.ir.template import verify_templates
from flidec.ir.verify import verify as verify_spec
from flidec.passes.manager import LEVELS, register_level

if "tree" not in LEVELS:  # a second import of this module must not register twice
    register_level("tree", verify=lambda spec: [d.render() for d in verify_spec(spec)], render=print_spec)
    register_level("template", verify=verify_templates, render=print_templates)
    register_level("program", verify=verify_program, render=print_program)
