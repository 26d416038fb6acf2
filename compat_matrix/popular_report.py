"""The popular servers' saved run (`popular_results.json`, written by `save`)
and the "Popular servers" section of REPORT.md made from it (`section`,
`write_section`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from compat_matrix.popular_servers import CLIENTS, HERE, TRANSPORTS, servers
from compat_matrix.provenance import code_version
from compat_matrix.verdicts import first_line

HEADING = "## Popular servers through the gateway"
RESULTS = HERE / "popular_results.json"


def checked_answer(result: dict[str, Any]) -> str:
    """The last checked call's answer, shortened for the table."""
    calls = [
        s for s in result.get("steps") or [] if str(s.get("step", "")).startswith("tools/call")
    ]
    if not calls:
        return ""
    text = " ".join(str(calls[-1].get("text") or "").split())
    return f"{calls[-1]['step'].removeprefix('tools/call ')}: {text[:70]}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def section(results: Path = RESULTS) -> str:
    """The REPORT.md section from the saved run."""
    head = [
        HEADING,
        "",
        "The reference servers people install, at the versions `peers/install.sh` pins,",
        "each behind a **fresh** gateway (the first request included): a modern client",
        "(mcp 2.3.0 `Client` pinned to 2026-07-28) and a legacy client (mcp 1.30.0",
        "`ClientSession`), both declaring roots, over stdio (the client spawns the gateway,",
        "which spawns the server) and over HTTP (`gateway --listen`). Each lists tools and",
        "makes calls whose answers are checked: a file written then read back (and found on",
        "disk), an entity created then opened (and found in the storage file), the time in",
        "UTC (parsed, within a minute of now), echo and get-sum. `era` is what",
        "`gateway probe` prints; the last rows are SDK fixtures whose era is known by",
        "construction. Reproduce: `bash peers/install.sh && python compat_matrix/popular.py`",
        "(`--report-only` rewrites this section from `compat_matrix/popular_results.json`);",
        "`tests/test_popular_servers.py` checks the same.",
        "",
    ]
    if not results.exists():
        return "\n".join([*head, "Not run yet."]) + "\n"
    saved = json.loads(results.read_text())
    calls = {(c["server"], c["client"], c["transport"]): c for c in saved["calls"]}
    lines = [
        *head,
        f"Run of {saved['date']} on {saved['code']}: "
        f"{sum(c['ok'] for c in saved['calls'])}/{len(saved['calls'])} calls work, "
        f"{sum(p['era'] == p['want'] for p in saved['probes'])}/{len(saved['probes'])} "
        "probes print the right era.",
        "",
        "| server | version | probe era (want) | modern · stdio | modern · http "
        "| legacy · stdio | legacy · http | checked answer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in saved["probes"]:
        era = p["era"] or "no answer"
        mark = "" if p["era"] == p["want"] else " **wrong**"
        cells = []
        answer = ""
        for client in CLIENTS:
            for transport in TRANSPORTS:
                c = calls.get((p["server"], client, transport))
                if c is None:
                    cells.append("-")
                    continue
                answer = answer or (checked_answer(c) if c["ok"] else "")
                cells.append(
                    "works" if c["ok"] else f"**fails**: {first_line(c['error'] or '', 90)}"
                )
        lines.append(
            f"| {p['server']} | {_cell(p['label'])} | {era} ({p['want']}){mark} | "
            + " | ".join(_cell(c) for c in cells)
            + f" | {_cell(answer)} |"
        )
    return "\n".join(lines) + "\n"


def write_section(out: Path, text: str) -> None:
    """Replace this section of `out` (it runs to the end of the file or the next
    `## ` heading), or append it."""
    current = out.read_text() if out.exists() else ""
    before, found, after = current.partition(HEADING)
    rest = ""
    if found:
        cut = after.find("\n## ")
        rest = after[cut + 1 :] if cut >= 0 else ""
    body = before.rstrip("\n") + "\n\n" + text
    out.write_text(body + ("\n" + rest if rest else ""))


def save(probes: list[dict[str, Any]], calls: list[dict[str, Any]], peers: Path) -> None:
    wanted = {s.name: s for s in servers(peers)}
    for p in probes:
        p["want"] = wanted[p["server"]].era
        p["label"] = wanted[p["server"]].label
        p.pop("answer", None)
    RESULTS.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "code": code_version(),
                "probes": probes,
                "calls": calls,
            },
            indent=1,
        )
        + "\n"
    )
