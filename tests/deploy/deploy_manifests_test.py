#!/usr/bin/python3
"""Offline checks of deploy/: the Dockerfile, its entry point, the compose
stack, the Prometheus and Grafana configuration and the Kubernetes manifests.

Schema and syntax come from Debian's own tools: yamllint (package yamllint),
`docker-compose config` (docker-compose: the Compose file schema), `promtool
check config` (prometheus); the Kubernetes API schemas from kubernetes-validate
(PyPI) where it is installed. The consistency a schema cannot see is checked
here: probe ports are container ports, selectors match pod labels, the HPA
targets the Deployment and uses the metric the adapter rule serves, grace
periods cover the server's drain, compose services reference files that exist,
every CONVSERVE_* variable names a real server flag (with --server), and the
entry point turns variables into flags.

  deploy_manifests_test.py --source_dir=REPO [--server=build/convserve-server]
"""
import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

try:
    import yaml
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("deploy_manifests_test: needs PyYAML (Debian package python3-yaml)")

ARGS = None
POD_LABEL_KEYS = ("app.kubernetes.io/name", "app.kubernetes.io/component")


def source(*parts):
    return os.path.join(ARGS.source_dir, *parts)


def load_all(path):
    with open(path, encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def load_one(path):
    docs = load_all(path)
    assert len(docs) == 1, f"{path}: expected one YAML document, found {len(docs)}"
    return docs[0]


def require_tool(name, package):
    path = shutil.which(name)
    if path is None:
        raise AssertionError(f"{name} not found: install the Debian package {package}")
    return path


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)


def k8s_documents():
    """All Kubernetes objects of deploy/k8s, by kind (adapter values excluded)."""
    kinds = {}
    for name in sorted(os.listdir(source("deploy", "k8s"))):
        if not name.endswith(".yaml") or name in ("kustomization.yaml",
                                                   "prometheus-adapter-values.yaml"):
            continue
        for doc in load_all(source("deploy", "k8s", name)):
            kinds.setdefault(doc["kind"], []).append(doc)
    return kinds


def only(kinds, kind):
    docs = kinds.get(kind, [])
    assert len(docs) == 1, f"expected one {kind}, found {len(docs)}"
    return docs[0]


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def seconds(text):
    """Compose durations like '40s', '1m30s' -> seconds."""
    total = 0.0
    for value, unit in re.findall(r"([\d.]+)(h|ms|m|s)", str(text)):
        total += float(value) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[unit]
    return total


def dockerfile_instructions():
    """(instruction, arguments) pairs of deploy/Dockerfile, continuations joined."""
    with open(source("deploy", "Dockerfile"), encoding="utf-8") as f:
        text = re.sub(r"\\\n", " ", f.read())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


class LintTest(unittest.TestCase):
    def test_yamllint(self):
        yamllint = require_tool("yamllint", "yamllint")
        result = run([yamllint, "--strict", "-c", source("tests", "deploy", "yamllint.yaml"),
                      source("deploy")])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_compose_schema(self):
        compose = require_tool("docker-compose", "docker-compose")
        result = run([compose, "-f", source("deploy", "compose.yaml"), "config", "-q"])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_prometheus_config(self):
        promtool = require_tool("promtool", "prometheus")
        result = run([promtool, "check", "config", source("deploy", "prometheus.yml")])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


    def test_kubernetes_schema(self):
        # Debian has no Kubernetes schema validator; kubernetes-validate (PyPI)
        # carries the API schemas offline. 1.29: the oldest minor with every
        # field used here (gRPC probes are GA since 1.27). PodMonitor is a CRD
        # without a bundled schema, so it is checked in KubernetesTest only.
        validator = shutil.which("kubernetes-validate")
        if validator is None:
            self.skipTest("kubernetes-validate not installed (pip install kubernetes-validate)")
        files = [source("deploy", "k8s", n) for n in ("deployment.yaml", "service.yaml",
                                                       "pdb.yaml", "hpa.yaml")]
        result = run([validator, "--strict", "-k", "1.29", *files])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


class DockerfileTest(unittest.TestCase):
    def setUp(self):
        self.instructions = dockerfile_instructions()

    def values(self, word):
        return [rest for w, rest in self.instructions if w == word]

    def test_base_images_are_arguments(self):
        args = {a.split("=")[0]: a.partition("=")[2] for a in self.values("ARG")}
        for name in ("BUILD_IMAGE", "CUDA_DEVEL_IMAGE", "BASE_IMAGE"):
            self.assertIn(name, args)
        self.assertRegex(args["BASE_IMAGE"], r"cudnn.*runtime")
        froms = self.values("FROM")
        self.assertEqual(froms[-1].split()[0], "${BASE_IMAGE}", "the runtime stage is last")

    def test_runtime_stage(self):
        exposed = " ".join(self.values("EXPOSE")).split()
        self.assertIn("8001", exposed)
        self.assertIn("8002", exposed)
        users = self.values("USER")
        self.assertTrue(users and users[-1].split(":")[0] not in ("root", "0"), users)
        healthcheck = " ".join(self.values("HEALTHCHECK"))
        self.assertIn("convserve-health", healthcheck)
        self.assertIn("CONVSERVE_LISTEN", healthcheck)
        self.assertTrue(self.values("ENTRYPOINT"))

    def test_copied_sources_exist(self):
        for rest in self.values("COPY"):
            if rest.startswith("--from"):
                continue
            for path in rest.split()[:-1]:
                self.assertTrue(os.path.exists(source(path)), f"COPY {path}: no such file")
        for path in ("deploy/entrypoint.sh", "deploy/examples/resnet_block.textproto",
                     "scripts/setup.sh", "scripts/build.sh", "scripts/bundle.sh",
                     "server/health_probe_main.cc", "proto/grpc/health/v1/health.proto"):
            self.assertTrue(os.path.exists(source(path)), path)

    def test_dockerignore_keeps_build_trees_out(self):
        with open(source(".dockerignore"), encoding="utf-8") as f:
            patterns = f.read().split()
        for pattern in ("build*", "bundle", ".git"):
            self.assertIn(pattern, patterns)


class EntrypointTest(unittest.TestCase):
    """deploy/entrypoint.sh with a stand-in convserve-server that prints its argv."""

    def run_entrypoint(self, args, env):
        with tempfile.TemporaryDirectory() as bin_dir:
            fake = os.path.join(bin_dir, "convserve-server")
            with open(fake, "w", encoding="utf-8") as f:
                f.write('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
            os.chmod(fake, stat.S_IRWXU)
            full_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", **env}
            result = run(["/bin/sh", source("deploy", "entrypoint.sh"), *args], env=full_env)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout.splitlines(), result.stderr

    def test_variables_become_flags_before_arguments(self):
        argv, stderr = self.run_entrypoint(
            ["--log_level=debug"],
            {"CONVSERVE_MAX_QUEUED_REQUESTS": "512", "CONVSERVE_LISTEN": "0.0.0.0:9001",
             "CONVSERVE_ENGINE_BLOCKLIST": "/etc/convserve/block list", "CONVSERVE_GPU": "",
             "OTHER_VARIABLE": "x"})
        self.assertCountEqual(argv, ["--max_queued_requests=512", "--listen=0.0.0.0:9001",
                                     "--engine_blocklist=/etc/convserve/block list",
                                     "--log_level=debug"])
        # Container arguments come last, so they override the environment.
        self.assertEqual(argv[-1], "--log_level=debug")
        self.assertIn("--listen", stderr)

    def test_no_variables(self):
        argv, stderr = self.run_entrypoint([], {})
        self.assertEqual(argv, [])
        self.assertIn("none", stderr)

    def test_a_command_runs_instead_of_the_server(self):
        result = run(["/bin/sh", source("deploy", "entrypoint.sh"), "echo", "hello"],
                     env={"PATH": "/usr/bin:/bin", "CONVSERVE_GPU": "1"})
        self.assertEqual(result.stdout, "hello\n")


class ComposeTest(unittest.TestCase):
    def setUp(self):
        self.compose = load_one(source("deploy", "compose.yaml"))
        self.services = self.compose["services"]

    def test_services(self):
        self.assertCountEqual(self.services, ["convserve", "prometheus", "grafana"])

    def test_server_gets_a_gpu_and_its_ports(self):
        server = self.services["convserve"]
        devices = server["deploy"]["resources"]["reservations"]["devices"]
        self.assertTrue(any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", [])
                            for d in devices), devices)
        published = {str(p).split(":")[-1] for p in server["ports"]}
        self.assertTrue({"8001", "8002"} <= published, published)
        build = server["build"]
        context = os.path.normpath(source("deploy", build["context"]))
        self.assertTrue(os.path.isfile(os.path.join(context, build["dockerfile"])))
        grace = float(server["environment"]["CONVSERVE_SHUTDOWN_GRACE_SECONDS"])
        self.assertGreater(seconds(server["stop_grace_period"]), grace)

    def test_mounted_files_exist(self):
        for name, service in self.services.items():
            for volume in service.get("volumes", []):
                host = volume.split(":")[0]
                if host.startswith("."):
                    self.assertTrue(os.path.exists(source("deploy", host)), f"{name}: {volume}")

    def mount_target(self, service, host_path):
        for volume in self.services[service]["volumes"]:
            parts = volume.split(":")
            if os.path.normpath(parts[0]) == os.path.normpath(host_path):
                return parts[1]
        self.fail(f"{service} does not mount {host_path}")

    def test_prometheus_scrapes_the_server_metrics_port(self):
        config_path = self.mount_target("prometheus", "./prometheus.yml")
        self.assertIn(f"--config.file={config_path}", self.services["prometheus"]["command"])
        config = load_one(source("deploy", "prometheus.yml"))
        targets = [t for job in config["scrape_configs"] for sc in job["static_configs"]
                   for t in sc["targets"]]
        self.assertIn("convserve:8002", targets)

    def test_grafana_provisioning(self):
        self.assertEqual(self.mount_target("grafana", "./grafana/provisioning"),
                         "/etc/grafana/provisioning")
        dashboards_mount = self.mount_target("grafana", "./grafana/dashboards")
        providers = load_one(source("deploy", "grafana", "provisioning", "dashboards",
                                    "convserve.yaml"))["providers"]
        self.assertEqual([p["options"]["path"] for p in providers], [dashboards_mount])
        datasources = load_one(source("deploy", "grafana", "provisioning", "datasources",
                                      "prometheus.yaml"))["datasources"]
        self.assertEqual([d["url"] for d in datasources], ["http://prometheus:9090"])
        self.assertIn("9090:9090", self.services["prometheus"]["ports"])


    def test_dashboards_use_the_provisioned_datasource(self):
        folder = source("deploy", "grafana", "dashboards")
        for name in sorted(n for n in os.listdir(folder) if n.endswith(".json")):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                dashboard = json.load(f)
            variables = {v["name"] for v in dashboard.get("templating", {}).get("list", [])
                         if v.get("type") == "datasource" and v.get("query") == "prometheus"}
            allowed = {"prometheus"} | {f"${{{v}}}" for v in variables} | {f"${v}" for v in variables}
            for ref in datasource_refs(dashboard):
                if isinstance(ref, dict) and ref.get("type") == "prometheus":
                    self.assertIn(ref.get("uid"), allowed, f"{name}: data source {ref}")


def datasource_refs(node):
    if isinstance(node, dict):
        if "datasource" in node:
            yield node["datasource"]
        for value in node.values():
            yield from datasource_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from datasource_refs(value)


class KubernetesTest(unittest.TestCase):
    def setUp(self):
        self.kinds = k8s_documents()
        self.deployment = only(self.kinds, "Deployment")
        self.pod = self.deployment["spec"]["template"]
        self.pod_labels = self.pod["metadata"]["labels"]
        self.container = only({"c": self.pod["spec"]["containers"]}, "c")
        self.ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}

    def assertSelects(self, match_labels, what):
        self.assertTrue(match_labels, f"{what}: empty selector")
        for key, value in match_labels.items():
            self.assertEqual(self.pod_labels.get(key), value, f"{what} selects {key}={value}")

    def test_api_versions(self):
        expected = {"Deployment": "apps/v1", "Service": "v1",
                    "PodDisruptionBudget": "policy/v1", "PodMonitor": "monitoring.coreos.com/v1",
                    "HorizontalPodAutoscaler": "autoscaling/v2"}
        self.assertCountEqual(self.kinds, expected)
        for kind, docs in self.kinds.items():
            for doc in docs:
                self.assertEqual(doc["apiVersion"], expected[kind])
                self.assertTrue(doc["metadata"]["name"])

    def test_deployment_selects_its_pods(self):
        self.assertSelects(self.deployment["spec"]["selector"]["matchLabels"], "Deployment")
        for key in POD_LABEL_KEYS:
            self.assertIn(key, self.pod_labels)

    def test_ports_and_grpc_probes(self):
        self.assertEqual(self.ports, {"grpc": 8001, "metrics": 8002})
        listen = env_of(self.container)["CONVSERVE_LISTEN"]
        # The probes reach the first address (a Unix socket may follow it).
        self.assertEqual(int(listen.split(",")[0].rsplit(":", 1)[1]), self.ports["grpc"])
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertEqual(self.container[probe]["grpc"]["port"], self.ports["grpc"], probe)

    def test_gpu_limit_and_non_root(self):
        self.assertEqual(int(self.container["resources"]["limits"]["nvidia.com/gpu"]), 1)
        security = self.pod["spec"]["securityContext"]
        self.assertTrue(security["runAsNonRoot"])
        users = [rest for w, rest in dockerfile_instructions() if w == "USER"]
        self.assertEqual(str(security["runAsUser"]), users[-1].split(":")[0],
                         "runAsUser is the image's USER")

    def test_termination_covers_the_drain(self):
        env = env_of(self.container)
        grace = float(env["CONVSERVE_SHUTDOWN_GRACE_SECONDS"])
        command = self.container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(command[0], "sleep")
        pre_stop = float(command[1])
        self.assertGreater(self.pod["spec"]["terminationGracePeriodSeconds"], pre_stop + grace)

    def test_services(self):
        services = {s["metadata"]["name"]: s for s in self.kinds["Service"]}
        self.assertCountEqual(services, ["convserve", "convserve-headless"])
        self.assertEqual(services["convserve-headless"]["spec"]["clusterIP"], "None")
        for name, service in services.items():
            self.assertSelects(service["spec"]["selector"], f"Service {name}")
            for port in service["spec"]["ports"]:
                self.assertIn(port["targetPort"], self.ports, f"{name}: {port}")
                self.assertEqual(port["port"], self.ports[port["targetPort"]])
        grpc_ports = [p for p in services["convserve-headless"]["spec"]["ports"]
                      if p["name"] == "grpc"]
        self.assertEqual(len(grpc_ports), 1)

    def test_pod_disruption_budget(self):
        pdb = only(self.kinds, "PodDisruptionBudget")
        self.assertSelects(pdb["spec"]["selector"]["matchLabels"], "PodDisruptionBudget")

    def test_pod_monitor_scrapes_the_metrics_port(self):
        monitor = only(self.kinds, "PodMonitor")
        self.assertSelects(monitor["spec"]["selector"]["matchLabels"], "PodMonitor")
        endpoints = monitor["spec"]["podMetricsEndpoints"]
        self.assertEqual([(e["port"], e["path"]) for e in endpoints], [("metrics", "/metrics")])

    def test_hpa_scales_the_deployment_on_the_adapter_metric(self):
        hpa = only(self.kinds, "HorizontalPodAutoscaler")
        target = hpa["spec"]["scaleTargetRef"]
        self.assertEqual((target["apiVersion"], target["kind"], target["name"]),
                         ("apps/v1", "Deployment", self.deployment["metadata"]["name"]))
        self.assertLessEqual(hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"])
        metric_names = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]
                        if m["type"] == "Pods"]
        self.assertEqual(metric_names, ["convserve_inflight_requests"])
        values = load_one(source("deploy", "k8s", "prometheus-adapter-values.yaml"))
        rules = values["rules"]["custom"]
        served = [r["name"]["as"] for r in rules]
        self.assertIn(metric_names[0], served)
        rule = rules[served.index(metric_names[0])]
        self.assertTrue(rule["seriesQuery"].startswith(metric_names[0] + "{"))
        self.assertEqual(set(rule["resources"]["overrides"]), {"namespace", "pod"})

    def test_kustomization_lists_every_manifest(self):
        kustomization = load_one(source("deploy", "k8s", "kustomization.yaml"))
        manifests = sorted(n for n in os.listdir(source("deploy", "k8s")) if n.endswith(".yaml")
                           and n not in ("kustomization.yaml", "prometheus-adapter-values.yaml"))
        self.assertEqual(sorted(kustomization["resources"]), manifests)
        image_names = [i["name"] for i in kustomization["images"]]
        self.assertIn(self.container["image"].split(":")[0], image_names)


class PlanCacheVolumeTest(unittest.TestCase):
    """The plan store (quarantine verdicts) is on a volume wherever the image runs, so a
    candidate that faulted stays quarantined after the restart the fault causes."""

    def setUp(self):
        env = " ".join(rest for word, rest in dockerfile_instructions() if word == "ENV")
        match = re.search(r"\bCONVSERVE_PLAN_CACHE_DIR=(\S+)", env)
        self.assertIsNotNone(match, "the image sets no CONVSERVE_PLAN_CACHE_DIR")
        self.path = match.group(1)

    def test_image_declares_the_volume(self):
        volumes = " ".join(rest for word, rest in dockerfile_instructions() if word == "VOLUME")
        self.assertIn(self.path, volumes)

    def test_compose_mounts_it(self):
        volumes = load_one(source("deploy", "compose.yaml"))["services"]["convserve"]["volumes"]
        self.assertIn(self.path, [v.split(":")[1] for v in volumes])

    def test_kubernetes_mounts_it(self):
        deployment = only(k8s_documents(), "Deployment")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
        self.assertIn(self.path, mounts)
        self.assertNotIn("CONVSERVE_PLAN_CACHE_DIR", env_of(container),
                         "the image's path is the one mounted")


class TlsOverlayTest(unittest.TestCase):
    """deploy/k8s-tls: every file the server flags and the probes name lies
    in a mounted Secret, and the kubelet's plain-text gRPC probes are gone."""

    def setUp(self):
        self.patch = load_one(source("deploy", "k8s-tls", "deployment-tls.yaml"))
        self.kustomization = load_one(source("deploy", "k8s-tls", "kustomization.yaml"))
        pod = self.patch["spec"]["template"]["spec"]
        self.container = only({"c": pod["containers"]}, "c")
        secrets = {v["name"] for v in pod["volumes"] if "secret" in v}
        self.mounts = [m["mountPath"] for m in self.container["volumeMounts"]
                       if m["name"] in secrets]

    def mounted(self, path):
        return any(path.startswith(m.rstrip("/") + "/") for m in self.mounts)

    def test_overlay_patches_the_base(self):
        self.assertEqual(self.kustomization["resources"], ["../k8s"])
        self.assertEqual([p["path"] for p in self.kustomization["patches"]],
                         ["deployment-tls.yaml"])
        self.assertEqual(self.patch["metadata"]["name"],
                         only(k8s_documents(), "Deployment")["metadata"]["name"])

    def test_flag_files_are_mounted(self):
        env = env_of(self.container)
        for name in ("CONVSERVE_TLS_CERT_FILE", "CONVSERVE_TLS_KEY_FILE",
                     "CONVSERVE_TLS_CLIENT_CA_FILE", "CONVSERVE_GRAPH_MANAGEMENT_TOKEN_FILE"):
            self.assertTrue(self.mounted(env[name]), f"{name}={env[name]} is not mounted")
        self.assertEqual(env["CONVSERVE_TLS_REQUIRE_CLIENT_CERT"], "true")

    def test_probes_use_tls_health_checks(self):
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            spec = self.container[probe]
            self.assertIsNone(spec["grpc"], f"{probe}: the kubelet's gRPC probe has no TLS")
            command = spec["exec"]["command"]
            self.assertEqual(command[0], "convserve-health")
            files = [a.split("=", 1)[1] for a in command if a.startswith("--tls_") and
                     a.split("=", 1)[0].endswith("_file")]
            self.assertEqual(len(files), 3, command)
            for path in files:
                self.assertTrue(self.mounted(path), f"{probe}: {path} is not mounted")


class ServerFlagsTest(unittest.TestCase):
    """Every CONVSERVE_* variable set anywhere in deploy/ names a real flag."""

    def test_variables_name_server_flags(self):
        if not ARGS.server:
            self.skipTest("no --server binary given")
        result = run([ARGS.server, "--helpfull"])
        flags = set(re.findall(r"--([a-z0-9_]+)", result.stdout + result.stderr))
        self.assertIn("listen", flags, result.stdout + result.stderr)
        names = set(load_one(source("deploy", "compose.yaml"))["services"]["convserve"]
                    ["environment"])
        deployment = only(k8s_documents(), "Deployment")
        tls_patch = load_one(source("deploy", "k8s-tls", "deployment-tls.yaml"))
        for manifest in (deployment, tls_patch):
            for container in manifest["spec"]["template"]["spec"]["containers"]:
                names |= set(env_of(container))
        for word, rest in dockerfile_instructions():
            if word == "ENV":
                names |= set(re.findall(r"\b(CONVSERVE_[A-Z0-9_]+)=", rest))
        names = {n[len("CONVSERVE_"):] for n in names if n.startswith("CONVSERVE_")}
        self.assertTrue(names)
        for name in sorted(names):
            self.assertIn(name.lower(), flags, f"CONVSERVE_{name} is no server flag")


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source_dir", required=True)
    parser.add_argument("--server", default="", help="convserve-server binary (flag names)")
    ARGS, rest = parser.parse_known_args()
    ARGS.source_dir = os.path.abspath(ARGS.source_dir)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
