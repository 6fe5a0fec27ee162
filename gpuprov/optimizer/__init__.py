"""The optimizer: ``problem`` (the MILP, math in its docstring), ``solve``, ``explain``, ``baselines``."""
