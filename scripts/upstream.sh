#!/usr/bin/env bash
# The pinned upstream releases of conformance/upstream.lock (docs/upstream.md).
#   scripts/upstream.sh --fetch   download each release into .deps/upstream/dist/, check its
#                                 sha256, unpack the lock's paths into .deps/upstream/src/
#   scripts/upstream.sh --check   exit 0 when .deps/upstream/src/ holds every release of the
#                                 lock as unpacked from the pinned file, else 1
# The GPU host has no network: fetch here, carry .deps/upstream/src (a few tens of MB).
set -euo pipefail
cd "$(dirname "$0")/.."
lock=conformance/upstream.lock
root=${DSAF_UPSTREAM_ROOT:-.deps/upstream}
dist=$root/dist src=$root/src

releases() { grep -v '^#' "$lock" | awk 'NF == 6'; }

unpacked() {  # name version sha256 extract: the stamp --fetch leaves (a changed extract
  # list unpacks again)
  [ -f "$src/$1/.release" ] && [ "$(cat "$src/$1/.release")" = "$1 $2 $3 $4" ]
}

unpack() {  # archive destination prefixes
  python3 - "$@" <<'PY'
import os, sys, tarfile, zipfile
archive, dest, prefixes = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
def wanted(name):
    return any(name.startswith(p) for p in prefixes) and ".." not in name.split("/")
n = 0
if archive.endswith(".tar.gz"):
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and wanted(m.name)]
        for m in members:  # regular files only, no '..': nothing lands outside dest
            if hasattr(tarfile, "data_filter"):
                tar.extract(m, dest, filter="data")
            else:
                tar.extract(m, dest)
        n = len(members)
else:
    with zipfile.ZipFile(archive) as z:
        names = [i for i in z.namelist() if not i.endswith("/") and wanted(i)]
        for i in names:
            z.extract(i, dest)
        n = len(names)
if n == 0:
    sys.exit(f"upstream.sh: nothing under {prefixes} in {archive}")
print(f"  {n} files")
PY
}

case "${1:-}" in
  --fetch)
    mkdir -p "$dist" "$src"
    releases | while read -r name version file sha url extract; do
      if unpacked "$name" "$version" "$sha" "$extract"; then echo "$name $version: unpacked"; continue; fi
      if ! echo "$sha  $dist/$file" | sha256sum --check --status 2>/dev/null; then
        echo "$name $version: downloading $file"
        curl -fsSL --retry 3 -o "$dist/$file.part" "$url"
        mv "$dist/$file.part" "$dist/$file"
      fi
      if ! echo "$sha  $dist/$file" | sha256sum --check --status; then
        echo "upstream.sh: $file does not have the sha256 of $lock ($sha)" >&2
        exit 1
      fi
      rm -rf "${src:?}/$name"
      mkdir -p "$src/$name"
      echo "$name $version: unpacking $extract"
      unpack "$dist/$file" "$src/$name" "$extract"
      echo "$name $version $sha $extract" > "$src/$name/.release"
    done
    ;;
  --check)
    releases | while read -r name version file sha url extract; do
      unpacked "$name" "$version" "$sha" "$extract" || { echo "upstream.sh: $name $version not unpacked in $src" >&2; exit 1; }
    done
    ;;
  *)
    sed -n '2,7p' "$0" >&2
    exit 2
    ;;
esac
