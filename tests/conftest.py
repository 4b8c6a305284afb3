import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# tests/ holds shared helpers (op_check); make them importable without packaging tests/.
sys.path.insert(0, str(Path(__file__).parent))
