// Checks the rendered gradagg manifests (scripts/check-deploy runs it; NODE_PATH names the npm
// prefix): each document against the Kubernetes schemas of kubernetes-models, then the rules
// that tie the documents to the server's config table. Writes a TypeScript file that assigns
// each document to its typed interface, for `tsc --strict` to reject unknown fields.
//
//   node validate.js --keys KEYS_FILE --ts OUT.ts [--self-test] NAME=RENDERED.yaml ...
//
// Prints "PASS ..." / "FAIL ..." lines; exits 1 when anything failed. With --self-test it also
// breaks copies of the documents on purpose and fails unless every check catches its break;
// the .ts it writes then holds the broken documents (tsc must fail on it).
"use strict";
const fs = require("fs");
const yaml = require("js-yaml");

const args = process.argv.slice(2);
let keysFile = null, tsOut = null, selfTest = false;
const inputs = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--keys") keysFile = args[++i];
  else if (args[i] === "--ts") tsOut = args[++i];
  else if (args[i] === "--self-test") selfTest = true;
  else {
    const eq = args[i].indexOf("=");
    if (eq < 1) throw new Error(`expected NAME=FILE, got ${args[i]}`);
    inputs.push({ name: args[i].slice(0, eq), file: args[i].slice(eq + 1) });
  }
}
if (!keysFile || !tsOut || inputs.length === 0) {
  console.error("usage: validate.js --keys KEYS --ts OUT.ts [--self-test] NAME=FILE...");
  process.exit(2);
}
const expectedKeys = fs.readFileSync(keysFile, "utf8").split("\n").filter(Boolean).sort();

// apiVersion "apps/v1" -> module "kubernetes-models/apps/v1"; core "v1" -> "kubernetes-models/v1";
// the Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule) -> their schemas in
// "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1".
function modelPath(doc) {
  if (typeof doc.apiVersion !== "string" || typeof doc.kind !== "string") return null;
  if (doc.apiVersion.startsWith("monitoring.coreos.com/")) return `@kubernetes-models/prometheus-operator/${doc.apiVersion}`;
  return `kubernetes-models/${doc.apiVersion}`;
}

// Validates one document; returns an error string or null.
function schemaError(doc) {
  const path = modelPath(doc);
  if (!path) return "no apiVersion/kind";
  let mod;
  try {
    mod = require(path);
  } catch (e) {
    return `no schema module for apiVersion ${doc.apiVersion}`;
  }
  const Model = mod[doc.kind];
  if (typeof Model !== "function") return `no schema for ${doc.apiVersion} ${doc.kind}`;
  try {
    new Model(doc).validate();
  } catch (e) {
    return String(e.message || e).split("\n").slice(0, 5).join("; ");
  }
  return null;
}

function find(docs, kind, name) {
  return docs.find((d) => d.kind === kind && (!name || (d.metadata && d.metadata.name === name)));
}

function podSpecs(docs) {
  const out = [];
  for (const d of docs) {
    if (d.kind === "StatefulSet" || d.kind === "Deployment" || d.kind === "Job" || d.kind === "DaemonSet") {
      out.push({ doc: d, tmpl: d.spec && d.spec.template });
    }
  }
  return out;
}

// "8Gi" -> bytes (the suffixes the manifests use).
function bytesOf(q) {
  const m = /^([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(q));
  if (!m) return NaN;
  const mult = { Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, k: 1e3, M: 1e6, G: 1e9, T: 1e12 };
  return Number(m[1]) * (m[2] ? mult[m[2]] : 1);
}

// The rules that hold a rendering together. Returns a list of error strings.
function ruleErrors(name, docs) {
  const errs = [];
  for (const { doc, tmpl } of podSpecs(docs)) {
    const where = `${doc.kind}/${doc.metadata.name}`;
    const ps = (tmpl && tmpl.spec) || {};
    const psc = ps.securityContext || {};
    if (psc.runAsNonRoot !== true) errs.push(`${where}: pod securityContext.runAsNonRoot is not true`);
    if (!psc.seccompProfile || psc.seccompProfile.type !== "RuntimeDefault")
      errs.push(`${where}: pod seccompProfile is not RuntimeDefault`);
    if (ps.automountServiceAccountToken !== false) errs.push(`${where}: automountServiceAccountToken is not false`);
    for (const c of (ps.containers || []).concat(ps.initContainers || [])) {
      const sc = c.securityContext || {};
      if (sc.readOnlyRootFilesystem !== true) errs.push(`${where}/${c.name}: readOnlyRootFilesystem is not true`);
      if (sc.allowPrivilegeEscalation !== false) errs.push(`${where}/${c.name}: allowPrivilegeEscalation is not false`);
      const drop = (sc.capabilities && sc.capabilities.drop) || [];
      if (!drop.includes("ALL")) errs.push(`${where}/${c.name}: capabilities do not drop ALL`);
      const r = c.resources || {};
      if (!r.requests || !r.limits || !r.requests.cpu || !r.limits.memory)
        errs.push(`${where}/${c.name}: requests (cpu) and limits (memory) are required`);
    }
  }

  const sts = find(docs, "StatefulSet", "gradagg");
  if (!sts) return errs; // the example Job's rendering has no shards
  const cm = find(docs, "ConfigMap", "gradagg-config");
  if (!cm) return errs.concat(["no ConfigMap gradagg-config"]);
  const data = cm.data || {};
  const keys = Object.keys(data).sort();
  const missing = expectedKeys.filter((k) => !keys.includes(k));
  const extra = keys.filter((k) => !expectedKeys.includes(k));
  if (missing.length) errs.push(`ConfigMap gradagg-config lacks ${missing.join(", ")}`);
  if (extra.length) errs.push(`ConfigMap gradagg-config has keys the server does not know: ${extra.join(", ")}`);

  const ps = sts.spec.template.spec;
  const c = (ps.containers || []).find((x) => x.name === "gradagg-server");
  if (!c) return errs.concat(["StatefulSet gradagg has no container gradagg-server"]);
  if (!(c.envFrom || []).some((e) => e.configMapRef && e.configMapRef.name === cm.metadata.name))
    errs.push(`container gradagg-server does not load ConfigMap ${cm.metadata.name} with envFrom`);
  // Every setting belongs in the ConfigMap, but the two that differ per pod (shard discovery).
  const perPod = ["GRADAGG_SHARD_INDEX", "GRADAGG_ADVERTISE_ADDRESS"];
  if ((c.env || []).some((e) => e.name.startsWith("GRADAGG_") && !perPod.includes(e.name)))
    errs.push("container gradagg-server sets GRADAGG_* in env: every setting but the per-pod " +
              `${perPod.join(", ")} belongs in the ConfigMap`);
  if (ps.enableServiceLinks !== false) errs.push("enableServiceLinks is not false (GRADAGG_SERVICE_HOST etc.)");
  for (const p of ["startupProbe", "livenessProbe", "readinessProbe"])
    if (!c[p]) errs.push(`container gradagg-server has no ${p}`);

  const ms = (k) => Number(data[k] || 0);
  const needS = (ms("GRADAGG_DEADLINE_MS") + ms("GRADAGG_DRAIN_DELAY_MS") + ms("GRADAGG_SHUTDOWN_GRACE_MS")) / 1000;
  const grace = ps.terminationGracePeriodSeconds;
  if (!(grace > needS))
    errs.push(`terminationGracePeriodSeconds ${grace} is not above deadline + drain delay + shutdown grace (${needS} s)`);

  const limitB = bytesOf(c.resources && c.resources.limits && c.resources.limits.memory);
  // docs/reliability.md, "The bound": the budget, half of it again for what the heap keeps between
  // steps, twice gRPC's quota, and the base.
  const budgetB = (1.5 * ms("GRADAGG_MAX_MEMORY_MB") + 2 * ms("GRADAGG_GRPC_MEMORY_MB")) * 1024 * 1024;
  if (!(limitB > budgetB))
    errs.push(`memory limit ${c.resources.limits.memory} is not above 1.5 x GRADAGG_MAX_MEMORY_MB ${data.GRADAGG_MAX_MEMORY_MB}` +
              ` + 2 x GRADAGG_GRPC_MEMORY_MB ${data.GRADAGG_GRPC_MEMORY_MB}`);

  const gpus = Number((c.resources.limits || {})["nvidia.com/gpu"] || 0);
  if (data.GRADAGG_BACKEND === "cuda" && gpus < 1) errs.push("GRADAGG_BACKEND=cuda without an nvidia.com/gpu limit");
  if (data.GRADAGG_BACKEND !== "cuda" && gpus > 0) errs.push("an nvidia.com/gpu limit with GRADAGG_BACKEND not cuda");

  const vct = (sts.spec.volumeClaimTemplates || []).map((v) => v.metadata.name);
  const dataMount = (c.volumeMounts || []).find((m) => m.mountPath === data.GRADAGG_DATA_DIR);
  if (!dataMount || !vct.includes(dataMount.name))
    errs.push(`GRADAGG_DATA_DIR ${data.GRADAGG_DATA_DIR} is not the mount of a volumeClaimTemplate`);

  // Files the settings name (TLS, tokens) must be under a mount; kubelet gRPC probes cannot speak TLS.
  for (const k of ["GRADAGG_TLS_CERT", "GRADAGG_TLS_KEY", "GRADAGG_TLS_CLIENT_CA", "GRADAGG_AUTH_TOKENS"]) {
    const f = data[k];
    if (f && !(c.volumeMounts || []).some((m) => f.startsWith(m.mountPath.replace(/\/?$/, "/"))))
      errs.push(`${k}=${f} is under no volume mount`);
  }
  if (data.GRADAGG_TLS_CERT)
    for (const p of ["startupProbe", "livenessProbe", "readinessProbe"])
      if (c[p] && c[p].grpc) errs.push(`${p} uses grpc with TLS on: kubelet gRPC probes speak plaintext only`);

  // Shard discovery: every shard knows the set's size, its own index and its stable name.
  if (data.GRADAGG_SHARD_COUNT !== undefined && Number(data.GRADAGG_SHARD_COUNT) !== (sts.spec.replicas ?? 1))
    errs.push(`GRADAGG_SHARD_COUNT ${data.GRADAGG_SHARD_COUNT} is not the StatefulSet's replicas ${sts.spec.replicas}`);
  const env = Object.fromEntries((c.env || []).map((e) => [e.name, e]));
  const index = env.GRADAGG_SHARD_INDEX && env.GRADAGG_SHARD_INDEX.valueFrom && env.GRADAGG_SHARD_INDEX.valueFrom.fieldRef;
  if (Number(data.GRADAGG_SHARD_COUNT) > 0) {
    if (!index || index.fieldPath !== "metadata.labels['apps.kubernetes.io/pod-index']")
      errs.push("GRADAGG_SHARD_INDEX is not the pod's index (fieldRef metadata.labels['apps.kubernetes.io/pod-index'])");
    if (!env.GRADAGG_ADVERTISE_ADDRESS) errs.push("GRADAGG_ADVERTISE_ADDRESS is not set per pod");
  }

  const svc = find(docs, "Service", sts.spec.serviceName);
  if (!svc || svc.spec.clusterIP !== "None") errs.push(`serviceName ${sts.spec.serviceName} is not a headless Service`);
  if (!find(docs, "PodDisruptionBudget")) errs.push("no PodDisruptionBudget");
  if (!find(docs, "NetworkPolicy")) errs.push("no NetworkPolicy");
  return errs;
}

// Cross-rendering rule: every Job's pods carry a label that a NetworkPolicy's gRPC rule admits.
function admittedErrors(all) {
  const errs = [];
  const peers = [];
  for (const d of all)
    if (d.kind === "NetworkPolicy")
      for (const rule of d.spec.ingress || [])
        if ((rule.ports || []).some((p) => p.port === "grpc" || p.port === 7070))
          for (const from of rule.from || []) if (from.podSelector) peers.push(from.podSelector.matchLabels || {});
  for (const d of all) {
    if (d.kind !== "Job") continue;
    const labels = (d.spec.template.metadata && d.spec.template.metadata.labels) || {};
    const ok = peers.some((sel) => Object.entries(sel).every(([k, v]) => labels[k] === v));
    if (!ok) errs.push(`Job ${d.metadata.name}: its pods match no podSelector of the NetworkPolicy's gRPC rule`);
  }
  return errs;
}

// Cross-rendering rule: an Indexed Job's workers find their place from the environment
// (docs/launch.md): Kubernetes gives JOB_COMPLETION_INDEX; the manifest must give GRADAGG_SERVER,
// GRADAGG_JOB and GRADAGG_WORLD_SIZE, and the world size must be the Job's completions. An
// elastic Job (GRADAGG_MIN_WORLD_SIZE) is not Indexed, lets the server pick ranks
// (GRADAGG_RANK=any), and its parallelism and minimum lie within GRADAGG_WORLD_SIZE (the most).
function elasticErrors(d) {
  const errs = [];
  for (const c of d.spec.template.spec.containers) {
    const env = Object.fromEntries((c.env || []).map((e) => [e.name, e.value]));
    if (env.GRADAGG_MIN_WORLD_SIZE === undefined) continue;
    const where = `Job ${d.metadata.name}/${c.name}`, most = Number(env.GRADAGG_WORLD_SIZE);
    if (d.spec.completionMode === "Indexed") errs.push(`${where}: elastic, but Indexed (ranks come from the server)`);
    if (env.GRADAGG_RANK !== "any") errs.push(`${where}: elastic without GRADAGG_RANK=any`);
    if (!(most >= 1)) errs.push(`${where}: elastic without GRADAGG_WORLD_SIZE (the most ranks)`);
    if (Number(d.spec.parallelism) > most)
      errs.push(`${where}: parallelism ${d.spec.parallelism} above GRADAGG_WORLD_SIZE ${most}, the most ranks`);
    const min = Number(env.GRADAGG_MIN_WORLD_SIZE);
    if (!(min >= 1 && min <= most)) errs.push(`${where}: GRADAGG_MIN_WORLD_SIZE ${min} outside [1, ${most}]`);
  }
  return errs;
}

function launchErrors(all) {
  const errs = [];
  for (const d of all) {
    if (d.kind === "Job") errs.push(...elasticErrors(d));
    if (d.kind !== "Job" || d.spec.completionMode !== "Indexed") continue;
    for (const c of d.spec.template.spec.containers) {
      const env = Object.fromEntries((c.env || []).map((e) => [e.name, e]));
      for (const k of ["GRADAGG_SERVER", "GRADAGG_JOB", "GRADAGG_WORLD_SIZE"])
        if (!env[k]) errs.push(`Job ${d.metadata.name}/${c.name}: no ${k}`);
      const w = env.GRADAGG_WORLD_SIZE;
      const relayed = /^(127\.0\.0\.1|\$\(HOST_IP\)):/.test(String(env.GRADAGG_SERVER && env.GRADAGG_SERVER.value));
      if (w && !relayed && String(w.value) !== String(d.spec.completions)) // relayErrors checks a relayed one
        errs.push(`Job ${d.metadata.name}/${c.name}: GRADAGG_WORLD_SIZE ${w.value} is not completions ${d.spec.completions}`);
    }
  }
  return errs;
}

// Cross-rendering rule for node relays (docs/relay.md): a relay (a container with
// GRADAGG_RELAY_TO) has GRADAGG_RELAY_WORKERS (K) and a pod admitted to the shards; a Job whose
// workers name a relay, 127.0.0.1:P (a sidecar of the pod listening on P) or $(HOST_IP):P (a
// DaemonSet relay with host port P), runs K workers per pod (its K), so its GRADAGG_WORLD_SIZE
// is completions x K, and a relay given GRADAGG_RELAY_NODES has completions nodes.
const envOf = (c) => Object.fromEntries((c.env || []).map((e) => [e.name, e.value]));
const portOf = (addr) => Number(String(addr || "").split(":").pop());
function relayErrors(all) {
  const errs = [];
  const relays = [];
  for (const d of all) {
    if (!["Job", "DaemonSet"].includes(d.kind)) continue;
    const ps = d.spec.template.spec;
    for (const c of (ps.containers || []).concat(ps.initContainers || [])) {
      const env = envOf(c);
      if (!env.GRADAGG_RELAY_TO) continue;
      const where = `${d.kind} ${d.metadata.name}/${c.name}`;
      if (!(Number(env.GRADAGG_RELAY_WORKERS) >= 1)) errs.push(`${where}: a relay without GRADAGG_RELAY_WORKERS`);
      const labels = d.spec.template.metadata.labels || {};
      if (labels["gradagg.io/client"] !== "true")
        errs.push(`${where}: a relay's pod is not gradagg.io/client (the shards refuse it)`);
      const hostPort = ((c.ports || []).find((p) => p.containerPort === portOf(env.GRADAGG_LISTEN)) || {}).hostPort;
      relays.push({ d, env, where, port: portOf(env.GRADAGG_LISTEN), hostPort });
    }
  }
  for (const d of all) {
    if (d.kind !== "Job") continue;
    for (const c of d.spec.template.spec.containers) {
      const env = envOf(c);
      const server = String(env.GRADAGG_SERVER || "");
      let relay = null;
      if (server.startsWith("127.0.0.1:"))
        relay = relays.find((r) => r.d === d && r.port === portOf(server));
      else if (server.startsWith("$(HOST_IP):"))
        relay = relays.find((r) => r.d.kind === "DaemonSet" && r.hostPort === portOf(server));
      else continue;
      const where = `Job ${d.metadata.name}/${c.name}`;
      if (!relay) {
        errs.push(`${where}: GRADAGG_SERVER ${server} names no relay listening there`);
        continue;
      }
      const k = Number(relay.env.GRADAGG_RELAY_WORKERS);
      if (Number(env.K) !== k) errs.push(`${where}: runs K = ${env.K} workers a pod, its relay takes ${k}`);
      if (Number(env.GRADAGG_WORLD_SIZE) !== d.spec.completions * k)
        errs.push(`${where}: GRADAGG_WORLD_SIZE ${env.GRADAGG_WORLD_SIZE} is not ` +
                  `completions ${d.spec.completions} x ${k}`);
      const nodes = Number(relay.env.GRADAGG_RELAY_NODES || 0);
      if (nodes && nodes !== d.spec.completions)
        errs.push(`${relay.where}: GRADAGG_RELAY_NODES ${nodes} is not the Job's completions ${d.spec.completions}`);
    }
  }
  return errs;
}

// Cross-rendering rule: each ServiceMonitor selects a Service of its namespace that has the
// ports its endpoints name.
function monitorErrors(all) {
  const errs = [];
  for (const m of all.filter((d) => d.kind === "ServiceMonitor")) {
    const want = (m.spec.selector && m.spec.selector.matchLabels) || {};
    const svcs = all.filter((d) => d.kind === "Service" && d.metadata.namespace === m.metadata.namespace &&
      Object.entries(want).every(([k, v]) => (d.metadata.labels || {})[k] === v));
    if (svcs.length === 0) errs.push(`ServiceMonitor ${m.metadata.name}: selects no Service in ${m.metadata.namespace}`);
    for (const e of m.spec.endpoints || [])
      if (!svcs.some((s) => s.spec.ports.some((p) => p.name === e.port)))
        errs.push(`ServiceMonitor ${m.metadata.name}: no selected Service has a port named ${e.port}`);
  }
  return errs;
}

function tsSource(entries) {
  const lines = ["// generated by scripts/deploy-check/validate.js: each rendered document, typed", ""];
  const imported = new Map();
  entries.forEach(({ doc }) => {
    const id = `I${doc.kind}`;
    const key = `${modelPath(doc)}/${doc.kind}`;
    if (!imported.has(key)) {
      const alias = `${id}_${imported.size}`;
      imported.set(key, alias);
      lines.push(`import type { ${id} as ${alias} } from "${key}";`);
    }
  });
  lines.push("");
  entries.forEach(({ label, doc }, i) => {
    lines.push(`// ${label}`);
    lines.push(`export const doc${i}: ${imported.get(`${modelPath(doc)}/${doc.kind}`)} = ${JSON.stringify(doc, null, 2)};`);
    lines.push("");
  });
  return lines.join("\n");
}

const { report, exitStatus } = require("./report");

const renderings = inputs.map(({ name, file }) => {
  const docs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d);
  return { name, docs };
});
const entries = [];
const all = [];
if (!selfTest) {
for (const { name, docs } of renderings) {
  const bad = [];
  for (const d of docs) {
    const e = schemaError(d);
    if (e) bad.push(`${d.kind}/${d.metadata && d.metadata.name}: ${e}`);
    entries.push({ label: `${name}: ${d.kind}/${d.metadata && d.metadata.name}`, doc: d });
    all.push(d);
  }
  report(bad.length === 0, `schema ${name} (${docs.length} documents)`, bad.join(" | "));
  const errs = ruleErrors(name, docs);
  report(errs.length === 0, `rules ${name}`, errs.join(" | "));
}
const adm = admittedErrors(all);
report(adm.length === 0, "training Jobs admitted by the NetworkPolicy", adm.join(" | "));
const mon = monitorErrors(all);
report(mon.length === 0, "ServiceMonitors select a Service with the ports they scrape", mon.join(" | "));
const launch = launchErrors(all);
report(launch.length === 0, "Indexed Jobs give their workers server, job and world size", launch.join(" | "));
const relay = relayErrors(all);
report(relay.length === 0, "relayed Jobs reach a relay and their world size is pods x its workers", relay.join(" | "));
fs.writeFileSync(tsOut, tsSource(entries));
} else {
  // Each break must be caught by the check named.
  const clone = (x) => JSON.parse(JSON.stringify(x));
  const base = renderings.find((r) => r.docs.some((d) => d.kind === "StatefulSet"));
  const stsOf = (docs) => find(docs, "StatefulSet", "gradagg");
  const cmOf = (docs) => find(docs, "ConfigMap", "gradagg-config");
  const breaks = [
    ["schema: replicas as text", (docs) => { stsOf(docs).spec.replicas = "two"; }, (docs) => schemaError(stsOf(docs))],
    ["schema: probe port as text", (docs) => { stsOf(docs).spec.template.spec.containers[0].livenessProbe = { grpc: { port: "7070" } }; }, (docs) => schemaError(stsOf(docs))],
    ["rules: a ConfigMap key missing", (docs) => { delete cmOf(docs).data.GRADAGG_QUORUM; }, (docs) => ruleErrors("x", docs).length > 0],
    ["rules: an unknown ConfigMap key", (docs) => { cmOf(docs).data.GRADAGG_LISTEN_ADDR = "x"; }, (docs) => ruleErrors("x", docs).length > 0],
    ["rules: grace period below deadline", (docs) => { cmOf(docs).data.GRADAGG_DEADLINE_MS = "120000"; }, (docs) => ruleErrors("x", docs).length > 0],
    ["rules: replicas without GRADAGG_SHARD_COUNT", (docs) => { stsOf(docs).spec.replicas = 3; }, (docs) => ruleErrors("x", docs).length > 0],
    ["rules: no per-pod advertise address", (docs) => {
      const c = stsOf(docs).spec.template.spec.containers[0];
      c.env = c.env.filter((e) => e.name !== "GRADAGG_ADVERTISE_ADDRESS");
    }, (docs) => ruleErrors("x", docs).length > 0],
    ["rules: root filesystem writable", (docs) => { stsOf(docs).spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem = false; }, (docs) => ruleErrors("x", docs).length > 0],
  ];
  const jobs = renderings.find((r) => r.docs.some((d) => d.kind === "Job"));
  const jobOf = (docs) => docs.find((d) => d.kind === "Job" && d.spec.completionMode === "Indexed");
  const envOf = (docs) => jobOf(docs).spec.template.spec.containers[0].env;
  const elasticOf = (docs) => docs.find((d) => d.kind === "Job" &&
    d.spec.template.spec.containers[0].env.some((e) => e.name === "GRADAGG_MIN_WORLD_SIZE"));
  const jobBreaks = [
    ["launch: world size is not completions", (docs) => { jobOf(docs).spec.completions = 3; }],
    ["launch: no GRADAGG_JOB", (docs) => { envOf(docs).splice(envOf(docs).findIndex((e) => e.name === "GRADAGG_JOB"), 1); }],
    ["launch: elastic parallelism above the most ranks", (docs) => { elasticOf(docs).spec.parallelism = 9; }],
    ["launch: elastic with a fixed rank", (docs) => {
      elasticOf(docs).spec.template.spec.containers[0].env.find((e) => e.name === "GRADAGG_RANK").value = "0";
    }],
  ];
  const monitoring = renderings.find((r) => r.docs.some((d) => d.kind === "ServiceMonitor"));
  const crdBreaks = [
    ["schema: ServiceMonitor endpoints not a list", "ServiceMonitor", (d) => { d.spec.endpoints = "admin"; }],
    ["schema: PrometheusRule rule without expr", "PrometheusRule", (d) => { delete d.spec.groups[0].rules[0].expr; }],
  ];
  const svcMon = (docs) => docs.find((d) => d.kind === "ServiceMonitor");
  const monitorBreaks = [
    ["monitor: a port the Service lacks", (docs) => { svcMon(docs).spec.endpoints[0].port = "metrics"; }],
    ["monitor: selects no Service", (docs) => { svcMon(docs).spec.selector.matchLabels = { app: "x" }; }],
  ];
  const relayed = renderings.find((r) => r.docs.some((d) => d.kind === "DaemonSet"));
  const jobNamed = (docs, name) => docs.find((d) => d.kind === "Job" && d.metadata.name === name);
  const workerEnv = (docs, name) => jobNamed(docs, name).spec.template.spec.containers[0].env;
  const relayBreaks = [
    ["relay: world size is not pods x workers", (docs) => {
      workerEnv(docs, "relayed-train").find((e) => e.name === "GRADAGG_WORLD_SIZE").value = "4";
    }],
    ["relay: the sidecar listens elsewhere", (docs) => {
      jobNamed(docs, "sidecar-train").spec.template.spec.initContainers[0].env
        .find((e) => e.name === "GRADAGG_LISTEN").value = "127.0.0.1:7090";
    }],
    ["relay: no host port on the DaemonSet", (docs) => {
      delete docs.find((d) => d.kind === "DaemonSet").spec.template.spec.containers[0].ports[0].hostPort;
    }],
    ["relay: sidecar relay nodes are not completions", (docs) => {
      jobNamed(docs, "sidecar-train").spec.completions = 3;
    }],
  ];
  for (const [what, breakIt] of relayBreaks) {
    const docs = clone(relayed.docs);
    breakIt(docs);
    report(relayErrors(docs).length > 0, `self-test ${what} is caught`, "the check passed a broken relay layout");
  }
  for (const [what, breakIt] of monitorBreaks) {
    const docs = clone(monitoring.docs);
    breakIt(docs);
    report(monitorErrors(docs).length > 0, `self-test ${what} is caught`, "the check passed a broken ServiceMonitor");
  }
  for (const [what, kind, breakIt] of crdBreaks) {
    const doc = clone(monitoring.docs.find((d) => d.kind === kind));
    breakIt(doc);
    report(Boolean(schemaError(doc)), `self-test ${what} is caught`, "the schema passed a broken document");
  }
  for (const [what, breakIt] of jobBreaks) {
    const docs = clone(jobs.docs);
    breakIt(docs);
    report(launchErrors(docs).length > 0, `self-test ${what} is caught`, "the check passed a broken Job");
  }
  for (const [what, breakIt, caught] of breaks) {
    const docs = clone(base.docs);
    breakIt(docs);
    report(Boolean(caught(docs)), `self-test ${what} is caught`, "the check passed a broken document");
  }
  // Unknown fields the schemas let through: tsc must reject each (one per document, as tsc
  // reports the first excess property of a literal). check-deploy counts the TS2353 errors.
  const a = stsOf(clone(base.docs));
  a.spec.replicaz = 2;
  const b = stsOf(clone(base.docs));
  b.spec.template.spec.containers[0].readinesProbe = { grpc: { port: 7070 } };
  const c = cmOf(clone(base.docs));
  c.metadata.labelz = { x: "y" };
  fs.writeFileSync(tsOut, tsSource([
    { label: "self-test: spec.replicaz", doc: a },
    { label: "self-test: containers[0].readinesProbe", doc: b },
    { label: "self-test: metadata.labelz", doc: c },
  ]));
}
process.exit(exitStatus());
