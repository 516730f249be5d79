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


def test_the_shipped_profile_carries_the_record_as_measured():
    result = json.loads(RESULT.read_text())
    params = Profile.load(default_profile_path()).params("any", "serving_host")
    assert params["readback_us"] == result["cuda"]["readback_us"]
    assert params["gloo_all_gather_16_us"] == result["gloo"]["16"]["all_gather"]["median_us"]
    data = json.loads(default_profile_path().read_text())
    entry = next(e for e in data["provenance"]["records"] if e["path"].endswith(RESULT.name))
    assert entry["sha256"] == hashlib.sha256(RESULT.read_bytes()).hexdigest()
    assert "measured on a GPU host: NVIDIA H100" in data["components"][KEY]["note"]


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
