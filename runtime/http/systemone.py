"""POST /v1/systemone: a System One request body checked and passed to the artifact's wire="systemone" tree.

Consumes the parsed body; produces the instance Program.run takes (the body itself: unknown top-level fields,
`model` and `x_session` included, which the runtime ignores or strips) or raises ApiError: 422 per problem
(ir/instance.py's checks of the tree: state, 1-64 questions, types, criteria), 413 for a text over its
bound, 404 for a model this server does not serve. The response is the runtime's System One response.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from flidec.ir.errors import InstanceError
from flidec.ir.instance import validate_instance
from flidec.ir.tree import Tree
from flidec.runtime.http.errors import ApiError, from_problems, invalid
from flidec.runtime.saved.resume import split_session

ALIASES = ("jev-latest", "jev-preview")  # what the SDKs send by default; answered by the served model


def wire_tree(trees: Iterable[Tree]) -> Tree | None:
    """The artifact's first wire="systemone" tree (None: the artifact serves no System One route)."""
    return next((t for t in trees if t.wire == "systemone"), None)


def check_model(body: Mapping[str, Any], served: Iterable[str]) -> None:
    """`model` absent, an alias or a served name; 422 for a non-string, 404 for another model."""
    model = body.get("model")
    if model is None:
        return
    if not isinstance(model, str):
        raise invalid(["model"], "expected a string naming the model", "type_error")
    names = list(served)
    if model not in names and model not in ALIASES:
        raise ApiError(404, "not_found_error", f"model {model!r} is not served here: send one of "
                       f"{', '.join(repr(n) for n in [*names, *ALIASES])}")


def checked_instance(tree: Tree, body: Any) -> Any:
    """The body as the instance of `tree`, or ApiError saying what to fix (every problem at once)."""
    try:
        rest, _ = split_session(body)
        validate_instance(tree, rest)
    except InstanceError as e:
        raise from_problems(e.problems) from None
    return body


def systemone_instance(tree: Tree | None, body: Any, served: Iterable[str]) -> Any:
    if tree is None:
        raise ApiError(404, "not_found_error", "this artifact has no wire=\"systemone\" tree: POST its "
                       "instances to /v1/trees/{tree} (GET /v1/models lists its trees)")
    if not isinstance(body, Mapping):
        raise invalid([], "expected a JSON object {model, state, questions}", "type_error")
    check_model(body, served)
    return body  # validated once, in the Program's host stage (runtime/program.py prepare)
