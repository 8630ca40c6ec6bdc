#!/usr/bin/env bash
# Stage a large git-ignored file on the warm GPU machine in a call of its own, so that later calls need not carry
# it (a call carries 64 MiB: the checkout, ~18 MB, plus a bundle, ~45-47 MB, leaves no room for more):
#     bash scripts/device/stage.sh .fa3/part_00      # device: carry [".fa3/part_00"]; likewise part_01, part_02
#                                                    # (`source .device/env.sh` assembles fa3 from /tmp/fa3p)
#     bash scripts/device/stage.sh .jit/jitcache.tar.xz   # device: carry [".jit/jitcache.tar.xz"]: the JIT cache
#                                                    # (`bash .device/save_jitcache.sh` wrote it; keep it out of
#                                                    # .device), unpacked where env.sh looks, marked restored
#     bash scripts/device/stage.sh .fa3/part_02 .jit/jitcache.tar.xz   # several files in one call, while the checkout
#                                                    # plus everything carried stays within 64 MiB (part_02, 39 MB,
#                                                    # and the cache, ~4.5 MB, fit together: one call fewer)
# Make the calls back to back: the machine is given back after 30 s idle and what was staged is lost.
# The SGLang bundle likewise: one call carrying [".device"] that sources .device/env.sh unpacks it into /tmp/site
# (marked installed); later calls on the same warm machine need carry only [".device/env.sh"] (+ ".fa3/sha.txt"),
# which leaves the checkout the whole 64 MiB (session 29: checkout ~22 MB + .device ~45 MB was over the limit;
# `bash scripts/device/make_room.sh out` before that first call moves the largest result files aside, `... back` after).
# A call refused as larger than 64 MiB: the checkout grew; `bash scripts/device/fit_fa3_parts.sh` re-splits the parts
# to fit beside it (here, before the calls).
set -eu
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: bash scripts/device/stage.sh FILE... (.fa3/part_NN, .jit/jitcache.tar.xz)" >&2; exit 2; }
root=${DDTREE_STAGE_ROOT:-/tmp}  # where .device/env.sh looks (/tmp/fa3p, /tmp/jitcache); tests point it elsewhere
for f in "$@"; do  # every file checked before anything is staged
  [ -f "$f" ] || { echo "stage.sh: $f was not carried (name it in the device call's carry)" >&2; exit 2; }
  case "$f" in
    .fa3/part_*|*jitcache.tar.xz) ;;
    *) echo "stage.sh: $f is neither an fa3 part nor a JIT cache" >&2; exit 2 ;;
  esac
done
for f in "$@"; do
  case "$f" in
    .fa3/part_*) mkdir -p "$root/fa3p" && cp "$f" "$root/fa3p/" && ls -la "$root/fa3p" ;;
    *jitcache.tar.xz) mkdir -p "$root/jitcache" && tar -xJf "$f" -C "$root/jitcache" \
      && touch "$root/jitcache/.restored" && du -sh "$root/jitcache" ;;
  esac
done
