"""The live backend: the real Qwen3 MoE block over expert-parallel ranks, and its measurement harness."""
