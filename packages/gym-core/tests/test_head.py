"""The head server: publishes the resolved config; clients resolve names through it."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from litestar import Request

from gym_core import hookimpl
from gym_core.client import ServerClient
from gym_core.config import GlobalConfig, load_config
from gym_core.errors import ServerCallError
from gym_core.head import build_head_app
from gym_core.plugins import PluginManager
from gym_core.servers import GymServer
from gym_core.testing import running_servers


class Named(GymServer):
    kind = "resources"

    def routes(self) -> list[Any]:
        async def whoami(request: Request) -> Any:
            return {"name": self.name}

        return [*super().routes(), self.post_json("/whoami", whoami)]


@pytest.fixture
def config() -> GlobalConfig:
    return load_config(
        base={
            "head_server": {"port": 0},
            "_vars": {"nested": {"list": [1, 2.5, "three"], "flag": True}},
            "counter": {"plugin": "counter", "start": 3},
            "policy": {"plugin": "scripted", "host": "127.0.0.1", "turns": [{"text": "hi: there"}]},
        },
        env_file=None,
    )


async def test_global_config_yaml_roundtrips(serve, config):
    with serve(build_head_app(config)) as url:
        async with ServerClient() as client:
            text = await client.request("GET", url, "/global_config_dict_yaml")
    again = GlobalConfig.from_yaml(text.decode())
    assert again.data == config.data
    assert again.instances == config.instances
    assert again.head_url == config.head_url
    assert again.instances["policy"].options["turns"] == [{"text": "hi: there"}]


async def test_server_instances_lists_every_instance(serve, config):
    with serve(build_head_app(config)) as url:
        async with ServerClient() as client:
            listed = await client.get(url, "/server_instances")
            health = await client.get(url, "/health")
    assert health == {"status": "ok", "name": "head", "kind": "head"}
    assert listed == [
        {
            "name": name,
            "plugin": instance.plugin,
            "url": f"http://127.0.0.1:{instance.port}",
            "host": "127.0.0.1",
            "port": instance.port,
        }
        for name, instance in config.instances.items()
    ]
    assert [i["name"] for i in listed] == ["counter", "policy"]


async def test_server_instances_uses_the_live_description(serve, config):
    live = [{"name": "counter", "kind": "resources", "pid": 1234, "status": "running"}]
    with serve(build_head_app(config, describe=lambda: live)) as url:
        async with ServerClient() as client:
            assert await client.get(url, "/server_instances") == live


class NamedPlugin:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="named", kind="resources", server=Named)


async def test_from_head_resolves_names_to_running_servers():
    plugins = PluginManager(load_entry_points=False)
    plugins.register(NamedPlugin(), name="named_plugin")
    with running_servers({"alpha": {"plugin": "named"}, "beta": {"plugin": "named"}}, plugins) as config:
        async with await ServerClient.from_head(config.head_url + "/") as client:
            assert client.url("alpha") == config.instances["alpha"].url
            assert client.url("beta") == config.instances["beta"].url != client.url("alpha")
            assert await client.post("alpha", "/whoami", {}) == {"name": "alpha"}
            assert await client.post("beta", "/whoami", {}) == {"name": "beta"}
            with pytest.raises(ServerCallError, match="did you mean 'alpha'"):
                client.url("alpah")
            listed = await client.get(config.head_url, "/server_instances")
    assert [(i["name"], i["plugin"], i["url"]) for i in listed] == [
        ("alpha", "named", config.instances["alpha"].url),
        ("beta", "named", config.instances["beta"].url),
    ]


async def test_the_head_never_publishes_secrets(serve, tmp_path):
    """Every env.yaml value, and every option named like a secret, is redacted in what the head
    serves; addresses stay, so that clients still find the servers."""
    env = tmp_path / "env.yaml"
    env.write_text(
        "_keys: {openai: sk-live-0123456789abcdef}\n"
        "policy: {api_key: '${_keys.openai}', base_url: 'https://internal.example/v1?sig=s3cr3t-query', port: 9123}\n"
        "counter: {session_secret: cookie-signing-key-42}\n"
    )
    config = load_config(
        base={
            "head_server": {"port": 0},
            "policy": {"plugin": "openai_model", "model": "m"},
            "counter": {"plugin": "counter"},
            "judge": {"plugin": "openai_model", "hf_token": "hf_not_from_env", "max_tokens": 77},
        },
        env_file=env,
    )
    assert config.instances["policy"].options["api_key"] == "sk-live-0123456789abcdef"  # the servers still get it
    with serve(build_head_app(config)) as url:
        async with ServerClient() as client:
            text = (await client.request("GET", url, "/global_config_dict_yaml")).decode()
            listed = (await client.request("GET", url, "/server_instances")).decode()
    for secret in ("sk-live-0123456789abcdef", "s3cr3t-query", "cookie-signing-key-42", "hf_not_from_env"):
        assert secret not in text and secret not in listed
    published = GlobalConfig.from_yaml(text)
    assert published.instances["policy"].options["api_key"] == "<redacted>"
    assert published.instances["policy"].port == 9123  # an address from env.yaml stays
    assert published.instances["judge"].options["max_tokens"] == 77  # not a secret, though named "...tokens"
    assert config.redact_text("Bearer sk-live-0123456789abcdef failed") == "Bearer <redacted> failed"


def test_a_server_process_gets_its_own_secrets_only(tmp_path):
    env = tmp_path / "env.yaml"
    env.write_text("policy: {api_key: sk-policy-key-123}\njudge: {api_key: sk-judge-key-456}\n")
    config = load_config(
        base={"auth_token": "run-token-789", "policy": {"plugin": "openai_model"}, "judge": {"plugin": "openai_model"}},
        env_file=env,
    )
    mine = config.for_instance("policy")
    assert mine.instances["policy"].options["api_key"] == "sk-policy-key-123"
    assert mine.instances["judge"].options["api_key"] == "<redacted>"
    assert "sk-judge-key-456" not in mine.to_json()
    assert mine.auth_token == "run-token-789"  # it must answer and call the run's servers
    assert "run-token-789" not in yaml.safe_dump(config.redacted())
