"""InferenceX's own statement of what it ran: the recipe groups of its master config.

Most silicon rows are InferenceX runs (SemiAnalysisAI/InferenceX, Apache-2.0). Its master config
(`.github/configs/nvidia-master.yaml`, later `configs/nvidia-master.yaml`) states, for each
benchmark key (`dsr1-fp8-gb200-dynamo-sglang`), each ISL/OSL and each group of client counts,
the workers and the `tp`, `ep`, `dp-attn` of each side. Where a silicon row does not state its
workers, the group that ran it does. `epsim/data/silicon/inferencex_recipes.json` holds every
version of the disaggregated SGLang DeepSeek-R1 keys (MTP groups marked), each with the commit
and date it took effect, and before them the GB200 launch script's groups. A system's MTP runs
may sit in the key itself (`spec-decoding: mtp` groups) or in a twin key with `-mtp` appended
(`dsr1-fp8-b200-dynamo-sglang-mtp`, from February 2026), which one push may sweep with the base
key (#907 names both): a row's candidates are both keys' groups, less a key the sweep that
measured it did not run. A push that adds entries to `perf-changelog.yaml` starts a sweep of the
keys they name (`config-keys`; the run-sweep workflow), and the timestamped rows are measured 3-4 s
after such a push: the row's sweep is the push a minute or less from it (a day-dated row's: those of its
day), and its key is one that sweep named (`swept`);
`python -m epsim.validate.silicon.inferencex_extract CLONE` regenerates it from a clone of the
repository (docs/silicon.md).

Early GB200 keys (December 2025) state `tp: 1, ep: 1, dp-attn: true` as placeholders and the
size in `PREFILL_NODES` / `DECODE_NODES` (4 GPUs a GB200 tray); their launch scripts (ai-dynamo's
`slurm_jobs/scripts/gb200-fp8.sh`) run `--tp-size TOTAL_GPUS --dp-size TOTAL_GPUS
--enable-dp-lm-head --enable-deepep-moe --ep-num-redundant-experts 32`: DP attention (which
`--enable-dp-lm-head` requires) and DeepEP over every GPU of a worker (SGLang sets ep_size =
tp_size for DeepEP), which `Recipe.wide_ep` records. From December 2025 a group's
`SCRIPT_MODE` setting names the script (`scripts/gb200-fp8/disagg/1k1k-max-tpt.sh`; before the
master config held them, the launch script's tenth argument, `1p_4d`), kept as `Recipe.script`:
the low-latency ones run TP over the worker instead (`Recipe.tp_launch`,
`epsim.validate.silicon.dynamo_scripts`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

from epsim.validate.silicon import dynamo_scripts

RECIPES_PATH = Path(__file__).resolve().parents[2] / "data" / "silicon" / "inferencex_recipes.json"
MASTER_PATHS = (".github/configs/nvidia-master.yaml", "configs/nvidia-master.yaml")
# the keys the in-scope rows can come from: disaggregated SGLang DeepSeek-R1 (MTP groups marked),
# and their MTP twins (every group of a `-mtp` key runs the draft)
KEY_PREFIX, KEY_SUFFIX, MTP_SUFFIX = "dsr1-", "-dynamo-sglang", "-mtp"
GPUS_PER_NODE = {"gb200": 4, "gb300": 4}        # a *_NODES setting counts trays of 4 GPUs
RUNNERS = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300",
           "gb200": "gb200", "gb300": "gb300"}
# a run is held to the config in effect when it started: the latest version committed before
# its `measured` time, with a minute of slack (a push starts the sweep of the keys it changes:
# the H100 rows are measured 4 s after the commit that made their key MTP-only); a row dated
# by day only (`measured=2026-02-09T00:00:00.000Z`) may come from any version of that day
SLACK_S, DAY_SLACK_S = 60.0, 86400.0


@dataclass(frozen=True)
class Recipe:
    """One side of a recipe group, in InferenceX's terms.

    Attributes:
        workers: instances of this side.
        tp, ep: InferenceX's `tp` and `ep` (with `dp-attn`, `tp` is the DP width).
        dp_attn: DP attention.
        nodes: the `*_NODES` setting (trays for all workers of this side), 0 when not set.
        script: the launch script the group's `SCRIPT_MODE` names (`gb200-fp8/disagg/1p_4d`;
            both sides carry it), "" when not set.
        role: "prefill" or "decode" ("" where not said): a script may launch its sides apart.
    """

    workers: int
    tp: int
    ep: int
    dp_attn: bool
    nodes: int = 0
    script: str = ""
    role: str = ""

    @property
    def tp_launch(self) -> bool:
        """A node-sized group whose launch script runs this side TP over the worker, whatever
        its `tp`, `ep`, `dp-attn` say (`dynamo_scripts`: the GB200 FP8 and FP4 low-latency
        scripts, the FP4 8k/1k wide-EP scripts' prefill)."""
        return self.nodes > 0 and dynamo_scripts.tp_side(self.script, self.role)

    @property
    def wide_ep(self) -> bool:
        """The December 2025 GB200 placeholder (`tp: 1` with DP attention and a node count):
        the launch script runs DP attention and DeepEP over every GPU of a worker, unless its
        `SCRIPT_MODE` is a TP script (`tp_launch`)."""
        return self.nodes > 0 and self.tp == 1 and self.dp_attn and not self.tp_launch

    def gpus_per_worker(self, system: str) -> int:
        """GPUs of one instance: the node count's GPUs over the workers, else `tp`."""
        if self.nodes:
            return self.nodes * GPUS_PER_NODE.get(RUNNERS.get(system, system), 8) // self.workers
        return self.tp


@dataclass(frozen=True)
class Group:
    """A recipe group: the client counts it ran and each side's recipe, with its provenance."""

    key: str
    commit: str
    date: str
    image: str
    isl: int
    osl: int
    concurrencies: tuple[int, ...]
    prefill: Recipe
    decode: Recipe
    speculative: str = "none"           # "mtp": the group runs DeepSeek's MTP draft (NEXTN)

    def total_gpus(self, system: str) -> int:
        return sum(r.workers * r.gpus_per_worker(system) for r in (self.prefill, self.decode))


def _settings(side: dict) -> dict[str, str]:
    """A side's `additional-settings` (`NAME=value` lines) by name."""
    found = {}
    for setting in side.get("additional-settings") or []:
        name, _, value = str(setting).partition("=")
        found[name.strip()] = value.strip()
    return found


def _recipe(side: dict, script: str = "", role: str = "") -> Recipe:
    nodes = next((int(v) for k, v in _settings(side).items() if k.endswith("_NODES") and v.isdigit()), 0)
    return Recipe(int(side["num-worker"]), int(side["tp"]), int(side["ep"]),
                  bool(side.get("dp-attn", False)), nodes, script, role)


def _script(key: str, group: dict) -> str:
    """The launch script a group's `SCRIPT_MODE` names (set on its prefill side; the job runs
    one), as its path under ai-dynamo's `slurm_jobs/scripts/` less `.sh`: InferenceX's benchmark
    script passes `GPU_TYPE` = `gb200-fp8` / `gb200-fp4` (runner and precision) beside it, and
    `submit_disagg.sh` runs `scripts/$GPU_TYPE/disagg/$SCRIPT_MODE.sh`; "" if none."""
    modes = [_settings(group[role]).get("SCRIPT_MODE", "") for role in ("prefill", "decode")]
    mode = next((m for m in modes if m), "")
    precision, runner = key.removeprefix(KEY_PREFIX).split("-")[:2]
    return f"{runner}-{precision}/disagg/{mode}" if mode else ""


def _concurrencies(group: dict) -> tuple[int, ...]:
    if "conc-list" in group:
        return tuple(sorted(int(c) for c in group["conc-list"]))
    if "conc-start" in group:                   # a sweep of powers of two
        found, conc = [], int(group["conc-start"])
        while conc <= int(group["conc-end"]):
            found.append(conc)
            conc *= 2
        return tuple(found)
    return ()


def groups_of(key: str, config: dict, commit: str, date: str) -> list[Group]:
    """The recipe groups of one key's config at one commit."""
    seqs = config.get("seq-len-configs") or (config.get("scenarios") or {}).get("fixed-seq-len") or []
    found = []
    for seq in seqs:
        for group in seq.get("search-space") or []:
            if "prefill" not in group:
                continue
            script = _script(key, group)
            found.append(Group(key, commit, date, str(config.get("image", "")), int(seq["isl"]),
                               int(seq["osl"]), _concurrencies(group),
                               _recipe(group["prefill"], script, "prefill"),
                               _recipe(group["decode"], script, "decode"),
                               _speculative(key, group)))
    return found


def in_scope_key(key: str) -> bool:
    """A disaggregated SGLang DeepSeek-R1 key or its MTP twin (`...-dynamo-sglang-mtp`)."""
    return key.startswith(KEY_PREFIX) and key.removesuffix(MTP_SUFFIX).endswith(KEY_SUFFIX)


def _speculative(key: str, group: dict) -> str:
    """The group's draft: as it states it, else `mtp` for every group of an MTP twin key."""
    stated = str(group.get("spec-decoding", "none"))
    return "mtp" if stated == "none" and key.endswith(KEY_SUFFIX + MTP_SUFFIX) else stated


@dataclass(frozen=True)
class Version:
    """A key's groups from the commit they took effect at (`date`, ISO 8601)."""

    key: str
    date: str
    groups: tuple[Group, ...]


@cache
def sweeps(path: Path = RECIPES_PATH) -> tuple[tuple[datetime, frozenset[str]], ...]:
    """Every push that started a sweep of in-scope keys: its time and the keys it named."""
    data = json.loads(path.read_text())
    return tuple(sorted((moment(s["date"]), frozenset(s["keys"])) for s in data.get("sweeps", [])))


def _row_sweeps(measured: str) -> list[tuple[datetime, frozenset[str]]]:
    """The pushes that may have started the sweep measuring a row at `measured`: the one
    committed within `SLACK_S` of it (a sweep starts seconds after its push; a row measured
    later came from a sweep not known here), or every one of a day-dated row's day."""
    limit = moment(measured)
    if limit.time() != datetime.min.time():
        return [s for s in sweeps() if abs((s[0] - limit).total_seconds()) <= SLACK_S][-1:]
    return [s for s in sweeps() if 0 <= (s[0] - limit).total_seconds() < DAY_SLACK_S]


def swept(keys: tuple[str, ...], measured: str | None) -> tuple[str, ...]:
    """The keys among `keys` that the sweep measuring a row at `measured` ran (`_row_sweeps`);
    all of `keys` when no such push names any of them (the row's sweep is not known)."""
    if measured is None:
        return keys
    found = _row_sweeps(measured)
    named = tuple(k for k in keys if any(k in n for _, n in found))
    return named or keys


def _when_run(key: str, measured: str | None) -> list[str | None]:
    """The times to hold a row of `key` to (`in_effect`): a day-dated row's, the pushes of its
    day that named the key (the sweep ran the version of that moment, not every version of
    the day); else the row's own time."""
    if measured is None or moment(measured).time() != datetime.min.time():
        return [measured]
    pushes = [when.isoformat() for when, named in _row_sweeps(measured) if key in named]
    return pushes or [measured]


@cache
def versions(path: Path = RECIPES_PATH) -> dict[str, list[Version]]:
    """Every stored version of every key, oldest first."""
    data = json.loads(path.read_text())
    found: dict[str, list[Version]] = {}
    for item in data["versions"]:
        groups = tuple(Group(item["key"], item["commit"], item["date"], item["image"], g["isl"],
                             g["osl"], tuple(g["concurrencies"]),
                             Recipe(**{**g["prefill"], "role": "prefill"}),
                             Recipe(**{**g["decode"], "role": "decode"}), g["speculative"]) for g in item["groups"])
        found.setdefault(item["key"], []).append(Version(item["key"], item["date"], groups))
    for key in found:
        found[key].sort(key=lambda v: moment(v.date))
    return found


def moment(text: str) -> datetime:
    """An ISO 8601 time (`2026-02-09T15:50:05Z`, `2025-12-05T00:00:00.000Z`), UTC when unzoned."""
    found = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return found if found.tzinfo else found.replace(tzinfo=timezone.utc)


def key_for(precision: str, system: str) -> str:
    return f"{KEY_PREFIX}{precision}-{RUNNERS.get(system, system)}{KEY_SUFFIX}"


def keys_for(precision: str, system: str) -> tuple[str, str]:
    """The row's key and its MTP twin."""
    key = key_for(precision, system)
    return key, key + MTP_SUFFIX


def _same_image(row_image: str, group_image: str) -> bool:
    """The same build of an image, whatever variant tag it was pulled by (`-runtime`, `-amd64`:
    the master config and the results name one image both ways)."""
    def base(image: str) -> str:
        return re.sub(r"(-runtime|-amd64)+$", "", image.split("#")[-1].split("/")[-1])
    return not row_image or not group_image or base(row_image) == base(group_image)


def same_tag(row_image: str, group_image: str) -> bool:
    """The very tag, variant included (`...-cu130-runtime` is not `...-cu130`): where a row's
    groups name its image by different variants, the one naming it as the row does ran it (the
    B200 FP4 key ran `-runtime`, its `-mtp` twin the plain tag; every row one group fits names
    its group's tag exactly, a test checks)."""
    return bool(row_image) and row_image.split("#")[-1] == group_image.split("#")[-1]


def in_effect(found: list[Version], measured: str | None) -> list[Version]:
    """The versions of a key that may have run a row measured at `measured`: the latest one
    committed by then (`SLACK_S` after); for a row dated by day only, also every version
    committed during that day."""
    if measured is None:
        return found[-1:]
    limit = moment(measured)
    if limit.time() != datetime.min.time():
        return [v for v in found if (moment(v.date) - limit).total_seconds() <= SLACK_S][-1:]
    before = [v for v in found if moment(v.date) <= limit][-1:]
    return before + [v for v in found if 0 < (moment(v.date) - limit).total_seconds() < DAY_SLACK_S]


def candidates(precision: str, system: str, isl: int, osl: int, concurrency: int,
               measured: str | None, image: str | None) -> list[Group]:
    """The groups that could have run a disaggregated row: its key's and its MTP twin's (those
    its sweep ran, `swept`) configs in effect when it was measured (`in_effect`; for a row dated
    by day, at its day's pushes of the key, `_when_run`), same ISL/OSL, the row's client count in
    the group's list, and the row's image where it names one (`_same_image`)."""
    found = []
    for key in swept(keys_for(precision, system), measured):
        ran = []
        for when in _when_run(key, measured):
            ran += [v for v in in_effect(versions().get(key, []), when) if v not in ran]
        for version in ran:
            found += [g for g in version.groups
                      if (g.isl, g.osl) == (isl, osl) and concurrency in g.concurrencies
                      and _same_image(image or "", g.image)]
    return found
