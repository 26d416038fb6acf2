"""The deployment files in deploy/ (issue #13: "Deployment files in `deploy/`: a
container build (non-root, health check) and Kubernetes examples — the sidecar
pattern (server container + gateway container in one pod, probes on `/healthz`
and `/readyz`, preStop/termination grace matching the drain) and a Deployment of
replicas behind a Service for an HTTP upstream. Validate the manifests in the
tests").

Every manifest is validated against the Kubernetes API schemas in strict mode
(unknown fields are errors) by `kubernetes-validate`, then checked for what
matters to this gateway. The image itself is built and run by
deploy/check_image.sh, which .ci/run calls."""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.config.keys import KEYS

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
CONTAINERFILE = DEPLOY / "Containerfile"
# The oldest Kubernetes the examples claim (the preStop `sleep` action is on
# by default from 1.30) and the newest the validator knows.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
ENV_PREFIX = "MCP_ERA_GATEWAY_"
# Being added with the drain; accepted whether KEYS has it yet or not.
DRAIN_KEY = ("gateway", "drain_delay")

Resource = dict[str, Any]


def env_name(table: str, key: str) -> str:
    """`[table] key` as the environment spells it."""
    return f"{ENV_PREFIX}{table.upper()}_{key.upper()}"


KNOWN_ENV = {env_name(t, k) for t, k in {*KEYS, DRAIN_KEY}} | {"MCP_ERA_GATEWAY_STATE_KEY"}
DRAIN_DELAY_ENV = env_name(*DRAIN_KEY)
SHUTDOWN_GRACE_ENV = env_name("gateway", "shutdown_grace")


def resources(path: Path) -> list[Resource]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def all_resources() -> Iterator[tuple[Path, Resource]]:
    for path in MANIFESTS:
        for resource in resources(path):
            yield path, resource


def of_kind(path: Path, kind: str) -> list[Resource]:
    return [r for r in resources(path) if r["kind"] == kind]


def pod_specs() -> Iterator[tuple[str, Resource]]:
    for path, resource in all_resources():
        if resource["kind"] == "Deployment":
            where = f"{path.name}:{resource['metadata']['name']}"
            yield where, resource["spec"]["template"]["spec"]


def is_gateway(container: Resource) -> bool:
    return "mcp-era-gateway" in str(container["image"])


def gateways() -> Iterator[tuple[str, Resource, Resource]]:
    """(where, pod spec, gateway container) for every gateway container."""
    for where, pod in pod_specs():
        for container in pod["containers"]:
            if is_gateway(container):
                yield where, pod, container


def env_values(container: Resource) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def seconds(container: Resource, name: str) -> float:
    value = env_values(container).get(name)
    assert isinstance(value, str), f"{container['name']} sets no {name}"
    return float(value)


def instructions(containerfile: Path) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", containerfile.read_text())
    out = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def final_stage(containerfile: Path) -> list[tuple[str, str]]:
    steps = instructions(containerfile)
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def image_listen_port() -> int:
    """The port of the image's default `--listen` (its ENTRYPOINT)."""
    entrypoint = json.loads(dict(final_stage(CONTAINERFILE))["ENTRYPOINT"])
    listen = entrypoint[entrypoint.index("--listen") + 1]
    return int(listen.rpartition(":")[2])


def listen_port(container: Resource) -> int:
    args = [str(a) for a in container.get("args", [])]
    if "--listen" in args:
        return int(args[args.index("--listen") + 1].rpartition(":")[2])
    listen = env_values(container).get(env_name("gateway", "listen"))
    if isinstance(listen, str):
        return int(listen.rpartition(":")[2])
    return image_listen_port()


def container_port(container: Resource, port: int | str) -> int:
    if isinstance(port, int):
        return port
    named = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert named, f"{container['name']} has no port named {port}"
    return int(named[0])


def test_there_are_manifests_of_both_patterns() -> None:
    """Issue: "the sidecar pattern ... and a Deployment of replicas behind a Service"."""
    assert {p.name for p in MANIFESTS} >= {"sidecar.yaml", "replicas.yaml"}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_validates_strictly(path: Path, version: str) -> None:
    """Issue: "Validate the manifests in the tests (e.g. PyPI `kubernetes-validate`)":
    every resource against the named Kubernetes version's schema, strict (an
    unknown field is an error; a kind without a schema is an error too)."""
    found = resources(path)
    assert found
    for resource in found:
        kubernetes_validate.validate(resource, version, strict=True)


def test_strict_validation_rejects_a_misspelt_field() -> None:
    """The validation above is not a no-op: a misspelt field fails it."""
    deployment = copy.deepcopy(of_kind(DEPLOY / "kubernetes" / "replicas.yaml", "Deployment")[0])
    deployment["spec"]["template"]["spec"]["containers"][0]["readynessProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


def test_probes_are_healthz_and_readyz_on_the_listen_port() -> None:
    """Issue: "probes on `/healthz` and `/readyz`": liveness (and startup) on
    /healthz, readiness on /readyz, each on the port the gateway listens on."""
    found = list(gateways())
    assert len(found) == 2
    for where, _, container in found:
        port = listen_port(container)
        assert port in [p["containerPort"] for p in container["ports"]], where
        probes = {
            "livenessProbe": "/healthz",
            "readinessProbe": "/readyz",
            "startupProbe": "/healthz",
        }
        for probe, path in probes.items():
            if probe == "startupProbe" and probe not in container:
                continue
            http_get = container[probe]["httpGet"]
            assert http_get["path"] == path, (where, probe)
            assert container_port(container, http_get["port"]) == port, (where, probe)


def test_every_gateway_environment_variable_names_a_config_key() -> None:
    """Issue: "Every config key also from the environment (`MCP_ERA_GATEWAY_<SECTION>_<KEY>`)":
    a variable the manifests set must be one of those names (a typo would be
    ignored or refused at start), and a list or table value must be JSON."""
    seen = set()
    for where, _, container in gateways():
        for name, value in env_values(container).items():
            if not name.startswith(ENV_PREFIX):
                continue
            seen.add(name)
            assert name in KNOWN_ENV, f"{where}: {name} names no config key"
            if isinstance(value, str) and value[:1] in "[{":
                json.loads(value)
    assert {DRAIN_DELAY_ENV, SHUTDOWN_GRACE_ENV} <= seen


def test_termination_grace_covers_the_drain() -> None:
    """Issue: "preStop/termination grace matching the drain": the kubelet must not
    SIGKILL before drain_delay + shutdown_grace are over, and the readiness
    probe sees the draining 503 within drain_delay."""
    for where, pod, gateway in gateways():
        drain = seconds(gateway, DRAIN_DELAY_ENV) + seconds(gateway, SHUTDOWN_GRACE_ENV)
        assert pod["terminationGracePeriodSeconds"] > drain, where
        readiness = gateway["readinessProbe"]
        noticed = readiness.get("periodSeconds", 10) * readiness.get("failureThreshold", 3)
        assert noticed <= seconds(gateway, DRAIN_DELAY_ENV), where


def test_sidecar_server_outlives_the_gateways_drain() -> None:
    """The sidecar pattern: "server container + gateway container in one pod"
    with the gateway's upstream on localhost. Every container gets SIGTERM at
    once, so the server's preStop holds its SIGTERM until the drain is over,
    within the grace."""
    deployment = of_kind(DEPLOY / "kubernetes" / "sidecar.yaml", "Deployment")[0]
    pod = deployment["spec"]["template"]["spec"]
    (gateway,) = [c for c in pod["containers"] if is_gateway(c)]
    servers = [c for c in pod["containers"] if not is_gateway(c)]
    assert servers
    args = gateway["args"]
    upstream = args[args.index("--upstream") + 1]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", upstream)
    drain = seconds(gateway, DRAIN_DELAY_ENV) + seconds(gateway, SHUTDOWN_GRACE_ENV)
    for server in servers:
        hold = server["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert drain <= hold < pod["terminationGracePeriodSeconds"]


def test_pods_run_non_root_and_locked_down() -> None:
    """Issue: "non-root"; and read-only root, no privilege escalation, no capabilities."""
    for where, pod in pod_specs():
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        for container in pod["containers"]:
            context = container["securityContext"]
            for user in ("runAsUser", "runAsGroup"):
                assert context.get(user, pod["securityContext"].get(user, 1)) != 0, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert "memory" in container["resources"]["limits"], where


def test_replicas_share_a_state_key_and_roll_without_losing_capacity() -> None:
    """Issue: "a Deployment of replicas behind a Service for an HTTP upstream": 3
    replicas, a shared `[mrtr] state_key` from a Secret (so `replay_tools`
    retries work on any replica), an instance_id per pod, a rolling update
    that never goes below the replicas asked for, a PodDisruptionBudget, and
    the Service's affinity for legacy sessions."""
    path = DEPLOY / "kubernetes" / "replicas.yaml"
    (deployment,) = of_kind(path, "Deployment")
    (secret,) = of_kind(path, "Secret")
    (service,) = of_kind(path, "Service")
    (budget,) = of_kind(path, "PodDisruptionBudget")
    spec = deployment["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 3
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (gateway,) = spec["template"]["spec"]["containers"]
    args = gateway["args"]
    assert args[args.index("--upstream") + 1].startswith("http://")

    env = env_values(gateway)
    key_ref = env[env_name("mrtr", "state_key")]["secretKeyRef"]
    assert key_ref["name"] == secret["metadata"]["name"]
    assert len(secret["stringData"][key_ref["key"]].encode()) >= 16
    instance = env[env_name("mrtr", "instance_id")]
    assert instance == {"fieldRef": {"fieldPath": "metadata.name"}}

    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert 0 < budget["spec"]["minAvailable"] < spec["replicas"]


def test_services_reach_the_gateway_port() -> None:
    for path in MANIFESTS:
        (deployment,) = of_kind(path, "Deployment")
        pod = deployment["spec"]["template"]["spec"]
        (gateway,) = [c for c in pod["containers"] if is_gateway(c)]
        for service in of_kind(path, "Service"):
            for port in service["spec"]["ports"]:
                target = container_port(gateway, port["targetPort"])
                assert target == listen_port(gateway), path.name


def test_containerfile_runs_non_root_with_a_health_check() -> None:
    """Issue: "a container build (non-root, health check)": the final stage's USER is
    a numeric non-root UID, its HEALTHCHECK asks /healthz on the listen port,
    SIGTERM stops it (the drain), and logs are JSON."""
    stage = final_stage(CONTAINERFILE)
    users = [args for keyword, args in stage if keyword == "USER"]
    assert users, "no USER in the final stage"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)

    steps = dict(stage)
    options, _, command_json = steps["HEALTHCHECK"].partition("CMD ")
    assert options.strip().startswith("--interval=")
    command = json.loads(command_json)
    assert f"127.0.0.1:{image_listen_port()}/healthz" in " ".join(command)
    assert steps["STOPSIGNAL"] == "SIGTERM"
    assert steps["EXPOSE"] == str(image_listen_port())
    entrypoint = json.loads(steps["ENTRYPOINT"])
    assert entrypoint[entrypoint.index("--log-format") + 1] == "json"
    assert any(
        keyword == "ARG" and args == "BASE=python:3.11-slim"
        for keyword, args in instructions(CONTAINERFILE)
    )


def ignored(patterns: list[str], path: str) -> bool:
    """Docker's rule, enough for these patterns: the last match wins, `!` keeps."""
    result = False
    for written in patterns:
        keep = written.startswith("!")
        pattern = written.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            result = not keep
    return result


def test_build_context_leaves_out_peers_git_and_venvs() -> None:
    """Issue: "A `.containerignore`/`.dockerignore` that keeps .peers, .git and venvs
    out of the context", and keeps the wheels the build copies."""
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    for path in (".peers", ".git", ".venv", "venv", ".peers/py1/bin/python", "gateway/cli.py"):
        assert ignored(patterns, path), path
    assert not ignored(patterns, "dist/mcp_era_gateway-0.1.0-py3-none-any.whl")
    assert "COPY dist/ " in CONTAINERFILE.read_text()


def test_ci_builds_and_runs_the_image() -> None:
    """Issue: "Build and run the image in `.ci/run` if this machine can": it can
    (deploy/README.md), so CI runs deploy/check_image.sh, not a test that
    might skip."""
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^bash deploy/check_image\.sh$", ci, re.MULTILINE)


def test_the_gateway_accepts_every_setting_the_manifests_give() -> None:
    """The manifests' environment read by the gateway's own reader and checked
    with its arguments: a value of the wrong form (a list not in JSON, a key
    too short) would stop the pod at start. Values from a Secret or the
    downward API stand in as the forms they take (a pod name, a long key)."""
    from gateway.config.environment import from_environ
    from gateway.config.layers import merge

    stand_ins = {
        "MCP_ERA_GATEWAY_MRTR_INSTANCE_ID": "mcp-gateway-7d9f8b6c4-x2z9q",
        "MCP_ERA_GATEWAY_MRTR_STATE_KEY": '["' + "k" * 32 + '"]',
        "MCP_ERA_GATEWAY_HTTP_TOKENS": '{"platform": "' + "t" * 32 + '"}',
    }
    for where, _, container in gateways():
        env = {
            name: value if isinstance(value, str) else stand_ins[name]
            for name, value in env_values(container).items()
            if name.startswith(ENV_PREFIX)
        }
        given = from_environ(env)
        args = {
            "listen": ("0.0.0.0:8080", "--listen"),
            "upstream_url": ("http://x/mcp", "--upstream"),
        }
        config = merge(given, args).config
        assert config.drain_delay > 0, where
