"""The hold-out protocol: which measured records a profile is fitted on, and which judge it.

A rule is `;`-separated clauses (`epsim calibrate --holdout`, `epsim validate --holdout`):

    fit_tokens=1,4,16,64     fit only on these tokens per rank; other counts are held out
    tokens=8,512             hold out these tokens per rank
    skew=hotset,zipf         hold out these skew kinds
    none                     hold nothing out (fit and judge on everything)

A record is held out when any clause says so. The default, `DEFAULT_RULE`, fits on tokens
per rank {1, 4, 16, ..., 4096} under uniform and Zipf routing and judges on the other token
counts and on the hot-set skew (which no fit has seen). Only the kinds the cost models predict
are split; `rebalance` and `p2p_copy` records are always fitted (they have no token axis).
"""

from __future__ import annotations

from dataclasses import dataclass

from epsim.errors import SpecError

DEFAULT_RULE = "fit_tokens=1,4,16,64,256,1024,4096;skew=hotset"
SPLIT_KINDS = ("dispatch", "combine", "experts", "moe_layer", "allreduce")
_KEYS = ("fit_tokens", "tokens", "skew")
SKEW_KINDS = ("uniform", "zipf", "hotset", "trace")     # `epsim.spec.workload.SkewSpec` kinds


@dataclass(frozen=True)
class Holdout:
    """A parsed hold-out rule.

    Attributes:
        fit_tokens: token counts the fit may use (None: any).
        tokens: token counts held out.
        skews: skew kinds held out.
    """

    fit_tokens: frozenset[int] | None = None
    tokens: frozenset[int] = frozenset()
    skews: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str | None) -> "Holdout":
        """Parse a rule; None or "default" gives `DEFAULT_RULE`.

        Raises:
            SpecError: `holdout (<text>) must ...` naming the bad clause.
        """
        text = DEFAULT_RULE if text is None or text.strip() in ("", "default") else text.strip()
        if text == "none":
            return cls()
        values: dict[str, list[str]] = {}
        for clause in filter(None, (c.strip() for c in text.split(";"))):
            key, eq, rest = clause.partition("=")
            key = key.strip()
            items = [v.strip() for v in rest.split(",") if v.strip()]
            if not eq or key not in _KEYS or not items:
                raise SpecError(f"holdout clause ({clause!r}) must be KEY=V1,V2 with KEY one of "
                                f"{list(_KEYS)}, or the rule 'none' or 'default'")
            values.setdefault(key, []).extend(items)
        if not values:
            raise SpecError(f"holdout ({text!r}) must have a clause KEY=V1,V2 with KEY one of "
                            f"{list(_KEYS)}, or be the rule 'none' or 'default'")
        try:
            fit = frozenset(int(v) for v in values["fit_tokens"]) if "fit_tokens" in values else None
            tokens = frozenset(int(v) for v in values.get("tokens", []))
        except ValueError:
            raise SpecError(f"holdout ({text!r}): token counts must be integers") from None
        if any(t < 1 for t in (fit or frozenset()) | tokens):
            raise SpecError(f"holdout ({text!r}): token counts must be >= 1")
        skews = frozenset(values.get("skew", []))
        unknown = sorted(skews - set(SKEW_KINDS))
        if unknown:
            raise SpecError(f"holdout skew ({', '.join(unknown)}) must be among {list(SKEW_KINDS)}")
        return cls(fit, tokens, skews)

    def describe(self) -> str:
        """The canonical rule text (parses back to the same Holdout)."""
        clauses = []
        if self.fit_tokens is not None:
            clauses.append("fit_tokens=" + ",".join(str(t) for t in sorted(self.fit_tokens)))
        if self.tokens:
            clauses.append("tokens=" + ",".join(str(t) for t in sorted(self.tokens)))
        if self.skews:
            clauses.append("skew=" + ",".join(sorted(self.skews)))
        return ";".join(clauses) or "none"

    @property
    def holds_out_nothing(self) -> bool:
        return self.fit_tokens is None and not self.tokens and not self.skews

    def held_out(self, record) -> bool:
        """Whether a MeasurementRecord is judged rather than fitted on."""
        if record.kind not in SPLIT_KINDS:
            return False
        tokens = record.num_tokens_per_rank
        if self.fit_tokens is not None and tokens not in self.fit_tokens:
            return True
        return tokens in self.tokens or record.skew.get("kind", "uniform") in self.skews
