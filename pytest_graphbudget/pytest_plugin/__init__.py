"""The pytest plugin: hooks, options, markers, budget-file items and the run's state."""
