"""DeepEP normal's intranode combine: its sending and receiving sides, whichever is slower.

DeepEP's `combine` kernel (`csrc/kernels/legacy/intranode.cu`) runs its channels
(`epsim.cost.comm.NORMAL_CHANNELS`), each a sending and a receiving block:

- **sending**: a channel's warps are split by destination rank, three warps a peer (24 warps of
  a 768-thread block over 8 ranks); each group copies exactly the tokens of its queue (the
  channel's tokens whose top-k reached that rank's experts), chunk by chunk through the peer's
  ring buffer. The kernel ends when the longest of all these queues has drained, and under
  random routing the queues are not equal: a channel's `n` tokens each reach a given peer with
  probability `p`, so a queue holds Binomial(n, p) copies and the longest of the
  `channels x ranks x peers` queues `n p + z sqrt(n p (1 - p))` (`queue_spread`). Its excess
  over the mean falls as `1 / sqrt(n p)`: the per-token cost that falls with the tokens.
  aiconfigurator-core's normal combine tables (one node of 8, uniform routing) show it on
  H100-B300: priced at the mean queue, a fit up to 1024 tokens over-predicted 2048-16384 by
  13-19 % (its top-8 rows by 20-28 % at 16384).
- **receiving**: one warp a token reduces the token's copies from every source rank's buffer,
  16 bytes a lane a round, so `2 hidden / 512` rounds a token whatever its top-k
  (`reduction_rounds`; the copies' loads of a round are issued together). Top-1 and top-2
  routing, whose queues are short, are paced here: their time per token follows the hidden
  size, not the copies (0.077-0.082 µs a token at hidden 4096-5120 on H200, top-1 to top-2,
  against 0.12 at top-8).

The two sides pipeline through the ring buffers, so the slower one paces the kernel:
`max(sender, receiver)`, each side linear in its own coefficient (`nvl_gbps`, `token_us`: µs
a reduction round of the busiest rank's tokens); `combine_sides` keeps the slower side's column
and zeroes the other (the fitter re-picks the sides each round, as it picks the busiest rank).
Across nodes the internode kernel's RDMA and forwarding stages pace it: left as it is.
"""

from __future__ import annotations

import math

import numpy as np

LANE_BYTES = 16           # one int4 a lane a round
WARP_LANES = 32


def expected_max_z(count: int) -> float:
    """The expected largest of `count` independent standard normal draws (the first two terms
    of its Gumbel asymptote; 2.94 for 560, 8 ranks' queues), 0 for one."""
    if count < 3:
        return 0.0 if count < 2 else 1.0 / math.sqrt(math.pi)
    a = math.sqrt(2.0 * math.log(count))
    return a - (math.log(math.log(count)) + math.log(4.0 * math.pi)) / (2.0 * a)


def queue_spread(queue, owner_tokens, num_ranks: int, num_channels: int) -> np.ndarray:
    """[...] the longest sending queue over the mean (>= 1): `queue` [...] the mean copies a
    channel's queue to one peer carries (`epsim.cost.comm.queue_copies`), `owner_tokens` [...]
    the busiest rank's tokens (`n = owner_tokens / num_channels` a channel, so `p = queue / n`),
    `num_ranks` the ranks of the node (`channels x ranks x (ranks - 1)` queues)."""
    queue = np.asarray(queue, dtype=np.float64)
    n = np.asarray(owner_tokens, dtype=np.float64) / num_channels
    p = np.clip(np.divide(queue, n, out=np.zeros_like(queue), where=n > 0), 0.0, 1.0)
    z = expected_max_z(num_channels * num_ranks * max(num_ranks - 1, 1))
    sigma = np.sqrt(queue * (1.0 - p))
    return 1.0 + z * np.divide(sigma, queue, out=np.zeros_like(queue), where=queue > 0)


def reduction_rounds(bytes_per_copy: float) -> float:
    """A receiving warp's rounds over one token's `bytes_per_copy` (its hidden in BF16)."""
    return bytes_per_copy / (LANE_BYTES * WARP_LANES)


def combine_sides(nvl_kb, recv_rounds, queue, owner_tokens, num_ranks: int, num_channels: int,
                  params: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """(sending KB, receiving rounds) [...] columns of the intranode combine (module doc): the
    busiest rank's `nvl_kb` [...] stretched to its longest queue (`queue_spread` of `queue` and
    `owner_tokens`) and its `recv_rounds` [...] (its tokens times `reduction_rounds`); where
    `token_us` is fitted the slower side at `params` keeps its column and the other is 0 (before
    it, both: the plain sum)."""
    send = np.asarray(nvl_kb, dtype=np.float64) * queue_spread(queue, owner_tokens, num_ranks,
                                                               num_channels)
    recv = np.broadcast_to(np.asarray(recv_rounds, dtype=np.float64), send.shape)
    if params.get("token_us", 0.0) <= 0.0:
        return send, recv
    receiver_paces = recv * params["token_us"] > send / params["nvl_gbps"]
    return np.where(receiver_paces, 0.0, send), np.where(receiver_paces, recv, 0.0)
