#!/usr/bin/env python3
"""Checks the local fleet's Compose file, deploy/compose/compose.yaml (scripts/check-deploy).

1. The Compose Specification's JSON schema, offline: the copy the PyPI package check-jsonschema
   vendors (check_jsonschema/builtin_schemas/vendor/compose-spec.json), validated with the
   `jsonschema` package. Unknown keys and wrong types are errors.
2. What the schema cannot say:
   - every `build` names the repository's Dockerfile and a `target` stage it has;
   - every published port binds 127.0.0.1 (no network_mode/pid/ipc/userns host, no privileged,
     no cap_add, no devices);
   - every service runs with `read_only: true`, a non-root `user`, `cap_drop: [ALL]` and
     `no-new-privileges`; the images built here run as 65532:65532, as the Dockerfile says;
   - no healthcheck on an image built here (distroless: no shell or curl to run one), and
     `service_healthy` only on a service with a healthcheck, `service_completed_successfully`
     only on a one-shot service (`restart: "no"`);
   - no secret in the file: every environment value or command word of a secret-looking name
     comes from an interpolated variable, every variable the file interpolates is in the
     `.env.example` beside it (and every entry there is used), and the example's secrets are
     the placeholder `change-me`.

Problems are printed as `FILE: service NAME: problem`; the exit status is 1 if any. With --bite
it also plants one breach of each kind in a copy and fails unless every one is caught.

    python3 scripts/compose_check.py deploy/compose/compose.yaml
"""

import argparse
import copy
import json
import os
import re
import sys
from importlib import resources

import yaml
from jsonschema.validators import validator_for

BUILT_USER = "65532:65532"
PLACEHOLDER = "change-me"
SECRET_NAME = re.compile(r"TOKEN|PASSWORD|SECRET|_KEY$|_AUTH$|^DATABASE_URL$|^REDIS_URL$")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(?::?[-?+])[^}]*)?\}")
HOST_MODES = ("network_mode", "pid", "ipc", "userns_mode")


def schema():
    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads((vendor / "compose-spec.json").read_text(encoding="utf-8"))


def schema_problems(doc):
    spec = schema()
    validator = validator_for(spec)(spec)
    out = []
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        out.append(f"schema: {where}: {error.message}")
    return out


def dockerfile_targets(path):
    stages = re.compile(r"^\s*FROM\s+\S+\s+AS\s+(\S+)\s*$", re.IGNORECASE)
    with open(path, encoding="utf-8") as f:
        return {m.group(1).lower() for m in map(stages.match, f) if m}


def env_example(path):
    entries = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                name, value = line.split("=", 1)
                entries[name.strip()] = value.strip()
    return entries


def published_host_ip(port):
    """The host address a `ports` entry binds, or None for any address."""
    if isinstance(port, dict):
        return port.get("host_ip")
    text = str(port).split("/", 1)[0]
    if text.startswith("["):
        return text[1 : text.index("]")]
    parts = text.split(":")
    return parts[0] if len(parts) == 3 else None


class Checker:
    def __init__(self, path, doc, base_dir):
        self.path = path
        self.doc = doc
        self.base_dir = base_dir
        self.problems = []

    def fail(self, service, message):
        self.problems.append(f"{self.path}: service {service}: {message}")

    def run(self, env_entries):
        self.problems += [f"{self.path}: {p}" for p in schema_problems(self.doc)]
        services = self.doc.get("services") or {}
        if not isinstance(services, dict):
            return self.problems
        for name, service in services.items():
            if isinstance(service, dict):
                self.build(name, service)
                self.isolation(name, service)
                self.health(name, service, services)
                self.secrets(name, service)
        self.variables(env_entries)
        return self.problems

    def build(self, name, service):
        build = service.get("build")
        if build is None:
            return
        if not isinstance(build, dict) or "target" not in build:
            self.fail(name, "`build` must name a Dockerfile `target` (the images are stages of one Dockerfile)")
            return
        context = os.path.normpath(os.path.join(self.base_dir, build.get("context", ".")))
        dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
        if not os.path.isfile(dockerfile):
            self.fail(name, f"no Dockerfile at {dockerfile}")
            return
        if build["target"].lower() not in dockerfile_targets(dockerfile):
            self.fail(name, f"build target {build['target']!r} is not a stage of {dockerfile}")

    def isolation(self, name, service):
        for port in service.get("ports") or []:
            if published_host_ip(port) not in ("127.0.0.1", "::1"):
                self.fail(name, f"port {port!r} must be published on loopback (127.0.0.1:HOST:CONTAINER)")
        for key in HOST_MODES:
            if str(service.get(key, "")).startswith("host"):
                self.fail(name, f"{key}: host shares the host's namespace")
        for key in ("privileged", "cap_add", "devices"):
            if service.get(key):
                self.fail(name, f"{key} is not allowed")
        if service.get("read_only") is not True:
            self.fail(name, "needs read_only: true (a read-only root filesystem; tmpfs for scratch)")
        user = str(service.get("user", ""))
        if not user or user.split(":")[0] in ("root", "0"):
            self.fail(name, f"needs a non-root `user` (got {user or 'none'!r})")
        if "build" in service and user != BUILT_USER:
            self.fail(name, f"an image built here runs as {BUILT_USER} (the Dockerfile's USER), not {user!r}")
        if "ALL" not in (service.get("cap_drop") or []):
            self.fail(name, "needs cap_drop: [ALL]")
        if not any(str(o).startswith("no-new-privileges") and not str(o).endswith(":false")
                   for o in service.get("security_opt") or []):
            self.fail(name, "needs security_opt: [no-new-privileges:true]")

    def health(self, name, service, services):
        check = service.get("healthcheck")
        if "build" in service and check and not check.get("disable"):
            self.fail(name, "a healthcheck cannot run in a distroless image (no shell, no curl)")
        depends = service.get("depends_on") or {}
        if isinstance(depends, list):
            return
        for other, spec in depends.items():
            target = services.get(other)
            condition = (spec or {}).get("condition", "service_started")
            if not isinstance(target, dict):
                self.fail(name, f"depends on unknown service {other!r}")
            elif condition == "service_healthy" and not (target.get("healthcheck") or {}).get("test"):
                self.fail(name, f"waits for {other} to be healthy, but {other} has no healthcheck")
            elif condition == "service_completed_successfully" and target.get("restart") != "no":
                self.fail(name, f"waits for {other} to complete, but {other} is not one-shot (restart: \"no\")")

    def secrets(self, name, service):
        env = service.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
        for key, value in env.items():
            if SECRET_NAME.search(key) and value is not None and not VARIABLE.search(str(value)):
                self.fail(name, f"environment {key} is a literal: secrets come from .env (${{{key}}})")
        command = service.get("command") or []
        words = command if isinstance(command, list) else str(command).split()
        for flag, value in zip(words, words[1:]):
            if re.search(r"pass|token|secret", str(flag), re.I) and not VARIABLE.search(str(value)):
                self.fail(name, f"command {flag} takes a literal: secrets come from .env")

    def variables(self, env_entries):
        used = set(VARIABLE.findall(yaml.safe_dump(self.doc)))
        for variable in sorted(used - set(env_entries)):
            self.problems.append(f"{self.path}: ${{{variable}}} is not in .env.example")
        for variable in sorted(set(env_entries) - used):
            self.problems.append(f"{self.path}: .env.example's {variable} is not used")
        for variable, value in sorted(env_entries.items()):
            if re.search(r"TOKEN|PASSWORD|SECRET", variable) and value != PLACEHOLDER:
                self.problems.append(f"{self.path}: .env.example's {variable} must be the placeholder {PLACEHOLDER!r}")


def check(path, doc, env_entries):
    return Checker(path, doc, os.path.dirname(os.path.abspath(path))).run(env_entries)


def breaches(doc):
    """One planted breach of each kind: (what, words its problem must contain, broken document)."""
    def edit(what, expect, change):
        broken = copy.deepcopy(doc)
        change(broken["services"])
        return what, expect, broken
    return [
        edit("an unknown key", "'restart_policy' was unexpected",
             lambda s: s["proxy-a"].update(restart_policy="always")),
        edit("an unknown dependency condition", "depends_on",
             lambda s: s["control-plane"]["depends_on"].update({"redis": {"condition": "service_ready"}})),
        edit("a port on every address", "published on loopback",
             lambda s: s["proxy-a"].update(ports=["8080:8080"])),
        edit("a missing build target", "is not a stage of",
             lambda s: s["proxy-a"]["build"].update(target="proxy")),
        edit("a privileged service", "privileged is not allowed",
             lambda s: s["redis"].update(privileged=True)),
        edit("a root user", "non-root", lambda s: s["postgres"].update(user="root")),
        edit("a writable root filesystem", "read_only",
             lambda s: s["control-plane"].pop("read_only")),
        edit("a healthcheck in a distroless image", "distroless",
             lambda s: s["proxy-a"].update(healthcheck={"test": ["CMD", "curl", "-f", "http://localhost:8080/readyz"]})),
        edit("service_healthy on a service without a check", "has no healthcheck",
             lambda s: s["proxy-a"]["depends_on"].update({"control-plane": {"condition": "service_healthy"}})),
        edit("a literal secret", "is a literal",
             lambda s: s["control-plane"]["environment"].update(SWITCHYARD_ADMIN_TOKEN="0123456789abcdef0123")),
        edit("a variable .env.example lacks", "not in .env.example",
             lambda s: s["proxy-b"].update(environment={**s["proxy-b"]["environment"], "X": "${NOT_IN_EXAMPLE}"})),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("compose_file")
    parser.add_argument("--env-example", help="default: .env.example beside the file")
    parser.add_argument("--bite", action="store_true", help="also check that planted breaches are caught")
    args = parser.parse_args()
    with open(args.compose_file, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    example = args.env_example or os.path.join(os.path.dirname(args.compose_file), ".env.example")
    env_entries = env_example(example)
    problems = check(args.compose_file, doc, env_entries)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    missed = []
    for what, expect, broken in breaches(doc) if args.bite else []:
        if not any(expect in p for p in check(args.compose_file, broken, env_entries)):
            missed.append(what)
    for what in missed:
        print(f"{args.compose_file}: the check accepted {what}", file=sys.stderr)
    services = ", ".join(doc["services"])
    print(f"compose: {args.compose_file} valid and checked ({services})"
          + ("; every planted breach caught" if args.bite else ""), file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
