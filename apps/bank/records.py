"""The bank's records as Python types: the same Avro records as `schemas/bank/*.avsc` (the
registry refuses a type that differs from its file), so either form writes the same bytes.
Its apps declare with these, under the namespace `bank`."""

from __future__ import annotations

from typing import TypedDict

NAMESPACE = "bank"


class Account(TypedDict):
    """One bank account: its balance, in whole units (never negative)."""

    balance: int


class Opening(TypedDict):
    """An account opened with a balance, loaded on the account's partition."""

    account: int
    balance: int


class Payment(TypedDict):
    """One payroll line: the employer account of the batch's partition pays an employee."""

    employer: int
    employee: int
    amount: int


class Transfer(TypedDict):
    """One transfer of a stream of transfers (TSpoon's workload as a dataflow): `seq` is its
    place in the input."""

    seq: int
    payer: int
    payee: int
    amount: int


class TransferOutcome(TypedDict):
    """What one transfer did: done, insufficient_funds, no_account or same_account."""

    seq: int
    outcome: str
