"""The result document, the same for the serial reference and for a run."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CANCEL_REASONS = ("duplicate_order", "invalid", "out_of_stock", "insufficient_funds")
REJECT_REASONS = ("invalid_restock", "invalid_topup")
CONFIRMED = "confirmed"


def outcomes_sha256(outcomes: Iterable[tuple[int, str]]) -> str:
    """SHA-256 of `order_id outcome\\n` for every order event, in input order."""
    digest = hashlib.sha256()
    for order_id, outcome in outcomes:
        digest.update(f"{order_id} {outcome}\n".encode())
    return digest.hexdigest()


@dataclass
class Result:
    confirmed: int = 0
    cancelled: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CANCEL_REASONS, 0))
    rejected_events: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(REJECT_REASONS, 0)
    )
    revenue: int = 0
    stock: dict[int, int] = field(default_factory=dict)
    sold: dict[int, int] = field(default_factory=dict)
    balances: dict[int, int] = field(default_factory=dict)
    outcomes_sha256: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "confirmed": self.confirmed,
            "cancelled": dict(self.cancelled),
            "rejected_events": dict(self.rejected_events),
            "revenue": self.revenue,
            "stock": {str(k): v for k, v in sorted(self.stock.items())},
            "sold": {str(k): v for k, v in sorted(self.sold.items())},
            "balances": {str(k): v for k, v in sorted(self.balances.items())},
            "outcomes_sha256": self.outcomes_sha256,
        }
