"""Write the sample expert-load file that ships in scenarios/loads/: what SGLang's expert-
distribution recorder would count for Qwen3-30B-A3B decode under Zipf 0.8 skew with per-layer
variation (drawn from epsim's skew model, `epsim.routing`, seed 0), saved in the form SGLang's
`--init-expert-location` and `epsim eplb` both read (`{"logical_count": [layers, experts]}`).

    python scripts/sample_loads.py        # rewrites scenarios/loads/qwen3_30b_zipf0.8.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from epsim.routing import skew_from_dict
from epsim.zoo import get_model

OUT = Path(__file__).resolve().parents[1] / "scenarios" / "loads" / "qwen3_30b_zipf0.8.json"
SKEW = {"kind": "zipf", "alpha": 0.8, "layer_variation": 0.2}
NUM_PASSES, TOKENS_PER_PASS = 100, 8 * 64     # 100 decode passes of 64 requests on 8 ranks


def main() -> int:
    model = get_model("Qwen3-30B-A3B")
    skew = skew_from_dict(SKEW, model.num_moe_layers, model.num_experts, model.top_k, seed=0)
    rng = np.random.default_rng(0)
    counts = sum(skew.loads(TOKENS_PER_PASS, rng) for _ in range(NUM_PASSES))   # [layers, experts]
    data = {"logical_count": np.asarray(counts).astype(np.int64).tolist(),
            "about": f"{model.name}, {NUM_PASSES} decode passes of {TOKENS_PER_PASS} tokens, "
                     f"skew {SKEW}, epsim.routing seed 0; written by scripts/sample_loads.py"}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({model.num_moe_layers} layers x {model.num_experts} experts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
