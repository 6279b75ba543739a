"""Unit tests of what the repository ships beside the code: the README, the chart, the
GitOps examples."""
