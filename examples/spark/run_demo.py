"""`make spark-demo`: a dev cluster, orders produced, the pipeline run once with spark-submit, the brokers stopped.

Steps, each with a bound: `kelp dev-cluster` in the background (loopback,
ports of its own unless --kafka-port is given, data under --data-dir, wiped
first), wait for its `cluster-listening` line; `produce_orders.py`;
`spark-submit --master local[2] [--jars <connector jars>] orders_pipeline.py
--source <kafka|kelp> --available-now`, which prints the windows; then
SIGTERM to the cluster (each broker shuts down cleanly), SIGKILL after a
bound. The exit code is the first failing step's.

    python examples/spark/run_demo.py --source kelp      # what `make spark-demo` runs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", choices=["kafka", "kelp"], default="kelp", help="the pipeline's format (kelp)")
    p.add_argument("--brokers", type=int, default=3, help="brokers in the dev cluster (3)")
    p.add_argument("--kafka-port", type=int, default=0, help="first broker's Kafka port (0: ephemeral)")
    p.add_argument("--data-dir", default=str(HERE.parents[1] / "data" / "spark-demo"),
                   help="brokers' data, checkpoints and Parquet output; wiped first (data/spark-demo)")
    p.add_argument("--count", type=int, default=600, help="orders to produce (600)")
    p.add_argument("--start-timeout", type=float, default=90.0, help="seconds for the cluster to listen (90)")
    p.add_argument("--pipeline-timeout", type=float, default=600.0, help="seconds for the pipeline (600)")
    return p.parse_args(argv)


def start_cluster(args: argparse.Namespace, data: Path) -> tuple[subprocess.Popen, str]:
    cmd = [str(BIN / "kelp"), "dev-cluster", "--brokers", str(args.brokers), "--data-dir", str(data / "brokers"),
           "--kafka-port", str(args.kafka_port), "--http-port", "0"]
    print(f"spark-demo: starting {args.brokers} broker(s): {' '.join(cmd)}", flush=True)
    out = data / "cluster.out"  # its one stdout line, {"event": "cluster-listening", "bootstrap": ...}
    with open(out, "w") as stdout, open(data / "cluster.log", "w") as stderr:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, text=True, start_new_session=True)
    deadline = time.monotonic() + args.start_timeout
    while proc.poll() is None and time.monotonic() < deadline:
        for line in out.read_text().splitlines(keepends=True):
            if line.startswith("{") and line.endswith("\n"):  # whole lines only
                info = json.loads(line)
                if info.get("event") == "cluster-listening":
                    return proc, info["bootstrap"]
        time.sleep(0.2)
    exited = proc.poll()
    stop_cluster(proc)
    raise SystemExit(f"spark-demo: the cluster is not listening after {args.start_timeout:.0f} s "
                     f"(exit code {exited}); its log: {data / 'cluster.log'}")


def stop_cluster(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # dev-cluster stops every broker cleanly, SIGKILL after its own bound
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    print(f"spark-demo: brokers stopped (exit code {proc.returncode})", flush=True)


def run(step: str, cmd: list[str], *, timeout: float, env: dict[str, str] | None = None) -> None:
    """One step in a process group of its own, so a timeout or Ctrl-C ends it whole (spark-submit's JVM and driver)."""
    print(f"spark-demo: {step}: {' '.join(cmd)}", flush=True)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"spark-demo: {step} did not finish within {timeout:.0f} s") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    if code != 0:
        raise SystemExit(f"spark-demo: {step} failed (exit code {code})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = Path(args.data_dir).resolve()
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    submit = [str(BIN / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
              "--conf", "spark.ui.showConsoleProgress=false", "--conf", "spark.log.level=WARN",
              "--conf", "spark.sql.shuffle.partitions=4"]
    if args.source == "kafka":
        from kelp.spark.jars import connector_jars

        submit += ["--jars", ",".join(str(p) for p in connector_jars())]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, PYTHONSAFEPATH="1")
    cluster, bootstrap = start_cluster(args, data)
    try:
        print(f"spark-demo: bootstrap servers {bootstrap}", flush=True)
        run("producing orders", [sys.executable, str(HERE / "produce_orders.py"), "--bootstrap", bootstrap,
                                 "--count", str(args.count)], timeout=120)
        run(f"pipeline (--source {args.source})",
            submit + [str(HERE / "orders_pipeline.py"), "--source", args.source, "--bootstrap", bootstrap,
                      "--checkpoint", str(data / "checkpoint"), "--output", str(data / "revenue"),
                      "--available-now", "--timeout", str(args.pipeline_timeout)],
            timeout=args.pipeline_timeout + 120, env=env)
        print(f"spark-demo: done; Parquet in {data / 'revenue'}, broker log {data / 'cluster.log'}", flush=True)
        return 0
    finally:
        stop_cluster(cluster)


if __name__ == "__main__":
    sys.exit(main())
