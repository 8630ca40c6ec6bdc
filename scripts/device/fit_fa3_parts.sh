#!/usr/bin/env bash
# Re-split the local fa3 parts (.fa3/part_NN, ../shared/device/fa3_parts.sh) so that each one, carried with the
# checkout, fits one device call (64 MiB: tracked files, untracked files git does not ignore, and the carry).
# Session 25: the checkout had grown to 20.1 MB, so fa3_parts.sh's 45 MiB parts no longer fitted and the calls
# were refused. The bytes and their order are kept (part_00 first, as .device/env.sh assembles them; sha.txt is
# of the assembled library, unchanged); run it here, before the staging calls, whenever the checkout grows:
#     bash scripts/device/fit_fa3_parts.sh          # -> .fa3/part_00 .. part_NN, each <= the room left
set -eu
cd "$(dirname "$0")/../.."
limit=${DDTREE_CARRY_LIMIT_BYTES:-67108864}   # the device tool's 64 MiB
margin=${DDTREE_CARRY_MARGIN_BYTES:-1048576}  # 1 MiB for files written between now and the call
shopt -s nullglob
parts=(.fa3/part_*)
[ ${#parts[@]} -ge 1 ] || { echo "fit_fa3_parts.sh: no .fa3/part_* here (make them: bash ../shared/device/fa3_parts.sh)" >&2; exit 2; }
checkout=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s -- 2>/dev/null \
  | awk '{s += $1} END {print s + 0}')
room=$((limit - checkout - margin))
[ "$room" -gt 0 ] || { echo "fit_fa3_parts.sh: the checkout alone ($checkout bytes) leaves no room under $limit" >&2; exit 2; }
total=$(cat "${parts[@]}" | wc -c)
n=$(( (total + room - 1) / room ))
size=$(( (total + n - 1) / n ))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat "${parts[@]}" > "$tmp/all"
before=$(sha256sum < "$tmp/all" | cut -c1-16)
rm -f "${parts[@]}"
split -b "$size" -d "$tmp/all" .fa3/part_
after=$(cat .fa3/part_* | sha256sum | cut -c1-16)
[ "$before" = "$after" ] || { echo "fit_fa3_parts.sh: the parts changed ($before != $after)" >&2; exit 1; }
echo "fit_fa3_parts.sh: checkout $checkout bytes, room $room: $n parts of <= $size bytes (same bytes, $after)"
ls -la .fa3/part_*
