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
    if doc.get("config", {}).get("preset"):
        head.add_row("preset (the lab's workload)", str(doc["config"]["preset"]))
    tables.append(head)
    preset = doc.get("config", {}).get("preset")
    for name, scenario in doc.get("scenarios", {}).items():
        lab = scenario.get("lab")
        whose = ": the runner's figures" if preset else ""
        table = Table(title=f"{name} ({scenario.get('elapsedSeconds', 0):.1f} s){whose}")
        table.add_column("summary")
        table.add_column("value", justify="right")
        for key, value in _scalars(scenario.get("summary", {})):
            table.add_row(key, value)
        tables.append(table)
        if isinstance(lab, dict):
            tables.append(lab_table(name, scenario))
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


def _fmt_figure(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value)
    return _fmt(value)


def lab_table(name: str, scenario: dict[str, Any]) -> Table:
    """A scenario's figures as the preset's lab defines them (its `lab`), each with its
    definition and the runner's own figure beside it where the runner has one."""
    lab = scenario["lab"]
    summary = scenario.get("summary", {})
    title = f"{name}: {lab.get('lab') or lab.get('preset')}'s figures, by the lab's definitions"
    if lab.get("note"):
        title += f"\n({lab['note']})"
    table = Table(title=title)
    table.add_column("lab's figure")
    table.add_column("value", justify="right")
    table.add_column("the lab's definition")
    table.add_column("runner's figure beside it")
    table.add_column("value", justify="right")
    beside = lab.get("runnerFigures", {})
    for key, value in lab.get("figures", {}).items():
        mine = beside.get(key)
        table.add_row(
            key,
            _fmt_figure(value),
            str(lab.get("definitions", {}).get(key, "")),
            mine or "",
            _fmt_figure(summary.get(mine)) if mine else "",
        )
    return table


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


def _first_round(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples of the first round (all of them in a run of one round)."""
    first = min((s.get("round", 1) for s in samples), default=1)
    return [s for s in samples if s.get("round", 1) == first]


def _phase_wall_seconds(samples: list[dict[str, Any]], phase: str) -> float | None:
    """A phase's wall time, first send to last completion, median over the rounds."""
    walls = []
    for r in sorted({s.get("round", 1) for s in samples if s["phase"] == phase}):
        mine = [s for s in samples if s["phase"] == phase and s.get("round", 1) == r]
        walls.append(
            max(s["startSeconds"] + s["latencySeconds"] for s in mine)
            - min(s["startSeconds"] for s in mine)
        )
    return sorted(walls)[len(walls) // 2] if walls else None


def _label_bars(ax: Any, bars: Any, fmt: str) -> None:
    for bar in bars:
        ax.annotate(
            fmt.format(bar.get_height()),
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            xytext=(0, 2),
            textcoords="offset points",
        )
    ax.margins(y=0.15)


def plot_serial_vs_concurrent(doc: dict[str, Any]) -> Figure | None:
    """The lab's first chart: the same requests one after another and all at once, as wall
    time and as output tokens/s."""
    batching = doc.get("scenarios", {}).get("batching", {})
    summary, samples = batching.get("summary", {}), batching.get("samples", [])
    rates = [
        summary.get("serialOutputTokensPerSecond"),
        summary.get("concurrentOutputTokensPerSecond"),
    ]
    walls = [_phase_wall_seconds(samples, p) for p in ("serial", "concurrent")]
    if None in rates or None in walls:
        return None
    n = len(_first_round([s for s in samples if s["phase"] == "concurrent"]))
    names = ["serial\n(one at a time)", f"concurrent\n({n} at once)"]
    colours = [PHASE_COLOURS["serial"], PHASE_COLOURS["concurrent"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4.2))
    _label_bars(left, left.bar(names, walls, color=colours), "{:.2f} s")
    left.set(ylabel="wall time (s)", title=f"Wall time for {n} requests")
    _label_bars(right, right.bar(names, rates, color=colours), "{:,.0f}")
    right.set(ylabel="output tokens/s", title="Output throughput")
    rounds = len({s.get("round", 1) for s in samples})
    tokens = doc.get("config", {}).get("outputTokens")
    speedup = summary.get("speedupOverSerial")
    fig.suptitle(
        "Serial vs concurrent"
        + (f": {speedup:.1f}x the throughput" if speedup else "")
        + (f", {tokens} tokens out each" if tokens else "")
        + (f" (median of {rounds} rounds)" if rounds > 1 else "")
    )
    return fig


def plot_concurrent_requests(doc: dict[str, Any]) -> Figure | None:
    """Each request of the concurrent phase (its first round) as a horizontal bar from its
    send to its last token, time to first token darker, and the phase's wall time."""
    samples = _first_round([s for s in _samples(doc, "batching") if s["phase"] == "concurrent"])
    if not samples:
        return None
    samples = sorted(samples, key=lambda s: s["index"])
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.3 * len(samples) + 1.5)))
    ys = [s["index"] for s in samples]
    starts = [s["startSeconds"] for s in samples]
    ax.barh(
        ys,
        [s["latencySeconds"] for s in samples],
        left=starts,
        color="tab:orange",
        label="send to last token",
    )
    ttfts = [s.get("ttftSeconds") or 0.0 for s in samples]
    ax.barh(ys, ttfts, left=starts, color="saddlebrown", label="time to first token")
    wall = max(s["startSeconds"] + s["latencySeconds"] for s in samples) - min(starts)
    ax.axvline(wall, color="black", linestyle="--", label=f"wall time {wall:.2f} s")
    batching = _samples(doc, "batching")
    serial = [s["latencySeconds"] for s in _first_round(batching) if s["phase"] == "serial"]
    rounds = len({s.get("round", 1) for s in batching})
    title = f"{len(samples)} requests at once: {wall:.2f} s in all"
    if serial:
        title += f" (one after another: {sum(serial):.2f} s)"
    ax.set_title(title + (f"\nround 1 of {rounds}" if rounds > 1 else ""))
    ax.set(xlabel="time since the first request was sent (s)", ylabel="request")
    ax.set_yticks(ys, [str(y) for y in ys] if len(ys) <= 32 else None)
    ax.invert_yaxis()
    ax.set_xlim(left=0, right=wall * 1.5)  # the legend goes in the room right of the bars
    ax.legend(loc="center right", fontsize="small")
    return fig


def plot_cold_vs_warm(doc: dict[str, Any]) -> Figure | None:
    """The prefix cache as the lab shows it: TTFT p50 with the shared prefix not cached
    (cold) and cached (warm), and reordered (the same parts in another order: no hits)."""
    summary = doc.get("scenarios", {}).get("prefix", {}).get("summary", {})
    phases = [
        (name, summary.get(key))
        for name, key in (
            ("cold", "coldTtftP50Seconds"),
            ("warm", "warmTtftP50Seconds"),
            ("reordered", "reorderedTtftP50Seconds"),
        )
        if summary.get(key) is not None
    ]
    if len(phases) < 2 or phases[0][0] != "cold" or phases[1][0] != "warm":
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    names = {"cold": "cold", "warm": "warm", "reordered": "reordered\n(same parts, other order)"}
    bars = ax.bar(
        [names[n] for n, _ in phases],
        [v * 1000 for _, v in phases],
        color=[PHASE_COLOURS[n] for n, _ in phases],
    )
    _label_bars(ax, bars, "{:.1f} ms")
    tokens = summary.get("promptTokens")
    speedup, hits = summary.get("ttftSpeedup"), summary.get("hitRate")
    notes = [f"warm hit rate {hits:.1%}"] if hits is not None else []
    if isinstance(tokens, int):
        notes.append(f"{tokens:,} prompt tokens")
    ax.set(
        ylabel="time to first token, p50 (ms)",
        title="Prefix cache: cold vs warm"
        + (f", {speedup:.2f}x faster warm" if speedup else "")
        + (f"\n({', '.join(notes)})" if notes else ""),
    )
    return fig


# --- plots across runs (benchmarks/gpu/report.py draws the labs' with them) ---------------


def plot_naive_vs_vllm_per_request(naive: dict[str, Any], doc: dict[str, Any]) -> Figure | None:
    """Lab 2's per-request bars: transformers generate() one request at a time (a
    `vllm_bench.naive` result: its samples, the first `warmupDiscarded` left out) against the
    same number of vLLM requests one at a time (the batching scenario's serial phase)."""
    skip = int(naive.get("warmupDiscarded") or 0)
    slow = naive.get("samples", [])[skip:]
    fast = sorted(
        _first_round([s for s in _samples(doc, "batching") if s["phase"] == "serial"]),
        key=lambda s: s["index"],
    )[: len(slow)]
    if not slow or not fast:
        return None
    n = min(len(slow), len(fast))
    slow, fast = slow[:n], fast[:n]
    xs = list(range(1, n + 1))
    width = 0.38
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for offset, samples, colour, name in (
        (-width / 2, slow, "tab:grey", "transformers generate()"),
        (width / 2, fast, "tab:green", "vLLM"),
    ):
        rate = sorted(s["outputTokens"] / s["latencySeconds"] for s in samples)[len(samples) // 2]
        bars = ax.bar(
            [x + offset for x in xs],
            [s["latencySeconds"] for s in samples],
            width,
            color=colour,
            label=f"{name}: {rate:,.0f} tok/s (median)",
        )
        _label_bars(ax, bars, "{:.2f} s")
    tokens = sorted({int(s["outputTokens"]) for s in [*slow, *fast]})
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set(
        xlabel="request (one at a time)",
        ylabel="latency (s)",
        title=f"Naive vs vLLM, per request ({'/'.join(map(str, tokens))} tokens out each)",
    )
    ax.legend()
    return fig


def plot_context_lengths(docs: dict[str, dict[str, Any]]) -> Figure | None:
    """Lab 2's comparison of max_model_len settings: for each run (label -> result), the
    output tokens/s of the concurrent phase and at the ladder's knee, and the concurrent
    phase's wall time."""
    rows = []
    for label, doc in docs.items():
        batching = doc.get("scenarios", {}).get("batching", {})
        s, samples = batching.get("summary", {}), batching.get("samples", [])
        wall = _phase_wall_seconds(samples, "concurrent")
        if s.get("concurrentOutputTokensPerSecond") is None or wall is None:
            continue
        n = len(_first_round([x for x in samples if x["phase"] == "concurrent"]))
        out = doc.get("config", {}).get("outputTokens")
        fit = doc.get("scenarios", {}).get("capacity", {}).get("summary", {})
        notes = [f"{out} tokens out"] if out else []
        if fit.get("maxConcurrencyAtMaxModelLen"):
            notes.append(f"{fit['maxConcurrencyAtMaxModelLen']:,} sequences fit")
        rows.append((label, s, wall, n, "\n".join(notes)))
    if len(rows) < 2:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    xs = list(range(len(rows)))
    width = 0.38
    conc = [r[1]["concurrentOutputTokensPerSecond"] for r in rows]
    knee_rates = [r[1].get("kneeOutputTokensPerSecond") or 0.0 for r in rows]
    _label_bars(
        left,
        left.bar(
            [x - width / 2 for x in xs],
            conc,
            width,
            color="tab:orange",
            label=f"{rows[0][3]} at once",
        ),
        "{:,.0f}",
    )
    knees = sorted({str(r[1].get("kneeConcurrency")) for r in rows})
    _label_bars(
        left,
        left.bar(
            [x + width / 2 for x in xs],
            knee_rates,
            width,
            color="tab:purple",
            label=f"at the ladder's knee ({' / '.join(knees)} at once)",
        ),
        "{:,.0f}",
    )
    names = [f"{r[0]}\n{r[4]}" if r[4] else r[0] for r in rows]
    left.set_xticks(xs, names)
    left.set(ylabel="output tokens/s", title="Throughput")
    left.set_ylim(top=max([*conc, *knee_rates]) * 1.4)
    left.legend(loc="upper left", fontsize="small")
    _label_bars(right, right.bar(names, [r[2] for r in rows], color="tab:orange"), "{:.2f} s")
    right.set(ylabel="wall time (s)", title=f"Wall time of {rows[0][3]} requests at once")
    fig.suptitle("max_model_len: throughput and wall time")
    return fig


PLOTS: dict[str, Callable[[dict[str, Any]], Figure | None]] = {
    "latency_per_request.png": plot_latency_per_request,
    "throughput_vs_concurrency.png": plot_throughput_vs_concurrency,
    "queue_depth.png": plot_queue_depth,
    "prefix_ttft.png": plot_prefix_ttft,
    "token_timeline.png": plot_token_timeline,
    "naive_vs_vllm.png": plot_naive,
    "serial_vs_concurrent.png": plot_serial_vs_concurrent,
    "concurrent_requests.png": plot_concurrent_requests,
    "cold_vs_warm.png": plot_cold_vs_warm,
}


def write_plots(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """Writes the PNGs the document has data for; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, make in PLOTS.items():
        fig = make(doc)
        if fig is not None:
            written.append(save_figure(fig, out_dir / filename))
    return written


def save_figure(fig: Figure, path: Path) -> Path:
    """Writes one plot as PNG and frees it."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
        lab = scenario.get("lab")
        if isinstance(lab, dict):
            beside = lab.get("runnerFigures", {})
            summary = scenario.get("summary", {})
            rows = "".join(
                f"<tr><td>{_esc(k)}</td><td>{_esc(_fmt_figure(v))}</td>"
                f"<td>{_esc(lab.get('definitions', {}).get(k, ''))}</td>"
                f"<td>{_esc(beside.get(k, ''))}</td>"
                f"<td>{_esc(_fmt_figure(summary.get(beside[k])) if k in beside else '')}</td></tr>"
                for k, v in lab.get("figures", {}).items()
            )
            note = f"<p>{_esc(lab['note'])}</p>" if lab.get("note") else ""
            parts.append(
                f"<h3>{_esc(lab.get('lab') or lab.get('preset'))}'s figures, by the lab's "
                f"definitions</h3>{note}<table><tr><th>lab's figure</th><th>value</th>"
                "<th>the lab's definition</th><th>runner's figure beside it</th><th>value</th>"
                f"</tr>{rows}</table>"
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
