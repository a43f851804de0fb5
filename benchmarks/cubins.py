"""What an sm_90 cubin uses, read with the cuobjdump Triton ships: registers, spills, SASS and its loops.

Shared by benchmarks/gdn_spills.py and benchmarks/attention_spills.py (no GPU needed: the kernels come from
codegen/aot.compile_kernel).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import triton

_INST = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\*", re.MULTILINE)
_BACK = re.compile(r"\bBRA\s+(?:`\(\.L_x_\d+\)\s*)?(0x[0-9a-f]+)?")


@dataclass(frozen=True)
class Cubin:
    registers: int
    stack: int  # bytes of local memory a thread: spills
    sass: str
    insts: tuple[tuple[int, str], ...]  # (address, instruction)

    def loops(self) -> list[tuple[int, int, list[str]]]:
        """(start, end, instructions) of each loop body: from a backward branch's target to the branch (not
        the self-branch that ends the SASS)."""
        found = []
        for at, text in self.insts:
            m = _BACK.search(text)
            if m and m[1] and int(m[1], 16) < at:
                lo = int(m[1], 16)
                found.append((lo, at, [t for a, t in self.insts if lo <= a <= at]))
        return found


def read_cubin(cubin: bytes) -> Cubin:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        usage, sass = (subprocess.run([str(tool), flag, str(path)], capture_output=True, text=True,
                                      check=True).stdout
                       for flag in ("-res-usage", "-sass"))
    field = {f: int(re.search(rf"{f}:(\d+)", usage)[1]) for f in ("REG", "STACK")}
    insts = tuple((int(a, 16), text) for a, text in _INST.findall(sass))
    return Cubin(field["REG"], field["STACK"], sass, insts)
