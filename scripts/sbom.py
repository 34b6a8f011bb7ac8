#!/usr/bin/env python3
"""A CycloneDX 1.5 JSON SBOM of Switchyard's released binaries, from `cargo metadata` and
Cargo.lock (scripts/release).

Reads `cargo metadata --format-version 1 --locked --filter-platform TRIPLE` on standard input and
lists every crate the given packages link (normal and build dependencies, for that platform; no
dev-dependencies): name, version, package URL, license (SPDX expression, as the crate declares
it), source (crates.io download, git repository or this workspace) and the SHA-256 checksum
Cargo.lock records for it, plus the dependency graph between them. The output is deterministic
for a given commit: the timestamp is the commit's (SOURCE_DATE_EPOCH) and the serial number is
derived from the commit and the version.

    cargo metadata --format-version 1 --locked --filter-platform x86_64-unknown-linux-gnu \\
      | scripts/sbom.py --lock Cargo.lock --revision "$(git rev-parse HEAD)" \\
          -p switchyard-control-plane -p switchyard-data-plane > switchyard.cdx.json
"""

import argparse
import datetime
import json
import os
import sys
import tomllib
import uuid

CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def purl(package):
    return f"pkg:cargo/{package['name']}@{package['version']}"


def license_entry(package):
    declared = package.get("license")
    if declared:
        # Old crates write "MIT/Apache-2.0"; SPDX says "MIT OR Apache-2.0".
        expression = " OR ".join(part.strip() for part in declared.split("/"))
        return [{"expression": expression}]
    if package.get("license_file"):
        return [{"license": {"name": f"see {package['license_file']} in the crate"}}]
    return []


def reachable(metadata, roots):
    """Package ids the roots depend on, themselves included: normal and build edges only."""
    nodes = {node["id"]: node for node in metadata["resolve"]["nodes"]}
    seen, stack = set(), list(roots)
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for dep in nodes[current]["deps"]:
            if any(kind["kind"] in (None, "build") for kind in dep["dep_kinds"]):
                stack.append(dep["pkg"])
    return seen, nodes


def component(package, checksums, roots):
    source = package.get("source")
    entry = {
        "type": "application" if package["id"] in roots else "library",
        "bom-ref": purl(package),
        "name": package["name"],
        "version": package["version"],
        "purl": purl(package),
        "licenses": license_entry(package),
    }
    checksum = checksums.get((package["name"], package["version"], source))
    if checksum:
        entry["hashes"] = [{"alg": "SHA-256", "content": checksum}]
    if source == CRATES_IO:
        url = f"https://crates.io/api/v1/crates/{package['name']}/{package['version']}/download"
        entry["externalReferences"] = [{"type": "distribution", "url": url}]
    elif source and source.startswith("git+"):
        entry["externalReferences"] = [{"type": "vcs", "url": source[len("git+"):]}]
    elif source is None:
        entry["properties"] = [{"name": "switchyard:source", "value": "workspace"}]
    elif source:
        entry["properties"] = [{"name": "switchyard:source", "value": source}]
    return entry


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-p", "--package", action="append", required=True, help="a released package")
    parser.add_argument("--lock", default="Cargo.lock")
    parser.add_argument("--revision", default="unknown", help="the commit released")
    args = parser.parse_args()

    metadata = json.load(sys.stdin)
    with open(args.lock, "rb") as f:
        lock = tomllib.load(f)
    checksums = {(p["name"], p["version"], p.get("source")): p["checksum"]
                 for p in lock.get("package", []) if "checksum" in p}
    packages = {p["id"]: p for p in metadata["packages"]}
    by_name = {p["name"]: p for p in metadata["packages"] if p["id"] in metadata["workspace_members"]}
    missing = [name for name in args.package if name not in by_name]
    if missing:
        sys.exit(f"sbom: not workspace packages: {', '.join(missing)}")
    roots = [by_name[name]["id"] for name in args.package]
    linked, nodes = reachable(metadata, roots)
    ordered = sorted(linked, key=lambda i: (packages[i]["name"], packages[i]["version"]))

    version = by_name[args.package[0]]["version"]
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    stamp = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'switchyard/{version}/{args.revision}')}",
        "version": 1,
        "metadata": {
            "timestamp": stamp,
            "tools": {"components": [{"type": "application", "name": "switchyard scripts/sbom.py"}]},
            "component": {
                "type": "application",
                "bom-ref": f"pkg:generic/switchyard@{version}",
                "name": "switchyard",
                "version": version,
                "licenses": license_entry(by_name[args.package[0]]),
                "properties": [{"name": "switchyard:revision", "value": args.revision}]
                + [{"name": "switchyard:package", "value": name} for name in args.package],
            },
        },
        "components": [component(packages[i], checksums, set(roots)) for i in ordered],
        "dependencies": [
            {"ref": purl(packages[i]),
             "dependsOn": sorted({purl(packages[d["pkg"]]) for d in nodes[i]["deps"] if d["pkg"] in linked
                                  and any(k["kind"] in (None, "build") for k in d["dep_kinds"])})}
            for i in ordered
        ],
    }
    json.dump(bom, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
