"""The peer's answers kept between runs: a rerun asks AIConfigurator only about rows it has not
answered before, with the same installed version.

The peer is deterministic on a row (its estimate reads the row's cells and its own database),
and slow (0.5-5 s a row here): `epsim validate --silicon --out DIR` keeps its entries in
`DIR/silicon_peer.json.gz` (or `--peer-cache FILE`). An entry is keyed by what the peer is
given (`peer.row_key`: its `estimate_kwargs` with the row's framework version, and the
row's id) and kept only for the AIConfigurator and aiconfigurator-core versions that made it;
another version starts the cache afresh. Written atomically, gzip without a timestamp.

A cache also replays where AIConfigurator is not installed (`replay`): a machine without the
82 MB peer scores the same rows beside the answers the peer gave elsewhere, labelled with the
versions that gave them.
"""

from __future__ import annotations

import gzip
import json
from importlib.metadata import PackageNotFoundError, version as package_version
from pathlib import Path

from epsim.errors import EpsimError
from epsim.io.write import write_bytes

CACHE_NAME = "silicon_peer.json.gz"
PACKAGES = ("aiconfigurator", "aiconfigurator-core")


def peer_versions() -> dict[str, str | None]:
    """The installed versions the cache is valid for."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = package_version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def read(path: Path) -> tuple[dict[str, str | None], dict[str, dict]]:
    """The versions that made the cache and its entries by `row_key` (none: no file).

    Raises:
        EpsimError: the file is not a peer cache (one line naming it).
    """
    if not path.is_file():
        return {}, {}
    try:
        data = json.loads(gzip.decompress(path.read_bytes()))
        versions, entries = data["versions"], data["entries"]
        if not isinstance(versions, dict) or not isinstance(entries, dict):
            raise TypeError("versions and entries must be objects")
    except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
        raise EpsimError(f"--peer-cache ({path}) must be a peer cache written by epsim validate "
                         f"--silicon (gzip JSON): {type(exc).__name__}") from None
    return versions, dict(entries)


def load(path: Path) -> dict[str, dict]:
    """The cached entries by `row_key` (empty: no file, or made by other peer versions).

    Raises:
        EpsimError: the file is not a peer cache (one line naming it).
    """
    versions, entries = read(path)
    return entries if versions == peer_versions() else {}


def replay(path: Path, keys: list[str]) -> tuple[str, dict[str, dict]]:
    """The peer's label and entries for a run where AIConfigurator is not installed: every
    row (`keys`, by `row_key`) must have its answer in the cache at `path`.

    Raises:
        EpsimError: no cache there, or it lacks some of the rows (one line).
    """
    versions, entries = read(path)
    missing = sum(key not in entries for key in keys)
    if not entries or missing:
        raise EpsimError(f"--peer-cache ({path}) lacks {missing or len(keys)} of the {len(keys)} "
                         f"rows and AIConfigurator is not installed to ask (pip install "
                         f"'epsim[peer]', or --no-peer)")
    return f"AIConfigurator {versions.get('aiconfigurator')} (replayed from {path.name})", entries


def save(path: Path, entries: dict[str, dict]) -> None:
    """Write `entries` (by `row_key`) with the installed peer versions."""
    text = json.dumps({"versions": peer_versions(), "entries": entries}, indent=0, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, gzip.compress(text.encode(), mtime=0))
