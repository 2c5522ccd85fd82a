// The PASS / FAIL lines of the deploy checks (validate.js, dashboard.js): report() prints one,
// exitStatus() is 1 once any check failed.
"use strict";
let failures = 0;

function report(ok, what, why) {
  if (ok) console.log(`PASS ${what}`);
  else {
    failures++;
    console.log(`FAIL ${what}: ${why}`);
  }
}

function exitStatus() {
  return failures ? 1 : 0;
}

module.exports = { report, exitStatus };
