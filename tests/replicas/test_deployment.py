"""The `serve run` application's arguments (deployment.py options_of): key=value strings become typed
ServeOptions fields and the replica count; a missing artifact or an unknown key is refused naming them."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray.serve")

from flidec.runtime.replicas.deployment import options_of  # noqa: E402


def test_serve_run_arguments_become_typed_options() -> None:
    o, n = options_of({"artifact": "/srv/a", "replicas": "3", "device": "cuda", "deadline_s": "30",
                       "max_queue": "256", "trust_weights": "true", "api_key_files": "/k1,/k2",
                       "threads": "2"})
    assert n == 3 and o.artifact == Path("/srv/a") and o.device == "cuda"
    assert o.deadline_s == 30.0 and o.max_queue == 256 and o.trust_weights is True and o.threads == 2
    assert o.api_key_files == ("/k1", "/k2")
    o, n = options_of({"artifact": "/srv/a"})
    assert n == 1 and o.max_queue == 1024 and o.trust_weights is False


@pytest.mark.parametrize("args, named", [({"replicas": "2"}, "artifact=DIR is required"),
                                          ({"artifact": "/a", "max_qeue": "3"}, "max_qeue")])
def test_bad_serve_run_arguments_are_refused_by_name(args: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        options_of(args)
