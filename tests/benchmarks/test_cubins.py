"""benchmarks/cubins.py: loop bodies found from backward branches in cuobjdump's SASS text (both branch
spellings), the self-branch that ends the SASS not taken for a loop."""

from __future__ import annotations

SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                     /* 0x00000a0000017a02 */
        /*0010*/                   IADD3 R2, R1, 0x1, RZ ;                    /* 0x0000000101027810 */
        /*0020*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], R24 ;  /* 0x0000000018187df0 */
        /*0030*/               @P0 BRA 0x10 ;                                 /* 0xfffffffc00000947 */
        /*0040*/                   LDL R3, [R1] ;                             /* 0x0000000001037983 */
        /*0050*/               @P1 BRA `(.L_x_3) 0x40 ;                       /* 0xfffffffc00000947 */
        /*0060*/                   EXIT ;                                     /* 0x000000000000794d */
        /*0070*/                   BRA 0x70;                                  /* 0xfffffffc00007947 */
"""


def test_loops_run_from_a_backward_branch_target_to_the_branch() -> None:
    # imported here: the module imports triton, which must not load before tests/codegen/conftest.py sets
    # TRITON_INTERPRET during collection
    from benchmarks.cubins import _INST, Cubin

    insts = tuple((int(a, 16), text) for a, text in _INST.findall(SASS))
    assert len(insts) == 8
    loops = Cubin(registers=32, stack=0, sass=SASS, insts=insts).loops()
    assert [(lo, hi, len(body)) for lo, hi, body in loops] == [(0x10, 0x30, 3), (0x40, 0x50, 2)]
    assert loops[0][2][1].startswith("HGMMA") and loops[1][2][0].startswith("LDL")
