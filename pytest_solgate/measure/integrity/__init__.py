"""Integrity: a measurement a kernel cannot fool (docs/integrity.md). One idea per module:

- outputs.py: the outputs on fresh inputs (new storage with poisoned output buffers, and the
  same tensors with new values) against the test's reference; lazy and aliased results;
- leftover.py: Python threads and child processes still working after a call returned;
- tampering.py: the clocks and sampling functions replaced; the timer against a second clock;
- precision.py: the operators' dtypes against the declared precision, and the tolerance.

``guard.Guard`` runs them around one timing, as an extra of the pipeline (measure/extras.py) that holds
the device: ``before()`` reads the watched functions, threads and children; the stopping rule it
wraps (``rule``) checks the outputs once between sampling rounds; ``after()`` checks everything
after the timing. It returns facts (``Findings.fields["integrity"]``); the engine words them
(judge/integrity.py) and fails the measurement.
"""

