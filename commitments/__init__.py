"""Commitments a team already holds (reservations, committed-use discounts, Savings Plans,
capacity reservations): their records, the files they are imported from, and discovery from
the clouds. The planner fills what is already paid for first (see gpuprov/optimizer/problem.py)."""
