"""Record: the history (SQLite or PostgreSQL), baselines read back from it, the spool, the solgate/1
JSON, and the run's facts (git, environment)."""
