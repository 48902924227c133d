// Validates the custom resources the Helm chart renders (Istio EnvoyFilter, prometheus-operator
// ServiceMonitor) against their CRD schemas, offline, with the @kubernetes-models packages.
// kubernetes-validate knows only built-in kinds. Used by scripts/validate-deploy.sh:
//
//     node scripts/validate-crds.mjs NODE_PREFIX FILE...   (FILE: JSON lines, one object each)
//
// The EnvoyFilter schema is also applied strictly (unknown fields fail, as in
// `kubernetes-validate --strict`): the package's validator allows them, so the schema embedded
// in the package is walked here too. Envoy's own config inside the patches is checked against
// Envoy's protos by scripts/deploy_manifests.py.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [prefixArg, ...files] = process.argv.slice(2);
const prefix = resolve(prefixArg);
const modules = join(prefix, "node_modules", "@kubernetes-models");
const require = createRequire(join(prefix, "package.json"));

const envoyFilterFile = join(modules, "istio/networking.istio.io/v1alpha3/EnvoyFilter.js");
const { EnvoyFilter } = require(envoyFilterFile);
const { ServiceMonitor } = await import(
  pathToFileURL(join(modules, "prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor.js")).href
);

// The JSON schema literal in the package's generated module (`const schema = {...};`).
function embeddedSchema(file) {
  const src = readFileSync(file, "utf8");
  const m = src.match(/\nconst schema = (\{[\s\S]*?\n\});\n/);
  if (!m) throw new Error(`${file}: no embedded schema found (package layout changed?)`);
  return JSON.parse(m[1]);
}

// Unknown keys where the schema lists properties and sets no additionalProperties.
function unknownFields(value, schema, path, out) {
  if (value === null || typeof value !== "object" || !schema) return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => unknownFields(v, schema.items, `${path}[${i}]`, out));
    return;
  }
  const props = schema.properties ?? {};
  const open = Object.keys(props).length === 0 || schema.additionalProperties !== undefined;
  for (const [k, v] of Object.entries(value)) {
    if (k in props) unknownFields(v, props[k], `${path}.${k}`, out);
    else if (!open) out.push(`${path}.${k}`);
  }
}

const envoyFilterSchema = embeddedSchema(envoyFilterFile);
const models = { EnvoyFilter, ServiceMonitor };
let failed = 0;
let checked = 0;
for (const file of files) {
  const lines = readFileSync(file, "utf8").split("\n").filter((l) => l.trim());
  for (const line of lines) {
    const obj = JSON.parse(line);
    const where = `${file}: ${obj.kind}/${obj.metadata?.name}`;
    const Model = models[obj.kind];
    if (!Model) {
      console.error(`${where}: no validator for this kind`);
      failed++;
      continue;
    }
    try {
      new Model(obj).validate();
      if (obj.kind === "EnvoyFilter") {
        const unknown = [];
        // metadata is ObjectMeta, checked by the model; status is free-form.
        unknownFields(obj.spec, envoyFilterSchema.properties.spec, "spec", unknown);
        if (unknown.length) throw new Error(`unknown fields: ${unknown.join(", ")}`);
      }
      checked++;
    } catch (e) {
      console.error(`${where}: ${e.message}`);
      failed++;
    }
  }
}
if (failed) {
  console.error(`${failed} custom resource(s) failed validation`);
  process.exit(1);
}
console.log(`${checked} custom resources valid`);
