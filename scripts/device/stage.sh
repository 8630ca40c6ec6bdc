#!/usr/bin/env bash
# Stage a large git-ignored file on the warm GPU machine in a call of its own, so that later calls need not carry
# it (a call carries 64 MiB: the checkout, ~18 MB, plus a bundle, ~45-47 MB, leaves no room for more):
#     bash scripts/device/stage.sh .fa3/part_00      # device: carry [".fa3/part_00"]; likewise part_01, part_02
#                                                    # (`source .device/env.sh` assembles fa3 from /tmp/fa3p)
#     bash scripts/device/stage.sh .jit/jitcache.tar.xz   # device: carry [".jit/jitcache.tar.xz"]: the JIT cache
#                                                    # (`bash .device/save_jitcache.sh` wrote it; keep it out of
#                                                    # .device), unpacked where env.sh looks, marked restored
# Make the calls back to back: the machine is given back after 30 s idle and what was staged is lost.
set -eu
cd "$(dirname "$0")/../.."
f=${1:?usage: bash scripts/device/stage.sh .fa3/part_NN | .jit/jitcache.tar.xz}
root=${DDTREE_STAGE_ROOT:-/tmp}  # where .device/env.sh looks (/tmp/fa3p, /tmp/jitcache); tests point it elsewhere
[ -f "$f" ] || { echo "stage.sh: $f was not carried (name it in the device call's carry)" >&2; exit 2; }
case "$f" in
  .fa3/part_*) mkdir -p "$root/fa3p" && cp "$f" "$root/fa3p/" && ls -la "$root/fa3p" ;;
  *jitcache.tar.xz) mkdir -p "$root/jitcache" && tar -xJf "$f" -C "$root/jitcache" && touch "$root/jitcache/.restored" \
    && du -sh "$root/jitcache" ;;
  *) echo "stage.sh: $f is neither an fa3 part nor a JIT cache" >&2; exit 2 ;;
esac
