#!/usr/bin/env python3
"""Keeps the PrometheusRule of deploy/components/monitoring identical to the plain rule file.

deploy/prometheus/switchyard-rules.yaml is the source: a rule file any Prometheus loads. The
Prometheus Operator takes the same groups wrapped in a PrometheusRule object, which this script
generates (--write) or checks (--check, run by scripts/check-deploy: exits 1 when the checked-in
file is not exactly what --write would produce). With --rendered FILE it also checks that a
rendered variant's PrometheusRule carries exactly the groups of the plain file (kustomize
transformations must not change a rule) and writes those groups to --extract-to for promtool;
with --rendered-standalone FILE, that FILE's PrometheusRule carries them all but the group
switchyard-control-plane (deploy/components/monitoring-standalone).
With --mutants PROMTOOL it checks that the unit tests (deploy/prometheus/tests/) can fail: with
every alert made unable to fire, each alert must fail a test (each has a case where it fires);
with every `for:` removed, each alert that has one must fail a test (each has a case where it
must stay silent until its `for` has passed).

    python3 scripts/prometheus_rules.py --write     # after editing switchyard-rules.yaml
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

SOURCE = "deploy/prometheus/switchyard-rules.yaml"
TARGET = "deploy/components/monitoring/prometheusrule.yaml"
HEADER = """\
# GENERATED from deploy/prometheus/switchyard-rules.yaml by scripts/prometheus_rules.py --write;
# do not edit (scripts/check-deploy fails when the two differ). The alerts are explained there and
# in docs/src/guides/observability.md.
"""


class Dumper(yaml.SafeDumper):
    pass


def _str(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


Dumper.add_representer(str, _str)


def load_groups(path=SOURCE):
    with open(path) as f:
        doc = yaml.safe_load(f)
    if set(doc) != {"groups"}:
        sys.exit(f"{path}: expected only a top-level `groups:` key, got {sorted(doc)}")
    return doc["groups"]


def generate():
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "switchyard",
            "labels": {"app.kubernetes.io/name": "switchyard", "app.kubernetes.io/component": "monitoring"},
        },
        "spec": {"groups": load_groups()},
    }
    return HEADER + yaml.dump(rule, Dumper=Dumper, sort_keys=False, width=100, allow_unicode=True)


def failing_alerts(promtool, mutate):
    """Alert names whose unit tests fail against the rules as `mutate` changes them."""
    groups = load_groups()
    for group in groups:
        for rule in group["rules"]:
            if "alert" in rule:
                mutate(rule)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, os.path.basename(SOURCE)), "w") as f:
            yaml.dump({"groups": groups}, f, Dumper=Dumper, sort_keys=False)
        os.mkdir(os.path.join(tmp, "tests"))
        tests = sorted(glob.glob(os.path.join(os.path.dirname(SOURCE), "tests", "*.yaml")))
        for t in tests:
            shutil.copy(t, os.path.join(tmp, "tests"))
        run = subprocess.run([promtool, "test", "rules"] + [os.path.join(tmp, "tests", os.path.basename(t)) for t in tests],
                             capture_output=True, text=True)
    return set(re.findall(r"alertname: (\w+)", run.stdout + run.stderr))


def mutants(promtool):
    alerts = [r for g in load_groups() for r in g["rules"] if "alert" in r]
    problems = []

    def never(rule):
        rule["expr"] = "vector(1) == 0"
    caught = failing_alerts(promtool, never)
    problems += [f"{r['alert']}: no unit test expects it to fire" for r in alerts if r["alert"] not in caught]

    def no_for(rule):
        rule.pop("for", None)
    caught = failing_alerts(promtool, no_for)
    problems += [f"{r['alert']}: no unit test expects it silent before its `for: {r['for']}` has passed"
                 for r in alerts if "for" in r and r["alert"] not in caught]
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"mutants: every one of {len(alerts)} alerts fails a test when it cannot fire, "
              f"and every `for` is tested", file=sys.stderr)
    return 1 if problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--mutants", metavar="PROMTOOL", help="check that the unit tests can fail")
    parser.add_argument("--target", default=TARGET, help="the PrometheusRule file to write or check")
    parser.add_argument("--rendered", action="append", default=[],
                        help="a rendered variant whose PrometheusRule must carry the plain file's groups")
    parser.add_argument("--rendered-standalone", action="append", default=[],
                        help="a rendered standalone variant: the plain file's groups but the control plane's")
    parser.add_argument("--extract-to", help="write the rendered PrometheusRule's spec here (a rule file)")
    args = parser.parse_args()
    if args.mutants:
        return mutants(args.mutants)
    text = generate()
    if args.write:
        with open(args.target, "w") as f:
            f.write(text)
        print(f"wrote {args.target}", file=sys.stderr)
        return 0
    with open(args.target) as f:
        if f.read() != text:
            print(f"{args.target} differs from what {SOURCE} generates: "
                  f"run python3 scripts/prometheus_rules.py --write", file=sys.stderr)
            return 1
    groups = load_groups()
    standalone = [g for g in groups if g["name"] != "switchyard-control-plane"]
    if len(standalone) != len(groups) - 1:
        print(f"{SOURCE}: no group switchyard-control-plane", file=sys.stderr)
        return 1
    for path, expected in [(p, groups) for p in args.rendered] + [(p, standalone) for p in args.rendered_standalone]:
        with open(path) as f:
            rules = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "PrometheusRule"]
        if len(rules) != 1:
            print(f"{path}: expected one PrometheusRule, found {len(rules)}", file=sys.stderr)
            return 1
        if rules[0]["spec"] != {"groups": expected}:
            print(f"{path}: the rendered PrometheusRule's spec differs from {SOURCE}", file=sys.stderr)
            return 1
        if args.extract_to and expected is groups:
            with open(args.extract_to, "w") as f:
                yaml.dump(rules[0]["spec"], f, Dumper=Dumper, sort_keys=False, width=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
