"""Managed ledgers and cursors: a topic's storage on top of the ledger client."""
