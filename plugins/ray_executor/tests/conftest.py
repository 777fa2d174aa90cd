"""The Ray tests import their cluster helper (ray_cluster.py) from this folder."""

import sys
from pathlib import Path

from minds_core.testing import skip_unless_installed

pytest_pycollect_makemodule = skip_unless_installed("minds_ray", "pip install -c constraints.txt -e plugins/ray_executor")

sys.path.insert(0, str(Path(__file__).resolve().parent))
