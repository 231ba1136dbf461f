"""The topics a partition task reads, derived once from the app for the task, the worker's
task manager and its Faust agents."""

from __future__ import annotations

from dataclasses import dataclass, field

from txstream.kafka.topics import AppTopics
from txstream.model.app import App


@dataclass(frozen=True)
class Inputs:
    """Border stream topics (topic -> stream), then the coordinator's requests when the app
    declares tables (queries) or transactions, and its decisions and the clients' promises
    with transactions, then
    the exchange when it has spanning procedures, then the repartitioned procedures' inputs
    (topic -> procedure)."""

    streams: dict[str, str]
    oltp: tuple[str, ...]
    exchange: tuple[str, ...] = ()
    hops: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, app: App) -> Inputs:
        topics = AppTopics(app.name)
        df = app.dataflow()
        streams = {topics.stream(s): s for s in df.border_streams}
        decl = app.decl
        oltp: tuple[str, ...] = (topics.requests,) if decl.serves_requests else ()
        oltp += (topics.decisions, topics.promises) if decl.transactions else ()
        exchange = (topics.exchange,) if df.spanning_streams else ()
        return cls(streams, oltp, exchange, {topics.hop(p): p for p in df.hops})

    @property
    def topics(self) -> list[str]:
        return [*self.streams, *self.oltp, *self.exchange, *self.hops]
