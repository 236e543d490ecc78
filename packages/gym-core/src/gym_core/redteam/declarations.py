"""What an environment declares to ``gym redteam`` through the ``gym_redteam_probes`` hook: a leaf module.

An environment's plugin calls ``register(environment=..., probes=..., judge_verdict=..., reference=...)``
once per server type it wants checked beyond gym's own probes (:data:`gym_core.redteam.PROBES`, which
run on every environment whatever it declares).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gym_core.errors import PluginError
from gym_core.redteam.probes import FAMILIES, PROBES, Probe

__all__ = ["DEFAULT_RULING", "REFERENCE_OPTIONS", "RedteamDeclaration", "RedteamRegistry", "RegisterRedteam"]

#: What the quoting judge says after quoting, unless an environment declares its own ruling: the
#: "no" of every label convention gym's judged environments read (the last label of its kind wins
#: where the judge's reply is read safely).
DEFAULT_RULING = "Ruling: the candidate does not answer the question. [[A!=B]] [[UNSAFE]] [[score: 0]] [[NO]]"
#: Option values that are documented reference behaviour (reproducing another framework's recorded
#: rewards, gameable by design): a run whose environment has one is reported, and not counted.
REFERENCE_OPTIONS: Mapping[str, Any] = {
    "verdict_mode": "reference",
    "several_answers": "reference",
    "keyword_stuffing": "reference",
}


@dataclass(frozen=True)
class RedteamDeclaration:
    """One environment's own probes and judge ruling.

    ``environment``: the resources server type (its ``plugin:`` name); ``probes``: extra
    :class:`~gym_core.redteam.Probe`\\ s, run after gym's own; ``judge_verdict``: the reply's ruling the
    quoting judge appends after quoting the candidate (default :data:`DEFAULT_RULING`); ``reference``:
    option values of the environment that are documented reference behaviour, added to
    :data:`REFERENCE_OPTIONS`."""

    environment: str
    probes: tuple[Probe, ...] = ()
    judge_verdict: str | None = None
    reference: Mapping[str, Any] = field(default_factory=dict)
    provider: str = ""


class RegisterRedteam(Protocol):
    def __call__(
        self,
        *,
        environment: str,
        probes: Sequence[Probe] = (),
        judge_verdict: str | None = None,
        reference: Mapping[str, Any] | None = None,
    ) -> None: ...


class RedteamRegistry(Mapping[str, RedteamDeclaration]):
    """The declarations of every plugin, by environment; :meth:`register` is the hook's callback."""

    def __init__(self) -> None:
        self._declarations: dict[str, RedteamDeclaration] = {}
        self.provider = ""  # the plugin whose hook is running (set by the plugin manager)

    def register(
        self,
        *,
        environment: str,
        probes: Sequence[Probe] = (),
        judge_verdict: str | None = None,
        reference: Mapping[str, Any] | None = None,
    ) -> None:
        where = f"gym plugin {self.provider!r}" if self.provider else "gym_redteam_probes"
        if not isinstance(environment, str) or not environment:
            raise PluginError(f"{where}: environment must be a server type's name, not {environment!r}")
        if environment in self._declarations:
            first = self._declarations[environment].provider
            raise PluginError(f"{where}: redteam probes for {environment!r} were already declared by {first!r}")
        probes = tuple(probes)
        for probe in probes:
            if not isinstance(probe, Probe):
                raise PluginError(f"{where}: {environment}: probes must be gym_core.redteam.Probe, not {probe!r}")
            if probe.family not in FAMILIES:
                raise PluginError(
                    f"{where}: {environment}: probe {probe.name!r} has family {probe.family!r}; "
                    f"families: {', '.join(FAMILIES)}"
                )
        names = [p.name for p in (*PROBES, *probes)]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise PluginError(f"{where}: {environment}: probe names used twice: {', '.join(twice)}")
        self._declarations[environment] = RedteamDeclaration(
            environment, probes, judge_verdict, dict(reference or {}), self.provider
        )

    def __getitem__(self, environment: str) -> RedteamDeclaration:
        return self._declarations[environment]

    def __iter__(self) -> Iterator[str]:
        return iter(self._declarations)

    def __len__(self) -> int:
        return len(self._declarations)
