"""txstream: transactional stream processing (the S-Store model) on Kafka.

This module is the user API: what an app needs to declare its dataflow, write its stored
procedures and call its OLTP transactions. Apps import from here, not from the packages
behind it, whose layout may change.

    from txstream import App, TxnContext, Record

    app = App("leaderboard")
    votes = app.stream("votes", schema="leaderboard.Vote")

    @app.procedure(input=votes)
    def count(ctx: TxnContext, batch: list[Record]) -> None: ...
"""

from txstream.aio_client import AsyncTxClient
from txstream.client import OltpTimeout, TxClient, fragment
from txstream.config import Settings
from txstream.model.app import App
from txstream.model.context import TableView, TxnContext, WindowView
from txstream.model.declarations import (
    Check,
    Isolation,
    Key,
    NestedTransaction,
    Procedure,
    Record,
    RecoveryMode,
    Stream,
    Table,
    Transaction,
    Window,
)
from txstream.model.errors import ConstraintViolation, DataflowError, TxnAbort
from txstream.oltp.messages import Fragment, TxnResult
from txstream.producer import BatchError, BatchProducer
from txstream.read_client import CommittedRow, ReadUnavailable
from txstream.schemas.from_types import DecimalType, Float32, Int32

__version__ = "0.1.0"

__all__ = [
    "App",
    "AsyncTxClient",
    "BatchError",
    "BatchProducer",
    "Check",
    "CommittedRow",
    "ConstraintViolation",
    "DataflowError",
    "DecimalType",
    "Float32",
    "Fragment",
    "Int32",
    "Isolation",
    "Key",
    "NestedTransaction",
    "OltpTimeout",
    "Procedure",
    "ReadUnavailable",
    "Record",
    "RecoveryMode",
    "Settings",
    "Stream",
    "Table",
    "TableView",
    "Transaction",
    "TxClient",
    "TxnAbort",
    "TxnContext",
    "TxnResult",
    "Window",
    "WindowView",
    "fragment",
]
