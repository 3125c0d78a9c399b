"""Measure: the sampling loop, its backends (CPU timer, CUDA events), telemetry, the per-device lock and
measured ceilings."""
