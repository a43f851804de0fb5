"""The pass manager on a toy level of integers: verification around passes, dumps, timing, disabling, and
the "in pass X (after A, B)" failure message, A, B including the passes of pipelines run before."""

from __future__ import annotations

import io

import pytest

from flidec.passes import manager
from flidec.passes.manager import Options, PassError, register, register_level, run


@pytest.fixture(scope="module", autouse=True)
def toy_passes():
    register_level("toy", verify=lambda n: [] if n >= 0 else [f"{n} is negative"],
                   render=lambda n: f"toy {n}")
    register("toy_double", "toy", "toy")(lambda n, ctx: 2 * n)
    register("toy_add", "toy", "toy")(lambda n, ctx: n + ctx)
    register("toy_break", "toy", "toy")(lambda n, ctx: -1)
    register("toy_raise", "toy", "toy")(lambda n, ctx: 1 // 0)
    yield
    for name in ("toy_double", "toy_add", "toy_break", "toy_raise"):
        del manager.PASSES[name]
    del manager.LEVELS["toy"]


def test_runs_in_order_with_context():
    assert run(3, ["toy_double", "toy_add"], ctx=1).ir == 7
    assert run(3, ["toy_add", "toy_double"], ctx=1).ir == 8


def test_dump_after_and_time_passes():
    out = io.StringIO()
    res = run(3, ["toy_double", "toy_add"], ctx=1,
              options=Options(dump_after=frozenset({"toy_double"}), time_passes=True, dump_to=out))
    assert res.dumps == (("toy_double", "toy 6"),)
    text = out.getvalue()
    assert text.startswith("// IR after toy_double (toy IR)\ntoy 6\n")
    assert [t.name for t in res.timings] == ["toy_double", "toy_add"]
    assert "toy_add" in text.splitlines()[-1]


def test_disabled_pass_is_skipped():
    options = Options(disabled=frozenset({"toy_double"}))
    assert run(3, ["toy_double", "toy_add"], ctx=1, options=options).ir == 4


def test_verifier_rejection_names_the_pass_and_those_before():
    with pytest.raises(PassError) as e:
        run(3, ["toy_double", "toy_add", "toy_break", "toy_double"], ctx=1)
    assert str(e.value) == ("in pass toy_break (after toy_double, toy_add): the toy IR verifier rejects its "
                            "output:\n  -1 is negative")


def test_failure_names_the_passes_of_earlier_pipelines():
    with pytest.raises(PassError, match=r"^in pass toy_break \(after toy_double, toy_add, toy_double\): "
                                        r"the toy IR verifier rejects its output"):
        run(3, ["toy_double", "toy_break"], ctx=1, before=["toy_double", "toy_add"])
    with pytest.raises(PassError, match=r"^in pass toy_double \(after toy_add\): the toy IR verifier rejects "
                                        r"its input"):
        run(-3, ["toy_double"], before=["toy_add"])


def test_exception_in_a_pass_is_wrapped():
    with pytest.raises(PassError, match=r"^in pass toy_raise \(after toy_double\): ZeroDivisionError"):
        run(3, ["toy_double", "toy_raise"])


def test_bad_input_is_rejected_before_the_first_pass():
    with pytest.raises(PassError, match=r"^in pass toy_double \(the first pass\): the toy IR verifier "
                                        r"rejects its input"):
        run(-3, ["toy_double"])


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown pass 'nope'"):
        run(3, ["toy_double", "nope"])
    with pytest.raises(ValueError, match="no pass named toy_add in this pipeline"):
        run(3, ["toy_double"], options=Options(dump_after=frozenset({"toy_add"})))
