"""The labs' charts drawn by the runner's report from small results: lab 1's serial vs
concurrent and cold vs warm, lab 2's concurrent requests with the wall time, its per-request
naive vs vLLM bars and its max_model_len 2048 vs 512 comparison, and
benchmarks/gpu/report.py --plots writing them next to each part's results."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from tests.unit.bench.test_bench_core import synthetic_document
from vllm_bench import report

GPU_REPORT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "report.py"
PNG = b"\x89PNG\r\n\x1a\n"


def titles(fig: Figure) -> str:
    suptitle = fig._suptitle.get_text() if fig._suptitle else ""
    return " | ".join([suptitle, *(ax.get_title() for ax in fig.axes)])


def saved(fig: Figure | None, tmp_path: Path, name: str) -> Path:
    assert fig is not None
    path = report.save_figure(fig, tmp_path / name)
    assert path.read_bytes()[:8] == PNG
    assert path.stat().st_size > 5000
    return path


def test_serial_vs_concurrent(tmp_path: Path) -> None:
    fig = report.plot_serial_vs_concurrent(synthetic_document())
    assert fig is not None
    text = titles(fig)
    assert "Serial vs concurrent" in text
    assert "Wall time for 4 requests" in text
    assert "Output throughput" in text
    saved(fig, tmp_path, "serial_vs_concurrent.png")


def test_concurrent_requests_with_the_wall_time(tmp_path: Path) -> None:
    doc = synthetic_document()
    fig = report.plot_concurrent_requests(doc)
    assert fig is not None
    assert "4 requests at once" in titles(fig)
    assert "one after another" in titles(fig)
    (ax,) = fig.axes
    assert any(str(t.get_text()).startswith("wall time ") for t in ax.get_legend().get_texts())
    saved(fig, tmp_path, "concurrent_requests.png")


def test_cold_vs_warm(tmp_path: Path) -> None:
    fig = report.plot_cold_vs_warm(synthetic_document())
    assert fig is not None
    assert "Prefix cache: cold vs warm" in titles(fig)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels[:2] == ["cold", "warm"]
    saved(fig, tmp_path, "cold_vs_warm.png")


NAIVE: dict[str, Any] = {
    "warmupDiscarded": 1,
    "samples": [
        {"latencySeconds": 12.0, "promptTokens": 150, "outputTokens": 8},
        *(
            {"latencySeconds": 3.0 + i / 10, "promptTokens": 150, "outputTokens": 8}
            for i in range(3)
        ),
    ],
}


def test_naive_vs_vllm_per_request(tmp_path: Path) -> None:
    fig = report.plot_naive_vs_vllm_per_request(NAIVE, synthetic_document())
    assert fig is not None
    assert "Naive vs vLLM, per request" in titles(fig)
    (ax,) = fig.axes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0].startswith("transformers generate()")
    assert legend[1].startswith("vLLM")
    # the warm-up is left out: three naive requests against three serial vLLM requests
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "3"]
    saved(fig, tmp_path, "naive_vs_vllm_per_request.png")


def _with_len(doc: dict[str, Any], max_model_len: int) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["environment"]["maxModelLen"] = max_model_len
    return doc


def test_max_model_len_comparison(tmp_path: Path) -> None:
    doc = synthetic_document()
    docs = {"max_model_len 2048": _with_len(doc, 2048), "max_model_len 512": _with_len(doc, 512)}
    fig = report.plot_context_lengths(docs)
    assert fig is not None
    text = titles(fig)
    assert "max_model_len: throughput and wall time" in text
    assert "Wall time of 4 requests at once" in text
    ticks = [t.get_text() for t in fig.axes[1].get_xticklabels()]
    assert [t.splitlines()[0] for t in ticks] == list(docs)
    saved(fig, tmp_path, "max_model_len.png")
    assert report.plot_context_lengths({"only one": doc}) is None


def test_gpu_report_writes_the_lab_plots(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("gpu_report", GPU_REPORT)
    assert spec is not None
    assert spec.loader is not None
    gpu_report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_report)
    doc = synthetic_document()
    for part, length in (("lab1", 2048), ("lab2", 2048), ("lab2-512", 512)):
        (tmp_path / f"{part}.json").write_text(json.dumps({"runner": _with_len(doc, length)}))
    (tmp_path / "lab2-naive.json").write_text(json.dumps(NAIVE))
    written = {str(p.relative_to(tmp_path)) for p in gpu_report.write_lab_plots(tmp_path)}
    assert {
        "lab1/serial_vs_concurrent.png",
        "lab1/cold_vs_warm.png",
        "lab2/concurrent_requests.png",
        "lab2/naive_vs_vllm_per_request.png",
        "lab2/max_model_len.png",
        "lab2-512/serial_vs_concurrent.png",
    } <= written
    assert all((tmp_path / p).read_bytes()[:8] == PNG for p in written)
