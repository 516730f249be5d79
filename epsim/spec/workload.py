"""What the deployment serves: request arrivals, lengths, and how tokens pick experts.

Arrivals are open loop (requests arrive at times drawn before the run: Poisson, bursty, a
trace) or closed loop (`concurrency`: a fixed number of clients, each sending its next request
when its last one finished, as `sglang.bench_serving --max-concurrency` and aiperf's
`--concurrency` drive a server). Lengths are drawn as the benchmark tools draw them: fixed,
uniform, lognormal, or `random` (bench_serving's random dataset with `--random-range-ratio`).
`prompt_kind` says what the prompts are (natural text, random token ids with or without the
chat template), which sets a speculative run's acceptance (`epsim.sim.accept_sources`).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

STEADY = "steady"     # initial_running_per_rank: start at the screen's steady batch (`epsim.plan.screen`)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- expert-popularity skew -----------------------------------------------------------------
class _SkewCommon(_Strict):
    layer_variation: float = Field(
        default=0.0, ge=0, le=10, description="sigma of log-normal noise on popularity per "
                                              "[layer, expert] (<= 10: e^10 is already 2e4x)")
    shuffle_per_layer: bool = Field(default=True, description="hot experts differ from layer to layer")
    drift_rate_per_s: float = Field(
        default=0.0, ge=0, le=100, description="popularity swaps per expert per simulated second "
                                               "(<= 100: faster reshuffles every step anyway)")


class UniformSkew(_SkewCommon):
    kind: Literal["uniform"] = "uniform"


class ZipfSkew(_SkewCommon):
    """Popularity of the i-th most popular expert proportional to i^-alpha."""
    kind: Literal["zipf"] = "zipf"
    alpha: float = Field(gt=0)


class HotSetSkew(_SkewCommon):
    """`num_hot` experts take `hot_frac` of all routed token slots."""
    kind: Literal["hotset"] = "hotset"
    num_hot: int = Field(gt=0)
    hot_frac: float = Field(gt=0, lt=1)


class TraceSkew(_SkewCommon):
    """Replay of recorded expert loads: our JSONL, or an SGLang expert-distribution dump (.pt)."""
    kind: Literal["trace"] = "trace"
    path: str = Field(min_length=1)


SkewSpec = Annotated[Union[UniformSkew, ZipfSkew, HotSetSkew, TraceSkew], Field(discriminator="kind")]


# -- request lengths --------------------------------------------------------------------------
class FixedLength(_Strict):
    kind: Literal["fixed"] = "fixed"
    value: int = Field(gt=0)

    @property
    def mean_tokens(self) -> float:
        return float(self.value)

    @property
    def max_tokens(self) -> int:
        return self.value


class UniformLength(_Strict):
    kind: Literal["uniform"] = "uniform"
    low: int = Field(gt=0)
    high: int = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> "UniformLength":
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    @property
    def mean_tokens(self) -> float:
        return (self.low + self.high) / 2.0

    @property
    def max_tokens(self) -> int:
        return self.high


class RandomRatioLength(_Strict):
    """`sglang.bench_serving --dataset-name random`: uniform integers in
    `[max(int(value * range_ratio), 1), value]` (`--random-input-len` / `--random-output-len`
    with `--random-range-ratio`; bench_serving's default ratio 0.0). bench_serving's output
    floor is `int(value * range_ratio)` without the `max(.., 1)`; a request makes at least one
    token here."""
    kind: Literal["random"] = "random"
    value: int = Field(gt=0, description="the length at range_ratio 1 (the upper end)")
    range_ratio: float = Field(default=0.0, ge=0, le=1)

    @property
    def low(self) -> int:
        return max(int(self.value * self.range_ratio), 1)

    @property
    def mean_tokens(self) -> float:
        return (self.low + self.value) / 2.0

    @property
    def max_tokens(self) -> int:
        return self.value


class LogNormalLength(_Strict):
    kind: Literal["lognormal"] = "lognormal"
    mean: float = Field(gt=0, description="mean length, tokens")
    sigma: float = Field(default=0.5, ge=0)
    max: int = Field(default=32768, gt=0)

    @property
    def mean_tokens(self) -> float:
        """The spec's `mean` (its `max` clip ignored)."""
        return float(self.mean)

    @property
    def max_tokens(self) -> int:
        return self.max


LengthSpec = Annotated[Union[FixedLength, UniformLength, RandomRatioLength, LogNormalLength],
                       Field(discriminator="kind")]


# -- arrivals -----------------------------------------------------------------------------------
class PoissonArrivals(_Strict):
    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(gt=0, description="requests per second, whole instance")


class BurstyArrivals(_Strict):
    """Gamma-distributed gaps: coefficient of variation `cv` > 1 gives bursts."""
    kind: Literal["bursty"] = "bursty"
    rate_per_s: float = Field(gt=0)
    cv: float = Field(default=3.0, ge=1e-3, le=1e3,
                      description="gap coefficient of variation; gamma shape 1/cv^2 stays finite")


class TraceArrivals(_Strict):
    """Arrival times (and optionally lengths) from a CSV/JSONL file with `arrival_s` per row."""
    kind: Literal["trace"] = "trace"
    path: str = Field(min_length=1)


class ConcurrencyArrivals(_Strict):
    """Closed loop: `clients` clients, each with one request in flight, sending its next one
    `think_time_s` after its last one finished (`sglang.bench_serving --max-concurrency N` with
    its default infinite request rate: every client sends at t=0; aiperf `--concurrency N`).
    For a decode instance alone, `think_time_s` may carry the prefill side's time to first
    token (the client's next request reaches the decode instance that much later). For a
    prefill instance alone, `think_per_output_token_s` x (the request's output tokens - 1) adds
    the decode side's time after the first token to each client's wait: each request's own
    output length (drawn from `output_len` as the harness draws it), so clients whose outputs
    differ do not stay in lockstep. With `num_requests`, the run is one benchmark run: that
    many requests, the first `clients` of them sent at t=0 into an idle server, none after the
    last."""
    kind: Literal["concurrency"] = "concurrency"
    clients: int = Field(gt=0, le=1_000_000)
    think_time_s: float = Field(default=0.0, ge=0, le=3600)
    think_per_output_token_s: float = Field(
        default=0.0, ge=0, le=60, description="a client's further wait per output token after "
        "the first of the request that ended (a P/D prefill instance's clients: the decode's "
        "TPOT); 0: every client waits think_time_s alone")
    num_requests: int | None = Field(
        default=None, gt=0, le=1_000_000_000, description="requests the clients send in all, "
        "then stop (bench_serving's --num-prompts: the last ones run with fewer clients); "
        "None: they send until the run ends")

    @model_serializer(mode="wrap")
    def _without_unbounded(self, handler):
        # an open-ended loop, and one with no per-token wait, are written as before the fields
        # existed (their summaries keep their bits)
        data = handler(self)
        if self.num_requests is None:
            data.pop("num_requests", None)
        if self.think_per_output_token_s == 0:
            data.pop("think_per_output_token_s", None)
        return data


ArrivalSpec = Annotated[Union[PoissonArrivals, BurstyArrivals, TraceArrivals, ConcurrencyArrivals],
                        Field(discriminator="kind")]


class RetrySpec(_Strict):
    """What a client does with a request whose DP rank died (elastic EP, `epsim.sim.retries`).

    SGLang never answers such a request: its tokenizer manager waits on it in 4-s rounds that
    check only for a client disconnect (`managers/tokenizer_manager.py` `_wait_one_response`,
    0.5.9 lines 1100-1126, 0.5.12 1285-1311; `SGLANG_REQUEST_STATE_WAIT_TIMEOUT`, `environ.py`
    480), and nothing in the server resends it. The client finds out by its own timeout, counted from its send.
    The defaults are `sglang.bench_serving`'s (aiohttp `ClientTimeout(total=6 h)`, one attempt:
    `bench_serving.py` 73-78); SGLang's router times a request out after 1800 s and retries a
    failed one up to 5 attempts in all, 50 ms x 1.5^k apart (`sgl-router/src/config/types.rs`
    `request_timeout_secs`, `RetryConfig::default`; `src/core/retry.rs` `calculate_delay`)."""
    timeout_s: float = Field(
        default=21600.0, gt=0, le=1e7, description="the client's timeout per attempt, from its "
        "send (bench_serving: 6 h; sgl-router: 1800 s)")
    max_attempts: int = Field(
        default=1, ge=1, le=100, description="sends per request in all (1: never resent, as "
        "bench_serving; sgl-router: 5)")
    backoff_s: float = Field(
        default=0.05, ge=0, le=3600, description="wait before the first resend after a timeout, "
        "x1.5 before each further one (sgl-router: 50 ms, jitter left out)")


class WorkloadSpec(_Strict):
    """Requests over `duration_s` simulated seconds; statistics skip the first `warmup_s`."""

    arrivals: ArrivalSpec = Field(default_factory=lambda: PoissonArrivals(rate_per_s=10.0))
    input_len: LengthSpec = Field(default_factory=lambda: FixedLength(value=1024))
    output_len: LengthSpec = Field(default_factory=lambda: FixedLength(value=256))
    skew: SkewSpec = Field(default_factory=UniformSkew)
    duration_s: float = Field(default=30.0, gt=0)
    warmup_s: float = Field(default=0.0, ge=0)
    retry: RetrySpec = Field(default_factory=RetrySpec)
    prompt_kind: Literal["natural", "random_chat", "random"] = Field(
        default="natural", description="what the prompts are, which sets a speculative run's "
        "acceptance where the deployment states none (`epsim.sim.accept_sources`): natural "
        "text; random_chat: random token ids in the model's chat template (InferenceX's MTP "
        "harness, --use-chat-template); random: raw random token ids (bench_serving's random "
        "dataset, no template)")
    initial_running_per_rank: int | Literal["steady"] = Field(
        default=0, description="decode requests already running per DP rank at t=0; 'steady': "
                               "the screen's steady batch at this workload and deployment (closed "
                               "loop: the clients' requests, part-way done)")

    @field_validator("initial_running_per_rank", mode="before")
    @classmethod
    def _initial(cls, value):
        if value == STEADY or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            return value
        raise ValueError(f"initial_running_per_rank ({value!r}) must be an integer >= 0 or "
                         f"'{STEADY}' (the screen's steady batch)")

    @model_serializer(mode="wrap")
    def _without_default_prompts(self, handler):
        # natural prompts are written as before the field existed (their summaries keep their bits)
        data = handler(self)
        if self.prompt_kind == "natural":
            data.pop("prompt_kind", None)
        return data

    @model_validator(mode="after")
    def _window(self) -> "WorkloadSpec":
        if self.warmup_s >= self.duration_s:
            raise ValueError(f"warmup_s ({self.warmup_s}) must be < duration_s ({self.duration_s})")
        return self
