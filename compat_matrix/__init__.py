"""The compatibility matrix: `cells.toml` (the data), `run.py` (the runner,
which writes `REPORT.md`), and the real-peer fixtures under `peers/`."""
