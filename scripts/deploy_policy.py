#!/usr/bin/env python3
"""Checks rendered Kubernetes manifests for what the schemas cannot say (scripts/check-deploy).

Each argument is one rendered variant (a multi-document YAML file). Every rule that fails is
printed as `file: Kind/name: problem`; the exit status is 1 if any did. Rules:

- every pod meets the *restricted* Pod Security Standard (runAsNonRoot, seccomp RuntimeDefault,
  no privilege escalation, all capabilities dropped, no host namespaces or hostPath) and has a
  read-only root filesystem; every container has CPU and memory requests and limits and a
  pinned image tag;
- Switchyard's own pods have startup, readiness (/readyz) and liveness (/healthz) probes,
  topology spread, Prometheus scrape annotations and no service-account token;
- the data plane has an HPA and a PDB, and terminationGracePeriodSeconds exceeds its drain
  delay + shutdown grace; it has exactly one snapshot source (a control plane URL, or a config
  file that a mounted ConfigMap provides and that parses);
- the control plane runs >= 2 replicas with a PDB, its grace period exceeds its drain delay +
  shutdown grace, and a NetworkPolicy admits only data-plane pods to its gRPC port;
- every Secret a Switchyard pod needs exists in the variant or in the examples file (--secrets)
  with the keys the binary requires.
"""

import argparse
import sys

import yaml

DP = "switchyard-data-plane"
CP = "switchyard-control-plane"
# Defaults of the binaries (data-plane/src/cli.rs, control-plane/src/config.rs).
DP_DRAIN_DEFAULT, DP_GRACE_DEFAULT, CP_DRAIN_DEFAULT, CP_GRACE_DEFAULT = 5, 30, 5, 10
# Time after the grace period: stream error events flushed, Redis writes pushed (~3 s), slack.
MARGIN = 5
REQUIRED_SECRET_KEYS = {
    CP: {"DATABASE_URL", "SWITCHYARD_ADMIN_TOKEN", "SWITCHYARD_FLEET_TOKEN"},
    DP + "@fleet": {"SWITCHYARD_FLEET_TOKEN"},
}


class Checker:
    def __init__(self, path, docs, examples):
        self.path = path
        self.docs = [d for d in docs if d]
        self.examples = examples
        self.problems = []

    def fail(self, obj, message):
        meta = obj.get("metadata", {}) if isinstance(obj, dict) else {}
        self.problems.append(f"{self.path}: {obj.get('kind', '?')}/{meta.get('name', '?')}: {message}")

    def of_kind(self, kind):
        return [d for d in self.docs if d.get("kind") == kind]

    def named(self, kind, name):
        for d in self.of_kind(kind):
            if d["metadata"]["name"] == name:
                return d
        return None

    def secret_keys(self, name):
        """Keys of Secret `name` (generated names carry a hash suffix), here or in the examples."""
        for source in (self.docs, self.examples):
            for d in source:
                if d.get("kind") != "Secret":
                    continue
                n = d["metadata"]["name"]
                if n == name or n.rsplit("-", 1)[0] == name or name.rsplit("-", 1)[0] == n:
                    return set(d.get("data", {})) | set(d.get("stringData", {}))
        return None

    # --------------------------------------------------------------------------------------

    def run(self):
        deployments = self.of_kind("Deployment") + self.of_kind("StatefulSet") + self.of_kind("DaemonSet")
        if not deployments:
            self.problems.append(f"{self.path}: no workload at all")
        for ns in self.of_kind("Namespace"):
            labels = ns["metadata"].get("labels", {})
            if labels.get("pod-security.kubernetes.io/enforce") != "restricted":
                self.fail(ns, "namespace does not enforce the restricted Pod Security Standard")
        for w in deployments:
            self.pod(w)
        dp = self.named("Deployment", DP)
        if dp is None:
            self.problems.append(f"{self.path}: no {DP} Deployment")
        else:
            self.data_plane(dp)
        cp = self.named("Deployment", CP)
        if cp is not None:
            self.control_plane(cp)
        return self.problems

    def pod(self, w):
        spec = w["spec"]["template"]["spec"]
        psc = spec.get("securityContext", {})
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(field):
                self.fail(w, f"{field} is set")
        for v in spec.get("volumes", []):
            if "hostPath" in v:
                self.fail(w, f"volume {v['name']} is a hostPath")
        if psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            self.fail(w, "pod seccompProfile is not RuntimeDefault")
        for c in spec.get("initContainers", []) + spec["containers"]:
            csc = c.get("securityContext", {})
            where = f"container {c['name']}"
            if not (csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True):
                self.fail(w, f"{where}: runAsNonRoot is not true")
            if csc.get("runAsUser", psc.get("runAsUser")) == 0:
                self.fail(w, f"{where}: runs as UID 0")
            if csc.get("allowPrivilegeEscalation") is not False:
                self.fail(w, f"{where}: allowPrivilegeEscalation is not false")
            if csc.get("privileged"):
                self.fail(w, f"{where}: privileged")
            if "ALL" not in csc.get("capabilities", {}).get("drop", []):
                self.fail(w, f"{where}: capabilities do not drop ALL")
            if csc.get("capabilities", {}).get("add"):
                self.fail(w, f"{where}: adds capabilities")
            if csc.get("readOnlyRootFilesystem") is not True:
                self.fail(w, f"{where}: root filesystem is writable")
            sec = csc.get("seccompProfile", psc.get("seccompProfile", {}))
            if sec.get("type") not in ("RuntimeDefault", "Localhost"):
                self.fail(w, f"{where}: no RuntimeDefault seccomp profile")
            res = c.get("resources", {})
            for kind in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    if r not in res.get(kind, {}):
                        self.fail(w, f"{where}: no {r} {kind[:-1]}")
            image = c.get("image", "")
            if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
                self.fail(w, f"{where}: image {image!r} has no pinned tag")
        if w["metadata"]["name"] in (DP, CP):
            self.switchyard_pod(w, spec)

    def switchyard_pod(self, w, spec):
        c = spec["containers"][0]
        probes = {k: c.get(k) for k in ("startupProbe", "readinessProbe", "livenessProbe")}
        for k, p in probes.items():
            if not p:
                self.fail(w, f"no {k}")
        if probes["readinessProbe"] and probes["readinessProbe"].get("httpGet", {}).get("path") != "/readyz":
            self.fail(w, "readinessProbe is not GET /readyz")
        if probes["livenessProbe"] and probes["livenessProbe"].get("httpGet", {}).get("path") != "/healthz":
            self.fail(w, "livenessProbe is not GET /healthz")
        if not spec.get("topologySpreadConstraints"):
            self.fail(w, "no topologySpreadConstraints")
        if spec.get("automountServiceAccountToken") is not False:
            self.fail(w, "mounts a service-account token it does not need")
        ann = w["spec"]["template"]["metadata"].get("annotations", {})
        ports = {p["containerPort"] for p in c.get("ports", [])}
        if ann.get("prometheus.io/scrape") != "true" or int(ann.get("prometheus.io/port", 0)) not in ports \
                or ann.get("prometheus.io/path") != "/metrics":
            self.fail(w, "no Prometheus scrape annotations for /metrics on a container port")
        strategy = w["spec"].get("strategy", {})
        if strategy.get("rollingUpdate", {}).get("maxUnavailable") not in (0, "0", "0%"):
            self.fail(w, "rolling update may take a ready pod away before its replacement is ready")

    @staticmethod
    def env(c):
        return {e["name"]: e.get("value") for e in c.get("env", [])}

    def selects(self, obj, name):
        labels = obj["spec"].get("selector", {}).get("matchLabels", {})
        return labels.get("app.kubernetes.io/name") == name

    def data_plane(self, dp):
        spec = dp["spec"]["template"]["spec"]
        c = spec["containers"][0]
        env = self.env(c)
        drain = int(env.get("SWITCHYARD_DRAIN_DELAY_SECONDS") or DP_DRAIN_DEFAULT)
        grace = int(env.get("SWITCHYARD_SHUTDOWN_GRACE_SECONDS") or DP_GRACE_DEFAULT)
        tgps = spec.get("terminationGracePeriodSeconds", 30)
        if tgps < drain + grace + MARGIN:
            self.fail(dp, f"terminationGracePeriodSeconds {tgps} < drain delay {drain} + grace {grace} + {MARGIN}")
        if drain < 2:
            self.fail(dp, f"drain delay {drain} s is too short for endpoint propagation")
        if not any(h["spec"]["scaleTargetRef"]["name"] == DP for h in self.of_kind("HorizontalPodAutoscaler")):
            self.fail(dp, "no HorizontalPodAutoscaler")
        elif dp["spec"].get("replicas") is not None:
            self.fail(dp, "sets replicas although an HPA scales it (every apply would reset the scale)")
        if not any(self.selects(p, DP) for p in self.of_kind("PodDisruptionBudget")):
            self.fail(dp, "no PodDisruptionBudget")
        fleet, config = env.get("SWITCHYARD_CONTROL_PLANE"), env.get("SWITCHYARD_CONFIG")
        if bool(fleet) == bool(config):
            self.fail(dp, "needs exactly one of SWITCHYARD_CONTROL_PLANE and SWITCHYARD_CONFIG")
        if fleet:
            if self.named("Deployment", CP) is None:
                self.fail(dp, "follows a control plane this variant does not deploy")
            self.secrets(dp, c, REQUIRED_SECRET_KEYS[DP + "@fleet"])
        if config:
            self.config_file(dp, spec, c, config)

    def config_file(self, dp, spec, c, path):
        mount = next((m for m in c.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")), None)
        if mount is None:
            return self.fail(dp, f"SWITCHYARD_CONFIG {path} is on no mounted volume")
        volume = next((v for v in spec.get("volumes", []) if v["name"] == mount["name"]), {})
        cm_name = volume.get("configMap", {}).get("name")
        cm = self.named("ConfigMap", cm_name) if cm_name else None
        key = path[len(mount["mountPath"].rstrip("/")) + 1:]
        if cm is None or key not in cm.get("data", {}):
            return self.fail(dp, f"SWITCHYARD_CONFIG {path}: no ConfigMap in this variant provides it")
        parsed = yaml.safe_load(cm["data"][key])
        for section in ("channels", "routes", "tokens"):
            if not parsed.get(section):
                self.fail(cm, f"{key} has no {section}")
        needed = set()
        for t in parsed.get("tokens", []):
            v = str(t.get("token", ""))
            if v.startswith("${") and v.endswith("}"):
                needed.add(v[2:-1])
        self.secrets(dp, c, needed)

    def secrets(self, w, c, keys):
        refs = [e["secretRef"] for e in c.get("envFrom", []) if "secretRef" in e]
        if not refs:
            return self.fail(w, f"reads no Secret, but needs {sorted(keys)}")
        for ref in refs:
            have = self.secret_keys(ref["name"])
            if have is None:
                if not ref.get("optional"):
                    self.fail(w, f"Secret {ref['name']} is neither in this variant nor in the examples")
                continue
            missing = keys - have
            if missing and not ref.get("optional"):
                self.fail(w, f"Secret {ref['name']} lacks {sorted(missing)}")

    def control_plane(self, cp):
        spec = cp["spec"]["template"]["spec"]
        c = spec["containers"][0]
        if cp["spec"].get("replicas", 1) < 2:
            self.fail(cp, "fewer than 2 replicas")
        if not any(self.selects(p, CP) for p in self.of_kind("PodDisruptionBudget")):
            self.fail(cp, "no PodDisruptionBudget")
        grace = int(self.env(c).get("SWITCHYARD_SHUTDOWN_GRACE_SECS") or CP_GRACE_DEFAULT)
        drain = int(self.env(c).get("SWITCHYARD_DRAIN_DELAY_SECONDS") or CP_DRAIN_DEFAULT)
        sleep = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        tgps = spec.get("terminationGracePeriodSeconds", 30)
        if tgps < sleep + drain + grace + MARGIN:
            self.fail(cp, f"terminationGracePeriodSeconds {tgps} < preStop {sleep} + drain delay {drain} + grace {grace} + {MARGIN}")
        self.secrets(cp, c, REQUIRED_SECRET_KEYS[CP])
        grpc = {p["containerPort"] for p in c["ports"] if p.get("name") == "grpc"}
        grpc_names = {"grpc"} | {str(p) for p in grpc} | set(grpc)
        policies = [n for n in self.of_kind("NetworkPolicy")
                    if n["spec"].get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name") == CP]
        if not policies:
            return self.fail(cp, "no NetworkPolicy guards the gRPC port")
        admitted = False
        for policy in policies:
            if "Ingress" not in policy["spec"].get("policyTypes", ["Ingress"]):
                self.fail(policy, "does not restrict ingress")
            for rule in policy["spec"].get("ingress", []):
                ports = rule.get("ports")
                covers = ports is None or any(p.get("port") in grpc_names for p in ports)
                if not covers:
                    continue
                peers = rule.get("from")
                only_dp = bool(peers) and all(
                    set(p) == {"podSelector"}
                    and p["podSelector"].get("matchLabels") == {"app.kubernetes.io/name": DP}
                    for p in peers)
                if only_dp:
                    admitted = True
                else:
                    self.fail(policy, "admits peers other than the data plane to the gRPC port")
        if not admitted:
            self.fail(cp, "the NetworkPolicy does not admit the data plane to the gRPC port")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--secrets", help="example Secrets that operators create beside the manifests")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    examples = []
    if args.secrets:
        with open(args.secrets) as f:
            examples = [d for d in yaml.safe_load_all(f) if d]
    problems = []
    for path in args.files:
        with open(path) as f:
            problems += Checker(path, list(yaml.safe_load_all(f)), examples).run()
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"policy: {len(args.files)} variant(s) pass", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
