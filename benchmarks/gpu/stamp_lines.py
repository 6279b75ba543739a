"""Copy a server's output to its log unchanged, and stamp each line as it arrives (issue 34).

    SERVER 2>&1 | python3 stamp_lines.py LOG STAMPS

LOG gets the bytes as they came (what `kubectl logs` would show, for the operator's parser);
STAMPS one line per line of output: the wall-clock time (time.time(), ms) at which it arrived,
a tab, its text. A carriage return ends a line too, so each redraw of a progress bar (tqdm's
"Capturing CUDA graphs: 4%") gets its own stamp: the client's clock for each phase's start and
end, independent of the one-second stamps the server prints.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

_END = re.compile(rb"[\r\n]")


def main() -> int:
    log_path, stamps_path = Path(sys.argv[1]), Path(sys.argv[2])
    with log_path.open("ab", buffering=0) as raw, stamps_path.open("a", buffering=1) as stamps:
        rest = b""
        while chunk := os.read(0, 65536):
            now = time.time()
            raw.write(chunk)
            *lines, rest = _END.split(rest + chunk)
            for line in lines:
                if line.strip():
                    stamps.write(f"{now:.3f}\t{line.decode(errors='replace')}\n")
        if rest.strip():
            stamps.write(f"{time.time():.3f}\t{rest.decode(errors='replace')}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
