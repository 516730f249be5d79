"""SGLang's Triton fused-MoE kernel key: the nearest tuned key's tiles (w13 and w2) and Triton's
divisibility-by-16 specialisation of EM and num_valid_tokens."""

from __future__ import annotations

import pytest

from epsim.cost.first_use import (H200_FP8_W2_TILES, H200_FP8_W13_TILES, TILE_TABLES,
                                  fused_moe_key, warm_keys)

E, K = 257, 9        # DeepSeek-R1 with the shared expert fused
TABLES = TILE_TABLES["H200"]


def test_nearest_key_picks_the_tiles_of_both_gemms():
    w13, w2, _, _ = fused_moe_key(900, E, K, TABLES)
    assert (w13, w2) == (H200_FP8_W13_TILES[1024], H200_FP8_W2_TILES[1024])
    assert fused_moe_key(700, E, K, TABLES)[0] == H200_FP8_W13_TILES[512]       # nearer 512
    # above the table's last key every batch runs one config: only the specialisation differs
    assert fused_moe_key(1601, E, K, TABLES) == fused_moe_key(30001, E, K, TABLES)


@pytest.mark.parametrize("tokens, em_div, nvt_div", [
    (1024, False, True),     # numel 9216 = 16 x 576; EM 9216 + 258 x 63 = 25470
    (1026, True, False),     # EM 9234 + 16254 = 25488 = 16 x 1593
    (1025, False, False),
    (1, True, False),        # 9 routed rows < E + 1: EM = 9 x BLOCK_M 16 = 144
])
def test_divisibility_specialisation(tokens, em_div, nvt_div):
    _, _, em16, nvt16 = fused_moe_key(tokens, E, K, TABLES)
    assert (em16, nvt16) == (em_div, nvt_div)


def test_warm_keys_are_the_keys_of_the_batches_run():
    warm = warm_keys([1025, 1041], E, K, TABLES)      # two of one class: one key
    assert warm == {fused_moe_key(1025, E, K, TABLES)}
    assert fused_moe_key(1024, E, K, TABLES) not in warm


def test_no_tokens_is_refused():
    with pytest.raises(ValueError, match=r"num_tokens \(0\) must be > 0"):
        fused_moe_key(0, E, K, TABLES)
