"""A transaction's declared parameters, checked before any of it runs.

Parameters arrive as a JSON object from any client. Declared as a `TypedDict`, a call with
a parameter missing, one not declared, or one of the wrong type fails as `bad_request`
naming the parameter, instead of as an exception inside the transaction (or, worse,
running with a coerced value). Types are checked by pydantic in strict mode, so the string
"5" is not an int; `Any` declares a name without a type.
"""

from __future__ import annotations

from typing import (
    Any,
    NotRequired,
    Required,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from pydantic import TypeAdapter, ValidationError

from txstream.model.errors import DataflowError

_PLAIN = (int, str, float, bool)


class Signature:
    def __init__(self, transaction: str, params: type) -> None:
        if not is_typeddict(params):
            raise DataflowError(
                f"transaction {transaction!r}: params must be a TypedDict, not {params!r}"
            )
        # Read from the hints, not __required_keys__: under `from __future__ import
        # annotations` Python 3.11 cannot see a NotRequired inside a string annotation.
        required = set(params.__required_keys__)  # type: ignore[attr-defined]
        # One adapter a parameter (pydantic takes no typing.TypedDict before Python 3.12),
        # which also lets an error name the parameter without parsing pydantic's.
        self._types: dict[str, TypeAdapter[Any]] = {}
        # A value of exactly a plain declared type fits it in strict mode: no adapter runs
        # (pydantic is most of what checking a call costs the engine).
        self._plain: dict[str, type] = {}
        for name, hint in get_type_hints(params, include_extras=True).items():
            qualifier = get_origin(hint)
            if qualifier is NotRequired or qualifier is Required:
                (hint,) = get_args(hint)
                if qualifier is Required:
                    required.add(name)
                else:
                    required.discard(name)
            self._types[name] = TypeAdapter(hint)
            if hint in _PLAIN:
                self._plain[name] = hint
        self.required = frozenset(required)

    def problem(self, params: object) -> str | None:
        """Why `params` do not fit (naming the parameter), or None if they do."""
        if not isinstance(params, dict):
            return f"parameters must be a JSON object, not {params!r}"
        missing = sorted(self.required - params.keys())
        if missing:
            return f"parameter {missing[0]!r} is missing"
        plain = self._plain
        for name, value in params.items():
            if type(value) is plain.get(name):
                continue
            adapter = self._types.get(name)
            if adapter is None:
                return f"parameter {name!r} is not declared; it takes {sorted(self._types)}"
            try:
                adapter.validate_python(value, strict=True)
            except ValidationError as e:
                first = e.errors()[0]
                inner = "".join(f"[{part!r}]" for part in first["loc"])
                return f"parameter {name!r}{inner}: {first['msg']}, not {first['input']!r}"
        return None
