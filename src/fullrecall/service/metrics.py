"""Prometheus metrics of one service instance (its own registry; nothing is sent anywhere)."""

from __future__ import annotations

from typing import Any


class Metrics:
    """Requests, latencies, errors, recalls, searchable delay and LLM calls, per tenant."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("fullrecall_requests", "HTTP requests", ["tenant", "route", "method", "status"],
                                registry=self.registry)
        self.latency = Histogram("fullrecall_request_seconds", "HTTP request latency", ["tenant", "route", "method"],
                                 registry=self.registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.errors = Counter("fullrecall_errors", "Responses with a 4xx or 5xx status", ["tenant", "route", "status"],
                              registry=self.registry)
        self.messages = Counter("fullrecall_messages_appended", "Messages committed", ["tenant"], registry=self.registry)
        self.recalls = Counter("fullrecall_recalls", "Searches and context recalls", ["tenant", "kind"],
                               registry=self.registry)
        self.summaries = Counter("fullrecall_summaries_read", "Summaries listed or expanded", ["tenant"],
                                 registry=self.registry)
        self.summaries_made = Counter("fullrecall_summaries_made", "Summaries made by the window manager", ["tenant"],
                                      registry=self.registry)
        self.llm_calls = Counter("fullrecall_llm_calls", "LLM calls made by the service (none unless a summarizer "
                                 "is configured)", ["tenant"], registry=self.registry)
        self.searchable = Histogram("fullrecall_searchable_delay_seconds", "Commit to stored embedding",
                                    registry=self.registry,
                                    buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.pending = Gauge("fullrecall_embedding_queue", "Messages committed but not embedded yet",
                             registry=self.registry)

    def observe_indexed(self, delays: list[float]) -> None:
        for d in delays:
            self.searchable.observe(d)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def request(self, tenant: str, route: str, method: str, status: int, seconds: float, **_: Any) -> None:
        self.requests.labels(tenant, route, method, str(status)).inc()
        self.latency.labels(tenant, route, method).observe(seconds)
        if status >= 400:
            self.errors.labels(tenant, route, str(status)).inc()
