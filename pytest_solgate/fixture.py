"""The ``sol`` fixture a test receives: ``measure``, ``measure_step``, ``speed_of_light``, ``nbytes``,
``count_flops``, ``device``, ``profile``. It hands each call to the engine and keeps the test's
measurements for the run (``run.py``) to judge and record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from pytest_solgate.declare.work import Count, Flops, measurement_name
from pytest_solgate.support.errors import MeasureError, SolgateError

if TYPE_CHECKING:  # the plugin imports this module: the engine and torch stay unimported until a test measures
    import torch

    from pytest_solgate.declare.profiles import HardwareProfile
    from pytest_solgate.engine.kernels import Engine
    from pytest_solgate.measure.backends import CpuClock
    from pytest_solgate.measure.integrity.outputs import Checked
    from pytest_solgate.results import Measurement
    from pytest_solgate.score import Floor

# What args= takes: the call's arguments, or a function that returns new ones each time.
Args = Sequence[object] | Callable[[], Sequence[object]]


class SolFixture:
    """What a test receives as ``sol``: ``measure``, ``measure_step``, ``speed_of_light``, ``nbytes``,
    ``count_flops``, ``device``, ``profile``."""

    def __init__(self, engine: Engine, test: str, warn: Callable[[str], None], clock: CpuClock | None = None) -> None:
        self._engine = engine
        self._clock = clock  # the sol_clock fixture's (backends.CpuClock), or None: the machine's
        self._test = test
        self._warn = warn
        self._closed = False
        self.measurements: list[Measurement] = []

    @staticmethod
    def nbytes(*arrays: object) -> int:
        """Sum of ``nbytes`` of tensors or arrays: the usual way to write total fused bytes."""
        from pytest_solgate.declare.work import nbytes

        return nbytes(*arrays)

    def count_flops(self, fn: Callable[..., object], *args: object, **kwargs: object) -> dict[str, int]:
        """FLOPs of ``fn(*args, **kwargs)`` by precision, through FlopCounterMode (meta tensors work);
        float64 matmuls count as ``fp64_tensor`` on profiles that have FP64 tensor cores."""
        from pytest_solgate.declare.work import count_flops, float64_on_tensor_cores

        counted = count_flops(fn, *args, **kwargs)
        if not counted:
            self._warn(
                f"{self._test}: sol.count_flops counted 0 FLOPs: FlopCounterMode counts only matmuls, convolutions "
                "and attention, not pointwise ops, reductions, softmax or norms; declare flops= yourself "
                "(e.g. about 5 per element for a softmax)")
        if "fp64" not in counted:
            return counted
        return float64_on_tensor_cores(counted, self.profile.peak_tflops)

    @property
    def device(self) -> torch.device | str:
        """The device measurements run on: a ``torch.device``, or its name where torch is not installed."""
        place = str(self._engine.context().device)
        try:
            import torch
        except ImportError:
            return place
        return torch.device(place)

    @property
    def profile(self) -> HardwareProfile:
        """The hardware profile measurements are scored against."""
        return self._engine.context().profile

    def measure(
        self,
        fn: Callable[..., object],
        *positional: object,
        flops: Flops | None = None,
        bytes: Count | None = None,
        precision: str | None = None,
        name: str | None = None,
        gate: bool = True,
        args: Args | None = None,
        outputs: int | Sequence[int] | None = None,
        reference: Callable[..., object] | None = None,
        tolerance: float | None = None,
        keep: int | Sequence[int] | None = None,
    ) -> Measurement:
        """Time ``fn()``; or, with ``args=``, time ``fn(*args)`` and check its outputs on fresh inputs against
        ``reference`` (docs/integrity.md): ``outputs=`` the positions in ``args`` of the buffers it writes
        (none: it returns its result), ``tolerance=`` a relative error instead of the declared precision's,
        ``keep=`` the positions of inputs whose values the checks must not change."""
        __tracebackhide__ = True
        if positional:
            raise MeasureError(
                f"{self._test}: sol.measure(fn, {', '.join(repr(p) for p in positional)}): after the kernel it takes "
                "keywords only: flops=, bytes=, precision=, name=, gate= (e.g. sol.measure(fn, bytes=1e6))"
            )
        if self._closed:
            raise MeasureError(
                f"sol.measure called after the body of {self._test} returned (in a fixture's teardown?); it would "
                "never be judged: call it inside the test body"
            )
        try:
            name = measurement_name(self._test, name, {m.name for m in self.measurements})
            from pytest_solgate.engine.steps import series_clash

            series_clash(self._test, name, False, self.measurements)
            checked = self._checked(fn, args, outputs, reference, tolerance, keep)
            measurement = self._engine.measure(
                self._test, fn, flops=flops, bytes=bytes, precision=precision, name=name, gate=bool(gate),
                checked=checked, clock=self._clock,
            )
        except SolgateError as exc:
            raise exc.with_traceback(None) from None
        self.measurements.append(measurement)
        return measurement

    def _checked(self, fn: Callable[..., object], args: Args | None, outputs: int | Sequence[int] | None,
                 reference: Callable[..., object] | None, tolerance: float | None, keep: int | Sequence[int] | None
                 ) -> Checked | None:
        """What the integrity checks call ``fn`` with and compare against (None: no inputs handed)."""
        if args is not None:
            from pytest_solgate.measure.integrity.outputs import checked_of

            return checked_of(fn, args, outputs, reference, tolerance, self._test, keep)
        if outputs is not None or reference is not None or tolerance is not None or keep is not None:
            raise MeasureError(f"{self._test}: sol.measure's outputs=, reference=, tolerance= and keep= need args=: the "
                               "arguments fn is called with (e.g. sol.measure(add, args=(x, y, out), outputs=(2,), "
                               "reference=torch.add))")
        return None

    def measure_step(self, fn: Callable[[], object], *, name: str | None = None, flops: Flops | None = None,
                     bytes: Count | None = None, precision: str | None = None, gate: bool = True, top: int = 5
                     ) -> Measurement:
        """A whole step (a forward, a forward and backward, a decode step) under the profiler: its
        time, MFU, idle share and operators ranked by time lost (``m.step``); its record and its ``top``
        operators' records are judged with the test's (docs/steps.md)."""
        __tracebackhide__ = True
        if self._closed:
            raise MeasureError(f"sol.measure_step called after the body of {self._test} returned; call it inside the test body")
        from pytest_solgate.engine import steps

        try:
            name = measurement_name(self._test, "step" if name is None else name, {m.name for m in self.measurements})
            steps.series_clash(self._test, name, True, self.measurements)
            measured = steps.measure(self._engine, self._test, fn, name=name, flops=flops, bytes=bytes,
                                     precision=precision, gate=bool(gate), top=top)
        except SolgateError as exc:
            raise exc.with_traceback(None) from None
        self.measurements += measured
        return measured[0]

    def speed_of_light(self, *, flops: Flops | None = None, bytes: Count | None = None,
                       precision: str | None = None) -> Floor:
        """The floor of declared work on this session's profile, without running anything:
        ``.t_sol`` (seconds), ``.bound``, ``.intensity`` (FLOP/byte) and ``.ridge``."""
        __tracebackhide__ = True
        try:
            return self._engine.speed_of_light(flops=flops, bytes=bytes, precision=precision)
        except SolgateError as exc:
            raise exc.with_traceback(None) from None

    def close(self) -> None:
        self._closed = True
