"""One module per CLI subcommand, each with `run(args) -> int`, imported only when used; and how
they speak: `output` (every command's output convention) and `scripting` (what the scenario
scripts in `scenarios/` share)."""
