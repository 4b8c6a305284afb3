"""The conformance suite: OpInfo-driven per-op cases and zoo-model cases, run as a pytest plugin.

``python -m conformance run [pytest args]`` runs the suite and builds the reports;
``python -m conformance repro CASE_ID`` re-runs one case and rebuilds its repro directory.
"""
