"""Judge: budgets and baselines to a verdict, and the change points over a series."""
