"""The installed distribution registers its parts; a config re-weights them; no torch at import."""

import subprocess
import sys

from minds_core.config import EnvConfig, RewardRef
from minds_core.contract.plugins import load_plugins
from minds_core.envs.loading import build_environment

REWARD_NAMES = ["self_prediction.accuracy", "self_prediction.calibration", "self_prediction.format"]


def test_plugin_registers_the_environment_and_rewards() -> None:
    loaded = load_plugins()
    info = next(p for p in loaded.plugins if p.name == "self_prediction")
    assert info.ok, info.errors
    assert info.distribution == "minds-plugin-self-prediction"
    assert loaded.registry.get("environments", "self_prediction").plugin == "self_prediction"
    assert sorted(info.registered["reward_functions"]) == REWARD_NAMES


def test_config_rewards_replace_the_weights() -> None:
    refs = [RewardRef("self_prediction.accuracy", 0.25), RewardRef("self_prediction.calibration", 0.75)]
    env = build_environment(EnvConfig(id="self_prediction", args={"num_examples": 3}, rewards=refs), load_plugins().registry)
    assert list(zip(env.rubric.names, env.rubric.weights)) == [(r.name, r.weight) for r in refs]


def test_importing_the_plugin_does_not_import_torch() -> None:
    code = "import sys, minds_self_prediction; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
