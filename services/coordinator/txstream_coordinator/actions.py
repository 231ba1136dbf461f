"""What one input to the coordinator makes the runtime do: log records, engine requests,
client results, decisions and final statuses, all made durable in one Kafka transaction,
and the requests refused with nowhere to answer them."""

from __future__ import annotations

from dataclasses import dataclass, field

from txstream.oltp.messages import CoordinatorLog, Decision, EngineRequest, TxnRequest, TxnResult


@dataclass
class Actions:
    log: list[CoordinatorLog] = field(default_factory=list)
    requests: list[tuple[int, EngineRequest]] = field(default_factory=list)
    results: list[tuple[str, TxnResult]] = field(default_factory=list)  # (reply_to, result)
    decisions: list[tuple[int, Decision]] = field(default_factory=list)
    # requests answered nowhere, since their reply_to may not take a result: (request, why)
    refused: list[tuple[TxnRequest, str]] = field(default_factory=list)
    statuses: list[TxnResult] = field(default_factory=list)  # promises' final statuses

    def __bool__(self) -> bool:
        return bool(self.log or self.requests or self.results or self.decisions or self.statuses)

    def extend(self, other: Actions) -> None:
        self.log += other.log
        self.requests += other.requests
        self.results += other.results
        self.decisions += other.decisions
        self.refused += other.refused
        self.statuses += other.statuses
