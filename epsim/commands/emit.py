"""`epsim plan --emit sglang`: the answer as SGLang launch commands (`epsim.plan.sglang_args`),
one per workload point's answer, or a prefill/decode pair and the router for `--fleet`."""

from __future__ import annotations

from epsim.errors import SpecError
from epsim.plan.points import Point, build_point, load_base
from epsim.plan.sglang_args import EmitError, check_known, launch, router, transfer_backend
from epsim.plan.store import cell
from epsim.spec.scenario import scenario_from_dict


def _base(args):
    overrides = list(args.overrides) + ([f"seed={args.seed}"] if args.seed is not None else [])
    return load_base(args.scenario, overrides)


def precheck(args) -> None:
    """Before the work: every deployment field must have an SGLang entry, and with `--fleet`
    the KV path a transfer backend. Raises EmitError."""
    if not getattr(args, "emit", None):
        return
    base = _base(args)
    check_known(scenario_from_dict(base.data, where=base.where, base_dir=base.base_dir))
    if args.fleet:
        transfer_backend(args.kv_transfer)


def _scenario_of(args, result, index: int):
    """The validated scenario of plan row `index`: the base with the row's swept values (the
    axis values themselves, not their table text)."""
    row = result.rows[index]
    values = {a.key: next(v for v in a.values if cell(v) == row[a.key]) for a in result.axes}
    built = build_point(_base(args), index, values)
    if not isinstance(built, Point):
        raise SpecError(f"--emit sglang: point {index} no longer validates: {built.reason}")
    return built.scenario


def _instance_lines(title: str, scenario, extra: list[str] = ()) -> tuple[list[str], dict]:
    out = launch(scenario)
    out.args += list(extra)
    lines = [f"sglang     {title}:", f"  {out.command()}"] + [f"  # {n}" for n in out.notes]
    return lines, {"command": out.command(), "args": out.args, "env": out.env, "notes": out.notes}


def plan_emit(args, result) -> tuple[list[str], list[dict], str | None]:
    """(lines, JSON entries, error) of every answer's launch command; the error when a chosen
    value has no SGLang setting (the plan's answer still stands)."""
    lines, data = [], []
    try:
        for answer in result.answers:
            if answer.best is None:
                continue
            scenario = _scenario_of(args, result, answer.best)
            title = (f"{result.describe(answer.best)}: one instance of "
                     f"{scenario.deployment.ep_size} GPUs")
            got, entry = _instance_lines(title, scenario)
            lines += got
            data.append({"workload": answer.workload, **entry})
    except EmitError as exc:
        return lines, data, str(exc)
    if not data:
        lines.append("sglang     no answer to launch")
    return lines, data, None


def fleet_emit(args, fleet) -> tuple[list[str], dict, str | None]:
    """The prefill and decode pools' launch commands (each instance of a pool the same) and
    the router between them."""
    if fleet.prefill is None or fleet.decode is None:
        return ["sglang     no fleet to launch"], {}, None
    try:
        backend = ["--disaggregation-transfer-backend", transfer_backend(args.kv_transfer)]
        lines, data = [], {}
        for pool in (fleet.prefill, fleet.decode):
            got, data[pool.role] = _instance_lines(
                f"{pool.role} pool, {pool.instances} instance(s) of {pool.ep_size} GPUs each",
                pool.point.scenario, backend)
            data[pool.role]["instances"] = pool.instances
            lines += got
    except EmitError as exc:
        return [], {}, str(exc)
    route = router(fleet.prefill.instances, fleet.decode.instances)
    lines += ["sglang     router in front of both pools:", "  " + " ".join(route)]
    data["router"] = route
    return lines, data, None
