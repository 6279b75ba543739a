"""`python -m vllm_bench` is `vllm-bench`."""

import sys

from vllm_bench.cli import main

sys.exit(main())
