// Offline checks of the Istio example (examples/istio), run by scripts/check-examples.sh:
//
//   node scripts/check-istio.mjs NODE_MODULES OUT_DIR FILE...
//
// - every EnvoyFilter validates against Istio's schema (@kubernetes-models/istio), and has no
//   field unknown to that schema: the schema alone lets unknown fields through (the API server
//   prunes them, or `kubectl apply` rejects them), so a misspelt field would pass unnoticed;
// - each EnvoyFilter's Envoy configuration is turned into an equivalent Envoy bootstrap,
//   OUT_DIR/<name>.bootstrap.json, for `envoy --mode validate`: one listener whose HTTP
//   connection manager gets the HTTP_FILTER patches before the router, one route that gets the
//   HTTP_ROUTE (and VIRTUAL_HOST) MERGE patches, and the CLUSTER ADD patches. A patch this check
//   cannot model is an error, so nothing passes unchecked;
// - the files of the ConfigMap `sluice-config` are written to OUT_DIR/sluice-config/ for
//   `sluice check`, and every rate limit filter must name a domain that one of them defines.
//
// Other kinds (Namespace, Service, ...) are left to kubernetes-validate.

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, outDir, ...files] = process.argv.slice(2);
if (!nodeModules || !outDir || files.length === 0) {
  console.error("usage: node scripts/check-istio.mjs NODE_MODULES OUT_DIR FILE...");
  process.exit(2);
}
const load = (path) => import(pathToFileURL(resolve(nodeModules, path)).href);
const YAML = await load("yaml/dist/index.js");
const { EnvoyFilter } = await load(
  "@kubernetes-models/istio/networking.istio.io/v1alpha3/EnvoyFilter.js",
);

// The field names Istio's EnvoyFilter schema knows, read from the compiled validator (a flat
// set: enough to catch a misspelt field, not one in the wrong place).
const KNOWN_FIELDS = new Set(
  [
    ...readFileSync(
      resolve(nodeModules, "@kubernetes-models/istio/_schemas/NetworkingIstioIoV1alpha3EnvoyFilter.js"),
      "utf8",
    ).matchAll(/\bdata\d*\.([A-Za-z_]+)/g),
  ].map((m) => m[1]),
);
if (!KNOWN_FIELDS.has("configPatches")) throw new Error("cannot read the EnvoyFilter schema's fields");

const RATELIMIT = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit";
const HCM = "envoy.filters.network.http_connection_manager";
const ROUTER = "envoy.filters.http.router";

const errors = [];
const filterDomains = []; // [where, domain]
const configDomains = new Set();

mkdirSync(join(outDir, "sluice-config"), { recursive: true });

for (const file of files) {
  const docs = YAML.parseAllDocuments(readFileSync(file, "utf8"), { uniqueKeys: true });
  for (const doc of docs) {
    if (doc.errors.length > 0) {
      errors.push(`${file}: ${doc.errors.map(String).join("; ")}`);
      continue;
    }
    const obj = doc.toJS();
    if (obj === null) continue;
    const where = `${file}: ${obj.kind}/${obj.metadata?.name}`;
    try {
      if (obj.kind === "EnvoyFilter") {
        new EnvoyFilter(obj).validate();
        unknownFields(obj, "");
        const bootstrap = bootstrapFor(obj, where);
        const out = join(outDir, `${obj.metadata.name}.bootstrap.json`);
        writeFileSync(out, JSON.stringify(bootstrap, null, 2));
        console.log(`ok   ${where}: Istio schema; Envoy bootstrap ${out}`);
      } else if (obj.kind === "ConfigMap" && obj.metadata?.name === "sluice-config") {
        for (const [key, text] of Object.entries(obj.data ?? {})) {
          writeFileSync(join(outDir, "sluice-config", key), text);
          const domain = YAML.parse(text)?.domain;
          if (domain) configDomains.add(domain);
        }
        console.log(`ok   ${where}: files written to ${join(outDir, "sluice-config")}`);
      }
    } catch (e) {
      errors.push(`${where}: ${e.message ?? e}`);
    }
  }
}

for (const [where, domain] of filterDomains) {
  if (!configDomains.has(domain)) {
    errors.push(`${where}: domain ${JSON.stringify(domain)} is not in the ConfigMap sluice-config`);
  }
}

if (errors.length > 0) {
  for (const e of errors) console.error(`FAIL ${e}`);
  process.exit(1);
}

/** Fails on a field the EnvoyFilter schema does not know. User-chosen keys (metadata, labels,
 * proxy metadata) and patch values (Envoy's configuration, which Envoy checks) are skipped. */
function unknownFields(v, path) {
  if (Array.isArray(v)) {
    v.forEach((x, i) => unknownFields(x, `${path}[${i}]`));
  } else if (v !== null && typeof v === "object") {
    for (const [k, x] of Object.entries(v)) {
      const at = path ? `${path}.${k}` : k;
      if (!KNOWN_FIELDS.has(k)) throw new Error(`unknown field ${at}`);
      const userKeys = k === "metadata" || k === "labels" || (k === "value" && path.endsWith("patch"));
      if (!userKeys) unknownFields(x, at);
    }
  }
}

/** The Envoy bootstrap equivalent to an EnvoyFilter's patches. */
function bootstrapFor(ef, where) {
  const httpFilters = [];
  const clusters = [];
  const route = { match: { prefix: "/" }, route: { cluster: "backend" } };
  const vhost = { name: "check", domains: ["*"], routes: [route] };
  ef.spec.configPatches.forEach((p, i) => {
    const at = `${where} configPatches[${i}]`;
    const op = `${p.applyTo} ${p.patch?.operation}`;
    const value = p.patch?.value;
    switch (op) {
      case "HTTP_FILTER INSERT_BEFORE": {
        const f = p.match?.listener?.filterChain?.filter;
        if (f?.name !== HCM || f?.subFilter?.name !== ROUTER) {
          throw new Error(`${at}: expected to insert before ${ROUTER} in ${HCM}`);
        }
        httpFilters.push(value);
        if (value?.typed_config?.["@type"] === RATELIMIT) {
          filterDomains.push([at, value.typed_config.domain]);
        }
        break;
      }
      case "CLUSTER ADD":
        clusters.push(value);
        break;
      case "HTTP_ROUTE MERGE":
        protoMerge(route, value);
        break;
      case "VIRTUAL_HOST MERGE":
        protoMerge(vhost, value);
        break;
      default:
        throw new Error(`${at}: ${op} is not modelled by this check; extend scripts/check-istio.mjs`);
    }
  });
  httpFilters.push({ name: ROUTER, typed_config: { "@type": `type.googleapis.com/envoy.extensions.filters.http.router.v3.Router` } });
  return {
    admin: { address: { socket_address: { address: "127.0.0.1", port_value: 0 } } },
    static_resources: {
      listeners: [
        {
          name: "check",
          address: { socket_address: { address: "127.0.0.1", port_value: 0 } },
          filter_chains: [
            {
              filters: [
                {
                  name: HCM,
                  typed_config: {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    stat_prefix: "check",
                    route_config: { virtual_hosts: [vhost] },
                    http_filters: httpFilters,
                  },
                },
              ],
            },
          ],
        },
      ],
      clusters: [
        {
          name: "backend",
          type: "STATIC",
          load_assignment: {
            cluster_name: "backend",
            endpoints: [
              { lb_endpoints: [{ endpoint: { address: { socket_address: { address: "127.0.0.1", port_value: 1 } } } }] },
            ],
          },
        },
        ...clusters,
      ],
    },
  };
}

/** Istio's MERGE, as protobuf merges: messages field by field, lists appended, scalars replaced. */
function protoMerge(into, from) {
  for (const [k, v] of Object.entries(from ?? {})) {
    if (Array.isArray(v)) {
      into[k] = [...(Array.isArray(into[k]) ? into[k] : []), ...v];
    } else if (v !== null && typeof v === "object") {
      if (into[k] === null || typeof into[k] !== "object" || Array.isArray(into[k])) into[k] = {};
      protoMerge(into[k], v);
    } else {
      into[k] = v;
    }
  }
}
