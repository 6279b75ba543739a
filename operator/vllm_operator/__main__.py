"""`python -m vllm_operator` runs the operator."""

import sys

from vllm_operator.main import main

sys.exit(main())
