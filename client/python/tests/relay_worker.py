"""One worker of client/python/tests/test_relay.py in its own process (so the test can SIGKILL
it): the regression model of _util.py for --rank, --steps steps through --server, then a line
"done <version>" on stdout, and it waits (holding its rank) until it is killed or stdin closes."""
from __future__ import annotations

import argparse
import sys

import gradagg
from _util import FAST, regression_data, regression_grads, regression_init


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--deadline-ms", type=int, default=0)
    ap.add_argument("--quorum", type=int, default=0)
    ap.add_argument("--lr", type=float, required=True)
    a = ap.parse_args()
    w, b = regression_init()
    x, y = regression_data(a.rank)
    c = gradagg.Client(a.server, a.job, a.rank, a.world, mean=True, optimizer=gradagg.SGD(lr=a.lr),
                       deadline_ms=a.deadline_ms, quorum=a.quorum, **FAST)
    c.add_tensor("w", w)
    c.add_tensor("b", b)
    c.init()
    for _ in range(a.steps):
        c.step(regression_grads(w, b, x, y))
    print(f"done {c.version}", flush=True)
    sys.stdin.read()
    c.close()


if __name__ == "__main__":
    main()
