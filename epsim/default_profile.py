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

A profile given explicitly (`--profile`, `scenario.profile`) is used as it is.
"""

from __future__ import annotations

from functools import lru_cache

from epsim.profile import DEFAULT_PROFILE, Profile, load_profile, shipped_profiles

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
