"""flidec serve: an artifact behind HTTP (System One, Decisions, every tree by name), on FastAPI + uvicorn.

app.py (routes, error handlers, request ids), service.py (the Program loaded in the background, the queue
in front of it), systemone.py and decisions.py (the wire shapes), errors.py, auth.py, bodies.py (limits,
zstd/gzip), metrics.py (prometheus-client), main.py (the uvicorn runner). Imports the runtime only: no
compiler, lark or Triton (tests/runtime/test_runtime_imports.py).
"""
