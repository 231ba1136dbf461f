"""Queries across engines in the spanning simulation, through the coordinator's protocol.

A `QueryCluster` is a `SpanCluster` with the coordinator's logic (`Coordinator`, as
`txstream coordinator run` drives it) beside it: at random steps a client asks it for a
table, its requests go to the engines on a requests log that each engine takes in turn with
its other input, and the replies an engine's group holds reach the coordinator when that
group commits. A crash loses what the engine held in memory, parked reads included; those
queries end by the coordinator's timeout.
"""

from __future__ import annotations

from typing import Any

from tests.support.simulation.spanning import Log, SpanCluster
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.oltp.messages import Query, TxnRequest, TxnResult
from txstream_coordinator.actions import Actions
from txstream_coordinator.coordinator import Coordinator

REQUESTS = "requests"
TIMEOUT_MS = 5_000  # the simulated clock moves 1 ms a delivery
RESEND_S = 0.2


class QueryCluster(SpanCluster):
    def __init__(
        self,
        app: App,
        partitions: int,
        phases: list[dict[str, Log]],
        seed: int,
        query: Query,
        after: str,
    ) -> None:
        """Queries for `query` start once the topic `after` is open (its phase reached)."""
        super().__init__(app, partitions, phases, seed)
        self.logs[REQUESTS] = [[] for _ in range(partitions)]
        for node in self.nodes:
            node.received[REQUESTS] = 0
        topics = AppTopics(app.name)
        self.coordinator = Coordinator(partitions, topics, {}, [query.table], RESEND_S)
        self.reply_to = topics.oltp_out
        self.query, self.after = query, after
        self.now = 0.0
        self.results: list[TxnResult] = []
        self.asked = 0

    def _choices(self, p: int) -> list[str]:
        out = super()._choices(p)
        if self.nodes[p].received[REQUESTS] < len(self.logs[REQUESTS][p]):
            out.append(REQUESTS)
        return out

    def _deliver(self, p: int, topic: str) -> None:
        self.now += 0.001
        self._act(self.coordinator.tick(self.now))
        if topic != REQUESTS:
            if self.after in self._open_topics() and self.rng.random() < 0.05:
                self.ask()
            super()._deliver(p, topic)
            return
        node = self.nodes[p]
        offset = node.received[REQUESTS]
        node.received[REQUESTS] = offset + 1
        assert node.engine.request(self.logs[REQUESTS][p][offset])  # no 2PC here: no conflict
        node.engine.set_position(REQUESTS, offset + 1)

    def ask(self) -> None:
        self.asked += 1
        req = TxnRequest(f"q{self.asked}", self.reply_to, TIMEOUT_MS, query=self.query)
        self._act(self.coordinator.request(req, self.now))

    def _commit(self, p: int) -> None:
        replies = list(self.nodes[p].engine.group.replies)
        super()._commit(p)
        for rep in replies:
            self._act(self.coordinator.reply(rep, self.now))

    def _act(self, acts: Actions) -> None:
        for p, req in acts.requests:
            self.logs[REQUESTS][p].append(req)
        self.results += [res for _, res in acts.results]

    def finish(self) -> None:
        """Answer every query still open: deliver the requests left and commit, while the
        coordinator asks again for reads a crash lost, then let it time out the rest."""
        if not self.asked:
            self.ask()
        for _ in range(100):
            if not self.coordinator.reads:
                break
            for p, node in enumerate(self.nodes):
                while node.received[REQUESTS] < len(self.logs[REQUESTS][p]):
                    self._deliver(p, REQUESTS)
                if not node.engine.group.empty:
                    self._commit(p)
            self.now += RESEND_S
            self._act(self.coordinator.tick(self.now))
        self.now += 2 * TIMEOUT_MS / 1000
        self._act(self.coordinator.tick(self.now))

    def answered(self) -> list[tuple[int | None, list[tuple[Any, Any]]]]:
        """(the batch it is as of, its rows) of every query that succeeded."""
        return [(r.at, r.table_rows()) for r in self.results if r.ok]
