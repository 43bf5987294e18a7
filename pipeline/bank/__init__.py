"""Versioned skill banks: the store (``store``), exports (``export``) and the ``skillpipe bank`` CLI (``cli``)."""
from __future__ import annotations

from pipeline.bank.store import BankError, BankStore, BankVersion, diff

__all__ = ["BankError", "BankStore", "BankVersion", "diff"]
