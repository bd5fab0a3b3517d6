"""Counts in messages: one of anything in the singular, any other number in the plural."""

from __future__ import annotations


def counted(n: int, noun: str, *, grouped: bool = False) -> str:
    """``"1 record"``, ``"0 records"``, ``"12,000 records"`` (``grouped``: thousands marked)."""
    number = f"{n:,}" if grouped else str(n)
    return f"{number} {noun}" if n == 1 else f"{number} {noun}s"


def verb(n: int, singular: str, plural: str) -> str:
    """The verb agreeing with a count of ``n``: ``verb(1, "has", "have")``."""
    return singular if n == 1 else plural
