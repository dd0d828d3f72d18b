"""The proving ground: scenarios that attack the engine (kills, crashes, storms) and one oracle
that judges every scenario from an effects ledger the test jobs write themselves.

Run it with ``scripts/prove``; see docs/guarantees.md.
"""
