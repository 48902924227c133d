"""Helpers of scripts/validate-deploy.sh for rendered Helm manifests (run with .tools/deploy-venv).

    split OUT_DIR FILE...        core kinds -> OUT_DIR/core.yaml (for kubernetes-validate), CRD
                                 kinds -> OUT_DIR/crds.jsonl (for validate-crds.mjs); unknown kinds fail
    envoy FILE...                parse the Envoy parts of every EnvoyFilter, and every Envoy
                                 bootstrap in a ConfigMap key named envoy.yaml, as Envoy's protos
                                 (unknown fields, wrong types, bad enums and durations fail)
    rules OUT_DIR FILE           write the rules ConfigMap's files to OUT_DIR (for `sluice check`)
    env FILE HELP_FILE PENDING   every SLUICE_* variable the sluice container gets must be in
                                 `sluice serve --help` (HELP_FILE) or in the comma-separated PENDING
    run-env FILE                 print `NAME=VALUE` lines of the sluice container's plain env
    values-doc VALUES README     every value in VALUES must be named in README's backticks (the
                                 value itself, a parent of it, or `parent.*`)
"""

import json
import re
import sys

import yaml

CORE_KINDS = {
    "ConfigMap", "Secret", "Service", "ServiceAccount", "Deployment", "Pod",
    "PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy",
}
CRD_KINDS = {"EnvoyFilter", "ServiceMonitor"}


def docs(paths):
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    yield path, doc


def name_of(doc):
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def split(out_dir, paths):
    core, crds = [], []
    for path, doc in docs(paths):
        kind = doc.get("kind")
        if kind in CORE_KINDS:
            core.append(doc)
        elif kind in CRD_KINDS:
            crds.append(doc)
        else:
            sys.exit(f"{path}: {name_of(doc)}: a kind this check does not know; add a validator")
    with open(f"{out_dir}/core.yaml", "w", encoding="utf-8") as f:
        yaml.safe_dump_all(core, f, sort_keys=False)
    with open(f"{out_dir}/crds.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(doc) + "\n" for doc in crds)
    print(f"{len(core)} core and {len(crds)} custom resources")


def sluice_container(path):
    for _, doc in docs([path]):
        if doc.get("kind") == "Deployment":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "sluice":
                    return c
    sys.exit(f"{path}: no Deployment with a sluice container")


def envoy(paths):
    # Imported here: only this subcommand needs Envoy's generated protos (xds-protos).
    from google.protobuf import json_format
    # Registers the types that typed_config / typed_extension_protocol_options name.
    import envoy.extensions.filters.http.ratelimit.v3.rate_limit_pb2  # noqa: F401
    import envoy.extensions.filters.http.rate_limit_quota.v3.rate_limit_quota_pb2  # noqa: F401
    import envoy.type.matcher.v3.http_inputs_pb2  # noqa: F401
    import envoy.extensions.filters.http.router.v3.router_pb2  # noqa: F401
    import envoy.extensions.upstreams.http.v3.http_protocol_options_pb2  # noqa: F401
    from envoy.config.bootstrap.v3.bootstrap_pb2 import Bootstrap
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.config.route.v3.route_components_pb2 import VirtualHost
    from envoy.extensions.filters.network.http_connection_manager.v3 import (
        http_connection_manager_pb2 as hcm,
    )

    # What an EnvoyFilter patch value is, by applyTo (Istio turns it into this proto).
    patch_types = {"CLUSTER": Cluster, "HTTP_FILTER": hcm.HttpFilter, "VIRTUAL_HOST": VirtualHost}
    checked = 0
    for path, doc in docs(paths):
        if doc.get("kind") == "EnvoyFilter":
            for i, patch in enumerate(doc["spec"]["configPatches"]):
                where = f"{path}: {name_of(doc)} configPatches[{i}] ({patch['applyTo']})"
                proto = patch_types.get(patch["applyTo"])
                if proto is None:
                    sys.exit(f"{where}: no proto known for this applyTo; add it here")
                try:
                    json_format.ParseDict(patch["patch"]["value"], proto())
                except json_format.ParseError as e:
                    sys.exit(f"{where}: not a valid {proto.DESCRIPTOR.full_name}: {e}")
                checked += 1
        elif doc.get("kind") == "ConfigMap" and "envoy.yaml" in doc.get("data", {}):
            where = f"{path}: {name_of(doc)} envoy.yaml"
            try:
                json_format.ParseDict(yaml.safe_load(doc["data"]["envoy.yaml"]), Bootstrap())
            except json_format.ParseError as e:
                sys.exit(f"{where}: not a valid Envoy v3 bootstrap: {e}")
            checked += 1
    print(f"{checked} Envoy config pieces parse as Envoy v3 protos")


def rules(out_dir, path):
    found = False
    for _, doc in docs([path]):
        labels = doc.get("metadata", {}).get("labels", {})
        if (doc.get("kind") == "ConfigMap" and labels.get("app.kubernetes.io/name") == "sluice"
                and doc["metadata"]["name"].endswith("-config")):
            for name, body in doc.get("data", {}).items():
                with open(f"{out_dir}/{name}", "w", encoding="utf-8") as f:
                    f.write(body)
            found = True
    if not found:
        if any(e["name"] == "SLUICE_CONFIG_XDS" for e in sluice_container(path).get("env", [])):
            print("rules over xDS (SLUICE_CONFIG_XDS): no rules ConfigMap to check")
            return
        sys.exit(f"{path}: no sluice rules ConfigMap")


def env_names(path):
    names = set()
    for _, doc in docs([path]):
        if doc.get("kind") in ("Deployment", "Pod"):
            for c in doc["spec"]["template"]["spec"]["containers"] if doc["kind"] == "Deployment" \
                    else doc["spec"]["containers"]:
                if c["name"] == "sluice":
                    names |= {e["name"] for e in c.get("env", []) if e["name"].startswith("SLUICE_")}
    return names


def env(path, help_file, pending):
    with open(help_file, encoding="utf-8") as f:
        known = set(re.findall(r"env: (SLUICE_[A-Z0-9_]+)", f.read()))
    pending = {p for p in pending.split(",") if p}
    names = env_names(path)
    unknown = sorted(names - known - pending)
    if unknown:
        sys.exit(f"{path}: the chart sets variables `sluice serve` does not read: {unknown}")
    waiting = sorted(names & pending - known)
    note = f" ({len(waiting)} pending: {', '.join(waiting)})" if waiting else ""
    print(f"{len(names)} SLUICE_* variables known to sluice serve{note}")


def run_env(path):
    for e in sluice_container(path).get("env", []):
        if "value" in e:
            print(f"{e['name']}={e['value']}")


def leaf_paths(value, prefix=""):
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from leaf_paths(v, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix


def values_doc(values_file, readme):
    with open(values_file, encoding="utf-8") as f:
        values = yaml.safe_load(f)
    with open(readme, encoding="utf-8") as f:
        named = set(re.findall(r"`([A-Za-z0-9_.*]+)`", f.read()))
    missing = []
    for path in leaf_paths(values):
        parts = path.split(".")
        prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        if not (prefixes & named or {p + ".*" for p in prefixes} & named):
            missing.append(path)
    if missing:
        sys.exit(f"{readme} does not document: {', '.join(missing)}")
    print(f"{readme} documents every value of {values_file}")


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "split":
        split(args[0], args[1:])
    elif cmd == "envoy":
        envoy(args)
    elif cmd == "rules":
        rules(args[0], args[1])
    elif cmd == "env":
        env(args[0], args[1], args[2])
    elif cmd == "run-env":
        run_env(args[0])
    elif cmd == "values-doc":
        values_doc(args[0], args[1])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)
