"""Atomic writes (`epsim.io.write`) and results directories (`epsim.io.rundir`): a failed write
is one line naming the path and leaves the earlier file as it was; a results directory is
complete (manifest written last, hashes matching) or marked incomplete; stale files of an
earlier run go; one command at a time holds a directory.

Write errors are real ones: a file-size limit (RLIMIT_FSIZE, EFBIG) stands in for a full disk
here (the faults campaign fills a real tmpfs where it can mount one)."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from epsim.errors import SpecError, WriteError
from epsim.io.rundir import MANIFEST, RunDir, check_complete, read_manifest
from epsim.io.write import (TEMP_PATTERN, LineAppender, remove_temp_files, replacing,
                            write_bytes, write_text)

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def file_size_limit(num_bytes: int):
    """Writes past `num_bytes` fail with EFBIG (File too large), as a full disk fails them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (num_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def _only(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_failed_write_keeps_the_earlier_file_and_says_so_in_one_line(tmp_path):
    path = tmp_path / "summary.json"
    write_text(path, "old\n")
    with file_size_limit(1000), pytest.raises(WriteError) as info:
        write_text(path, "x" * 5000)
    message = str(info.value)
    assert message == f"{path}: cannot write (File too large); the previous file is kept"
    assert path.read_text() == "old\n"
    assert _only(tmp_path) == ["summary.json"]                 # no temporary file left


def test_an_error_inside_the_block_leaves_the_target_untouched(tmp_path):
    path = tmp_path / "fig.png"
    write_bytes(path, b"old")
    with pytest.raises(ZeroDivisionError), replacing(path) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".png" and TEMP_PATTERN.match(tmp.name)
        tmp.write_bytes(b"half")
        raise ZeroDivisionError
    assert path.read_bytes() == b"old" and _only(tmp_path) == ["fig.png"]


def test_a_directory_in_the_way_is_one_line(tmp_path):
    (tmp_path / "results.csv").mkdir()
    with pytest.raises(WriteError, match=r"results\.csv: cannot write \(a directory is in the way\)$"):
        write_text(tmp_path / "results.csv", "a\n")


def test_a_link_is_written_through_and_permissions_kept(tmp_path):
    target = tmp_path / "real.json"
    write_text(target, "1")
    os.chmod(target, 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text(link, "2")
    assert link.is_symlink() and target.read_text() == "2"
    assert target.stat().st_mode & 0o777 == 0o640


def test_appended_lines_are_whole(tmp_path):
    path = tmp_path / "points.jsonl"
    path.write_text('{"a": 1}\n{"b": 2')                       # an older writer was killed
    with LineAppender(path) as out:
        out.append('{"c": 3}')
    assert path.read_text().splitlines() == ['{"a": 1}', '{"b": 2', '{"c": 3}']
    size = path.stat().st_size
    with file_size_limit(size + 10), LineAppender(path) as out, pytest.raises(WriteError):
        out.append("x" * 100)                                  # cut short by the limit
    assert path.stat().st_size == size                         # the cut line is undone


def test_leftover_temporary_files_are_recognised(tmp_path):
    (tmp_path / ".summary.k3j_x9a2.tmp.json").write_text("half")
    (tmp_path / ".hidden").write_text("mine")
    assert remove_temp_files(tmp_path) == [".summary.k3j_x9a2.tmp.json"]
    assert _only(tmp_path) == [".hidden"]


# -- results directories ---------------------------------------------------------------------------
def test_a_run_is_marked_incomplete_until_its_manifest_says_complete(tmp_path):
    with RunDir(tmp_path, "simulate", ("summary.json", "*.png")) as run:
        run.begin()
        assert read_manifest(tmp_path)["complete"] is False
        with pytest.raises(SpecError, match=r"manifest\.json: complete \(False\) must be true: the "
                                             r"`epsim simulate` run .* did not finish"):
            check_complete(tmp_path)
        files = [write_text(tmp_path / "summary.json", "{}\n")]
        run.finish(files)
    manifest = read_manifest(tmp_path)
    assert manifest["complete"] is True and list(manifest["files"]) == ["summary.json"]
    assert check_complete(tmp_path, ["summary.json"])["command"] == "simulate"
    (tmp_path / "summary.json").write_text("{ }\n")            # edited after the run
    with pytest.raises(SpecError, match=r"summary\.json: sha256 must match manifest\.json"):
        check_complete(tmp_path, ["summary.json"])


def test_files_of_an_earlier_run_not_written_again_are_removed(tmp_path):
    (tmp_path / "old.png").write_text("by hand, before any manifest")   # matches a product name
    (tmp_path / "notes.txt").write_text("the user's")                   # not ours: kept
    with RunDir(tmp_path, "simulate", ("summary.json", "*.png", "timeline.json")) as run:
        run.finish([write_text(tmp_path / "summary.json", "1"),
                    write_text(tmp_path / "timeline.json", "2")])
    with RunDir(tmp_path, "simulate", ("summary.json", "*.png", "timeline.json")) as run:
        removed = run.finish([write_text(tmp_path / "summary.json", "3")])
    assert removed == ["timeline.json"] and _only(tmp_path) == [".epsim.lock", MANIFEST, "notes.txt",
                                                              "summary.json"]
    assert read_manifest(tmp_path)["removed"] == ["timeline.json"]


def test_a_directory_without_a_manifest_is_read_as_it_is(tmp_path):
    assert check_complete(tmp_path, ["results.csv"]) is None


def test_a_second_command_on_the_same_directory_is_refused(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from epsim.io.rundir import RunDir; "
                               "r = RunDir(sys.argv[1], 'plan'); r.lock(); print('held', flush=True); "
                               "time.sleep(60)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SpecError, match=rf"--out \({tmp_path}\) must not be in use by another "
                                            rf"epsim command \(process {holder.pid} \(plan\) is "
                                            rf"writing there\)"):
            RunDir(tmp_path, "plan").lock()
    finally:
        holder.kill()
        holder.wait()
    with RunDir(tmp_path, "plan"):                 # released when its holder died
        pass
