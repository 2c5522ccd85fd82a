// Checks the Grafana dashboard of deploy/components/monitoring (scripts/check-deploy runs it):
//   node dashboard.js DASHBOARD.json METRICS.txt OUT_DIR
// METRICS.txt is a scrape of a real gradagg-server's /metrics (its # TYPE lines name every
// family). Writes OUT_DIR/dashboard.ts (the dashboard typed as @grafana/schema's Dashboard, for
// tsc --strict: what Grafana loads, unknown fields refused) and OUT_DIR/dashboard-rules.yaml
// (every query as a recording rule, template variables replaced, for promtool check rules).
// Prints PASS/FAIL lines: unique panel ids and grid places, every panel with a query and the
// data source variable, every metric a query names among the scraped families.
"use strict";
const fs = require("fs");
const path = require("path");
const yaml = require("js-yaml");

const [dashFile, metricsFile, outDir] = process.argv.slice(2);
if (!dashFile || !metricsFile || !outDir) {
  console.error("usage: dashboard.js DASHBOARD.json METRICS.txt OUT_DIR");
  process.exit(2);
}
const { report, exitStatus } = require("./report");

const dash = JSON.parse(fs.readFileSync(dashFile, "utf8"));
const families = new Set();
for (const line of fs.readFileSync(metricsFile, "utf8").split("\n")) {
  const m = /^# TYPE (\S+) (\S+)/.exec(line);
  if (m) families.add(m[1]);
}

const panels = dash.panels || [];
const ids = panels.map((p) => p.id);
report(panels.length > 0 && new Set(ids).size === ids.length, `dashboard: ${panels.length} panels with unique ids`,
       `ids ${ids.join(",")}`);
const places = panels.map((p) => `${p.gridPos.x},${p.gridPos.y}`);
report(new Set(places).size === places.length, "dashboard: no two panels at one grid place", places.join(" "));

const exprs = [];
const noQuery = [];
const wrongSource = [];
for (const p of panels) {
  const targets = (p.targets || []).filter((t) => typeof t.expr === "string" && t.expr.trim());
  if (targets.length === 0) noQuery.push(p.title);
  if (!p.datasource || p.datasource.uid !== "${datasource}") wrongSource.push(p.title);
  for (const t of targets) exprs.push({ panel: p.title, expr: t.expr });
}
report(noQuery.length === 0, "dashboard: every panel has a query", `none in ${noQuery.join(", ")}`);
report(wrongSource.length === 0, "dashboard: every panel uses the ${datasource} variable", wrongSource.join(", "));

// A histogram's series are name_bucket, name_sum, name_count of its family.
const unknown = [];
for (const { panel, expr } of exprs)
  for (const name of expr.match(/\bgradagg_[a-z0-9_]+/g) || []) {
    const family = name.replace(/_(bucket|sum|count)$/, "");
    if (!families.has(name) && !families.has(family)) unknown.push(`${name} (${panel})`);
  }
report(families.size > 0 && unknown.length === 0,
       `dashboard: ${exprs.length} queries name only metrics gradagg-server exports (${families.size} families)`,
       families.size ? `not exported: ${unknown.join(", ")}` : "no # TYPE line in the scrape");

// Grafana's variables as the values promtool can parse.
const promql = (e) => e.replace(/\$__rate_interval/g, "5m").replace(/\$\{?ga_job\}?/g, ".*");
const rules = { groups: [{ name: "dashboard", rules: exprs.map(({ expr }, i) => ({ record: `dashboard:query${i}`, expr: promql(expr) })) }] };
fs.writeFileSync(path.join(outDir, "dashboard-rules.yaml"), yaml.dump(rules, { lineWidth: 200 }));
fs.writeFileSync(path.join(outDir, "dashboard.ts"),
                 `import type { Dashboard } from "@grafana/schema";\nexport const dashboard: Dashboard = ${JSON.stringify(dash, null, 2)};\n`);
process.exit(exitStatus());
