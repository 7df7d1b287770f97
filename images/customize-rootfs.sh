#!/usr/bin/env bash
# mmdebstrap --customize-hook for Kelp's base image: the user, the data dir, and a venv
# in /opt/kelp holding every pinned runtime dependency (images/requirements.txt).
#
# Why a hook: mmdebstrap runs it with /proc, /sys and /dev mounted in the new root and
# cleans apt's lists and caches afterwards, so pip runs inside the image's own Python
# (the same interpreter the broker will run on) and nothing of the build stays behind.
# It must never leave the host's CA bundle, resolv.conf, pip caches or logs in the
# root filesystem, and never install a dependency that is not pinned in the lock.
#
# Called by images/build-image.sh as: customize-rootfs.sh <rootfs>, with
#   KELP_IMAGE_LOCK   path of images/requirements.txt on the host
#   KELP_IMAGE_CA     host CA bundle for pip's TLS (optional; removed afterwards)
set -euo pipefail

root="$1"
: "${KELP_IMAGE_LOCK:?customize-rootfs.sh: KELP_IMAGE_LOCK must name images/requirements.txt}"
KELP_UID=10001
VENV=/opt/kelp
DATA=/var/lib/kelp

chroot "$root" groupadd --gid "$KELP_UID" kelp
chroot "$root" useradd --uid "$KELP_UID" --gid "$KELP_UID" --home-dir "$DATA" --no-create-home \
  --shell /usr/sbin/nologin --comment "Kelp broker and operator" kelp
install -d -o "$KELP_UID" -g "$KELP_UID" -m 0750 "$root$DATA"

# No pip inside the image: the venv is made without it and pip runs from the wheel
# Debian ships for python3-venv (/usr/share/python-wheels), which the kelp layer reuses.
chroot "$root" python3 -m venv --without-pip "$VENV"
build=/tmp/kelp-build
install -d "$root$build"
install -m 0644 "$KELP_IMAGE_LOCK" "$root$build/requirements.txt"
pip_env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
  PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=120)
if [ -n "${KELP_IMAGE_CA:-}" ] && [ -f "$KELP_IMAGE_CA" ]; then
  install -m 0644 "$KELP_IMAGE_CA" "$root$build/ca.crt"
  pip_env+=(PIP_CERT="$build/ca.crt")
fi
for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST HTTPS_PROXY HTTP_PROXY NO_PROXY https_proxy http_proxy no_proxy; do
  [ -n "${!var:-}" ] && pip_env+=("$var=${!var}")
done
wheels=("$root"/usr/share/python-wheels/pip-*.whl)
pip_whl=${wheels[0]#"$root"/}
[ -f "$root/$pip_whl" ] || { echo "customize-rootfs.sh: no pip wheel under /usr/share/python-wheels (is python3-venv in the package list?)" >&2; exit 1; }
chroot "$root" "${pip_env[@]}" "$VENV/bin/python" "/$pip_whl/pip" install --quiet --no-deps \
  --only-binary=:all: --requirement "$build/requirements.txt"
# --no-deps installs exactly the lock; `pip check` fails if the lock misses a dependency.
chroot "$root" "${pip_env[@]}" "$VENV/bin/python" "/$pip_whl/pip" check

rm -rf "$root$build" "$root/root/.cache"
# The runtime mounts its own; these are the build host's. So are the apt options
# mmdebstrap was given (--aptopt); dpkg's path-excludes stay, keeping later installs lean.
rm -f "$root/etc/resolv.conf" "$root/etc/hostname" "$root/etc/apt/apt.conf.d/99mmdebstrap"
rm -rf "$root"/var/log/* "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
  "$root/var/cache/ldconfig/aux-cache"
