"""The gate: figures, units of budgets, budget files, the baseline and the checks: plain functions
over profiles.
"""
