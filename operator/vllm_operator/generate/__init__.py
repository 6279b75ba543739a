"""Generators of shipped files: the CRD, deploy/monitoring/ (rules, adapter config), the
dashboard."""
