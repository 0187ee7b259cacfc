"""Training utilities shared by the entry points: optimisation, distribution, losses, progress reporting."""
