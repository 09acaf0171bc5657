"""Shared test setup: tests/ on sys.path for the helper modules (atf_oracle, helpers)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
