"""CostModel: one step's time from its per-layer, per-rank counts, priced with a deployment's
`CostParams` (resolved once from a Profile, `epsim.cost.resolve`).

An MoE layer in EP with DP attention is bulk-synchronous (docs/model.md):

    layer_us = attention (slowest rank) + dispatch + experts (slowest rank) + combine

or, with two-batch overlap, two half micro-batches whose stages SGLang interleaves on one
compute stream, each exchange hidden behind a stage of the other (`epsim.cost.tbo`).
A step adds the dense layers, the LM head and a per-step overhead. The MoE layers are priced
by `epsim.cost.moe`; what a step spent goes to a `Ledger` (`epsim.cost.ledger`).
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from epsim.cost.attention_ahead import AttentionAhead
from epsim.cost.attention import (BatchCounts, attention_projections_us, attention_us, gemm_us,
                                  kv_ratio, lm_head_us, measured_attention_us)
from epsim.cost import trtllm_fp8_gemm
from epsim.cost.attention_ops import attention_ops_us
from epsim.cost.dual_stream import beside_us
from epsim.cost.comm import per_message
from epsim.cost.experts import dense_gemm, dense_us
from epsim.cost.flash import DecodeKernel
from epsim.cost.forward_host import forward_host
from epsim.cost.layer import LayerCost, layer_cost
from epsim.cost.mla import mla_attention_us, mla_core_token_us, mla_token_us
from epsim.cost.mla_decode import mla_decode_kernel
from epsim.cost.ledger import BlockRows, Ledger, ledger_row
from epsim.cost.moe import MoECost, moe_cost
from epsim.cost.params import Coefficients, CostParams
from epsim.cost.rank_memo import RankMemo, order_free_key
from epsim.cost.resolve import ProfileHardwareWarning, resolve_params
from epsim.cost.scheduler_host import scheduler_host
from epsim.cost.step import MoEStacks, StepBlock, StepCost, TokenTerms
from epsim.cost.shared_experts import DUAL_STREAM_TOKENS
from epsim.cost.sustained import slowed_by_us, slowed_layer, sustained_clock
from epsim.cost.tbo import overlapped_stages, overlapped_us
from epsim.cost.tables import PlacementTables
from epsim.cost.tp import attention_collectives_us
from epsim.default_profile import default_profile
from epsim.profile import Profile
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.spec.model import ModelSpec
from epsim.vocab import DEEPEP_MODES


class CostModel:
    """Predicts step and MoE-layer times of one deployment.

    Args:
        model, cluster, deployment: the specs; EP ranks `deployment.ep_size`, ranks per node
            `epsim.eplb.ranks_per_node`.
        profile: coefficients per component; unset ones take datasheet defaults. A profile
            measured on another GPU type is ignored with a ProfileHardwareWarning.
        time_mode: "auto" (SGLang: decode steps within `cuda_graph_max_bs` replay CUDA graphs,
            device time; others eager, device + host overhead), "graph" or "eager" for all.
        engine: the serving engine whose attention-block and MoE-block kernels are priced
            (`epsim.cost.attention_ops`, `epsim.cost.block_ops`): "sglang", "transformers" (the
            live bench's eager blocks, what the composition axis measures); unset, the
            deployment's `block_kernels` (SGLang's unless it says otherwise).
    Attributes:
        params: the `CostParams` it prices with (`resolve_params`: shared by every model of
            an equal deployment and profile).
        ledger: what the priced steps spent, for `epsim.cost.provenance`.
    """

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, deployment: DeploymentSpec,
                 profile: Profile | None = None, time_mode: str = "auto",
                 engine: str | None = None):
        self.model, self.cluster, self.deployment = model, cluster, deployment
        # whose block kernels: the caller's (the composition axis prices the measured block),
        # else the deployment's
        engine = engine or deployment.block_kernels
        self.engine = engine
        self.profile = profile if profile is not None else default_profile(cluster.gpu)
        # how the profile was chosen, for every output (`epsim.cost.provenance`)
        self.profile_rule = (f"the default for {cluster.gpu} (epsim.default_profile)"
                             if self.profile is default_profile(cluster.gpu) else "named")
        self.params: CostParams = resolve_params(model, cluster, deployment, self.profile,
                                                 time_mode, engine)
        self.model = self.params.model        # in the formats the deployment serves it in
        if not self.params.profile_applies:
            warnings.warn(f"profile {self.profile.name or self.profile.path} was measured on "
                          f"{self.profile.hardware}; the cluster is {cluster.gpu}: using datasheet "
                          f"defaults for {cluster.gpu}", ProfileHardwareWarning, stacklevel=2)
        for e in self.params.extrapolated:            # EP or hidden size outside a fit: now
            self.profile.warn_outside(e.backend, e.kind, e.mode_path, **{e.name: e.value})
        # fitted token ranges not yet warned about (each warns once, `_check_tokens`)
        self._token_ranges = list(self.params.token_ranges)
        attention = self.params.attention
        self._decode_kernel = DecodeKernel(*attention.heads, self.params.gemm.num_sms,
                                           attention.decode, kv_ratio(attention.kv_cache_dtype),
                                           attention.grids.decode) if attention.decode else None
        if attention.mla is not None:                 # MLA: its own kernel (`epsim.cost.mla_decode`)
            self._decode_kernel = mla_decode_kernel(attention.mla)
        # the scheduler's host time a step exposes (SGLang's loop without overlap scheduling)
        self.scheduler_host = scheduler_host(self.params)
        # the eager prefill forward's host work (`epsim.cost.forward_host`; None: not counted)
        self.forward_host = forward_host(self.params, engine)
        # the power-capped clock of a prefill forward (`epsim.cost.sustained`; None: burst clock)
        self.sustained = sustained_clock(cluster.gpu, deployment.sustained_clock)
        self.ledger = Ledger()
        self._block_rows = BlockRows()
        self._stacks = MoEStacks()
        self._terms_memo: dict[tuple, TokenTerms] = {}
        # the slowest rank's dense MLPs by (tokens per rank, width, CUDA graph): the terms' memo
        # above misses on a new request count or sampled rows at tokens seen before (an MTP
        # verify's), where these, most of a miss's cost, are the same
        self._mlp_memo: dict[tuple, float] = {}
        # ... and on a miss each rank's MLP by its own tokens (`epsim.cost.rank_memo`): a wide
        # batch's ranks take few token counts, in a new order or mix at nearly every step
        self._rank_mlp: dict[tuple, RankMemo] = {}
        par = self.params.parallel
        self._order_free_terms = par.moe_tp_size == 1 and (par.attn_tp_size == 1
                                                            or par.dp_size == 1)
        self._projections_memo: dict[bytes, np.ndarray] = {}     # tokens -> [dp] µs
        self._rank_projections = RankMemo(self._projections_of)   # ... per rank
        self._ahead = AttentionAhead(self._decode_attention)       # steady decode steps' attention
        self._collectives_memo: dict[tuple, float] = {}            # (max tokens, graph) -> µs
        self._ep_tokens_memo: tuple[bytes | None, np.ndarray | None] = (None, None)

    def _check_tokens(self, tokens_per_rank: np.ndarray, kernel_mode: str = "") -> None:
        """Warn once per component when a batch's tokens per rank leave its fitted range; a
        component of another DeepEP kernel mode than the step's (`kernel_mode`) does not price
        it (a prefill step's normal dispatch is not judged by the low-latency kernel's range)."""
        most = float(tokens_per_rank.max()) if tokens_per_rank.size else 0.0
        if most <= 0:                                 # an idle step predicts nothing
            return
        for i, r in enumerate(self._token_ranges):
            other = set(r.mode_path.split("/")) & (set(DEEPEP_MODES) - {kernel_mode})
            if not other and not r.low <= most <= r.high:
                self.profile.warn_outside(r.backend, r.kind, r.mode_path, num_tokens_per_rank=most)
                del self._token_ranges[i]
                break

    def mode_for(self, phase: str) -> str:
        """The deepep kernel mode of a phase (SGLang's `deepep_mode` rule); "" for others."""
        return self.params.kernel_modes[phase]

    def ep_tokens(self, batch: BatchCounts) -> np.ndarray:
        """[ranks] tokens each EP rank dispatches: a DP group's own with one GPU per group, else
        an even split of each group's tokens over its GPUs (SGLang scatters them before
        dispatch), an EP rank of `moe_tp_size` GPUs counting all of theirs."""
        par = self.params.parallel
        if par.attn_tp_size == 1 and par.moe_tp_size == 1:
            return batch.tokens
        # a step asks for its batch's several times (pool key, pricing, terms): the last
        # tokens' answer is remembered (read-only)
        key = batch.tokens.tobytes()
        if self._ep_tokens_memo[0] == key:
            return self._ep_tokens_memo[1]
        if par.dp_size == 1 and par.moe_tp_size == 1:
            out = np.full(self.params.num_ranks, float(batch.tokens.sum()) / self.params.num_ranks)
        else:
            per_gpu = np.repeat(batch.tokens / par.attn_tp_size, par.attn_tp_size)  # [tp_size]
            out = per_gpu.reshape(par.ep_size, par.moe_tp_size).sum(axis=1)
        out.flags.writeable = False
        self._ep_tokens_memo = (key, out)
        return out

    @property
    def micro_batch_fraction(self) -> float:
        """The share of a batch one MoE dispatch carries: 0.5 under two-batch overlap (two
        micro-batches), else 1 (`moe`'s `fraction`)."""
        return 0.5 if self.deployment.enable_two_batch_overlap else 1.0

    def uses_graph(self, batch: BatchCounts) -> bool:
        """Whether a step is costed as a CUDA-graph replay (device time only).

        `time_mode` "auto" follows SGLang: a pure decode step within `cuda_graph_max_bs`
        requests per rank (tokens, or a verify step's sequences) replays a CUDA graph, others
        run eagerly; "graph" / "eager" force one."""
        return self.graph_step(batch.phase, float(batch.tokens.max(initial=0.0))
                               / batch.decode_queries_per_seq)

    def graph_step(self, phase: str, max_tokens_per_rank: float) -> bool:
        """`uses_graph` for a step of `phase` whose busiest rank runs `max_tokens_per_rank`."""
        if self.params.time_mode != "auto":
            return self.params.time_mode == "graph"
        return (not self.deployment.disable_cuda_graph and phase == "decode"
                and max_tokens_per_rank <= self.deployment.cuda_graph_max_bs)

    def moe(self, loads: np.ndarray, tokens_per_rank: np.ndarray, tables: PlacementTables,
            phase: str = "decode", fraction: float = 1.0, graph: bool = False) -> MoECost:
        """Dispatch, experts and combine of every MoE layer for one (micro-)batch
        (`epsim.cost.moe.moe_cost` in `phase`'s kernel mode).

        Args:
            loads: [layers, experts] token-expert pairs of the whole batch.
            tokens_per_rank: [ranks] tokens each EP rank dispatches (whole batch).
            fraction: the micro-batch's share of the batch (two-batch overlap: 0.5).
            graph: a CUDA-graph replay (device time only, `.../graph` components).
        """
        if self._token_ranges:
            self._check_tokens(np.asarray(tokens_per_rank), self.mode_for(phase))
        return moe_cost(self.params, loads, tokens_per_rank, tables, self.mode_for(phase),
                        fraction, graph)

    def step(self, batch: BatchCounts, loads: np.ndarray | None, tables: PlacementTables,
             moe: MoECost | None = None, record: bool = True) -> StepCost:
        """The time of one forward step of every DP rank (lockstep).

        Args:
            batch: per-DP-rank counts (`[dp]`, dp = ep_size with DP attention, else 1).
            loads: [moe_layers, experts] token-expert pairs of the whole batch.
            tables: the current placement's `build_tables`.
            moe: this step's `moe(...)` when the caller priced it already (the fast engine
                prices many steps' MoE layers in one call); `loads` is then unused.
            record: add the step to `ledger` (False: a forward whose provenance no output
                reads, the speculative draft's, `epsim.sim.speculative.DraftPricer`).
        """
        tbo = self.deployment.enable_two_batch_overlap
        fraction = self.micro_batch_fraction
        part = batch.scaled(fraction) if tbo else batch
        terms = self._token_terms(batch, part)
        graph, shared = terms.graph, terms.shared_us
        attn = self._attention_layer_us(part, graph)
        if moe is None:
            moe = self.moe(loads, self.ep_tokens(batch), tables, batch.phase, fraction, graph)
        priced = (attn, shared, moe)               # at the tables' burst clock, for the ledger
        slow = self._sustained_factor(batch)
        if slow != 1.0:
            attn, shared, moe = slowed_layer(slow, self._collectives_us(part, graph), attn, shared,
                                             moe, self.params.step(graph))
        stages = None
        if tbo:
            hooked = per_message(moe.traffic.dedup)
            stages = overlapped_stages(batch.phase, terms.prepare_us, shared, attn,
                                       moe.stage_rows, moe.block_ops_us,
                                       (moe.dispatch_wire_us, moe.combine_wire_us), hooked,
                                       self.params.gemm.num_sms)
            layer, scale = overlapped_us(stages, batch.phase, hooked), 2.0
        elif terms.shared_beside:       # on their own stream: the longer, part of the shorter
            layer = (attn + beside_us(shared, moe.experts_us + moe.block_ops_us,
                                      terms.beside_overlap_frac)) + moe.comm_us
            scale = 1.0
        else:
            layer = (attn + shared) + moe.experts_us + moe.block_ops_us + moe.comm_us
            scale = 1.0
        if moe.sync_us:
            layer = layer + scale * moe.sync_us            # once per micro-batch's collectives
        # `decode_steps` repeats this arithmetic over many steps: change the two together
        num_layers = layer.shape[0]
        dense = terms.lm_head_us
        if self.model.num_dense_layers:
            # without two-batch overlap `part` is `batch`: its attention is priced already
            whole = priced[0] if part is batch else self._attention_layer_us(batch, graph)
            dense += self.model.num_dense_layers * (whole + terms.dense_mlp_us)
        # what the capped clock adds: the MoE layers' parts carry theirs already, the dense
        # layers' and LM head's device time (not their collectives) is slowed here
        dense_slow = sustained = 0.0
        if slow != 1.0:
            dense_slow = (slow - 1.0) * (dense - self.model.num_dense_layers
                                         * self._collectives_us(batch, graph))
            sustained = dense_slow + slowed_by_us(priced, (attn, shared, moe), scale, num_layers)
        overhead = terms.overhead_us
        step = float(layer.sum()) + dense + dense_slow + overhead
        host = 0.0              # what the eager prefill forward's host outlasts of its device
        if self.forward_host is not None and not graph and batch.phase == "prefill":
            host = self.forward_host.exposed_us(layer, step)
            step += host
        if record:
            p_attn, p_shared, p_moe = priced
            self.ledger.add(graph, moe.mode, ledger_row(self.params.step(graph), p_moe, p_attn,
                                                        p_shared, dense, overhead, scale,
                                                        num_layers, terms.attention_ops_us, host,
                                                        sustained),
                            terms.max_tokens)
        parts = np.empty((7, num_layers))     # one block, so a recorder sums all parts at once
        parts[0] = attn * scale
        parts[1:4] = moe.stage_rows
        parts[4] = shared * scale
        parts[5] = moe.block_ops_us
        parts[6] = layer
        if scale != 1.0:
            parts[1:4] *= scale
            parts[5] *= scale
        return StepCost(
            attention_us=parts[0], dispatch_us=parts[1], experts_us=parts[2], combine_us=parts[3],
            shared_experts_us=parts[4], block_ops_us=parts[5], layer_us=parts[6], dense_us=dense + dense_slow,
            overhead_us=overhead + host,
            step_us=step, phase=batch.phase, mode=moe.mode, traffic=moe.traffic, parts=parts,
            stages=stages)

    def layer(self, batch: BatchCounts, loads: np.ndarray, tables: PlacementTables) -> LayerCost:
        """One step's MoE layers by part, each with the component that priced it: the public
        layer cost (`epsim.cost.layer.layer_cost`; the step goes to the ledger as `step`'s)."""
        return layer_cost(self, batch, loads, tables)

    def leaps(self, batch: BatchCounts) -> bool:
        """Whether `decode_steps` prices steps of this batch shape: a pure decode batch (the
        datasheet roofline only without TP attention). Split-KV decode launches are priced
        over many steps at once (`epsim.cost.flash.decode_work`), TP attention's collectives
        follow the tokens alone."""
        if batch.phase != "decode":
            return False
        if batch.decode_queries_per_seq != 1.0:   # a verify step: MLA runs its queries as decode rows
            return self.params.attention.mla is not None and self._decode_kernel is not None
        if self.params.attention.kernels is None and self.params.attention.mla is None:
            return self.params.tp_size == 1         # the roofline: elementwise in contexts
        return self._decode_kernel is not None

    def decode_steps(self, batch: BatchCounts, contexts: np.ndarray,
                     moes: list[MoECost]) -> StepBlock:
        """`step(batch, None, tables, moe=moes[i])` for k decode steps that differ only in
        their contexts, at once (the engine's leap over a saturated decode batch,
        `epsim.sim.leap`): `step`'s arithmetic on `[k, ...]` arrays, so the same bits as k
        calls (tests/epsim/sim/test_leap.py holds the two together).

        Args:
            batch: the steps' counts (`leaps(batch)`); its `decode_context` is unused.
            contexts: [k, dp] each step's `decode_context`.
            moes: k MoE costs, one per step (a pool's rows, shared between steps).
        `ledger` is left alone: `record_decode_steps` adds the steps that are kept.
        """
        tbo = self.deployment.enable_two_batch_overlap
        part = batch.scaled(0.5) if tbo else batch          # as `step`: one micro-batch
        terms = self._token_terms(batch, part)
        shared = terms.shared_us
        graph = terms.graph
        attn = (self._decode_attention(part, contexts * 0.5 if tbo else contexts)     # [k]
                + self._collectives_us(part, graph))
        pick, stacked = self._stacks.stack(moes)
        experts, block, comm = stacked.experts[pick], stacked.block[pick], stacked.comm[pick]
        if tbo:
            wire = stacked.wire[pick]
            stages = overlapped_stages("decode", terms.prepare_us, shared, attn[:, None],
                                       stacked.stages[pick].swapaxes(0, 1), block,
                                       (wire[:, 0], wire[:, 1]), True, self.params.gemm.num_sms)
            layer, scale = overlapped_us(stages, "decode", True), 2.0           # [k, layers]
        elif terms.shared_beside:       # as `step`
            layer, scale = (attn[:, None] + beside_us(shared, experts + block,
                                                      terms.beside_overlap_frac)) + comm, 1.0
        else:
            layer, scale = (attn[:, None] + shared) + experts + block + comm, 1.0
        if stacked.sync.any():
            layer = layer + scale * stacked.sync[pick][:, None]
        dense, overhead = terms.lm_head_us, terms.overhead_us
        if self.model.num_dense_layers:         # [k]: their attention follows the contexts
            whole = (self._decode_attention(batch, contexts) + self._collectives_us(batch, graph)
                     if tbo else attn)
            dense = dense + self.model.num_dense_layers * (whole + terms.dense_mlp_us)
        step_us = layer.sum(axis=1) + dense + overhead
        num_layers = layer.shape[1]
        parts = np.empty((len(moes), 7, num_layers))
        parts[:, 0] = attn[:, None] * scale
        parts[:, 1:4] = stacked.stages[pick]
        parts[:, 4] = shared * scale
        parts[:, 5] = block
        parts[:, 6] = layer
        if tbo:
            parts[:, 1:4] *= scale
            parts[:, 5] *= scale
        return StepBlock(step_us, parts, dense, overhead, batch.phase, attn, terms, scale)

    def record_decode_steps(self, block: StepBlock, moes: list[MoECost]) -> None:
        """Add the first `len(moes)` steps of a `decode_steps` block to `ledger`, as `step`
        would have one by one."""
        graph = block.terms.graph
        self.ledger.add_rows(graph, moes[0].mode,
                             self._block_rows.rows(self.params.step(graph), block, moes),
                             block.terms.max_tokens)

    def record_layer(self, moe: MoECost, graph: bool, max_tokens: float) -> None:
        """Add one MoE layer costed alone (`epsim cost`) to `ledger`."""
        self.ledger.add(graph, moe.mode, ledger_row(self.params.step(graph), moe, 0.0, 0.0, 0.0,
                                                    0.0, 1.0, moe.experts_us.shape[0]),
                        max_tokens)

    def _token_terms(self, batch: BatchCounts, part: BatchCounts) -> TokenTerms:
        """The parts of a step that depend only on its tokens per rank (not on contexts or
        loads), remembered for the last few batch shapes: a run repeats few of them."""
        # each term is a maximum over ranks: which rank holds which counts does not matter,
        # unless EP ranks sum DP ranks' tokens in groups (`ep_tokens`)
        # decoding requests on the slowest scheduler (a verify step runs several tokens each)
        requests = float((batch.decode_tokens / batch.decode_queries_per_seq).max(initial=0.0))
        key = ((order_free_key(batch.tokens, batch.sampled_tokens) if self._order_free_terms
                else batch.tokens.tobytes() + batch.sampled_tokens.tobytes()), batch.phase,
               requests)
        hit = self._terms_memo.get(key)
        if hit is not None:
            return hit
        m, p = self.model, self.params
        graph = self.uses_graph(batch)
        rates = p.gemm_rates(graph)
        # shared experts fused into the MoE kernel are priced there (`epsim.cost.moe`)
        own = m.num_shared_experts - p.fused_shared_experts
        shared = self._slowest_mlp_us(part.tokens, own * m.moe_intermediate_size,
                                      graph) if own else 0.0
        lm_head = float(lm_head_us(batch.sampled_tokens, m, rates, p.tp_size).max())
        dense_mlp = self._slowest_mlp_us(batch.tokens, m.intermediate_size,
                                         graph) if m.num_dense_layers else 0.0
        overhead = (p.overhead["base_us"] + p.overhead["per_layer_us"] * m.num_layers
                    + self.scheduler_host.step_us + self.scheduler_host.requests_us(requests))
        ops = self._attention_ops(part.tokens)
        max_tokens = float(self.ep_tokens(batch).max(initial=0.0))
        beside = bool(p.shared_beside and own and 0 < max_tokens <= DUAL_STREAM_TOKENS)
        terms = TokenTerms(graph, shared, lm_head, dense_mlp, overhead, max_tokens,
                           0.0 if ops is None else float(ops.max(initial=0.0)),
                           self._prepare_us(part) if part is not batch else 0.0, beside,
                           p.dual_stream.at(max_tokens) if beside and p.dual_stream else 1.0)
        if len(self._terms_memo) >= 64:
            self._terms_memo.clear()
        self._terms_memo[key] = terms
        return terms

    def _prepare_us(self, part: BatchCounts) -> float:
        """Slowest rank's attention before its kernel in a decode micro-batch `part` (SGLang's
        `op_prepare`: the projections and absorbed `W_UK`, the block's norms and RoPE; MLA's
        `o_proj` and `W_UV` run after the kernel, `mla_core_token_us`). 0 for a prefill or
        the datasheet roofline attention, which does not part them (the whole attention then
        counts as `core`, after the kernel: the exchanges have less to hide behind)."""
        p = self.params
        if part.phase != "decode" or (p.attention.mla is None and p.attention.kernels is None):
            return 0.0
        proj = self._projections(part)                                       # [dp]
        if p.attention.mla is not None:
            proj = proj - mla_core_token_us(part.tokens, part.decode_tokens, p.attention.mla)
        return float(np.where(part.tokens > 0, proj, 0.0).max(initial=0.0))

    def _slowest_mlp_us(self, tokens: np.ndarray, width: int, graph: bool) -> float:
        """`_mlp_us(tokens, width, gemm_rates(graph)).max()`, remembered (`_mlp_memo`)."""
        key = (tokens.dtype.str, tokens.tobytes(), width, graph)
        hit = self._mlp_memo.get(key)
        if hit is None:
            if len(self._mlp_memo) >= 256:
                self._mlp_memo.clear()
            ranks = self._rank_mlp.get(key[2:])
            if ranks is None:       # `_mlp_us` is elementwise in the tokens: the same bits
                rates = self.params.gemm_rates(graph)
                ranks = self._rank_mlp[key[2:]] = RankMemo(
                    lambda t, width=width, rates=rates: self._mlp_us(t, width, rates))
            hit = self._mlp_memo[key] = float(ranks(tokens).max())
        return hit

    def _mlp_us(self, tokens: np.ndarray, width: int, rates: Coefficients) -> np.ndarray:
        """[dp] a dense SwiGLU MLP of `width` on each rank's tokens: FlashInfer's trtllm
        block-FP8 GEMM where the deployment runs it (`epsim.cost.trtllm_fp8_gemm`), the fitted
        dense kernel (`epsim.cost.experts.dense_us`), else the datasheet roofline at `rates`."""
        m, p = self.model, self.params
        if p.fp8_gemm is not None:          # FlashInfer's trtllm block-FP8 GEMM, TP-split
            return trtllm_fp8_gemm.mlp_us(tokens, m.hidden_size, max(width // p.tp_size, 1),
                                          p.fp8_gemm)
        if p.dense is None:
            params = float(3 * m.hidden_size * width)
            return gemm_us(params * m.weight_bytes_per_param, 2.0 * params, tokens, rates,
                           p.tp_size)
        gemm = dense_gemm(m.hidden_size, max(width // p.tp_size, 1), m.weight_bytes_per_param,
                          self.cluster.gpu)
        return dense_us(tokens, gemm, p.dense)

    def _projections(self, batch: BatchCounts) -> np.ndarray:
        """[dp] the attention's terms that follow the batch's tokens alone, remembered per batch
        shape (read-only) and per rank (`epsim.cost.rank_memo`): `attention_projections_us`,
        or MLA's projections and absorbed BMMs (`epsim.cost.mla.mla_token_us`), plus the
        attention block's own ops (`_attention_ops`)."""
        tokens, mla = batch.tokens, self.params.attention.mla
        key = tokens.tobytes() + (batch.decode_tokens.tobytes() if mla is not None else b"")
        proj = self._projections_memo.get(key)
        if proj is None:
            if len(self._projections_memo) >= 64:
                self._projections_memo.clear()
            proj = (self._rank_projections(tokens) if mla is None
                    else self._rank_projections(tokens, batch.decode_tokens))
            self._projections_memo[key] = proj
            proj.flags.writeable = False
        return proj

    def _projections_of(self, tokens: np.ndarray, decode_tokens: np.ndarray | None = None
                        ) -> np.ndarray:
        """`_projections` of `tokens` (and, with MLA, `decode_tokens`) [n], elementwise."""
        mla = self.params.attention.mla
        proj = (attention_projections_us(tokens, self.model, self.params.attention.projections,
                                         self.params.tp_size) if mla is None
                else mla_token_us(tokens, decode_tokens, mla))
        ops = self._attention_ops(tokens)
        return proj if ops is None else proj + ops

    def _attention_ops(self, tokens: np.ndarray) -> np.ndarray | None:
        """[dp] the attention block's own ops on each rank's `tokens` (norms, RoPE, KV write,
        residual: `epsim.cost.attention_ops`), or None where the profile holds no fit of them
        (the datasheet attention stands for the whole attention)."""
        p = self.params
        if p.attention_ops is None:
            return None
        return attention_ops_us(tokens, p.attention_block_ops, p.attention_ops)

    def _attention_layer_us(self, batch: BatchCounts, graph: bool = True) -> float:
        """Slowest rank's attention of one layer (with the block's own ops), plus the
        collectives around it with attention TP (`epsim.cost.tp.attention_collectives_us`:
        device time, + host in an eager step, `graph` False)."""
        p = self.params
        kv = p.attention.kv_cache_dtype
        if (batch.phase == "decode" and batch.decode_queries_per_seq == 1.0
                and (p.attention.mla is not None or p.attention.kernels is not None)):
            # the decode kernel with its projections, priced ahead for steady steps (the same
            # bits as the branches below: `_decode_attention`, `epsim.cost.attention_ahead`)
            t = self._ahead.price(batch)
        elif p.attention.mla is not None:
            t = float(mla_attention_us(batch, p.attention.mla, self._decode_kernel,
                                       self._projections(batch)).max())
        elif p.attention.kernels is not None:
            decode, prefill = p.attention.kernels
            t = float(measured_attention_us(batch, self.model, decode, prefill,
                                            p.attention.projections, p.gemm.num_sms, p.tp_size,
                                            self._projections(batch),
                                            self._decode_kernel, kv, p.attention.grids).max())
        else:
            per_rank = attention_us(batch, self.model, p.attention.roofline, p.tp_size, kv)
            ops = self._attention_ops(batch.tokens)
            t = float((per_rank if ops is None else per_rank + ops).max())
        if p.tp_size > 1:
            t += self._collectives_us(batch, graph)
        return t

    def _collectives_us(self, batch: BatchCounts, graph: bool) -> float:
        """`attention_collectives_us` (0 without TP attention): they follow the busiest
        group's tokens alone, so they are remembered per token count."""
        if self.params.tp_size <= 1:
            return 0.0
        key = (float(batch.tokens.max(initial=0.0)), graph)
        extra = self._collectives_memo.get(key)
        if extra is None:
            if len(self._collectives_memo) >= 64:
                self._collectives_memo.clear()
            extra = self._collectives_memo[key] = attention_collectives_us(self.params, batch,
                                                                           graph)
        return extra

    def _sustained_factor(self, batch: BatchCounts) -> float:
        """Sustained / burst time of this step's forward (`epsim.cost.sustained`): a prefill
        (extend) step at its busiest rank's tokens; 1 for decode steps and where not priced."""
        if self.sustained is None or batch.phase != "prefill":
            return 1.0
        return self.sustained.factor(float(batch.tokens.max(initial=0.0)))

    def _decode_attention(self, batch: BatchCounts, contexts: np.ndarray) -> np.ndarray:
        """[k] `_attention_layer_us` of k decode steps of `batch` whose contexts are `contexts`
        ([k, dp]): the slowest rank's projections, block ops and decode kernel (or the
        datasheet roofline), the same bits."""
        if self.params.attention.kernels is None and self.params.attention.mla is None:
            per_rank = attention_us(replace(batch, decode_context=contexts), self.model,
                                    self.params.attention.roofline, 1,
                                    self.params.attention.kv_cache_dtype)
            ops = self._attention_ops(batch.tokens)
            return (per_rank if ops is None else per_rank + ops).max(axis=1)
        proj = self._projections(batch)
        per_rank = proj + self._decode_kernel.us(batch.decode_tokens, contexts)     # [k, dp]
        return np.where(batch.tokens > 0, per_rank, 0.0).max(axis=1)
