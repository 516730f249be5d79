"""The one input and output layer: every file the tools read comes through here (bounded size,
UTF-8 text, bounded JSON/YAML nesting and alias expansion, duplicate keys refused), every path
they write is checked before work starts, every file is written atomically (`epsim.io.write`)
and a results directory is complete or marked incomplete (`epsim.io.rundir`). Errors are one
line, `<file>: <what> must <rule>`."""

from epsim.io.files import (MAX_BINARY_BYTES, MAX_TEXT_BYTES, MAX_YAML_BYTES, check_output_dir,
                            check_output_file, decode_text, read_bytes, read_text)
from epsim.io.parse import MAX_DEPTH, MAX_YAML_NODES, check_depth, load_json, load_yaml, loads_json

__all__ = ["MAX_BINARY_BYTES", "MAX_DEPTH", "MAX_TEXT_BYTES", "MAX_YAML_BYTES", "MAX_YAML_NODES",
           "check_depth", "check_output_dir", "check_output_file", "decode_text", "load_json",
           "load_yaml", "loads_json", "read_bytes", "read_text"]
