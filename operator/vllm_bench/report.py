"""Presenting a result document: summary tables for the terminal (rich), PNG plots
(matplotlib, Agg backend, no display needed) and one self-contained HTML report with the
plots embedded. Everything here reads only the document, so it works on an old result.json.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")  # before pyplot: files only, never a display

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from rich.table import Table

REPORT_FILE = "report.html"
PHASE_COLOURS = {
    "serial": "tab:blue",
    "concurrent": "tab:orange",
    "cold": "tab:blue",
    "warm": "tab:green",
    "reordered": "tab:red",
}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _scalars(summary: dict[str, Any]) -> list[tuple[str, str]]:
    return [(k, _fmt(v)) for k, v in summary.items() if not isinstance(v, list | dict)]


def summary_tables(doc: dict[str, Any]) -> list[Table]:
    """One table for the headline, one per scenario, one for the batching ladder."""
    tables = []
    head = Table(
        title=f"vllm-bench: {doc['status']} ({doc['environment'].get('model')}, "
        f"vLLM {doc['environment'].get('serverVersion') or '?'})"
    )
    head.add_column("headline")
    head.add_column("value", justify="right")
    for key, value in doc.get("headline", {}).items():
        head.add_row(key, _fmt(value))
    tables.append(head)
    for name, scenario in doc.get("scenarios", {}).items():
        table = Table(title=f"{name} ({scenario.get('elapsedSeconds', 0):.1f} s)")
        table.add_column("summary")
        table.add_column("value", justify="right")
        for key, value in _scalars(scenario.get("summary", {})):
            table.add_row(key, value)
        tables.append(table)
    ladder = doc.get("scenarios", {}).get("batching", {}).get("summary", {}).get("ladder")
    if ladder:
        table = Table(title="batching ladder")
        for column in ladder[0]:
            table.add_column(column, justify="right")
        for point in ladder:
            table.add_row(*(_fmt(v) for v in point.values()))
        tables.append(table)
    live = doc.get("liveLoad")
    if live:
        tables.append(_live_load_table(live))
    return tables


LIVE_LOAD_COLUMNS = (
    "ownRequests",
    "foreignRequests",
    "foreignGenerationTokens",
    "peakRunning",
    "peakWaiting",
    "peakForeignInFlight",
)


def _live_load_table(live: dict[str, Any]) -> Table:
    """Per scenario and for the run: the runner's requests and what other clients had the
    target do meanwhile (liveload.py)."""
    said = {True: "the target served the runner alone", False: "OTHER CLIENTS' LOAD SEEN"}
    quiet = live.get("quiet")
    table = Table(
        title=f"live load on {live.get('target')}: {said[quiet] if quiet is not None else '?'}"
    )
    table.add_column("scenario")
    for column in LIVE_LOAD_COLUMNS:
        table.add_column(column, justify="right")
    for name, window in [*live.get("scenarios", {}).items(), ("run", live)]:
        table.add_row(name, *(_fmt(window.get(c)) for c in LIVE_LOAD_COLUMNS))
    return table


# --- plots: each returns a Figure, or None when the document lacks the data ---------------


def _samples(doc: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    samples: list[dict[str, Any]] = doc.get("scenarios", {}).get(scenario, {}).get("samples", [])
    return samples


def plot_latency_per_request(doc: dict[str, Any]) -> Figure | None:
    samples = [s for s in _samples(doc, "batching") if s["phase"] in ("serial", "concurrent")]
    if not samples:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for phase in ("serial", "concurrent"):
        points = sorted((s["index"], s["latencySeconds"]) for s in samples if s["phase"] == phase)
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, "o-", label=phase, color=PHASE_COLOURS[phase])
    ax.set(
        xlabel="request", ylabel="latency (s)", title="Latency per request: serial vs all at once"
    )
    ax.set_ylim(bottom=0)
    ax.legend()
    return fig


def plot_throughput_vs_concurrency(doc: dict[str, Any]) -> Figure | None:
    summary = doc.get("scenarios", {}).get("batching", {}).get("summary", {})
    ladder = [p for p in summary.get("ladder", []) if p.get("outputTokensPerSecond") is not None]
    if not ladder:
        return None
    conc = [p["concurrency"] for p in ladder]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(
        conc,
        [p["outputTokensPerSecond"] for p in ladder],
        "o-",
        color="tab:blue",
        label="output tokens/s",
    )
    ax.set(
        xscale="log",
        xlabel="concurrent requests",
        ylabel="output tokens/s",
        title="Throughput and latency vs concurrency",
    )
    ax.set_xticks(conc, [str(c) for c in conc])
    ax.set_ylim(bottom=0)
    lat = ax.twinx()
    lat.plot(
        conc,
        [p["latencyP50Seconds"] for p in ladder],
        "s--",
        color="tab:red",
        label="latency p50 (s)",
    )
    lat.set_ylabel("latency p50 (s)")
    lat.set_ylim(bottom=0)
    if summary.get("kneeConcurrency"):
        ax.axvline(summary["kneeConcurrency"], color="grey", linestyle=":", label="knee")
    lines = ax.get_legend_handles_labels()[0] + lat.get_legend_handles_labels()[0]
    ax.legend(lines, [str(line.get_label()) for line in lines], loc="upper left")
    return fig


def plot_queue_depth(doc: dict[str, Any]) -> Figure | None:
    timeline = doc.get("scenarios", {}).get("batching", {}).get("serverTimeline", [])
    if not timeline:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.5))
    t = [p["tSeconds"] for p in timeline]
    ax.plot(t, [p.get("running") or 0 for p in timeline], label="running")
    ax.plot(t, [p.get("waiting") or 0 for p in timeline], label="waiting (queue)")
    ax.set(
        xlabel="time in the ladder (s)",
        ylabel="requests",
        title="Server queue during the batching ladder (vllm:num_requests_*)",
    )
    ax.legend()
    return fig


def plot_prefix_ttft(doc: dict[str, Any]) -> Figure | None:
    samples = [s for s in _samples(doc, "prefix") if s["phase"] in ("cold", "warm", "reordered")]
    if not samples:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    phases = [p for p in ("cold", "warm", "reordered") if any(s["phase"] == p for s in samples)]
    for x, phase in enumerate(phases):
        ys = [
            s["ttftSeconds"] * 1000
            for s in samples
            if s["phase"] == phase and s.get("ttftSeconds") is not None
        ]
        if not ys:
            continue
        ax.scatter([x] * len(ys), ys, color=PHASE_COLOURS[phase], alpha=0.7)
        median = sorted(ys)[len(ys) // 2]
        ax.hlines(median, x - 0.25, x + 0.25, color="black")
    summary = doc["scenarios"]["prefix"]["summary"]
    ax.set_xticks(range(len(phases)), phases)
    ax.set(
        ylabel="TTFT (ms)",
        title=f"Prefix cache: TTFT cold vs warm (speed-up {_fmt(summary.get('ttftSpeedup'))}x, "
        f"hit rate {_fmt(summary.get('hitRate'))})",
    )
    ax.set_ylim(bottom=0)
    return fig


def plot_token_timeline(doc: dict[str, Any]) -> Figure | None:
    samples = [s for s in _samples(doc, "streaming") if s.get("tokenTimesSeconds")]
    if not samples:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for s in samples:
        times = [t * 1000 for t in s["tokenTimesSeconds"]]
        ax.step(times, range(1, len(times) + 1), where="post", alpha=0.7)
    ax.set(
        xlabel="time since the request was sent (ms)",
        ylabel="stream events received (tokens)",
        title="Streaming: token arrival per request",
    )
    return fig


def plot_naive(doc: dict[str, Any]) -> Figure | None:
    summary = doc.get("scenarios", {}).get("naive", {}).get("summary", {})
    values = [summary.get("naiveOutputTokensPerSecond"), summary.get("vllmOutputTokensPerSecond")]
    if None in values:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(
        ["transformers generate()\none at a time", "vLLM\nall at once"],
        values,
        color=["tab:grey", "tab:green"],
    )
    ax.set(
        ylabel="output tokens/s", title=f"Naive vs vLLM (speed-up {_fmt(summary.get('speedup'))}x)"
    )
    return fig


PLOTS: dict[str, Callable[[dict[str, Any]], Figure | None]] = {
    "latency_per_request.png": plot_latency_per_request,
    "throughput_vs_concurrency.png": plot_throughput_vs_concurrency,
    "queue_depth.png": plot_queue_depth,
    "prefix_ttft.png": plot_prefix_ttft,
    "token_timeline.png": plot_token_timeline,
    "naive_vs_vllm.png": plot_naive,
}


def write_plots(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """Writes the PNGs the document has data for; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, make in PLOTS.items():
        fig = make(doc)
        if fig is None:
            continue
        fig.tight_layout()
        fig.savefig(out_dir / filename, dpi=110)
        plt.close(fig)
        written.append(out_dir / filename)
    return written


# --- HTML ---------------------------------------------------------------------------------


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _html_table(rows: list[tuple[str, str]], head: tuple[str, str] = ("", "")) -> str:
    body = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in rows)
    return f"<table><tr><th>{_esc(head[0])}</th><th>{_esc(head[1])}</th></tr>{body}</table>"


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}"
    "td:nth-child(2){text-align:right}img{max-width:100%}.status.ok b{color:green}"
    ".status.partial b{color:darkorange}.status.failed b{color:red}.errors{color:#a00}"
)


def write_html(doc: dict[str, Any], out_dir: Path, plots: list[Path]) -> Path:
    """One HTML file, no external resources: the PNGs are embedded as base64."""
    env = doc.get("environment", {})
    status = _esc(doc["status"])
    parts = [
        f"<h1>vllm-bench report: {_esc(env.get('model'))}</h1>",
        (
            f"<p class='status {status}'>status: <b>{status}</b>"
            f" &middot; {_esc(doc['startedAt'])} to {_esc(doc['finishedAt'])}"
            f" &middot; server {_esc(doc['config'].get('url'))},"
            f" vLLM {_esc(env.get('serverVersion'))}</p>"
        ),
    ]
    if doc.get("errors"):
        items = "".join(
            f"<li><b>{_esc(e['scenario'])}</b> ({_esc(e['kind'])}): {_esc(e['message'])}</li>"
            for e in doc["errors"]
        )
        parts.append(f"<h2>Errors</h2><ul class='errors'>{items}</ul>")
    parts.append(
        "<h2>Headline</h2>"
        + _html_table([(k, _fmt(v)) for k, v in doc.get("headline", {}).items()])
    )
    for path in plots:
        data = base64.b64encode(path.read_bytes()).decode()
        parts.append(f"<figure><img alt='{_esc(path.stem)}' src='data:image/png;base64,{data}'>")
        parts.append("</figure>")
    for name, scenario in doc.get("scenarios", {}).items():
        parts.append(
            f"<h2>{_esc(name)}</h2>"
            + _html_table(_scalars(scenario.get("summary", {})), ("summary", "value"))
        )
        ladder = scenario.get("summary", {}).get("ladder")
        if ladder:
            header = "".join(f"<th>{_esc(k)}</th>" for k in ladder[0])
            rows = "".join(
                "<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in p.values()) + "</tr>"
                for p in ladder
            )
            parts.append(f"<table><tr>{header}</tr>{rows}</table>")
    parts.append(
        "<h2>Environment</h2>"
        + _html_table([(k, _fmt(v)) for k, v in env.items() if k != "cacheConfig"])
        + "<details><summary>vllm:cache_config_info</summary>"
        + _html_table(list(env.get("cacheConfig", {}).items()))
        + "</details><h2>Configuration</h2>"
        + _html_table([(k, _fmt(v)) for k, v in doc.get("config", {}).items()])
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>vllm-bench report</title>"
        f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n"
    )
    path = out_dir / REPORT_FILE
    path.write_text(page)
    return path
