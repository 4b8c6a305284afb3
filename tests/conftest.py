import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# tests/ is a package mirroring the checkout (tests/exporter, tests/conformance, ...); it must not
# sit on sys.path itself, or tests/exporter would shadow the real exporter package. Shared helpers
# are imported as `tests.op_check` from the checkout root (pytest's pythonpath).
