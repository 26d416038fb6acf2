#!/usr/bin/env bash
# Direct baseline (no gateway): the conformance suite against the fixture
# servers (py2 and ts2, dual and modern-only; py2 and ts2 dual push-style; py1, ts1), each run summarised into
# compat_matrix/conformance/results/, and all of them combined into
# results/BASELINE.md (a section for compat_matrix/REPORT.md).
#
#   bash compat_matrix/conformance/baseline.sh
#
# Needs peers/install.sh and peers/install_conformance.sh. A failing run does
# not stop the others: some are expected to fail (see README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
RUN=(python3 compat_matrix/conformance/run.py)
OUT=compat_matrix/conformance/results
runs=(
  "py2-dual all 2026-07-28"
  "py2-dual req 2026-07-28"
  "py2-dual req 2025-11-25"
  "py2-modern all 2026-07-28"
  "py2-modern req 2025-11-25"
  "py2-push all 2025-11-25"
  "py2-push req 2025-11-25"
  "py1 all 2026-07-28"
  "py1 req 2025-11-25"
  "ts2-dual all 2026-07-28"
  "ts2-dual req 2026-07-28"
  "ts2-dual req 2025-11-25"
  "ts2-modern all 2026-07-28"
  "ts2-modern req 2025-11-25"
  "ts2-push all 2025-11-25"
  "ts2-push req 2025-11-25"
  "ts1 all 2026-07-28"
  "ts1 req 2025-11-25"
)
labels=()
for r in "${runs[@]}"; do
  read -r server kind version <<<"$r"
  if [[ $kind == all ]]; then
    "${RUN[@]}" --server "$server" --suite all --spec-version "$version"
    labels+=("$OUT/$server-all-$version.json")
  else
    "${RUN[@]}" --server "$server" --requirements "$version"
    labels+=("$OUT/$server-req-$version.json")
  fi
done
"${RUN[@]}" --combine "${labels[@]}" >"$OUT/BASELINE.md"
echo "[conformance] wrote $OUT/BASELINE.md" >&2
