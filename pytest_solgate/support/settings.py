"""Support (options, read before any stage): every ``--sol-*`` flag and its ini twin, parsed once into a frozen ``Settings``.

Parsing is pure (a mapping of raw strings in, a record out) so that each bad value gets a one-line
error naming the option, and so that the plugin and the tests share one definition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from pytest_solgate.support.errors import OptionError
from pytest_solgate.support.precisions import PRECISIONS


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling loop's budget for one measurement (see measure/sampling.py)."""

    min_time: float = 0.25
    max_time: float = 2.0
    noise: float = 0.005
    min_samples: int = 10
    warmup_time: float = 0.05
    cuda_graph: str = "auto"  # auto | on | off: replay the batched calls as one CUDA graph


def parse_device(spec: str) -> tuple[str, int | None]:
    """``--sol-device``: auto, cpu, cuda or cuda:N."""
    if spec in ("auto", "cpu", "cuda"):
        return spec, None
    if spec.startswith("cuda:") and spec[5:].isdigit():
        return "cuda", int(spec[5:])
    raise OptionError(f"--sol-device={spec!r} is not auto, cpu, cuda or cuda:N (N a device number)")


@dataclass(frozen=True)
class Option:
    name: str  # the ini name; the flag is --sol-... with dashes
    help: str
    default: str | bool | None = None
    kind: str = "string"  # string | bool | path-or-default
    choices: tuple[str, ...] = ()
    environment: str | None = None  # a variable read when the command line gives none, before the ini

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


DEFAULT_MAX_REGRESSION = 0.05  # the relative SOL drop that fails a test unless its marker says otherwise
DEFAULT_MIN_CHANGE = 0.025  # steps smaller than this are not change points: half the default tolerance
HISTORY_VARIABLE = "SOLGATE_HISTORY"  # a history URL from the environment (a CI secret)

OPTIONS = (
    Option("sol_report", "write the self-contained HTML report (default path sol-report.html)", None, "path-or-default"),
    Option("sol_json", "write all results as solgate/1 JSON to PATH"),
    Option("sol_markdown", "write a Markdown summary to PATH"),
    Option("sol_github_summary", "append the Markdown summary to $GITHUB_STEP_SUMMARY when it is set", False, "bool"),
    Option("sol_benchmark_action", "write github-action-benchmark customBiggerIsBetter JSON to PATH"),
    Option("sol_profile", "hardware profile id or TOML path instead of detection"),
    Option("sol_device", "where to measure: auto, cpu, cuda or cuda:N", "auto"),
    Option("sol_ceilings", "datasheet or measured ceilings (GPUs default to datasheet; CPUs are always measured)", None, "string", ("datasheet", "measured")),
    # CI keeps a history URL with its password in a secret, never on a command line.
    Option("sol_history", "the history: a SQLite file path or a postgresql:// URL (else $SOLGATE_HISTORY)", ".solgate/history.db",
           environment=HISTORY_VARIABLE),
    Option("sol_no_save", "do not record this run in the history", False, "bool"),
    Option("sol_baseline", "what to compare against: auto, a git ref, or none", "auto"),
    Option("sol_baseline_window", "how many clean runs of ancestors form a baseline window", "10"),
    Option("sol_max_regression", "default relative SOL drop that fails a test", str(DEFAULT_MAX_REGRESSION)),
    Option("sol_min_change", "smallest relative SOL step listed as a change point (and that starts a new baseline level)",
           str(DEFAULT_MIN_CHANGE)),
    Option("sol_gate", "what a failing verdict does: fail, warn or off", "fail", "string", ("fail", "warn", "off")),
    Option("sol_above_one", "what SOL > 1.05 does: fail or warn", "fail", "string", ("fail", "warn")),
    Option("sol_min_time", "minimum sampling time per measurement, seconds", "0.25"),
    Option("sol_max_time", "time budget per measurement, seconds (then flagged noisy)", "2.0"),
    Option("sol_noise", "target relative 95% half-width of the median", "0.005"),
    Option("sol_warmup_time", "warm-up per measurement after its first call, seconds (at least three calls)", "0.05"),
    Option("sol_cuda_graph", "time short GPU kernels as a replayed CUDA graph: auto (under 20 us a call), on or off",
           "auto", "string", ("auto", "on", "off")),
    Option("sol_precision", "precision class of a bare flops number", "fp32", "string", PRECISIONS),
    Option("sol_ncu", "on a GPU, one extra call of each gated measurement under Nsight Compute (ncu on PATH): "
           "records the DRAM bytes it moved beside the declared ones", False, "bool"),
    Option("sol_lock_clocks", "lock the SM clock through NVML for the session: off, base or max (restored at the end)",
           "off", "string", ("off", "base", "max")),
    Option("sol_integrity", "integrity checks of each measurement (docs/integrity.md): on, strict (every gated "
           "measurement must hand its inputs with args=; for gating agent-written code) or off", "on", "string",
           ("on", "strict", "off")),
    # A clock from a test (the sol_clock fixture) never makes a real result (docs/integrity.md) unless this is
    # set: for pytest-solgate's own tests, whose conftest sets the variable; the GitHub action refuses it.
    Option("sol_trust_test_clock", "judge measurements timed on a sol_clock fixture's clock as real ones "
           "(pytest-solgate's own tests only; never in CI)", False, "bool", environment="SOLGATE_TRUST_TEST_CLOCK"),
    # In CI the history is the point: a run it could not record must not pass unnoticed.
    Option("sol_require_history", "fail the run when its history cannot be written: auto (when $CI is set), yes or no",
           "auto", "string", ("auto", "yes", "no")),
)


@dataclass(frozen=True)
class Settings:
    report: str | None = None
    json: str | None = None
    markdown: str | None = None
    github_summary: bool = False
    benchmark_action: str | None = None
    profile: str | None = None
    device: str = "auto"
    ceilings: str | None = None
    history: str = ".solgate/history.db"
    no_save: bool = False
    baseline: str = "auto"
    baseline_window: int = 10
    max_regression: float = DEFAULT_MAX_REGRESSION
    min_change: float = DEFAULT_MIN_CHANGE
    gate: str = "fail"
    above_one: str = "fail"
    sampling: SamplingSettings = SamplingSettings()
    precision: str = "fp32"
    ncu: bool = False  # --sol-ncu: measured DRAM bytes under Nsight Compute (measure/ncu.py)
    lock_clocks: str = "off"  # --sol-lock-clocks: off | base | max (measure/clocks.py)
    require_history: str = "auto"
    integrity: str = "on"  # --sol-integrity: on | strict | off (measure/integrity/)
    trust_test_clock: bool = False  # --sol-trust-test-clock: a sol_clock fixture's timings judged as real ones


def naming_history(option: str | None, environ: Mapping[str, str], ini: str | None) -> str:
    """Which setting named the history, in the order they win (for the advice of its messages)."""
    if option is not None:
        return "--sol-history"
    if environ.get(HISTORY_VARIABLE):
        return HISTORY_VARIABLE
    return "ini sol_history" if ini else "default"


def history_required(setting: str, environ: Mapping[str, str]) -> bool:
    """Whether a history write that fails fails the run: ``yes``, ``no``, or ``auto``: when the
    environment says it is CI (``CI`` set to anything but empty, 0, false or no, as GitHub,
    GitLab and most CI services set it)."""
    if setting != "auto":
        return setting == "yes"
    return environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _number(flag: str, raw: RawValue, check: Callable[[float], bool], rule: str) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise OptionError(f"{flag}={raw!r} is not a number; {rule}") from None
    if math.isnan(value) or math.isinf(value) or not check(value):
        raise OptionError(f"{flag}={raw!r}: {rule}")
    return value


def _bool(flag: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise OptionError(f"{flag}={raw!r} is not true or false")


def check_report_path(report: str | None) -> None:
    """A ``--sol-report`` that took a test path as its output (a folder, a Python file) is refused."""
    if report and (Path(report).is_dir() or report.endswith(".py")):
        what = "a folder" if Path(report).is_dir() else "a Python file"
        inside = f"{report.rstrip('/')}/sol-report.html" if Path(report).is_dir() else "sol-report.html"
        raise OptionError(
            f"--sol-report took '{report}' as its output path, {what}: name the report's file, e.g. "
            f"--sol-report={inside} (a bare --sol-report before a test path takes that path: put it last)"
        )


# An option's raw value as pytest's getoption (typed Any) and the ini give it: text, a flag's bool, or None.
RawValue = Any


def parse_settings(raw: Mapping[str, RawValue]) -> Settings:
    """``raw`` maps ini names (sol_gate, ...) to the value given (CLI first, then ini), or None."""
    values = _given(raw)
    parse_device(values["sol_device"])
    baseline = str(values["sol_baseline"])
    if not baseline.strip() or baseline.startswith("-"):
        raise OptionError(f"--sol-baseline={baseline!r}: give auto, none, or a git ref such as origin/main")
    sampling = _sampling(values)
    max_regression, min_change, window = _regression_rule(values)
    if not str(values["sol_history"]).strip():
        raise OptionError("--sol-history is empty; give a path such as .solgate/history.db")
    return Settings(
        report=values["sol_report"],
        json=values["sol_json"],
        markdown=values["sol_markdown"],
        github_summary=values["sol_github_summary"],
        benchmark_action=values["sol_benchmark_action"],
        profile=values["sol_profile"],
        device=values["sol_device"],
        ceilings=values["sol_ceilings"],
        history=str(values["sol_history"]),
        no_save=values["sol_no_save"],
        baseline=baseline,
        baseline_window=window,
        max_regression=max_regression,
        min_change=min_change,
        gate=values["sol_gate"],
        above_one=values["sol_above_one"],
        sampling=sampling,
        precision=values["sol_precision"],
        ncu=values["sol_ncu"],
        lock_clocks=values["sol_lock_clocks"],
        require_history=values["sol_require_history"],
        integrity=values["sol_integrity"],
        trust_test_clock=values["sol_trust_test_clock"],
    )


def _given(raw: Mapping[str, RawValue]) -> dict[str, RawValue]:
    """Every option's value: the one given, else its default; a flag read as a bool, a choice checked."""
    values: dict[str, RawValue] = {}
    for option in OPTIONS:
        value = raw.get(option.name)
        if value is None or value == "":
            value = option.default
        if option.kind == "bool":
            value = _bool(option.flag, value)
        if option.choices and value is not None and value not in option.choices:
            raise OptionError(f"{option.flag}={value!r} is not one of: {', '.join(option.choices)}")
        values[option.name] = value
    return values


def _sampling(values: Mapping[str, RawValue]) -> SamplingSettings:
    """The sampling budget: --sol-min-time, --sol-max-time (not below it), --sol-noise and --sol-warmup-time."""
    min_time = _number("--sol-min-time", values["sol_min_time"], lambda v: v >= 0, "give seconds >= 0, e.g. 0.25")
    max_time = _number("--sol-max-time", values["sol_max_time"], lambda v: v > 0, "give seconds > 0, e.g. 2.0")
    if max_time < min_time:
        raise OptionError(f"--sol-max-time={max_time:g} is below --sol-min-time={min_time:g}; raise the budget")
    noise = _number("--sol-noise", values["sol_noise"], lambda v: 0 < v < 1, "give a fraction in (0, 1), e.g. 0.005")
    warmup = _number("--sol-warmup-time", values["sol_warmup_time"], lambda v: v >= 0, "give seconds >= 0, e.g. 0.05")
    return SamplingSettings(min_time=min_time, max_time=max_time, noise=noise, warmup_time=warmup,
                            cuda_graph=values["sol_cuda_graph"])


def _regression_rule(values: Mapping[str, RawValue]) -> tuple[float, float, int]:
    """What the gate compares by: --sol-max-regression, --sol-min-change and --sol-baseline-window."""
    max_regression = _number(
        "--sol-max-regression", values["sol_max_regression"], lambda v: 0 <= v < 1, "give a fraction in [0, 1), e.g. 0.05"
    )
    min_change = _number(
        "--sol-min-change", values["sol_min_change"], lambda v: 0 <= v < 1, "give a fraction in [0, 1), e.g. 0.025"
    )
    window = _number(
        "--sol-baseline-window", values["sol_baseline_window"], lambda v: v == int(v) and 1 <= v <= 100,
        "give a whole number of runs from 1 to 100, e.g. 10",
    )
    return max_regression, min_change, int(window)
