#!/usr/bin/env bash
# Re-record every recorded result a cost- or engine-model change can move, each with the command
# its file names (what tests/benchmarks/ and the docs' generated sections check). Run it after a
# change that moves numbers on purpose, then read `git diff --stat` and say in the commit what
# moved and why. About 30 minutes on two shared cores (planning_answers is half of it).
#
#     scripts/rerecord.sh [--skip-planning]     # WORKERS=2 to use two processes where a script can
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${WORKERS:-1}
step() { echo "== $*" >&2; "$@" > /dev/null; }

step python benchmarks/scenario_hashes.py --write
step python benchmarks/scenario_headlines.py --write
step python benchmarks/eplb_gain.py --plots
step python benchmarks/eplb_gain.py --quick --out benchmarks/results/quick
step python benchmarks/eplb_over_time.py --write
step python benchmarks/exact_draws.py --quick --write
step python benchmarks/screen_vs_sim.py --quick --write
step python benchmarks/plan_sweep.py --quick --write
step python benchmarks/network_terms.py --write
step python benchmarks/validation_ablations.py --write
step python benchmarks/r1_h200_closed_loop.py --write
step python benchmarks/mtp_lmsys.py --write
step python benchmarks/lmsys_plain_host.py --write
step python benchmarks/gb200_wide_prefill_stages.py
step python benchmarks/lmsys_decode_stages.py
step python benchmarks/qwen_h200_decode_stages.py
step python benchmarks/deepseek_b200_decode_stages.py
step python benchmarks/deepseek_h200_decode_stages.py
step python benchmarks/lmsys_mtp_stages.py
step python benchmarks/mtp_b200_verify.py
step python benchmarks/aic_deepep_sources.py --systems h100_sxm h200_sxm b200_sxm gb200 gb300
step python benchmarks/aic_crosscheck.py
step python benchmarks/allreduce_transfer.py
step python -m tests.epsim.validate.test_silicon_scoreboard
# the readers of the committed whole-set record (benchmarks/results/silicon_rows.json.gz) whose
# tables tests/benchmarks regenerate: after a new record as after a model change
step python benchmarks/mtp_twins.py --write
step python benchmarks/pd_floor_probe.py --write
step python benchmarks/silicon_system.py --system b300_sxm --write
step python -m epsim.cli validate --published --out docs/published.md
step python -m epsim.cli validate --composition --out "$(mktemp -d)" --doc docs/validation.md
step python -m epsim.cli validate --out docs/validation --doc docs/validation.md
rm -f docs/validation/.epsim.lock
if [ "${1:-}" != "--skip-planning" ]; then
    step python benchmarks/planning_answers.py --write --workers "$workers"
fi
echo "re-recorded; now: git diff --stat" >&2
