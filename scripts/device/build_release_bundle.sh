#!/usr/bin/env bash
# The device bundle (../shared/device/build_bundle.sh, SGLang 0.5.16) for another supported release that runs on the
# lent H200's torch 2.11.0: the same slimmed site-packages tree with that release's sglang / sglang-kernel /
# flashinfer pins (read from python/sglang_ddtree/version.py SUPPORT_MATRIX), written to .device-VERSION/.
#
#     bash scripts/device/build_release_bundle.sh 0.5.17      # CPU, ~4 min -> .device-0.5.17/site.tar.xz
#
# On the device (carry [".device-0.5.17"], + ".fa3/sha.txt" when the fa3 parts are staged: sgl-kernel is 0.4.5 as on
# 0.5.16, so the same parts assemble): run the device scripts with DDTREE_DEVICE_RELEASE=0.5.17, whose
# scripts/device/plugin_env.sh swaps the bundle in (a warm machine may hold another release's tree in /tmp/site)
# and then runs env.sh (e.g. `DDTREE_DEVICE_RELEASE=0.5.17 bash scripts/device/release_gpu.sh parity`).
# Releases pinned to another torch than 2.11.0 are refused: the H200 image cannot run them.
set -euo pipefail
VERSION=${1:?usage: build_release_bundle.sh VERSION}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SHARED:-$REPO/../shared/device}
read -r TORCH KERNEL FLASHINFER <<< "$(cd "$REPO" && PYTHONPATH=python python3 -c "
import sys
from sglang_ddtree.version import SUPPORT_MATRIX as m
r = m.get(sys.argv[1])
if r is None:
    sys.exit('build_release_bundle: %s is not in SUPPORT_MATRIX (supported: %s)' % (sys.argv[1], ', '.join(m)))
print(r.torch, r.sglang_kernel, r.flashinfer)" "$VERSION")"
if [ "$TORCH" != "2.11.0" ]; then
  echo "build_release_bundle: sglang $VERSION pins torch $TORCH; the H200 image has torch 2.11.0 only" >&2
  exit 2
fi
WORK=${WORK:-/tmp/sglang_bundle_$VERSION}
mkdir -p "$WORK"
# the shared script with this release's pins (its package list is otherwise the one 0.5.16 needs); from 0.5.17 the
# embedded Rust server's 13 MB library (sglang/srt/server/_core, imported only under SGLANG_RUST_SERVER) is left out
# as 0.5.16's grpc core is, so that the bundle and the checkout fit one call's 64 MiB
sed -e "s/^  sglang==0.5.16$/  sglang==$VERSION/" \
    -e "s/^  sglang-kernel==[^ ]*$/  sglang-kernel==$KERNEL/" \
    -e "s/^  flashinfer-python==[^ ]*$/  flashinfer-python==$FLASHINFER/" \
    -e "s#'sglang/srt/grpc/_core\*.so'#'sglang/srt/grpc/_core*.so' 'sglang/srt/server/_core*.so'#" \
    "$SHARED/build_bundle.sh" > "$WORK/build_bundle.sh"
grep -q "^  sglang==$VERSION$" "$WORK/build_bundle.sh" || { echo "build_release_bundle: pin not replaced" >&2; exit 3; }
mkdir -p "$REPO/.device-$VERSION"
cp "$SHARED/env.sh" "$SHARED/save_jitcache.sh" "$WORK/"
grep -qx "/.device-$VERSION/" "$REPO/.git/info/exclude" 2>/dev/null || echo "/.device-$VERSION/" >> "$REPO/.git/info/exclude"
# the shared script copies env.sh from its own directory: run it from the work dir beside a copy of env.sh
(cd "$REPO" && WORK=$WORK OUTDIR="$REPO/.device-$VERSION" REBUILD=${REBUILD:-} bash "$WORK/build_bundle.sh")
echo "sglang==$VERSION sglang-kernel==$KERNEL flashinfer-python==$FLASHINFER" > "$REPO/.device-$VERSION/RELEASE"
ls -la "$REPO/.device-$VERSION"
