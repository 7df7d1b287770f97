#!/usr/bin/env bash
# Builds Kelp's container image without Docker: the same image as the repository's
# Dockerfile (entrypoint, user, environment, ports, paths), from Debian's archive
# and PyPI only, as an OCI archive that `ctr -n k8s.io images import` accepts.
#
# Why: no Docker engine exists here or in CI, yet the kube test tier runs the broker
# in a real Pod on a real kubelet, and that needs the real image.
#
#   layer 1 (base, cached): Debian bookworm minbase + python3 python3-venv
#           ca-certificates tini (mmdebstrap), user kelp (uid 10001), /var/lib/kelp,
#           and the venv /opt/kelp with every pinned dependency (images/requirements.txt)
#   layer 2 (every source change): Kelp's wheel, built from this checkout and
#           installed into /opt/kelp with --no-deps (seconds, no network)
#
# Usage: images/build-image.sh           # builds if needed; prints the archive path
#        images/build-image.sh --check   # exit 0 (and print it) only if the archive
#                                        # for these sources is already built
#        images/build-image.sh --lock    # re-pin images/requirements.txt from pyproject.toml
# Env:   KELP_IMAGE_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/kelp/image)
#        KELP_IMAGE_REF   (default docker.io/library/kelp:<version from pyproject.toml>)
#        KELP_IMAGE_PYTHON (default python3) host interpreter for the wheel build
#        KELP_IMAGE_SOURCE (default worktree) worktree: the checkout as it is; HEAD: the last commit
# Needs root (mmdebstrap --mode=root, chroot, umoci keeps file owners), mmdebstrap
# and umoci (Debian; scripts/bootstrap-debian.sh installs them). Idempotent;
# concurrent runs wait for each other on a lock file; progress goes to stderr.
set -euo pipefail
# The checkout's operator/ must never shadow the standard library's `operator`.
export PYTHONSAFEPATH=1

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
CACHE="${KELP_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kelp/image}"
HOST_PY="${KELP_IMAGE_PYTHON:-python3}"
TOOL="$HERE/image_tool.py"
LOCK_FILE="$HERE/requirements.txt"

SUITE=bookworm
DEBIAN_PACKAGES=(python3 python3-venv ca-certificates tini)
# The wheel is built without build isolation from this pinned backend (cached with the base).
BUILD_BACKEND=setuptools==80.9.0
# Kept out of the image: documentation, manuals, translations (licences stay).
DPKG_EXCLUDES=('/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/locale/*'
  '/usr/share/lintian/*' '/usr/share/linda/*')

# The image's runtime config: the Dockerfile's final stage must say the same
# (tests/kube/test_kube_broker_pod.py compares the built image with it).
IMAGE_ENTRYPOINT=(/usr/bin/tini -- /opt/kelp/bin/kelp)
IMAGE_CMD=(broker --host 0.0.0.0)
IMAGE_USER=10001:10001
IMAGE_WORKDIR=/var/lib/kelp
IMAGE_PORTS=(9092/tcp 8080/tcp)
IMAGE_ENV=(PATH=/opt/kelp/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  LANG=C.UTF-8 PYTHONUNBUFFERED=1 KELP_LOG_DIRS=/var/lib/kelp)

log() { echo "build-image: $*" >&2; }
die() { log "$*"; exit 1; }

if [ "${1:-}" = "--lock" ]; then
  exec "$HOST_PY" "$TOOL" lock --pyproject "$REPO/pyproject.toml" --lock "$LOCK_FILE"
fi

VERSION="$("$HOST_PY" "$TOOL" version --pyproject "$REPO/pyproject.toml")"
REF="${KELP_IMAGE_REF:-docker.io/library/kelp:$VERSION}"
ARCHIVE="$CACHE/kelp-$VERSION.oci.tar"
STAMP="$ARCHIVE.stamp"

# The base is keyed by everything that goes into it.
BASE_KEY="$(cat "$REPO/pyproject.toml" "$REPO/setup.py" "$LOCK_FILE" "$HERE/build-image.sh" \
  "$HERE/customize-rootfs.sh" | sha256sum | cut -c1-16)"
BASE="$CACHE/base-$BASE_KEY"

# Kelp's sources as the wheel sees them. KELP_IMAGE_SOURCE=worktree (default): tracked and
# untracked-but-not-ignored files as they are now; =HEAD: the last commit only (a shared
# checkout whose uncommitted work is half done still builds what was committed).
SOURCE_PATHS=(kelp broker operator pyproject.toml setup.py README.md)
SOURCE_MODE="${KELP_IMAGE_SOURCE:-worktree}"
stage_sources() {  # stage_sources <empty dir>
  local dest="$1" f
  case "$SOURCE_MODE" in
    HEAD)
      git -C "$REPO" archive --format=tar HEAD -- "${SOURCE_PATHS[@]}" | tar -C "$dest" -xf - ;;
    worktree)
      if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$REPO" ls-files -co --exclude-standard -- "${SOURCE_PATHS[@]}" \
          | while IFS= read -r f; do [ -f "$REPO/$f" ] && printf '%s\n' "$f"; done
      else
        (cd "$REPO" && find "${SOURCE_PATHS[@]}" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
          ! -path '*.egg-info/*')
      fi | (cd "$REPO" && tar -cf - --no-recursion -T -) | tar -C "$dest" -xf - ;;
    *) die "KELP_IMAGE_SOURCE must be worktree or HEAD, not '$SOURCE_MODE'" ;;
  esac
}
tree_hash() {  # tree_hash <dir>: content and names of every file
  (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16
}

STAGE="$(mktemp -d "${TMPDIR:-/tmp}/kelp-image-src.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
stage_sources "$STAGE"
SOURCES_HASH="$(tree_hash "$STAGE")"

current() {  # the archive exists and was built from this base and these sources
  [ -f "$ARCHIVE" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$BASE_KEY $SOURCES_HASH $REF" ]
}

if [ "${1:-}" = "--check" ]; then
  current || { log "not built for these sources: $ARCHIVE (base $BASE_KEY) is missing or stale"; exit 1; }
  echo "$ARCHIVE"
  exit 0
fi
[ $# -eq 0 ] || die "unknown argument '$1' (usage: images/build-image.sh [--check|--lock])"

[ "$(id -u)" -eq 0 ] || die "needs root: mmdebstrap --mode=root and chroot build the root filesystem"
for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null 2>&1 \
    || die "$tool not found (Debian package $tool; scripts/bootstrap-debian.sh installs it)"
done
"$HOST_PY" "$TOOL" check-lock --pyproject "$REPO/pyproject.toml" --lock "$LOCK_FILE" || exit 1

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock -w 3600 9 || die "timed out after 3600s waiting for the lock $CACHE/.lock"

if current; then
  echo "$ARCHIVE"
  exit 0
fi

# Apt sources: the host's own, so the image comes from the archive this machine uses.
apt_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$f" ] && printf '%s\n' "$f"
  done
  return 0
}

build_base() {
  local tmp="$BASE.tmp" started=$SECONDS sources=() opts=() p
  rm -rf "$tmp"
  mkdir -p "$tmp"
  mapfile -t sources < <(apt_sources)
  [ ${#sources[@]} -gt 0 ] || die "no apt sources on this host (/etc/apt/sources.list[.d]) to build from"
  for p in "${DPKG_EXCLUDES[@]}"; do opts+=(--dpkgopt="path-exclude=$p"); done
  opts+=(--dpkgopt='path-include=/usr/share/doc/*/copyright')
  # Host apt settings that make its sources usable (e.g. a frozen snapshot's Valid-Until).
  for p in /etc/apt/apt.conf.d/*; do
    [ -f "$p" ] && grep -q '^Acquire::Check-' "$p" && opts+=(--aptopt="$p")
  done
  log "base $BASE_KEY: Debian $SUITE rootfs (${DEBIAN_PACKAGES[*]}) and $(grep -c '==' "$LOCK_FILE") pinned Python packages"
  umoci init --layout "$tmp/oci"
  umoci new --image "$tmp/oci:base"
  umoci unpack --image "$tmp/oci:base" "$tmp/bundle" >/dev/null
  rmdir "$tmp/bundle/rootfs"
  KELP_IMAGE_LOCK="$LOCK_FILE" KELP_IMAGE_CA="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" \
    mmdebstrap --variant=minbase --mode=root \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      --include="$(IFS=,; echo "${DEBIAN_PACKAGES[*]}")" "${opts[@]}" \
      --customize-hook="$HERE/customize-rootfs.sh" \
      "$SUITE" "$tmp/bundle/rootfs" "${sources[@]}" >"$tmp/mmdebstrap.log" 2>&1 \
    || { grep -v '^(Reading database' "$tmp/mmdebstrap.log" | tail -n 40 >&2
         die "mmdebstrap failed building the $SUITE root filesystem (log above; whole log: $tmp/mmdebstrap.log)"; }
  chmod 0755 "$tmp/bundle/rootfs"
  # Device nodes mmdebstrap made for the chroot: the container runtime provides /dev.
  find "$tmp/bundle/rootfs/dev" -mindepth 1 -delete
  # --refresh-bundle: the unpacked bundle stays cached as the starting point of every
  # kelp layer (copying it takes a second; `umoci unpack` of the base takes ~20 s here).
  umoci repack --image "$tmp/oci:base" --refresh-bundle \
    --history.created_by "images/build-image.sh: mmdebstrap $SUITE minbase ${DEBIAN_PACKAGES[*]}; venv /opt/kelp from images/requirements.txt" \
    "$tmp/bundle"
  umoci gc --layout "$tmp/oci"
  rm -f "$tmp/mmdebstrap.log"
  log "base $BASE_KEY: wheel build backend $BUILD_BACKEND"
  "$HOST_PY" -m venv "$tmp/buildenv"
  "$tmp/buildenv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir "$BUILD_BACKEND" >&2
  mv "$tmp" "$BASE"
  for p in "$CACHE"/base-*; do
    [ "$p" = "$BASE" ] || rm -rf "$p"
  done
  log "base $BASE_KEY built in $((SECONDS - started))s"
}

build_kelp_layer() {
  local started=$SECONDS wheel pip_whl work
  work="$(mktemp -d "$CACHE/work.XXXXXX")"
  WORK_DIR="$work"
  MOUNTED=
  trap '[ -z "$MOUNTED" ] || umount "$MOUNTED"; rm -rf "$WORK_DIR" "$STAGE"' EXIT
  # Build from a copy: an in-tree build would leave build/ and *.egg-info in the checkout.
  mkdir "$work/src" "$work/wheel"
  cp -a "$STAGE/." "$work/src/"
  "$BASE/buildenv/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-cache-dir \
    --no-deps --no-build-isolation --no-index -w "$work/wheel" "$work/src" >&2 \
    || die "building Kelp's wheel from $REPO failed (see above)"
  wheel="$(cd "$work/wheel" && ls kelp-*.whl)"
  # A layout that shares the base's blobs (hard links: blobs are never rewritten).
  mkdir "$work/oci"
  cp "$BASE/oci/oci-layout" "$BASE/oci/index.json" "$work/oci/"
  cp -al "$BASE/oci/blobs" "$work/oci/blobs"
  # The cached base rootfs, seen through an overlay: pip's writes land in upper/, the base
  # stays untouched, and nothing is copied (a `cp -a` of the 300 MB tree takes ~12 s here).
  mkdir -p "$work/bundle/rootfs" "$work/upper" "$work/overlay-work"
  find "$BASE/bundle" -maxdepth 1 -type f -exec cp -a {} "$work/bundle/" \;
  local rootfs="$work/bundle/rootfs"
  if mount -t overlay overlay -o "lowerdir=$BASE/bundle/rootfs,upperdir=$work/upper,workdir=$work/overlay-work" \
       "$rootfs" 2>/dev/null; then
    MOUNTED="$rootfs"
  else
    log "overlay mount failed; copying the base rootfs instead"
    rmdir "$rootfs"
    cp -a "$BASE/bundle/rootfs" "$rootfs"
  fi
  install -d "$rootfs/tmp/kelp-wheel"
  install -m 0644 "$work/wheel/$wheel" "$rootfs/tmp/kelp-wheel/"
  pip_whl="$(cd "$rootfs" && echo usr/share/python-wheels/pip-*.whl)"
  chroot "$rootfs" env -i PATH=/usr/bin:/bin LANG=C.UTF-8 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    /opt/kelp/bin/python "/$pip_whl/pip" install --quiet --no-deps --no-index "/tmp/kelp-wheel/$wheel" >&2 \
    || die "installing $wheel into /opt/kelp failed (see above)"
  rm -rf "$rootfs/tmp/kelp-wheel" "$rootfs/root/.cache"
  umoci repack --image "$work/oci:kelp" --history.created_by "images/build-image.sh: pip install --no-deps $wheel" \
    "$work/bundle"
  if [ -n "$MOUNTED" ]; then umount "$MOUNTED"; MOUNTED=; fi
  local cfg=(--config.user "$IMAGE_USER" --config.workingdir "$IMAGE_WORKDIR"
    --clear=config.entrypoint --clear=config.cmd --clear=config.env --clear=config.exposedports
    --config.label "org.opencontainers.image.title=kelp"
    --config.label "org.opencontainers.image.version=$VERSION"
    --history.created_by "images/build-image.sh: the Dockerfile's ENTRYPOINT, CMD, USER, WORKDIR, ENV, EXPOSE")
  local x
  for x in "${IMAGE_ENTRYPOINT[@]}"; do cfg+=(--config.entrypoint "$x"); done
  for x in "${IMAGE_CMD[@]}"; do cfg+=(--config.cmd "$x"); done
  for x in "${IMAGE_ENV[@]}"; do cfg+=(--config.env "$x"); done
  for x in "${IMAGE_PORTS[@]}"; do cfg+=(--config.exposedports "$x"); done
  umoci config --image "$work/oci:kelp" "${cfg[@]}"
  umoci rm --image "$work/oci:base"
  umoci gc --layout "$work/oci"
  "$HOST_PY" "$TOOL" name --layout "$work/oci" --ref "$REF"
  tar -C "$work/oci" -cf "$ARCHIVE.tmp" oci-layout index.json blobs
  mv "$ARCHIVE.tmp" "$ARCHIVE"
  echo "$BASE_KEY $SOURCES_HASH $REF" >"$STAMP"
  log "kelp layer ($wheel) and archive in $((SECONDS - started))s: $ARCHIVE ($(du -m "$ARCHIVE" | cut -f1) MB) as $REF"
}

[ -f "$BASE/oci/index.json" ] && [ -d "$BASE/bundle/rootfs" ] && [ -x "$BASE/buildenv/bin/python" ] || build_base
build_kelp_layer
echo "$ARCHIVE"
