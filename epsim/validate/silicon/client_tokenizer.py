"""How long the prompts an InferenceX agg run sent really were, when its client mis-tokenized them.

InferenceX's single-node harness (`utils/bench_serving/benchmark_serving.py`, run inside the
server's container by `benchmarks/benchmark_lib.sh`) builds each random prompt as token ids,
decodes them to text with the client's tokenizer and re-encodes until the *client* counts the
target length; the server tokenizes the text again. Transformers 5 loads DeepSeek-V3/R1's
tokenizer (`tokenizer_class: LlamaTokenizerFast` over a ByteLevel BPE `tokenizer.json`) with a
Metaspace pre-tokenizer and a Llama decoder (huggingface/transformers#45488). SGLang's server
restores the file's ByteLevel components at start-up (`hf_transformers_utils.py`
`_fix_v5_tokenizer_components`); the client did not, so the server saw every prompt about five
times as long as the client counted it. InferenceX measured the inflation on its own harness:
"100 random tokens -> text -> re-encode: 102 tokens [client], 531 tokens [server]; 7140 token
prompt: 7140 [client], 35921 [server]" (SemiAnalysisAI/InferenceX#937, ef01c2205, 2026-03-27).

#937 copied the server's fix into the client, but it looked for `tokenizer.json` under
`Path(model)`, which exists only for a local directory; the single-node runners passed the
model as a Hub id (`deepseek-ai/DeepSeek-R1-0528`, `nvidia/DeepSeek-R1-0528-FP4-V2`: the B300
runner `runners/launch_b300-nv.sh` pointed `MODEL` at a local copy for Qwen3.5 only), and a bare
`except` hid the miss. 5fe6d56ee (#1381, 2026-05-15) made the fix resolve Hub ids ("a ~5x
client/server tokenizer mismatch and a false throughput regression (DeepSeek-R1 FP4 on B200:
1970 -> 425 tok/s)") and InferenceX re-ran the DSR1 agg keys (#1502).

So a DeepSeek agg row of that harness was sent prompts `SERVER_TOKENS_PER_CLIENT_TOKEN` times its
stated ISL where the image's transformers is 5.x and it was measured before 5fe6d56ee. SGLang
pins transformers 5 from 0.5.10 on (sgl-project/sglang-omni#675: "SGLang >=0.5.10 requires
transformers 5.x"; #937, 2026-03-24: the latest SGLang "uses transformers 5.3.0", its
2026-03-13 image 4.57.1, which 0.5.9 predates). The output length is not touched: the server
generates `max_tokens` with `--ignore-eos`, and the client counts the server's `usage` tokens.
"""

from __future__ import annotations

import re

from epsim.validate.silicon.inferencex import moment

# server tokens per client token of a random prompt, InferenceX #937's own count at the
# harness's longest stated prompt (35921 / 7140; its 100-token probe gave 531 / 102 = 5.2)
SERVER_TOKENS_PER_CLIENT_TOKEN = 35921 / 7140
# the first SGLang release that pins transformers 5 (module doc)
TRANSFORMERS_5_FROM = (0, 5, 10)
# 5fe6d56ee (#1381): the client's fix resolves Hub ids from here on
CLIENT_FIXED_FROM = "2026-05-15T17:01:52Z"
# the harness that builds prompts this way: InferenceX's own bench_serving copy, used by the
# single-node scripts from d053ae24e (#480) on (`agg_recipes.HARNESS_WARMUP_FROM`)
HARNESS_FROM = "2026-01-21T17:53:38Z"
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_IMAGE_VERSION = re.compile(r"sglang:v(\d+\.\d+\.\d+)")


def prompt_scale(row) -> float | None:
    """Server tokens per stated prompt token of an InferenceX agg DeepSeek row sent through the
    unfixed client (module doc), else None (the stated ISL is what the server saw)."""
    if row.mode != "agg" or row.backend != "sglang" or "deepseek" not in row.model_path.lower():
        return None
    version = _sglang_version(row)
    if row.measured_at is None or version is None or version < TRANSFORMERS_5_FROM:
        return None
    when = moment(row.measured_at)
    if not moment(HARNESS_FROM) <= when < moment(CLIENT_FIXED_FROM):
        return None
    return SERVER_TOKENS_PER_CLIENT_TOKEN


def _sglang_version(row) -> tuple[int, int, int] | None:
    """The row's SGLang release: its stated version, else its image's tag."""
    text = row.backend_version or ""
    if not _VERSION.search(text):
        image = _IMAGE_VERSION.search(row.source)
        text = image.group(1) if image else ""
    found = _VERSION.search(text)
    return tuple(int(g) for g in found.groups()) if found else None


def note(scale: float, isl: int) -> str:
    """The assumption line of a row sent inflated prompts."""
    return (f"prompts as the server tokenized them: ISL {isl} x {scale:.2f} = {round(isl * scale)} "
            "(InferenceX's client tokenized DeepSeek's prompts with transformers 5's Metaspace "
            "pre-tokenizer, its fix a no-op for a Hub model id until 5fe6d56ee, 2026-05-15; "
            "#937 counted 35921 server tokens for a 7140-token prompt)")
