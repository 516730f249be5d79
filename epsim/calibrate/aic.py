"""`aic:SYSTEM[/FRAMEWORK[/VERSION]]` as a record source: read an installed aiconfigurator-core's
op tables (`aic_tables`), convert them (`aic_records`, `aic_comm`), write the records, and tag
the profile fitted on them with where every component's data came from.

`epsim calibrate --records aic:h200_sxm/sglang` and `epsim.calibrate.calibrate(["aic:..."])`
both come here (`expand_sources`). The records a fit reads are written to
`runs/aic/<system>_<framework>_<version>.jsonl.gz`, those imported for models still to come to
`..._pending.jsonl.gz` beside it, so the profile's provenance names real files with their hashes.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Iterable

from epsim.calibrate.aic_comm import (allreduce_records, deepep_ll_records,
                                      deepep_normal_records, nccl_records)
from epsim.calibrate.aic_kernels import mla_bmm_records, mla_records, wideep_moe_records
from epsim.calibrate.aic_records import (SOURCE, Imported, attention_records, gemm_records,
                                         moe_records, provenance, quantize_records)
from epsim.calibrate.aic_tables import (DEVICE_PREFIX, AicSource, AicTable, package_version,
                                        parse_source)
from epsim.errors import RecordError
from epsim.io.write import replacing_file

PREFIX = "aic:"
DEFAULT_DIR = Path("runs/aic")
OWN_SOURCE = "epsim records"     # a component fitted on records with no `source` in provenance
CONVERTERS = {
    "gemm_perf": gemm_records, "moe_perf": moe_records,
    "wideep_context_moe_perf": wideep_moe_records, "wideep_generation_moe_perf": wideep_moe_records,
    "context_attention_perf": attention_records, "generation_attention_perf": attention_records,
    "context_mla_perf": mla_records, "generation_mla_perf": mla_records,
    "wideep_context_mla_perf": mla_records, "wideep_generation_mla_perf": mla_records,
    "mla_bmm_perf": mla_bmm_records, "scale_matrix_perf": quantize_records,
    "computescale_perf": quantize_records, "custom_allreduce_perf": allreduce_records,
    "wideep_deepep_ll_perf": deepep_ll_records, "wideep_deepep_normal_perf": deepep_normal_records,
    "nccl_perf": nccl_records,
}


def is_aic(item) -> bool:
    return isinstance(item, str) and item.startswith(PREFIX)


def import_source(source: AicSource, tables: Iterable[AicTable] | None = None,
                  require_gpu: bool = True, grid: bool = True) -> Imported:
    """Every table of `source` (or the `tables` given) as records, split fit / pending.

    Args:
        require_gpu: refuse a system with no zoo GPU (False: import it anyway, for a survey;
            its records carry no `provenance.hardware` and cannot be fitted).
        grid: thin the fit kinds to the fit grid (`aic_records.on_grid`); False keeps every
            row (comparisons with other records at their own points).
    Raises:
        RecordError: the source has no zoo GPU (its records could not be priced), or a
            table lacks a column its converter reads.
    """
    if require_gpu and not source.gpu:
        raise RecordError(f"aic system ({source.system!r}) has no GPU in epsim's hardware zoo "
                          f"(`epsim hardware`); its tables cannot be fitted")
    out = Imported(source, grid)
    for table in (source.tables() if tables is None else tables):
        frame = table.frame()
        if not len(frame):
            out.notes.append(f"{table.rel}: no rows of {DEVICE_PREFIX.get(table.system)}")
            continue
        device = str(frame["device"].iloc[0]) if "device" in frame.columns else \
            DEVICE_PREFIX.get(table.system, table.system)
        try:
            CONVERTERS[table.name](table, frame, provenance(table, source.gpu, device), out)
        except AttributeError as exc:        # a column the converter reads is missing
            raise RecordError(f"{table.rel}: {exc}; aiconfigurator-core's table layout changed?") \
                from None
        out.tables.append(table)
    return out


def write_records_gz(records, path: Path) -> Path:
    """Write records as gzipped JSON Lines, atomically (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # filename="": the header would otherwise name the temporary file (same bits every run)
    with replacing_file(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb",
                                                          mtime=0) as fh:
        for record in records:
            fh.write((record.to_json() + "\n").encode())
    return path


def record_paths(source: AicSource, out: str | Path | None = None) -> tuple[Path, Path]:
    """(fit, pending) record files of a source: `out` names the fit file, else `runs/aic/`."""
    fit = Path(out) if out else DEFAULT_DIR / f"{source.system}_{source.framework}_{source.version}.jsonl.gz"
    stem = fit.name.removesuffix(".gz").removesuffix(".jsonl")
    return fit, fit.with_name(f"{stem}_pending.jsonl.gz")


def expand_sources(items: Iterable, out: str | Path | None = None
                   ) -> tuple[list[Path], list[Imported]]:
    """Record paths for `calibrate`: each `aic:` item imported and written (`record_paths`),
    other items kept as paths.

    Raises:
        RecordError: a bad `aic:` item, the package absent, or two `aic:` items with `out`.
    """
    items = list(items)
    sources = [i for i in items if is_aic(i)]
    if out and len(sources) > 1:
        raise RecordError(f"--records-out ({out}) names one file; give one aic: source with it")
    paths, imports = [], []
    for item in items:
        if not is_aic(item):
            paths.append(Path(item))
            continue
        imported = import_source(parse_source(item))
        fit, pending = record_paths(imported.source, out)
        write_records_gz(imported.fit, fit)
        write_records_gz(imported.pending, pending)
        paths.append(fit)
        imports.append(imported)
    return paths, imports


def _extra(record, name: str) -> str:
    return str((record.provenance.model_extra or {}).get(name, ""))


def tag_profile(cal, imports: list[Imported]) -> None:
    """Write where each fitted component's data came from into `cal.profile`: its
    `data_source` ("aiconfigurator", or "epsim records" for records without a `source`) and
    `tables` (the op tables, or the record files, it was fitted on); `provenance.aic` names the
    imported tables with their hashes."""
    profile = cal.profile
    for key, fit in sorted(cal.fits.items()):
        comp = profile.components.get(key)
        if comp is None:
            continue
        aic = any(_extra(s.record, "source") == SOURCE for s in fit.records)
        comp.data_source = SOURCE if aic else OWN_SOURCE
        comp.tables = sorted({_extra(s.record, "table") for s in fit.records} - {""}) if aic \
            else sorted({Path(s.path).name for s in fit.records})
    if not imports:
        return
    profile.provenance.aic = [{
        "source": imp.source.label, "package": f"aiconfigurator-core {package_version()}",
        "license": "Apache-2.0 (NVIDIA); see epsim/data/profiles/NOTICE",
        "tables": [{"path": t.rel, "sha256": t.sha256,
                    "framework_version": str(t.runtime.get("version") or t.version),
                    **({"image": t.runtime["image"]} if t.runtime.get("image") else {})}
                   for t in imp.tables],
        "num_fit": len(imp.fit), "num_pending": len(imp.pending), "notes": imp.notes}
        for imp in imports]
