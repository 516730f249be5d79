"""`python -m epsim.validate.silicon.inferencex_extract CLONE`: the recipe groups of InferenceX's
master config, every version of the in-scope keys, and the sweeps of them its perf changelog
started, from a local clone of SemiAnalysisAI/InferenceX (full history) into
`epsim/data/silicon/inferencex_recipes.json` (`inferencex` reads it).

Before the master config held them (December 2025), the GB200 SGLang runs were launched by
`runners/launch_gb200-nv.sh`: `bash ./submit_disagg.sh PREFILL_NODES PREFILL_WORKERS
DECODE_NODES DECODE_WORKERS FRONTENDS $ISL $OSL $CONCURRENCIES inf` under each ISL/OSL branch
(the same arguments the master config later names `PREFILL_NODES` / `DECODE_NODES`); each
version of that script is stored as a version of `dsr1-fp8-gb200-dynamo-sglang` (its model is
`deepseek-r1-0528`, FP8), with DP attention and DeepEP over every GPU as its launch scripts run,
unless a tenth argument names a script variant (`1p_4d`: `scripts/gb200-fp8/disagg/1p_4d.sh`,
`dynamo_scripts`), kept as `script` like the master config's later `SCRIPT_MODE`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from epsim.io.write import write_text
from epsim.validate.silicon.inferencex import (KEY_PREFIX, KEY_SUFFIX, MASTER_PATHS, MTP_SUFFIX,
                                               RECIPES_PATH, groups_of, in_scope_key, moment)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout


LAUNCH_SCRIPT, LAUNCH_KEY = "runners/launch_gb200-nv.sh", "dsr1-fp8-gb200-dynamo-sglang"
_BRANCH = re.compile(r'"\$ISL" = "(\d+)" \] && \[ "\$OSL" = "(\d+)"')
_LIST = re.compile(r'^\s*(\w+)="([\dx]+)"\s*$')
_SUBMIT = re.compile(r"bash \./submit_disagg\.sh (\d+) (\d+) (\d+) (\d+) \d+ \$ISL \$OSL \$(\w+)"
                     r"(?: \w+ ([\w\-]+))?")


def launch_groups(text: str) -> list[dict]:
    """The SGLang groups of one version of the GB200 launch script (module doc)."""
    groups, lists, seq = [], {}, None
    for line in text.splitlines():
        if branch := _BRANCH.search(line):
            seq = (int(branch.group(1)), int(branch.group(2)))
        if named := _LIST.match(line):
            lists[named.group(1)] = [int(c) for c in named.group(2).split("x")]
        if (submit := _SUBMIT.search(line)) and seq is not None:
            p_nodes, p_workers, d_nodes, d_workers = (int(submit.group(i)) for i in range(1, 5))
            # the tenth argument, after the request rate, is the script variant (`1p_4d`)
            script = {"script": f"gb200-fp8/disagg/{submit.group(6)}"} if submit.group(6) else {}
            groups.append({"isl": seq[0], "osl": seq[1], "speculative": "none",
                           "concurrencies": sorted(lists.get(submit.group(5), [])),
                           "prefill": {"workers": p_workers, "tp": 1, "ep": 1, "dp_attn": True,
                                       "nodes": p_nodes, **script},
                           "decode": {"workers": d_workers, "tp": 1, "ep": 1, "dp_attn": True,
                                      "nodes": d_nodes, **script}})
    return groups


def extract_launch(repo: Path) -> list[dict]:
    """Every version of the GB200 launch script with SGLang groups, as key versions."""
    out, last = [], None
    for line in reversed(_git(repo, "log", "--format=%H %cI", "--", LAUNCH_SCRIPT).splitlines()):
        sha, date = line.split()
        groups = launch_groups(_git(repo, "show", f"{sha}:{LAUNCH_SCRIPT}"))
        signature = json.dumps(groups, sort_keys=True)
        if groups and signature != last:
            out.append({"key": LAUNCH_KEY, "commit": sha, "date": date, "image": "",
                        "source": LAUNCH_SCRIPT, "groups": groups})
        last = signature
    return out


CHANGELOG = "perf-changelog.yaml"


def extract_sweeps(repo: Path, keys: set[str]) -> list[dict]:
    """Every push that started a sweep of in-scope keys: the commit that added entries to the
    perf changelog and the in-scope keys those entries name (`config-keys`, glob patterns).
    InferenceX's run-sweep workflow runs on such a push the keys its added lines name (its
    `utils/process_changelog.py` reads the lines the commit adds, as here)."""
    import fnmatch

    import yaml
    out = []
    for line in _git(repo, "log", "--format=%H %cI", "--", CHANGELOG).splitlines():
        sha, date = line.split()
        diff = _git(repo, "show", "--format=", sha, "--", CHANGELOG).splitlines()
        added = "\n".join(d[1:] for d in diff if d.startswith("+") and not d.startswith("+++"))
        try:
            entries = yaml.safe_load(added) or []
        except yaml.YAMLError:
            continue                                   # not an additions-only change
        patterns = [str(p) for e in entries if isinstance(e, dict) for p in e.get("config-keys") or []]
        named = sorted(k for k in keys if any(fnmatch.fnmatchcase(k, p) for p in patterns))
        if named:
            out.append({"commit": sha, "date": date, "keys": named})
    out.sort(key=lambda v: moment(v["date"]))
    return out


def master_versions(repo: Path):
    """(commit, ISO date, path, parsed document) of every commit of the master config files,
    oldest first; a commit whose file does not parse is skipped. Needs `git` and PyYAML."""
    import yaml
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    commits = []
    for path in MASTER_PATHS:
        for line in _git(repo, "log", "--format=%H %cI", "--", path).splitlines():
            sha, date = line.split()
            commits.append((moment(date), sha, date, path))
    for _, sha, date, path in sorted(commits):
        try:
            doc = yaml.load(_git(repo, "show", f"{sha}:{path}"), Loader=loader) or {}
        except (subprocess.CalledProcessError, yaml.YAMLError):
            continue
        yield sha, date, path, doc


def _side(recipe) -> dict:
    """A recipe as stored: its fields, less an unset `script`."""
    # the role is the key the side sits under
    return {k: v for k, v in vars(recipe).items() if k != "role" and (k != "script" or v)}


def extract(repo: Path) -> dict:
    """Every version of the in-scope keys in the master config's history (consecutive commits
    with the same groups kept once, at the first). Needs `git` and PyYAML's C loader."""
    last: dict[str, str] = {}
    out = []
    for sha, date, path, doc in master_versions(repo):
        for key, config in doc.items():
            if not (isinstance(config, dict) and in_scope_key(key)):
                continue
            groups = [{"isl": g.isl, "osl": g.osl, "concurrencies": list(g.concurrencies),
                       "prefill": _side(g.prefill), "decode": _side(g.decode),
                       "speculative": g.speculative}
                      for g in groups_of(key, config, sha, date)]
            signature = json.dumps([config.get("image"), groups], sort_keys=True)
            if last.get(key) == signature:
                continue
            last[key] = signature
            out.append({"key": key, "commit": sha, "date": date, "image": str(config.get("image", "")),
                        "source": path, "groups": groups})
    # the launch script's versions up to the first master-config version of its key
    first = min((moment(v["date"]) for v in out if v["key"] == LAUNCH_KEY), default=None)
    out += [v for v in extract_launch(repo) if first is None or moment(v["date"]) < first]
    out.sort(key=lambda v: (v["key"], moment(v["date"])))
    sweeps = extract_sweeps(repo, {v["key"] for v in out})
    head = _git(repo, "rev-parse", "HEAD").strip()
    return {"source": "SemiAnalysisAI/InferenceX (Apache-2.0), " + ", ".join(MASTER_PATHS)
            + ", " + LAUNCH_SCRIPT + " and " + CHANGELOG,
            "head": head, "keys": f"{KEY_PREFIX}*{KEY_SUFFIX}[{MTP_SUFFIX}]", "versions": out,
            "sweeps": sweeps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    parser.add_argument("clone", type=Path, help="a local clone of SemiAnalysisAI/InferenceX (full history)")
    parser.add_argument("--out", type=Path, default=RECIPES_PATH)
    args = parser.parse_args(argv)
    if not (args.clone / ".git").exists() and not (args.clone / "HEAD").exists():
        print(f"clone ({args.clone}) must be a git clone of SemiAnalysisAI/InferenceX", file=sys.stderr)
        return 2
    data = extract(args.clone)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{len(data['versions'])} versions of {len({v['key'] for v in data['versions']})} keys, "
          f"{len(data['sweeps'])} sweeps "
          f"-> {args.out} (InferenceX {data['head'][:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
