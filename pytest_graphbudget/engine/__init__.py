"""The engine: capture tiers, pricing, partition and assembly into a ``Profile``. It knows nothing
of budgets, pytest, the CLI or reports.
"""
