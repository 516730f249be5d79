"""`any/serving_host`: the GPU serving host's figures carried into a profile from their record."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from epsim.calibrate.serving_host import KEY, main
from epsim.profile import Profile, default_profile_path

ROOT = Path(__file__).resolve().parents[3]
RESULT = ROOT / "epsim/data/records/host/serving_host_gpu.json"
LOOP_OPS = ROOT / "epsim/data/records/host/serving_loop_ops_gpu.json"


def test_the_shipped_profile_carries_the_record_as_measured():
    result = json.loads(RESULT.read_text())
    params = Profile.load(default_profile_path()).params("any", "serving_host")
    assert params["readback_us"] == result["cuda"]["readback_us"]
    assert params["gloo_all_gather_16_us"] == result["gloo"]["16"]["all_gather"]["median_us"]
    data = json.loads(default_profile_path().read_text())
    entry = next(e for e in data["provenance"]["records"] if e["path"].endswith(RESULT.name))
    assert entry["sha256"] == hashlib.sha256(RESULT.read_bytes()).hexdigest()
    assert "measured on a GPU host: NVIDIA H100" in data["components"][KEY]["note"]
    # the scheduler loop's launches: the loop-ops record's mean, its file listed beside
    assert params["loop_launch_us"] == json.loads(LOOP_OPS.read_text())["mean_us"]
    entry = next(e for e in data["provenance"]["records"] if e["path"].endswith(LOOP_OPS.name))
    assert entry["sha256"] == hashlib.sha256(LOOP_OPS.read_bytes()).hexdigest()


def test_the_cli_writes_the_component_in_place_and_refuses_a_run_without_gpu(tmp_path, capsys):
    profile = tmp_path / "p.json"
    shutil.copy(default_profile_path(), profile)
    data = json.loads(profile.read_text())
    del data["components"][KEY]
    profile.write_text(json.dumps(data))
    assert main([str(RESULT), "--profile", str(profile)]) == 0
    assert json.loads(profile.read_text())["components"][KEY]["params"]["launch_us"] > 0
    no_gpu = tmp_path / "cpu.json"
    no_gpu.write_text(json.dumps({**json.loads(RESULT.read_text()), "cuda": None}))
    assert main([str(no_gpu), "--profile", str(profile)]) == 2
    assert "'cuda'" in capsys.readouterr().err


def test_the_loop_ops_record_adds_its_launch_with_host_and_date(tmp_path, capsys):
    profile = tmp_path / "p.json"
    shutil.copy(default_profile_path(), profile)
    loop = ["--loop-ops", str(LOOP_OPS)]
    assert main([str(RESULT), *loop, "--loop-ops-date", "2026-12-06", "--profile", str(profile)]) == 0
    comp = json.loads(profile.read_text())["components"][KEY]
    assert comp["params"]["loop_launch_us"] == json.loads(LOOP_OPS.read_text())["mean_us"]
    assert comp["note"].endswith(f"16 CPUs, torch 2.11.0+cu130, 2026-12-06 ({LOOP_OPS})")
    assert comp["tables"][-1] == str(LOOP_OPS)
    # the 2026-12-06 record has no date field: without the flag, refused in one line
    assert main([str(RESULT), *loop, "--profile", str(profile)]) == 2
    assert "field 'date' is missing" in capsys.readouterr().err
    # a record whose run wrote its date needs no flag; one without its mean is refused
    dated = tmp_path / "dated.json"
    dated.write_text(json.dumps({**json.loads(LOOP_OPS.read_text()), "date": "2027-01-02"}))
    assert main([str(RESULT), "--loop-ops", str(dated), "--profile", str(profile)]) == 0
    assert "2027-01-02" in json.loads(profile.read_text())["components"][KEY]["note"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({k: v for k, v in json.loads(dated.read_text()).items()
                               if k != "mean_us"}))
    assert main([str(RESULT), "--loop-ops", str(bad), "--profile", str(profile)]) == 2
    assert "'mean_us'" in capsys.readouterr().err
