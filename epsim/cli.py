"""The `epsim` command line. Parses only: each subcommand's work lives in
`epsim.commands.<name>.run(args) -> exit code`, imported when that subcommand runs.

Exit codes: 0 success, 1 a run that finished but failed its check, 2 bad input (one line on
stderr, no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import warnings

from epsim import __version__, vocab
from epsim.commands import output
from epsim.errors import EpsimError, did_you_mean
from epsim.interrupts import Terminated, interrupts_handled
from epsim.plan.executors import executor_options


class _Parser(argparse.ArgumentParser):
    """Every subcommand's parser: no abbreviated options (`--mode` is not `--model`); its
    errors one line and exit code 2 (no usage block first), a JSON object on stdout with
    `--json`; an unknown option is named (with the nearest known one) before any missing one."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self._argv: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)
        # required options and groups are checked after the unknown ones, not before
        required = [a for a in self._actions if a.required]
        groups = [g for g in self._mutually_exclusive_groups if g.required]
        for item in required + groups:
            item.required = False
        try:
            namespace, extras = super().parse_known_args(args, namespace)
        finally:
            for item in required + groups:
                item.required = True
        unknown = [e for e in extras if e.startswith("-") and e != "-"]
        if unknown:
            name = unknown[0].split("=", 1)[0]
            guess = did_you_mean(name, [o for a in self._actions for o in a.option_strings])
            self.error(f"unrecognized arguments: {' '.join(unknown)}" + (f"; {guess}" if guess else ""))
        missing = [a.option_strings[0] if a.option_strings else (a.metavar or a.dest)
                   for a in required if getattr(namespace, a.dest, None) is None]
        missing += ["one of " + " or ".join(a.option_strings[0] for a in g._group_actions)
                    for g in groups if all(getattr(namespace, a.dest, None) in (None, False)
                                           for a in g._group_actions)]
        if missing:
            self.error(f"the following arguments are required: {', '.join(missing)}")
        return namespace, extras

    def error(self, message: str):
        if "--json" in self._argv:
            self.exit(2, json.dumps({"error": f"{self.prog}: {one_line(message)}", "exit_code": 2})
                      + "\n")
        self.exit(2, f"{self.prog}: error: {one_line(message)}; see {self.prog} --help\n")

    def _print_message(self, message, file=None):
        # `exit(2, json)` writes to stderr; a JSON error belongs on stdout with the JSON output
        if message and message.startswith('{"error"'):
            file = sys.stdout
        super()._print_message(message, file)


def _scenario_options(parser, what: str, set_example: str) -> None:
    """`--profile`, `--seed` and `--set`: how a command that runs a scenario changes it."""
    parser.add_argument("--profile", default=None,
                        help=f"calibration profile for {what}: a JSON file or a shipped profile's "
                             f"name (aic_b200; `epsim hardware` lists them); default: the "
                             f"scenario's own, else the default of its GPU (docs/model.md, 6)")
    parser.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override a field by dotted path, e.g. {set_example} (repeatable)")


def _strict_option(parser) -> None:
    parser.add_argument("--strict", action="store_true",
                        help="a bad record line is an error, not a warning")


def _budget_option(parser) -> None:
    parser.add_argument("--no-budget-check", action="store_true",
                        help="run even when the cost estimated beforehand exceeds the budget "
                             "(memory, steps x layers x ranks, sweep points; epsim.budget)")


def _add_simulate(sub) -> None:
    p = sub.add_parser("simulate", help="simulate a scenario (SimPy engine)",
                       description="Simulate serving a scenario and report throughput, TTFT, TPOT.")
    p.add_argument("scenario", nargs="?", default=None,
                   help="scenario YAML (default: the shipped default scenario)")
    _scenario_options(p, "the run", "deployment.ep_size=16")
    p.add_argument("--out", help="results directory (summary.json, timeseries.csv, PNG figures)")
    p.add_argument("--no-plots", action="store_true", help="skip PNG figures")
    p.add_argument("--timeline", action="store_true",
                   help="also write a per-layer timeline of one step (timeline.json, Chrome trace)")
    _budget_option(p)
    output.add_options(p)


def _add_cost(sub) -> None:
    p = sub.add_parser("cost", help="predict one MoE layer's dispatch/experts/combine time",
                       description="One MoE layer's predicted dispatch, expert and combine time "
                                   "(docs/model.md).")
    p.add_argument("--model", required=True, help="zoo model name or HF config.json")
    p.add_argument("--cluster", default="H200", help="zoo GPU name (nodes = ep / GPUs per node)")
    p.add_argument("--backend", required=True, help=" | ".join(vocab.A2A_BACKENDS))
    p.add_argument("--deepep-mode", default="auto", choices=list(vocab.DEEPEP_MODE_CHOICES),
                   help="DeepEP kernels for --backend deepep (default auto, as SGLang and the "
                        "scenarios: normal in prefill, low_latency in decode)")
    p.add_argument("--ep", required=True,
                   help="EP size (ranks, one GPU each); several print one table: 8,16,32")
    p.add_argument("--tokens-per-rank", required=True,
                   help="tokens each rank holds before dispatch; several print one table: "
                        "64,128 or 1-4096 (doubling: 1, 2, 4, ... 4096)")
    p.add_argument("--skew", default="uniform", help="uniform | zipf:ALPHA | hotset:K:FRAC | trace:PATH")
    p.add_argument("--dispatch-dtype", default="bf16", choices=list(vocab.DISPATCH_DTYPES),
                   help="dtype of the dispatched activations (default bf16)")
    p.add_argument("--mode", default="auto", choices=["auto", "graph", "eager"],
                   help="graph: device time (CUDA-graph step); eager: device + host overhead; "
                        "auto (default): what SGLang runs for the phase (decode graph, prefill eager)")
    p.add_argument("--phase", default=None, choices=["prefill", "decode"],
                   help="default: decode up to cuda_graph_max_bs tokens per rank, else prefill")
    p.add_argument("--network", default=None,
                   help="infiniband | roce | efa | nvl72 (default: the GPU's datasheet network)")
    p.add_argument("--profile", help="calibration profile: a JSON file or a shipped profile's name "
                                     "(aic_b200); default: the default of --cluster's GPU "
                                     "(docs/model.md, section 6)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled routing (default 0)")
    output.add_options(p)


def _add_eplb(sub) -> None:
    p = sub.add_parser("eplb", help="compute an EPLB placement from expert loads",
                       description="An EPLB placement from expert loads, its balance, and what a "
                                   "rebalance to it would move and cost (docs/eplb.md).")
    p.add_argument("loads_file", nargs="?", help="same as --loads")
    p.add_argument("--loads", help="loads: JSON, NPY, CSV ([layers, experts]) or an SGLang dump")
    p.add_argument("--replicas", type=int, required=True, help="physical expert slots per layer")
    p.add_argument("--groups", type=int, default=1,
                   help="expert groups of the model (DeepSeek-V3: 8; default 1); the hierarchical "
                        "policy applies when groups divide over nodes")
    p.add_argument("--nodes", type=int, default=1, help="nodes the GPUs span (default 1)")
    p.add_argument("--gpus", type=int, required=True,
                   help="GPUs (EP ranks) in all; must divide --replicas")
    p.add_argument("--gpu", default="H200",
                   help="zoo GPU whose links price the rebalance's weight moves (default H200)")
    p.add_argument("--model", default=None,
                   help="zoo model whose expert size prices the moves (default: the zoo model "
                        "with as many experts as the loads, if exactly one)")
    p.add_argument("--algorithm", default="deepseek",
                   help="deepseek | deepseek_hierarchical | deepseek_global | sticky")
    p.add_argument("--previous", help="previous placement JSON (an `--json` output, or phy2log) "
                                       "for move-aware algorithms and the move cost")
    p.add_argument("--out", default=None,
                   help="directory for the maps: expert_location.json (SGLang's "
                        "--init-expert-location), logical_count.json (the loads, SGLang's other "
                        "form), placement.json (epsim's maps, --previous), eplb.json (the summary)")
    _budget_option(p)
    output.add_options(p)


def _add_calibrate(sub) -> None:
    p = sub.add_parser("calibrate", help="fit a profile from measurements (live or recorded)",
                       description="Fit a calibration profile on measured records, measuring them "
                                   "first with --live (docs/calibration.md).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--live", action="store_true", help="run the live bench, then fit")
    src.add_argument("--records", nargs="+",
                     help="fit offline from record files (JSONL), or aic:SYSTEM[/FRAMEWORK[/VERSION]]: "
                          "an installed aiconfigurator-core's op tables (docs/aic_tables.md)")
    p.add_argument("--gpus", type=int, default=None,
                   help="local GPUs to use (default: all visible; 1: the single-GPU components; "
                        "no GPU: 2 CPU ranks)")
    p.add_argument("--backends", nargs="+", default=None, help="backends to measure")
    p.add_argument("--quick", action="store_true", help="a small sweep (minutes)")
    p.add_argument("--out", default=None, help="profile JSON to write")
    p.add_argument("--records-out", default=None,
                   help="where the live bench writes its records (default runs/calibrate/records.jsonl); "
                        "with --records aic:...: the imported records (default runs/aic/)")
    p.add_argument("--holdout", default=None,
                   help="hold-out rule: 'default' (fit_tokens=1,4,16,64,256,1024,4096;skew=hotset), "
                        "'none', or clauses like 'tokens=64,1024;skew=zipf' (docs/calibration.md)")
    p.add_argument("--name", default=None, help="profile name")
    p.add_argument("--spread-records", nargs="+", default=None, metavar="FILE",
                   help="another run's records: used only for each component's run-to-run "
                        "spread (p10/p90 bands), never fitted on")
    _strict_option(p)
    p.add_argument("--cpu", action="store_true", help="--live on CPU ranks (gloo) even with GPUs")
    p.add_argument("--budget-s", type=float, default=float("inf"),
                   help="--live: stop starting points after this many seconds (records kept)")
    p.add_argument("--eplb", action="store_true", help="--live: also run live.bench.eplb")
    output.add_options(p)


def _add_validate(sub) -> None:
    p = sub.add_parser("validate", help="predicted against measured, per record",
                       description="The profile's predictions against measured records by the "
                                   "hold-out protocol: a one-screen summary here, the full tables "
                                   "and plots under --out (docs/validation.md).")
    p.add_argument("--profile", default=None, help="profile JSON or a shipped profile's name "
                                                   "(default: shipped h200x2)")
    p.add_argument("--records", nargs="+", default=None, help="record files (default: shipped)")
    p.add_argument("--holdout", default=None,
                   help="hold-out rule (default: the one the profile was fitted with)")
    p.add_argument("--out", default="runs/validate",
                   help="directory for the full tables (markdown, CSV) and PNG plots "
                        "(default runs/validate)")
    p.add_argument("--doc", default=None,
                   help="markdown file whose generated section gets the tables (docs/validation.md)")
    p.add_argument("--max-mape", type=float, default=None,
                   help="exit 1 if a backend's held-out MAPE of a kind exceeds this percent")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    _strict_option(p)
    p.add_argument("--no-extrapolation", action="store_true",
                   help="skip the extrapolation hold-outs (tokens, shape, run) and their baselines")
    p.add_argument("--run-fit", nargs="+", default=None,
                   help="run hold-out: record files of one run to fit on")
    p.add_argument("--run-judged", nargs="+", default=None,
                   help="run hold-out: another run's record files to judge")
    output.add_options(p)
    p.add_argument("--published", action="store_true",
                   help="published results (DeepEP, LMSYS, TensorRT-LLM, EPLB reports) against "
                        "datasheet predictions; --out FILE writes the table (docs/published.md)")
    p.add_argument("--composition", action="store_true",
                   help="the composition axis: whole decoder layers and stacks measured on one GPU "
                        "(live.bench.layers; default records: the shipped h200_layer set) against "
                        "the simulator's layer, per a2a backend; --out DIR writes composition.md "
                        "and composition.csv, --doc FILE its section (docs/validation.md)")
    p.add_argument("--timing", choices=("device", "eager"), default="device",
                   help="--composition: the records' timing to judge (default device: CUDA-graph "
                        "replays, what a decode step pays; eager: one call from an idle device, "
                        "priced as an eager step; all a CPU run has)")
    p.add_argument("--silicon", nargs="?", const="", default=None, metavar="CSV",
                   help="the public silicon sample's SGLang MoE rows (default CSV: an installed "
                        "aiconfigurator-core's), epsim beside AIConfigurator; --doc docs/silicon.md "
                        "regenerates the page, --out DIR gets silicon_rows.json.gz and "
                        "silicon_features.md (docs/silicon.md)")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="with --silicon: N in-scope rows drawn by --seed")
    p.add_argument("--seed", type=int, default=0, help="with --silicon --sample: the draw's seed")
    p.add_argument("--approximate", action="store_true",
                   help="with --silicon: rows the spec cannot express run as the nearest scenario "
                        "it can, and rows several InferenceX deployments fit as every candidate "
                        "(their geometric mean and spread), tagged and tabled apart (never in the "
                        "headline)")
    p.add_argument("--no-peer", action="store_true", help="with --silicon: skip AIConfigurator")
    p.add_argument("--peer-cache", default=None, metavar="FILE",
                   help="with --silicon: AIConfigurator's answers kept between runs, asked again "
                        "only for new rows or another installed version (default with --out: "
                        "DIR/silicon_peer.json.gz)")
    executor_options(p)
    p.add_argument("--ray-address", default=None, help="with --executor ray: ray.init(address=...)")


def _add_plan(sub) -> None:
    p = sub.add_parser("plan", help="sweep a scenario over deployment choices",
                       description="Cartesian sweep of a scenario: results table, Pareto frontier, "
                                   "best configuration under constraints (docs/planning.md).")
    p.add_argument("scenario", help="scenario YAML")
    p.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2",
                   help="dotted key and values, e.g. deployment.ep_size=8,16,32 or a range "
                        "8:128:x2 / 0:64:+16 (repeatable; points are the Cartesian product)")
    p.add_argument("--objective", action="append", default=[],
                   help="min:METRIC or max:METRIC, first one decides (repeatable; default "
                        "min:num_gpus, then max:slo_margin -- the largest margin to the latency "
                        "constraints --, then min:tpot_ms.p99, min:ttft_ms.p99)")
    p.add_argument("--constraint", action="append", default=[],
                   help="METRIC<=VALUE etc., e.g. 'tpot_ms.p99<=50' (repeatable)")
    p.add_argument("--pareto", action="append", default=[],
                   help="objectives of the Pareto frontier (repeatable; default min:num_gpus, "
                        "min:tpot_ms.p99, max:throughput_tokens_per_s_per_gpu)")
    executor_options(p)
    p.add_argument("--ray-address", default=None, help="ray.init(address=...); default: a local runtime")
    p.add_argument("--out", default=None, help="results directory (resumable)")
    _scenario_options(p, "every point", "workload.duration_s=10")
    p.add_argument("--no-plots", action="store_true", help="skip pareto.png and sweep.png")
    p.add_argument("--max-rate", action="store_true",
                   help="per deployment point, bisect workload.arrivals.rate_per_s for the highest "
                        "rate that meets the constraints and keep-up (a closed loop: "
                        "workload.arrivals.clients, the most concurrent clients)")
    p.add_argument("--no-keep-up", action="store_true",
                   help="judge points by the constraints alone (default: a feasible point must "
                        "also serve its offered load, docs/planning.md)")
    p.add_argument("--screen", action="store_true",
                   help="two tiers: screen every point analytically (no event loop), simulate "
                        "only the screen's candidates and their neighbours (docs/planning.md)")
    p.add_argument("--screen-margin", type=float, default=None, metavar="FRAC",
                   help="with --screen: a candidate meets each constraint within this share of "
                        "its bound by the screen's estimate (default 0.25)")
    p.add_argument("--screen-top", type=int, default=None, metavar="N",
                   help="with --screen: also simulate the N best by the objectives (default 3)")
    p.add_argument("--warm-start", action="store_true",
                   help="start each simulated decode point at the screen's steady batch "
                        "(workload.initial_running_per_rank), so a short run measures the steady "
                        "state, not its fill (docs/planning.md)")
    p.add_argument("--fleet", action="store_true",
                   help="size prefill and decode pools (instances, EP size, backend: the --sweep "
                        "deployment.* values) for the scenario's workload under "
                        "--constraint ttft_ms.p99<=MS and tpot_ms.p99<=MS (docs/planning.md)")
    p.add_argument("--kv-transfer", default="mooncake", choices=["mooncake", "nccl"],
                   help="with --fleet: the KV-cache path between the pools (default mooncake)")
    p.add_argument("--no-verify", action="store_true",
                   help="with --fleet: the screen's answer only, without simulating the pools")
    p.add_argument("--emit", choices=["sglang"], default=None,
                   help="also print the answer as launch commands: sglang = SGLang server arguments "
                        "per instance (a prefill/decode pair and the router with --fleet); a "
                        "deployment value SGLang has no setting for is refused, never guessed")
    _budget_option(p)
    output.add_options(p)


def _add_compare(sub) -> None:
    p = sub.add_parser("compare", help="two runs side by side with the deltas",
                       description="Two runs side by side: what differs between their scenarios, "
                                   "TPOT/TTFT/throughput/serving numbers with B - A, and where a "
                                   "MoE layer's time moved (attention, dispatch, experts, combine).")
    p.add_argument("run_a", help="results directory of `epsim simulate --out`, its summary.json, "
                                 "or a scenario YAML (simulated)")
    p.add_argument("run_b", help="the same for B")
    p.add_argument("--set-a", action="append", default=[], metavar="KEY=VALUE",
                   help="change A's scenario YAML by dotted path (repeatable)")
    p.add_argument("--set-b", action="append", default=[], metavar="KEY=VALUE",
                   help="change B's scenario YAML, e.g. deployment.moe_a2a_backend=deepep")
    output.add_options(p)


def one_line(text: str) -> str:
    """A message on one line: line breaks and runs of spaces folded to one space."""
    return " ".join(str(text).split())


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="epsim", description="Simulate MoE inference with expert parallelism, "
                                  "calibrated against live GPU measurements.")
    parser.add_argument("--version", action="version", version=f"epsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    _add_simulate(sub)
    _add_cost(sub)
    _add_eplb(sub)
    _add_calibrate(sub)
    _add_validate(sub)
    _add_plan(sub)
    _add_compare(sub)
    output.add_options(sub.add_parser("models", help="list the model zoo"))
    output.add_options(sub.add_parser("hardware", help="list the hardware zoo"))
    return parser


_COMMAND_MODULE = {"models": "zoo", "hardware": "zoo"}


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings as one line on stderr (`epsim: ExtrapolationWarning: ...`), no source echo."""
    return f"epsim: {category.__name__}: {message}\n"


def main(argv: list[str] | None = None) -> int:
    with interrupts_handled():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    warnings.formatwarning = _one_line_warning
    parser = build_parser()
    args = parser.parse_args(argv)
    try:                                   # a Ctrl-C while the command imports is one line too
        module = importlib.import_module(f"epsim.commands.{_COMMAND_MODULE.get(args.command, args.command)}")
        with output.caught_warnings() as warned:
            report = module.run(args)
        if isinstance(report, output.Report):
            return output.emit(report, args, warned)
        for note in output.merge_notes(warned):     # a command that prints for itself
            print(f"note: {note}")
        return int(report or 0)
    except EpsimError as exc:
        output.print_error(f"epsim {args.command}", one_line(exc), args)
        return 2
    except BrokenPipeError:                # `epsim ... | head`: the reader has gone
        sys.stderr.close()
        return 0
    except KeyboardInterrupt as exc:
        name = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
        print(f"epsim {args.command}: interrupted ({name}); files are written whole or not at "
              f"all: a results directory it was writing is marked incomplete, and a plan's "
              f"finished points are kept for a rerun", file=sys.stderr)
        return 143 if name == "SIGTERM" else 130


if __name__ == "__main__":
    sys.exit(main())
