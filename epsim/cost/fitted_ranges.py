"""Which fitted components a deployment's steps read, and where the deployment leaves their
fitted ranges: the token ranges checked as steps are priced, the EP and hidden sizes warned
about when a `CostModel` is built (`CostParams.token_ranges`, `CostParams.extrapolated`)."""

from __future__ import annotations

from epsim.cost.params import Extrapolation, FittedRange, StepKindParams
from epsim.cost.timing import StageTiming
from epsim.profile import Profile


def used_components(eager: StepKindParams, graph: StepKindParams,
                    none_allreduce: bool) -> list[tuple[str, str, str]]:
    """(backend, kind, mode path) of the fitted components the steps read, in the order
    the warnings name them: dispatch, then combine, by kernel mode, eager before graph;
    then the experts and layout work; the `none` backend's all-reduce last
    (`none_allreduce`: a `none` deployment over more than one GPU)."""
    steps = (eager, graph)
    timings = [k.stage(kind, mode).timing for kind in ("dispatch", "combine")
               for mode in eager.dispatch for k in steps]
    timings += [k.experts.timing for k in steps]
    timings += [stage.timing for k in steps for stage in k.layout.values()]
    used = list(dict.fromkeys(_used_component(t) for t in timings if t.key))
    if none_allreduce:
        used.append(("none", "allreduce", ""))
    return used


def token_ranges(profile: Profile, used: list[tuple[str, str, str]]) -> tuple[FittedRange, ...]:
    """The fitted token ranges of the `used` components."""
    out = []
    for backend, kind, mode in used:
        comp = profile.component(backend, kind, mode)
        if comp is not None and comp.source == "fit" and "num_tokens_per_rank" in comp.valid_range:
            out.append(FittedRange(backend, kind, mode, *comp.valid_range["num_tokens_per_rank"]))
    return tuple(out)


def extrapolated(profile: Profile, used: list[tuple[str, str, str]], num_ranks: int,
                 hidden_size: int) -> tuple[Extrapolation, ...]:
    """The EP and hidden sizes outside a `used` component's fitted range, one per quantity."""
    out, seen = [], set()
    for backend, kind, mode in used:
        comp = profile.component(backend, kind, mode)
        if comp is None or comp.source != "fit":
            continue
        for name, value in (("ep_size", num_ranks), ("hidden_size", hidden_size)):
            if name not in seen and comp.outside(**{name: value}):
                out.append(Extrapolation(backend, kind, mode, name, value))
                seen.add(name)                    # one warning per quantity, not per part
    return tuple(out)


def _used_component(timing: StageTiming) -> tuple[str, str, str]:
    """(owner, kind, mode path) a stage's fitted range is read from: the owner of the component
    the timing read (the BF16 experts: `any`, the kernel model) with its own stage's kind and
    path, or for a component of another kind (a quantised format's `experts_<format>`) the
    key's parts."""
    parts = timing.key.split("/")
    if parts[1] == timing.kind:
        return parts[0], timing.kind, timing.mode_path
    return parts[0], parts[1], "/".join(parts[2:])
