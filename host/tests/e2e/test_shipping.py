"""What ships besides the binary: the Dockerfile (linted with hadolint; there is no Docker
daemon to build it with here or in CI) and the Kubernetes manifests in deploy/kubernetes
(validated against the Kubernetes schemas that kubernetes-validate bundles, offline, with
unknown fields refused), and the ConfigMap's cordon.toml served by the real binary."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TOOLS, serving

pytestmark = pytest.mark.anyio

DOCKERFILE = REPO / "Dockerfile"
MANIFESTS = REPO / "deploy" / "kubernetes"
# The Kubernetes version the manifests are checked against (kubernetes-validate bundles
# the schemas of 1.25 to 1.37): the oldest one they are meant to apply to.
KUBERNETES_VERSION = "1.34.0"
BIN = Path(sys.executable).parent


def manifests() -> dict[str, dict]:
    """Every object in deploy/kubernetes, by kind."""
    objects = {}
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            assert document["kind"] not in objects, f"two {document['kind']} objects"
            objects[document["kind"]] = document
    return objects


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]


def runtime_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The instructions from the last FROM on: the image that ships."""
    last = max(i for i, (instruction, _) in enumerate(instructions) if instruction == "FROM")
    return instructions[last:]


def test_the_dockerfile_has_no_hadolint_finding():
    lint = subprocess.run(
        [BIN / "hadolint", "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr


def test_the_image_builds_host_and_guests_then_runs_slim_and_unprivileged():
    instructions = dockerfile_instructions()
    stages = [arguments for instruction, arguments in instructions if instruction == "FROM"]
    assert stages == ["rust:1.95-bookworm AS build", "debian:bookworm-slim"]
    build = " ".join(arguments for instruction, arguments in instructions if instruction == "RUN")
    # Debian's rustc-web route for the guests, before the release build that embeds them.
    assert "rustc-web cargo-web rust-web-src lld-22 wasi-libc" in build
    # `cargo xtask guests` also builds the Python and JavaScript guests: their virtualenv
    # and npm (xtask/src/main.rs, `GUEST_TOOLS`), which the rust image lacks.
    installed = build.split()
    assert "python3-venv" in installed and "npm" in installed, build
    assert build.index("cargo xtask guests") < build.index("cargo build --release --locked -p cordon")
    runtime = runtime_stage(instructions)
    values = {instruction: arguments for instruction, arguments in runtime}
    assert values["USER"] == "10001:10001"
    # The engine's compile cache is $XDG_CACHE_HOME/cordon (host/src/runtime/engine.rs).
    assert "XDG_CACHE_HOME=/var/cache" in values["ENV"]
    assert '"/var/cache/cordon"' in values["VOLUME"]
    assert "/readyz" in values["HEALTHCHECK"] and "9464" in values["HEALTHCHECK"]
    assert values["ENTRYPOINT"] == '["cordon"]'
    assert values["CMD"] == (
        '["serve", "--http", "0.0.0.0:8080", "--allow-unauthenticated", "--metrics", "0.0.0.0:9464"]'
    )


def test_the_build_context_leaves_out_build_output_and_history():
    ignored = (REPO / ".dockerignore").read_text().split()
    assert "target/" in ignored and ".git/" in ignored


def test_the_manifests_are_valid_kubernetes_objects():
    files = sorted(MANIFESTS.glob("*.yaml"))
    check = subprocess.run(
        [BIN / "kubernetes-validate", "--kubernetes-version", KUBERNETES_VERSION, "--strict", *files],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(" passed ") == len(files), check.stdout


def test_the_deployment_runs_three_locked_down_replicas_probed_on_the_metrics_port():
    objects = manifests()
    deployment = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    assert pod["securityContext"]["runAsNonRoot"] is True
    [container] = pod["containers"]
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    args = container["args"]
    assert args[:2] == ["serve", "--http"] and args[2].endswith(f":{ports['mcp']}")
    assert args[args.index("--metrics") + 1].endswith(f":{ports['metrics']}")
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}
    # The config comes from the ConfigMap; the cache and data directories it names are
    # volumes, since the root file system is read only.
    config = args[args.index("--config") + 1]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes[mounts[str(Path(config).parent)]]["configMap"]["name"] == objects["ConfigMap"]["metadata"]["name"]
    toml = objects["ConfigMap"]["data"][Path(config).name]
    for directory in re.findall(r'(?:cache_dir|data_dir) = "([^"]+)"', toml):
        assert any(directory.startswith(mount) for mount in mounts if mounts[mount] != "config"), directory
    # Beyond loopback cordon serves only tenants (API keys) unless told otherwise.
    assert "[[tenants]]" in toml or "--allow-unauthenticated" in args


def test_the_service_budget_and_autoscaler_select_the_deployment():
    objects = manifests()
    deployment = objects["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = objects["Service"]["spec"]
    assert service["selector"] == labels
    assert service.get("sessionAffinity", "None") == "None"
    container_ports = {port["name"] for port in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
    # The metrics listener has no authentication and names every tenant: not published to
    # clients through the Service, and reached only from the monitoring namespace.
    assert {port["targetPort"] for port in service["ports"]} == container_ports - {"metrics"}
    policy = objects["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == labels
    assert policy["policyTypes"] == ["Ingress"]
    open_to_all = [rule for rule in policy["ingress"] if "from" not in rule]
    assert [port["port"] for rule in open_to_all for port in rule["ports"]] == ["mcp"]
    [metrics] = [rule for rule in policy["ingress"] if any(port["port"] == "metrics" for port in rule["ports"])]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    budget = objects["PodDisruptionBudget"]["spec"]
    assert budget["selector"]["matchLabels"] == labels
    assert 0 < budget["minAvailable"] < deployment["spec"]["replicas"]
    autoscaler = objects["HorizontalPodAutoscaler"]["spec"]
    assert autoscaler["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "cordon"}
    assert autoscaler["minReplicas"] == deployment["spec"]["replicas"] <= autoscaler["maxReplicas"]


def test_the_manifests_and_the_image_agree():
    """The Deployment runs the image's user on its ports, mounts volumes where the image
    keeps its cache and data, and the ConfigMap names components where the image puts them."""
    runtime = runtime_stage(dockerfile_instructions())
    image = {instruction: arguments for instruction, arguments in runtime}
    objects = manifests()
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    uid, gid = image["USER"].split(":")
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (int(uid), int(gid))
    assert sorted(port["containerPort"] for port in container["ports"]) == sorted(map(int, image["EXPOSE"].split()))
    mounted = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert set(re.findall(r'"(/[^"]+)"', image["VOLUME"])) <= mounted
    # Folders the image copies into (a destination ending in "/").
    folders = [arguments.split()[-1] for instruction, arguments in runtime if instruction == "COPY"]
    folders = [folder for folder in folders if folder.endswith("/")]
    paths = re.findall(r'^path = "([^"]+)"', objects["ConfigMap"]["data"]["cordon.toml"], re.MULTILINE)
    assert paths and all(any(map(path.startswith, folders)) for path in paths), (folders, paths)


async def test_the_configmap_config_serves_the_example_tools(tmp_path):
    """The ConfigMap's cordon.toml, with the image's paths moved under tmp_path and the
    repository's guests, is a config the server loads and serves; it fills the compile
    cache it names."""
    toml = manifests()["ConfigMap"]["data"]["cordon.toml"]
    cache, data = tmp_path / "cache", tmp_path / "data"
    for image_path, local in [
        ("/usr/local/share/cordon/components/", f"{TOOLS.parent}/"),
        ("/var/cache/cordon", str(cache)),
        ("/var/lib/cordon", str(data)),
    ]:
        assert image_path in toml
        toml = toml.replace(image_path, local)
    assert not re.search(r'"/(usr|var)/', toml), toml
    config = tmp_path / "cordon.toml"
    config.write_text(toml)
    with serving("http", config, tmp_path) as server:
        async with server.client("2026-07-28") as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            assert names == ["echo", "reindex", "locks", "spin", "order_book", "fetch", "delete_collection"]
            result = await client.call_tool("echo", {"text": "from the configmap"})
            assert result.content[0].text == "from the configmap"
    assert list(cache.glob("*.cwasm")), "the compile cache named by the config stayed empty"
    assert (data / "example-tools").is_dir()
