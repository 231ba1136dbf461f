"""The registry's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

SCHEMAS = Gauge("txstream_registry_schemas", "Distinct schemas (ids) the registry holds")
REGISTERED = Counter("txstream_registry_versions_total", "Schema versions registered")
REFUSED = Counter(
    "txstream_registry_refused_total",
    "Requests refused, by Confluent error code (409: incompatible, 42201: invalid schema)",
    ["code"],
)
