"""What a silicon row ran, where its cells do not say it or say it in another tool's terms.

`rows` reads a row as written; this module gives the deployment the row measured, each change
stated as an assumption the entry carries:

- **tp x ep products.** InferenceX's agg keys state `tp: 4, ep: 4` (4 GPUs: attention TP 4,
  MoE EP 4); some rows write that as `tp_size` 16 with `moe_tp_size` 4 and `moe_ep_size` 4 (the
  product in `tp_size`, InferenceX's `tp` in `moe_tp_size`). A side with `tp_size = moe_tp x
  moe_ep`, both above 1 and no attention DP, is read back as InferenceX's tp and ep
  (`nvidia-master.yaml`, `dsr1-fp4-b200-sglang`: `{tp: 4, ep: 4}`, `{tp: 8, ep: 8}`).
- **Workers and layout from InferenceX.** A disaggregated row without its workers, and a GB200 /
  GB300 row (InferenceX runs SGLang there only disaggregated, through Dynamo, whose rows state
  the deployment's total GPUs as `tp_size`: 20, 48, 72), takes each side from the recipe group
  that ran it (`epsim.validate.silicon.inferencex`). Several groups at the row's client count
  are told apart by the row's own cells; a row none or several groups fit is not predicted.
- **The launch script's layout.** A node-sized GB200 group whose `SCRIPT_MODE` names a TP
  script (`1k1k-low-latency`, `8k1k-low-latency`, and `1p_4d` before them) ran attention TP and
  MoE-TP over the worker, whatever its `tp`, `ep`, `dp-attn` placeholders say
  (`epsim.validate.silicon.dynamo_scripts`); the row's EP cell may copy the placeholder's `ep`.
- **MTP of a row that states its workers.** The groups its cells fit say whether the draft ran;
  where the same layout ran with and without it, the row is not predicted.
- **The image's tag.** Where the groups a row's cells fit name its build by different tags
  (`-runtime` or not), those naming the row's own tag ran it (`inferencex.same_tag`).
- **The recipe of a row that states its workers.** The group whose key, measured time, client
  count and sides as stated (workers, TP, attention DP, MoE TP and EP) and draft are the row's
  gives its server flags (`_stated_group`); groups with different flags: none, said.
- **One configuration, one deployment.** Rows that name one InferenceX `config_id` (its
  database's configuration record: GPUs, workers, TP/EP/DP attention per side and spec_method)
  ran one deployment, at whatever client count, lengths or run: a group fits a row only if the
  same deployment (each side as run, the draft) fits every other row of its config that some
  group fits (`_config_fit`). Where that would leave none (a contradiction) the row's own groups
  stand; the tests count how often that happens on the sample (never).
- **Still several.** A row several deployments fit carries each as an alternative
  (`Resolved.alternatives`); only `--approximate` predicts them (their spread,
  `epsim.validate.silicon.candidates`), never the headline.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from epsim.validate.silicon import dynamo_scripts, inferencex, pd_recipes
from epsim.validate.silicon.rows import Side, SiliconRow

# systems where InferenceX runs SGLang only as Dynamo P/D pairs (no `*-sglang` agg key)
DISAGG_ONLY = ("gb200", "gb300")
# the Dynamo launch scripts of the wide-EP groups (ai-dynamo's `slurm_jobs/scripts/gb200-fp8.sh`)
# run `--ep-num-redundant-experts 32` with a static placement from recorded expert loads
# (`--init-expert-location`, `--ep-dispatch-algorithm static`)
WIDE_EP_REDUNDANT = 32
# why a row's deployment is not known, as the tables count them
NO_GROUP = "deployment not known: no InferenceX recipe group ran the row's client count then"
SEVERAL_GROUPS = "deployment not known: several InferenceX recipe groups fit the row"


@dataclass(frozen=True)
class Resolved:
    """A row as it ran: `row` (its mode and sides as run), what was assumed to get there, the
    wide-EP launch script's redundant experts per role (None: none), whether the group ran
    DeepSeek's MTP draft (`spec-decoding: mtp`), or why it cannot be known."""

    row: SiliconRow
    assumptions: tuple[str, ...] = ()
    redundant_experts: dict | None = None
    error: str | None = None
    speculative: bool = False
    error_class: str | None = None
    from_recipe: bool = False           # its workers and layout are a group's: the row has none
    group: inferencex.Group | None = None   # the InferenceX group that ran it, where one is known
    # SEVERAL_GROUPS: the row as each deployment that fits it would have run it
    alternatives: tuple[Resolved, ...] = ()


def _unproduct(side: Side) -> Side | None:
    """The side read as InferenceX's tp and ep when its tp_size is their product, else None."""
    if side.attention_dp_size != 1 or side.moe_tp_size <= 1 or side.moe_ep_size <= 1:
        return None
    if side.tp_size != side.moe_tp_size * side.moe_ep_size or side.moe_tp_size % side.moe_ep_size:
        return None
    gpus = side.moe_tp_size
    return replace(side, tp_size=gpus, moe_tp_size=gpus // side.moe_ep_size)


def recipe_side(recipe: inferencex.Recipe, system: str) -> Side:
    """One side of a recipe group in AIConfigurator's terms (the row's).

    InferenceX's `tp` is the GPUs of a worker; with `dp-attn` they are all DP attention ranks
    (attention TP 1); `ep` splits them into expert ranks. The wide-EP placeholder runs DP
    attention and EP over every GPU of the worker (`Recipe.wide_ep`); a node-sized group whose
    `SCRIPT_MODE` is a TP script runs attention TP and MoE-TP over them (`Recipe.tp_launch`).
    """
    gpus = recipe.gpus_per_worker(system)
    if recipe.tp_launch:
        return Side(gpus, 1, 1, gpus, 1, None, recipe.workers)
    ep = gpus if recipe.wide_ep else max(recipe.ep, 1)
    moe_tp = max(gpus // ep, 1)
    if recipe.dp_attn:
        return Side(1, 1, gpus, moe_tp, ep, None, recipe.workers)
    return Side(gpus, 1, 1, moe_tp, ep, None, recipe.workers)


def _fits(row: SiliconRow, group: inferencex.Group) -> bool:
    """The row's own cells agree with a group. Each stated side has the group's GPUs per
    worker, or every side the group's total GPUs (Dynamo rows), or one GPU where the group sizes its
    workers by nodes (the placeholder `tp: 1, ep: 1` copied); its workers where stated; and
    the prefill side its EP (the rows write the prefill's EP on both sides: DEP32 decodes
    beside DEP8 prefills read `ep 8`)."""
    total = group.total_gpus(row.system)
    stated = ([("agg", row.agg, None)] if row.mode == "agg" else
              [("prefill", row.prefill, group.prefill), ("decode", row.decode, group.decode)])
    # a Dynamo row writes the total on every side it states (`tp_size` 20 on both): a decode
    # side of 48 GPUs beside a prefill side of 4 is a DEP48 worker, not a 16 + 32 pair's total
    as_total = all(side.num_gpus == total for _, side, _ in stated)
    for role, side, recipe in stated:
        gpus = side.num_gpus
        if as_total:
            continue
        if recipe is None:
            return False
        if recipe.nodes and gpus == 1:
            continue
        if gpus != recipe.gpus_per_worker(row.system):
            return False
        ep = recipe_side(recipe, row.system).moe_ep_size
        # a placeholder's EP as the row copies it: wide EP's `ep: 1`, a TP script's `ep`
        copied = (recipe.wide_ep and side.moe_ep_size == 1
                  or recipe.tp_launch and side.moe_ep_size in (1, recipe.ep))
        if role == "prefill" and side.moe_ep_size != ep and not copied:
            return False
        if side.num_workers is not None and side.num_workers != recipe.workers:
            return False
    return True


def _describe(recipe: inferencex.Recipe, system: str) -> str:
    gpus = recipe.gpus_per_worker(system)
    kind = ("TP" if recipe.tp_launch else "DEP" if recipe.dp_attn else "TEP" if recipe.ep > 1
            else "TP")
    return f"{recipe.workers} x {kind}{gpus}"


def _groups(row: SiliconRow) -> tuple[list[inferencex.Group], list[inferencex.Group], str | None]:
    """The InferenceX groups that ran the row's client count then, those its cells, its image's
    tag and its configuration's other rows fit (`_own_groups`, `_config_fit`), and what the
    tag and the configuration ruled out (None: nothing)."""
    found, fitting = _own_groups(row)
    kept, said = _config_fit(row, fitting)
    tagged = _tag_fit(row, found)
    said = "; ".join(s for s in (tagged, said) if s) or None
    return found, kept, said


def _own_groups(row: SiliconRow) -> tuple[list[inferencex.Group], list[inferencex.Group]]:
    """The InferenceX groups that ran the row's client count then, and those its cells fit:
    of them, those naming the row's image by its very tag where any does (`inferencex.same_tag`)."""
    found = inferencex.candidates(row.precision, row.system, row.isl, row.osl, row.concurrency or 0,
                                  row.measured_at, row.image or None)
    fitting = [g for g in found if _fits(row, g)]
    return found, [g for g in fitting if inferencex.same_tag(row.image, g.image)] or fitting


def _tag_fit(row: SiliconRow, found: list[inferencex.Group]) -> str | None:
    """What the image's tag ruled out among the groups the row's cells fit, said; None: nothing."""
    fitting = [g for g in found if _fits(row, g)]
    tagged = [g for g in fitting if inferencex.same_tag(row.image, g.image)]
    others = sorted({g.image for g in fitting if g not in tagged})
    if not tagged or not others:
        return None
    return (f"the row's image {row.image} is the tag of {len(tagged)} of the {len(fitting)} "
            f"InferenceX groups its cells fit (the others ran {', '.join(others)})")


def deployment(group: inferencex.Group, system: str) -> tuple[Side, Side, str]:
    """What a group deploys, whichever version of the config states it: each side as run
    (workers included) and the draft."""
    return recipe_side(group.prefill, system), recipe_side(group.decode, system), group.speculative


def config_deployments(row: SiliconRow) -> set[tuple[Side, Side, str]] | None:
    """The deployments every other row of the row's `config_id` fits (each such row: the
    deployments of the groups its cells fit at its own client count, lengths and time; a row
    no group fits says nothing); None when no other row says anything."""
    allowed = None
    for peer in row.peers:
        own = _own_groups(_as_stated(peer).row if peer.workers_stated else peer)[1]
        if own:
            found = {deployment(g, peer.system) for g in own}
            allowed = found if allowed is None else allowed & found
    return allowed


def _config_fit(row: SiliconRow, fitting: list[inferencex.Group]
                ) -> tuple[list[inferencex.Group], str | None]:
    """The groups among `fitting` whose deployment every other row of the row's configuration
    fits (module doc), and the assumption saying so; `fitting` itself when that leaves all or
    none of them."""
    if len({deployment(g, row.system) for g in fitting}) < 2:
        return fitting, None
    allowed = config_deployments(row)
    kept = [g for g in fitting if allowed is not None and deployment(g, row.system) in allowed]
    if not kept or len(kept) == len(fitting):
        return fitting, None
    shown = sorted({f"c{p.concurrency} {p.isl}/{p.osl} {_day(p)}" for p in row.peers})
    return kept, (f"config_id {row.config_id} is one deployment: its other rows ({', '.join(shown)}) "
                  f"rule out {len(fitting) - len(kept)} of the {len(fitting)} InferenceX groups "
                  f"that fit this one")


def _day(row: SiliconRow) -> str:
    return row.measured_at[:10] if row.measured_at else "undated"


def _draft(stated: Resolved) -> Resolved:
    """A disaggregated row that states its workers but not whether DeepSeek's MTP draft ran:
    the InferenceX groups its cells (and its configuration's other rows) fit say so where they
    agree; where groups with and without it fit (the same layout run both ways in one sweep),
    the row cannot be known: each draft is an alternative."""
    fitting, config_said = _groups(stated.row)[1:]
    stated = replace(stated, assumptions=stated.assumptions + ((config_said,) if config_said else ()))
    drafts = {g.speculative for g in fitting}
    key = inferencex.key_for(stated.row.precision, stated.row.system)
    if drafts == {"mtp"}:
        stated = replace(stated, speculative=True, assumptions=stated.assumptions + (
            f"MTP: every InferenceX group of {key} that fits the row runs it",))
    if len(drafts) > 1:
        alternatives = tuple(replace(stated, speculative=mtp, assumptions=stated.assumptions + (
            f"{'with' if mtp else 'without'} MTP, as InferenceX groups of {key} that fit the row "
            f"ran it",)) for mtp in (False, True))
        return Resolved(stated.row, stated.assumptions, error=(
            f"InferenceX recipe groups of {key} with and without MTP fit the row at "
            f"{stated.row.concurrency} clients: the row does not say which ran"),
            error_class=SEVERAL_GROUPS, alternatives=alternatives)
    return _stated_group(stated, fitting)


def _layout(side: Side) -> tuple:
    return (side.num_workers, side.tp_size, side.attention_dp_size, side.moe_tp_size,
            side.moe_ep_size)


def _stated_group(stated: Resolved, fitting: list[inferencex.Group]) -> Resolved:
    """A row that states its workers, with the InferenceX group whose recipe it ran: among the
    groups its cells fit (its key, its measured time's versions, its client count, image and
    configuration: `_groups`), those whose sides are the row's as stated (workers, TP, attention
    DP, MoE TP and EP on each side) with its draft. Their recipe's flags (`pd_recipes.for_group`;
    None where not read) are the row's when they all carry the same; where groups with different
    flags fit, none (SGLang's defaults), said. Never the measured TTFT / TPOT: stated cells only."""
    run = stated.row
    same = [g for g in fitting if (g.speculative == "mtp") == stated.speculative
            and _layout(recipe_side(g.prefill, run.system)) == _layout(run.prefill)
            and _layout(recipe_side(g.decode, run.system)) == _layout(run.decode)]
    flags = {_flags(pd_recipes.for_group(g)) for g in same}
    if not same or flags == {None}:
        return stated
    shown = ", ".join(sorted({f"{g.key} at {g.commit[:9]}" for g in same}))
    if len(flags) > 1:
        return replace(stated, assumptions=stated.assumptions + (
            f"server flags not known: InferenceX groups with different recipes ({shown}) have "
            f"the row's stated layout and draft; SGLang's defaults kept",))
    group = same[0]
    return replace(stated, group=group, assumptions=stated.assumptions + (
        f"recipe of InferenceX {shown}: the group of the row's key, measured time and client "
        f"count whose layout (P {_describe(group.prefill, run.system)} / "
        f"D {_describe(group.decode, run.system)}) and draft the row states",))


def _flags(recipe) -> tuple | None:
    """A recipe's flags of both sides, comparable (None: not read)."""
    if recipe is None:
        return None
    return tuple(tuple(sorted(side.items())) for side in (recipe.prefill, recipe.decode))


def _from_recipe(row: SiliconRow, stated: Resolved | None = None) -> Resolved:
    """The row's sides from the recipe group that ran it; `stated` (the row as it states
    itself) where not exactly one group's layout fits a row that states its workers."""
    found, fitting, config_said = _groups(row)
    key = inferencex.key_for(row.precision, row.system)
    layouts = {(g.prefill, g.decode, g.speculative): g for g in fitting}
    if stated is not None and len(layouts) != 1:
        return stated
    if not found:
        return Resolved(row, error=f"no InferenceX recipe group of {key} ran {row.isl}/{row.osl} at "
                                   f"{row.concurrency} clients when the row was measured (the row "
                                   f"does not state its workers)", error_class=NO_GROUP)
    if len(layouts) != 1:
        shown = "; ".join(f"P {_describe(g.prefill, row.system)} / D {_describe(g.decode, row.system)}"
                          + (" MTP" if g.speculative == "mtp" else "") for g in found)
        if not layouts:
            return Resolved(row, error=f"no InferenceX recipe group of {key} at {row.concurrency} "
                                       f"clients ({shown}) fits the row's own cells", error_class=NO_GROUP)
        return Resolved(row, error=f"{len(layouts)} InferenceX recipe groups of {key} fit the row "
                                   f"at {row.concurrency} clients ({shown}): the row does not say "
                                   f"which ran", error_class=SEVERAL_GROUPS,
                        alternatives=tuple(_as_group(row, g, config_said) for g in layouts.values()))
    return _as_group(row, fitting[0], config_said)


def _as_group(row: SiliconRow, group: inferencex.Group, config_said: str | None = None) -> Resolved:
    """The row as `group` ran it: its sides, workers and draft, and the wide-EP launch script's
    redundant experts; `config_said`: what the row's configuration ruled out, said too."""
    prefill, decode = recipe_side(group.prefill, row.system), recipe_side(group.decode, row.system)
    said = [f"workers and layout from InferenceX {group.key} at {group.commit[:9]} "
            f"({group.date[:10]}): P {_describe(group.prefill, row.system)} / "
            f"D {_describe(group.decode, row.system)}" + (", MTP" if group.speculative == "mtp" else "")]
    script = group.prefill.script if group.prefill.nodes else ""
    if dynamo_scripts.known(script):
        said.append(f"{dynamo_scripts.describe(script)}: the group's tp, ep, "
                    f"dp-attn are placeholders its launch script ignores")
    if config_said:
        said.append(config_said)
    if row.mode == "agg":
        said.append(f"the row says agg with tp_size {row.agg.num_gpus}: the P/D pair's total GPUs "
                    f"({row.system} runs SGLang only disaggregated in InferenceX)")
    # where the script's flags were read they state the redundant experts (`pd_recipes`)
    redundant = {role: WIDE_EP_REDUNDANT for role, r in (("prefill", group.prefill),
                                                          ("decode", group.decode))
                 if r.wide_ep and not dynamo_scripts.known(script)}
    return Resolved(replace(row, mode="disagg", agg=None, prefill=prefill, decode=decode),
                    tuple(said), redundant or None, speculative=group.speculative == "mtp",
                    from_recipe=True, group=group)


def resolve(row: SiliconRow) -> Resolved:
    """The deployment a row measured (module doc)."""
    if (row.mode == "disagg" and not row.workers_stated
            or row.mode == "agg" and row.system in DISAGG_ONLY):
        return _from_recipe(row)
    if row.system in DISAGG_ONLY:       # stated, but may copy the wide-EP placeholder's ep: 1
        return replace(_from_recipe(row, stated=_as_stated(row)), from_recipe=False)
    if row.mode == "disagg":            # workers stated, the draft not
        return _draft(_as_stated(row))
    return _as_stated(row)


def _as_stated(row: SiliconRow) -> Resolved:
    """The row as it states itself, tp x ep products read back (module doc)."""
    sides = {"agg": row.agg, "prefill": row.prefill, "decode": row.decode}
    said, fixed = [], {}
    for role, side in sides.items():
        read = _unproduct(side) if side is not None else None
        if read is not None:
            fixed[role] = read
            said.append(f"{role}: tp_size {side.tp_size} = moe_tp_size {side.moe_tp_size} x "
                        f"moe_ep_size {side.moe_ep_size} read as InferenceX's tp {read.tp_size}, "
                        f"ep {read.moe_ep_size} ({read.num_gpus} GPUs)")
    return Resolved(replace(row, **fixed), tuple(said))
