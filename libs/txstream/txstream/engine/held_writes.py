"""A held write set's durable form: the JSON a prepared (`__prepared__`) or promised
(`__promised__`) transaction's writes are kept in until its decision.

It keeps the formulas with the rows: a write set that changed a row by formulas only lands
them on the row as it stands at the decision (`engine.formulas`), and one reloaded without
them would land its rows as they stood when it ran, over whatever committed in between.
"""

from __future__ import annotations

import json
from typing import Any

from txstream.engine.formulas import Formula
from txstream.engine.writeset import TOMBSTONE, WriteSet


def encode(ws: WriteSet, **extra: Any) -> str:
    """`ws` as JSON: {"rows": [[table, key, row or null]], "formulas": [[table, key,
    [[op, field, value]]]], **extra}; rows are JSON values."""
    rows = [
        [t, list(k), None if v is TOMBSTONE else v]
        for t, written in ws.tables.items()
        for k, v in written.items()
    ]
    formulas = [
        [t, list(k), [[f.op, f.field, f.value] for f in todo]]
        for (t, k), todo in (ws.formulas or {}).items()
    ]
    return json.dumps({"rows": rows, "formulas": formulas, **extra})


def decode(text: str) -> tuple[WriteSet, dict[str, Any]]:
    """The write set `encode` wrote, and its extra fields. Also reads the older form, a
    plain list of rows, which kept no formulas."""
    data = json.loads(text)
    if isinstance(data, list):
        data = {"rows": data, "formulas": []}
    ws = WriteSet()
    for table, key, row in data.pop("rows"):
        ws.put(table, tuple(key), TOMBSTONE if row is None else row)
    formulas = data.pop("formulas")
    if formulas:
        ws.formulas = {
            (t, tuple(k)): [Formula(op, field, value) for op, field, value in todo]
            for t, k, todo in formulas
        }
    return ws, data
