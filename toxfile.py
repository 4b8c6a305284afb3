"""In-tree tox plugin: a `shared-virtualenv` runner, so several tox envs can use one virtualenv.

tox 4 stamps every virtualenv with the name of the env that built it, and rebuilds it from scratch
("recreate env because env type changed") as soon as an env of another name opens it. `py` and
`conformance` need the same ~6 GB of torch and CUDA wheels, so tox.ini points both at one
`env_dir`; this runner stamps that directory's name instead of the env's name. Everything else tox
checks before reusing an env (interpreter, deps, package deps) is still compared as usual, so an
env whose install settings differ is still rebuilt.

Don't run two envs that share a directory in parallel (`tox p`): they would install into the same
place at once.
"""

from __future__ import annotations

from pathlib import Path

from tox.plugin import impl
from tox.tox_env.api import ToxEnv
from tox.tox_env.info import Info
from tox.tox_env.python.virtual_env.runner import VirtualEnvRunner
from tox.tox_env.register import ToxEnvRegister


class _InfoStampedWithDirectory(Info):
    def __init__(self, env_dir: Path) -> None:
        super().__init__(env_dir)
        self._shared_name = env_dir.name

    def compare(self, value, section, sub_section=None):
        if section == ToxEnv.__name__ and isinstance(value, dict) and "name" in value:
            value = {**value, "name": self._shared_name}
        return super().compare(value, section, sub_section)


class SharedVirtualEnvRunner(VirtualEnvRunner):
    @staticmethod
    def id() -> str:
        return "shared-virtualenv"

    @property
    def cache(self) -> Info:
        return _InfoStampedWithDirectory(self.env_dir)


@impl
def tox_register_tox_env(register: ToxEnvRegister) -> None:
    register.add_run_env(SharedVirtualEnvRunner)
