"""A sampling CPU profiler for the operator process, loaded by Python at start-up when this
folder is on PYTHONPATH (benchmarks/operator_scale.py --profile does that): py-spy in small,
for any revision of the operator (its code is not changed, so a before/after comparison
profiles both the same way).

Switched by files, so the benchmark decides the window without signals:
- it does nothing unless VLLM_BENCH_PROFILE names a path P;
- while the file P.on exists, a thread samples every thread's stack every INTERVAL seconds
  and weights each sample by the CPU time the thread used since the previous sample (from
  /proc/self/task/<tid>/stat: a blocked thread costs nothing, however deep its stack);
- every second while sampling, P is rewritten as JSON: CPU seconds per thread group (the
  thread's name with its number dropped: reconcile-3 -> reconcile), by function with its own
  time ("self") and with what it calls ("total"), and the folded stacks (flame-graph input).

The sampler's own CPU is measured too (its thread is one of the groups: "profiler").
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType

INTERVAL = 0.01  # seconds between samples
TICK = 1.0 / os.sysconf("SC_CLK_TCK")  # /proc's CPU times are in clock ticks


def _cpu(tid: int) -> float:
    """CPU seconds (user + system) of thread `tid` of this process."""
    try:
        fields = Path(f"/proc/self/task/{tid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * TICK


def _where(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("site-packages/", "vllm_operator/", "lib/python3"):
        if marker in path:
            path = path[path.index(marker) :]
            break
    return f"{code.co_name} ({path}:{code.co_firstlineno})"


def _stack(frame: FrameType | None) -> list[str]:
    out: list[str] = []
    while frame is not None:
        out.append(_where(frame))
        frame = frame.f_back
    return out[::-1]  # outermost first


def _group(name: str) -> str:
    return re.sub(r"[-_ ]?\d+(\s*\(.*\))?$", "", name) or name


class Sampler:
    def __init__(self, path: Path) -> None:
        self.path, self.on = path, path.with_name(path.name + ".on")
        self.reset()

    def reset(self) -> None:
        self.groups: Counter[str] = Counter()
        self.own: Counter[str] = Counter()
        self.total: Counter[str] = Counter()
        self.folded: Counter[str] = Counter()
        self.samples = 0
        self.started = time.time()
        self.last: dict[int, float] = {}

    def sample(self) -> None:
        me = threading.get_ident()
        names = {t.ident: (t.name, t.native_id) for t in threading.enumerate()}
        frames = sys._current_frames()
        self.samples += 1
        for ident, (name, tid) in names.items():
            if tid is None:
                continue
            now = _cpu(tid)
            used = now - self.last.get(tid, now)
            self.last[tid] = now
            if used <= 0:
                continue
            group = "profiler" if ident == me else _group(name)
            self.groups[group] += used
            frame = frames.get(ident)
            if frame is None or ident == me:
                continue
            stack = _stack(frame)
            self.own[stack[-1]] += used
            for where in set(stack):
                self.total[where] += used
            self.folded[";".join([group, *stack])] += used

    def write(self) -> None:
        top = 60
        body = {
            "started": self.started,
            "seconds": round(time.time() - self.started, 1),
            "samples": self.samples,
            "interval": INTERVAL,
            "cpu_seconds_by_thread_group": {k: round(v, 3) for k, v in self.groups.most_common()},
            "self": [[k, round(v, 3)] for k, v in self.own.most_common(top)],
            "total": [[k, round(v, 3)] for k, v in self.total.most_common(top)],
            "folded": {k: round(v, 3) for k, v in self.folded.most_common(2000)},
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(body, indent=1))
        tmp.replace(self.path)

    def run(self) -> None:
        sampling, written = False, 0.0
        while True:
            if self.on.exists():
                if not sampling:
                    self.reset()
                    sampling = True
                    for t in threading.enumerate():  # (the first sample's baseline)
                        if t.native_id is not None:
                            self.last[t.native_id] = _cpu(t.native_id)
                self.sample()
                if time.monotonic() - written > 1.0:
                    self.write()
                    written = time.monotonic()
                time.sleep(INTERVAL)
            else:
                if sampling:
                    self.write()
                    sampling = False
                time.sleep(0.2)


def _start() -> None:
    target = os.environ.get("VLLM_BENCH_PROFILE")
    if not target:
        return
    sampler = Sampler(Path(target))
    threading.Thread(target=sampler.run, name="profiler", daemon=True).start()


_start()
