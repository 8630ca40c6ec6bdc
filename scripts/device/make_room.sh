#!/usr/bin/env bash
# Make room for the device call that carries the SGLang bundle: the checkout (tracked files and untracked files git
# does not ignore) plus the carried paths must fit 64 MiB, and the checkout grows with every session's results
# (session 33: ~21.5 MB + .device ~45 MB was refused). `out` moves the largest tracked files under benchmark/results/
# out of the tree until they fit; `back` puts them back:
#     bash scripts/device/make_room.sh out      # before the call carrying [".device"] (CARRY=".device" by default)
#     bash scripts/device/make_room.sh back     # after it, before any commit (meanwhile git shows them deleted)
# Env: DDTREE_ASIDE_DIR (default /tmp/ddtree_aside: where they wait, with the list moved.txt), CARRY (paths carried,
# space-separated), DDTREE_CARRY_LIMIT_BYTES / DDTREE_CARRY_MARGIN_BYTES (as fit_fa3_parts.sh).
set -eu
cd "$(dirname "$0")/../.."
aside=${DDTREE_ASIDE_DIR:-/tmp/ddtree_aside}
limit=${DDTREE_CARRY_LIMIT_BYTES:-67108864}   # the device tool's 64 MiB
margin=${DDTREE_CARRY_MARGIN_BYTES:-1048576}  # 1 MiB for files written between now and the call
list="$aside/moved.txt"
case "${1:-}" in
  out)
    [ ! -e "$list" ] || { echo "make_room.sh: $list exists: files are still aside (bash $0 back first)" >&2; exit 2; }
    checkout=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s -- 2>/dev/null \
      | awk '{s += $1} END {print s + 0}')
    # shellcheck disable=SC2086
    carry=$(find ${CARRY:-.device} -type f -print0 2>/dev/null | xargs -0 -r stat -c %s -- | awk '{s += $1} END {print s + 0}')
    need=$((checkout + carry + margin - limit))
    if [ "$need" -le 0 ]; then
      echo "make_room.sh: checkout $checkout + carry $carry bytes fit under $limit (margin $margin): nothing moved"
      exit 0
    fi
    mkdir -p "$aside"
    freed=0
    : > "$list.tmp"
    # the largest tracked result files first
    while IFS=$'\t' read -r size path; do
      [ "$freed" -lt "$need" ] || break
      mkdir -p "$aside/$(dirname "$path")"
      mv -- "$path" "$aside/$path"
      printf '%s\n' "$path" >> "$list.tmp"
      freed=$((freed + size))
    done < <(git ls-files -z -- benchmark/results | xargs -0 -r stat -c $'%s\t%n' -- | sort -t $'\t' -k1,1nr)
    mv "$list.tmp" "$list"
    if [ "$freed" -lt "$need" ]; then
      echo "make_room.sh: moved every result file ($freed bytes) and still $((need - freed)) bytes over; bash $0 back" >&2
      exit 1
    fi
    echo "make_room.sh: checkout $checkout + carry $carry bytes were $need over $limit - $margin; moved $(wc -l < "$list") files ($freed bytes) to $aside (bash $0 back afterwards)"
    ;;
  back)
    [ -f "$list" ] || { echo "make_room.sh: nothing aside ($list missing)" >&2; exit 2; }
    while IFS= read -r path; do
      [ ! -e "$path" ] || { echo "make_room.sh: $path exists in the tree again; left $aside/$path where it is" >&2; exit 1; }
      mv -- "$aside/$path" "$path"
    done < "$list"
    echo "make_room.sh: $(wc -l < "$list") files back in the tree"
    rm -f "$list"
    ;;
  *)
    echo "usage: bash scripts/device/make_room.sh out|back" >&2
    exit 2
    ;;
esac
