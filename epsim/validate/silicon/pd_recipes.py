"""Which srt-slurm recipe (or ai-dynamo launch script) a disaggregated silicon row's InferenceX
group ran, and the `DeploymentSpec` fields it gives each side of the row (`servers`), said in the
row's assumptions. The recipes' flags and where they were read: `epsim.validate.silicon.
pd_recipe_flags`."""

from __future__ import annotations

from epsim.cost import trtllm_fp8_gemm
from epsim.validate.silicon import dynamo_scripts
from epsim.validate.silicon.inferencex import Group
from epsim.validate.silicon.pd_recipe_flags import (FP4_PREFILL_1K, FP4_PREFILL_8K, RECIPES,
                                                    PDRecipe, fp4_decode_1k, fp4_decode_8k)
from epsim.validate.silicon.rows import SiliconRow


def _side(recipe) -> tuple:
    return (recipe.workers, recipe.tp, recipe.ep, recipe.dp_attn)


def for_group(group: Group | None) -> PDRecipe | None:
    """The recipe of an InferenceX P/D group, or None where its flags were not read: an
    srt-slurm recipe of `RECIPES`, or the ai-dynamo launch script a December 2025 GB200 group
    names by `SCRIPT_MODE` (`epsim.validate.silicon.dynamo_scripts`: the TP scripts, the FP4
    wide-EP ones) or, naming none, ran by its date (the FP8 wide-EP scripts of 2025)."""
    if group is None:
        return None
    script = dynamo_scripts.tp_script(group.prefill.script) if group.prefill.tp_launch else None
    if script is not None:
        source, prefill, decode = dynamo_scripts.TP_SCRIPTS[script]
        return PDRecipe(f"scripts/{group.prefill.script}.sh", source, dict(prefill), dict(decode))
    if group.prefill.nodes and group.prefill.script in dynamo_scripts.WIDE_EP_FP4:
        return _fp4_wide_ep_script(group)
    if group.prefill.nodes and (unnamed := dynamo_scripts.unnamed_wide_ep_fp8(group)):
        return PDRecipe(*unnamed)
    for (key, commit, isl, osl, prefill, decode, mtp), recipe in RECIPES.items():
        if (group.key == key and group.commit.startswith(commit) and (group.isl, group.osl) ==
                (isl, osl) and _side(group.prefill) == prefill and _side(group.decode) == decode
                and (group.speculative == "mtp") == mtp):
            return recipe
    return None


def _fp4_wide_ep_script(group: Group) -> PDRecipe | None:
    """A December 2025 GB200 FP4 wide-EP script's flags (`dynamo_scripts.WIDE_EP_FP4`): those of
    the February recipes of the same lengths, the decode's divided by its DP size (the worker's
    GPUs, `--dp-size TOTAL_GPUS`); None where the prefill worker is not the scripts' 4 GPUs (the
    1k/1k prefill's chunk and requests are divided by DP 4)."""
    script = group.prefill.script
    if group.prefill.gpus_per_worker("gb200") != 4:
        return None
    dp = group.decode.gpus_per_worker("gb200")
    prefill, decode = ((FP4_PREFILL_8K, fp4_decode_8k(dp)) if script in dynamo_scripts.TP_PREFILL
                       else (FP4_PREFILL_1K, fp4_decode_1k(dp)))
    return PDRecipe(f"scripts/{script}.sh", dynamo_scripts.WIDE_EP_FP4[script], dict(prefill),
                    dict(decode))


def servers(run: SiliconRow, group: Group | None, assumptions: list[str]) -> dict[str, dict]:
    """A P/D row's (`run`: its sides as run) per-role server flags from its group's recipe, each
    side's `max_running_requests` capped by a rank's share of the clients; said in
    `assumptions` (the flags' line replaces the first, the unstated KV-cache dtype's, where the
    recipe sets it). No recipe known: none (the row keeps SGLang's defaults)."""
    recipe = for_group(group)
    if recipe is None:
        return {}
    out = {}
    for role, side in (("prefill", run.prefill), ("decode", run.decode)):
        clients = -(-run.concurrency // (side.num_workers or 1))
        out[role] = fields(recipe, role, -(-clients // max(side.attention_dp_size, 1)))
    said = "; ".join(f"{role[0].upper()} " + ", ".join(f"{k} {v}" for k, v in flags.items())
                     for role, flags in out.items())
    kind = "srt-slurm" if recipe.config_file.startswith("recipes/") else "ai-dynamo"
    how = ("whose variants' layouts and client counts are those of InferenceX" if recipe.matched
           else "as InferenceX")
    named = "" if recipe.matched else " names it"
    line = (f"server flags of {kind} {recipe.config_file} ({recipe.source}, {how} "
            f"{group.key} at {group.commit[:9]}{named}; the recipe as the index holds it): "
            f"{said}")
    if any("kv_cache_dtype" in flags for flags in out.values()):
        assumptions[0] = line
    else:
        assumptions.append(line)
    assumptions.extend(_kernel_notes(run, out))
    return out


def _kernel_notes(run: SiliconRow, out: dict[str, dict]) -> list[str]:
    """What the sides' flashinfer_trtllm flags change, said once each: the FP8 linears' GEMM (and
    how it is priced), the shared expert unfused where the side runs MoE EP 1 (at EP > 1 SGLang
    runs it apart whatever the flag, so saying it there would claim nothing)."""
    notes = []
    gemm = [role for role, flags in out.items()
            if flags.get("fp8_gemm_backend") == "flashinfer_trtllm"]
    if gemm:
        notes.append(f"{' and '.join(gemm)}: FP8-block linears on FlashInfer's trtllm GEMM (the "
                     "recipe's flashinfer_trtllm FP8 GEMM backend, or its JIT DeepGEMM turned off "
                     "on Blackwell, where SGLang's auto choice is that GEMM; images before SGLang "
                     "0.5.9 assumed to run it too): " + trtllm_fp8_gemm.PROVENANCE)
    if out.get("prefill", {}).get("moe_fp4_allgather"):
        notes.append("prefill: MoE input all-gathered as NVFP4 (values, scales, top-k) and its "
                     "output reduce-scattered, not a BF16 all-gather and all-reduce (SGLang's "
                     "should_use_flashinfer_cutlass_moe_fp4_allgather: flashinfer_cutlass, "
                     "modelopt_fp4, DP attention, EP = DP; present in the SGLang images these "
                     "rows ran is assumed, read at sgl-project/sglang@008b79d): both NCCL's "
                     "ring, one pass, at their bytes")
    q_b = [role for role, flags in out.items() if flags.get("nvfp4_fp8_q_b")]
    if q_b:
        notes.append(f"{' and '.join(q_b)}: q_b_proj on the block-FP8 GEMM fit (the recipe's "
                     "SGLANG_NVFP4_CKPT_FP8_GEMM_IN_ATTN=1 quantises the NVFP4 checkpoint's BF16 "
                     "q_b_proj alone at load, NVFP4_CKPT_FP8_ATTN_QUANT_MODULES; read at "
                     "sgl-project/sglang@008b79d, assumed in the rows' images)")
    unfused = [role for role, flags in out.items() if flags.get("disable_shared_experts_fusion")
               and getattr(run, role).moe_ep_size == 1]
    if unfused:
        notes.append(f"{' and '.join(unfused)}: shared expert unfused at MoE EP 1 "
                     "(disable_shared_experts_fusion: the recipe's --moe-runner-backend "
                     "flashinfer_trtllm sets it, or the recipe states it)")
    return notes


def fields(recipe: PDRecipe, role: str, clients_per_rank: int) -> dict:
    """`role`'s `DeploymentSpec` fields; the recipe's `max_running_requests` caps the rank's
    share of the clients (a rank never holds more requests than it is sent)."""
    out = dict(recipe.prefill if role == "prefill" else recipe.decode)
    if "max_running_requests" in out:
        out["max_running_requests"] = max(min(out["max_running_requests"], clients_per_rank), 1)
    return out
