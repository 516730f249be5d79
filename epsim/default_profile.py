"""Which profile prices a cluster when the scenario or command names none: one rule, stated
here and in docs/model.md (section 6), and named in every output (`provenance.profile`).

  H200        the shipped `h200x2` (our own records: two H200 over NVLink, single-H200
              kernels), with the parts it has no measurement of -- quantised GEMMs and experts
              (`*/experts_<format>`, `any/gemm_<format>`), MLA (`any/mla_*`), DeepEP's
              dispatch and combine (DeepEP never ran on our machines), SGLang's all-reduce by
              algorithm (`any/allreduce/graph/*`: our records time only the `none` backend's
              eager NCCL, `none/allreduce`, which stays) -- filled from
              `aic_h200` (aiconfigurator-core's h200_sxm tables); each filled component names
              the profile it came from (`Component.profile`). DeepEP from AIC beats the
              datasheet values it replaces on all four H200 stages (5.7-11.6 % against
              17.2-25.1 % MAPE on AIC's DeepEP tables, benchmarks/results/aic_deepep_sources.md)
  H100, B200, B300, GB200, GB300
              the shipped `aic_<gpu>` (aiconfigurator-core's tables of that system)
  any other   datasheet values (an empty profile of that GPU)

A deployment whose SGLang version is known (a silicon row's) is priced by its GPU's default with
the version part of its AIC system laid over it (`versioned_profile`): the components fitted on
an op table AIC collected at an older SGLang version than the profile's (`epsim.calibrate.
aic_versions`: SGLang's custom all-reduce), each tagged with the part it came from. The part is
chosen by `choose_part`'s rule.

A profile given explicitly (`--profile`, `scenario.profile`) is used as it is.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from epsim.errors import ProfileError
from epsim.profile import (DEFAULT_PROFILE, Profile, default_profile_path, load_profile,
                           shipped_profiles)

MEASURED = "h200x2"                        # our own records' profile (DEFAULT_PROFILE)
MEASURED_GPU = "H200"
# kinds the measured default fills from its GPU's AIC profile: the ones our records never cover
# (any backend's), the backends our machines never ran (their communication kinds) and SGLang's
# all-reduce (`any/allreduce`)
FILLED_KINDS = ("experts_", "gemm_", "mla_")
FILLED_BACKENDS = {"deepep": ("dispatch", "combine"), "any": ("allreduce",)}


def aic_profile_name(gpu: str) -> str:
    """The shipped AIC profile of a zoo GPU (`aic_b200`), "" where none ships."""
    name = f"aic_{gpu.lower()}"
    return name if name in shipped_profiles() else ""


def filled(key: str) -> bool:
    """Whether the measured default takes component `key` from its GPU's AIC profile."""
    backend, kind = key.split("/")[:2]
    return kind.startswith(FILLED_KINDS) or kind in FILLED_BACKENDS.get(backend, ())


@lru_cache(maxsize=16)
def _default(gpu: str) -> Profile:
    if gpu == MEASURED_GPU and MEASURED in DEFAULT_PROFILE:
        base = load_profile(shared=True)
        aic = aic_profile_name(gpu)
        if not aic:
            return base
        extra = load_profile(aic, shared=True)
        taken = {key: comp.model_copy(update={"profile": aic})
                 for key, comp in extra.components.items()
                 if filled(key) and key not in base.components}
        if not taken:
            return base
        return base.model_copy(update={"name": f"{base.name or MEASURED}+{aic}",
                                       "components": {**base.components, **taken}})
    aic = aic_profile_name(gpu)
    if aic:
        return load_profile(aic, shared=True)
    return Profile(name=f"datasheet-{gpu}", hardware=gpu)


def default_profile(gpu: str) -> Profile:
    """The profile that prices a cluster of `gpu` when none is named (module docstring); shared
    (read, never changed: `load_profile(shared=True)`'s rule)."""
    return _default(gpu)


def profile_label(profile: Profile) -> str:
    """How outputs name a profile: its name, and its file where it has one."""
    name = profile.name or "unnamed"
    return f"{name} ({profile.path})" if profile.path and profile.path != "profile" else name


PARTS_FOLDER = "versions"                  # epsim/data/profiles/versions/ (`aic_versions`)
_VERSION = re.compile(r"^(\d+(?:\.\d+)*)(?:\.post(\d+))?")


def version_key(text: str) -> tuple[int, ...] | None:
    """A framework version as a comparable tuple: its release numbers, then its post number
    (`0.5.8.post1` -> (0, 5, 8, 1)); a pre-release counts as its release (`0.5.1-rc0.pre1`);
    None when it does not start with a number (not stated)."""
    found = _VERSION.match(text.strip())
    if not found:
        return None
    release = [int(x) for x in found.group(1).split(".")] + [0] * 3
    return (*release[:3], int(found.group(2) or 0))


def version_parts(gpu: str, framework: str = "sglang") -> dict[str, Path]:
    """The shipped version parts of `gpu`'s AIC profile by framework version (oldest first)."""
    folder = default_profile_path().parent / PARTS_FOLDER
    prefix = f"aic_{gpu.lower()}_{framework}_"
    found = {p.stem[len(prefix):]: p for p in folder.glob(f"{prefix}*.json")}
    return dict(sorted(((v, p) for v, p in found.items() if version_key(v)),
                       key=lambda item: version_key(item[0])))


def aic_profile_version(gpu: str) -> str:
    """The framework version `gpu`'s shipped AIC profile is fitted at (its provenance's
    `aic:SYSTEM/FRAMEWORK/VERSION`; "" where none ships)."""
    aic = aic_profile_name(gpu)
    for item in (load_profile(aic, shared=True).provenance.model_extra.get("aic") or []) if aic else []:
        return str(item.get("source", "")).rsplit("/", 1)[-1]
    return ""


def choose_part(parts: list[str], row_version: str, profile_at: str) -> tuple[str, str]:
    """Which part prices a deployment of SGLang `row_version`, and why (one clause).

    The rule: none where the version is not stated or not older than the profile's (`profile_at`,
    its tables are the row's); else the newest part at or below the row's version; a version
    older than every part takes the oldest (the nearest collection: SGLang ran one custom
    all-reduce kernel from before 0.5.5 until its rewrite, sgl-project/sglang#19880, and AIC's
    0.5.9 and 0.5.10 tables of it agree within 3.3 % MAPE at the same points on five of the six
    systems -- GB200's differ by 25-34 % -- benchmarks/results/aic_versions.md, while the
    profile's 0.5.14 one is the rewrite, 17-54 % off them).

    Args:
        parts: part versions, oldest first (`version_parts`).
    Returns:
        (part version, or "" for the profile alone; the reason).
    """
    key, at = version_key(row_version), version_key(profile_at)
    if key is None:
        return "", f"SGLang version not stated: the profile's tables ({profile_at})"
    if not parts or at is None:
        return "", f"SGLang {row_version}: no version part ships for this GPU"
    if key >= at:
        return "", f"SGLang {row_version}: the profile's tables ({profile_at})"
    below = [v for v in parts if version_key(v) <= key]
    if below:
        return below[-1], f"SGLang {row_version}: the newest collection at or below it"
    return parts[0], (f"SGLang {row_version} predates every collection: the nearest, "
                      f"{parts[0]} (the same custom all-reduce kernel)")


def part_for(gpu: str, row_version: str, framework: str = "sglang") -> tuple[str, str]:
    """The version part that prices a deployment of `gpu` running `framework` `row_version`
    (`choose_part`), and the line that states the choice: the profile, the part, why."""
    part, why = choose_part(list(version_parts(gpu, framework)), row_version,
                            aic_profile_version(gpu))
    name = default_profile(gpu).name
    if not part:
        return "", f"profile {name}: {why}"
    return part, (f"profile {name} + its {framework} {part} part (`versioned_profile`: the custom "
                  f"all-reduce of AIC's {part} tables): {why}")


@lru_cache(maxsize=32)
def versioned_profile(gpu: str, part: str, framework: str = "sglang") -> Profile:
    """`default_profile(gpu)` with the components of its version part `part` laid over it, each
    tagged with the part's name (`Component.profile`); shared (read, never changed).

    Raises:
        ProfileError: no such part ships (`version_parts` lists them).
    """
    path = version_parts(gpu, framework).get(part)
    if path is None:
        raise ProfileError(f"version part ({part!r}) of {gpu} must be one of "
                           f"{list(version_parts(gpu, framework))}")
    base, extra = default_profile(gpu), load_profile(path, shared=True)
    taken = {key: comp.model_copy(update={"profile": extra.name})
             for key, comp in extra.components.items()}
    return base.model_copy(update={"name": f"{base.name}+{extra.name}",
                                   "components": {**base.components, **taken}})
