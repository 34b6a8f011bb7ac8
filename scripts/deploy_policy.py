#!/usr/bin/env python3
"""Checks rendered Kubernetes manifests for what the schemas cannot say (scripts/check-deploy).

Each argument is one rendered variant (a multi-document YAML file). Every rule that fails is
printed as `file: Kind/name: problem`; the exit status is 1 if any did. Rules:

- every pod meets the *restricted* Pod Security Standard (runAsNonRoot, seccomp RuntimeDefault,
  no privilege escalation, all capabilities dropped, no host namespaces or hostPath) and has a
  read-only root filesystem; every container has CPU and memory requests and a memory limit and a
  pinned image tag; the data plane has NO CPU limit (CFS throttling adds latency to a proxy);
- with --require-digest FILE (production), every image in FILE is pinned by digest;
- Switchyard's own pods have startup, readiness (/readyz) and liveness (/healthz) probes,
  topology spread, Prometheus scrape annotations and no service-account token;
- the data plane has an HPA and a PDB, and terminationGracePeriodSeconds exceeds its drain
  delay + shutdown grace; it has exactly one snapshot source (a control plane URL, or a config
  file that a mounted ConfigMap provides and that parses);
- the control plane runs >= 2 replicas with a PDB, its grace period exceeds its drain delay +
  shutdown grace, and a NetworkPolicy admits only data-plane pods to its gRPC port and only
  named peers to its HTTP port; both planes' NetworkPolicies restrict ingress and egress, and
  their egress allows DNS;
- Prometheus Operator objects (no schema in the validator): a ServiceMonitor selects a Service of
  the variant by labels and scrapes a port that Service has, at /metrics; a PrometheusRule has
  only well-formed groups and rules; both are in the workloads' namespace;
- every Secret a Switchyard pod needs exists in the variant or in the examples file (--secrets)
  with the keys the binary requires.
"""

import argparse
import re
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
    def __init__(self, path, docs, examples, require_digest=False):
        self.path = path
        self.require_digest = require_digest
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
        self.network_policies(dp, cp)
        self.monitoring(deployments)
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
            for r in ("cpu", "memory"):
                if r not in res.get("requests", {}):
                    self.fail(w, f"{where}: no {r} request")
            if "memory" not in res.get("limits", {}):
                self.fail(w, f"{where}: no memory limit")
            if w["metadata"]["name"] == DP and "cpu" in res.get("limits", {}):
                self.fail(w, f"{where}: has a CPU limit (CFS throttling adds latency to the proxy; "
                             "requests only)")
            image = c.get("image", "")
            if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
                self.fail(w, f"{where}: image {image!r} has no pinned tag")
            if self.require_digest and not re.search(r"@sha256:[0-9a-f]{64}$", image):
                self.fail(w, f"{where}: image {image!r} is not pinned by digest (@sha256:...)")
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


    def policies_for(self, name):
        return [n for n in self.of_kind("NetworkPolicy")
                if n["spec"].get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name") == name]

    def network_policies(self, dp, cp):
        """Both planes: ingress and egress restricted, DNS allowed out, no open HTTP port on the
        control plane (its admin API)."""
        for w in (dp, cp):
            if w is None:
                continue
            name = w["metadata"]["name"]
            policies = self.policies_for(name)
            if not policies:
                self.fail(w, "no NetworkPolicy selects its pods")
                continue
            types = {t for p in policies for t in p["spec"].get("policyTypes", [])}
            for t in ("Ingress", "Egress"):
                if t not in types:
                    self.fail(w, f"its NetworkPolicy does not restrict {t.lower()}")
            egress = [r for p in policies for r in p["spec"].get("egress", [])]
            if "Egress" in types and not any(
                    "to" not in r and any(str(port.get("port")) == "53" for port in r.get("ports", []))
                    for r in egress):
                self.fail(w, "its NetworkPolicy lets no DNS (port 53) out")
            for p in policies:
                for r in p["spec"].get("ingress", []):
                    if not r.get("from") and name == CP:
                        self.fail(p, "admits anyone to a port of the control plane (every ingress rule needs `from`)")
                    for peer in r.get("from", []):
                        if "ipBlock" in peer and peer["ipBlock"].get("cidr") in ("0.0.0.0/0", "::/0") and name == CP:
                            self.fail(p, "admits any address to the control plane")

    def monitoring(self, workloads):
        namespaces = {w["metadata"].get("namespace") for w in workloads}
        services = self.of_kind("Service")
        for sm in self.of_kind("ServiceMonitor"):
            spec = sm.get("spec", {})
            unexpected = set(spec) - {"selector", "endpoints", "namespaceSelector", "jobLabel",
                                      "targetLabels", "podTargetLabels", "sampleLimit"}
            if unexpected:
                self.fail(sm, f"unexpected spec fields {sorted(unexpected)}")
            if "jobLabel" in spec:
                self.fail(sm, "sets jobLabel: the alerts expect the job label to be the Service's name")
            wanted = spec.get("selector", {}).get("matchLabels", {})
            selected = [s for s in services
                        if wanted and all(s["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())]
            if not selected:
                self.fail(sm, f"selects no Service of this variant ({wanted})")
            if not spec.get("endpoints"):
                self.fail(sm, "has no endpoints")
            for e in spec.get("endpoints", []):
                for s in selected:
                    if e.get("port") not in {p.get("name") for p in s["spec"].get("ports", [])}:
                        self.fail(sm, f"Service {s['metadata']['name']} has no port named {e.get('port')!r}")
                if e.get("path", "/metrics") != "/metrics":
                    self.fail(sm, f"scrapes {e.get('path')}, not /metrics")
            if sm["metadata"].get("namespace") not in namespaces:
                self.fail(sm, "is not in the workloads' namespace")
        for pr in self.of_kind("PrometheusRule"):
            spec = pr.get("spec", {})
            if set(spec) != {"groups"} or not spec["groups"]:
                self.fail(pr, "spec must hold only a non-empty `groups` list")
                continue
            names = set()
            for g in spec["groups"]:
                if set(g) - {"name", "interval", "rules", "limit"} or not g.get("name") or not g.get("rules"):
                    self.fail(pr, f"malformed group {g.get('name')!r}")
                if g.get("name") in names:
                    self.fail(pr, f"group {g.get('name')!r} appears twice")
                names.add(g.get("name"))
                for r in g.get("rules", []):
                    kind = [k for k in ("alert", "record") if k in r]
                    allowed = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
                    if len(kind) != 1 or not r.get("expr") or set(r) - allowed:
                        self.fail(pr, f"malformed rule {r.get('alert') or r.get('record')!r}")
                    if "alert" in r and r.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
                        self.fail(pr, f"alert {r['alert']} has no severity label (critical, warning or info)")
            if pr["metadata"].get("namespace") not in namespaces:
                self.fail(pr, "is not in the workloads' namespace")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--secrets", help="example Secrets that operators create beside the manifests")
    parser.add_argument("--require-digest", action="append", default=[], metavar="FILE",
                        help="a variant (one of the files) whose images must be pinned by digest")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    examples = []
    if args.secrets:
        with open(args.secrets) as f:
            examples = [d for d in yaml.safe_load_all(f) if d]
    problems = []
    for path in args.files:
        with open(path) as f:
            docs = list(yaml.safe_load_all(f))
        problems += Checker(path, docs, examples, path in args.require_digest).run()
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"policy: {len(args.files)} variant(s) pass", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
