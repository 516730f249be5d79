"""Which InferenceX agg rows the server saw with ~5x longer prompts than stated (transformers 5's
DeepSeek tokenizer in the unfixed client: `epsim.validate.silicon.client_tokenizer`), and that
the plan sends those prompts."""

from __future__ import annotations

import pytest

from epsim.validate.silicon.client_tokenizer import SERVER_TOKENS_PER_CLIENT_TOKEN, prompt_scale
from epsim.validate.silicon.mapping import plan_row
from epsim.validate.silicon.rows import parse_row

APRIL = "2026-04-17T00:00:00.000Z"      # the B300 DeepSeek-R1 agg sweep's day (SGLang 0.5.10.post1)


def _row(measured: str = APRIL, version: str = "0.5.10.post1", image: str = "v0.5.10.post1-cu130",
         system: str = "b300_sxm", model: str = "deepseek-ai/DeepSeek-V3", mode: str = "agg",
         isl: int = 8192):
    return parse_row({"id": "r", "silicon_data_source": f"db-dump/2026-04-27; config_id=717; "
                      f"silicon_concurrency=4; measured={measured}; workflow_run_id=748; "
                      f"lmsysorg/sglang:{image}", "backend": "sglang", "backend_version": version,
                      "model_path": model, "system": system, "precision": "fp4", "mode": mode,
                      "isl": str(isl), "osl": "1024", "gemm_quant_mode": "nvfp4",
                      "moe_quant_mode": "nvfp4", "batch_size": "4", "tp_size": "16",
                      "pp_size": "1", "attention_dp_size": "1", "moe_tp_size": "4",
                      "moe_ep_size": "4", "silicon_ttft_ms": "1389", "silicon_tpot_ms": "12.6"},
                     "test")


def test_the_inflation_is_inferencexs_own_count_of_a_7140_token_prompt():
    assert round(7140 * SERVER_TOKENS_PER_CLIENT_TOKEN) == 35921


def test_a_transformers_5_image_before_the_client_fix_sent_inflated_prompts():
    assert prompt_scale(_row()) == SERVER_TOKENS_PER_CLIENT_TOKEN
    # a row that states no version is read from its image's tag
    assert prompt_scale(_row(version="")) == SERVER_TOKENS_PER_CLIENT_TOKEN


@pytest.mark.parametrize("fields", [
    {"version": "0.5.9", "image": "v0.5.9-cu130", "system": "b200_sxm"},   # transformers 4.57.1
    {"measured": "2026-05-19T00:00:00.000Z"},           # after 5fe6d56ee (#1381) fixed the client
    {"measured": "2026-01-10T00:00:00.000Z"},           # kimbochen/bench_serving, not InferenceX's
    {"model": "Qwen/Qwen3-235B-A22B-FP8"},              # not DeepSeek's LlamaTokenizerFast
    {"mode": "disagg"}])                                # another harness (srt-slurm's sa-bench)
def test_other_rows_keep_their_stated_prompts(fields):
    assert prompt_scale(_row(**fields)) is None


def test_the_plan_sends_the_servers_prompt_length_and_says_so():
    plan = plan_row(_row())
    input_len = plan.instances[0].data["workload"]["input_len"]
    assert input_len["value"] == round(8192 * SERVER_TOKENS_PER_CLIENT_TOKEN)
    assert input_len["range_ratio"] == 0.8                  # the harness's spread, as before
    assert any("prompts as the server tokenized them" in a for a in plan.assumptions)
    twin = plan_row(_row(version="0.5.9", image="v0.5.9-cu130", system="b200_sxm",
                         measured="2026-03-25T00:00:00.000Z"))
    assert twin.instances[0].data["workload"]["input_len"]["value"] == 8192
    assert not any("prompts as the server tokenized them" in a for a in twin.assumptions)
