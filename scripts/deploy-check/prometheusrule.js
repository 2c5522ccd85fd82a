// The PrometheusRule of deploy/components/monitoring holds the rules of
// deploy/monitoring/alerts.yaml (the one source, which promtool checks and tests).
//   node prometheusrule.js --write ALERTS.yaml OUT.yaml   writes OUT from ALERTS
//   node prometheusrule.js --check ALERTS.yaml OUT.yaml   exits 1 unless OUT's spec.groups are ALERTS' groups
"use strict";
const fs = require("fs");
const util = require("util");
const yaml = require("js-yaml");

const [mode, alertsFile, outFile] = process.argv.slice(2);
if (!["--write", "--check"].includes(mode) || !alertsFile || !outFile) {
  console.error("usage: prometheusrule.js --write|--check ALERTS.yaml OUT.yaml");
  process.exit(2);
}
const groups = yaml.load(fs.readFileSync(alertsFile, "utf8")).groups;
if (mode === "--write") {
  const rule = {
    apiVersion: "monitoring.coreos.com/v1",
    kind: "PrometheusRule",
    metadata: {
      name: "gradagg",
      namespace: "gradagg",
      labels: { "app.kubernetes.io/name": "gradagg", "app.kubernetes.io/part-of": "gradagg" },
    },
    spec: { groups },
  };
  const header = [
    "# Generated from deploy/monitoring/alerts.yaml by scripts/check-deploy --update-docs: edit that",
    "# file, not this one (scripts/check-deploy fails when they differ).",
  ].join("\n");
  fs.writeFileSync(outFile, `${header}\n${yaml.dump(rule, { lineWidth: 100, noRefs: true })}`);
} else {
  const rule = yaml.load(fs.readFileSync(outFile, "utf8"));
  if (!rule || rule.kind !== "PrometheusRule" || !util.isDeepStrictEqual(rule.spec && rule.spec.groups, groups)) {
    console.log(`FAIL ${outFile}: its spec.groups are not the groups of ${alertsFile} ` +
                "(scripts/check-deploy --update-docs rewrites it)");
    process.exit(1);
  }
  console.log(`PASS ${outFile} holds the rules of ${alertsFile}`);
}
