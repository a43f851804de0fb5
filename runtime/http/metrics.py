"""GET /metrics: the server's counters in Prometheus text format, through prometheus-client.

Consumes each answered HTTP request (route template, status, error type, seconds) and, at every scrape, the
Scheduler's SchedulerStats, the Program's Stats (tokens computed, requests sharing a root, saved-state reuse,
the streams run per bucket) and, on CUDA, the device's memory. Produces one registry per
app (tests run several apps in one process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class _Live(Collector):
    """What is read at scrape time from the service (queue, program, device)."""

    def __init__(self, read: Callable[[], dict | None]):
        self._read = read

    def collect(self) -> Iterator[Metric]:
        now = self._read()
        ready = GaugeMetricFamily("flidec_ready", "1 once the artifact is loaded and requests are answered")
        ready.add_metric([], 0.0 if now is None else 1.0)
        yield ready
        if now is None:
            return
        queue, program, buckets = now["queue"], now["program"], now["buckets"]
        yield GaugeMetricFamily("flidec_queue_depth", "requests waiting for a run", value=queue.depth)
        for name, value, text in (
                ("submitted", queue.submitted, "requests the queue accepted"),
                ("refused", queue.refused, "requests refused because the queue was full (429)"),
                ("expired", queue.expired, "requests that waited past their deadline (503)"),
                ("cancelled", queue.cancelled, "requests given up before they ran (client deadline)"),
                ("isolated", queue.isolated, "requests answered with an error: their run raised on them"),
                ("failed_runs", queue.failed_runs, "runs that raised and were redone in halves")):
            yield CounterMetricFamily(f"flidec_queue_{name}", text, value=value)
        sizes = HistogramMetricFamily("flidec_batch_size", "instances per returned run")
        cumulative = []
        for edge in BATCH_BUCKETS:
            cumulative.append((str(edge), sum(n for s, n in queue.batch_sizes.items() if s <= edge)))
        count = sum(queue.batch_sizes.values())
        total = sum(s * n for s, n in queue.batch_sizes.items())
        sizes.add_metric([], cumulative + [("+Inf", count)], total)
        yield sizes
        yield CounterMetricFamily("flidec_streams_total", "streams run (forward passes)",
                                  value=program.streams)
        yield CounterMetricFamily("flidec_tokens_computed_total", "stream rows computed (padding and resumed "
                                  "rows excluded)", value=program.stream_tokens)
        yield CounterMetricFamily("flidec_questions_total", "reads answered", value=program.questions)
        yield CounterMetricFamily("flidec_shared_requests_total", "requests whose root was computed in part "
                                  "with other requests' of their run", value=program.shared)
        saved = program.saved
        reused = CounterMetricFamily("flidec_tokens_reused_total",
                                     "state positions resumed from saved states")
        reused.add_metric([], 0 if saved is None else saved.tokens_reused)
        yield reused
        if saved is not None:
            yield CounterMetricFamily("flidec_saved_hits_total", "plans resumed from a saved point",
                                      value=saved.hits)
            yield CounterMetricFamily("flidec_saved_points_total", "saved points written", value=saved.saved)
        use = CounterMetricFamily("flidec_bucket_streams_total", "streams run per bucket",
                                  labels=["tree", "bucket"])
        for (tree, bucket), n in sorted(buckets.items()):
            use.add_metric([tree, bucket], n)
        yield use
        if now["cuda"] is not None and torch.cuda.is_available():
            device = now["cuda"]
            mem = GaugeMetricFamily("flidec_gpu_memory_bytes", "GPU memory held by torch", labels=["kind"])
            mem.add_metric(["allocated"], torch.cuda.memory_allocated(device))
            mem.add_metric(["reserved"], torch.cuda.memory_reserved(device))
            free, total_bytes = torch.cuda.mem_get_info(device)
            mem.add_metric(["device_free"], free)
            mem.add_metric(["device_total"], total_bytes)
            yield mem


class Metrics:
    """One app's registry: per-request counters observed by the app, live values read on scrape."""

    def __init__(self, read: Callable[[], dict | None]):
        self.registry = CollectorRegistry()
        self.requests = PromCounter("flidec_http_requests", "HTTP requests answered", ["route", "status"],
                                    registry=self.registry)
        self.errors = PromCounter("flidec_http_errors", "HTTP error answers",
                                  ["route", "status", "error_type"], registry=self.registry)
        self.latency = Histogram("flidec_http_request_duration_seconds", "time from request to answer",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.in_flight = Gauge("flidec_http_in_flight", "requests being answered now", registry=self.registry)
        self.registry.register(_Live(read))

    def observe(self, route: str, status: int, seconds: float, error_type: str | None) -> None:
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)
        if status >= 400:
            self.errors.labels(route, str(status), error_type or "unknown").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
