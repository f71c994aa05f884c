"""What a service counts about itself, served by ``GET /metrics`` as JSON or Prometheus text.

Counts by (endpoint, HTTP status), a latency histogram per endpoint (cumulative buckets in milliseconds, as
Prometheus histograms), and whatever gauges the service reports at scrape time (queue depth, live
sessions, sandbox statuses). Updated from one event loop, so plain integers suffice; no lock.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

#: histogram bucket upper bounds in milliseconds; +Inf is implied
BUCKETS_MS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000)


class Histogram:
    def __init__(self, buckets: tuple[float, ...] = BUCKETS_MS):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.total = 0
        self.sum_ms = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, ms)] += 1
        self.total += 1
        self.sum_ms += ms

    def quantile(self, q: float) -> float | None:
        """An upper bound of the ``q`` quantile (the bucket edge it falls under); None before any sample."""
        if not self.total:
            return None
        rank = math.ceil(q * self.total)
        seen = 0
        for edge, count in zip((*self.buckets, math.inf), self.counts):
            seen += count
            if seen >= rank:
                return edge
        return math.inf

    def as_dict(self) -> dict[str, Any]:
        cumulative, running = {}, 0
        for edge, count in zip((*self.buckets, math.inf), self.counts):
            running += count
            cumulative["+Inf" if edge == math.inf else f"{edge:g}"] = running
        return {
            "count": self.total,
            "sum_ms": round(self.sum_ms, 3),
            "p50_ms_le": self.quantile(0.5),
            "p99_ms_le": self.quantile(0.99),
            "buckets_ms": cumulative,
        }


class Metrics:
    """Request counters and latencies, plus gauges read from ``gauges()`` at scrape time."""

    def __init__(self, prefix: str, gauges: Callable[[], dict[str, Any]] | None = None):
        self.prefix = prefix
        self.requests: Counter[tuple[str, int]] = Counter()
        self.latency: dict[str, Histogram] = {}
        self.counters: Counter[tuple[str, ...]] = (
            Counter()
        )  # named event counts, e.g. ("tool_calls", name, status)
        self._gauges = gauges

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests[(endpoint, status)] += 1
        hist = self.latency.get(endpoint)
        if hist is None:
            hist = self.latency[endpoint] = Histogram()
        hist.observe(seconds * 1000.0)

    def count(self, *key: str, n: int = 1) -> None:
        self.counters[key] += n

    def as_json(self) -> dict[str, Any]:
        counters: dict[str, dict[str, int]] = {}
        for (name, *labels), n in sorted(self.counters.items()):
            counters.setdefault(name, {})["/".join(labels) or "total"] = n
        return {
            "requests": {f"{ep} {status}": n for (ep, status), n in sorted(self.requests.items())},
            "latency": {ep: h.as_dict() for ep, h in sorted(self.latency.items())},
            "counters": counters,
            "gauges": self._gauges() if self._gauges else {},
        }

    def as_prometheus(self, label_names: dict[str, tuple[str, ...]] | None = None) -> str:
        """Prometheus text exposition (version 0.0.4). ``label_names`` names the labels of each counter."""
        p, lines = self.prefix, []
        lines += [f"# TYPE {p}_requests_total counter"]
        for (ep, status), n in sorted(self.requests.items()):
            lines.append(f'{p}_requests_total{{endpoint="{ep}",status="{status}"}} {n}')
        lines.append(f"# TYPE {p}_request_duration_ms histogram")
        for ep, h in sorted(self.latency.items()):
            for edge, count in h.as_dict()["buckets_ms"].items():
                lines.append(f'{p}_request_duration_ms_bucket{{endpoint="{ep}",le="{edge}"}} {count}')
            lines.append(f'{p}_request_duration_ms_sum{{endpoint="{ep}"}} {h.sum_ms:.3f}')
            lines.append(f'{p}_request_duration_ms_count{{endpoint="{ep}"}} {h.total}')
        names = label_names or {}
        seen: set[str] = set()
        for (name, *labels), n in sorted(self.counters.items()):
            if name not in seen:
                lines.append(f"# TYPE {p}_{name}_total counter")
                seen.add(name)
            keys = names.get(name, tuple(f"l{i}" for i in range(len(labels))))
            rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in zip(keys, labels))
            lines.append(f"{p}_{name}_total{{{rendered}}} {n}" if rendered else f"{p}_{name}_total {n}")
        for name, value in _flatten(self._gauges() if self._gauges else {}):
            if isinstance(value, bool | int | float) and value is not None:
                lines.append(f"# TYPE {p}_{name} gauge")
                lines.append(f"{p}_{name} {float(value):g}")
        return "\n".join(lines) + "\n"


def _flatten(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in values.items():
        name = f"{prefix}{key}".replace("-", "_").replace(".", "_")
        if isinstance(value, dict):
            out += _flatten(value, f"{name}_")
        else:
            out.append((name, value))
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


__all__ = ["BUCKETS_MS", "Histogram", "Metrics"]
