from gym_core import hookimpl

from my_env.config import MyEnvConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="my_env",
        kind="resources",
        server="my_env.server:MyEnvServer",
        config=MyEnvConfig,
        description="Reward 1 when the answer matches",
    )
