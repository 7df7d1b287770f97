#!/usr/bin/env bash
# Installs the Debian packages one of Kelp's make targets needs, once.
#   bootstrap-debian.sh run    what a broker needs (`make run`): Python's venv
#   bootstrap-debian.sh test   that plus what the test tiers need (`make test`, the default)
# Idempotent: does nothing when every command of the tier is already present.
set -euo pipefail

tier=${1:-test}
case "$tier" in
  run|test) ;;
  *) echo "bootstrap: unknown tier '$tier' (use 'run' or 'test')" >&2; exit 2 ;;
esac

need=()
# every tier: `make` creates .venv
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)

if [ "$tier" = test ]; then
  # client tests (tests/broker/test_clients.py): kcat produces, consumes and lists
  command -v kcat >/dev/null 2>&1 || need+=(kcat)
  # kube test tier (tests/kube): openssl for its PKI (etcd is built from go.etcd.io: Debian's 3.4 is older than Kubernetes 1.34 accepts)
  command -v openssl >/dev/null 2>&1 || need+=(openssl)
  # kube tier's node test (tests/kube/test_kube_node.py): a real kubelet runs a Pod
  command -v containerd >/dev/null 2>&1 || need+=(containerd)
  command -v runc >/dev/null 2>&1 || need+=(runc)
  [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
  dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
  # Kelp's image without Docker (images/build-image.sh): a Debian root filesystem, packed as OCI
  command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
  command -v umoci >/dev/null 2>&1 || need+=(umoci)
  # the fault suite (tests/chaos): libfuse 3 and fusermount3 for its power-loss file system (lazyfs.py), and a C
  # compiler for the shim that steps a broker's wall clock (clockstep.c)
  [ -e /usr/lib/x86_64-linux-gnu/libfuse3.so.3 ] || dpkg -s libfuse3-3 >/dev/null 2>&1 || need+=(libfuse3-3)
  command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
  command -v cc >/dev/null 2>&1 || need+=(gcc)
  # Spark (tests/spark, make spark-demo) and Kafka's own tools (tests/tools) need a JDK; Maven fetches their jars
  command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null 2>&1 || need+=(maven)
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "bootstrap: need Debian packages ${need[*]} but am not root and have no sudo" >&2
    exit 1
  fi
else
  SUDO=
fi
echo "bootstrap ($tier): installing Debian packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
