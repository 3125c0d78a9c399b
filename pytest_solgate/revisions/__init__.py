"""Work across commits, which only the ``solgate`` command does: a temporary git worktree per
commit (``worktree``), a paired A/B of HEAD against its base (``ab``) and the search for the
commit that broke a budget (``bisection``). Each returns facts; ``report/`` words them."""
