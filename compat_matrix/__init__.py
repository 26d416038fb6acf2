"""The compatibility matrix: `cells.toml` (the data), `run.py` (the runner's
command line, which writes `REPORT.md`, and the modules it runs on: see its
docstring), `popular.py` (the popular servers through the gateway), and the
real-peer fixtures under `peers/`."""
