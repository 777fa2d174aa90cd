"""The Ray tests import their cluster helper (ray_cluster.py) from this folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
