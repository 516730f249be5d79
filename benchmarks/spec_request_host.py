"""The scheduler's per-request host work in one speculative (EAGLE / NEXTN, v1) cycle of SGLang
0.5.9, timed on this host: the per-request bodies of the loops the cycle runs on the CPU with
overlap scheduling off, transcribed from the 0.5.9 wheel (`sglang/srt/`) onto stand-in request
objects that carry the attributes those bodies touch, greedy, no grammar, no logprobs, streaming.

    python benchmarks/spec_request_host.py [--out benchmarks/results/spec_request_host.md]

Parts, per request per cycle (`epsim.cost.scheduler_host.REQUEST_HOST_US` holds the result):

  verify      `EagleVerifyInput.verify` (speculative/eagle_info.py:396-433): per accepted token
              `predict_cpu[idx]`, `output_ids.append`, `check_finished()` (its length, token,
              vocab and string checks), `finished()`; per request the KV counters, the
              `accept_index[i, :j]` view of a device tensor (a torch indexing call), the
              accepted-draft count and `update_spec_acceptance_histogram`; the batch-prep
              comprehensions of the cycle: `decode_batch_idx += 1` (`_draft_preprocess_decode`),
              `extend_lens` (`prepare_extend_after_decode`), `get_model_worker_batch`'s `lora_ids`
              and `dllm_block_offsets` (three calls a cycle: draft, verify, draft extend), and
              `filter_batch`'s `keep_indices` (`update_running_batch`)
  result      `process_batch_result_decode` (managers/scheduler_output_processor_mixin.py:
              450-527): zip over the verified ids, a device tensor (`Tensor.__iter__` unbinds it:
              one 0-d view per accepted token), `_mamba_prefix_cache_update`, `check_finished`,
              `maybe_collect_customized_info`, the logprob / hidden / grammar tests
  stream      `stream_output_generation` (same file, 950-1128 and the send): a streaming request
              outputs every step (`stream_interval` 1): `init_incremental_detokenize`, about 25
              list appends, the time-stats getters; then the `BatchTokenIDOutput` pickled for the
              detokenizer (`send_pyobj`), its share per request

The decode path without speculation runs `result` and `stream` too (one token a request).
What this host is: the printed platform line; a serving host's CPU is faster or slower, and this
is extrapolated to it (nobody here timed SGLang's scheduler on one).
"""

from __future__ import annotations

import argparse
import pickle
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from epsim.io.write import write_text  # noqa: E402
from plan_sweep import cpu_model  # noqa: E402

REQUESTS = 256                 # a batch of the size where the term matters
STEPS, DRAFT_TOKENS = 2, 3     # the silicon rows' MTP: 2 steps, top-k 1, 3 draft tokens
REPEATS = 41


class SamplingParams:
    def __init__(self):
        self.max_new_tokens, self.ignore_eos = 1024, False
        self.stop_token_ids, self.stop_strs, self.stop_regex_strs = set(), [], []
        self.stream_interval, self.skip_special_tokens = None, True
        self.spaces_between_special_tokens, self.no_stop_trim = True, False


class TimeStats:
    def __init__(self):
        self.forward_entry_time, self.wait_queue_entry_time = 2.0, 1.0
        self.prefill_start_time_host = self.prefill_end_time_host = 1.5
        self.prefill_finished_ts = 1.7

    def get_queueing_time(self):
        return self.forward_entry_time - self.wait_queue_entry_time

    def get_prefill_launch_delay(self):
        if self.prefill_start_time_host > 0.0:
            return self.prefill_start_time_host - self.forward_entry_time
        return None

    def get_prefill_launch_latency(self):
        if self.prefill_start_time_host > 0.0 and self.prefill_end_time_host > 0.0:
            return self.prefill_end_time_host - self.prefill_start_time_host
        return None

    def get_prefill_finished_ts(self):
        if self.prefill_finished_ts > 0.0:
            return self.prefill_finished_ts
        return None


class Req:
    """The attributes of SGLang's `Req` the per-request bodies touch (managers/schedule_batch.py)."""

    def __init__(self, i: int):
        self.rid, self.http_worker_ipc = f"{i:032x}", None
        self.origin_input_ids = self.origin_input_ids_unpadded = list(range(1024))
        self.output_ids = list(range(100))
        self.sampling_params, self.time_stats = SamplingParams(), TimeStats()
        self.finished_reason = self.to_finish = self.finished_len = self.grammar = None
        self.eos_token_ids, self.tokenizer, self.vocab_size = {1}, None, 129280
        self.kv_committed_len = self.kv_allocated_len = 1124
        self.spec_verify_ct = self.spec_accepted_tokens = self.decode_batch_idx = 0
        self.spec_acceptance_histogram = [0, 0, 0]
        self.mamba_ping_pong_track_buffer = self.customized_info = None
        self.return_logprob = self.return_hidden_states = self.return_routed_experts = False
        self.stream, self.finished_output, self.decoded_text = True, False, ""
        self.send_token_offset = self.send_output_token_logprobs_offset = 100
        self.send_decode_id_offset, self.cached_tokens, self.retraction_count = 0, 0, 0
        self.surr_offset, self.read_offset = 1019, 1024
        self.surr_and_decode_ids = self.origin_input_ids[1019:] + self.output_ids
        self.cur_decode_ids_len, self.lora_id, self.dllm_block_offset = 100, None, None

    def finished(self):
        return self.finished_reason is not None

    def _check_token_based_finish(self, new):
        if self.sampling_params.ignore_eos:
            return False
        matched = False
        for i, token_id in enumerate(new):
            if self.sampling_params.stop_token_ids:
                matched |= token_id in self.sampling_params.stop_token_ids
            if self.eos_token_ids:
                matched |= token_id in self.eos_token_ids
            if self.tokenizer is not None:
                matched |= token_id == self.tokenizer.eos_token_id
            if matched:
                return True
        return False

    def _check_vocab_boundary_finish(self, new):
        for token_id in new:
            if token_id > self.vocab_size or token_id < 0:
                return True
        return False

    def _check_str_based_finish(self):
        return len(self.sampling_params.stop_strs) > 0 or len(self.sampling_params.stop_regex_strs) > 0

    def check_finished(self, new_accepted_len: int = 1):
        if self.finished():
            return
        if self.to_finish:
            return
        if len(self.output_ids) >= self.sampling_params.max_new_tokens:
            return
        if self.grammar is not None:
            return
        new = self.output_ids[-new_accepted_len:]
        if self._check_token_based_finish(new):
            return
        if self._check_vocab_boundary_finish(new):
            return
        if self._check_str_based_finish():
            return

    def update_spec_acceptance_histogram(self, accepted: int):
        if len(self.spec_acceptance_histogram) <= accepted:
            self.spec_acceptance_histogram.extend([0] * (accepted - len(self.spec_acceptance_histogram) + 1))
        self.spec_acceptance_histogram[accepted] += 1

    @property
    def output_ids_through_stop(self):
        if self.finished_len is not None:
            return self.output_ids[: self.finished_len]
        return self.output_ids

    def init_incremental_detokenize(self):
        output_ids = self.output_ids_through_stop
        self.surr_and_decode_ids.extend(output_ids[self.cur_decode_ids_len:])
        self.cur_decode_ids_len = len(output_ids)
        return self.surr_and_decode_ids, self.read_offset - self.surr_offset

    def check_match_stop_str_prefix(self):
        return bool(self.sampling_params.stop_strs)


def reset(reqs):
    for r in reqs:       # keep the lists' lengths steady between repeats
        del r.output_ids[100:]
        del r.surr_and_decode_ids[105:]
        r.cur_decode_ids_len = r.send_token_offset = 100


def verify_part(reqs, accept_index, accept_index_cpu, predict_cpu, accept_length_cpu):
    """Transcribed from `EagleVerifyInput.verify` and the cycle's batch preparation."""
    for req in reqs:                                   # _draft_preprocess_decode
        req.decode_batch_idx += 1
    unfinished_index, unfinished_accept_index = [], []
    for i, (req, row) in enumerate(zip(reqs, accept_index_cpu)):
        num_accepted = 0
        for j, idx in enumerate(row):
            if idx == -1:
                break
            num_accepted += 1
            token = predict_cpu[idx]
            req.output_ids.append(token)
            req.check_finished()
            if req.finished():
                break
            else:
                if req.grammar is not None:
                    pass
        req.kv_committed_len += num_accepted
        req.kv_allocated_len = req.kv_committed_len
        if not req.finished():
            unfinished_index.append(i)
            if idx == -1:
                unfinished_accept_index.append(accept_index[i, :j])
            else:
                unfinished_accept_index.append(accept_index[i])
        req.spec_verify_ct += 1
        accepted = sum(1 for idx in row if idx != -1) - 1
        req.spec_accepted_tokens += accepted
        req.update_spec_acceptance_histogram(accepted)
    extend_lens = [x + 1 for x in accept_length_cpu]   # prepare_extend_after_decode
    for _ in range(3):                                 # get_model_worker_batch: draft, verify, extend
        lora_ids = [req.lora_id for req in reqs]
        offsets = [req.dllm_block_offset for req in reqs]
    keep = [i for i in range(len(reqs)) if not reqs[i].finished() and reqs[i] not in []]
    return extend_lens, lora_ids, offsets, keep


def result_part(reqs, next_token_ids):
    """Transcribed from `process_batch_result_decode` (spec v1: ids a device tensor)."""
    enable_overlap, is_spec_v2, spec_none = False, False, False
    for i, (req, next_token_id) in enumerate(zip(reqs, next_token_ids)):
        if enable_overlap and (req.finished()):
            continue
        new_accepted_len = 1
        if spec_none:
            req.output_ids.append(next_token_id)
        elif is_spec_v2:
            pass
        if req.mamba_ping_pong_track_buffer is not None:   # _mamba_prefix_cache_update
            pass
        req.check_finished(new_accepted_len)
        if req.finished():
            pass
        if req.customized_info is not None:                 # maybe_collect_customized_info
            pass
        if req.return_logprob and spec_none:
            pass
        if req.return_hidden_states:
            pass
        if req.grammar is not None:
            pass


def stream_part(reqs):
    """Transcribed from `stream_output_generation` (streaming, no logprobs) and its send."""
    lists = [[] for _ in range(25)]
    (rids, ipcs, reasons, texts, decode_ids_list, read_offsets, output_ids, skip, spaces, no_trim,
     prompt_tokens, completion_tokens, cached, cached_details, verify_ct, accepted_tokens,
     histogram, retractions, queue_times, entry_times, delays, latencies, finished_ts, _, _) = lists
    for req in reqs:
        if req.finished():
            continue
        if req.stream:
            interval = req.sampling_params.stream_interval or 1
            should = (len(req.output_ids) % interval == 1 if interval > 1
                      else len(req.output_ids) % interval == 0)
            if should:
                should &= not req.check_match_stop_str_prefix()
        if should:
            offset = req.send_token_offset
            rids.append(req.rid)
            ipcs.append(req.http_worker_ipc)
            reasons.append(req.finished_reason.to_json() if req.finished_reason else None)
            texts.append(req.decoded_text)
            decode_ids, read_offset = req.init_incremental_detokenize()
            decode_ids_list.append(decode_ids[req.send_decode_id_offset:])
            ids = req.output_ids_through_stop
            req.send_decode_id_offset = len(decode_ids)
            read_offsets.append(read_offset)
            output_ids.append(ids[offset:])
            req.send_token_offset = len(ids)
            skip.append(req.sampling_params.skip_special_tokens)
            spaces.append(req.sampling_params.spaces_between_special_tokens)
            no_trim.append(req.sampling_params.no_stop_trim)
            prompt_tokens.append(len(req.origin_input_ids))
            completion_tokens.append(len(ids))
            cached.append(req.cached_tokens)
            cached_details.append(None)
            retractions.append(req.retraction_count)
            queue_times.append(req.time_stats.get_queueing_time())
            entry_times.append(req.time_stats.forward_entry_time)
            delays.append(req.time_stats.get_prefill_launch_delay())
            latencies.append(req.time_stats.get_prefill_launch_latency())
            finished_ts.append(req.time_stats.get_prefill_finished_ts())
            verify_ct.append(req.spec_verify_ct)
            accepted_tokens.append(req.spec_accepted_tokens)
            histogram.append(req.spec_acceptance_histogram)
            if req.return_hidden_states or req.return_routed_experts or req.customized_info:
                pass
        if req.finished():
            pass
    return pickle.dumps(lists, protocol=pickle.HIGHEST_PROTOCOL)


def per_request_us(fn, make_args, reqs) -> float:
    """The fastest of REPEATS runs of `fn(*make_args())`, per request (µs): the least disturbed
    by other work on a shared host; the inputs are made and the lists reset outside the timed
    region."""
    times = []
    for _ in range(REPEATS):
        reset(reqs)
        args = make_args()
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times) * 1e6 / len(reqs)


def measure(accepted: int) -> dict[str, float]:
    """µs per request of each part, every request accepting `accepted` tokens of the
    `STEPS + 1` a cycle can give."""
    import torch
    reqs = [Req(i) for i in range(REQUESTS)]
    row = list(range(accepted)) + [-1] * (STEPS + 1 - accepted)
    accept_index = torch.tensor([row] * REQUESTS, dtype=torch.int32)
    predict_cpu = list(range(REQUESTS * DRAFT_TOKENS))

    def verify_args():
        return reqs, accept_index, accept_index.tolist(), predict_cpu, [accepted - 1] * REQUESTS

    def result_args():      # the verified ids: sum of accepted tokens over the batch
        return reqs, torch.zeros(REQUESTS * accepted, dtype=torch.int64)

    return {"verify": per_request_us(verify_part, verify_args, reqs),
            "result": per_request_us(result_part, result_args, reqs),
            "stream": per_request_us(stream_part, lambda: (reqs,), reqs)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "spec_request_host.md"))
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    rows = {k: measure(k) for k in range(1, STEPS + 2)}
    host = (f"{cpu_model()}, Python {platform.python_version()}, torch {torch.__version__}")
    lines = ["# Per-request host work of an SGLang 0.5.9 speculative cycle, this host", "",
             f"Generated by `python benchmarks/spec_request_host.py` "
             f"({datetime.now(timezone.utc):%Y-%m-%d}, {host}). The script's docstring says "
             f"what each part transcribes. {REQUESTS} requests, the fastest of {REPEATS} runs, "
             f"µs per request.", "",
             "| tokens accepted | verify | result | stream | total |", "|---:|---:|---:|---:|---:|"]
    for k, r in rows.items():
        lines.append(f"| {k} | {r['verify']:.2f} | {r['result']:.2f} | {r['stream']:.2f} | "
                     f"{sum(r.values()):.2f} |")
    most = {part: max(r[part] for r in rows.values()) for part in ("verify", "result", "stream")}
    lines += ["", f"The largest over the tokens accepted, a bound (what `epsim.cost.scheduler_host."
              f"REQUEST_HOST_US` holds): verify {most['verify']:.1f}, result {most['result']:.1f}, "
              f"stream {most['stream']:.1f} µs a request a cycle. A request that accepts fewer "
              f"than all its drafts slices its row of `accept_index` (`[i, :j]`), dearer than "
              f"taking it whole (`[i]`)."]
    write_text(Path(args.out), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
