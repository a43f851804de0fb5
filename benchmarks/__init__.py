"""The side-by-side benchmark (issue 5): workloads, engines, metrics and the report; `benchmarks/run.py`."""
