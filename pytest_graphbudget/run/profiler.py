"""Profiling through the cache, for the plugin and ``graph-budget check`` alike.

A model is profiled once per content: the cache keys a module by what it computes (its code,
weights' shapes, inputs and hardware) and a zoo model by its name and options, so that a warm
run does not even build it. A model that cannot be fingerprinted is profiled every run rather
than ever reused stale, and says so at ``-v``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphbudget.errors import GraphBudgetError

if TYPE_CHECKING:
    from pytest_graphbudget.engine.profile import Profile
    from pytest_graphbudget.modes.request import Request, Variant
    from pytest_graphbudget.run.cache import ProfileCache

NODES = "node_info"
"""The key of a cache entry's graph nodes (``Profile.node_info``), kept when an HTML report is
asked: the report draws the partitioned graph of a cached profile from them."""

OPTIONS = ("input_shape", "seq_len", "batch", "meta", "trust_pickle")
"""Keys of a budget table that say how to build its model."""


@dataclass
class Profiler:
    """The run's cache (None: no cache), its counts and notes, and the user's hardware."""

    cache: ProfileCache | None = None
    hardware_profiles: dict[str, Any] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)  # why a model was not cached, shown at -v
    nodes: bool = False  # an HTML report draws the graphs: entries keep their nodes (NODES)
    tier: str | None = None  # the tier after fx for every eval forward (--graph-budget-breaks)

    @classmethod
    def open(cls, directory: Path | None, hardware_profiles: dict[str, Any], clear: bool = False):
        """A profiler over the cache in ``directory`` (None: no cache), emptied first if asked."""
        from pytest_graphbudget.run.cache import ProfileCache

        cache = ProfileCache(directory) if directory is not None else None
        if cache is not None and clear:
            cache.clear()
        return cls(cache, hardware_profiles)

    def target(self, hardware: str) -> Any:
        """The hardware profile of that name: built-in or from ``[tool.graph_budget]``."""
        from pytest_graphbudget import hardware as hw

        return hw.get(hardware, self.hardware_profiles)

    def cached(
        self,
        key: Callable[[], Any],
        compute: Callable[[], Profile],
        name: str | None,
        values: Callable[[], Any] | None = None,
    ):
        """The profile stored under ``key()`` if there is a good one, else ``compute()``'s.

        A profile of the path one real forward took, when that forward read values
        (``TraceInfo.data_dependent``: graph breaks, or a tape that called ``.item()``, branched
        on a value, ``nonzero``...), depends on the values of inputs and weights, not only on
        the shapes in the key: its entry also holds ``values()``, and is used only while they
        are unchanged.
        """
        from pytest_graphbudget.run.cache import Unfingerprintable

        stored = None
        if self.cache is not None:
            try:
                stored = key()
            except Unfingerprintable as exc:  # profiled every time rather than ever stale
                self.notes.append(f"{name or 'a model'}: not cached, profiled every run: {exc}")
                self.counts["not cached"] += 1
        data = self.cache.get(stored) if stored else None
        if data is not None and "values" in data and (values is None or data["values"] != values()):
            data = None
        if data is not None and self.nodes and NODES not in data:
            data = None  # made without its nodes, which the graph drawing needs: made again
        if data is not None:
            try:
                prof = from_entry(data, self.hardware_profiles)
            except Exception:  # a corrupt or outdated entry is rebuilt
                prof = None
            if prof is not None:
                prof.model = name or prof.model
                self.counts["reused"] += 1
                return prof
        prof = compute()
        if stored:
            data = entry_of(prof, self.nodes)
            if prof.trace.data_dependent:
                if values is None:
                    return prof  # no way to tell its values apart: never reused
                data["values"] = values()
            try:
                self.cache.put(stored, data)
            except OSError as exc:  # not our bug, nor the model's: its profile is good
                self.counts["not stored"] += 1
                if self.counts["not stored"] == 1:
                    why = f"{type(exc).__name__}: {exc.strerror or exc}"
                    self.notes.append(f"the profile cache cannot be written ({why}): not stored")
                return prof
            self.counts["profiled and stored"] += 1
        return prof

    def request(
        self,
        model: Any,
        inputs: Any,
        kwargs: dict | None,
        name: str | None,
        hardware: str,
        variant: Variant | None = None,
        runs: int | None = None,
        device: str | None = None,
        execution: str = "eager",
        options: Mapping[str, Any] | None = None,
    ) -> Request:
        """The request of a module, a ModelCase or a zoo name (with the zoo's ``options``)
        that a test profiles: its budget's ``variant`` (mode, optimizer, dtype) and ``runs``
        to time, on the named hardware, run as ``execution`` says."""
        from pytest_graphbudget.case import ModelCase
        from pytest_graphbudget.modes import dispatch

        if isinstance(model, str):  # the zoo's example inputs unless the test gives some
            given: tuple = (model, inputs, kwargs)
        else:
            given = (
                model if isinstance(model, ModelCase) else ModelCase(model, inputs, kwargs, name),
            )
        how = variant.options() if variant else {}
        target = self.target(hardware)
        return dispatch.request(
            *given,
            hardware=target,
            name=name,
            measure=runs or False,
            device=device,
            execution=execution,
            **dict(options or {}),
            **self._tier(how),
            **how,
        )

    def _tier(self, how: dict[str, Any]) -> dict[str, Any]:
        """``tier`` for an eval forward's request; a training step captures its own way."""
        return {"tier": self.tier} if self.tier and "mode" not in how else {}

    def table_request(
        self,
        table: Mapping[str, Any],
        name: str,
        hardware: str,
        variant: Variant | None = None,
        runs: int | None = None,
        device: str | None = None,
        execution: str = "eager",
        root: Path | None = None,
    ) -> Request:
        """The request of a budget table: its ``factory``'s case or its zoo ``model`` (default:
        its name) with the table's options, or its decode step (``decode = true``), run as
        ``execution`` says. A ``model`` path is relative to the project's ``root`` (the
        directory a ``factory`` imports from), wherever the run started; ``None``: the
        current directory."""
        from pytest_graphbudget.gate.factories import table_factory
        from pytest_graphbudget.modes import decode, dispatch

        how = variant.options() if variant else {}
        target = self.target(hardware)
        if decode.wanted(table, name):  # decode = true: one generated token's profile
            step = _step_request(table, name, target, how, runs, root)
            return replace(step, execution=execution)
        options = {k: table[k] for k in OPTIONS if k in table}
        model: Any = model_name(table, name, root)
        if "factory" in table:
            model, options = table_factory(str(table["factory"]), name, options), {}
        return dispatch.request(
            model,
            hardware=target,
            name=name,
            measure=runs or False,
            device=device,
            execution=execution,
            **options,
            **self._tier(how),
            **how,
        )

    def profile(self, request: Request) -> Profile:
        """Profile ``request`` through the cache: a ModelCase keyed by its module, inputs,
        hardware and variant; with ``runs`` to time, uncached (the timing is this machine's,
        now; the model runs anyway)."""
        from pytest_graphbudget.modes import dispatch
        from pytest_graphbudget.run import cache as cache_keys

        if isinstance(request.model, str):
            return self._profile_name(request)
        if request.decode:  # a module the project builds: profiled every run
            return dispatch.profile(request)
        case, how = request.model, _keyed(request)
        if request.runs:
            self.counts["timed, not cached"] += 1
            return dispatch.profile(request)
        inputs = case.inputs_for(request.variant.mode)  # a detector trains on its targets too
        return self.cached(
            lambda: cache_keys.module_key(
                case.model, inputs, case.kwargs, repr(request.hardware), how
            ),
            lambda: dispatch.profile(request),
            request.name or case.name,
            lambda: cache_keys.values_digest(case.model, inputs, case.kwargs),
        )

    def _profile_name(self, request: Request) -> Profile:
        """A zoo name is cached by its name and options, so that a warm run does not even
        build it (unless its request asks to time it)."""
        from pytest_graphbudget.modes import dispatch
        from pytest_graphbudget.run import cache as cache_keys

        key = None
        if self.cache is not None:
            options = dict(request.options)
            options = {"decode": True, **options} if request.decode else options
            how = _keyed(request)
            key = cache_keys.name_key(request.model, options, repr(request.hardware), how)
        if request.decode:
            if key is None:
                return dispatch.profile(request)
            return self.cached(lambda: key, lambda: dispatch.profile(request), request.name, _zoo)
        given = request.inputs is not None or request.kwargs is not None  # not the zoo's
        if key is None or request.runs or given:  # a name that says too little, or a model to time:
            return self.profile(_resolved(request))  # keyed by what it builds
        return self.cached(
            lambda: key, lambda: dispatch.profile(_resolved(request)), request.name, _zoo
        )

    def summary(self) -> list[str]:
        """``graph budget cache: ...`` and the notes, for ``-v``; empty when nothing was cached."""
        if not self.counts:
            return []
        counts = ", ".join(f"{n} {what}" for what, n in sorted(self.counts.items()))
        return [f"graph budget cache: {counts}", *(f"  {note}" for note in self.notes)]


def _keyed(request: Request) -> dict[str, Any]:
    """What a cache key holds of how the request is captured and priced: its variant, its
    execution when compiled, and its tier when one is asked for (a graph break ends a fused
    kernel: the figures can differ)."""
    how = request.variant.options()
    if request.execution != "eager":  # another time estimate; eager keys as before it existed
        how = {**how, "execution": request.execution}
    tf32 = _tf32()
    if tf32 != (True, False):  # float32 priced at another peak (latency.tensor_core_dtype)
        how = {**how, "tf32": list(tf32)}
    return {**how, "tier": request.tier} if request.tier else how


def _tf32() -> tuple[bool, bool]:
    """PyTorch's TF32 switches for convolutions and products, which a float32 estimate
    follows; PyTorch's defaults are ``(True, False)``, which they still are where nothing has
    imported torch (a warm run answered by the cache imports none)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return True, False
    return bool(torch.backends.cudnn.allow_tf32), bool(torch.backends.cuda.matmul.allow_tf32)


def entry_of(prof: Profile, nodes: bool) -> dict[str, Any]:
    """The one form a profile takes in the cache: ``Profile.to_dict()``, plus its graph nodes
    (``NODES``) when ``nodes``. ``from_entry`` is its inverse."""
    data = prof.to_dict()
    if nodes:
        data[NODES] = [asdict(node) for node in prof.node_info]
    return data


def from_entry(data: dict[str, Any], hardware_profiles: Any = None) -> Profile:
    """The ``Profile`` a cache entry holds (``entry_of``'s inverse), with the graph nodes it
    kept, if it kept them."""
    from pytest_graphbudget.engine.profile import NodeInfo, profile_from_dict

    prof = profile_from_dict(data, hardware_profiles)
    prof.node_info = [NodeInfo(**node) for node in data.get(NODES, ())]
    return prof


def model_name(table: Mapping[str, Any], name: str, root: Path | None) -> str:
    """The zoo name or path a table's model is resolved by: its ``model`` (default: the
    table's name), a path taken relative to the project's ``root`` (``zoo.at_root``)."""
    model = str(table.get("model", name))
    if root is None or "factory" in table:
        return model
    from pytest_graphbudget.zoo import at_root

    return at_root(model, root)


def _step_request(
    table: Mapping[str, Any],
    name: str,
    target: Any,
    how: dict[str, Any],
    runs: int | None,
    root: Path | None = None,
) -> Request:
    """The request of a ``decode = true`` budget table's decode step. Timed runs, a train
    mode or another dtype (``how``) are refused: the step is eval mode, the model's dtype."""
    from pytest_graphbudget.gate.factories import load_factory
    from pytest_graphbudget.modes import dispatch

    if runs:
        raise GraphBudgetError(f"{name}: latency_measured_max times a forward, not decode")
    if how:
        given = ", ".join(f"{k} = {v!r}" for k, v in how.items())
        raise GraphBudgetError(
            f"{name}: decode = true profiles one generated token in eval mode, in the model's "
            f"own dtype; drop {given}"
        )
    options = {k: table[k] for k in ("context", "batch", "meta") if k in table}
    model: Any = model_name(table, name, root)
    if "factory" in table:  # a module the project builds: profiled every run
        # Only the factory's module is used (a bare one gets a placeholder input it never sees).
        model = load_factory(str(table["factory"]), name, {"input_shape": (1, 1)})
    return dispatch.request(model, hardware=target, name=name, decode=True, **options)


def _resolved(request: Request) -> Request:
    """``request`` with its zoo name built (a model the zoo ignores refused)."""
    from pytest_graphbudget import zoo
    from pytest_graphbudget.gate.ignored import refuse_ignored

    case = zoo.resolve(request.model, **dict(request.options))
    if request.inputs is not None or request.kwargs is not None:  # the test's: the case, and
        inputs = case.inputs if request.inputs is None else request.inputs  # so its cache key,
        kwargs = case.kwargs if request.kwargs is None else request.kwargs  # holds them
        case = replace(case, inputs=inputs, kwargs=kwargs)
    return replace(request, model=refuse_ignored(case, request.name), options=())


def _zoo() -> str:
    """The values of a zoo model: the same every time (seeded weights, fixed inputs)."""
    return "zoo"
