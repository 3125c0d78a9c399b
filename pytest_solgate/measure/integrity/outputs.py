"""Integrity: the kernel's outputs, checked on fresh inputs with poisoned output buffers.

A test hands its inputs with ``sol.measure(fn, args=(x, y, out), outputs=(2,), reference=ref)``:
the plugin times ``fn(x, y, out)``, then calls it twice more, untimed:

- on new storage with new values (fresh tensors, output buffers poisoned): a buffer left partly
  unwritten keeps its poison; a CUDA graph replaying the buffers it captured writes none of it;
- on the same tensors with new values (inputs rewritten in place; the outputs left holding the
  last result, as in a timed call, so that a kernel cannot tell the check by a poisoned buffer):
  a result cached by address, or computed once and left in the buffer, does not change.

The reference is called after the kernel, on copies of the inputs taken before it: while the
kernel runs, no expected answer exists for it to find (pygpubench's gc answer copy).

Each result is compared with ``reference`` (called with the inputs only: the args that are not
outputs) at the tolerance of the declared precision (precision.py); without a reference, the result
must differ from the one before and no poison may be left. The user's tensors are restored after
the first check, so an ``assert_close(out, x + y)`` after ``sol.measure`` still holds.

New values: a floating tensor is rolled by a random offset and each element scaled by a random
factor (its values' range and signs kept: a log's input stays positive); an 8-bit integer tensor (a
quantized operand, packed int4 weights) gets values drawn within its own range; a wider integer
tensor (indices) is rolled only: each position gets another value, every index stays in bounds, and
the values and their order (what a gather's speed depends on) stay as they were. Integer tensors
sorted along their last dimension (offsets, cumulative lengths) and boolean ones (masks) keep their
values; so do the inputs at the positions the test names in ``keep=`` (sorted float boundaries, a
uint8 table of indices).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import random
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Generic, Iterator, NoReturn, Sequence, TypeGuard, TypeVar

from pytest_solgate.measure.integrity import precision

if TYPE_CHECKING:
    import torch
    from torch import Tensor

FLOAT_POISON = float("nan")

# The causes a check names (judge/integrity.py words each).
LAZY = "lazy"
ALIASED = "aliased"
UNWRITTEN = "unwritten"
STALE = "stale"
WRONG = "wrong"
LOWER_PRECISION = "lower-precision"
UNWAITED_COPY = "unwaited-copy"
NO_RESULT = "no-result"  # returned None, and no outputs= named the buffers it writes
SHAPE = "shape"  # a result of another shape than the reference's
STALE_TIMED = "stale-timed"  # a timed call's output, after new values were written between rounds (rounds.py)
REFERENCE_CHANGED = "reference-changed"  # reference= (the function, its code, closure or defaults) changed since handed
WRITTEN_LATER = "written-later"  # a host output written after the call returned, with no device in the call


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """The checks' own torch work (comparisons, copies, new values, the reference) on the calling
    thread alone. Beside a busy neighbour an operation split over every core waits for the thread
    that lost its core: one comparison of 64 K floats read 300 ms on 2 threads and 3.5 ms on one, on
    the 2-core development VM (1.2 and 1.4 ms quiet). The kernel's own calls keep the user's
    setting. (A context, not a decorator: a wrapper's closure could be swapped unseen by the scan.)"""
    import torch
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(slots=True)
class LastCall:
    """The last timed call's result and the count of timed calls (rounds.py checks the timed calls' outputs)."""

    result: object = None
    calls: int = 0
    renewed: bool = False  # the timed inputs hold values the checks wrote (a round on new values, rounds.py)
    # A timed call set a profile or trace function (deferred.py): read inside the timed region, before a
    # function that runs at the next Python call after the timer stopped could run and take itself back.
    set_hook: bool = False


@dataclass(frozen=True)
class Checked:
    """What a test handed for its outputs to be checked."""

    fn: Callable[..., object]
    args: tuple[object, ...]  # the timed call's arguments
    factory: Callable[[], object] | None  # makes fresh arguments, when the test gave one (``fresh`` checks them)
    outputs: tuple[int, ...]  # positions of the buffers the kernel writes (empty: it returns its result)
    reference: Callable[..., object] | None
    tolerance: float | None  # the test's own relative tolerance, instead of the declared precision's
    test: str = ""  # the test's id, for the one line of a reference= or args= that fails
    kept: tuple[int, ...] = ()  # positions of the inputs whose values are never changed (keep=)
    # What the reference is made of as handed (_made_of), before any call of the kernel: a kernel that
    # finds it (on the stack, in this record) and makes it answer with the kernel's result is named.
    signed: tuple[object, ...] = ()
    last: LastCall = field(default_factory=LastCall, compare=False, repr=False)

    def timed(self) -> Callable[[], object]:
        fn, args, last, test = self.fn, self.args, self.last, self.test
        profile, trace = sys.getprofile(), sys.gettrace()

        def call() -> object:
            __tracebackhide__ = True
            try:
                result = last.result = fn(*args)
            except Exception as exc:  # noqa: BLE001 - raised on the values the checks wrote: said so
                if last.renewed:
                    users_error(test, "kernel, on new values (a timed round),", exc, KEEP_HINT)
                raise
            last.calls += 1
            if sys.getprofile() is not profile or sys.gettrace() is not trace:
                last.set_hook = True
            return result

        return call

    def last_outputs(self) -> list[object]:
        """The outputs of the last timed call: the buffers named by outputs=, else what it returned."""
        if self.outputs:
            return [self.args[i] for i in self.outputs]
        return _flat(self.last.result)

    def fresh(self) -> list[object]:
        """New arguments from the test's factory (args= a function), refused in one line where it fails."""
        assert self.factory is not None
        made = users_call(self.test, "args=", self.factory)
        if not isinstance(made, (tuple, list)):
            raise_user_error(f"{self.test}: sol.measure's args= function returned {type(made).__name__}, not a tuple of "
                             "the kernel's arguments (e.g. args=lambda: (torch.randn(n), torch.randn(n)))")
        return list(made)

    def inputs(self, args: Sequence[object]) -> list[object]:
        return [a for i, a in enumerate(args) if i not in self.outputs]

    def changing(self, args: Sequence[object]) -> list[Tensor]:
        """The tensors among the inputs in ``args`` that the checks write new values into."""
        return [tensor for i, arg in enumerate(args) if i not in self.outputs and i not in self.kept
                for tensor in tensors_in(arg) if changes(tensor)]

    def written(self) -> list[Tensor]:
        """The buffers of the timed arguments that the kernel writes (outputs=): tensors, as checked_of checked."""
        return [_checked_tensor(self.args[i]) for i in self.outputs]


@dataclass(frozen=True)
class Finding:
    """What one check found wrong (facts; judge/integrity.py words them)."""

    cause: str
    when: str  # "after timing", "between sampling rounds"
    storage: str  # "new storage, new values" or "the same tensors, new values"
    output: str = ""  # which output ('out', 'args[2]', 'result[0]')
    count: int = 0  # elements concerned
    total: int = 0
    error: float = 0.0  # the largest error, relative to |reference| + its RMS
    allowed: float = 0.0
    bits: int = 0  # the mantissa bits the tolerance is for
    type_name: str = ""  # the lazy result's type
    shapes: tuple[str, str] = ("", "")  # (the result's, the reference's), for SHAPE
    operators: tuple[str, ...] = field(default_factory=tuple)


def is_tensor(value: object) -> TypeGuard[Tensor]:
    import torch  # here, not at import: the plugin loads without torch
    return isinstance(value, torch.Tensor)


def _checked_tensor(value: object) -> Tensor:
    """``value``, known to be a tensor (an output buffer that checked_of checked is one)."""
    assert is_tensor(value)
    return value


def changes(tensor: Tensor) -> bool:
    """Whether new values may be written for ``tensor`` (see the module's doc): floating, complex and
    8-bit integer ones; wider integers unless sorted along their last dimension (offsets,
    boundaries); never a boolean one."""
    import torch
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype in (torch.int8, torch.uint8):
        return True
    try:
        return tensor.dtype != torch.bool and not _sorted_rows(tensor)
    except NotImplementedError:  # torch compares no uint16-64 on a CPU: kept, as the docs say of sorted ones
        return False


def _sorted_rows(tensor: Tensor) -> bool:
    """Whether every row (last dimension) of the integer ``tensor`` is non-decreasing or
    non-increasing: a rolled one would not be (cumulative lengths would turn negative)."""
    if tensor.numel() < 2:
        return True
    rows = tensor if tensor.shape[-1] > 1 else tensor.reshape(-1)  # a column of indices: its one row
    before, after = rows[..., :-1], rows[..., 1:]  # compared, not subtracted: a difference may overflow
    return bool((after >= before).all()) or bool((after <= before).all())


def varies(tensor: Tensor) -> bool:
    """Whether new values for ``tensor`` change every result that depends on them: a float's do (each
    element scaled); an integer's, drawn within its range, leave a maximum or a count as it was."""
    return tensor.is_floating_point() or tensor.is_complex()


# The bands new values are scaled within, a factor drawn for every value: values that are the old
# ones times one factor (or rolled) tell a kernel that is linear, homogeneous or shift-equivariant
# what its last result becomes, so it could answer the checks from a cache. Equal values get equal
# factors: a kernel whose speed depends on its data (a sort of many duplicates runs 2.6x faster than
# one of distinct values on a CPU) meets data like the test's, and is not told slower by the checks.
SCALES = ((0.75, 0.95), (1.05, 1.25))
SAME_WIDTH_INTEGERS = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}
# Fibonacci hashing's odd multipliers (2^w / golden ratio), as the signed integers torch multiplies
# (its products wrap): the top 24 bits of value-times-multiplier spread every bit of the value.
MULTIPLIERS = {"int32": 0x9E3779B1 - (1 << 32), "int64": 0x9E3779B97F4A7C15 - (1 << 64)}


# Elements new values are made for at a time, in buffers kept for the measurement (Scratch).
NEW_VALUES_CHUNK = 1 << 18


class Scratch:
    """The buffers new values are made in, made once for a measurement's rounds on new values. Made
    and freed between two timed samples, even a chunk's, they changed what the allocator handed the
    next call: glibc gave the freed memory back and the call's result paid its page faults again (a
    bf16 add of 8M elements read 3.5x slower on new values in 4 of 6 processes: an honest kernel
    named ``served from a cache``)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, str, str], Tensor] = {}

    def get(self, role: str, dtype: torch.dtype, like: Tensor, count: int) -> Tensor:
        """A flat buffer of ``count`` elements of ``dtype`` on ``like``'s device, for ``role``."""
        import torch
        key = (role, str(dtype), str(like.device))
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < count:
            buffer = self._buffers[key] = torch.empty(max(count, NEW_VALUES_CHUNK), dtype=dtype, device=like.device)
        return buffer[:count]


def _hash_into(factor: Tensor, like: Tensor, low: float, high: float, seed: int, scratch: Scratch) -> None:
    """Into ``factor`` (flat, ``like``'s real dtype) a factor in [low, high) for every element of the
    flat ``like``: a hash of its value's bits with ``seed`` (equal values, equal factors)."""
    import torch
    real = like.real if like.is_complex() else like
    wide = "int64" if real.element_size() == 8 else "int32"
    hashed = scratch.get("hash", getattr(torch, wide), like, real.numel())
    hashed.copy_(real.view(getattr(torch, SAME_WIDTH_INTEGERS[real.element_size()])))
    hashed.bitwise_xor_(seed).mul_(MULTIPLIERS[wide])
    hashed.bitwise_right_shift_(40 if wide == "int64" else 8)  # the top 24 bits, signed: -2^23 to 2^23
    unit = scratch.get("unit", torch.float64 if wide == "int64" else torch.float32, like, real.numel())
    unit.copy_(hashed).mul_((high - low) / (1 << 24)).add_((low + high) / 2)
    factor.copy_(unit)


def factors(like: Tensor, rng: random.Random) -> Tensor:
    """A factor for every element of the flat tensor ``like``, in one of ``SCALES`` (``rng``'s pick),
    on its device, in its (real) dtype: a hash of the element's value (its bits) with a seed from
    ``rng``, so that equal values get equal factors; the same ``rng`` state gives the same factors."""
    with one_thread():
        import torch
        low, high = rng.choice(SCALES)
        real = like.real if like.is_complex() else like
        factor = torch.empty(real.shape, dtype=real.dtype, device=like.device)
        _hash_into(factor, like, low, high, rng.getrandbits(31), Scratch())
        return factor


def vary(kept: Tensor, rng: random.Random, out: Tensor, scratch: Scratch | None = None) -> None:
    """New values into ``out`` from ``kept`` (alike, flat; ``changes`` holds for them; the same tensor
    too), a NEW_VALUES_CHUNK at a time in ``scratch``'s buffers: a float's each times its value's
    factor (``factors``); an 8-bit integer's drawn anew within ``kept``'s own range (a mask of 0 and 1
    stays one, a constant stays as it is); a wider integer's as they are (rolled, they are new where
    they lie, and every index stays in bounds). The same ``rng`` state gives the same values."""
    scratch = scratch or Scratch()
    with one_thread():
        import torch
        chunks = [slice(start, start + NEW_VALUES_CHUNK) for start in range(0, kept.numel(), NEW_VALUES_CHUNK)]
        if kept.is_floating_point() or kept.is_complex():
            low, high = rng.choice(SCALES)
            seed = rng.getrandbits(31)
            real = kept.real.dtype if kept.is_complex() else kept.dtype
            for part in chunks:
                factor = scratch.get("factor", real, kept, kept[part].numel())
                _hash_into(factor, kept[part], low, high, seed, scratch)
                torch.mul(kept[part], factor, out=out[part])
            return
        generator = torch.Generator(device=kept.device).manual_seed(rng.getrandbits(63))
        if not kept.numel() or kept.element_size() > 1:
            if out.data_ptr() != kept.data_ptr():
                out.copy_(kept)
            return
        low, high = int(kept.min()), int(kept.max())
        for part in chunks:
            torch.randint(low, high + 1, out[part].shape, generator=generator, dtype=kept.dtype, out=out[part])


def write_rolled(out: Tensor, kept: Tensor, rng: random.Random, scratch: Scratch | None = None) -> None:
    """New values for the flat ``kept`` written into ``out`` (flat, alike, another storage): its own,
    rolled by a random offset, then varied (vary), in ``scratch``'s buffers."""
    n = kept.numel()
    shift = rng.randrange(1, n) if n > 1 else 0
    out[shift:].copy_(kept[:n - shift])  # as torch.roll(kept, shift)
    out[:shift].copy_(kept[n - shift:])
    vary(out, rng, out, scratch)


def rolled(flat: Tensor, rng: random.Random) -> Tensor:
    """New values for the flat ``flat`` in a tensor of their own (write_rolled)."""
    import torch
    out = torch.empty_like(flat)
    write_rolled(out, flat, rng)
    return out


def _new_values(tensor: Tensor, rng: random.Random, change: bool) -> Tensor:
    """A tensor of ``tensor``'s shape, strides, dtype, device and ``requires_grad`` over a storage of
    its own, holding new values where ``change`` (and ``changes`` holds), else a copy of its own: a
    transposed or expanded view stays one (a kernel cannot tell the checks' inputs by their layout)."""
    with one_thread():
        import torch
        with torch.no_grad():
            extent = 1 + sum((n - 1) * step for n, step in zip(tensor.shape, tensor.stride())) if tensor.numel() else 0
            # the elements the view spans, in its storage, in order
            region = tensor.detach().as_strided((extent,), (1,), tensor.storage_offset())
            base = torch.empty(extent, dtype=tensor.dtype, device=tensor.device)
            base.copy_(rolled(region, rng) if change and changes(tensor) else region)
            fresh = base.as_strided(tuple(tensor.shape), tuple(tensor.stride()))
        if tensor.requires_grad and fresh.is_leaf:
            fresh.requires_grad_(True)
        if isinstance(tensor, torch.nn.Parameter):
            fresh = torch.nn.Parameter(fresh, requires_grad=tensor.requires_grad)
        return fresh


def map_tensors(value: object, change: Callable[[Tensor], Tensor]) -> object:
    """``value`` with every tensor in it replaced by ``change(tensor)``: inside lists, tuples and dicts
    at any depth, a dataclass's fields, an ``nn.Module``'s parameters and buffers (in a copy of the
    module); a NumPy array is changed as a tensor over its memory, and comes back an array."""
    if is_tensor(value):
        return change(value)
    if isinstance(value, dict):
        mapped_dict = {key: map_tensors(v, change) for key, v in value.items()}
        if type(value) is dict:
            return mapped_dict
        kind = copy.copy(value)  # an OrderedDict, a defaultdict (its factory kept): the same kind, new values
        kind.update(mapped_dict)
        return kind
    if isinstance(value, list):
        return [map_tensors(v, change) for v in value]
    if isinstance(value, tuple):
        mapped = [map_tensors(v, change) for v in value]
        if hasattr(value, "_fields"):  # a named tuple: made from its fields
            named: Callable[..., object] = type(value)
            return named(*mapped)
        return tuple(mapped)
    if (array := _array_tensor(value)) is not None:
        return change(array).detach().numpy()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        instance: object = copy.copy(value)  # its fields set as they are, past a frozen class's guard and __init__
        for entry in dataclasses.fields(value):
            object.__setattr__(instance, entry.name, map_tensors(getattr(value, entry.name), change))
        return instance
    if _is_module(value):
        import torch
        made = copy.deepcopy(value)
        with torch.no_grad():
            for mine, theirs in zip(_module_tensors(value), _module_tensors(made)):
                theirs.copy_(change(mine))
        return made
    return value


def _array_tensor(value: object) -> Tensor | None:
    """A tensor over a NumPy array's memory (writes reach the array), or None for anything else (or
    an array torch cannot view: negative strides, object dtype)."""
    if type(value).__module__ != "numpy" or type(value).__name__ != "ndarray":
        return None
    import torch
    try:
        return torch.from_numpy(value)
    except (TypeError, ValueError):
        return None


def _is_module(value: object) -> bool:
    import torch
    return isinstance(value, torch.nn.Module)


def _module_tensors(module: object) -> list[Tensor]:
    import torch
    assert isinstance(module, torch.nn.Module)
    return [*module.parameters(), *(b for b in module.buffers() if b is not None)]


def storages_of(tensors: Sequence[Tensor]) -> list[Tensor]:
    """The whole storage of each of ``tensors`` (whole_storage), each storage once."""
    found: dict[tuple[int, object], Tensor] = {}
    for tensor in tensors:
        if tensor.untyped_storage().nbytes():
            found.setdefault((tensor.untyped_storage().data_ptr(), tensor.dtype), whole_storage(tensor))
    return list(found.values())


def tensors_in(value: object) -> list[Tensor]:
    """Every tensor in ``value``, where map_tensors finds them (a NumPy array's as a tensor over it;
    a module's own, not copied)."""
    if is_tensor(value):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [tensor for v in value for tensor in tensors_in(v)]
    if (array := _array_tensor(value)) is not None:
        return [array]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [tensor for entry in dataclasses.fields(value) for tensor in tensors_in(getattr(value, entry.name))]
    return _module_tensors(value) if _is_module(value) else []


def whole_storage(tensor: Tensor) -> Tensor:
    """A flat tensor over all of ``tensor``'s storage, in its dtype: new values written there reach an
    expanded or overlapping view (which cannot be written element by element) and every view of it."""
    import torch
    storage = tensor.untyped_storage()
    return torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(
        storage, 0, (storage.nbytes() // tensor.element_size(),), (1,))


def poison(tensor: Tensor) -> None:
    with one_thread():
        import torch
        if tensor.is_floating_point() or tensor.is_complex():
            tensor.fill_(FLOAT_POISON)
        elif tensor.dtype != torch.bool:
            tensor.fill_(torch.iinfo(tensor.dtype).min)


def _poisoned(tensor: Tensor) -> Tensor | None:
    """Where ``tensor`` still holds the poison (a boolean tensor), or None for a dtype not poisoned."""
    import torch
    if tensor.is_floating_point() or tensor.is_complex():
        return torch.isnan(tensor)
    if tensor.dtype == torch.bool:
        return None
    return tensor == torch.iinfo(tensor.dtype).min


def _flat(result: object) -> list[object]:
    """A kernel's or reference's results, one per output; a NumPy array (computed: not a proxy) as a tensor."""
    values = list(result) if isinstance(result, (tuple, list)) else [result]
    return [_from_numpy(value) for value in values]


def _from_numpy(value: object) -> object:
    is_array = type(value).__name__ == "ndarray" and type(value).__module__ == "numpy"
    return _as_tensor(value) if is_array else value


def shares_storage(a: Tensor, b: Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.untyped_storage().nbytes() > 0
    except Exception:  # noqa: BLE001 - a lazy object without storage is named as lazy
        return False


def lazy(value: object) -> str:
    """The type name of a result that is not a plain tensor (a subclass, a proxy), or ''."""
    import torch
    if type(value) is torch.Tensor or isinstance(value, torch.nn.Parameter):
        return ""
    return f"{type(value).__module__}.{type(value).__qualname__}"


@dataclass(frozen=True)
class Compared:
    error: float
    mismatched: int
    unwritten: int
    total: int


CHUNK = 1 << 24  # elements compared at a time: the temporaries stay small beside a GPU's large outputs


def compare(got: Tensor, want: Tensor, rtol: float) -> Compared:
    """Elementwise: |got - want| <= rtol * (|want| + RMS(want)); poison left where ``want`` is not NaN."""
    with one_thread():
        import torch
        got, want = got.detach().reshape(-1), want.detach().to(got.device).reshape(-1)
        wide = torch.float64 if got.dtype in (torch.float64, torch.complex128) else torch.float32
        if got.is_complex() or want.is_complex():
            got, want = (torch.view_as_real(t.to(torch.complex128)).reshape(-1) for t in (got, want))
            wide = torch.float64
        pieces = [(got[i:i + CHUNK], want[i:i + CHUNK]) for i in range(0, got.numel(), CHUNK)]
        squares, finite_count = 0.0, 0
        for _, w in pieces:
            w = w.to(wide)
            finite = torch.isfinite(w)
            squares += float(w[finite].double().pow(2).sum())
            finite_count += int(finite.sum())
        rms = (squares / finite_count) ** 0.5 if finite_count else 0.0
        error, mismatched, unwritten = 0.0, 0, 0
        for g, w in pieces:
            poisoned = _poisoned(g)
            if poisoned is not None:
                was = _poisoned(w) if w.dtype == g.dtype else None
                unwritten += int((poisoned & ~was).sum()) if was is not None else int(poisoned.sum())
            g, w = g.to(wide), w.to(wide)
            difference = (g - w).abs()
            same_special = (torch.isnan(g) & torch.isnan(w)) | ((g == w) & ~torch.isfinite(w))
            relative = torch.where(same_special, torch.zeros_like(difference), difference / (w.abs() + rms).clamp_min(1e-30))
            relative = torch.nan_to_num(relative, nan=float("inf"))
            if relative.numel():
                error = max(error, float(relative.max()))
                mismatched += int((relative > rtol).sum())
        return Compared(error, mismatched, unwritten, got.numel())


def clone(values: list[object]) -> list[object]:
    with one_thread():
        return [map_tensors(v, lambda t: t.detach().clone()) for v in values]


def _made_of(fn: object) -> tuple[object, ...]:
    """What a function is made of, by identity: itself, its code, defaults, globals and closure cells'
    contents (an empty cell as None)."""
    cells = getattr(fn, "__closure__", None) or ()
    contents: list[int | None] = []
    for cell in cells:
        try:
            contents.append(id(cell.cell_contents))
        except ValueError:  # an empty cell
            contents.append(None)
    parts = ("__code__", "__defaults__", "__kwdefaults__", "__globals__", "__func__", "__self__")
    return (id(fn), *(id(getattr(fn, part, None)) for part in parts), tuple(contents))


def _changed_since(then: object, now: object) -> int:
    """How many elements of the tensor ``now`` differ from ``then``, its copy taken earlier (0 for
    anything else)."""
    if not (is_tensor(then) and is_tensor(now)) or then.shape != now.shape or then.dtype != now.dtype:
        return 0
    with one_thread():
        import torch
        then, now = then.detach().to(now.device), now.detach()
        same = then == now
        if now.is_floating_point() or now.is_complex():
            same |= torch.isnan(then) & torch.isnan(now)
        return int((~same).sum())


def _numel(value: object) -> int:
    return value.numel() if is_tensor(value) else 0


def _identical(a: object, b: object) -> bool:
    with one_thread():
        import torch
        if not (is_tensor(a) and is_tensor(b)) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        a, b = a.detach().to(b.device), b.detach()
        if a.is_floating_point():
            return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
        return bool(torch.equal(a, b))


def _half_values(tensor: Tensor) -> bool:
    """Every finite value of a wider float tensor is exactly an fp16 or a bf16 value: it was
    computed in half precision and cast back."""
    with one_thread():
        import torch
        if not tensor.is_floating_point() or tensor.dtype in (torch.float16, torch.bfloat16) or tensor.numel() < 16:
            return False
        finite = tensor.detach()[torch.isfinite(tensor.detach())]
        return any(bool((finite.to(half).to(finite.dtype) == finite).all()) for half in (torch.float16, torch.bfloat16))


def raise_user_error(message: str) -> NoReturn:
    from pytest_solgate.support.errors import MeasureError

    raise MeasureError(message)


def users_call(test: str, what: str, fn: Callable[..., object], *args: object, hint: str = "") -> object:
    """``fn(*args)``, the test's own function (its reference=, its args= factory); where it raises,
    one error that names it (and ``hint``) and shows the test's frames only (none of the plugin's)."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - any error of the test's function is reported as the test's
        users_error(test, what, exc, hint)


# Said where a reference raises and outputs= named buffers: it was handed args= without them.
OUTPUTS_HINT = ("; the reference gets args= without the outputs= buffers: a kernel that also reads a buffer it "
                "writes (x.add_(y)) returns it instead of naming it in outputs=")


# Said where the kernel raises on the values the checks wrote (a Cholesky of a matrix no longer SPD).
KEEP_HINT = "; an input whose values must stay as they are (an SPD matrix, sorted boundaries) goes in keep="


def users_error(test: str, what: str, exc: BaseException, hint: str = "") -> NoReturn:
    """One error: the test's ``what`` raised ``exc``, with the test's frames only (none of the plugin's)."""
    import traceback

    frames = traceback.format_tb(exc.__traceback__.tb_next) if exc.__traceback__ is not None else []
    told = "".join(frames).rstrip()
    raise_user_error(f"{test}: sol.measure's {what} raised {type(exc).__name__}: {exc}{hint}"
                     + (f"\n{told}" if told else ""))


def _shape(value: object) -> str:
    return f"({', '.join(str(n) for n in value.shape)})" if hasattr(value, "shape") else type(value).__name__


def _described(value: object) -> str:
    if is_tensor(value):
        return f"a tensor of shape {_shape(value)}"
    return "None" if value is None else f"a {type(value).__name__}"


Watch = TypeVar("Watch", bound=contextlib.AbstractContextManager[object])  # what watches a checked call (the guard's)
Left = TypeVar("Left")  # what a checked call left running (the guard's)


class OutputCheck(Generic[Watch, Left]):
    """The checks of one measurement's outputs; ``run`` returns the first finding, or None.
    ``watch`` makes what watches each checked call (a context manager around it); ``after_call``
    (the guard's) is called right after each checked call returns, with what ``watch`` made, and
    returns what that call left running (or None): said before anything the outputs show."""

    def __init__(self, checked: Checked, bits: int, sync: Callable[[], None], rng: random.Random | None = None,
                 watch: Callable[[], Watch] | None = None, after_call: Callable[[Watch], Left | None] | None = None,
                 on_device: bool = False) -> None:
        self.checked = checked
        self.bits = bits
        self.rtol = checked.tolerance if checked.tolerance is not None else precision.tolerance(bits)
        self.sync = sync
        self.rng = rng or random.Random(0)  # the platform's (unpredictable) in a session; seeded in tests
        self.watch = watch
        self.after_call = after_call
        self.on_device = on_device  # the measurement runs on a GPU: a host output written late is a copy in flight
        # The outputs of the timed arguments and of the calls checked last (a few): a result equal
        # to one of them while the inputs changed is stale.
        self.seen: list[list[object]] = []
        self.made: list[list[object]] = []  # the fresh arguments made so far (see fresh_args)

    # --- what one call produced --------------------------------------------------------------

    def named_outputs(self, args: Sequence[object], result: object) -> list[tuple[str, object]]:
        if self.checked.outputs:
            return [(f"args[{i}]", args[i]) for i in self.checked.outputs]
        return [(f"result[{i}]" if isinstance(result, (tuple, list)) else "result", value)
                for i, value in enumerate(_flat(result))]

    def reference_changed(self, when: str, storage: str) -> Finding | None:
        """A finding where the reference (or the checks' record of it) changed since it was handed."""
        if _made_of(self.checked.reference) == self.checked.signed:
            return None
        return Finding(REFERENCE_CHANGED, when, storage)

    def expected(self, inputs: list[object], outputs: list[tuple[str, object]]) -> list[Tensor] | None:
        """The reference's results for ``inputs``, one per output, as tensors; a reference that cannot
        be compared with the kernel's outputs is the test's mistake, refused in one line."""
        if self.checked.reference is None:
            return None
        test = self.checked.test
        with one_thread():  # the reference is the checks' answer, never timed
            returned = users_call(test, "reference=", self.checked.reference, *inputs,
                                  hint=OUTPUTS_HINT if self.checked.outputs else "")
        wanted = [_as_tensor(value) for value in _flat(returned)]
        names = ", ".join(name for name, _ in outputs)
        if len(wanted) != len(outputs):
            raise_user_error(f"{test}: sol.measure's reference= returned {len(wanted)} result(s), the kernel "
                             f"{len(outputs)} ({names}); return one expected result per output, in the same order")
        expected: list[Tensor] = []
        for (name, value), want in zip(outputs, wanted):
            if not is_tensor(want):
                raise_user_error(f"{test}: sol.measure's reference= returned {_described(want)} where the kernel's "
                                 f"{name} is {_described(value)}; return the expected tensor (or NumPy array)")
            if str(want.device) == "meta":
                raise_user_error(f"{test}: sol.measure's reference= returned a tensor on the meta device (no values) "
                                 f"for {name}; compute the reference on a real device (the CPU or the kernel's)")
            expected.append(want)
        return expected

    def current(self) -> list[object]:
        """The outputs for the timed arguments as they are now (a call when the kernel returns them)."""
        if self.checked.outputs:
            return clone([self.checked.args[i] for i in self.checked.outputs])
        result = self.checked.fn(*self.checked.args)
        self.sync()
        return clone([value for _, value in self.named_outputs(self.checked.args, result)])

    # --- the checks --------------------------------------------------------------------------

    def run(self, when: str) -> Finding | Left | None:
        __tracebackhide__ = True
        if not self.seen:  # a later check finds the timed outputs among those it remembers
            self._remember(self.current())
        found = self._new_storage(when)
        return found or self._same_storage(when)

    def _remember(self, outputs: list[object]) -> None:
        self.seen = [*self.seen[-2:], outputs]

    def _stale(self, position: int, value: object) -> bool:
        return any(position < len(seen) and _identical(value, seen[position]) for seen in self.seen)

    def _same_storage(self, when: str) -> Finding | Left | None:
        """The timed tensors themselves, with new values written where they live (the whole storage of
        each floating input, so that an expanded or overlapping view and a tensor inside a list get them
        too); every tensor of the call is given back its values after."""
        __tracebackhide__ = True
        import torch
        args = list(self.checked.args)
        storages = storages_of(self.checked.changing(args))
        outputs = self.checked.written()
        saved = [flat.clone() for flat in storages] + [out.detach().clone() for out in outputs]
        try:
            with torch.no_grad():
                for flat in storages:
                    flat.copy_(rolled(flat, self.rng))
            changed = any(varies(flat) for flat in storages)
            return self._call_and_judge(args, when, "the same tensors, new values", changed=changed)
        finally:
            with torch.no_grad():
                for target, kept in zip([*storages, *outputs], saved):
                    target.copy_(kept)

    def fresh_args(self) -> list[object]:
        import torch
        if self.checked.factory is not None:
            args = self.checked.fresh()
        else:
            args = [map_tensors(v, functools.partial(_new_values, rng=self.rng, change=i not in self.checked.kept))
                    for i, v in enumerate(self.checked.args)]
        with torch.no_grad():
            for i in self.checked.outputs:
                if i < len(args) and is_tensor(buffer := args[i]):
                    poison(buffer)
        # Kept until the measurement's checks are over (``release``): a later fresh set never gets the
        # address of an earlier one, whose result a cache keyed by address may hold.
        self.made.append(args)
        return args

    def release(self) -> None:
        self.made.clear()

    def _new_storage(self, when: str) -> Finding | Left | None:
        __tracebackhide__ = True
        args = self.fresh_args()
        changed = any(varies(t) and t.numel() for t in self.checked.changing(args))
        return self._call_and_judge(args, when, "new storage, new values", changed=changed or self.checked.factory is not None)

    def _call_and_judge(self, args: list[object], when: str, storage: str, changed: bool = True
                        ) -> Finding | Left | None:
        __tracebackhide__ = True
        kept = clone(list(args)) if self.checked.reference is not None else list(args)
        inputs = self.checked.inputs(args)
        watch = self.watch() if self.watch is not None else None
        with watch if watch is not None else contextlib.nullcontext():
            try:
                result = self.checked.fn(*args)
            except Exception as exc:  # noqa: BLE001 - the kernel's own error, on the values the checks wrote
                users_error(self.checked.test, f"kernel, on {storage} ({when}),", exc, KEEP_HINT)
        outputs = self.named_outputs(args, result)
        # Read host outputs before waiting for the device: a copy to the host left in flight shows
        # as poison here and as the right value after the wait.
        early = [(name, value, int(p.sum())) for name, value in outputs
                 if is_tensor(value) and str(value.device) == "cpu" and (p := _poisoned(value)) is not None]
        self.sync()
        # As the call left them, before the guard's pause and the reference: work it left running (on
        # a thread of its own, started before the measurement) may finish them meanwhile.
        at_return = clone([value for _, value in outputs])
        left = self.after_call(watch) if self.after_call is not None and watch is not None else None
        if left is not None:
            return left
        if changed_reference := self.reference_changed(when, storage):
            return changed_reference
        finding = self._judge(outputs, self.expected(self.checked.inputs(kept), outputs), inputs, when, storage, changed)
        if finding is None:
            for name, value, count in early:
                still = _poisoned(value)  # not None: the same tensor was poisoned before the wait
                if count and still is not None and not int(still.sum()):
                    cause = UNWAITED_COPY if self.on_device else WRITTEN_LATER
                    return Finding(cause, when, storage, output=name, count=count, total=value.numel())
            for (written, result), then in zip(outputs, at_return):
                if changed_count := _changed_since(then, result):
                    return Finding(WRITTEN_LATER, when, storage, output=written, count=changed_count, total=_numel(result))
        self._remember(clone([value for _, value in outputs]))
        return finding

    def _judge(self, outputs: list[tuple[str, object]], expected: list[Tensor] | None, inputs: list[object],
               when: str, storage: str, changed: bool) -> Finding | None:
        tensors: list[tuple[str, Tensor]] = []
        for name, value in outputs:
            if value is None and not self.checked.outputs:
                return Finding(NO_RESULT, when, storage, output=name)
            if not is_tensor(value) or lazy(value):
                return Finding(LAZY, when, storage, output=name, type_name=lazy(value) if is_tensor(value) else
                               f"{type(value).__module__}.{type(value).__qualname__}")
            tensors.append((name, value))
        # A result in one of the inputs (a kernel that works in place and returns it) is honest where it
        # holds the reference's result on that input's values before the call; named where it does not.
        aliased = {} if self.checked.outputs else {
            name: found[0] for name, value in tensors
            if (found := [i for i, a in enumerate(inputs) if any(shares_storage(value, t) for t in tensors_in(a))])}
        previous = self.seen[-1] if self.seen else []
        for position, (name, value) in enumerate(tensors):
            if expected is None:
                poisoned = _poisoned(value)
                before = previous[position] if position < len(previous) else None
                left = int(poisoned.sum()) if poisoned is not None else 0
                if before is not None and is_tensor(before) and poisoned is not None:
                    was = _poisoned(before)
                    left = int((poisoned & ~was).sum()) if was is not None and was.shape == poisoned.shape else left
                if left:
                    return Finding(UNWRITTEN, when, storage, output=name, count=left, total=value.numel())
                # Without new float values (module doc) the same result may be right.
                if changed and value.numel() > 1 and self._stale(position, value):
                    return Finding(STALE, when, storage, output=name, total=value.numel())
                continue
            want = expected[position]
            if tuple(value.shape) != tuple(want.shape):
                return Finding(SHAPE, when, storage, output=name, total=value.numel(), shapes=(_shape(value), _shape(want)))
            compared = compare(value, want, self.rtol)
            if compared.unwritten:
                return Finding(UNWRITTEN, when, storage, output=name, count=compared.unwritten, total=compared.total)
            if not compared.mismatched:
                continue
            if name in aliased:
                return Finding(ALIASED, when, storage, output=name, count=aliased[name], error=compared.error,
                               allowed=self.rtol, bits=self.bits)
            if self._stale(position, value):
                return Finding(STALE, when, storage, output=name, count=compared.mismatched, total=compared.total)
            lower = self.checked.tolerance is None and self.bits > 11 and _half_values(value) and not _half_values(want)
            return Finding(LOWER_PRECISION if lower else WRONG, when, storage, output=name, count=compared.mismatched,
                           total=compared.total, error=compared.error, allowed=self.rtol, bits=self.bits)
        return None


def _as_tensor(value: object) -> object:
    """A reference's result as a tensor: a NumPy array (or anything with ``__array__``) is compared like one."""
    if is_tensor(value) or value is None or isinstance(value, (int, float, complex, bool)):
        return value
    if hasattr(value, "__array__"):
        import numpy
        import torch

        return torch.from_numpy(numpy.ascontiguousarray(value))
    return value


def checked_of(fn: Callable[..., object], args: Sequence[object] | Callable[[], Sequence[object]],
               outputs: int | Sequence[int] | None, reference: Callable[..., object] | None, tolerance: float | None,
               test: str, keep: int | Sequence[int] | None = None) -> Checked:
    """What ``sol.measure(fn, args=..., outputs=..., reference=..., tolerance=..., keep=...)`` hands,
    checked: ``args`` a tuple or list of the call's arguments, or a zero-argument factory that makes a
    new one each time (the first is timed); ``outputs`` the positions of the buffers the kernel writes;
    ``keep`` those of the inputs whose values must stay as they are."""
    from pytest_solgate.support.errors import MeasureError

    example = "e.g. sol.measure(add, args=(x, y, out), outputs=(2,), reference=torch.add)"
    if not callable(fn) or isinstance(fn, (list, tuple)):
        raise MeasureError(f"{test}: sol.measure(fn, args=...) needs the kernel itself as fn, called as fn(*args) ({example})")
    factory = None
    if callable(args):
        factory = args
        args = Checked(fn, (), factory, (), None, None, test).fresh()
    if not isinstance(args, (tuple, list)):
        raise MeasureError(f"{test}: sol.measure's args= must be a tuple of the kernel's arguments or a function that "
                           f"returns one, got {type(args).__name__} ({example})")
    positions = _positions(test, "outputs", outputs, args, "buffers the kernel writes",
                           "e.g. outputs=2; leave it out when the kernel returns its result")
    kept = _positions(test, "keep", keep, args, "inputs whose values must stay as they are",
                      "e.g. keep=1 for sorted boundaries")
    if reference is not None and not callable(reference):
        raise MeasureError(f"{test}: sol.measure's reference= must be a function of the inputs (the args that are not "
                           f"outputs) returning the expected result, got {type(reference).__name__} ({example})")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and 0 < tolerance < 1):
        raise MeasureError(f"{test}: sol.measure's tolerance= is a relative error in (0, 1), e.g. 1e-3; got {tolerance!r}")
    return Checked(fn, tuple(args), factory, positions, reference, float(tolerance) if tolerance is not None else None,
                   test, kept, _made_of(reference))


def _positions(test: str, option: str, value: int | Sequence[int] | None, args: Sequence[object], meaning: str,
               hint: str) -> tuple[int, ...]:
    """``outputs=`` or ``keep=`` (``option``): positions of tensors in ``args``, each counted from the start."""
    from pytest_solgate.support.errors import MeasureError

    given = (value,) if isinstance(value, int) else value or ()
    if isinstance(given, (tuple, list)) and all(isinstance(p, int) and not isinstance(p, bool) and
                                                -len(args) <= p < len(args) and is_tensor(args[p]) for p in given):
        return tuple(p % len(args) for p in given)
    raise MeasureError(f"{test}: sol.measure's {option}= names positions in args= (0 to {len(args) - 1}) of the "
                       f"{meaning}, not {value!r} ({hint})")
