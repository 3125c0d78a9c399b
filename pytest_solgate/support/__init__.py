"""Support: what every stage uses and no stage owns (errors, options, units, statistics, atomic writes)."""
