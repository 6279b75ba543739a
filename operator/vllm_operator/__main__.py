"""`python -m vllm_operator` runs the operator."""

import sys

from vllm_operator.runtime.main import main

sys.exit(main())
