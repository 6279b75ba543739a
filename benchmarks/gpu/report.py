"""The labs' tables from the JSON the GPU host returned (issue 13): one table per lab with the
lab's figure, the H200 figure, its spread over the rounds and decode throughput as a share of
the memory-bandwidth roofline; then the runner before/after its GPU-rate defaults and the
runner against `vllm bench serve`.

    python benchmarks/gpu/report.py RESULTS_DIR > benchmarks/gpu/results/REPORT.md
    python benchmarks/gpu/report.py RESULTS_DIR --plots

--plots draws the labs' charts with the runner's report (vllm_bench.report) instead: every
part's own plots into RESULTS_DIR/PART/ (serial vs concurrent, the concurrent requests with
the wall time, prefix cold vs warm, ...), and the two that compare parts into
RESULTS_DIR/lab2/: naive_vs_vllm_per_request.png (lab2-naive against lab2's serial phase)
and max_model_len.png (lab2 against lab2-512); the same for the preset parts into
RESULTS_DIR/lab2-lab/ (with lab_streaming.png) and lab 1's own two charts into
RESULTS_DIR/lab1-engine/. The report ends with the preset parts' figures by the labs' own
definitions beside what lab 2 printed, each under the card it ran on (RESULTS_DIR/devices.json;
the H200 where it names none).

RESULTS_DIR holds what benchmarks/gpu/run_all.sh packed (results/*.json, results/*/result.json).
Roofline: 4.24 TB/s device-to-device copy bandwidth measured on the H200 (GPU.md), weights
read once per generated token at batch 1: Llama-3-8B fp16 (16.06 GB) 264 tok/s, TinyLlama-1.1B
fp16 1,927 tok/s. A figure per stream (1 / TPOT) is compared with it; aggregate throughput of
many streams shares one read of the weights and may exceed it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "runner"))  # vllm_bench

ROOFLINE = {"tinyllama": 1927.0, "llama3-8b": 264.0}
# the reference labs' own figures (Llama-3-8B fp16 on an unnamed 24 GB GPU)
LAB2 = {"naive": "52 tok/s", "concurrent10": "354 tok/s", "ttft": "166 ms"}


def load(results: Path, part: str) -> dict[str, Any] | None:
    path = results / f"{part}.json"
    return json.loads(path.read_text()) if path.exists() else None


def num(value: Any, digits: int = 0, unit: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{unit}"


def ms(value: Any) -> str:
    return "—" if value is None else f"{value * 1000:,.1f} ms"


def pct(value: float | None, roofline: float) -> str:
    return "—" if value is None else f"{100 * value / roofline:.0f}%"


def scenario(doc: dict[str, Any] | None, name: str) -> dict[str, Any]:
    if not doc:
        return {}
    found: dict[str, Any] = doc["runner"]["scenarios"].get(name, {})
    return found


def summary(doc: dict[str, Any] | None, name: str, key: str) -> Any:
    return scenario(doc, name).get("summary", {}).get(key)


def spread(
    doc: dict[str, Any] | None,
    name: str,
    key: str,
    digits: int = 0,
    *,
    scale: float = 1,
    unit: str = "",
) -> str:
    s = scenario(doc, name).get("spread", {}).get(key)
    if not s or s["min"] is None:
        return "1 round"
    low, high = s["min"] * scale, s["max"] * scale
    return f"{low:,.{digits}f}-{high:,.{digits}f}{unit} ({s['n']} rounds)"


def row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


HEADER = [row("figure", "lab", "H200", "spread", "% of roofline"), row(*["---"] * 5)]


def lab1_table(results: Path) -> list[str]:
    doc, before = load(results, "lab1"), load(results, "lab1-before")
    roof = ROOFLINE["tinyllama"]
    tpot = summary(doc, "streaming", "tpotP50Seconds")
    per_stream = 1 / tpot if tpot else None
    serial = summary(doc, "batching", "serialOutputTokensPerSecond")
    lines = ["### Lab 1: TinyLlama-1.1B (random fp16 weights), H200, vLLM", "", *HEADER]
    lines += [
        row("KV-cache capacity (tokens)", "—", num(summary(doc, "capacity", "kvCacheTokens")),
            "", ""),
        row("max concurrency at max_model_len 2048", "—",
            num(summary(doc, "capacity", "maxConcurrencyAtMaxModelLen")), "", ""),
        row("serial output tok/s", "—", num(serial),
            spread(doc, "batching", "serialOutputTokensPerSecond"), pct(serial, roof)),
        row("32 concurrent output tok/s", "—",
            num(summary(doc, "batching", "concurrentOutputTokensPerSecond")),
            spread(doc, "batching", "concurrentOutputTokensPerSecond"), "(aggregate)"),
        row(f"ladder knee: concurrency {summary(doc, 'batching', 'kneeConcurrency')}", "—",
            num(summary(doc, "batching", "kneeOutputTokensPerSecond")),
            spread(doc, "batching", "kneeOutputTokensPerSecond"), "(aggregate)"),
        row("prefix cache cold TTFT p50", "—", ms(summary(doc, "prefix", "coldTtftP50Seconds")),
            spread(doc, "prefix", "coldTtftP50Seconds", 1, scale=1000, unit=" ms"), ""),
        row("prefix cache warm TTFT p50", "—", ms(summary(doc, "prefix", "warmTtftP50Seconds")),
            spread(doc, "prefix", "warmTtftP50Seconds", 1, scale=1000, unit=" ms"), ""),
        row("prefix TTFT speed-up / hit rate", "—",
            f"{num(summary(doc, 'prefix', 'ttftSpeedup'), 2)}x / "
            f"{num(summary(doc, 'prefix', 'hitRate'), 3)}", "", ""),
        row("streaming TPOT p50 (tok/s per stream)", "—",
            f"{ms(tpot)} ({num(per_stream)})",
            spread(doc, "streaming", "tpotP50Seconds", 2, scale=1000, unit=" ms"),
            pct(per_stream, roof)),
    ]  # fmt: skip
    if before:
        b = before["runner"]["scenarios"]["batching"]["summary"]
        lines += [
            "",
            "Runner defaults before/after (32 requests at once, 128 tokens out):",
            "",
            row("runner", "32 concurrent tok/s", "peak in flight"),
            row("---", "---", "---"),
            row("before: --max-rps 100, no warm-up", num(b.get("concurrentOutputTokensPerSecond")),
                num(b.get("concurrentPeakInFlight"))),
            row("after: no cap, warm-up, 3 rounds (median)",
                num(summary(doc, "batching", "concurrentOutputTokensPerSecond")),
                num(summary(doc, "batching", "concurrentPeakInFlight"))),
        ]  # fmt: skip
    return lines


def lab2_table(results: Path) -> list[str]:
    doc, short, naive = (
        load(results, "lab2"),
        load(results, "lab2-512"),
        load(results, "lab2-naive"),
    )
    roof = ROOFLINE["llama3-8b"]
    naive_tps = naive["outputTokensPerSecond"] if naive else None
    naive_spread = (
        f"{naive['spread']['min']:.1f}-{naive['spread']['max']:.1f} "
        f"({len(naive['samples']) - 1} requests)"
        if naive
        else "—"
    )
    serial = summary(doc, "batching", "serialOutputTokensPerSecond")
    tpot = summary(doc, "streaming", "tpotP50Seconds")
    per_stream = 1 / tpot if tpot else None
    lines = ["### Lab 2: Llama-3-8B (random fp16 weights), H200", "", *HEADER]
    lines += [
        row("transformers generate(), one request at a time", LAB2["naive"], num(naive_tps, 1),
            naive_spread, pct(naive_tps, roof)),
        row("vLLM serial output tok/s", "—", num(serial),
            spread(doc, "batching", "serialOutputTokensPerSecond"), pct(serial, roof)),
        row("vLLM 10 concurrent output tok/s", LAB2["concurrent10"],
            num(summary(doc, "batching", "concurrentOutputTokensPerSecond")),
            spread(doc, "batching", "concurrentOutputTokensPerSecond"), "(aggregate)"),
        row(f"ladder knee: concurrency {summary(doc, 'batching', 'kneeConcurrency')}", "—",
            num(summary(doc, "batching", "kneeOutputTokensPerSecond")),
            spread(doc, "batching", "kneeOutputTokensPerSecond"), "(aggregate)"),
        row("streaming TTFT p50", LAB2["ttft"], ms(summary(doc, "streaming", "ttftP50Seconds")),
            spread(doc, "streaming", "ttftP50Seconds", 1, scale=1000, unit=" ms"), ""),
        row("streaming TPOT p50 (tok/s per stream)", "—", f"{ms(tpot)} ({num(per_stream)})",
            spread(doc, "streaming", "tpotP50Seconds", 2, scale=1000, unit=" ms"),
            pct(per_stream, roof)),
    ]  # fmt: skip
    for label, d in (("2048", doc), ("512", short)):
        lines.append(
            row(f"max_model_len {label}: KV tokens / max concurrency / knee tok/s", "—",
                f"{num(summary(d, 'capacity', 'kvCacheTokens'))} / "
                f"{num(summary(d, 'capacity', 'maxConcurrencyAtMaxModelLen'))} / "
                f"{num(summary(d, 'batching', 'kneeOutputTokensPerSecond'))}",
                spread(d, "batching", "kneeOutputTokensPerSecond"), "")
        )  # fmt: skip
    return lines


ARMS = (("runner", "runner"), ("vllm", "vllm bench serve"), ("vllmNoTrustEnv", "its trust_env off"))


def outside_ms(tool: dict[str, Any]) -> float:
    """Mean time a request of this tool spent outside the server before its first token: the
    client's TTFT minus the server's own (vllm:time_to_first_token_seconds, same requests)."""
    server = tool["server"]
    return 1000 * float(tool["ttftMeanSeconds"] - server["ttftSecondsSum"] / server["e2eCount"])


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def same_tokens(r: dict[str, Any], arms: list[str]) -> str:
    """The server-counted prompt/generation tokens of the round's arms: one pair when equal."""
    pairs = {
        (int(r[a]["server"]["promptTokens"]), int(r[a]["server"]["generationTokens"])) for a in arms
    }
    text = ", ".join(f"{p:,} / {g:,}" for p, g in sorted(pairs))
    return text if len(pairs) == 1 else f"DIFFER: {text}"


def workload_table(w: dict[str, Any]) -> list[str]:
    arms = [key for key, _ in ARMS if key in w["rounds"][0]]
    names = dict(ARMS)
    wl = w["workload"]
    cells = ["round (order)"]
    for a in arms:
        cells.append(f"{names[a]} tok/s")
        if a != "runner":
            cells.append(f"runner / {names[a]}")
    cells += ["client CPU ms/request (" + " / ".join(names[a] for a in arms) + ")",
              "outside the server before 1st token, ms (same order)",
              "server-counted tokens in / out (every arm)"]  # fmt: skip
    lines = [
        (
            f"**{wl['requestsAtOnce']} requests at once, ~{wl['inputTokens']} tokens in, "
            f"{wl['outputTokens']} out** ({len(w['rounds'])} rounds)"
        ),
        "",
        row(*cells),
        row(*["---"] * len(cells)),
    ]
    for r in w["rounds"]:
        c = [f"{r['round']} ({' > '.join(names[o] for o in r['order'])})"]
        for a in arms:
            c.append(num(r[a]["outputTokensPerSecond"]))
            if a != "runner":
                c.append(
                    f"{r['runner']['outputTokensPerSecond'] / r[a]['outputTokensPerSecond']:.3f}"
                )
        c.append(" / ".join(f"{r[a]['clientCpuMsPerRequest']:.2f}" for a in arms))
        c.append(" / ".join(f"{outside_ms(r[a]):.0f}" for a in arms))
        c.append(same_tokens(r, arms))
        lines.append(row(*c))
    c = ["median"]
    for a in arms:
        tps = median([r[a]["outputTokensPerSecond"] for r in w["rounds"]])
        c.append(num(tps))
        if a != "runner":
            runner = median([r["runner"]["outputTokensPerSecond"] for r in w["rounds"]])
            per_round = median([r["runner"]["outputTokensPerSecond"] / r[a]["outputTokensPerSecond"]
                                for r in w["rounds"]])  # fmt: skip
            c.append(f"**{runner / tps:.3f}** (of rounds: {per_round:.3f})")
    c.append(" / ".join(f"{median([r[a]['clientCpuMsPerRequest'] for r in w['rounds']]):.2f}"
                        for a in arms))  # fmt: skip
    c.append(" / ".join(f"{median([outside_ms(r[a]) for r in w['rounds']]):.0f}" for a in arms))
    c.append("")
    lines.append(row(*c))
    return lines


def pooled_table(results: Path) -> list[str]:
    """Every set of rounds measured (the final run and its repeats), per workload: the ratio
    of the medians against `vllm bench serve` as shipped and with its trust_env off."""
    sets = [("final (vs-upstream.json)", results / "vs-upstream.json")]
    repeats = results / "vs-upstream-repeats"
    sets += [(p.name, p) for p in sorted(repeats.glob("[1-9]*.json"))] if repeats.exists() else []
    lines = [
        row("set", "workload", "rounds", "runner / vllm bench serve",
            "runner / its trust_env off", "client CPU ms/request (runner / vllm / trust_env off)"),
        row(*["---"] * 6),
    ]  # fmt: skip
    for name, path in sets:
        for w in json.loads(path.read_text()).get("workloads", []):
            rs, wl = w["rounds"], w["workload"]
            runner = median([r["runner"]["outputTokensPerSecond"] for r in rs])
            vllm = median([r["vllm"]["outputTokensPerSecond"] for r in rs])
            has3 = "vllmNoTrustEnv" in rs[0]
            off = (
                median([r["vllmNoTrustEnv"]["outputTokensPerSecond"] for r in rs]) if has3 else None
            )
            cpu = [median([r[a]["clientCpuMsPerRequest"] for r in rs])
                   for a in ("runner", "vllm", "vllmNoTrustEnv") if a in rs[0]]  # fmt: skip
            lines.append(row(
                name, f"{wl['requestsAtOnce']}x{wl['inputTokens']}x{wl['outputTokens']}",
                str(len(rs)), f"{runner / vllm:.3f}", "—" if off is None else f"{runner / off:.3f}",
                " / ".join(f"{x:.2f}" for x in cpu)))  # fmt: skip
    return lines


def upstream_table(results: Path) -> list[str]:
    vs = load(results, "vs-upstream")
    if not vs or "workloads" not in vs:
        return ["### The runner against `vllm bench serve`: not measured"]
    lines = [
        "### The runner against `vllm bench serve` (TinyLlama, same server)",
        "",
        ("Both tools in one Python process (vLLM imported once: benchmarks/vs_vllm_rounds.py), "
         "the same prompts in a round, the server's prefix cache reset before each tool, the "
         "order rotating; a third arm is `vllm bench serve` with its aiohttp session's "
         "trust_env off. Throughput: the server's completion tokens / first send to last "
         "completion (the same definition in both). Client CPU: time.process_time() over the "
         "same window, per request. \"Outside the server\": the client's mean TTFT minus the "
         "server's own (vllm:time_to_first_token_seconds) for the same requests."),
        "",
    ]  # fmt: skip
    for w in vs["workloads"]:
        lines += [*workload_table(w), ""]
    lines += ["All sets of rounds (ratios of the medians):", "", *pooled_table(results)]
    return lines


def commands(results: Path) -> list[str]:
    lines = ["### Command lines (from the JSON)", ""]
    for part in ("lab1-before", "lab1", "lab2-naive", "lab2", "lab2-512"):
        doc = load(results, part)
        if not doc:
            continue
        cmd = doc.get("command") or doc.get("runner", {}).get("_gpu", {}).get("command")
        lines.append(f"- {part}: `{cmd}`")
    vs = load(results, "vs-upstream")
    if vs and vs.get("workloads"):
        cmd = vs["command"]  # vs_vllm_rounds.py's sys.argv
        lines.append(f"- vs-upstream: `python {' '.join(cmd) if isinstance(cmd, list) else cmd}`")
        argv = vs["workloads"][0]["rounds"][0]["vllm"]["argv"]
        lines.append(f"- vs-upstream, its `vllm bench serve` (round 1): `{' '.join(argv)}`")
    return lines


# the lab presets' figures (scenarios.*.lab.figures) against what lab 2 printed
# (lab_texts.json's lab_figures; lab 1 prints none), per part
LAB2_PRINTED = {
    "lab2-lab": {
        "smokeLatencySeconds": "smoke_latency_s",
        "sequentialLatencySeconds": "vllm_sequential_s",
        "sequentialAvgSeconds": "vllm_sequential_avg_s",
        "concurrentLatencySeconds": "concurrent_latency_s",
        "concurrentOutputTokens": "concurrent_tokens",
        "concurrentWallSeconds": "concurrent_wall_s",
        "concurrentAvgSeconds": "concurrent_avg_s",
        "concurrentTotalTokens": "concurrent_total_tokens",
        "concurrentOutputTokensPerSecond": "concurrent_tok_s",
        "concurrentSerialSumSeconds": "concurrent_serial_sum_s",
        "ttftMs": "streaming_ttft_ms",
        "totalSeconds": "streaming_total_s",
        "tokens": "streaming_tokens",
        "tokensPerSecond": "streaming_tok_s",
    },
    "lab2-512-lab": {
        "concurrentWallSeconds": "tuned_512_wall_s",
        "concurrentAvgSeconds": "tuned_512_avg_s",
        "concurrentOutputTokensPerSecond": "tuned_512_tok_s",
    },
}


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return " / ".join(_cell(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def presets_table(results: Path) -> list[str]:
    """The parts run with the labs' own texts (--preset): every figure by the lab's own
    definition beside what the lab printed and the runner's own figure for it; the card each
    part ran on from devices.json beside the results (the H200 where it names none)."""
    devices_path = results / "devices.json"
    devices = json.loads(devices_path.read_text()) if devices_path.exists() else {}
    try:
        from vllm_bench import lab_texts  # noqa: PLC0415

        printed = lab_texts.texts()["lab2_llama3_8b"]["lab_figures"]
    except Exception:  # noqa: BLE001 - the lab column stays empty
        printed = {}
    lines: list[str] = []
    for part in ("lab1-engine", "lab2-lab", "lab2-512-lab"):
        doc = load(results, part)
        if not doc or not doc.get("runner"):
            continue
        runner = doc["runner"]
        card = devices.get(part, devices.get("_default", "NVIDIA H200"))
        env = runner.get("environment", {})
        stand_ins = runner.get("config", {}).get("presetStandIns")
        server = doc.get("server", {})
        heading = (
            f"### {part}: --preset {runner.get('config', {}).get('preset')} on {card}, "
            f"vLLM {env.get('serverVersion', '?')}, max_model_len {env.get('maxModelLen')}"
        )
        started = (
            f"Server: `{server.get('command', '?')}` (up in {server.get('startSeconds', '?')} "
            f"s). Stand-in texts: {stand_ins if stand_ins else 'none'}."
        )
        lines += [
            heading,
            "",
            started,
            "",
            *(["Lab 1 prints no figures of its own: its column stays empty.", ""]
              if part == "lab1-engine" else []),
            row("scenario", "lab's figure", "lab printed", "this run", "runner's own figure"),
            row(*["---"] * 5),
        ]  # fmt: skip
        for name, sc in runner.get("scenarios", {}).items():
            lab = sc.get("lab", {})
            beside = lab.get("runnerFigures", {})
            for key, value in lab.get("figures", {}).items():
                own = beside.get(key)
                own_cell = f"{own} = {_cell(sc.get('summary', {}).get(own))}" if own else ""
                lab_key = LAB2_PRINTED.get(part, {}).get(key)
                lines.append(
                    row(name, key, _cell(printed.get(lab_key)) if lab_key else "",
                        _cell(value), own_cell)
                )  # fmt: skip
            if not lab.get("figures") and lab.get("note"):
                lines.append(row(name, "—", "", lab["note"], ""))
        lines.append("")
    naive = load(results, "lab2-naive-fp16")
    if naive:
        card = devices.get("lab2-naive-fp16", devices.get("_default", "NVIDIA H200"))
        skip = int(naive.get("warmupDiscarded") or 0)
        measured = naive.get("samples", [])[skip:]
        heading = (
            f"### lab2-naive-fp16: transformers generate() on {card} "
            f"(chat template: {naive.get('chatTemplate')}; {naive.get('sampling')})"
        )
        lines += [
            heading,
            "",
            row("figure", "lab printed", "this run"),
            row(*["---"] * 3),
            row("per request (s)", _cell(printed.get("naive_per_request_s")),
                _cell([s["latencySeconds"] for s in measured])),
            row("tokens", _cell(printed.get("naive_tokens")),
                _cell([s["outputTokens"] for s in measured])),
            row("mean per request (s)", _cell(printed.get("naive_avg_s")),
                _cell(sum(s["latencySeconds"] for s in measured) / len(measured))
                if measured else "—"),
            row("tok/s (median)", _cell(printed.get("naive_tok_s")),
                _cell(naive.get("outputTokensPerSecond"))),
            "",
        ]  # fmt: skip
    return lines


def _lab_figures(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """A preset run's figures by the lab's own definitions (the scenario's `lab`)."""
    lab = doc.get("scenarios", {}).get(name, {}).get("lab", {})  # doc: the runner's result
    found: dict[str, Any] = lab.get("figures", {})
    return found


def _as_serial(runner: dict[str, Any], phase: str) -> dict[str, Any]:
    """The runner document with the batching samples of `phase` (a lab step, such as
    lab 2's lab-sequential) as its serial phase, for the runner's per-request chart."""
    batching = runner.get("scenarios", {}).get("batching", {})
    samples = [{**x, "phase": "serial"} for x in batching.get("samples", []) if x["phase"] == phase]
    return {**runner, "scenarios": {"batching": {**batching, "samples": samples}}}


def plot_lab1_baseline_vs_batch(doc: dict[str, Any]) -> Any:
    """Lab 1's serial-vs-batched chart by its own steps: its first 4 prompts in one request
    (the baseline) against its 32 in one request, as wall time and output tokens/s."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - via vllm_bench.report (Agg backend)

    f = _lab_figures(doc, "batching")
    walls = [f.get("baselineSeconds"), f.get("batchSeconds")]
    rates = [f.get("baselineOutputTokensPerSecond"), f.get("batchOutputTokensPerSecond")]
    tokens = [f.get("baselineOutputTokens"), f.get("batchOutputTokens")]
    if None in walls or None in rates:
        return None
    from vllm_bench import report  # noqa: PLC0415

    names = [f"first 4 prompts\nin one request\n({tokens[0]} tokens)",
             f"all 32 prompts\nin one request\n({tokens[1]} tokens)"]  # fmt: skip
    colours = [report.PHASE_COLOURS["serial"], report.PHASE_COLOURS["concurrent"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4.4))
    report._label_bars(left, left.bar(names, walls, color=colours), "{:.3f} s")
    left.set(ylabel="wall time (s)", title="Wall time")
    report._label_bars(right, right.bar(names, rates, color=colours), "{:,.0f}")
    right.set(ylabel="output tokens/s", title="Output throughput")
    speedup = f.get("speedup")
    fig.suptitle(
        "Lab 1: baseline vs batch (its own steps)"
        + (f": {speedup:.1f}x the throughput" if speedup else "")
    )
    return fig


def plot_lab1_cold_vs_warm(doc: dict[str, Any]) -> Any:
    """Lab 1's prefix chart by its own step: its one prompt (the shared system prompt and
    the user turn) right after a prefix-cache reset, then again, as wall time."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    f = _lab_figures(doc, "prefix")
    cold, warm = f.get("coldSeconds"), f.get("warmSeconds")
    if cold is None or warm is None:
        return None
    from vllm_bench import report  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    bars = ax.bar(
        ["cold\n(after the reset)", "warm\n(the same prompt again)"],
        [cold * 1000, warm * 1000],
        color=[report.PHASE_COLOURS["cold"], report.PHASE_COLOURS["warm"]],
    )
    report._label_bars(ax, bars, "{:.1f} ms")
    notes = []
    if f.get("sharedPrefixTokens") is not None:
        notes.append(f"shared prefix ~{f['sharedPrefixTokens']} tokens by the lab's estimate")
    if f.get("coldAfterReset") is False:
        notes.append("NO cache reset before cold")
    speedup = f.get("speedup")
    ax.set(
        ylabel="wall time of the request (ms)",
        title="Lab 1: prefix cache cold vs warm (its own step)"
        + (f", {speedup:.2f}x" if speedup else "")
        + (f"\n({', '.join(notes)})" if notes else ""),
    )
    return fig


def _naive_title_and_room(fig: Any, naive: dict[str, Any], runner: dict[str, Any]) -> Any:
    """Lab 2's per-request chart as the lab titles it (the average speed-up: the naive mean
    latency over vLLM's), with head room so that the legend covers no bar label."""
    skip = int(naive.get("warmupDiscarded") or 0)
    slow = [s["latencySeconds"] for s in naive.get("samples", [])[skip:]]
    batching = runner.get("scenarios", {}).get("batching", {})
    fast = [x["latencySeconds"] for x in batching.get("samples", []) if x["phase"] == "serial"]
    fast = fast[: len(slow)]
    ax = fig.axes[0]
    if slow and fast:
        speedup = (sum(slow) / len(slow)) / (sum(fast) / len(fast))
        ax.set_title(f"{ax.get_title()}: vLLM {speedup:.1f}x faster on average")
    low, high = ax.get_ylim()
    ax.set_ylim(low, high * 1.2)
    ax.legend(loc="upper center", ncol=2)
    return fig


def plot_lab2_streaming(doc: dict[str, Any]) -> Any:
    """Lab 2's streaming chart by its own step: its one streamed request (the streaming
    scenario's first sample, lab.figures' source), tokens received against time, with dashed
    lines at the first token and at the end."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    streaming = doc.get("scenarios", {}).get("streaming", {})
    f = streaming.get("lab", {}).get("figures", {})
    samples = [s for s in streaming.get("samples", []) if s.get("tokenTimesSeconds")]
    if not f or not samples:
        return None
    times = samples[0]["tokenTimesSeconds"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.step(times, range(1, len(times) + 1), where="post", color="tab:blue",
            label="stream events received")  # fmt: skip
    ttft, total = f["ttftMs"] / 1000, f["totalSeconds"]
    ax.axvline(ttft, color="tab:red", linestyle="--", label=f"TTFT {f['ttftMs']:.1f} ms")
    ax.axvline(total, color="black", linestyle="--", label=f"total {total:.2f} s")
    ax.set(
        xlabel="time since the request was sent (s)",
        ylabel="tokens received",
        title=f"Lab 2: streaming one answer (its own step): {f['tokens']} tokens, "
        f"{f['tokensPerSecond']:.0f} tok/s",
    )
    ax.legend(loc="upper left")
    return fig


def write_lab_plots(results: Path) -> list[Path]:
    """The labs' charts from the results, drawn by the runner's report; for the preset
    runs (lab1-engine, lab2-lab, lab2-512-lab) also the labs' own charts by their steps:
    lab 1's baseline vs batch and cold vs warm; lab 2's naive vs vLLM per request (lab2-naive-
    fp16 against lab2-lab's sequential run of the same 5 prompts) and max_model_len 2048 vs 512
    (lab2-lab against lab2-512-lab), its streaming answer with dashed TTFT and total lines
    (lab2-lab/lab_streaming.png); its concurrent requests are the runner's
    concurrent_requests.png of lab2-lab (token_timeline.png: all ten streams)."""
    from vllm_bench import report  # noqa: PLC0415 - matplotlib only for --plots

    written: list[Path] = []
    runs = {}
    parts = ("lab1-before", "lab1", "lab2", "lab2-512", "lab1-engine", "lab2-lab", "lab2-512-lab")
    for part in parts:
        doc = load(results, part)
        if doc and doc.get("runner"):
            runs[part] = doc["runner"]
            written += report.write_plots(doc["runner"], results / part)
    naive = load(results, "lab2-naive")
    if naive and "lab2" in runs:
        fig = report.plot_naive_vs_vllm_per_request(naive, runs["lab2"])
        if fig is not None:
            written.append(
                report.save_figure(fig, results / "lab2" / "naive_vs_vllm_per_request.png")
            )
    naive_lab = load(results, "lab2-naive-fp16")
    if naive_lab and "lab2-lab" in runs:
        sequential = _as_serial(runs["lab2-lab"], "lab-sequential")
        fig = report.plot_naive_vs_vllm_per_request(naive_lab, sequential)
        if fig is not None:
            fig = _naive_title_and_room(fig, naive_lab, sequential)
            written.append(
                report.save_figure(fig, results / "lab2-lab" / "naive_vs_vllm_per_request.png")
            )
    for (a, b), folder in (
        (("lab2", "lab2-512"), "lab2"),
        (("lab2-lab", "lab2-512-lab"), "lab2-lab"),
    ):
        lengths = {
            f"max_model_len {runs[part].get('environment', {}).get('maxModelLen')}": runs[part]
            for part in (a, b)
            if part in runs
        }
        fig = report.plot_context_lengths(lengths)
        if fig is not None:
            written.append(report.save_figure(fig, results / folder / "max_model_len.png"))
    # the labs' own charts by their steps, drawn here (not by the runner's report)
    for part, name, make in (
        ("lab2-lab", "lab_streaming.png", plot_lab2_streaming),
        ("lab1-engine", "lab_baseline_vs_batch.png", plot_lab1_baseline_vs_batch),
        ("lab1-engine", "lab_cold_vs_warm.png", plot_lab1_cold_vs_warm),
    ):
        fig = make(runs[part]) if part in runs else None
        if fig is not None:
            written.append(report.save_figure(fig, results / part / name))
    return written


def main() -> None:
    results = Path(sys.argv[1])
    if "--plots" in sys.argv[2:]:
        for path in write_lab_plots(results):
            print(path)
        return
    versions = load(results, "lab1") or load(results, "lab2") or {}
    server = versions.get("server", {})
    lines = [
        "## GPU labs on an NVIDIA H200 (issue 13)",
        "",
        (
            f"vLLM {server.get('serverVersion', '?')}, server: `{server.get('command', '?')}`. "
            "Roofline per stream: 4.24 TB/s ÷ fp16 weight bytes (Llama-3-8B 264 tok/s, TinyLlama "
            "1,927 tok/s). Spread: min-max over the runner's interleaved rounds."
        ),
        "",
        *lab1_table(results),
        "",
        *lab2_table(results),
        "",
        *upstream_table(results),
        "",
        "## The lab presets with the labs' own texts (issue 35)",
        "",
        *presets_table(results),
        *commands(results),
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
