# Sourced by the device scripts (gpu_suite.sh, parallel.sh, issue11_12.sh) from the repo root: the SGLang
# bundle (`.device/env.sh`, when carried) and the plugin's real entry point visible to every SGLang process,
# through a dist-info on PYTHONPATH (what `pip install` of the wheel would write), with the checkout's
# python/ importable.
# DDTREE_DEVICE_RELEASE=0.5.17 (carry ".device-0.5.17", made by scripts/device/build_release_bundle.sh): that
# release's bundle instead of .device's 0.5.16; a warm machine's unpacked tree of another release is replaced.
_ddt_rel=${DDTREE_DEVICE_RELEASE:-0.5.16}
if [ "$_ddt_rel" != 0.5.16 ]; then
  if [ -f ".device-$_ddt_rel/site.tar.xz" ]; then
    rm -rf .device && cp -a ".device-$_ddt_rel" .device
  elif [ "$(cat .device/RELEASE_VERSION 2>/dev/null)" != "$_ddt_rel" ]; then
    echo "plugin_env: DDTREE_DEVICE_RELEASE=$_ddt_rel needs carry .device-$_ddt_rel (build_release_bundle.sh $_ddt_rel)" >&2
  fi
  echo "$_ddt_rel" > .device/RELEASE_VERSION
elif [ -f .device/RELEASE_VERSION ]; then
  echo "plugin_env: .device holds sglang $(cat .device/RELEASE_VERSION)'s bundle; carry .device for 0.5.16" >&2
fi
if [ -f /tmp/site/.installed ] && [ "$(cat /tmp/site/.release 2>/dev/null || echo 0.5.16)" != "$_ddt_rel" ]; then
  rm -rf /tmp/site  # the shared env.sh unpacks .device/site.tar.xz again
fi
if [ -f .device/env.sh ]; then
  # shellcheck disable=SC1091
  source .device/env.sh
  [ -d /tmp/site ] && echo "$_ddt_rel" > /tmp/site/.release
fi
_ddt_ep=/tmp/ddt_ep/sglang_ddtree-0.1.0.dist-info
mkdir -p "$_ddt_ep"
printf 'Metadata-Version: 2.1\nName: sglang_ddtree\nVersion: 0.1.0\n' > "$_ddt_ep/METADATA"
printf '[sglang.srt.plugins]\nddtree = sglang_ddtree.plugin:register\n' > "$_ddt_ep/entry_points.txt"
export PYTHONPATH=/tmp/ddt_ep:$PWD/python:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
