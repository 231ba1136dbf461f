"""What a partition answered its direct transactions: a resend gets the first answer.

A direct transaction (a single-partition ACID transaction a client sends straight to its
partition) is answered with the group that runs it. A client that timed out may send it
again, under the same request id; if the first one ran, the resend must not run it twice.
So each answer is kept in the engine's state with its effects, by request id, and a request
whose id is kept is answered from there. The newest DIRECT_REMEMBERED are kept per
partition, in the order they ran; the oldest is forgotten as each new one is kept.
"""

from __future__ import annotations

import json

from txstream.engine.ledger import BatchLedger
from txstream.engine.writeset import TOMBSTONE, read
from txstream.oltp.messages import TxnResult

DIRECT_TABLE = "__direct__"  # (request id,) -> {"value": the result, as JSON}
DIRECT_ORDER_TABLE = "__direct_order__"  # (n,) -> {"value": the n-th kept request id}
# Answers kept per partition: a client resends within its timeout, long before this many
# later transactions have run.
DIRECT_REMEMBERED = 100_000


def _count_key(partition: int) -> tuple[str, str, int]:
    return ("direct", "kept", partition)


class DirectAnswers:
    def __init__(self, ledger: BatchLedger, remembered: int = DIRECT_REMEMBERED) -> None:
        self.ledger = ledger
        self.remembered = remembered

    def find(self, request_id: str) -> TxnResult | None:
        """The answer kept for `request_id`, if it ran here."""
        row = read(self.ledger.group.ws, self.ledger.base, DIRECT_TABLE, (request_id,))
        if row is None:
            return None
        fields = json.loads(row["value"])
        fields["partitions"] = list(fields.get("partitions", []))
        return TxnResult(**fields)

    def keep(self, result: TxnResult) -> None:
        """Keep `result` as its request's answer, with the group; forget the oldest past
        `remembered`."""
        ledger, ws = self.ledger, self.ledger.group.ws
        key = _count_key(ledger.partition)
        n = (ledger.sys_value(key) or 0) + 1
        ledger.set_sys(key, n)
        ws.put(DIRECT_TABLE, (result.request_id,), {"value": json.dumps(result.record())})
        ws.put(DIRECT_ORDER_TABLE, (n,), {"value": result.request_id})
        old = n - self.remembered
        if old >= 1:
            gone = read(ws, ledger.base, DIRECT_ORDER_TABLE, (old,))
            if gone is not None:
                ws.put(DIRECT_TABLE, (str(gone["value"]),), TOMBSTONE)
            ws.put(DIRECT_ORDER_TABLE, (old,), TOMBSTONE)
